//! `btl serve` under attack, as an operator runs it: the real binary on
//! loopback, a legit `btl connect` client measuring it while hostile peers
//! (garbage, forged handshakes, protocol violations, idle and short-lived
//! connections, non-readers, datagram floods) do their worst, and a long
//! series of ordinary clients one after another.
//!
//! Each test starts its own server, warms it up with a full-range legit
//! run, measures an undisturbed baseline, then runs its attack with legit
//! runs alongside, and checks that:
//!
//! - the server is still running;
//! - every legit run completed, with a median latency within
//!   [`SLOWDOWN_BOUND`] times the baseline;
//! - once the attack is over (after a bounded settle time) the server holds
//!   the descriptors it held before and its resident memory is within
//!   [`RSS_MARGIN_KIB`] of what it was;
//! - its log grew by at most [`LOG_LINES_PER_PHASE`] lines, however many
//!   refusals the attack caused;
//! - on SIGTERM it exits with status 0 and prints one
//!   `served: {"runs":..,"peers":0,"links":0,"registrations":1,..}` line:
//!   no peer, link or registration left but its one send buffer.
//!
//! A test reports every failed check, not only the first (see
//! [`Verdict`]). The tests pin processes to CPUs when they can and must run
//! alone (`.config/nextest.toml` gives them the whole machine; under
//! `cargo test` a lock serialises them): latencies are compared.

#[path = "common/hostile_peer.rs"]
mod peer;
#[path = "common/hostile_server.rs"]
mod server;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use btl_core::endpoint::ProcName;
use btl_core::wire::{CloseReason, HEADER_LEN};

use peer::{
    BENCH_HEADER, FakePeer, PING_TAG, Pacer, Rng, bench_send, close_frame, dial,
    drain_until_closed, hello, hello_ack_frame, hello_frame, ping, server_name, udp_socket,
    unknown_type_frame,
};
use server::{Btl, Cpus, Footprint, LegitRun, Plan, Server, Verdict, median};

// ----- what is measured, and the bounds ----------------------------------

/// What the legit client runs, undisturbed and under attack: ping-pong of
/// small messages (8 B to 1 KiB, 8 sizes), 1000 timed iterations each.
/// One number per run is the median of the 8 sizes' medians: 8,000 round
/// trips stand behind it, a slow first size (the run's own warm-up) does
/// not move it, and it is what an application of small messages sees.
const LEGIT: Plan = Plan {
    min: "8",
    max: "1k",
    iters: 1000,
};
/// The warm-up before the baseline: `btl connect`'s default range, 1 B to
/// 4 MiB. The server's fragment pools and send buffer grow to what a legit
/// client of large messages makes them, so that the memory baseline is
/// that of a server which has served one (a large PING of an attacker may
/// then grow nothing a legit client would not).
const WARM_UP: Plan = Plan {
    min: "1",
    max: "4M",
    iters: 10,
};
/// Undisturbed runs; the baseline is the median of their numbers.
const BASELINE_RUNS: usize = 3;
/// Legit runs under attack: at least this many (their median is compared,
/// so one run unlucky with the machine's other tenants does not decide),
/// and runs go on while the attack does its work.
const MIN_RUNS_UNDER_ATTACK: usize = 3;
/// At most this many legit runs per attack.
const MAX_RUNS_UNDER_ATTACK: usize = 40;
/// How much slower the legit client may be under attack than undisturbed.
/// The attacker shares a CPU with the server and none with the client
/// (when pinning is possible), and is paced (see [`ATTACK_SPAN`]), so a
/// server that keeps serving its legit client stays well within it:
/// undisturbed numbers here are about 10 µs, 3 runs within ±10 % of each
/// other, and the attacks this server survives today cost it 1.1x to
/// 1.7x. A server that stalls behind an attacker for milliseconds at a
/// time, or drops its client, does not.
const SLOWDOWN_BOUND: f64 = 3.0;
/// Resident memory the server may keep after an attack beyond its
/// baseline, in KiB. Phases that leak nothing move it by -0.1 to +2.2 MiB
/// here (the allocator keeps some of what it handed out, and touched, for
/// connections that came and went). 4 MiB still catches a leak of a few
/// MiB per client in every attack, the two non-readers included (over
/// 2 MiB each), and of much less where the clients are many: 41 KiB each
/// over the 100 short-lived peers, 5 KiB over the 1,000 sequential ones.
/// Memory kept for good after an attack, bounded or not, counts: a server
/// that ends 17 MiB larger after 500 idle connections fails here.
const RSS_MARGIN_KIB: u64 = 4 << 10;
/// How long the server may take, after an attack, to drop what it held:
/// the peer timeout the tests set (2 s) twice over, and slack.
const SETTLE: Duration = Duration::from_secs(10);
/// Log lines an attack may add. A server that logs the first refusals of
/// a source and then one summary per interval and source writes a
/// handful per attack here (each attack comes from one address); one line
/// per refusal is thousands.
const LOG_LINES_PER_PHASE: usize = 30;
/// How long a SIGTERMed server may take to exit.
const TERM_TIMEOUT: Duration = Duration::from_secs(5);
/// How long after the last phase the server is ended: its peer and
/// handshake timeouts (2 s) and a second more, so that whatever a departed
/// attacker left (a peer that vanished without a word, a handshake never
/// finished) has been given up and the `served:` line can be exact.
const QUIET: Duration = Duration::from_secs(3);

