//! `btl serve --tap`: the benchmark's answering side on the engine over
//! smoltcp, attached to a TAP device in a network namespace the test
//! makes, measured by `btl connect` on the kernel's stack, over TCP and
//! over UDP: every size up to 64 KiB comes back. Without root or
//! `/dev/net/tun` the test says so and passes.

use std::process::{Command, Stdio};
use std::time::Duration;

use btl_tests::netns::{Namespaces, Reaper, finish, unsupported};

/// The job key server and client share.
const KEY: &str = "the job key of the TAP tests";

fn measure_against_a_tap_server(component: &str) {
    if let Some(why) = unsupported(true) {
        eprintln!("skipped: {why}");
        return;
    }
    let ns = Namespaces::new(1);
    let name = ns.name(0);
    let net = format!("10.{}.9", ns.number());
    ns.add_tap(0, "tap0", &format!("{net}.1/24"));
    let mut server = Reaper(
        Command::new("ip")
            .args(["netns", "exec", name, env!("CARGO_BIN_EXE_btl"), "serve"])
            .args(["--btl", component, "--tap", "tap0"])
            .args(["--address", &format!("{net}.2/24")])
            .env("BTL_JOB_KEY", KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("btl serve starts"),
    );
    let line = server.read_line();
    assert!(
        line.starts_with(&format!(
            "listening on {component} {net}.2:7000 (smoltcp on tap0)"
        )),
        "btl serve --tap says where it listens: {line}"
    );
    let client = Command::new("ip")
        .args(["netns", "exec", name, env!("CARGO_BIN_EXE_btl"), "connect"])
        .arg(format!("{net}.2:7000"))
        .args([
            "--btl",
            component,
            "--test",
            "pingpong",
            "--max-size",
            "64k",
        ])
        .args(["--iters", "20", "--json"])
        .env("BTL_JOB_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("btl connect starts");
    let out = finish(client, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{component}: btl connect failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for size in [1, 1024, 65536] {
        assert!(
            stdout.contains(&format!("\"size\":{size}")),
            "{component}: a row for {size} bytes: {stdout}"
        );
    }
}

#[test]
fn btl_connect_measures_a_server_on_smoltcp_over_tcp() {
    measure_against_a_tap_server("tcp");
}

#[test]
fn btl_connect_measures_a_server_on_smoltcp_over_udp() {
    measure_against_a_tap_server("udp");
}
