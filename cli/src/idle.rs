//! Idle peers for `btl pingpong|bw|rate --idle N`: a third process that
//! connects `N` processes of the run's job to the second process (the one
//! that answers) and then only keeps them alive, so that a measurement
//! shows what one message costs beside many connected peers.
//!
//! Each idle peer is a module of its own with the smallest tables and
//! pools (`btl_<c>_max_peers = 2`, two fragments of each size), named as
//! ranks 2 and up of the job and found through the run's shared
//! directory, as the second process is. The process says `ready` on its
//! standard output once every peer is connected, then progresses each one
//! every [`TURN`] (keepalives are answered well within the peer timeout,
//! and the process takes little of the cores the measurement runs on)
//! until it is killed or its standard input closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use btl_core::btl::Btl;
use btl_core::endpoint::ProcName;
use btl_std::bootstrap::{Bootstrap, SharedDir};

use crate::launch::{ParamSources, open_bml};

/// How often the idle process moves each of its modules.
pub const TURN: Duration = Duration::from_secs(1);

/// The rank of the process the idle peers connect to: the run's second.
const ANSWERING_RANK: u32 = 1;

/// The rank of the first idle peer.
const FIRST_RANK: u32 = 2;

/// The networks idle peers may connect over, by component name: sockets,
/// whose peer tables the `max_peers` parameter sizes.
pub const NETWORKS: [&str; 2] = ["tcp", "udp"];

/// The parameters, as environment variables, that let the answering
/// process hold `count` idle peers beside the first process over
/// `component`: peer slots for all of them (unless the user chose a
/// number), and all of them from one address (loopback), which without a
/// job key may hold only a tenth of the slots.
pub fn answering_environment(component: &str, count: u32) -> Vec<(String, String)> {
    let upper = component.to_ascii_uppercase();
    let slots = (count as usize + 8).max(64);
    let mut vars = vec![(format!("BTL_{upper}_SOURCE_SHARE"), "100".to_string())];
    let max_peers = format!("BTL_{upper}_MAX_PEERS");
    match std::env::var(&max_peers)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(set) if set >= slots => {}
        _ => vars.push((max_peers, slots.to_string())),
    }
    vars
}

/// The idle process of a run, started by [`IdlePeers::start`]; killed when
/// dropped.
pub struct IdlePeers {
    child: Child,
}

/// What starting the idle peers needs to know of the run.
pub struct IdleRun<'a> {
    /// The run's job.
    pub job: u64,
    /// The run's shared directory, where the processes' cards are.
    pub dir: &'a Path,
    /// The component the idle peers connect over (`tcp`, `udp`).
    pub component: &'a str,
    /// How many.
    pub count: u32,
    /// The parameter file of the run, if one was given.
    pub param_file: Option<&'a Path>,
}

impl IdlePeers {
    /// Starts the idle process of `run` and waits until every idle peer is
    /// connected (or the process failed, or `patience` ran out).
    pub fn start(exe: &Path, run: &IdleRun<'_>, patience: Duration) -> Result<Self, String> {
        let upper = run.component.to_ascii_uppercase();
        let mut cmd = Command::new(exe);
        cmd.arg("idle")
            .args(["--job", &run.job.to_string()])
            .arg("--dir")
            .arg(run.dir)
            .args(["--count", &run.count.to_string()])
            .args(["--btl", run.component])
            // The smallest module that holds one peer.
            .env(format!("BTL_{upper}_MAX_PEERS"), "2")
            .env(format!("BTL_{upper}_FREE_LIST_NUM"), "2")
            .env(format!("BTL_{upper}_FREE_LIST_MAX"), "2")
            .env(format!("BTL_{upper}_FREE_LIST_INC"), "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(f) = run.param_file {
            cmd.arg("--param-file").arg(f);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting the process of idle peers: {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err("the process of idle peers has no output".into());
        };
        let ready = wait_ready(stdout, patience);
        let mut peers = IdlePeers { child };
        match ready {
            Ok(()) => Ok(peers),
            Err(e) => {
                let status = peers.stop();
                Err(format!("{e} ({status})"))
            }
        }
    }

    /// Stops the idle process; how it ended, in words.
    fn stop(&mut self) -> String {
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for IdlePeers {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Waits for the line `ready` on `stdout`, at most `patience`.
fn wait_ready(stdout: ChildStdout, patience: Duration) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let said = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(said.map(|_| line));
    });
    match rx.recv_timeout(patience) {
        Ok(Ok(line)) if line.trim() == "ready" => Ok(()),
        Ok(_) => Err("the idle peers failed to connect".into()),
        Err(_) => Err(format!(
            "the idle peers did not connect within {patience:?}"
        )),
    }
}

/// The arguments of the idle process (`btl idle`, started by
/// [`IdlePeers::start`]).
#[derive(Debug, Clone)]
pub struct IdleArgs {
    /// The run's job.
    pub job: u64,
    /// The run's shared directory.
    pub dir: PathBuf,
    /// Idle peers to connect.
    pub count: u32,
    /// The component to connect over.
    pub btl: String,
    /// The run's parameter file.
    pub param_file: Option<PathBuf>,
}

/// The idle process: connects `args.count` peers to the answering process,
/// says `ready`, then keeps them alive until its input closes.
pub fn serve(args: IdleArgs, patience: Duration) -> Result<(), String> {
    let sources = ParamSources::new(args.param_file, true);
    let boot = Arc::new(SharedDir::new(&args.dir));
    let target = ProcName::new(args.job, ANSWERING_RANK);
    // Connected by address, which waits for each handshake: a peer only
    // added would connect at its first send, and these send nothing.
    let card = boot.lookup(target, patience).map_err(|e| e.to_string())?;
    let address = card
        .contacts
        .iter()
        .find(|c| c.component == args.btl)
        .map(|c| c.addr.to_string())
        .ok_or_else(|| format!("{target} does not listen for {}", args.btl))?;
    let mut modules = Vec::with_capacity(args.count as usize);
    for i in 0..args.count {
        let which =
            |e: &dyn std::fmt::Display| format!("idle peer {} of {}: {e}", i + 1, args.count);
        let me = ProcName::new(args.job, FIRST_RANK + i);
        let mut m = open_bml(&sources, me, Some(boot.clone()), Some(&args.btl))
            .map_err(|e| which(&format_args!("{e} (open files: see `ulimit -n`)")))?;
        m.connect_to(&address, patience).map_err(|e| which(&e))?;
        modules.push(m);
    }
    let mut out = std::io::stdout();
    writeln!(out, "ready")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())?;
    // The first process closes our input when it goes (or kills us).
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = tx.send(());
    });
    while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(TURN) {
        for m in &mut modules {
            m.progress();
        }
    }
    Ok(())
}
