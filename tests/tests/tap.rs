//! The engine over smoltcp against the Linux stack: a process running btl
//! on its own TCP/IP stack (smoltcp) on a TAP device talks, through the
//! kernel, to a process on btl-std's sockets, inside a network namespace
//! the test makes. The interop conversation (`btl-exchange`) runs both
//! ways round (each side leads once: messages, a 4 MiB put with a notice,
//! a 4 MiB get, checked byte for byte on both sides), over TCP and over
//! UDP. Without root or `/dev/net/tun` the test says so and passes.

use std::process::{Command, Stdio};
use std::time::Duration;

use btl_tests::netns::{Namespaces, Reaper, finish, unsupported};

/// Bytes each side puts and gets per conversation.
const BULK: &str = "4194304";
/// How long one side's run may take.
const LIMIT: Duration = Duration::from_secs(90);

/// The smoltcp process on a TAP device in a namespace of its own (the
/// kernel's side of the TAP at `.1`, smoltcp at `.2`), and the std one
/// in the same namespace, on the kernel's stack.
fn interop(component: &str) {
    if let Some(why) = unsupported(true) {
        eprintln!("skipped: {why}");
        return;
    }
    let ns = Namespaces::new(1);
    let name = ns.name(0);
    let net = format!("10.{}.7", ns.number());
    ns.add_tap(0, "tap0", &format!("{net}.1/24"));
    let peer_port = if component == "tcp" { "7100" } else { "7200" };
    let cards = format!(
        "proc 1.0;tcp {net}.1/24 7100;udp {net}.1/24 7200;proc 1.1;tcp {net}.2/24 7000;udp {net}.2/24 7000"
    );

    // The smoltcp side follows first: it waits for the std side to lead.
    let mut board = Reaper(
        Command::new("ip")
            .args(["netns", "exec", name, env!("CARGO_BIN_EXE_btl-smoltcp-tap")])
            .args([component, "tap0", &format!("{net}.2/24"), "1.1", "1.0"])
            .args([&format!("{net}.1"), peer_port, "follow", BULK])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("btl-smoltcp-tap starts"),
    );
    assert_eq!(board.read_line(), "ready", "btl-smoltcp-tap comes up");

    let host = Command::new("ip")
        .args([
            "netns",
            "exec",
            name,
            env!("CARGO_BIN_EXE_btl-exchange-peer"),
        ])
        .args([component, "1.0", "1.1", "lead", BULK, &cards])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("btl-exchange-peer starts");
    let host = finish(host, LIMIT);
    let board = finish(
        std::mem::replace(&mut board.0, Command::new("true").spawn().expect("true")),
        LIMIT,
    );
    let said = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    for (who, out) in [("std", &host), ("smoltcp", &board)] {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{component}: the {who} side failed.\nstd: {}\nsmoltcp: {}",
            said(&host),
            said(&board)
        );
        for role in ["Lead", "Follow"] {
            assert!(
                stdout.contains(&format!("exchange ok: {role}, {BULK} bytes")),
                "{component}: the {who} side's conversation as {role}: {stdout}"
            );
        }
        eprintln!("{component}, {who}: {}", stdout.trim().replace('\n', "; "));
    }
}

#[test]
fn smoltcp_on_a_tap_talks_tcp_with_the_kernel() {
    interop("tcp");
}

#[test]
fn smoltcp_on_a_tap_talks_udp_with_the_kernel() {
    interop("udp");
}
