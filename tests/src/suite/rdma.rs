//! `put` and `get` between registered regions, from 1 byte to 64 MiB: the
//! bytes land exactly where named and nowhere else, and each operation
//! completes exactly once with its `ctx`. (Backends that split a transfer
//! into packets arriving out of order are checked by the same result.) A
//! put that asks for it tells its target once, after its data.

use btl_core::btl::{Access, BtlError, MemHandle, OpId};

use crate::data::pattern;
use crate::suite::{local, region, register, remote};
use crate::track::{
    Rdma, Seen, Tracker, assert_pools_idle, round, settle, start_put_notify, start_rdma,
};
use crate::world::{Side, World};

/// The sizes tried below 64 MiB (which [`largest_put_and_get`] does once).
pub const SIZES: [u64; 8] = [1, 2, 3, 7, 4095, 4096, 65537, 1 << 20];

/// Byte the target region holds wherever no transfer may write.
const GUARD: u8 = 0xEE;

/// `n` rounded up to the BTL's alignment for `kind`.
fn aligned(n: u64, alignment: u32) -> u64 {
    n.next_multiple_of(u64::from(alignment.max(1)))
}

/// The result and ctx of the completion of `op`, which must have come.
fn completion(tracker: &Tracker, kind: Rdma, op: OpId) -> (u64, Result<(), BtlError>) {
    tracker
        .seen
        .iter()
        .find_map(|s| match (kind, s) {
            (
                Rdma::Put,
                Seen::PutComplete {
                    op: o, ctx, result, ..
                },
            )
            | (
                Rdma::Get,
                Seen::GetComplete {
                    op: o, ctx, result, ..
                },
            ) if *o == op => Some((*ctx, *result)),
            _ => None,
        })
        .expect("the completion of a settled operation")
}

/// One transfer of `len` bytes: from `src_off` of the source region to
/// `dst_off` of the destination region (which is filled with [`GUARD`]
/// first). Checks the completion, then that the destination holds the
/// source's bytes in range and the guard everywhere else.
#[allow(clippy::too_many_arguments)]
fn transfer(
    world: &mut dyn World,
    kind: Rdma,
    a_region: MemHandle,
    b_region: MemHandle,
    src_off: u64,
    dst_off: u64,
    len: u64,
    ctx: u64,
) {
    let (dst_side, dst) = match kind {
        Rdma::Put => (Side::B, b_region),
        Rdma::Get => (Side::A, a_region),
    };
    world
        .btl(dst_side)
        .region_mut(dst)
        .expect("destination region")
        .fill(GUARD);
    let (a_off, b_off) = match kind {
        Rdma::Put => (src_off, dst_off),
        Rdma::Get => (dst_off, src_off),
    };
    let mut tracker = Tracker::new(world);
    let op = start_rdma(
        world,
        &mut tracker,
        Side::A,
        kind,
        local(a_region, a_off, len),
        remote(b_region, b_off, len),
        ctx,
    );
    settle(world, &mut tracker);
    assert_eq!(
        completion(&tracker, kind, op),
        (ctx, Ok(())),
        "{kind:?} of {len} bytes: ctx and success"
    );
    let (s, d, n) = (src_off as usize, dst_off as usize, len as usize);
    let (src_side, src) = match kind {
        Rdma::Put => (Side::A, a_region),
        Rdma::Get => (Side::B, b_region),
    };
    let src = world.btl(src_side).region(src).expect("source region")[s..s + n].to_vec();
    let dst_bytes = world.btl(dst_side).region(dst).expect("destination region");
    assert!(
        dst_bytes[d..d + n] == src[..],
        "{kind:?} of {len} bytes: content"
    );
    assert!(
        dst_bytes[..d].iter().all(|&b| b == GUARD)
            && dst_bytes[d + n..].iter().all(|&b| b == GUARD),
        "{kind:?} of {len} bytes wrote outside its range"
    );
    assert_pools_idle(world, &tracker);
}

