//! Two hosts in network namespaces joined by two veth pairs, each host a
//! `btl` process: interface selection, a link going down under traffic, a
//! peer killed mid-transfer, and UDP under kernel-injected loss and
//! duplication. The test builds and removes the namespaces itself; without
//! root or `ip` it says so and passes.
//!
//! The kernel of the machines this runs on has no `netem` queueing
//! discipline, so loss and duplication come from netfilter (`statistic`
//! match, `DROP` and `TEE`); it cannot reorder.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use btl_tests::netns::{Namespaces, Reaper, finish, sh, unsupported};

/// Hosts A and B, joined by links 1 and 2: `a1`–`b1` on 10.N.1.0/24 and
/// `a2`–`b2` on 10.N.2.0/24, A at .1 and B at .2.
struct Hosts {
    /// Held for the hosts' lifetime: the namespaces go with it.
    _namespaces: Namespaces,
    a: String,
    b: String,
    n: u32,
    dir: PathBuf,
}

impl Hosts {
    fn new() -> Self {
        let ns = Namespaces::new(2);
        let (a, b, n) = (ns.name(0).to_owned(), ns.name(1).to_owned(), ns.number());
        for link in 1..=2 {
            let (ea, eb) = (format!("a{link}x{n}"), format!("b{link}x{n}"));
            sh(&[
                "ip", "link", "add", &ea, "type", "veth", "peer", "name", &eb,
            ]);
            sh(&["ip", "link", "set", &ea, "netns", &a]);
            sh(&["ip", "link", "set", &eb, "netns", &b]);
            sh(&[
                "ip",
                "-n",
                &a,
                "link",
                "set",
                &ea,
                "name",
                &format!("a{link}"),
            ]);
            sh(&[
                "ip",
                "-n",
                &b,
                "link",
                "set",
                &eb,
                "name",
                &format!("b{link}"),
            ]);
            sh(&[
                "ip",
                "-n",
                &a,
                "addr",
                "add",
                &format!("10.{n}.{link}.1/24"),
                "dev",
                &format!("a{link}"),
            ]);
            sh(&[
                "ip",
                "-n",
                &b,
                "addr",
                "add",
                &format!("10.{n}.{link}.2/24"),
                "dev",
                &format!("b{link}"),
            ]);
            sh(&["ip", "-n", &a, "link", "set", &format!("a{link}"), "up"]);
            sh(&["ip", "-n", &b, "link", "set", &format!("b{link}"), "up"]);
        }
        let dir = std::env::temp_dir().join(format!("btl-netns-{n}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Hosts {
            _namespaces: ns,
            a,
            b,
            n,
            dir,
        }
    }

    /// `btl ARGS` on host `ns` with `env`, and the job key both hosts
    /// share.
    fn btl(&self, ns: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_btl")])
            .args(args)
            .env_remove("BTL_PARAM_FILE")
            .env("BTL_JOB_KEY", "the job key of the netns tests")
            .env("XDG_CONFIG_HOME", self.dir.join("no-config"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// `btl serve` on B, publishing its card in the shared directory.
    fn serve(&self, which: &str, env: &[(&str, &str)]) -> Reaper {
        // A card left by an earlier server would send clients to it.
        let card = self.dir.join("job-1651796992").join("0.card");
        let _ = std::fs::remove_file(&card);
        let dir = self.dir.to_string_lossy().into_owned();
        let child = self
            .btl(&self.b, &["serve", "--btl", which, "--dir", &dir], env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        // Its card is there once it prints where it listens.
        let start = Instant::now();
        while !card.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "serve never published its card"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Reaper(child)
    }

    /// `btl connect --dir` from A.
    fn connect(&self, which: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
        let dir = self.dir.to_string_lossy().into_owned();
        let mut all = vec!["connect", "--dir", &dir, "--btl", which];
        all.extend_from_slice(args);
        self.btl(&self.a, &all, env)
    }

    /// Bytes interface `dev` of host `ns` has sent.
    fn tx_bytes(&self, ns: &str, dev: &str) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "cat",
                &format!("/sys/class/net/{dev}/statistics/tx_bytes"),
            ])
            .output()
            .expect("cat");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    }

    fn addr(&self, link: u32, host: u32) -> String {
        format!("10.{}.{link}.{host}", self.n)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

macro_rules! skip_unless_supported {
    () => {
        if let Some(why) = unsupported(false) {
            eprintln!("skipped: network namespaces need root and iproute2 ({why})");
            return;
        }
    };
}

#[test]
fn if_include_puts_the_traffic_on_the_named_link() {
    skip_unless_supported!();
    let hosts = Hosts::new();
    let _server = hosts.serve("tcp", &[("BTL_TCP_IF_INCLUDE", "b2")]);
    let (before1, before2) = (
        hosts.tx_bytes(&hosts.a, "a1"),
        hosts.tx_bytes(&hosts.a, "a2"),
    );
    let out = finish(
        hosts
            .connect(
                "tcp",
                &[
                    "--test",
                    "bw",
                    "--min-size",
                    "1M",
                    "--max-size",
                    "1M",
                    "--window",
                    "4",
                    "--iters",
                    "5",
                    "--json",
                ],
                &[("BTL_TCP_IF_INCLUDE", "a2")],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("connect"),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (sent1, sent2) = (
        hosts.tx_bytes(&hosts.a, "a1") - before1,
        hosts.tx_bytes(&hosts.a, "a2") - before2,
    );
    assert!(sent2 > 20 << 20, "link 2 carried {sent2} bytes");
    assert!(sent1 < 1 << 20, "link 1 carried {sent1} bytes");
}

#[test]
fn traffic_goes_on_when_one_of_two_links_goes_down() {
    skip_unless_supported!();
    let hosts = Hosts::new();
    let env = [("BTL_TCP_LINKS", "2"), ("BTL_TCP_LINK_TIMEOUT", "500")];
    let _server = hosts.serve("tcp", &env);
    let run = hosts
        .connect(
            "tcp",
            // Seven sizes of up to 256 MiB each: seconds of traffic.
            &[
                "--test",
                "bw",
                "--min-size",
                "64k",
                "--max-size",
                "4M",
                "--window",
                "8",
                "--json",
            ],
            &env,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("connect");
    // Link 1 carries the first packets; then it goes down. (Waited for,
    // not slept on: a loaded machine starts the client late.)
    let busy = Instant::now();
    while hosts.tx_bytes(&hosts.a, "a1") <= 1 << 20 && busy.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let carried1 = hosts.tx_bytes(&hosts.a, "a1");
    sh(&["ip", "-n", &hosts.a, "link", "set", "a1", "down"]);
    let after_down2 = hosts.tx_bytes(&hosts.a, "a2");
    let out = finish(run, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        carried1 > 1 << 20,
        "link 1 carried {carried1} bytes before it went down"
    );
    let later2 = hosts.tx_bytes(&hosts.a, "a2") - after_down2;
    assert!(
        later2 > 1 << 20,
        "link 2 carried {later2} bytes after link 1 went down"
    );
}

#[test]
fn a_peer_killed_mid_transfer_fails_the_run_in_bounded_time() {
    skip_unless_supported!();
    let hosts = Hosts::new();
    let env = [("BTL_TCP_PEER_TIMEOUT", "2000")];
    let mut server = hosts.serve("tcp", &env);
    let run = hosts
        .connect(
            "tcp",
            &["--test", "bw", "--min-size", "64k", "--max-size", "4M"],
            &env,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("connect");
    std::thread::sleep(Duration::from_millis(500));
    let _ = server.0.kill();
    let out = finish(run, Duration::from_secs(30));
    assert!(
        !out.status.success(),
        "the run cannot succeed without its peer"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // Nothing listens where it was: its loss is the reason, said so.
    assert!(
        err.contains("connection refused by the server"),
        "the peer's loss is the reason: {err}"
    );
}

/// `iptables`, preferring the legacy front end: the kernel here offers
/// the `ip_tables` matches and targets.
fn iptables() -> Option<&'static str> {
    ["iptables-legacy", "iptables"].into_iter().find(|c| {
        Command::new(c)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Hosts whose UDP datagrams are each dropped with probability `loss`
/// and sent twice with `duplicate` (netfilter, on both hosts), or `None`
/// without iptables.
fn lossy_hosts(loss: &str, duplicate: &str) -> Option<Hosts> {
    let Some(ipt) = iptables() else {
        eprintln!("skipped: no iptables to inject loss and duplication");
        return None;
    };
    let hosts = Hosts::new();
    let udp_share = |p: &str| {
        [
            "-p",
            "udp",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
        ]
        .map(String::from)
        .into_iter()
        .chain([p.to_string()])
    };
    for (ns, peer) in [(&hosts.a, hosts.addr(1, 2)), (&hosts.b, hosts.addr(1, 1))] {
        let mut drop: Vec<String> = ["ip", "netns", "exec", ns, ipt, "-A", "OUTPUT"]
            .map(String::from)
            .to_vec();
        drop.extend(udp_share(loss));
        drop.extend(["-j", "DROP"].map(String::from));
        let mut tee: Vec<String> = [
            "ip", "netns", "exec", ns, ipt, "-t", "mangle", "-A", "OUTPUT",
        ]
        .map(String::from)
        .to_vec();
        tee.extend(udp_share(duplicate));
        tee.extend(["-j", "TEE", "--gateway", &peer].map(String::from));
        for rule in [drop, tee] {
            sh(&rule.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
    Some(hosts)
}

/// A ping-pong and then a bandwidth run over UDP from A to B, each of
/// every size up to 64 KiB, against one server. The server's peer timeout
/// is short: it loses the first client while it serves the second, and
/// must carry on.
fn udp_runs(hosts: &Hosts) {
    let env = [("BTL_UDP_IF_INCLUDE", "10.0.0.0/8")];
    let _server = hosts.serve(
        "udp",
        &[
            ("BTL_UDP_IF_INCLUDE", "b1"),
            ("BTL_UDP_PEER_TIMEOUT", "2000"),
        ],
    );
    for test in ["pingpong", "bw"] {
        let out = finish(
            hosts
                .connect(
                    "udp",
                    &[
                        "--test",
                        test,
                        "--max-size",
                        "64k",
                        "--iters",
                        "50",
                        "--json",
                    ],
                    &env,
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("connect"),
            Duration::from_secs(120),
        );
        assert!(
            out.status.success(),
            "{test}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(
            json["rows"].as_array().map(Vec::len),
            Some(17),
            "{test}: every size"
        );
    }
}

#[test]
fn udp_delivers_every_message_once_under_loss_and_duplication() {
    skip_unless_supported!();
    // 3 % of each host's datagrams dropped, 2 % sent twice.
    if let Some(hosts) = lossy_hosts("0.03", "0.02") {
        udp_runs(&hosts);
    }
}
