//! Run under a PMIx launcher with two processes (`mpirun -np 2`): the job
//! is authenticated by default. Both ranks open TCP with the job's key;
//! rank 0 also plays a stranger on the same host that read rank 1's
//! address (from the job's own bootstrap) and even claims rank 0's name,
//! but holds another key: rank 1 must refuse its handshake, while rank 0's
//! own module, with the job's key, reaches rank 1 and is answered.
//!
//! A lookup of a rank past the job's size fails at once, naming the job.
//!
//! Exits 0 and prints `refused: REASON` when all of that holds.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use btl_std::bootstrap::{BootstrapError, Job, Launcher, StaticPeers};
use btl_std::{Btl, BtlError, Event, LostReason, ModuleBuilder, Tag};

const WAIT: Duration = Duration::from_secs(30);
const TAG: Tag = Tag(0x42);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("btl-job-stranger: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let job = Job::join().map_err(|e| e.to_string())?;
    if !matches!(job.launcher(), Launcher::Pmix(_)) || job.size() != 2 {
        return Err("run me under a PMIx launcher with two processes (mpirun -np 2)".into());
    }
    let mut bml = job
        .builder()
        .param("btl", "tcp,self")
        .param("btl_tcp_if_include", "lo")
        .open()
        .map_err(|e| e.to_string())?;
    if job.me().rank == 1 {
        // Answers rank 0's message, then waits for it to be done.
        let zero = bml.reach(job.proc(0), WAIT).map_err(|e| e.to_string())?;
        bml.wait_for(WAIT, |ev| {
            matches!(ev, Event::Received(m) if m.tag == TAG).then_some(())
        })
        .map_err(|e| format!("rank 1 never heard from rank 0: {e}"))?;
        bml.send_copy(zero, TAG, b"welcome")
            .map_err(|e| e.to_string())?;
        // Rank 0 leaves once answered. (A PMIx barrier here would hold
        // this process where nothing moves its module: the answer would
        // wait for it.)
        return bml
            .wait_for(WAIT, |ev| match ev {
                Event::PeerLeft { .. } => Some(()),
                Event::Error(e) if e.error == BtlError::PeerLost(LostReason::Left) => Some(()),
                _ => None,
            })
            .map_err(|e| format!("rank 0 did not leave: {e}"));
    }
    // A rank past the job's size is none of the job's, at once.
    match job.bootstrap().lookup(job.proc(job.size()), WAIT) {
        Err(BootstrapError::NotInJob { job_size: 2, .. }) => {}
        other => return Err(format!("rank 2 of a job of 2 was looked up: {other:?}")),
    }
    // The stranger: rank 1's card, rank 0's name, a key of its own.
    let card = job
        .bootstrap()
        .lookup(job.proc(1), WAIT)
        .map_err(|e| e.to_string())?;
    let mut stranger = ModuleBuilder::new(job.me())
        .bootstrap(Arc::new(StaticPeers::new(
            vec![card],
            "the stranger's list",
        )))
        .job_key(b"not the job's key".to_vec())
        .param("btl_tcp_if_include", "lo")
        .tcp()
        .map_err(|e| e.to_string())?;
    let refused = match stranger.reach(job.proc(1), WAIT) {
        Err(e) => e.to_string(),
        Ok(ep) => {
            stranger
                .send_copy(ep, TAG, b"let me in")
                .map_err(|e| e.to_string())?;
            let lost = stranger
                .wait_for(WAIT, |ev| match ev {
                    Event::Error(e) => Some(e.error),
                    Event::PeerLeft { .. } => Some(BtlError::PeerLost(LostReason::Left)),
                    Event::SendComplete { result: Err(e), .. } => Some(e),
                    _ => None,
                })
                .map_err(|e| format!("the stranger was neither let in nor refused: {e}"))?;
            if lost != BtlError::PeerLost(LostReason::AuthFailed) {
                return Err(format!(
                    "the stranger lost rank 1 for another reason: {lost}"
                ));
            }
            lost.to_string()
        }
    };
    drop(stranger);
    // The job's own module is let in.
    let one = bml.reach(job.proc(1), WAIT).map_err(|e| e.to_string())?;
    bml.send_copy(one, TAG, b"hello")
        .map_err(|e| e.to_string())?;
    bml.wait_for(WAIT, |ev| {
        matches!(ev, Event::Received(m) if m.tag == TAG).then_some(())
    })
    .map_err(|e| format!("rank 0 was not answered: {e}"))?;
    // Leaves gracefully: rank 1 reads that it is done.
    drop(bml);
    println!("refused: {refused}");
    Ok(())
}