// ----- the attacks' sizes -------------------------------------------------

/// Where every attacker connects from: another loopback address than the
/// legit client's 127.0.0.1 (all of 127/8 is loopback), so a server can
/// tell them apart as it would two hosts.
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// The time over which an attack of a fixed size spreads its steps: about
/// as long as a dozen legit runs, so that they overlap it throughout, and
/// gentle enough that the attacker does not simply take the CPU.
const ATTACK_SPAN: Duration = Duration::from_secs(3);
/// How long before the first legit run the attack starts.
const RAMP: Duration = Duration::from_millis(200);
/// An attack that cannot finish its steps by then (a server that stopped
/// accepting) is abandoned, and that is a failure.
const ATTACK_DEADLINE: Duration = Duration::from_secs(30);
/// Garbage connections.
const GARBAGE_CONNECTIONS: u64 = 2000;
/// Rounds of the forged HELLOs, each every kind once.
const FORGERY_ROUNDS: u64 = 40;
/// Fake clients that ping and break the protocol in the same write.
const VIOLATORS: u64 = 24;
/// Idle connections held at once.
const IDLE_CONNECTIONS: usize = 500;
/// Short-lived peers, each under a rank of its own.
const SHORT_LIVED_PEERS: u64 = 100;
/// Connect/disconnect cycles.
const CYCLES: u64 = 5000;
/// The large ping of a peer that never reads.
const LARGE_PING: u64 = 4 << 20;
/// What the other non-reader claims its ping is.
const CLAIMED_PING: u64 = 256 << 20;
/// How long the non-readers hold their connections once their pings are
/// sent: twice the server's peer timeout.
const NON_READER_HOLD: Duration = Duration::from_secs(4);
/// Junk datagrams.
const JUNK_DATAGRAMS: u64 = 100_000;
/// Ranks of the fake processes start here, far above `btl connect`'s
/// (1 + its process id), so no fake process is mistaken for a legit one.
const FAKE_RANKS: u32 = 0x4000_0000;

/// The sequential test's client runs by default: 1000 take about 35 s here
/// (each a new `btl connect` process: start, handshake, 14 sizes of 7
/// ping-pongs, close), which leaves the file within 3 minutes.
/// `BTL_HOSTILE_RUNS` sets another number.
const SEQUENTIAL_RUNS: usize = 1000;
/// What each of those clients runs: 8 B to 64 KiB, so that the server's
/// send buffer grows in every run (and a buffer or registration kept per
/// client adds up).
const SEQUENTIAL: Plan = Plan {
    min: "8",
    max: "64k",
    iters: 5,
};

// ----- the harness ------------------------------------------------------------

/// Serialises the tests of this file when they share a process (`cargo
/// test`): they compare latencies, and each needs the machine alone.
static ALONE: Mutex<()> = Mutex::new(());

/// One test's server, what it was like undisturbed, and the failures found.
struct Bench {
    server: Server,
    verdict: Verdict,
    /// The median of the undisturbed runs' numbers, µs.
    baseline_us: f64,
    /// The server's descriptors and memory after the baseline runs.
    footprint: Footprint,
    /// Legit runs made so far (warm-up and baseline included).
    runs: u64,
    /// When the last phase ended (see [`QUIET`]).
    calm_from: Instant,
    _alone: std::sync::MutexGuard<'static, ()>,
}

impl Bench {
    /// Starts a `btl` server over `btl`, warms it up and takes its
    /// baseline.
    fn prepare(btl: Btl) -> Self {
        let alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
        let cpus = Cpus::detect();
        if let Some(c) = cpus {
            c.pin_this_process();
        }
        let mut server = Server::start(btl, cpus);
        let started = Instant::now();
        if let Err(e) = server.legit_run(WARM_UP) {
            panic!("the warm-up run failed: {e}");
        }
        let baseline: Vec<LegitRun> = (0..BASELINE_RUNS)
            .map(|i| {
                server
                    .legit_run(LEGIT)
                    .unwrap_or_else(|e| panic!("undisturbed run {i} failed: {e}"))
            })
            .collect();
        if let Err(e) = server.alive() {
            panic!("the server did not survive its warm-up: {e}");
        }
        let baseline_us = median(baseline.iter().map(|r| r.typical_us).collect());
        let footprint = quiet_footprint(&server);
        eprintln!(
            "baseline over {btl:?}: {baseline_us:.2} µs (runs: {:?}), {footprint}; warm-up and baseline took {:.1?}",
            baseline
                .iter()
                .map(|r| round2(r.typical_us))
                .collect::<Vec<_>>(),
            started.elapsed()
        );
        Bench {
            server,
            verdict: Verdict::default(),
            baseline_us,
            footprint,
            runs: 1 + BASELINE_RUNS as u64,
            calm_from: Instant::now(),
            _alone: alone,
        }
    }

