//! `btl serve` as a child process the hostile tests watch: where it
//! listens, the lines it writes, its open file descriptors and resident
//! memory, legit `btl connect` runs against it, and its end on SIGTERM.
//! Every child process is killed when its guard is dropped, so a failing
//! assertion leaves none behind.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long `btl serve` may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one legit run may take before it counts as failed (a healthy
/// one takes a fraction of a second; the benchmark's own stall limit is
/// 30 s, which would make a stuck server cost too much).
const RUN_TIMEOUT: Duration = Duration::from_secs(20);
/// Milliseconds the server waits for a silent peer (one that stopped
/// reading, or went away without a word) before it counts it as lost; the
/// default is 30 s, far longer than a test. Also its handshake limit: an
/// idle connection is given up within the test too.
const PEER_TIMEOUT_MS: &str = "2000";
/// Milliseconds a legit client waits for a silent server: a server that
/// died or stalls fails the run in seconds rather than after the default
/// 30 s, and a healthy one answers in microseconds.
const CLIENT_PEER_TIMEOUT_MS: &str = "5000";
/// Lines of the server's stderr quoted when it died.
const TAIL_LINES: usize = 12;

/// The BTL a server and its clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Btl {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Btl {
    fn name(self) -> &'static str {
        match self {
            Btl::Tcp => "tcp",
            Btl::Udp => "udp",
        }
    }

    /// The environment variable of one of this component's parameters.
    fn var(self, param: &str) -> String {
        format!(
            "BTL_{}_{}",
            self.name().to_uppercase(),
            param.to_uppercase()
        )
    }
}

/// The logical CPUs the tests pin processes to, when the machine has two
/// and `taskset` is there: the legit client alone on one (it busy-polls,
/// so it measures the server's answers, not its own scheduling), the
/// server and the attackers on the other (the attackers then compete with
/// the server they attack, not with the client that measures it).
#[derive(Debug, Clone, Copy)]
pub struct Cpus {
    /// The server's and the attackers' CPU.
    pub server: usize,
    /// The legit client's CPU.
    pub client: usize,
}

impl Cpus {
    /// CPUs 0 and 1 if pinning to each works here, else `None` (then
    /// nothing is pinned and the scheduler decides).
    pub fn detect() -> Option<Self> {
        let pinnable = |cpu: &str| {
            Command::new("taskset")
                .args(["-c", cpu, "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        (pinnable("0") && pinnable("1")).then_some(Cpus {
            server: 0,
            client: 1,
        })
    }

    /// Pins every thread of this (test) process to the server's CPU: its
    /// attack threads, and the threads it starts later.
    pub fn pin_this_process(&self) {
        let _ = Command::new("taskset")
            .args(["-a", "-p", "-c", &self.server.to_string()])
            .arg(std::process::id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The `btl` command with a clean environment: no `BTL_*` variable of
/// the caller's (parameters, job key, log filter) and no config file, so
/// that only what a test sets applies. Run on `cpu` if given.
pub fn btl_command(cpu: Option<usize>, args: &[&str]) -> Command {
    let exe = env!("CARGO_BIN_EXE_btl");
    let mut cmd = match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string(), exe]);
            c
        }
        None => Command::new(exe),
    };
    cmd.args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BTL") {
            cmd.env_remove(name);
        }
    }
    cmd.env(
        "XDG_CONFIG_HOME",
        std::env::temp_dir().join("btl-hostile-test-no-config"),
    );
    cmd
}

/// Lines a child process writes on one stream, collected by a thread as
/// they come.
#[derive(Debug, Clone, Default)]
pub struct Lines(Arc<Mutex<(Vec<String>, bool)>>);

