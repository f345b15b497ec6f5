//! A peer's put or get is checked against the target's registration: out
//! of bounds, an access the region does not allow, a stale key after
//! deregistration, a garbage key. Each is refused with
//! `BtlError::Rejected(code)` in its completion, and no byte of any
//! region changes. The initiator's own slice is checked at the call.

use btl_core::btl::{Access, BtlError, MemError, MemHandle, RejectCode, RemoteKey, RemoteSlice};

use crate::suite::{local, region_sum, register, remote};
use crate::track::{Rdma, Seen, Tracker, assert_pools_idle, round, settle, start_rdma, try_rdma};
use crate::world::{Side, World};

/// Size of the target regions.
const TARGET: u64 = 64;
/// Size of the initiator's local region: larger than any target, so that
/// the local slice is valid whenever the remote one is out of bounds.
const LOCAL: u64 = 256;

/// Regions of both sides whose checksums must not change.
struct Watched {
    regions: Vec<(Side, MemHandle)>,
}

impl Watched {
    fn sums(&self, world: &mut dyn World) -> Vec<u64> {
        self.regions
            .iter()
            .map(|&(side, h)| region_sum(world, side, h))
            .collect()
    }
}

/// Starts `kind` from A with the local slice at offset 0 and the given
/// remote slice, and checks that it completes exactly once with
/// `Rejected(code)` and that no watched region changed.
fn expect_rejected(
    world: &mut dyn World,
    watched: &Watched,
    a_local: MemHandle,
    kind: Rdma,
    target: RemoteSlice,
    code: RejectCode,
) {
    let before = watched.sums(world);
    let mut tracker = Tracker::new(world);
    let len = target.len.min(LOCAL);
    let op = start_rdma(
        world,
        &mut tracker,
        Side::A,
        kind,
        local(a_local, 0, len),
        target,
        0xBAD,
    );
    settle(world, &mut tracker);
    let result = tracker.seen.iter().find_map(|s| match s {
        Seen::PutComplete { op: o, result, .. } | Seen::GetComplete { op: o, result, .. }
            if *o == op =>
        {
            Some(*result)
        }
        _ => None,
    });
    assert_eq!(
        result,
        Some(Err(BtlError::Rejected(code))),
        "{kind:?} of {target:?}"
    );
    assert_eq!(
        watched.sums(world),
        before,
        "{kind:?} of {target:?} changed memory"
    );
    assert_pools_idle(world, &tracker);
}

/// A's local region and B's read-write target, both watched.
fn setup(world: &mut dyn World) -> (MemHandle, MemHandle, Watched) {
    let a = register(world, Side::A, LOCAL as usize, Access::empty(), Some(10));
    let b = register(world, Side::B, TARGET as usize, Access::all(), Some(11));
    let watched = Watched {
        regions: vec![(Side::A, a), (Side::B, b)],
    };
    (a, b, watched)
}

/// Ranges past the end, overlapping the end, wrapping around `u64`, and
/// longer than the region are `Rejected(OutOfBounds)` for put and get.
pub fn out_of_bounds_is_rejected(world: &mut dyn World) {
    let (a, b, watched) = setup(world);
    let key = b.remote_key();
    let cases = [
        (TARGET, 1),
        (TARGET - 3, 4),
        (TARGET + 1000, 8),
        (0, TARGET + 1),
        (u64::MAX - 3, 8),
        (u64::MAX, 1),
    ];
    for (offset, len) in cases {
        for kind in [Rdma::Put, Rdma::Get] {
            let target = RemoteSlice { key, offset, len };
            expect_rejected(world, &watched, a, kind, target, RejectCode::OutOfBounds);
        }
    }
}

/// A put into a region peers may only read, a get from one they may only
/// write, and either on a region with no remote access are
/// `Rejected(AccessDenied)`.
pub fn access_is_enforced(world: &mut dyn World) {
    let (a, _, mut watched) = setup(world);
    let ro = register(
        world,
        Side::B,
        TARGET as usize,
        Access::REMOTE_READ,
        Some(12),
    );
    let wo = register(
        world,
        Side::B,
        TARGET as usize,
        Access::REMOTE_WRITE,
        Some(13),
    );
    let none = register(world, Side::B, TARGET as usize, Access::empty(), Some(14));
    watched
        .regions
        .extend([(Side::B, ro), (Side::B, wo), (Side::B, none)]);
    let denied = RejectCode::AccessDenied;
    let whole = |h| remote(h, 0, TARGET);
    expect_rejected(world, &watched, a, Rdma::Put, whole(ro), denied);
    expect_rejected(world, &watched, a, Rdma::Get, whole(wo), denied);
    expect_rejected(world, &watched, a, Rdma::Put, whole(none), denied);
    expect_rejected(world, &watched, a, Rdma::Get, whole(none), denied);
}