    /// Runs `attack` against the server, with legit runs alongside, then
    /// checks the server as the module says.
    fn attack(&mut self, name: &str, attack: impl FnOnce(&Ctl) -> String + Send + 'static) {
        let log_before = self.server.stderr.len();
        let started = Instant::now();
        let ctl = Ctl {
            target: self.server.addr,
            stop: Arc::default(),
            worked: Arc::default(),
            started,
        };
        let (tx, rx) = mpsc::channel();
        let theirs = ctl.clone();
        std::thread::spawn(move || {
            let _ = tx.send(attack(&theirs));
        });
        std::thread::sleep(RAMP);

        // Legit runs while the attack works, and a few at least; the first
        // failure ends them (the next would most likely fail the same way,
        // and each failure costs seconds).
        let mut runs: Vec<LegitRun> = Vec::new();
        while self.server.alive().is_ok() {
            match self.server.legit_run(LEGIT) {
                Ok(run) => runs.push(run),
                Err(e) => {
                    let n = runs.len() + 1;
                    self.verdict
                        .check(false, || format!("{name}: legit run {n} failed: {e}"));
                    break;
                }
            }
            self.runs += 1;
            let enough = runs.len() >= MIN_RUNS_UNDER_ATTACK
                && ctl.has_worked()
                && started.elapsed() >= ATTACK_SPAN;
            if enough || runs.len() >= MAX_RUNS_UNDER_ATTACK || ctl.late() {
                break;
            }
        }
        let legit_done = started.elapsed();
        // Let a fixed-size attack finish its steps (it has a deadline of
        // its own), then end what it holds.
        while !ctl.has_worked() && !ctl.late() {
            std::thread::sleep(Duration::from_millis(20));
        }
        ctl.stop.store(true, Ordering::SeqCst);
        let report = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| "abandoned: the attack did not stop within 10 s".to_owned());
        let attack_done = started.elapsed();
        self.calm_from = Instant::now();
        self.verdict.check(!report.starts_with("abandoned"), || {
            format!("{name}: the attack could not do its work: {report}")
        });

        // As fast as undisturbed, within the bound?
        let typical = median(runs.iter().map(|r| r.typical_us).collect());
        let bound = SLOWDOWN_BOUND * self.baseline_us;
        let slow = !runs.is_empty() && typical > bound;

        let after = self.aftermath(name, log_before);

        if slow {
            // Is the machine itself slower now? An undisturbed run after
            // the attack says (for the reader; the bound stands).
            let again = match self.server.alive() {
                Ok(()) => self.server.legit_run(LEGIT).map(|r| {
                    self.runs += 1;
                    format!("{:.2} µs", r.typical_us)
                }),
                Err(e) => Err(e),
            };
            self.verdict.check(false, || {
                format!(
                    "{name}: the legit client's median latency under attack is {typical:.2} µs, over {SLOWDOWN_BOUND}x the undisturbed {:.2} µs (runs: {:?}; an undisturbed run after the attack: {})",
                    self.baseline_us,
                    runs.iter().map(|r| round2(r.typical_us)).collect::<Vec<_>>(),
                    again.unwrap_or_else(|e| format!("failed: {e}"))
                )
            });
        }

