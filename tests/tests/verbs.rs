//! The conformance suite against the engine over reliable-connected queue
//! pairs of the software HCA, connected by the `oob` CPC.

use btl_tests::harness::verbs::VerbsWorld;

btl_tests::conformance_suite!(VerbsWorld::new, gated: [pause, peer_loss]);

use btl_core::btl::{
    Access, BtlError, Event, LostReason, MemError, MemSlice, RejectCode, RemoteKey, RemoteSlice,
    Tag,
};
use btl_core::desc::{DescFlags, Order};
use btl_tests::world::{Side, World};

/// Messages each way in the fault tests.
const TOTAL: u32 = 120;

/// The bytes of message `n`: up to 9000 of them, a pattern of `n`.
fn message(n: u32) -> Vec<u8> {
    (0..(n * 331) % 9000).map(|x| (x ^ n) as u8).collect()
}

/// The peer loss an error reports, if it is one.
fn lost_in(side: Side, e: BtlError) -> Option<(Side, LostReason)> {
    match e {
        BtlError::PeerLost(reason) => Some((side, reason)),
        _ => None,
    }
}

/// Sends `TOTAL` messages each way and a 200,000-byte put from A to B,
/// calling `fault` after every round; returns once everything arrived and
/// the put completed, checking that each message came once, in order and
/// intact, and that nobody lost a peer.
fn through_faults(world: &mut VerbsWorld, mut fault: impl FnMut(&mut VerbsWorld, u32)) {
    let peers = [world.peer(Side::A), world.peer(Side::B)];
    let src: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
    let hs = world
        .btl(Side::A)
        .register_mem(src, Access::empty())
        .expect("src");
    let hd = world
        .btl(Side::B)
        .register_mem(vec![0; 200_000], Access::REMOTE_WRITE)
        .expect("dst");
    let mut sent = [0u32; 2];
    let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut put = None;
    let mut lost = Vec::new();
    for round in 0..20_000u32 {
        for (i, side) in Side::BOTH.into_iter().enumerate() {
            if sent[i] < TOTAL {
                let data = message(sent[i]);
                let btl = world.btl(side);
                match btl.prepare_src(peers[i], &data, 0, Order(0), DescFlags::BTL_OWNERSHIP) {
                    Ok(d) => match btl.send(peers[i], d, Tag(0x80)) {
                        Ok(_) => sent[i] += 1,
                        Err(e) => {
                            lost.extend(lost_in(side, e.error));
                            btl.free(e.desc).expect("free");
                        }
                    },
                    Err(e) => lost.extend(lost_in(side, e)),
                }
            }
        }
        if put.is_none() && sent[0] > 10 {
            let len = 200_000;
            let started = world.btl(Side::A).put(
                peers[0],
                MemSlice {
                    handle: hs,
                    offset: 0,
                    len,
                },
                RemoteSlice {
                    key: hd.remote_key(),
                    offset: 0,
                    len,
                },
                7,
            );
            match started {
                Ok(_) => put = Some(None),
                Err(BtlError::OutOfResource) => {}
                Err(e) => panic!("put: {e}"),
            }
        }
        world.progress();
        fault(world, round);
        for (i, side) in Side::BOTH.into_iter().enumerate() {
            while let Some(ev) = world.btl(side).poll_event() {
                match ev {
                    Event::Received(m) => got[i].push(m.data.to_vec()),
                    Event::PutComplete { result, ctx: 7, .. } => put = Some(Some(result)),
                    Event::Room { .. } => {}
                    other => panic!("side {side:?}: {other:?}"),
                }
            }
        }
        if got.iter().all(|g| g.len() == TOTAL as usize) && matches!(put, Some(Some(_))) {
            break;
        }
    }
    assert!(lost.is_empty(), "no peer lost: {lost:?}");
    assert_eq!(put, Some(Some(Ok(()))), "the put completed");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.len(), TOTAL as usize, "side {i}: every message");
        for (n, data) in g.iter().enumerate() {
            assert_eq!(
                *data,
                message(n as u32),
                "side {i}: message {n} once, in order, intact"
            );
        }
    }
    assert!(
        world.fabric().counters().rdma_writes > 0,
        "the put went as RDMA writes"
    );
    let copied = btl_tests::suite::region(world, Side::B, hd);
    assert!(
        copied
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8),
        "the put's bytes"
    );
}

