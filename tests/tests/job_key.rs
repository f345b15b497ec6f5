//! A job launched through PMIx is authenticated by default: a stranger on
//! the same host that knows a rank's address, and even claims another
//! rank's name, cannot complete a handshake without the job's key, while
//! the job's own processes reach each other (`btl-job-stranger`, run by
//! `mpirun`).
#![cfg(feature = "pmix")]

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_stranger_without_the_jobs_key_is_refused_and_the_job_is_not() {
    let child = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "-np",
            "2",
        ])
        .arg(env!("CARGO_BIN_EXE_btl-job-stranger"))
        .env_remove("BTL_JOB_KEY")
        .env_remove("BTL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let out = btl_tests::netns::Reaper(child).finish(Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("refused: peer lost: job key not proven"),
        "{stdout}"
    );
}