        let each = runs.iter().map(|r| r.took).sum::<Duration>() / runs.len().max(1) as u32;
        eprintln!(
            "{name}: {report}; {} legit runs of {each:.1?} in {legit_done:.1?} (median {typical:.2} µs, baseline {:.2} µs: {:?}); attack done after {attack_done:.1?}; then {after}; {:.1?} in all",
            runs.len(),
            self.baseline_us,
            runs.iter()
                .map(|r| round2(r.typical_us))
                .collect::<Vec<_>>(),
            started.elapsed(),
        );
    }

    /// Checks the server after a phase whose log began at line
    /// `log_before`: still running, back to its baseline footprint within
    /// [`SETTLE`], and no more than [`LOG_LINES_PER_PHASE`] lines logged;
    /// what it came to, in words.
    fn aftermath(&mut self, name: &str, log_before: usize) -> String {
        let alive = self.server.alive();
        let alive = self.verdict.check(alive.is_ok(), || {
            format!(
                "{name}: the server did not survive: {}",
                alive.err().unwrap_or_default()
            )
        });
        let mut footprint = "server gone".to_owned();
        if alive {
            let base = self.footprint;
            let settled = Instant::now();
            if let Some(now) = self
                .verdict
                .ok(name, self.server.settle(base, RSS_MARGIN_KIB, SETTLE))
            {
                footprint = format!("{now} after {:.1?} (baseline {base})", settled.elapsed());
                self.verdict.check(now.fds == base.fds, || {
                    format!(
                        "{name}: the server holds {} descriptors {SETTLE:?} after, {} before",
                        now.fds, base.fds
                    )
                });
                self.verdict
                    .check(now.rss_kib <= base.rss_kib + RSS_MARGIN_KIB, || {
                        format!(
                            "{name}: the server's resident memory is {} KiB {SETTLE:?} after, {} KiB before (margin {RSS_MARGIN_KIB} KiB)",
                            now.rss_kib, base.rss_kib
                        )
                    });
            }
        }
        let logged = self.server.stderr.since(log_before);
        self.verdict.check(logged.len() <= LOG_LINES_PER_PHASE, || {
            format!(
                "{name}: the server logged {} lines (at most {LOG_LINES_PER_PHASE}), by kind:\n{}",
                logged.len(),
                line_kinds(&logged)
            )
        });
        format!("{footprint}, {} log lines", logged.len())
    }

    /// Ends the server with SIGTERM and checks its `served:` line: no peer,
    /// link or registration left but its one send buffer (and, if given,
    /// the runs it served); then fails the test with every failure found.
    fn finish(mut self, runs: Option<u64>) {
        std::thread::sleep(QUIET.saturating_sub(self.calm_from.elapsed()));
        if self.server.alive().is_ok() {
            let started = Instant::now();
            let served = self.server.terminate(TERM_TIMEOUT);
            eprintln!(
                "SIGTERM: {:?} after {:.1?}",
                served.as_ref().map(|s| &s.0),
                started.elapsed()
            );
            if let Some(served) = self.verdict.ok("on SIGTERM", served) {
                let line = served.0.to_string();
                for (key, want) in [("peers", 0), ("links", 0), ("registrations", 1)] {
                    self.verdict.check(served.count(key) == Some(want), || {
                        format!("on SIGTERM: the served line should say {key}: {want}: {line}")
                    });
                }
                if let Some(runs) = runs {
                    self.verdict.check(served.count("runs") == Some(runs), || {
                        format!("on SIGTERM: the served line should count {runs} runs: {line}")
                    });
                }
                self.verdict.check(
                    served.0.get("refused").is_some_and(|r| r.is_object()),
                    || {
                        format!(
                            "on SIGTERM: the served line should hold the refusals by reason: {line}"
                        )
                    },
                );
            }
        }
        self.verdict.conclude();
    }
}

/// The server's footprint once its descriptors have been steady for a
/// while: the client of the last run may still be leaving.
fn quiet_footprint(server: &Server) -> Footprint {
    let mut last = server.footprint().expect("the server's footprint");
    let mut steady = 0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = server.footprint().expect("the server's footprint");
        steady = if now.fds == last.fds { steady + 1 } else { 0 };
        last = now;
        if steady >= 3 {
            break;
        }
    }
    last
}

