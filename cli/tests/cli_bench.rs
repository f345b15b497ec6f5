//! The measuring commands as a user runs them: the real `btl` binary, which
//! starts its own peer process (or, for serve/connect, two of them here).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn btl_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_btl"));
    cmd.args(args);
    no_settings(&mut cmd);
    cmd
}

/// Runs `cmd` with none of the user's btl settings: no parameter file, no
/// job key, no configuration directory.
fn no_settings(cmd: &mut Command) {
    cmd.env_remove("BTL_PARAM_FILE")
        .env_remove("BTL_JOB_KEY")
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("btl-cli-test-no-config"),
        );
}

fn run(args: &[&str]) -> Output {
    let out = btl_cmd(args).output().expect("btl runs");
    assert!(
        out.status.success(),
        "btl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The JSON rows of a run.
fn rows(out: &Output) -> Vec<serde_json::Value> {
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    json["rows"].as_array().expect("rows").clone()
}

#[test]
fn pingpong_over_tcp_prints_a_row_per_size() {
    let out = run(&[
        "pingpong",
        "--btl",
        "tcp",
        "--max-size",
        "64k",
        "--iters",
        "20",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("btl pingpong over tcp, 2 processes on loopback"),
        "{text}"
    );
    // 1 B .. 64 KiB: 17 sizes, each a row with a positive latency.
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 17, "{text}");
    for row in rows {
        let median: f64 = row
            .split_whitespace()
            .nth(2)
            .expect("median")
            .parse()
            .expect("number");
        assert!(median > 0.0, "{row}");
    }
}

/// With no `--btl`, the two processes of one host meet over shared memory
/// (the default selection, `self,sm,tcp`); a list leaves it out, and a
/// list that names no component is refused with the components there are.
#[test]
fn pingpong_picks_the_best_btl_the_list_selects() {
    let title = |args: &[&str]| {
        let out = run(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().next().unwrap_or_default().to_owned()
    };
    let small = ["--max-size", "8", "--iters", "20"];
    let by_default = title(&[&["pingpong"][..], &small].concat());
    assert!(
        by_default.contains("over sm, 2 processes of one host"),
        "{by_default}"
    );
    let without_sm = title(&[&["pingpong", "--btl", "^sm"][..], &small].concat());
    assert!(without_sm.contains("over tcp"), "{without_sm}");
    let out = btl_cmd(&["pingpong", "--btl", "sm,shmem"])
        .output()
        .expect("btl runs");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no component shmem") && said.contains("self, sm, tcp, udp"),
        "{said}"
    );
}

#[test]
fn every_btl_and_test_reports_json() {
    for which in ["tcp", "udp", "sm", "self"] {
        for test in ["pingpong", "bw", "rate"] {
            let out = run(&[
                test,
                "--btl",
                which,
                "--min-size",
                "8",
                "--max-size",
                "4k",
                "--iters",
                "10",
                "--window",
                "8",
                "--json",
            ]);
            let rows = rows(&out);
            assert!(!rows.is_empty(), "{which} {test}");
            for r in &rows {
                assert!(
                    r["msgs_per_s"].as_f64().is_some_and(|v| v > 0.0),
                    "{which} {test}: {r}"
                );
            }
        }
    }
}

#[test]
fn blocking_waits_work_too() {
    let out = run(&[
        "pingpong",
        "--wait",
        "block",
        "--max-size",
        "1k",
        "--iters",
        "20",
        "--json",
    ]);
    assert_eq!(rows(&out).len(), 11);
}

/// Kills a child when dropped: a test that fails leaves no process behind.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn connect_runs_against_serve() {
    for which in ["tcp", "udp"] {
        let mut server = Reaper(
            btl_cmd(&["serve", "--btl", which])
                .env(format!("BTL_{}_IF_INCLUDE", which.to_uppercase()), "lo")
                .stdout(Stdio::piped())
                .spawn()
                .expect("serve starts"),
        );
        let stdout = server.0.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("serve prints its address");
        let address = line
            .split_whitespace()
            .find(|w| w.parse::<std::net::SocketAddr>().is_ok())
            .unwrap_or_else(|| panic!("an address in {line:?}"))
            .to_string();
        // The server made a job key and printed it with the command.
        let key = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("BTL_JOB_KEY="))
            .unwrap_or_else(|| panic!("a job key in {line:?}"))
            .to_string();
        assert_eq!(key.len(), 32, "16 random bytes in hexadecimal: {key}");
        let start = Instant::now();
        // A client without it is refused, and told why.
        let out = btl_cmd(&["connect", &address, "--btl", which, "--max-size", "64"])
            .output()
            .expect("btl runs");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(said.contains("job key not proven"), "{said}");
        for test in ["pingpong", "bw"] {
            let out = run(&[
                "connect",
                &address,
                "--key",
                &key,
                "--btl",
                which,
                "--test",
                test,
                "--max-size",
                "4k",
                "--iters",
                "10",
                "--json",
            ]);
            assert!(!rows(&out).is_empty());
        }
        // The same server named by an endpoint address, in Motr's form.
        let at: std::net::SocketAddr = address.parse().expect("an address");
        let endpoint = format!("inet:{which}:{}@{}", at.ip(), at.port());
        // The key from the environment, as the server's line gives it.
        let out = btl_cmd(&[
            "connect",
            &endpoint,
            "--btl",
            which,
            "--max-size",
            "64",
            "--iters",
            "5",
            "--json",
        ])
        .env("BTL_JOB_KEY", &key)
        .output()
        .expect("btl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!rows(&out).is_empty(), "{endpoint}");
        // One naming the other component is refused, saying which to use.
        let other = if which == "tcp" { "udp" } else { "tcp" };
        let out = btl_cmd(&["connect", &endpoint, "--btl", other])
            .output()
            .expect("btl runs");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(said.contains(&format!("give --btl {which}")), "{said}");
        assert!(start.elapsed() < Duration::from_secs(60));
    }
}

/// A loopback port nothing listens on now (bound, then let go).
fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    socket.local_addr().expect("its address").port()
}