impl Lines {
    /// Collects `stream`'s lines until its end.
    fn collect(stream: impl Read + Send + 'static) -> Self {
        let lines = Lines::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            // Read to the end whatever comes (lossily, should it not be
            // UTF-8): a reader that stopped early would let the pipe fill
            // and block the child.
            let mut reader = BufReader::new(stream);
            let mut line = Vec::new();
            while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                let text = String::from_utf8_lossy(&line);
                sink.lock()
                    .0
                    .push(text.trim_end_matches(['\n', '\r']).to_owned());
                line.clear();
            }
            sink.lock().1 = true;
        });
        lines
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<String>, bool)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lines so far.
    pub fn len(&self) -> usize {
        self.lock().0.len()
    }

    /// The lines from the `from`th on.
    pub fn since(&self, from: usize) -> Vec<String> {
        self.lock()
            .0
            .get(from..)
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }

    /// The last `n` lines, joined.
    pub fn tail(&self, n: usize) -> String {
        let g = self.lock();
        g.0[g.0.len().saturating_sub(n)..].join("\n")
    }

    /// Waits until the stream ends (or `timeout`); whether it did.
    pub fn wait_end(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.lock().1 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.lock().1
    }

    /// The first line `pick` maps to something, waiting up to `timeout`.
    pub fn find<T>(&self, timeout: Duration, pick: impl Fn(&str) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            let (found, ended) = {
                let g = self.lock();
                (g.0.iter().find_map(|l| pick(l)), g.1)
            };
            if found.is_some() || ended || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A child process killed when dropped.
#[derive(Debug)]
pub struct Reaper(pub Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a process holds that a leak would grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Open file descriptors (`/proc/PID/fd`).
    pub fds: usize,
    /// Resident memory in KiB (`VmRSS` of `/proc/PID/status`).
    pub rss_kib: u64,
}

impl std::fmt::Display for Footprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} fds, {} KiB resident", self.fds, self.rss_kib)
    }
}

/// The line `btl serve` prints on stdout as it ends on SIGTERM:
/// `served: {"runs":1000,"peers":0,"links":0,"registrations":1,"refused":{...}}`.
#[derive(Debug, Clone)]
pub struct Served(pub serde_json::Value);

impl Served {
    /// A counter of the line, if it has it as a number.
    pub fn count(&self, key: &str) -> Option<u64> {
        self.0.get(key).and_then(serde_json::Value::as_u64)
    }
}

/// One legit run's result.
#[derive(Debug, Clone)]
pub struct LegitRun {
    /// The median of the rows' medians: one number for the run that a
    /// slow first size (warm-up) or one disturbed size does not move.
    pub typical_us: f64,
    /// How long the run took, process start to exit.
    pub took: Duration,
}

/// What a legit client runs: pingpong of sizes `min..=max` (doubling),
/// `iters` timed iterations each.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Smallest size.
    pub min: &'static str,
    /// Largest size.
    pub max: &'static str,
    /// Timed iterations per size.
    pub iters: u32,
}

/// `btl serve` on loopback, watched.
#[derive(Debug)]
pub struct Server {
    child: Reaper,
    /// Which BTL it serves.
    pub btl: Btl,
    /// Its IPv4 loopback address, as it printed it.
    pub addr: SocketAddr,
    /// Its stdout lines.
    pub stdout: Lines,
    /// Its stderr lines (its log; warnings and above by default).
    pub stderr: Lines,
    /// The job key it printed, which its legit clients are given; `None`
    /// for a server started with `--no-key`.
    pub key: Option<String>,
    cpus: Option<Cpus>,
}

impl Server {
    /// Starts `btl serve --btl <btl> --no-key` on `lo` with a short peer
    /// timeout and waits for its address: most attacks play strangers
    /// without a key.
    pub fn start(btl: Btl, cpus: Option<Cpus>) -> Self {
        Self::launch(btl, cpus, false)
    }

    /// As [`start`](Self::start), with the job key `btl serve` makes and
    /// prints by default, which the legit clients are then given.
    pub fn start_keyed(btl: Btl, cpus: Option<Cpus>) -> Self {
        Self::launch(btl, cpus, true)
    }

