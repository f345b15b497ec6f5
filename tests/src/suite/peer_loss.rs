//! A peer that dies: every operation outstanding towards it ends exactly
//! once (success if it got through, `PeerLost` otherwise), the survivor
//! reports the loss as a non-fatal error for that endpoint, and later
//! operations towards it fail exactly once too. Needs [`World::kill`].

use btl_core::btl::{Access, BtlError, Tag};
use btl_core::desc::DescFlags;

use crate::suite::{local, register, remote};
use crate::track::{
    Message, Rdma, Seen, Tracker, assert_pools_idle, deliver, run_until, send, settle, start_rdma,
    try_rdma, try_send,
};
use crate::world::{Side, World};

/// Whether `result` is what an operation towards a lost peer may end with.
fn lost_or_done(result: &Result<(), BtlError>) -> bool {
    matches!(result, Ok(()) | Err(BtlError::PeerLost(_)))
}

/// A talks to B, starts sends (each flag combination, up to
/// `max_send_size`), a put and a get, then B is killed. A's operations end
/// exactly once; A reports B lost; new operations towards B fail once;
/// A's pools are whole again.
pub fn outstanding_operations_fail_once_when_the_peer_dies(world: &mut dyn World) {
    let caps = world.capabilities();
    assert!(
        caps.peer_loss && !caps.same_btl,
        "needs two processes and the kill hook"
    );
    let max = super::a_to_b(world).max_send_size;
    let mut tracker = Tracker::new(world);
    let a = register(world, Side::A, 4096, Access::empty(), Some(40));
    let b = register(world, Side::B, 4096, Access::all(), Some(41));
    send(
        world,
        &mut tracker,
        Side::A,
        &Message::new(Tag(0xC0), b"hello"),
    );
    deliver(world, &mut tracker, 1);

    let big = vec![3u8; max];
    for flags in [
        DescFlags::empty(),
        DescFlags::ALWAYS_CALLBACK,
        DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK,
        DescFlags::BTL_OWNERSHIP,
    ] {
        for payload in [&b"small"[..], &big] {
            let msg = Message {
                flags,
                ..Message::new(Tag(0xC1), payload)
            };
            match try_send(world, &mut tracker, Side::A, &msg) {
                Ok(()) | Err(BtlError::OutOfResource) => {}
                Err(e) => panic!("send before the loss: {e}"),
            }
        }
    }
    let (l, r) = (local(a, 0, 2048), remote(b, 0, 2048));
    start_rdma(world, &mut tracker, Side::A, Rdma::Put, l, r, 1);
    start_rdma(world, &mut tracker, Side::A, Rdma::Get, l, r, 2);

    world.kill(Side::B);
    tracker.kill(Side::B);
    settle(world, &mut tracker);
    let ep = world.peer(Side::A);
    run_until(world, &mut tracker, "A reports B lost", |t| {
        t.errors()
            .any(|(_, e)| e.endpoint == Some(ep) && matches!(e.error, BtlError::PeerLost(_)))
    });
    for s in &tracker.seen {
        match s {
            Seen::SendComplete { result, .. }
            | Seen::PutComplete { result, .. }
            | Seen::GetComplete { result, .. } => {
                assert!(
                    lost_or_done(result),
                    "an operation towards a lost peer: {s:?}"
                );
            }
            Seen::Error { error, .. } => assert!(!error.fatal, "losing a peer is not fatal: {s:?}"),
            Seen::Received { .. } | Seen::Room { .. } => {}
            Seen::PeerLeft { .. } => panic!("a killed peer says no goodbye: {s:?}"),
            Seen::PutArrived { .. } => panic!("no put asked for a notice: {s:?}"),
        }
    }

    tracker.take();
    let immediate = [
        try_send(
            world,
            &mut tracker,
            Side::A,
            &Message::new(Tag(0xC2), b"late"),
        )
        .err(),
        try_rdma(world, Side::A, Rdma::Put, l, r, 3)
            .map(|op| tracker.started(Side::A, Rdma::Put, op, 3))
            .err(),
    ];
    for e in immediate.into_iter().flatten() {
        assert!(
            matches!(e, BtlError::PeerLost(_) | BtlError::Unreachable),
            "a new operation towards a lost peer: {e}"
        );
    }
    settle(world, &mut tracker);
    for s in &tracker.seen {
        if let Seen::SendComplete { result, .. }
        | Seen::PutComplete { result, .. }
        | Seen::GetComplete { result, .. } = s
        {
            assert!(
                result.is_err(),
                "a new operation towards a lost peer succeeded: {s:?}"
            );
        }
    }
    assert_pools_idle(world, &tracker);
}
