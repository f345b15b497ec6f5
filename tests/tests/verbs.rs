//! The conformance suite against the engine over reliable-connected queue
//! pairs of the software HCA, connected by the `oob` CPC.

use btl_tests::harness::verbs::VerbsWorld;

btl_tests::conformance_suite!(VerbsWorld::new, gated: [pause, peer_loss]);

use btl_core::btl::{Access, BtlError, Event, LostReason, MemSlice, RemoteSlice, Tag};
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
