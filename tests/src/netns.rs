//! What the tests on real network devices share: whether this machine can
//! run them, commands that must succeed, namespaces that go when dropped,
//! and children that are killed when dropped and waited for in bounded
//! time. The tests need root and `ip` (iproute2); without them they say so
//! and pass.

use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Why this machine cannot run tests in network namespaces, if it cannot;
/// with `tap`, also those that need TAP devices.
pub fn unsupported(tap: bool) -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    if !Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some("no `ip` command (iproute2)".into());
    }
    if tap && !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    None
}

/// Runs `args`; panics with its error output unless it succeeds.
pub fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Namespace numbers handed out so far by this process.
static NUMBERS: AtomicU32 = AtomicU32::new(0);

/// `count` new network namespaces named `btl<N><letter>` (`a`, `b`, ...)
/// for a number `N` in 100..250 that no other test holds (`ip netns add`
/// fails on a name that exists, so two processes never share one), with
/// their loopback up; removed when dropped.
pub struct Namespaces {
    names: Vec<String>,
    number: u32,
}

impl Namespaces {
    /// Makes them.
    pub fn new(count: usize) -> Self {
        let first = NUMBERS.fetch_add(1, Ordering::Relaxed) + std::process::id();
        for k in 0..150 {
            let number = 100 + (first + k * 7) % 150;
            let mut names = Vec::new();
            for letter in ('a'..='z').take(count) {
                let name = format!("btl{number}{letter}");
                let made = Command::new("ip")
                    .args(["netns", "add", &name])
                    .output()
                    .is_ok_and(|o| o.status.success());
                if !made {
                    break;
                }
                names.push(name);
            }
            let ns = Namespaces { names, number };
            if ns.names.len() == count {
                for name in &ns.names {
                    sh(&["ip", "-n", name, "link", "set", "lo", "up"]);
                }
                return ns;
            }
            // Dropping `ns` removes the ones made: another test has this
            // number.
        }
        panic!("no free namespace number");
    }

    /// The name of namespace `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The number in the names, for addresses no other test uses
    /// (`10.N.x.y`).
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Makes a TAP device `device` in namespace `i`, with the kernel's
    /// side at `address` (ADDRESS/PREFIX), up: what a process on its own
    /// TCP/IP stack attaches to.
    pub fn add_tap(&self, i: usize, device: &str, address: &str) {
        let ns = self.name(i);
        sh(&[
            "ip", "-n", ns, "tuntap", "add", "dev", device, "mode", "tap",
        ]);
        sh(&["ip", "-n", ns, "addr", "add", address, "dev", device]);
        sh(&["ip", "-n", ns, "link", "set", device, "up"]);
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

/// Kills a child when dropped.
pub struct Reaper(pub Child);

impl Reaper {
    /// Waits for the child at most `limit`; its output, or a panic (the
    /// child killed).
    pub fn finish(mut self, limit: Duration) -> Output {
        let start = Instant::now();
        loop {
            if let Ok(Some(_)) = self.0.try_wait() {
                // The child has ended: take it out of the reaper, which
                // then has nothing left to kill.
                let child = std::mem::replace(
                    &mut self.0,
                    Command::new("true").spawn().expect("`true` runs"),
                );
                return child.wait_with_output().expect("the child's output");
            }
            assert!(
                start.elapsed() < limit,
                "the run did not end within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The next line the child writes on its (piped) standard output,
    /// read byte by byte, so that nothing after it is taken from the pipe.
    pub fn read_line(&mut self) -> String {
        let stdout = self.0.stdout.as_mut().expect("a piped standard output");
        let mut line = Vec::new();
        let mut byte = [0u8];
        while std::io::Read::read(stdout, &mut byte).is_ok_and(|n| n == 1) && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        String::from_utf8_lossy(&line).into_owned()
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` at most `limit`; its output, or a panic (the child
/// killed).
pub fn finish(child: Child, limit: Duration) -> Output {
    Reaper(child).finish(limit)
}
