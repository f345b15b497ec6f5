//! `sendi`: small messages go at once without a descriptor and owe no
//! event; when it cannot go (`OutOfResource`, or too large for it) the
//! caller falls back to `prepare_src` + `send` and nothing is lost or
//! duplicated.

use btl_core::btl::{BtlError, Tag};
use btl_core::desc::Order;

use crate::data::pattern;
use crate::suite::{seq_header, seq_of};
use crate::track::{
    Message, Tracker, assert_pools_idle, deliver, round, send, sendi, try_send, try_sendi,
};
use crate::world::{Side, World};

/// Most `sendi` attempts without progress before an unrefused sender
/// counts as unbounded.
const UNBOUNDED: usize = 100_000;

/// Header and payload lengths from empty to `sendi_max`, each arriving
/// once, in order on one channel, as header then payload; no completion
/// event follows any of them (the tracker fails on one).
pub fn small_messages_go_at_once(world: &mut dyn World) {
    let max = world.capabilities().sendi_max;
    let mut tracker = Tracker::new(world);
    let mut expected = Vec::new();
    for h in [0, 1, 8, 16] {
        for p in [0, 1, 2, 7, 8, 63, 64, max / 2, max.saturating_sub(h)] {
            if h + p > max || expected.contains(&(h, p)) {
                continue;
            }
            expected.push((h, p));
        }
    }
    for &(h, p) in &expected {
        let header = pattern(0x4EAD + h as u64, h);
        let payload = pattern(p as u64, p);
        sendi(
            world,
            &mut tracker,
            Side::A,
            &header,
            &payload,
            Tag(0x90),
            Order(0),
        );
    }
    deliver(world, &mut tracker, expected.len());
    let got: Vec<&[u8]> = tracker.received().map(|(_, d)| d).collect();
    assert_eq!(got.len(), expected.len(), "messages delivered");
    for (data, &(h, p)) in got.iter().zip(&expected) {
        let want = [pattern(0x4EAD + h as u64, h), pattern(p as u64, p)].concat();
        assert!(*data == want.as_slice(), "sendi of {h} + {p} bytes");
    }
    assert!(
        tracker.returned.is_empty(),
        "sendi hands back no descriptor"
    );
    assert_pools_idle(world, &tracker);
}

/// A sender that never lets the receiver run is refused by `sendi` before
/// long (bounded memory). From then on each refused `sendi` falls back to
/// `prepare_src` + `send`, and if that is refused too, runs a round and
/// tries again. Every message arrives once, in order on its channel.
pub fn out_of_resource_falls_back_to_send(world: &mut dyn World) {
    let tag = Tag(0x91);
    let msg = |seq: u64| [seq_header(seq).as_slice(), &pattern(seq, 24)].concat();
    let mut tracker = Tracker::new(world);
    let mut next = 0u64;
    loop {
        assert!(
            (next as usize) < UNBOUNDED,
            "sendi never refused {UNBOUNDED} messages without progress"
        );
        match try_sendi(world, Side::A, &[], &msg(next), tag, Order(0)) {
            Ok(()) => next += 1,
            Err(BtlError::OutOfResource) => break,
            Err(e) => panic!("sendi of message {next}: {e}"),
        }
    }
    let total = next + 200;
    let (mut by_send, mut rounds) = (0u32, 0u32);
    let max = world.capabilities().max_rounds;
    while next < total {
        let data = msg(next);
        match try_sendi(world, Side::A, &[], &data, tag, Order(0)) {
            Ok(()) => next += 1,
            Err(BtlError::OutOfResource) => {
                let fallback = Message {
                    order: Order(0),
                    ..Message::new(tag, &data)
                };
                match try_send(world, &mut tracker, Side::A, &fallback) {
                    Ok(()) => {
                        next += 1;
                        by_send += 1;
                    }
                    Err(BtlError::OutOfResource) => {
                        rounds += 1;
                        assert!(rounds <= max * 200, "no room for message {next}");
                        round(world, &mut tracker);
                    }
                    Err(e) => panic!("fallback send of message {next}: {e}"),
                }
            }
            Err(e) => panic!("sendi of message {next}: {e}"),
        }
    }
    deliver(world, &mut tracker, total as usize);
    let seqs: Vec<u64> = tracker.received().map(|(_, d)| seq_of(d)).collect();
    assert_eq!(
        seqs,
        (0..total).collect::<Vec<_>>(),
        "messages in order, each once ({by_send} went by send)"
    );
    for (_, data) in tracker.received() {
        assert_eq!(data, msg(seq_of(data)), "content");
    }
    assert_pools_idle(world, &tracker);
}

/// One byte more than `sendi` takes is refused (`TooLarge` or
/// `OutOfResource`) and delivers nothing; the same message then goes by
/// `send`, once.
pub fn too_large_for_sendi_falls_back_to_send(world: &mut dyn World) {
    let max = world.capabilities().sendi_max;
    let header = pattern(1, 8.min(max + 1));
    let payload = pattern(2, max + 1 - header.len());
    let tag = Tag(0x92);
    let mut tracker = Tracker::new(world);
    match try_sendi(world, Side::A, &header, &payload, tag, Order(0)) {
        Err(BtlError::TooLarge { .. } | BtlError::OutOfResource) => {}
        other => panic!("sendi of sendi_max + 1 bytes: expected a refusal, got {other:?}"),
    }
    let msg = Message {
        header: &header,
        order: Order(0),
        ..Message::new(tag, &payload)
    };
    send(world, &mut tracker, Side::A, &msg);
    deliver(world, &mut tracker, 1);
    let got: Vec<&[u8]> = tracker.received().map(|(_, d)| d).collect();
    assert_eq!(
        got,
        [[header, payload].concat().as_slice()],
        "only the sent copy"
    );
    assert_pools_idle(world, &tracker);
}