/// A queue pair fails (as on a fatal HCA error) every few rounds, twelve
/// times, while messages cross both ways and a put runs: each failure
/// closes the link, the CPC connects a new pair, the engine sends again
/// what was not acknowledged, and nothing is lost or repeated.
#[test]
fn queue_pairs_failing_again_and_again_lose_nothing() {
    let mut world = VerbsWorld::new();
    let mut failures = 0;
    through_faults(&mut world, |w, round| {
        if round % 9 == 4 && failures < 12 && w.fail_queue_pair([Side::A, Side::B][failures % 2]) {
            failures += 1;
        }
    });
    assert_eq!(failures, 12);
    assert!(
        world.fabric().counters().flushed > 0,
        "failed queue pairs flushed their work"
    );
}

/// A completion queue overruns (completions were lost): every queue pair
/// on it goes, the transport makes a new queue, the CPC new pairs, and the
/// engine carries on without losing or repeating anything.
#[test]
fn an_overrun_completion_queue_is_replaced_without_loss() {
    let mut world = VerbsWorld::new();
    let mut overruns = 0;
    through_faults(&mut world, |w, round| {
        if round % 40 == 20 && overruns < 3 {
            w.overrun_cq([Side::B, Side::A][overruns % 2]);
            overruns += 1;
        }
    });
    assert_eq!(overruns, 3);
    assert_eq!(world.fabric().counters().cq_overruns, 3);
}

/// With a finite RNR retry count, a receiver that stops long enough makes
/// the sender's SEND fail with RNR retries exceeded: the queue pair goes
/// to Err, its link closes, and once the receiver runs again the CPC
/// connects a new pair and the engine sends again what was not
/// acknowledged: nothing lost, nothing twice.
#[test]
fn rnr_retries_running_out_reconnect_without_loss() {
    let mut world = VerbsWorld::with_tuning(btl_verbs::cpc::QpTuning {
        rnr_retry: 2,
        ..btl_tests::harness::verbs::TUNING
    });
    let mut paused = false;
    through_faults(&mut world, |w, round| match round {
        30 => {
            w.pause(Side::B);
            paused = true;
        }
        60 => {
            w.resume(Side::B);
            paused = false;
        }
        _ => {}
    });
    assert!(!paused);
    let c = world.fabric().counters();
    assert!(c.rnr_naks > 2, "RNR NAKs: {c:?}");
    assert!(c.flushed > 0, "the queue pair failed and flushed: {c:?}");
}

/// A receiver that does not run lets its posted receives fill; the
/// sender's next SENDs get RNR NAKs and wait on the RNR timer, without
/// end, until it runs again.
#[test]
fn a_stopped_receiver_holds_the_sender_on_rnr_until_it_runs() {
    let mut world = VerbsWorld::new();
    let peer = world.peer(Side::A);
    // Connect first.
    world
        .btl(Side::A)
        .sendi(peer, &[], b"hello", Tag(0x80), Order(0), DescFlags::empty())
        .expect("sendi");
    for _ in 0..50 {
        world.progress();
    }
    while world.btl(Side::B).poll_event().is_some() {}
    world.pause(Side::B);
    let mut sent = 1;
    for _ in 0..200 {
        let data = vec![sent as u8; 3000];
        let btl = world.btl(Side::A);
        if let Ok(d) = btl.prepare_src(peer, &data, 0, Order(0), DescFlags::BTL_OWNERSHIP) {
            match btl.send(peer, d, Tag(0x80)) {
                Ok(_) => sent += 1,
                Err(e) => btl.free(e.desc).expect("free"),
            }
        }
        world.progress();
        while world.btl(Side::A).poll_event().is_some() {}
    }
    let rnr = world.fabric().counters().rnr_naks;
    assert!(rnr > 0, "the receiver's receives ran out");
    world.resume(Side::B);
    let mut got = 0;
    for _ in 0..2_000 {
        world.progress();
        while let Some(ev) = world.btl(Side::B).poll_event() {
            if matches!(ev, Event::Received(_)) {
                got += 1;
            }
        }
        if got == sent - 1 {
            break;
        }
    }
    assert_eq!(got, sent - 1, "everything sent while it stood arrived");
    assert_eq!(world.fabric().counters().unanswered, 0, "nothing timed out");
}