#[test]
fn connect_waits_for_a_server_started_after_it() {
    let port = free_port().to_string();
    let key = "a key both sides were given";
    // Bounded by itself: it waits 10 s at most for a server.
    let client = btl_cmd(&[
        "connect",
        &format!("127.0.0.1:{port}"),
        "--max-size",
        "64",
        "--iters",
        "5",
        "--json",
    ])
    .env("BTL_JOB_KEY", key)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("connect starts");
    std::thread::sleep(Duration::from_millis(500));
    let _server = Reaper(
        btl_cmd(&["serve"])
            .env("BTL_JOB_KEY", key)
            .env("BTL_TCP_IF_INCLUDE", "lo")
            .env("BTL_TCP_PORT_MIN", &port)
            .env("BTL_TCP_PORT_RANGE", "1")
            .stdout(Stdio::null())
            .spawn()
            .expect("serve starts"),
    );
    let out = client.wait_with_output().expect("connect ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rows(&out).len(), 7, "1 to 64 bytes, measured");
}

#[test]
fn serve_listens_on_every_btl_its_list_selects() {
    let mut server = Reaper(
        btl_cmd(&["serve", "--btl", "tcp,udp"])
            .env("BTL_TCP_IF_INCLUDE", "lo")
            .env("BTL_UDP_IF_INCLUDE", "lo")
            .env("BTL_JOB_KEY", "k")
            .stdout(Stdio::piped())
            .spawn()
            .expect("serve starts"),
    );
    let mut stdout = BufReader::new(server.0.stdout.take().expect("piped"));
    // A line per address (127.0.0.1 and ::1 of each), until both came.
    let mut at: Vec<(&str, String)> = Vec::new();
    while !(at.iter().any(|a| a.0 == "tcp") && at.iter().any(|a| a.0 == "udp")) {
        assert!(at.len() < 8, "{at:?}");
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a line per address");
        let component = if line.starts_with("listening on tcp ") {
            "tcp"
        } else if line.starts_with("listening on udp ") {
            "udp"
        } else {
            panic!("{line:?}");
        };
        let address = line
            .split_whitespace()
            .find(|w| w.parse::<std::net::SocketAddr>().is_ok())
            .unwrap_or_else(|| panic!("an address in {line:?}"))
            .to_string();
        at.push((component, address));
    }
    for (component, address) in &at {
        let out = btl_cmd(&[
            "connect",
            address,
            "--btl",
            component,
            "--max-size",
            "64",
            "--iters",
            "5",
            "--json",
        ])
        .env("BTL_JOB_KEY", "k")
        .output()
        .expect("btl runs");
        assert!(
            out.status.success(),
            "{component}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = rows(&out);
        assert!(!doc.is_empty());
    }
}

#[test]
fn baseline_runs_the_same_plan_over_a_raw_socket_and_draws_it() {
    let svg = std::env::temp_dir().join(format!("btl-baseline-{}.svg", std::process::id()));
    let out = run(&[
        "pingpong",
        "--btl",
        "tcp",
        "--baseline",
        "--max-size",
        "64",
        "--iters",
        "10",
        "--json",
        "--svg",
        svg.to_str().expect("a path"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    assert_eq!(docs[0]["rows"].as_array().map(Vec::len), Some(7));
    assert_eq!(docs[1]["baseline"], "raw tcp");
    assert_eq!(docs[1]["rows"].as_array().map(Vec::len), Some(7));
    let drawn = std::fs::read_to_string(&svg).expect("the chart");
    assert!(drawn.starts_with("<svg"), "an SVG");
    assert!(
        drawn.contains("btl tcp") && drawn.contains("raw tcp"),
        "named lines"
    );
    let _ = std::fs::remove_file(svg);
}

#[test]
fn an_sm_baseline_runs_over_a_unix_socket_beside_memcpy_and_waits_asleep_too() {
    let out = run(&[
        "pingpong",
        "--btl",
        "sm",
        "--baseline",
        "--max-size",
        "64",
        "--iters",
        "10",
        "--json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(docs.len(), 3, "{text}");
    assert!(
        docs[0]["btl"]
            .as_str()
            .is_some_and(|t| t.contains("over sm, 2 processes of one host")),
        "{text}"
    );
    assert_eq!(docs[1]["baseline"], "raw unix");
    assert_eq!(docs[2]["baseline"], "memcpy");
    for doc in &docs {
        assert_eq!(doc["rows"].as_array().map(Vec::len), Some(7), "{doc}");
    }
    let asleep = run(&[
        "pingpong",
        "--btl",
        "sm",
        "--wait",
        "block",
        "--max-size",
        "1k",
        "--iters",
        "20",
        "--json",
    ]);
    assert_eq!(rows(&asleep).len(), 11);
}

/// The system calls of `btl ARGS` and of the process it starts, as
/// `strace -f -c` counts them; `None` where strace is missing.
fn system_calls(args: &[&str]) -> Option<u64> {
    let out = std::env::temp_dir().join(format!("btl-cli-strace-{}", std::process::id()));
    let mut strace = Command::new("strace");
    strace
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .arg(env!("CARGO_BIN_EXE_btl"))
        .args(args)
        .stdout(Stdio::null());
    no_settings(&mut strace);
    let status = strace.status().ok()?;
    assert!(status.success(), "btl {args:?} under strace");
    let summary = std::fs::read_to_string(&out).expect("strace's summary");
    let _ = std::fs::remove_file(&out);
    let total = summary
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .expect("a total line");
    // % time, seconds, usecs/call, calls, [errors], "total".
    Some(
        total
            .split_whitespace()
            .nth(3)
            .expect("calls")
            .parse()
            .expect("a count"),
    )
}

/// Busy-polling over `sm` makes no system call per message: `btl rate`
/// and `btl pingpong` moving a hundred times as many messages make about
/// as many calls: start-up, and the watch on the peer's process every
/// 10 ms of the run, which grows with its time (a loaded machine runs the
/// longer run slower). Far fewer than one per ten of the extra messages,
/// where a call per message would make at least one each.
#[test]
fn busy_polling_over_sm_makes_no_system_call_per_message() {
    for (test, window) in [("rate", 64u64), ("pingpong", 2)] {
        let run = |iters: u64| {
            let iters = iters.to_string();
            let args = [test, "--btl", "sm", "--min-size", "8", "--max-size", "8"];
            system_calls(&[&args[..], &["--iters", &iters, "--warmup", "0"]].concat())
        };
        let Some(few) = run(100) else {
            eprintln!("SKIP: no strace here (scripts/test installs it)");
            return;
        };
        let many = run(10_000).expect("strace ran once");
        let more_messages = (10_000 - 100) * window;
        assert!(
            many < few + more_messages / 10,
            "{test}: {few} system calls for 100 iterations, {many} for 10,000 ({more_messages} more messages)"
        );
    }
}

/// `--idle N` connects N peers of a third process to the second before the
/// run (more than the default 64 peer slots: the second is given room),
/// and is refused over a BTL that is not a network's.
#[test]
fn idle_peers_connect_to_the_second_process_before_the_run() {
    let out = run(&[
        "pingpong",
        "--btl",
        "tcp",
        "--idle",
        "80",
        "--max-size",
        "64",
        "--iters",
        "50",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("80 idle peers connected to the second"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| !l.starts_with('#')).count(),
        7,
        "{text}"
    );
    let out = btl_cmd(&["pingpong", "--btl", "sm", "--idle", "4"])
        .output()
        .expect("btl runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--btl tcp or --btl udp"), "{err}");
}
