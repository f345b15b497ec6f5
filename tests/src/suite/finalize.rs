//! `finalize`: every operation still outstanding ends exactly once, in
//! success or with `Finalized`, its event still delivered; a finalized BTL
//! delivers no more messages, refuses every new operation with
//! `Finalized`, and still takes back descriptors.

use btl_core::btl::{Access, BtlError, Tag};
use btl_core::desc::{DescFlags, Order};

use crate::suite::{local, register, remote};
use crate::track::{
    Message, Rdma, Seen, Tracker, assert_pools_idle, settle, start_rdma, try_send, try_sendi,
};
use crate::world::{Side, World};

/// Starts sends both ways (with each flag combination), `sendi`s, a put and
/// a get, polls nothing, and finalizes A. Each owed completion then comes
/// exactly once; A's are `Ok` or `Finalized`; A delivers no message
/// afterwards. (On the loopback nothing was delivered, so every queued
/// send fails with `Finalized`.)
pub fn outstanding_operations_fail_with_finalized_once(world: &mut dyn World) {
    let same = world.capabilities().same_btl;
    let mut tracker = Tracker::new(world);
    let a = register(world, Side::A, 4096, Access::empty(), Some(20));
    let b = register(world, Side::B, 4096, Access::all(), Some(21));
    let flag_sets = [
        DescFlags::empty(),
        DescFlags::ALWAYS_CALLBACK,
        DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK,
        DescFlags::BTL_OWNERSHIP,
    ];
    let mut sent = 0;
    for side in Side::BOTH {
        for (i, &flags) in flag_sets.iter().enumerate() {
            let payload = [i as u8; 100];
            let msg = Message {
                flags,
                ..Message::new(Tag(0xB0), &payload)
            };
            match try_send(world, &mut tracker, side, &msg) {
                Ok(()) => sent += 1,
                Err(BtlError::OutOfResource) => {}
                Err(e) => panic!("send before finalize: {e}"),
            }
        }
    }
    assert!(sent > 0, "no send was accepted");
    for i in 0..2u8 {
        match try_sendi(world, Side::A, &[], &[i], Tag(0xB1), Order::ANY) {
            Ok(()) | Err(BtlError::OutOfResource) => {}
            Err(e) => panic!("sendi before finalize: {e}"),
        }
    }
    let (l, r) = (local(a, 0, 512), remote(b, 1024, 512));
    start_rdma(world, &mut tracker, Side::A, Rdma::Put, l, r, 1);
    start_rdma(world, &mut tracker, Side::A, Rdma::Get, l, r, 2);
    let queued = tracker.owed();

    world.btl(Side::A).finalize();
    settle(world, &mut tracker);
    world.btl(Side::A).finalize();
    tracker.drain(world);

    let a_home = tracker.home(Side::A);
    for s in &tracker.seen {
        match s {
            Seen::Received { at, .. } => {
                assert_ne!(*at, a_home, "a finalized BTL delivered a message: {s:?}");
            }
            Seen::SendComplete { at, result, .. } if *at == a_home => assert!(
                matches!(result, Ok(()) | Err(BtlError::Finalized)),
                "a send of a finalized BTL: {s:?}"
            ),
            Seen::PutComplete { result, .. } | Seen::GetComplete { result, .. } => assert!(
                matches!(result, Ok(()) | Err(BtlError::Finalized)),
                "an rdma of a finalized BTL: {s:?}"
            ),
            _ => {}
        }
    }
    if same {
        let failed = tracker
            .seen
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    Seen::SendComplete {
                        result: Err(BtlError::Finalized),
                        ..
                    }
                )
            })
            .count();
        let owed_sends = flag_sets
            .iter()
            .filter(|f| **f != DescFlags::BTL_OWNERSHIP)
            .count()
            * 2;
        assert_eq!(
            failed, owed_sends,
            "undelivered sends that owed an event fail with Finalized (owed before: {queued})"
        );
    }
    assert_pools_idle(world, &tracker);
}

/// After `finalize`, `send` hands the descriptor back with `Finalized` (and
/// `free` still takes it), and `sendi`, `prepare_src`, `alloc`, `put`,
/// `get` and `register_mem` fail with `Finalized`.
pub fn later_calls_fail_with_finalized(world: &mut dyn World) {
    let a = register(world, Side::A, 64, Access::empty(), Some(30));
    let b = register(world, Side::B, 64, Access::all(), Some(31));
    let ep = world.peer(Side::A);
    let btl = world.btl(Side::A);
    let held = btl
        .prepare_src(ep, b"held", 0, Order::ANY, DescFlags::empty())
        .expect("prepare_src");
    btl.finalize();
    let refused = btl
        .send(ep, held, Tag(0xB2))
        .expect_err("send after finalize");
    assert_eq!(refused.error, BtlError::Finalized, "send");
    btl.free(refused.desc).expect("free after finalize");
    assert_eq!(
        btl.sendi(ep, &[], b"x", Tag(0xB2), Order::ANY, DescFlags::empty()),
        Err(BtlError::Finalized),
        "sendi"
    );
    for (what, result) in [
        (
            "prepare_src",
            btl.prepare_src(ep, b"x", 0, Order::ANY, DescFlags::empty()),
        ),
        ("alloc", btl.alloc(ep, Order::ANY, 1, DescFlags::empty())),
    ] {
        match result {
            Err(BtlError::Finalized) => {}
            Err(e) => panic!("{what}: expected Finalized, got {e}"),
            Ok(desc) => {
                btl.free(desc).expect("free");
                panic!("{what} after finalize succeeded");
            }
        }
    }
    let (l, r) = (local(a, 0, 8), remote(b, 0, 8));
    assert_eq!(btl.put(ep, l, r, 0), Err(BtlError::Finalized), "put");
    assert_eq!(btl.get(ep, l, r, 0), Err(BtlError::Finalized), "get");
    assert_eq!(
        btl.register_mem(vec![0; 8], Access::all())
            .map_err(|e| e.error),
        Err(BtlError::Finalized),
        "register_mem"
    );
    let mut tracker = Tracker::new(world);
    tracker.drain(world);
    assert!(
        tracker.seen.is_empty(),
        "events for refused calls: {:?}",
        tracker.seen
    );
    assert_pools_idle(world, &tracker);
}
