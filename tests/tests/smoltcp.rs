//! The conformance suite against the engine over smoltcp: two boards on an
//! in-memory Ethernet cable, over TCP and over UDP, on a perfect cable and
//! on one that loses, duplicates and reorders frames.

use btl_core::btl::{BtlError, Event, LostReason, Tag};
use btl_core::time::Duration;
use btl_tests::harness::smoltcp::{FAULTS, PORT, SmolTcpWorld, SmolUdpWorld};
use btl_tests::world::{Side, World};

fn tcp() -> SmolTcpWorld {
    SmolTcpWorld::new()
}

fn tcp_faulty() -> SmolTcpWorld {
    SmolTcpWorld::with_faults(FAULTS)
}

fn udp() -> SmolUdpWorld {
    SmolUdpWorld::new()
}

fn udp_faulty() -> SmolUdpWorld {
    SmolUdpWorld::with_faults(FAULTS)
}

mod over_tcp {
    use super::*;
    btl_tests::conformance_suite!(tcp, gated: [pause, peer_loss]);
}

mod over_tcp_with_faults {
    use super::*;
    btl_tests::conformance_suite!(tcp_faulty, gated: [pause, peer_loss]);
}

mod over_udp {
    use super::*;
    btl_tests::conformance_suite!(udp, gated: [pause, peer_loss]);
}

mod over_udp_with_faults {
    use super::*;
    btl_tests::conformance_suite!(udp_faulty, gated: [pause, peer_loss]);
}

#[test]
fn the_faulty_cable_loses_duplicates_and_reorders_frames() {
    let mut world = tcp_faulty();
    btl_tests::suite::send::every_size_arrives_intact_once(&mut world);
    let tcp = world.wire().stats();
    let mut world = udp_faulty();
    btl_tests::suite::send::every_size_arrives_intact_once(&mut world);
    let udp = world.wire().stats();
    for stats in [tcp, udp] {
        assert!(
            stats.lost > 0 && stats.duplicated > 0 && stats.reordered > 0,
            "the cable did its worst: {stats:?}"
        );
    }
}

/// A's first message to B, once the world has run for at most `rounds`:
/// how A's engine ended it (the peer's loss, if it was lost).
fn first_message_fate<W: World>(world: &mut W, rounds: u32) -> Option<BtlError> {
    let b = world.peer(Side::A);
    world
        .btl(Side::A)
        .send_copy(b, Tag(1), b"hello")
        .expect("the message is taken");
    for _ in 0..rounds {
        world.progress();
        while let Some(event) = world.btl(Side::A).poll_event() {
            if let Event::Error(e) = event {
                return Some(e.error);
            }
        }
    }
    None
}

#[test]
fn a_port_nothing_listens_on_refuses_and_the_peer_is_lost_as_refused() {
    let mut world = tcp();
    world.point_at(Side::A, PORT + 1);
    let start = world.now();
    assert_eq!(
        first_message_fate(&mut world, 100),
        Some(BtlError::PeerLost(LostReason::Refused)),
        "B's stack answers the SYN with a reset"
    );
    assert!(
        world.now().since(start) < Duration::from_secs(1),
        "refused at once, not after the connect timeout"
    );
}

#[test]
fn an_address_nobody_answers_is_unreachable_after_the_connect_timeout() {
    let mut world = tcp();
    world.kill(Side::B);
    let start = world.now();
    assert_eq!(
        first_message_fate(&mut world, 1_000),
        Some(BtlError::PeerLost(LostReason::Unreachable)),
    );
    assert!(world.now().since(start) >= Duration::from_secs(5));
}