    fn launch(btl: Btl, cpus: Option<Cpus>, keyed: bool) -> Self {
        let mut args = vec!["serve", "--btl", btl.name()];
        if !keyed {
            args.push("--no-key");
        }
        let mut cmd = btl_command(cpus.map(|c| c.server), &args);
        cmd.env(btl.var("if_include"), "lo")
            .env(btl.var("peer_timeout"), PEER_TIMEOUT_MS)
            .env(btl.var("handshake_timeout"), PEER_TIMEOUT_MS)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = Reaper(cmd.spawn().expect("btl serve starts"));
        let stdout = Lines::collect(child.0.stdout.take().expect("piped stdout"));
        let stderr = Lines::collect(child.0.stderr.take().expect("piped stderr"));
        // `listening on tcp 127.0.0.1:40123: BTL_JOB_KEY=... btl connect ...`
        let prefix = format!("listening on {} ", btl.name());
        let found = stdout.find(START_TIMEOUT, |line| {
            let rest = line.strip_prefix(&prefix)?;
            let at: SocketAddr = rest.split(": ").next()?.parse().ok()?;
            let key = rest
                .split_whitespace()
                .find_map(|w| w.strip_prefix("BTL_JOB_KEY="))
                .map(str::to_owned);
            at.ip()
                .is_loopback()
                .then_some((at, key))
                .filter(|(at, _)| at.is_ipv4())
        });
        let (addr, key) = found.unwrap_or_else(|| {
            panic!(
                "btl serve printed no IPv4 loopback address; stdout:\n{}\nstderr:\n{}",
                stdout.tail(10),
                stderr.tail(10)
            )
        });
        assert_eq!(
            key.is_some(),
            keyed,
            "btl serve printed a job key exactly when it was not told --no-key"
        );
        Server {
            child,
            btl,
            addr,
            stdout,
            stderr,
            key,
            cpus,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// `Ok` while the server runs; else its exit status and the end of
    /// its log.
    pub fn alive(&mut self) -> Result<(), String> {
        match self.child.0.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                // Let the reader threads take the last lines.
                self.stderr.wait_end(Duration::from_secs(1));
                Err(format!(
                    "btl serve exited ({status}); its stderr ends with:\n{}",
                    self.stderr.tail(TAIL_LINES)
                ))
            }
            Err(e) => Err(format!("btl serve: waiting for it failed: {e}")),
        }
    }

