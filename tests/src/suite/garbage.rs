//! Garbage on an established connection: the receiver drops that
//! connection, reports the peer lost for a protocol violation (not a
//! fatal error), fails what was outstanding on it exactly once, and does
//! not panic. Needs [`World::inject_garbage`].

use btl_core::btl::{BtlError, LostReason, Tag};

use crate::track::{
    Message, Seen, Tracker, assert_pools_idle, deliver, run_until, send, settle, try_send,
};
use crate::world::{Side, World};

/// A and B exchange a message; B queues sends to A; garbage then reaches B
/// on its connection from A. B reports A lost with `ProtocolViolation`,
/// every operation of either side ends exactly once, nothing is fatal,
/// and all fragments return to their pools.
pub fn garbage_drops_the_connection_not_the_process(world: &mut dyn World) {
    let caps = world.capabilities();
    assert!(
        caps.garbage && !caps.same_btl,
        "needs two processes and the garbage hook"
    );
    let mut tracker = Tracker::new(world);
    send(
        world,
        &mut tracker,
        Side::A,
        &Message::new(Tag(0xE0), b"hello"),
    );
    deliver(world, &mut tracker, 1);
    for i in 0..8u8 {
        match try_send(
            world,
            &mut tracker,
            Side::B,
            &Message::new(Tag(0xE1), &[i; 64]),
        ) {
            Ok(()) | Err(BtlError::OutOfResource) => {}
            Err(e) => panic!("send before the garbage: {e}"),
        }
    }
    world.inject_garbage(Side::B);
    let a_at_b = world.peer(Side::B);
    run_until(
        world,
        &mut tracker,
        "B drops A for a protocol violation",
        |t| {
            t.errors().any(|(at, e)| {
                at == Side::B
                    && e.endpoint == Some(a_at_b)
                    && e.error == BtlError::PeerLost(LostReason::ProtocolViolation)
            })
        },
    );
    settle(world, &mut tracker);
    for s in &tracker.seen {
        match s {
            Seen::Error { error, .. } => assert!(!error.fatal, "garbage failed a BTL: {s:?}"),
            Seen::SendComplete { result, .. } => assert!(
                matches!(result, Ok(()) | Err(BtlError::PeerLost(_))),
                "a send on a dropped connection: {s:?}"
            ),
            _ => {}
        }
    }
    assert_pools_idle(world, &tracker);
}