/// The sizes of [`SIZES`] this world and BTL take for `kind`, aligned.
fn sizes_for(world: &mut dyn World, kind: Rdma) -> (Vec<u64>, u64) {
    let attrs = super::a_to_b(world);
    let (limit, alignment) = match kind {
        Rdma::Put => (attrs.put_limit, attrs.put_alignment),
        Rdma::Get => (attrs.get_limit, attrs.get_alignment),
    };
    let cap = limit.min(world.capabilities().max_rdma_len);
    let sizes = SIZES
        .iter()
        .map(|&n| aligned(n, alignment))
        .filter(|&n| n <= cap)
        .collect();
    (sizes, u64::from(alignment.max(1)))
}

fn sweep(world: &mut dyn World, kind: Rdma) {
    let (sizes, align) = sizes_for(world, kind);
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let len = (largest + 64 * align) as usize;
    let (a_access, b_access) = match kind {
        Rdma::Put => (Access::empty(), Access::REMOTE_WRITE),
        Rdma::Get => (Access::empty(), Access::REMOTE_READ),
    };
    let a = register(world, Side::A, len, a_access, Some(1));
    let b = register(world, Side::B, len, b_access, Some(2));
    for (i, &n) in sizes.iter().enumerate() {
        let i = i as u64;
        let src_off = aligned(5 + i, align as u32);
        let dst_off = aligned(11 + 3 * i, align as u32);
        transfer(world, kind, a, b, src_off, dst_off, n, 0xC0_0000 + i);
    }
}

/// A puts into B's write-only region, at every size of [`SIZES`] (within
/// the BTL's put limit and alignment), at odd offsets.
pub fn put_lands_in_peer_memory(world: &mut dyn World) {
    sweep(world, Rdma::Put);
}

/// A gets from B's read-only region, at every size of [`SIZES`] (within
/// the BTL's get limit and alignment), at odd offsets.
pub fn get_reads_peer_memory(world: &mut dyn World) {
    sweep(world, Rdma::Get);
}

/// One put of 64 MiB A → B, then one get of it back into A's cleared
/// region (less when the harness or the BTL's limits say so).
pub fn largest_put_and_get(world: &mut dyn World) {
    let attrs = super::a_to_b(world);
    let len = (64u64 << 20)
        .min(world.capabilities().max_rdma_len)
        .min(attrs.put_limit)
        .min(attrs.get_limit);
    let a = register(world, Side::A, len as usize, Access::empty(), Some(64));
    let b = register(world, Side::B, len as usize, Access::all(), None);
    transfer(world, Rdma::Put, a, b, 0, 0, len, 1);
    transfer(world, Rdma::Get, a, b, 0, 0, len, 2);
    let back = world.btl(Side::A).region(a).expect("A's region");
    assert!(
        back == pattern(64, len as usize).as_slice(),
        "64 MiB round trip"
    );
}