/// `v` to two decimals, for messages.
fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Log lines counted by kind (timestamp dropped, numbers as `#`), most
/// frequent first, at most 8 kinds: what flooded the log, in a few lines.
fn line_kinds(lines: &[String]) -> String {
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for line in lines {
        // `2026-11-25T06:24:19.704706Z  WARN tcp ...`: the time goes.
        let text = match line.split_once('Z') {
            Some((time, rest)) if time.starts_with(|c: char| c.is_ascii_digit()) => rest,
            _ => line.as_str(),
        };
        let mut kind = String::new();
        for c in text.trim().chars() {
            if c.is_ascii_digit() {
                if !kind.ends_with('#') {
                    kind.push('#');
                }
            } else {
                kind.push(c);
            }
        }
        *kinds.entry(kind).or_default() += 1;
    }
    let mut kinds: Vec<(String, usize)> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    kinds
        .iter()
        .take(8)
        .map(|(k, n)| format!("    {n:>6} x {k}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What an attack is told and tells: the server, when to stop holding what
/// it holds, and whether it has done its fixed work.
#[derive(Clone)]
struct Ctl {
    target: SocketAddr,
    stop: Arc<AtomicBool>,
    worked: Arc<AtomicBool>,
    started: Instant,
}

impl Ctl {
    /// The attack has done its work (it may hold things until stopped).
    fn worked(&self) {
        self.worked.store(true, Ordering::SeqCst);
    }

    /// Whether the attack has done its work.
    fn has_worked(&self) -> bool {
        self.worked.load(Ordering::SeqCst)
    }

    /// Whether the attack is to end.
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether the attack has run out of time for its work.
    fn late(&self) -> bool {
        self.started.elapsed() > ATTACK_DEADLINE
    }

    /// Holds until told to stop.
    fn hold(&self) {
        while !self.stopped() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The report of an attack abandoned after `done` of `total` steps.
    fn abandoned(&self, done: u64, total: u64) -> String {
        self.worked();
        format!("abandoned after {done} of {total} steps in {ATTACK_DEADLINE:?}")
    }
}

/// A fake process name of the server's job with rank `FAKE_RANKS + n`.
fn fake(server: ProcName, n: u32) -> ProcName {
    ProcName::new(server.job, FAKE_RANKS + n)
}

// ----- 1. garbage connections --------------------------------------------

#[test]
fn garbage_connections() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("garbage connections", |ctl| {
        let mut rng = Rng::new(1);
        let pacer = Pacer::new(GARBAGE_CONNECTIONS, ATTACK_SPAN);
        let mut refused = 0;
        for i in 0..GARBAGE_CONNECTIONS {
            if ctl.late() {
                return ctl.abandoned(i, GARBAGE_CONNECTIONS);
            }
            pacer.turn(i);
            let Ok(mut stream) = dial(ctl.target, ATTACKER, None) else {
                refused += 1;
                continue;
            };
            let len = rng.below(1..513);
            let mut junk = rng.bytes(len);
            // A quarter start as a frame would (a known type, no flags),
            // so that the garbage gets past the first byte.
            if i % 4 == 0 && junk.len() > 1 {
                junk[0] = rng.below(1..10) as u8;
                junk[1] = 0;
            }
            let _ = stream.write_all(&junk);
            // Half end their stream and wait for the server to close; half
            // just go.
            if i % 2 == 0 {
                let _ = stream.shutdown(Shutdown::Write);
                drain_until_closed(&mut stream, Duration::from_millis(50));
            }
        }
        ctl.worked();
        format!("{GARBAGE_CONNECTIONS} garbage connections ({refused} not accepted)")
    });
    bench.finish(None);
}

// ----- 2. malformed and forged HELLOs -------------------------------------

/// The HELLOs of the forgery attack.
#[derive(Debug, Clone, Copy)]
enum Forgery {
    /// A valid HELLO cut short, then the end of the stream.
    Truncated,
    /// Protocol version 2.
    WrongVersion,
    /// Not "BTL\0".
    WrongMagic,
    /// A HELLO whose header says its body is 63 bytes.
    ShortBody,
    /// A HELLO whose header says its body is 2^62 bytes.
    HugeBody,
    /// Reserved header bits set.
    Reserved,
    /// Link index 65535.
    LinkIndex,
    /// Two HELLOs in a row.
    TwoHellos,
    /// A HELLO naming the server's own process, and a HELLO_ACK.
    OwnName,
    /// A live peer's HELLO, replayed byte for byte on a second connection.
    Replay,
}

const FORGERIES: [Forgery; 10] = [
    Forgery::Truncated,
    Forgery::WrongVersion,
    Forgery::WrongMagic,
    Forgery::ShortBody,
    Forgery::HugeBody,
    Forgery::Reserved,
    Forgery::LinkIndex,
    Forgery::TwoHellos,
    Forgery::OwnName,
    Forgery::Replay,
];

/// Plays `forgery` once against the server `name` at `target`, as fake
/// process number `n`.
fn forge(target: SocketAddr, name: ProcName, forgery: Forgery, n: u32, rng: &mut Rng) {
    let me = fake(name, n);
    let valid = hello_frame(hello(me, 0, rng));
    let (bytes, then_ack) = match forgery {
        Forgery::Truncated => (valid[..rng.below(1..valid.len())].to_vec(), false),
        Forgery::WrongVersion => (patched(&valid, HEADER_LEN + 4, &[2]), true),
        Forgery::WrongMagic => (patched(&valid, HEADER_LEN, b"XTL\0"), true),
        Forgery::ShortBody => (patched(&valid, 24, &63u64.to_be_bytes()), false),
        Forgery::HugeBody => (patched(&valid, 24, &(1u64 << 62).to_be_bytes()), false),
        Forgery::Reserved => (patched(&valid, 2, &[0xFF, 0xFF]), true),
        Forgery::LinkIndex => (hello_frame(hello(me, u16::MAX, rng)), true),
        Forgery::TwoHellos => ([valid.clone(), valid].concat(), true),
        Forgery::OwnName => (hello_frame(hello(name, 0, rng)), true),
        Forgery::Replay => {
            // A real peer, alive, and its HELLO played again elsewhere.
            let Ok(live) = FakePeer::join(target, ATTACKER, me, None, rng) else {
                return;
            };
            let replayed = live.hello_frame.clone();
            send_and_linger(target, &replayed, true);
            live.close_cleanly();
            return;
        }
    };
    send_and_linger(target, &bytes, then_ack);
}

/// `bytes` with `with` written at `at`.
fn patched(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v[at..at + with.len()].copy_from_slice(with);
    v
}

/// A connection that sends `bytes`, then (if `ack`) a HELLO_ACK once the
/// server's HELLO is in, ends its stream and waits briefly for the
/// server's end.
fn send_and_linger(target: SocketAddr, bytes: &[u8], ack: bool) {
    let Ok(mut stream) = dial(target, ATTACKER, None) else {
        return;
    };
    if stream.write_all(bytes).is_err() {
        return;
    }
    if ack {
        let mut first = [0u8; 1];
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .ok();
        if matches!(stream.read(&mut first), Ok(1)) {
            let _ = stream.write_all(&hello_ack_frame());
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    drain_until_closed(&mut stream, Duration::from_millis(100));
}

#[test]
fn malformed_and_forged_hellos() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("forged HELLOs", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(2);
        let total = FORGERY_ROUNDS * FORGERIES.len() as u64;
        let pacer = Pacer::new(total, ATTACK_SPAN);
        let mut step = 0;
        for round in 0..FORGERY_ROUNDS {
            for forgery in FORGERIES {
                if ctl.late() {
                    return ctl.abandoned(step, total);
                }
                pacer.turn(step);
                forge(ctl.target, name, forgery, (round * 16) as u32, &mut rng);
                step += 1;
            }
        }
        ctl.worked();
        format!("{total} forged HELLOs ({FORGERY_ROUNDS} rounds of {FORGERIES:?})")
    });
    bench.finish(None);
}

// ----- 3. a valid exchange, then a violation in the same write ------------

/// What follows the fake client's PING in the same write.
const VIOLATIONS: [&str; 4] = [
    "unknown type",
    "CLOSE Shutdown",
    "CLOSE ProtocolError",
    "garbage",
];

/// The bytes of violation `v` after a PING numbered 1.
fn violation(v: usize, rng: &mut Rng) -> Vec<u8> {
    match v {
        0 => unknown_type_frame(),
        1 => close_frame(2, CloseReason::Shutdown),
        2 => close_frame(2, CloseReason::ProtocolError),
        _ => {
            let mut junk = rng.bytes(64);
            junk[0] |= 0x80;
            junk
        }
    }
}

#[test]
fn a_ping_and_a_protocol_violation_in_one_write() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("ping then violation (tcp)", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(3);
        let pacer = Pacer::new(VIOLATORS, ATTACK_SPAN);
        let mut joined = 0;
        for i in 0..VIOLATORS {
            if ctl.late() {
                return ctl.abandoned(i, VIOLATORS);
            }
            pacer.turn(i);
            let me = fake(name, 0x1000 + i as u32);
            let Ok(mut peer) = FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) else {
                continue;
            };
            joined += 1;
            let seq = peer.seq();
            let v = i as usize % VIOLATIONS.len();
            let write = [ping(seq, 8), violation(v, &mut rng)].concat();
            let _ = peer.stream.write_all(&write);
            drain_until_closed(&mut peer.stream, Duration::from_millis(500));
        }
        ctl.worked();
        format!(
            "{VIOLATORS} fake clients ({joined} completed the handshake) pinged and broke the protocol in the same write ({VIOLATIONS:?} in turn)"
        )
    });
    bench.finish(None);
}

