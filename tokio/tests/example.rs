//! The async request/reply example runs as a user would run it: two
//! processes on loopback, three clients with 256 requests outstanding
//! each, every request answered, 4 MiB put and checked, every endpoint
//! closed, in bounded time.

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
        cargo.args(["build", "-p", "btl-tokio", "--example", name]);
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building the example: {status}");
    }
    path
}

#[test]
fn request_reply_answers_256_outstanding_requests_per_client_checks_a_put_and_closes() {
    let path = example("async_request_reply");
    let start = Instant::now();
    let out = Command::new(&path)
        .env("BTL_TCP_IF_INCLUDE", "lo")
        .output()
        .expect("the example runs");
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "3000 requests answered, 256 outstanding per client; 4 MiB put and checked"
    );
    // Each of its waits gives up after 20 s; a run takes about a second.
    assert!(took < Duration::from_secs(60), "the example took {took:?}");
}