/// 256 puts and 256 gets of 64 bytes started back to back (retrying after
/// a round when the BTL is out of resources): each completes exactly once
/// with its own ctx, and every byte lands.
pub fn many_outstanding_complete_once(world: &mut dyn World) {
    const N: u64 = 256;
    const LEN: u64 = 64;
    let mut tracker = Tracker::new(world);
    let a_src = register(world, Side::A, (N * LEN) as usize, Access::empty(), Some(3));
    let a_dst = register(world, Side::A, (N * LEN) as usize, Access::empty(), None);
    let b_dst = register(
        world,
        Side::B,
        (N * LEN) as usize,
        Access::REMOTE_WRITE,
        None,
    );
    let b_src = register(
        world,
        Side::B,
        (N * LEN) as usize,
        Access::REMOTE_READ,
        Some(4),
    );
    let mut ops = Vec::new();
    for i in 0..N {
        let at = i * LEN;
        let put = start_rdma(
            world,
            &mut tracker,
            Side::A,
            Rdma::Put,
            local(a_src, at, LEN),
            remote(b_dst, at, LEN),
            2 * i,
        );
        let get = start_rdma(
            world,
            &mut tracker,
            Side::A,
            Rdma::Get,
            local(a_dst, at, LEN),
            remote(b_src, at, LEN),
            2 * i + 1,
        );
        ops.push((Rdma::Put, put, 2 * i));
        ops.push((Rdma::Get, get, 2 * i + 1));
    }
    settle(world, &mut tracker);
    for (kind, op, ctx) in ops {
        assert_eq!(
            completion(&tracker, kind, op),
            (ctx, Ok(())),
            "{kind:?} {ctx}"
        );
    }
    let completions = tracker
        .seen
        .iter()
        .filter(|s| matches!(s, Seen::PutComplete { .. } | Seen::GetComplete { .. }))
        .count();
    assert_eq!(completions as u64, 2 * N, "completions");
    assert!(
        region(world, Side::B, b_dst) == pattern(3, (N * LEN) as usize),
        "puts landed"
    );
    assert!(
        region(world, Side::A, a_dst) == pattern(4, (N * LEN) as usize),
        "gets landed"
    );
    assert_pools_idle(world, &tracker);
}

/// Puts that ask for a notice, of 0 bytes, 1 byte and a few packets' worth:
/// the target learns of each exactly once, after its data has landed
/// (its event names where, and carries the value given), and the put
/// completes at the origin. A put the target refuses tells it nothing.
pub fn put_notify_tells_the_target_once(world: &mut dyn World) {
    let len = 3 * 65536 + 5;
    let a = register(world, Side::A, len, Access::empty(), Some(11));
    let b = register(world, Side::B, len, Access::REMOTE_WRITE, None);
    let readonly = register(world, Side::B, 64, Access::REMOTE_READ, None);
    let mut tracker = Tracker::new(world);
    let target = tracker.home(Side::B);
    for (i, n) in [0u64, 1, len as u64 - 7].into_iter().enumerate() {
        let imm = 0xA11C_E000 + i as u64;
        let op = start_put_notify(
            world,
            &mut tracker,
            Side::A,
            local(a, 7, n),
            remote(b, 3, n),
            imm,
            i as u64,
        );
        settle(world, &mut tracker);
        // The notice may trail the put's completion by a round.
        for _ in 0..world.capabilities().linger_rounds {
            round(world, &mut tracker);
        }
        assert_eq!(completion(&tracker, Rdma::Put, op), (i as u64, Ok(())));
        let arrived: Vec<_> = tracker
            .take()
            .into_iter()
            .filter_map(|s| match s {
                Seen::PutArrived { at, slice, imm, .. } => Some((at, slice, imm)),
                _ => None,
            })
            .collect();
        assert_eq!(
            arrived,
            [(target, local(b, 3, n), imm)],
            "one notice for the put of {n} bytes"
        );
        let src = world.btl(Side::A).region(a).expect("A's region")[7..7 + n as usize].to_vec();
        let dst = world.btl(Side::B).region(b).expect("B's region");
        assert!(dst[3..3 + n as usize] == src[..], "{n} bytes landed");
    }
    let op = start_put_notify(
        world,
        &mut tracker,
        Side::A,
        local(a, 0, 8),
        remote(readonly, 0, 8),
        1,
        99,
    );
    settle(world, &mut tracker);
    for _ in 0..world.capabilities().linger_rounds {
        round(world, &mut tracker);
    }
    let (ctx, result) = completion(&tracker, Rdma::Put, op);
    assert_eq!(ctx, 99);
    assert!(
        matches!(result, Err(BtlError::Rejected(_))),
        "a put into read-only memory: {result:?}"
    );
    assert!(
        !tracker
            .seen
            .iter()
            .any(|s| matches!(s, Seen::PutArrived { .. })),
        "a refused put tells its target nothing"
    );
    assert_pools_idle(world, &tracker);
}
