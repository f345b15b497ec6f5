//! A one-node Slurm cluster of this host, for tests that launch a job with
//! `srun --mpi=pmix`: its own `munged`, `slurmctld` and `slurmd`, with
//! configuration, state, sockets and logs in a scratch directory, started
//! in the foreground as children of the test and stopped when the cluster
//! is dropped. Every wait is bounded.
//!
//! Needs root and Debian's `slurm-wlm` and `munge` (the test command
//! installs them).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the daemons may take to come up.
const START: Duration = Duration::from_secs(30);

/// The cluster; dropping it stops the daemons and removes its directory.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Cluster {
    /// Starts the daemons and waits until the node is idle; an error
    /// says what is missing or which daemon did not come up (with its
    /// log).
    pub fn start() -> Result<Cluster, String> {
        let tool = |name: &str| {
            which(name).ok_or_else(|| {
                format!("no `{name}`: the Slurm tests need Debian's slurm-wlm and munge")
            })
        };
        let (slurmctld, slurmd) = (tool("slurmctld")?, tool("slurmd")?);
        for name in ["munged", "srun", "sinfo", "setpriv"] {
            tool(name)?;
        }
        let dir = std::env::temp_dir().join(format!("btl-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cluster = Cluster {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
        };
        cluster.start_munge()?;
        cluster.write_conf()?;
        let conf = cluster.conf.to_string_lossy().into_owned();
        cluster.spawn(
            "slurmctld",
            Command::new(slurmctld).args(["-D", "-f", &conf]),
        )?;
        cluster.spawn("slurmd", Command::new(slurmd).args(["-D", "-f", &conf]))?;
        let start = Instant::now();
        loop {
            let state = run(cluster.command("sinfo").args(["-h", "-o", "%t"]));
            if state.as_deref().is_ok_and(|s| s.trim() == "idle") {
                return Ok(cluster);
            }
            cluster.check_alive()?;
            if start.elapsed() > START {
                return Err(format!(
                    "the Slurm node is not idle after {START:?} ({state:?}); {}",
                    cluster.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `munged` as the `munge` user, on a socket of the cluster's own.
    fn start_munge(&mut self) -> Result<(), String> {
        let munge = self.dir.join("munge");
        let run_dir = self.dir.join("run");
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: std::io::Error| format!("{what}: {e}")
        };
        std::fs::create_dir_all(&munge).map_err(io("creating the munge directory"))?;
        std::fs::create_dir_all(&run_dir).map_err(io("creating the socket directory"))?;
        let mut key = [0u8; 128];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").map_err(io("opening /dev/urandom"))?,
            &mut key,
        )
        .map_err(io("reading /dev/urandom"))?;
        std::fs::write(munge.join("key"), key).map_err(io("writing the munge key"))?;
        run(Command::new("chown")
            .args(["-R", "munge:munge"])
            .arg(&munge)
            .arg(&run_dir))?;
        run(Command::new("chmod").arg("700").arg(&munge))?;
        run(Command::new("chmod").arg("600").arg(munge.join("key")))?;
        run(Command::new("chmod")
            .arg("755")
            .arg(&self.dir)
            .arg(&run_dir))?;
        let arg = |flag: &str, path: PathBuf| format!("--{flag}={}", path.display());
        let munged = which("munged").ok_or("no `munged`")?;
        self.spawn(
            "munged",
            Command::new("setpriv")
                .args(["--reuid=munge", "--regid=munge", "--clear-groups"])
                .arg(munged)
                .arg("-F")
                .arg(arg("socket", run_dir.join("sock")))
                .arg(arg("key-file", munge.join("key")))
                .arg(arg("pid-file", run_dir.join("pid")))
                .arg(arg("log-file", munge.join("log")))
                .arg(arg("seed-file", munge.join("seed"))),
        )?;
        let start = Instant::now();
        while !run_dir.join("sock").exists() {
            self.check_alive()?;
            if start.elapsed() > START {
                return Err(format!(
                    "munged made no socket in {START:?}; {}",
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn write_conf(&self) -> Result<(), String> {
        let host = run(&mut Command::new("hostname"))?.trim().to_owned();
        let d = self.dir.display();
        let (ctld, slurmd) = (free_port(), free_port());
        std::fs::create_dir_all(self.dir.join("state")).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(self.dir.join("spool")).map_err(|e| e.to_string())?;
        // More CPUs than the host has, so that a job may have more tasks
        // than cores; the node takes the configured count.
        let conf = format!(
            "ClusterName=btltest\n\
             SlurmctldHost={host}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={d}/run/sock\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             MpiDefault=none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SlurmdParameters=config_overrides\n\
             ReturnToService=2\n\
             JobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             NodeName={host} CPUs=16 State=UNKNOWN\n\
             PartitionName=btl Nodes={host} Default=YES MaxTime=10 State=UP OverSubscribe=FORCE\n"
        );
        std::fs::write(&self.conf, conf).map_err(|e| format!("writing slurm.conf: {e}"))
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) -> Result<(), String> {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        self.daemons.push((name, child));
        Ok(())
    }

    /// An error naming a daemon that has exited, with the logs.
    fn check_alive(&mut self) -> Result<(), String> {
        for (name, child) in &mut self.daemons {
            if let Ok(Some(status)) = child.try_wait() {
                let name = *name;
                return Err(format!("{name} exited ({status}); {}", self.logs()));
            }
        }
        Ok(())
    }

    /// The ends of the daemons' logs, for an error.
    fn logs(&self) -> String {
        ["munge/log", "slurmctld.log", "slurmd.log"]
            .iter()
            .map(|log| {
                let text = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(8).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("{log}:\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `program` with the cluster's configuration (`srun`, `sinfo`).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// The cluster's scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    /// Stops the daemons, Slurm's first: SIGTERM, then SIGKILL after 10 s.
    fn drop(&mut self) {
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let start = Instant::now();
            loop {
                if !matches!(child.try_wait(), Ok(None)) {
                    break;
                }
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `tool` is on the `PATH` (or in `/usr/sbin`, where Debian puts
/// daemons), if anywhere.
fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}
