//! The flight recorder on a real two-process run over TCP: `btl serve`
//! records, a `btl connect` client is killed in the middle of a transfer,
//! the server writes its record when it gives the client up, and `btl
//! replay` feeds the record to a fresh engine, which does the same.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use btl_core::engine::journal::{Call, Entry};

/// Kills a process however the test ends.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn btl_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_btl"));
    cmd.args(args)
        .env_remove("BTL_PARAM_FILE")
        .env_remove("BTL_JOB_KEY")
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("btl-cli-test-no-config"),
        );
    cmd
}

/// A directory of its own, removed at the end.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_client_killed_mid_transfer_is_recorded_and_the_record_replays() {
    let dir = Scratch(std::env::temp_dir().join(format!("btl-record-test-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("a scratch directory");
    let mut server = Reaper(
        btl_cmd(&["serve", "--no-key"])
            .env("BTL_TCP_IF_INCLUDE", "lo")
            .env("BTL_TCP_RECORD", "256M")
            .env("BTL_TCP_RECORD_DIR", &dir.0)
            // The killed client is given up a second after it went.
            .env("BTL_TCP_PEER_TIMEOUT", "1000")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts"),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("serve prints its address");
    let address = line
        .split_whitespace()
        .find(|w| w.parse::<std::net::SocketAddr>().is_ok())
        .unwrap_or_else(|| panic!("an address in {line:?}"))
        .to_string();

    let mut client = Reaper(
        btl_cmd(&[
            "connect",
            &address,
            "--btl",
            "tcp",
            "--test",
            "pingpong",
            "--min-size",
            "64",
            "--max-size",
            "64",
            "--iters",
            "10000000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("connect starts"),
    );
    // Well into the transfer, the client dies without a word.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        client.0.try_wait().expect("the client").is_none(),
        "still sending"
    );
    client.0.kill().expect("killed");
    let _ = client.0.wait();

    let deadline = Instant::now() + Duration::from_secs(20);
    let record = loop {
        let found = std::fs::read_dir(&dir.0)
            .expect("the directory")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "record"));
        if let Some(path) = found {
            break path;
        }
        assert!(
            Instant::now() < deadline,
            "no record written after the client was killed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The record is written whole before the server says so; give it the
    // moment a large record takes.
    std::thread::sleep(Duration::from_millis(500));
    drop(server);

    let out = btl_cmd(&["replay", record.to_str().expect("a path")])
        .output()
        .expect("btl replay runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("record of tcp process"), "{said}");
    assert!(said.contains("lost"), "why it was written: {said}");
    let replayed: Vec<u64> = said
        .lines()
        .find(|l| l.starts_with("matched:"))
        .unwrap_or_else(|| panic!("a match in {said}"))
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        replayed[0] > 1000 && replayed[1] > 10 && replayed[2] > 10,
        "calls, transmits and events replayed: {said}"
    );

    // What the client sent, changed by one byte: the replay goes another
    // way, and says so.
    let mut bent = btl_std::driver::recorder::Record::load(&record).expect("a record");
    let mut offset = 0;
    let journal = bent.journal.clone();
    while offset < journal.len() {
        let (entry, len) = Entry::decode(&journal[offset..]).expect("entries");
        if let Call::Stream { data, .. } = entry.call
            && data.len() >= 32
        {
            // The first frame's type: what follows reads differently.
            bent.journal[offset + 9] ^= 0xff;
            break;
        }
        offset += len;
    }
    let path = dir.0.join("bent.record");
    bent.save(&path).expect("written");
    let out = btl_cmd(&["replay", path.to_str().expect("a path")])
        .output()
        .expect("btl replay runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("did not match"), "{err}");
}
