//! The examples run as a user would run them: request/reply as two
//! processes on loopback, three clients with 256 requests outstanding
//! each, every request answered, 4 MiB put and checked; a job's process
//! started without a launcher, a job of one.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The example's binary, which `cargo test` builds beside the tests (and
/// this builds when only this test was built).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = dir.join("examples").join(name);
    if !path.is_file() {
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-p", "btl-std", "--example", name]);
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building the example: {status}");
    }
    path
}

/// Runs `cmd` to its end and returns what it printed, failing with its
/// output unless it succeeded.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}: {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn request_reply_answers_256_outstanding_requests_per_client_and_checks_a_put() {
    let path = example("request_reply");
    let start = Instant::now();
    let stdout = run(Command::new(&path).env("BTL_TCP_IF_INCLUDE", "lo"));
    assert_eq!(
        stdout.trim(),
        "3000 requests answered, 256 outstanding per client; 4 MiB put and checked"
    );
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_jobs_process_started_alone_is_a_singleton_that_reaches_itself_over_self() {
    let stdout = run(Command::new(example("job"))
        .env_remove("PMIX_NAMESPACE")
        .env_remove("BTL"));
    assert!(
        stdout.starts_with("rank 0 of 1: reached every process in")
            && stdout.contains(r#"{"self": 1}"#),
        "{stdout}"
    );
}
