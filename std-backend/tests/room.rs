//! A caller blocked in a wait after a refused send wakes when there is
//! room again, not at its timeout: `Event::Room` counts among the events
//! ready. Over UDP, where a message is one datagram and a run of them
//! fills the peer's queue at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, BtlError, Event, Tag};
use btl_core::endpoint::ProcName;
use btl_std::{Bml, ModuleBuilder};

const JOB: u64 = 0x7200;

/// Rank `rank`'s `Bml` of one UDP module, its card in `dir`.
fn open(dir: &std::path::Path, rank: u32) -> Bml {
    ModuleBuilder::new(ProcName::new(JOB, rank))
        .ignore_environment()
        .on_loopback()
        .shared_dir(dir)
        .param("btl", "udp")
        .open()
        .expect("a Bml of udp")
}

#[test]
fn a_wait_after_a_refused_send_ends_when_room_comes() {
    let dir = std::env::temp_dir().join(format!("btl-test-room-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut a = open(&dir, 0);
    let b = open(&dir, 1);
    // B takes every message as it comes, in its own thread, until it has
    // all that A says it sent.
    let expected = Arc::new(AtomicU64::new(u64::MAX));
    let receiver = {
        let expected = Arc::clone(&expected);
        std::thread::spawn(move || {
            let mut b = b;
            let mut got = 0u64;
            let start = Instant::now();
            while got < expected.load(Ordering::Relaxed)
                && start.elapsed() < Duration::from_secs(60)
            {
                b.wait(Duration::from_millis(10));
                while let Some(event) = b.poll_event() {
                    if let Event::Received(_) = event {
                        got += 1;
                    }
                }
            }
            got
        })
    };
    let to_b = a
        .reach(ProcName::new(JOB, 1), Duration::from_secs(5))
        .expect("B");
    let data = [7u8; 1000];
    let send_until_refused = |a: &mut Bml| {
        for taken in 0..100_000u64 {
            match a.send_copy(to_b, Tag(0x80), &data) {
                Ok(()) => {}
                Err(BtlError::OutOfResource) => return taken,
                Err(e) => panic!("send: {e}"),
            }
        }
        panic!("100,000 sends taken without a refusal");
    };
    let mut sent = 0;
    for round in 0..3 {
        sent += send_until_refused(&mut a);
        // Nothing else is owed to A: only room ends the wait early.
        let start = Instant::now();
        let ready = a.wait(Duration::from_secs(20));
        assert!(ready > 0, "round {round}: the wait ended without room");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "round {round}: woke {:?} after the refusal",
            start.elapsed()
        );
        let mut rooms = 0;
        while let Some(event) = a.poll_event() {
            match event {
                Event::Room { endpoint } => {
                    assert_eq!(endpoint, to_b);
                    rooms += 1;
                }
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(rooms, 1, "round {round}: one Room");
        a.send_copy(to_b, Tag(0x80), &data)
            .expect("what Room said there is room for");
        sent += 1;
    }
    a.flush(Duration::from_secs(10)).expect("all acknowledged");
    expected.store(sent, Ordering::Relaxed);
    let got = receiver.join().expect("B's thread");
    assert_eq!(got, sent, "every message taken arrived");
    let _ = std::fs::remove_dir_all(&dir);
}