#[test]
fn a_ping_and_a_close_in_four_datagrams() {
    let mut bench = Bench::prepare(Btl::Udp);
    bench.attack("ping then close (udp)", |ctl| {
        let mut rng = Rng::new(4);
        let pacer = Pacer::new(VIOLATORS, ATTACK_SPAN);
        let mut failed = 0;
        // The server's name: its HELLO answers ours. Its job is needed for
        // a HELLO it takes; ask with a first fake process.
        let probe = udp_socket(ATTACKER).expect("a UDP socket");
        let name = server_name_udp(&probe, ctl.target, &mut rng);
        drop(probe);
        let Some(name) = name else {
            ctl.worked();
            return "abandoned: no HELLO from the server".to_owned();
        };
        for i in 0..VIOLATORS {
            if ctl.late() {
                return ctl.abandoned(i, VIOLATORS);
            }
            pacer.turn(i);
            let Ok(socket) = udp_socket(ATTACKER) else {
                failed += 1;
                continue;
            };
            let me = fake(name, 0x2000 + i as u32);
            // HELLO, an all-zero HELLO_ACK, PING, CLOSE: sent at once,
            // replies never read.
            for datagram in [
                hello_frame(hello(me, 0, &mut rng)),
                hello_ack_frame(),
                ping(1, 8),
                close_frame(2, CloseReason::Shutdown),
            ] {
                if socket.send_to(&datagram, ctl.target).is_err() {
                    failed += 1;
                }
            }
        }
        ctl.worked();
        format!(
            "{VIOLATORS} fake clients sent HELLO, HELLO_ACK, PING, CLOSE ({failed} sends failed)"
        )
    });
    bench.finish(None);
}