/// Runs rounds until `side` has an event that `take` takes; panics after
/// `MAX_ROUNDS`. Messages and other events are dropped.
fn until<R>(
    world: &mut VerbsWorld,
    side: Side,
    mut take: impl FnMut(&Event<'_>) -> Option<R>,
) -> R {
    for _ in 0..btl_tests::harness::verbs::MAX_ROUNDS {
        world.progress();
        while let Some(ev) = world.btl(side).poll_event() {
            if let Some(r) = take(&ev) {
                return r;
            }
        }
    }
    panic!("side {side:?}: no such event");
}

fn put_result(world: &mut VerbsWorld, ctx: u64) -> Result<(), BtlError> {
    until(world, Side::A, |ev| match *ev {
        Event::PutComplete { ctx: c, result, .. } if c == ctx => Some(result),
        _ => None,
    })
}

fn get_result(world: &mut VerbsWorld, ctx: u64) -> Result<(), BtlError> {
    until(world, Side::A, |ev| match *ev {
        Event::GetComplete { ctx: c, result, .. } if c == ctx => Some(result),
        _ => None,
    })
}

/// Puts and gets go as RDMA writes and reads once A has asked B what its
/// keys name; a transfer B would refuse is refused at A with B's code,
/// before the HCA sees it.
#[test]
fn puts_and_gets_are_rdma_writes_and_reads_refused_as_the_target_would() {
    let mut world = VerbsWorld::new();
    let peer = world.peer(Side::A);
    let src: Vec<u8> = (0..100_000).map(|i| (i % 253) as u8).collect();
    let hs = world
        .btl(Side::A)
        .register_mem(src.clone(), Access::empty())
        .expect("src");
    let dst = world
        .btl(Side::B)
        .register_mem(vec![0; 100_000], Access::REMOTE_WRITE)
        .expect("dst");
    let readable: Vec<u8> = (0..4096).map(|i| (i % 7) as u8).collect();
    let hr = world
        .btl(Side::B)
        .register_mem(readable.clone(), Access::REMOTE_READ)
        .expect("readable");

    world
        .btl(Side::A)
        .put(
            peer,
            hs.slice(0, 100_000),
            dst.remote_key().slice(0, 100_000),
            1,
        )
        .expect("put");
    assert_eq!(put_result(&mut world, 1), Ok(()));
    assert_eq!(btl_tests::suite::region(&mut world, Side::B, dst), src);
    world
        .btl(Side::A)
        .get(peer, hs.slice(500, 4096), hr.remote_key().slice(0, 4096), 2)
        .expect("get");
    assert_eq!(get_result(&mut world, 2), Ok(()));
    let landed = btl_tests::suite::region(&mut world, Side::A, hs);
    assert_eq!(landed[500..4596], readable[..]);
    let c = world.fabric().counters();
    assert_eq!((c.rdma_writes, c.rdma_reads), (1, 1), "{c:?}");

    let refusals = [
        (
            dst.remote_key().slice(99_000, 2000),
            true,
            RejectCode::OutOfBounds,
        ),
        (hr.remote_key().slice(0, 16), true, RejectCode::AccessDenied),
        (
            dst.remote_key().slice(0, 16),
            false,
            RejectCode::AccessDenied,
        ),
        (
            RemoteKey(0x5_0009).slice(0, 16),
            true,
            RejectCode::BadHandle,
        ),
    ];
    for (i, (remote, put, code)) in refusals.into_iter().enumerate() {
        let ctx = 10 + i as u64;
        let local = hs.slice(0, remote.len);
        let btl = world.btl(Side::A);
        let result = if put {
            btl.put(peer, local, remote, ctx).expect("put");
            put_result(&mut world, ctx)
        } else {
            btl.get(peer, local, remote, ctx).expect("get");
            get_result(&mut world, ctx)
        };
        assert_eq!(result, Err(BtlError::Rejected(code)), "refusal {i}");
    }
    let c = world.fabric().counters();
    assert_eq!(
        (c.rdma_writes, c.rdma_reads),
        (1, 1),
        "none reached the HCA"
    );
    assert_eq!(c.remote_access_errors, 0);
}

/// B deregisters a region A has written and registers another in its
/// slot: A's next put with the old key is refused by the HCA (a remote
/// access error, the queue pair to Err), fails with `BadHandle`, and
/// leaves the new region untouched; A asks B about the key again before
/// it uses it again, and messages and the new key carry on over a new
/// queue pair.
#[test]
fn a_stale_key_is_a_remote_access_error_and_fails_with_bad_handle() {
    let mut world = VerbsWorld::new();
    let peer = world.peer(Side::A);
    let hs = world
        .btl(Side::A)
        .register_mem(vec![0xab; 8192], Access::empty())
        .expect("src");
    let old = world
        .btl(Side::B)
        .register_mem(vec![0; 8192], Access::REMOTE_WRITE)
        .expect("dst");
    world
        .btl(Side::A)
        .put(peer, hs.slice(0, 8192), old.remote_key().slice(0, 8192), 1)
        .expect("put");
    assert_eq!(put_result(&mut world, 1), Ok(()));

    let back = world
        .btl(Side::B)
        .deregister_mem(old)
        .expect("deregistered");
    assert_eq!(back, vec![0xab; 8192]);
    let new = world
        .btl(Side::B)
        .register_mem(vec![0; 8192], Access::REMOTE_WRITE)
        .expect("dst again");
    world
        .btl(Side::A)
        .put(peer, hs.slice(0, 8192), old.remote_key().slice(0, 8192), 2)
        .expect("put");
    assert_eq!(
        put_result(&mut world, 2),
        Err(BtlError::Rejected(RejectCode::BadHandle))
    );
    assert_eq!(world.fabric().counters().remote_access_errors, 1);
    world
        .btl(Side::A)
        .put(peer, hs.slice(0, 8192), old.remote_key().slice(0, 8192), 3)
        .expect("put");
    assert_eq!(
        put_result(&mut world, 3),
        Err(BtlError::Rejected(RejectCode::BadHandle)),
        "asked again: B refuses it"
    );
    assert_eq!(
        world.fabric().counters().remote_access_errors,
        1,
        "the HCA saw it once"
    );
    assert_eq!(
        btl_tests::suite::region(&mut world, Side::B, new),
        vec![0; 8192]
    );

    world
        .btl(Side::A)
        .sendi(
            peer,
            &[],
            b"still here",
            Tag(0x80),
            Order(0),
            DescFlags::empty(),
        )
        .expect("sendi");
    let got = until(&mut world, Side::B, |ev| match ev {
        Event::Received(m) => Some(m.data.to_vec()),
        _ => None,
    });
    assert_eq!(got, b"still here");
    world
        .btl(Side::A)
        .put(peer, hs.slice(0, 8192), new.remote_key().slice(0, 8192), 4)
        .expect("put");
    assert_eq!(put_result(&mut world, 4), Ok(()));
    assert_eq!(
        btl_tests::suite::region(&mut world, Side::B, new),
        vec![0xab; 8192]
    );
}

/// A region a transfer still uses is not deregistered, and stays on the
/// device as it was: a peer's key for it keeps working. Once
/// deregistered, the peer's key is refused.
#[test]
fn a_region_in_use_stays_registered_and_its_key_good() {
    let mut world = VerbsWorld::new();
    let (to_b, to_a) = (world.peer(Side::A), world.peer(Side::B));
    let data: Vec<u8> = (0..50_000).map(|i| (i % 241) as u8).collect();
    let src = world
        .btl(Side::A)
        .register_mem(data.clone(), Access::REMOTE_READ)
        .expect("src");
    let dst = world
        .btl(Side::B)
        .register_mem(vec![0; 50_000], Access::REMOTE_WRITE)
        .expect("dst");
    world
        .btl(Side::A)
        .put(
            to_b,
            src.slice(0, 50_000),
            dst.remote_key().slice(0, 50_000),
            1,
        )
        .expect("put");
    assert_eq!(
        world.btl(Side::A).deregister_mem(src).err(),
        Some(BtlError::Memory(MemError::InUse))
    );
    assert_eq!(put_result(&mut world, 1), Ok(()));

    let back = world
        .btl(Side::B)
        .register_mem(vec![0; 1000], Access::empty())
        .expect("b's buffer");
    world
        .btl(Side::B)
        .get(
            to_a,
            back.slice(0, 1000),
            src.remote_key().slice(7000, 1000),
            2,
        )
        .expect("get");
    let got = until(&mut world, Side::B, |ev| match *ev {
        Event::GetComplete { ctx: 2, result, .. } => Some(result),
        _ => None,
    });
    assert_eq!(got, Ok(()));
    assert_eq!(
        btl_tests::suite::region(&mut world, Side::B, back),
        data[7000..8000]
    );
    let reads = world.fabric().counters().rdma_reads;
    assert_eq!(reads, 1, "by RDMA, with the key B was told before");

    assert_eq!(
        world.btl(Side::A).deregister_mem(src).expect("free now"),
        data
    );
    world
        .btl(Side::B)
        .get(
            to_a,
            back.slice(0, 1000),
            src.remote_key().slice(0, 1000),
            3,
        )
        .expect("get");
    let stale = until(&mut world, Side::B, |ev| match *ev {
        Event::GetComplete { ctx: 3, result, .. } => Some(result),
        _ => None,
    });
    assert_eq!(stale, Err(BtlError::Rejected(RejectCode::BadHandle)));
}
