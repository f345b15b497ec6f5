//! The conformance suite against the TCP component: two modules over real
//! sockets on loopback.

use std::io::Write;
use std::sync::{Arc, Mutex};

use btl_std::transports::tcp::TcpModule;
use btl_tests::harness::sockets::SocketWorld;
use btl_tests::suite::handshake as refusals;
use btl_tests::world::World;

fn tcp() -> SocketWorld<TcpModule> {
    SocketWorld::new()
}

btl_tests::conformance_suite!(tcp, gated: [pause, peer_loss, handshake]);

/// Log lines written while a test runs on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A test of the suite.
type SuiteTest = fn(&mut dyn World);

/// Each refused handshake is logged once, as a warning naming its reason.
#[test]
fn a_refused_handshake_is_logged_once_with_its_reason() {
    let cases: [(SuiteTest, &str); 3] = [
        (
            refusals::wrong_version_is_refused,
            "protocol version mismatch",
        ),
        (refusals::wrong_job_key_is_refused, "authentication failed"),
        (refusals::garbage_handshake_is_refused, "protocol error"),
    ];
    for (test, reason) in cases {
        let log = Captured::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || test(&mut tcp()));
        let text = String::from_utf8(log.0.lock().expect("log buffer").clone()).expect("UTF-8");
        let refused: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("refused a connection"))
            .collect();
        assert_eq!(refused.len(), 1, "{reason}: {text}");
        assert!(refused[0].contains(reason), "{reason}: {text}");
        assert!(refused[0].contains("WARN"), "{text}");
    }
}