/// The name the UDP server at `target` gives in the HELLO it answers a
/// HELLO with (ours from a process of no particular job, whose handshake
/// is then left to time out).
fn server_name_udp(
    socket: &std::net::UdpSocket,
    target: SocketAddr,
    rng: &mut Rng,
) -> Option<ProcName> {
    let me = ProcName::new(0, FAKE_RANKS - 1);
    socket
        .send_to(&hello_frame(hello(me, 0, rng)), target)
        .ok()?;
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let Ok((n, _)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if let Ok((_, btl_core::wire::PacketRepr::Hello(h))) =
            btl_core::wire::parse_datagram(&buf[..n], &btl_core::wire::Limits::new(1 << 20))
        {
            return Some(ProcName::new(h.job, h.rank));
        }
    }
    None
}

// ----- 4. idle connections ----------------------------------------------------

/// An idle connection: open, sending nothing, reads not blocking.
fn idle(target: SocketAddr) -> Option<TcpStream> {
    let stream = dial(target, ATTACKER, None).ok()?;
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

#[test]
fn five_hundred_idle_connections() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("idle connections", |ctl| {
        let mut conns: Vec<Option<TcpStream>> = Vec::with_capacity(IDLE_CONNECTIONS);
        for i in 0..IDLE_CONNECTIONS {
            if ctl.late() {
                return ctl.abandoned(i as u64, IDLE_CONNECTIONS as u64);
            }
            conns.push(idle(ctl.target));
        }
        let opened = conns.iter().flatten().count();
        ctl.worked();
        // Each one the server drops is opened again at once, for as long
        // as the legit runs go.
        let (mut reopened, mut sink) = (0u64, [0u8; 4096]);
        while !ctl.stopped() {
            for slot in conns.iter_mut() {
                let dropped = match slot {
                    None => true,
                    Some(s) => match s.read(&mut sink) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != ErrorKind::WouldBlock,
                    },
                };
                if dropped && !ctl.stopped() {
                    *slot = idle(ctl.target);
                    reopened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        format!("{opened} of {IDLE_CONNECTIONS} idle connections opened at first, {reopened} reopened after the server dropped them")
    });
    bench.finish(None);
}

// ----- 5. short-lived peers -----------------------------------------------------

#[test]
fn a_hundred_short_lived_peers() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("short-lived peers", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(5);
        let pacer = Pacer::new(SHORT_LIVED_PEERS, ATTACK_SPAN);
        let mut joined = 0;
        for i in 0..SHORT_LIVED_PEERS {
            if ctl.late() {
                return ctl.abandoned(i, SHORT_LIVED_PEERS);
            }
            pacer.turn(i);
            let me = fake(name, 0x3000 + i as u32);
            let Ok(peer) = FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) else {
                continue;
            };
            joined += 1;
            // Half leave as a finishing process does, half vanish.
            if i % 2 == 0 {
                peer.close_cleanly();
            } else {
                drop(peer);
            }
        }
        ctl.worked();
        format!("{SHORT_LIVED_PEERS} short-lived peers ({joined} completed the handshake), half closed cleanly, half dropped")
    });
    bench.finish(None);
}

// ----- 6. connect/disconnect cycles --------------------------------------------

#[test]
fn five_thousand_connect_disconnect_cycles() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("connect/disconnect cycles", |ctl| {
        let pacer = Pacer::new(CYCLES, ATTACK_SPAN);
        let mut refused = 0;
        for i in 0..CYCLES {
            if ctl.late() {
                return ctl.abandoned(i, CYCLES);
            }
            pacer.turn(i);
            match dial(ctl.target, ATTACKER, None) {
                Ok(stream) => drop(stream),
                Err(_) => refused += 1,
            }
        }
        ctl.worked();
        format!("{CYCLES} connect/disconnect cycles ({refused} not accepted)")
    });
    bench.finish(None);
}

// ----- 7. a large ping from a peer that never reads -----------------------------

/// Payload of each SEND of a large ping: the server's largest fragment
/// (256 KiB) takes it with room to spare.
const PING_CHUNK: usize = 128 << 10;