/// After B deregisters a region (and after it registers another, which may
/// reuse the slot), the old key is `Rejected(BadHandle)`; the new key works.
pub fn stale_keys_are_rejected(world: &mut dyn World) {
    let (a, _, mut watched) = setup(world);
    let old = register(world, Side::B, TARGET as usize, Access::all(), Some(15));
    let stale = remote(old, 0, 8);
    let back = world
        .btl(Side::B)
        .deregister_mem(old)
        .expect("deregister_mem");
    assert_eq!(back.len(), TARGET as usize, "the region comes back");
    for kind in [Rdma::Put, Rdma::Get] {
        expect_rejected(world, &watched, a, kind, stale, RejectCode::BadHandle);
    }
    let new = register(world, Side::B, TARGET as usize, Access::all(), Some(16));
    assert_ne!(new.remote_key(), old.remote_key(), "a fresh key");
    watched.regions.push((Side::B, new));
    for kind in [Rdma::Put, Rdma::Get] {
        expect_rejected(world, &watched, a, kind, stale, RejectCode::BadHandle);
    }
    let mut tracker = Tracker::new(world);
    start_rdma(
        world,
        &mut tracker,
        Side::A,
        Rdma::Put,
        local(a, 0, 8),
        remote(new, 0, 8),
        1,
    );
    settle(world, &mut tracker);
    assert!(
        matches!(tracker.seen[..], [Seen::PutComplete { result: Ok(()), .. }]),
        "a put with the new key: {:?}",
        tracker.seen
    );
}

/// Keys no registration ever had are `Rejected(BadHandle)`.
pub fn garbage_keys_are_rejected(world: &mut dyn World) {
    let (a, b, watched) = setup(world);
    let k = b.remote_key().0;
    for key in [0, u64::MAX, !k, k ^ (1 << 40)] {
        for kind in [Rdma::Put, Rdma::Get] {
            let target = RemoteSlice {
                key: RemoteKey(key),
                offset: 0,
                len: 8,
            };
            expect_rejected(world, &watched, a, kind, target, RejectCode::BadHandle);
        }
    }
}

/// The initiator's own slice is checked when the operation starts: out of
/// bounds or deregistered, it fails with `Memory(..)` at once and no event
/// ever follows.
pub fn local_slices_are_checked_at_the_call(world: &mut dyn World) {
    let (a, b, watched) = setup(world);
    let gone = register(world, Side::A, 16, Access::empty(), None);
    world
        .btl(Side::A)
        .deregister_mem(gone)
        .expect("deregister_mem");
    let before = watched.sums(world);
    let target = remote(b, 0, 8);
    for kind in [Rdma::Put, Rdma::Get] {
        for (slice, want) in [
            (local(a, LOCAL - 4, 8), "OutOfBounds"),
            (local(a, u64::MAX, 8), "OutOfBounds"),
            (local(gone, 0, 8), "UnknownRegion"),
        ] {
            let got = try_rdma(world, Side::A, kind, slice, target, 7);
            let ok = match got {
                Err(BtlError::Memory(MemError::OutOfBounds { .. })) => want == "OutOfBounds",
                Err(BtlError::Memory(MemError::UnknownRegion)) => want == "UnknownRegion",
                _ => false,
            };
            assert!(
                ok,
                "{kind:?} from local {slice:?}: expected {want}, got {got:?}"
            );
        }
    }
    let mut tracker = Tracker::new(world);
    for _ in 0..world.capabilities().linger_rounds.max(1) {
        round(world, &mut tracker);
    }
    assert!(
        tracker.seen.is_empty(),
        "events after refused calls: {:?}",
        tracker.seen
    );
    assert_eq!(watched.sums(world), before, "memory changed");
}
