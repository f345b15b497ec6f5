//! The conformance suite against the shared-memory component: two of its
//! modules in one process, each with its segment in `/dev/shm`, opened
//! with the default parameters and joined through a shared directory;
//! then again with B a module of a child process (this binary started
//! again, as its ignored test `sm_side_b`).

use btl_tests::harness::sm::SmModuleWorld;

btl_tests::conformance_suite!(SmModuleWorld::new, gated: [pause]);

/// The limits the book's getting-started table gives for `sm`.
#[test]
fn the_default_limits_are_the_books() {
    use btl_tests::world::{Side, World};
    let mut world = SmModuleWorld::new();
    let attributes = world.btl(Side::A).attributes();
    assert_eq!(attributes.eager_limit, 4 << 10);
    assert_eq!(attributes.max_send_size, 32 << 10);
    assert_eq!(attributes.put_limit, u64::MAX >> 1);
    assert_eq!(attributes.get_limit, u64::MAX >> 1);
}

/// The conformance suite with B in a process of its own, killed for real
/// in the peer-loss group.
mod two_processes {
    use btl_tests::harness::sm::SmProcessesWorld;

    btl_tests::conformance_suite!(SmProcessesWorld::new, gated: [pause, peer_loss]);

    /// A process that sends and dies at once (a job's process that is
    /// done) loses nothing it sent: its peer's watch finds it ended before
    /// the peer has read its ring, and the messages still come first.
    #[test]
    fn what_a_killed_peer_wrote_before_it_died_is_read_before_it_is_lost() {
        use std::time::{Duration, Instant};

        use btl_std::transports::sm::WATCH_EVERY;
        use btl_std::{BtlError, Event, LostReason, Tag};
        use btl_tests::world::{Side, World};

        let mut world = SmProcessesWorld::new();
        let to_a = world.peer(Side::B);
        for i in 0..3u8 {
            world
                .btl(Side::B)
                .send_copy(to_a, Tag(0x30), &[i])
                .expect("B sends");
        }
        world.kill(Side::B);
        std::thread::sleep(3 * WATCH_EVERY);
        // Passes enough for A's watch to run before it takes an event.
        for _ in 0..1_000 {
            world.btl(Side::A).progress();
        }
        let (mut got, mut lost) = (Vec::new(), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while lost.is_none() && Instant::now() < deadline {
            world.btl(Side::A).progress();
            while let Some(ev) = world.btl(Side::A).poll_event() {
                match ev {
                    Event::Received(m) => got.push(m.data[0]),
                    Event::Error(e) => lost = Some(e.error),
                    _ => {}
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, [0, 1, 2], "every message, in order, before the loss");
        assert_eq!(lost, Some(BtlError::PeerLost(LostReason::Exited)));
    }
}

btl_tests::sm_side_b_process!();