/// Sends the SENDs of a ping whose header says `total` bytes, `data` of
/// them in all, from `peer`.
fn send_large_ping(peer: &mut FakePeer, total: u64, data: u64) -> std::io::Result<()> {
    let chunk = vec![0xa5u8; PING_CHUNK - BENCH_HEADER];
    let mut sent = 0u64;
    while sent < data {
        let n = (data - sent).min(chunk.len() as u64) as usize;
        let seq = peer.seq();
        peer.stream
            .write_all(&bench_send(seq, PING_TAG, total, &chunk[..n]))?;
        sent += n as u64;
    }
    Ok(())
}

#[test]
fn a_large_ping_from_a_peer_that_never_reads() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("large pings, never read", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(7);
        let mut notes = Vec::new();
        // A receive buffer of 4 KiB (fixed before the connect, so not
        // autotuned): the server's pong soon has nowhere to go.
        let reader = FakePeer::join(
            ctl.target,
            ATTACKER,
            fake(name, 0x4000),
            Some(4096),
            &mut rng,
        );
        let claimer = FakePeer::join(
            ctl.target,
            ATTACKER,
            fake(name, 0x4001),
            Some(4096),
            &mut rng,
        );
        let mut held = Vec::new();
        match reader {
            Ok(mut p) => {
                match send_large_ping(&mut p, LARGE_PING, LARGE_PING) {
                    Ok(()) => notes.push("a 4 MiB ping sent".to_owned()),
                    Err(e) => notes.push(format!("the 4 MiB ping stopped: {e}")),
                }
                held.push(p);
            }
            Err(e) => notes.push(format!("the first non-reader could not join: {e}")),
        }
        match claimer {
            Ok(mut p) => {
                // 1 MiB of a ping said to be 256 MiB.
                match send_large_ping(&mut p, CLAIMED_PING, 1 << 20) {
                    Ok(()) => notes.push("1 MiB of a ping claiming 256 MiB sent".to_owned()),
                    Err(e) => notes.push(format!("the 256 MiB claim stopped: {e}")),
                }
                held.push(p);
            }
            Err(e) => notes.push(format!("the second non-reader could not join: {e}")),
        }
        // Held past the server's peer timeout, legit runs going on: a
        // server that gives up on a peer that does not read drops them
        // meanwhile.
        let since = Instant::now();
        while since.elapsed() < NON_READER_HOLD && !ctl.stopped() {
            std::thread::sleep(Duration::from_millis(10));
        }
        ctl.worked();
        ctl.hold();
        drop(held);
        notes.join(", ")
    });
    bench.finish(None);
}

// ----- 8. junk datagrams ----------------------------------------------------------

#[test]
fn a_hundred_thousand_junk_datagrams() {
    let mut bench = Bench::prepare(Btl::Udp);
    bench.attack("junk datagrams", |ctl| {
        let Ok(socket) = udp_socket(ATTACKER) else {
            ctl.worked();
            return "abandoned: no UDP socket".to_owned();
        };
        let mut rng = Rng::new(8);
        // Paced in batches of 100: a sleep per datagram would cost more
        // than the datagram.
        let pacer = Pacer::new(JUNK_DATAGRAMS / 100, ATTACK_SPAN);
        let (mut failed, mut buf) = (0u64, vec![0u8; 1472]);
        for i in 0..JUNK_DATAGRAMS {
            if i % 100 == 0 {
                if ctl.late() {
                    return ctl.abandoned(i, JUNK_DATAGRAMS);
                }
                pacer.turn(i / 100);
            }
            let len = rng.below(1..1473);
            rng.fill(&mut buf[..len]);
            // A quarter start as a frame would.
            if i % 4 == 0 && len > 1 {
                buf[0] = rng.below(1..10) as u8;
                buf[1] = 0;
            }
            if socket.send_to(&buf[..len], ctl.target).is_err() {
                failed += 1;
            }
        }
        ctl.worked();
        format!("{JUNK_DATAGRAMS} junk datagrams from one socket ({failed} sends failed)")
    });
    bench.finish(None);
}

// ----- one client after another ---------------------------------------------------

#[test]
fn one_client_after_another() {
    let runs: usize = std::env::var("BTL_HOSTILE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEQUENTIAL_RUNS);
    let mut bench = Bench::prepare(Btl::Tcp);
    let log_before = bench.server.stderr.len();
    let started = Instant::now();
    let mut done = 0;
    for i in 1..=runs {
        let run = bench.server.legit_run(SEQUENTIAL);
        if let Err(e) = run {
            bench
                .verdict
                .check(false, || format!("client {i} of {runs} failed: {e}"));
            break;
        }
        done += 1;
        bench.runs += 1;
    }
    let took = started.elapsed();
    bench.calm_from = Instant::now();
    let after = bench.aftermath("one client after another", log_before);
    eprintln!(
        "{done} of {runs} clients one after another in {took:.1?} ({:.1?} each); {after}",
        took / done.max(1) as u32,
    );
    let served = bench.runs;
    bench.finish(Some(served));
}
