//! `btl serve --metrics` under load: a client in this process runs the
//! message-rate benchmark against a real `btl serve`, a scraper reads the
//! server's metrics meanwhile, and when the run is over what the server
//! counted of the client matches what the client counted of itself, and
//! `btl stats` prints the client's line.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use btl_cli::bench::{self, Plan, Test, Waiting};
use btl_cli::stats::{Sample, fetch, parse};
use btl_std::bootstrap::StaticPeers;
use btl_std::metrics::Observed;
use btl_std::{ModuleBuilder, ProcName};

/// Kills the server however the test ends.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of `name` for the series whose labels include `with`.
fn value(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[test]
fn a_serve_under_load_counts_what_its_client_sent() {
    let mut server = Reaper(
        Command::new(env!("CARGO_BIN_EXE_btl"))
            .args(["serve", "--no-key", "--metrics", "127.0.0.1:0"])
            .env_remove("BTL_PARAM_FILE")
            .env_remove("BTL_JOB_KEY")
            .env("BTL_TCP_IF_INCLUDE", "lo")
            .env(
                "XDG_CONFIG_HOME",
                std::env::temp_dir().join("btl-cli-test-no-config"),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts"),
    );
    let mut lines = BufReader::new(server.0.stdout.take().expect("piped")).lines();
    let (mut address, mut metrics) = (None, None);
    while metrics.is_none() {
        let line = lines
            .next()
            .expect("serve prints its addresses")
            .expect("text");
        let word_after = |w: &str| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let i = words.iter().position(|x| *x == w)?;
            words.get(i + 1).map(|s| s.to_string())
        };
        if address.is_none() {
            address = word_after("connect");
        }
        metrics = word_after("stats");
    }
    let (address, metrics) = (address.expect("a TCP address"), metrics.expect("metrics"));

    let me = ProcName::new(0x5ca1e, 0);
    let me_label = me.to_string();
    let mut client = ModuleBuilder::new(me)
        .ignore_environment()
        .param("btl", "tcp")
        .param("btl_tcp_if_include", "lo")
        .bootstrap(Arc::new(StaticPeers::new(Vec::new(), "one server")))
        .open()
        .expect("a TCP module");
    let (server_ep, _) = client
        .connect_to(&address, Duration::from_secs(10))
        .expect("the server answers");

    // A scraper reads the server while the client keeps it busy.
    let done = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (done, metrics, me) = (Arc::clone(&done), metrics.clone(), me_label.clone());
        std::thread::spawn(move || {
            let (mut scrapes, mut seen_open, mut last) = (0, 0, 0.0);
            while !done.load(Ordering::Relaxed) {
                let samples = parse(&fetch(&metrics).expect("a scrape under load"));
                let peer = [("component", "tcp"), ("peer", me.as_str())];
                let got = value(&samples, "btl_peer_messages_received_total", &peer);
                if let Some(got) = got {
                    assert!(got >= last, "a counter went back: {got} after {last}");
                    last = got;
                    let open = [("peer", me.as_str()), ("state", "open")];
                    seen_open += usize::from(value(&samples, "btl_peer_state", &open) == Some(1.0));
                }
                scrapes += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (scrapes, seen_open)
        })
    };
    let plan = Plan {
        test: Test::Rate,
        sizes: vec![8, 64, 1024],
        warmup: 10,
        iters: 400,
        exact: true,
        window: 64,
    };
    let started = Instant::now();
    bench::lead(&mut client, server_ep, &plan, Waiting::Poll, |_| {}).expect("the run");
    let run = started.elapsed();
    client
        .flush(Duration::from_secs(5))
        .expect("all acknowledged");
    done.store(true, Ordering::Relaxed);
    let (scrapes, seen_open) = scraper.join().expect("the scraper");
    assert!(scrapes >= 2, "{scrapes} scrapes in a run of {run:?}");
    assert!(seen_open >= 1, "the client was seen open under load");

    // What the client counted of the server, and the server of the client.
    let mut own = Vec::new();
    client.snapshots(&mut own);
    let sent = own[0].peers[0].metrics;
    assert!(
        sent.messages_sent >= 3 * 410,
        "the client sent its messages: {sent:?}"
    );
    let peer = [("component", "tcp"), ("peer", me_label.as_str())];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let samples = parse(&fetch(&metrics).expect("a scrape"));
        let counted = |name| value(&samples, name, &peer).unwrap_or(-1.0) as u64;
        let seen = [
            counted("btl_peer_messages_received_total"),
            counted("btl_peer_received_bytes_total"),
            counted("btl_peer_messages_sent_total"),
            counted("btl_peer_sent_bytes_total"),
        ];
        let expected = [
            sent.messages_sent,
            sent.bytes_sent,
            sent.messages_received,
            sent.bytes_received,
        ];
        if seen == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server's count of the client {seen:?} is not the client's {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let out = Command::new(env!("CARGO_BIN_EXE_btl"))
        .args(["stats", &metrics])
        .output()
        .expect("btl stats runs");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with(&me_label))
        .unwrap_or_else(|| panic!("the client's line in:\n{table}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[1], "open", "{table}");
    assert_eq!(
        words[4],
        sent.messages_sent.to_string(),
        "received: {table}"
    );
}