    /// The server's open file descriptors and resident memory now.
    pub fn footprint(&self) -> Result<Footprint, String> {
        let pid = self.pid();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
            .count();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))?;
        Ok(Footprint { fds, rss_kib })
    }

    /// Waits up to `timeout` for the server to be back within `margin_kib`
    /// of `baseline` with exactly its descriptors; the footprint it has
    /// then (whether back or not).
    pub fn settle(
        &self,
        baseline: Footprint,
        margin_kib: u64,
        timeout: Duration,
    ) -> Result<Footprint, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.footprint()?;
            let back = now.fds == baseline.fds && now.rss_kib <= baseline.rss_kib + margin_kib;
            if back || Instant::now() > deadline {
                return Ok(now);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `btl connect` against the server: pingpong as `plan` says,
    /// JSON rows.
    pub fn legit_run(&self, plan: Plan) -> Result<LegitRun, String> {
        let addr = self.addr.to_string();
        let iters = plan.iters.to_string();
        let args = [
            "connect",
            &addr,
            "--btl",
            self.btl.name(),
            "--test",
            "pingpong",
            "--min-size",
            plan.min,
            "--max-size",
            plan.max,
            "--iters",
            &iters,
            "--wait",
            "poll",
            "--json",
        ];
        let mut cmd = btl_command(self.cpus.map(|c| c.client), &args);
        cmd.env(self.btl.var("if_include"), "lo")
            .env(self.btl.var("peer_timeout"), CLIENT_PEER_TIMEOUT_MS);
        if let Some(key) = &self.key {
            cmd.env("BTL_JOB_KEY", key);
        }
        let start = Instant::now();
        let (status, stdout, stderr) = run_bounded(cmd, RUN_TIMEOUT)?;
        let took = start.elapsed();
        if !status.success() {
            return Err(format!(
                "btl connect failed ({status}) after {took:.1?}: {}",
                stderr.trim()
            ));
        }
        let doc: serde_json::Value = serde_json::from_str(stdout.trim())
            .map_err(|e| format!("btl connect printed no JSON ({e}): {stdout}"))?;
        let medians: Vec<(u64, f64)> = doc["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| Some((r["size"].as_u64()?, r["median_us"].as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        if medians.is_empty() {
            return Err(format!("btl connect printed no rows: {stdout}"));
        }
        let typical_us = median(medians.iter().map(|&(_, m)| m).collect());
        Ok(LegitRun { typical_us, took })
    }

    /// Sends the server SIGTERM (with the `kill` command: this crate
    /// forbids the unsafe a direct call would need) and waits up to
    /// `timeout` for it to exit; its exit status and its `served:` line.
    pub fn terminate(&mut self, timeout: Duration) -> Result<Served, String> {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map_err(|e| format!("running kill: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {pid} failed: {sent}"));
        }
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.0.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    return Err(format!(
                        "btl serve did not exit within {timeout:?} of SIGTERM"
                    ));
                }
                Err(e) => return Err(format!("waiting for btl serve: {e}")),
            }
        };
        self.stdout.wait_end(Duration::from_secs(2));
        self.stderr.wait_end(Duration::from_secs(2));
        if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
            return Err(format!(
                "btl serve did not handle SIGTERM: signal {signal} ended it, where it should exit with status 0"
            ));
        }
        if !status.success() {
            return Err(format!(
                "btl serve ended with {status} on SIGTERM, not with status 0; stderr ends with:\n{}",
                self.stderr.tail(TAIL_LINES)
            ));
        }
        let served = self.stdout.find(Duration::ZERO, |line| {
            let json = line.strip_prefix("served: ")?;
            Some(serde_json::from_str::<serde_json::Value>(json).map_err(|e| (e, line.to_owned())))
        });
        match served {
            Some(Ok(v)) if v.is_object() => Ok(Served(v)),
            Some(Ok(v)) => Err(format!("the served: line holds no JSON object: {v}")),
            Some(Err((e, line))) => Err(format!("the served: line is no JSON ({e}): {line}")),
            None => Err(format!(
                "btl serve printed no `served: {{...}}` line as it ended; stdout ends with:\n{}",
                self.stdout.tail(5)
            )),
        }
    }
}

/// Runs `cmd` to its end or for `timeout` at most (then kills it); its
/// status, stdout and stderr.
pub fn run_bounded(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(ExitStatus, String, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = Reaper(cmd.spawn().map_err(|e| format!("starting btl: {e}"))?);
    let out = Lines::collect(child.0.stdout.take().expect("piped stdout"));
    let err = Lines::collect(child.0.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.0.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                return Err(format!(
                    "btl connect did not finish within {timeout:?}; its stderr: {}",
                    err.tail(5)
                ));
            }
            Err(e) => return Err(format!("waiting for btl connect: {e}")),
        }
    };
    out.wait_end(Duration::from_secs(2));
    err.wait_end(Duration::from_secs(2));
    Ok((status, out.since(0).join("\n"), err.since(0).join("\n")))
}

/// The median of `values` (the mean of the middle two for an even count);
/// NaN for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Failed checks of one test, collected so that one run reports every
/// finding (a dead server, a failed client, a leak, a flooded log), not
/// only the first; [`Verdict::conclude`] fails the test with all of them.
#[derive(Debug, Default)]
pub struct Verdict {
    failures: Vec<String>,
}

impl Verdict {
    /// Records a failure unless `ok`; returns `ok`.
    pub fn check(&mut self, ok: bool, failure: impl FnOnce() -> String) -> bool {
        if !ok {
            let f = failure();
            eprintln!("FAILED: {f}");
            self.failures.push(f);
        }
        ok
    }

    /// Records the error of `result`, if any; the value otherwise.
    pub fn ok<T>(&mut self, what: &str, result: Result<T, String>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.check(false, || format!("{what}: {e}"));
                None
            }
        }
    }

    /// Fails the test with every failure recorded, if any.
    pub fn conclude(self) {
        assert!(
            self.failures.is_empty(),
            "{} check(s) failed:\n- {}",
            self.failures.len(),
            self.failures.join("\n- ")
        );
    }
}
