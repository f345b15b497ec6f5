//! Flow control and back-pressure: a receiver that stops taking messages
//! makes the sender's `send` refuse with `OutOfResource` before memory
//! grows past the pools; when the receiver comes back everything arrives
//! exactly once and in order. A receiver that replies from inside its
//! event loop keeps every descriptor accounted for.

use std::collections::{HashMap, VecDeque};

use btl_core::btl::{BtlError, Tag};
use btl_core::desc::Order;

use crate::data::pattern;
use crate::suite::{seq_header, seq_of};
use crate::track::{
    Message, Seen, Tracker, assert_pools_bounded, assert_pools_idle, deliver, send, try_send,
};
use crate::world::{Side, World};

/// Most messages a stalled receiver may let through before the sender
/// counts as unbounded: far more than the pools, queues and credit window
/// of any harness (which keeps them small so the stall is quick).
const UNBOUNDED: usize = 100_000;

/// The tags the flow tests interleave; order is checked per tag.
const TAGS: [Tag; 3] = [Tag(0x81), Tag(0x82), Tag(0x83)];

/// Payload length of the `i`-th message: small, medium, and eager-sized,
/// so every fragment class fills.
fn len_of(i: u64, eager_limit: usize) -> usize {
    [16, 200, eager_limit / 2, eager_limit - 8][(i % 4) as usize]
}

/// The `i`-th message overall: its tag, sequence number within that tag
/// (in the header) and patterned payload.
fn message(i: u64, eager_limit: usize) -> (Tag, [u8; 8], Vec<u8>) {
    let tag = TAGS[(i % TAGS.len() as u64) as usize];
    let seq = i / TAGS.len() as u64;
    (tag, seq_header(seq), pattern(i, len_of(i, eager_limit)))
}

/// Checks that the messages `0..total` arrived once each, in order per tag,
/// intact.
fn check_in_order(tracker: &Tracker, total: u64, eager_limit: usize) {
    let mut next: HashMap<Tag, u64> = HashMap::new();
    for (tag, data) in tracker.received() {
        let seq = seq_of(data);
        let expected = next.entry(tag).or_default();
        assert_eq!(seq, *expected, "order of {tag:?}");
        *expected += 1;
        let t = TAGS.iter().position(|&x| x == tag).expect("a flow tag") as u64;
        let i = seq * TAGS.len() as u64 + t;
        assert!(i < total, "a message never sent");
        assert_eq!(
            &data[8..],
            message(i, eager_limit).2,
            "content of message {i}"
        );
    }
    let got: u64 = next.values().sum();
    assert_eq!(got, total, "messages delivered");
}

/// Sends from A while B takes nothing (and, with `pause`, is not even
/// progressed), until A is refused; then lets B run and sends as many
/// again.
fn stall_then_resume(world: &mut dyn World, pause: bool) {
    let caps = world.capabilities();
    let eager = super::a_to_b(world).eager_limit;
    let mut tracker = Tracker::new(world);
    if pause {
        world.pause(Side::B);
    }
    let mut sent = 0u64;
    loop {
        assert!(
            (sent as usize) < UNBOUNDED,
            "the sender was never refused while the receiver stalled"
        );
        let (tag, header, payload) = message(sent, eager);
        let msg = Message {
            header: &header,
            order: Order(0),
            ..Message::new(tag, &payload)
        };
        match try_send(world, &mut tracker, Side::A, &msg) {
            Ok(()) => sent += 1,
            Err(BtlError::OutOfResource) => break,
            Err(e) => panic!("send {sent} to a stalled receiver: {e}"),
        }
        world.progress();
        if !caps.same_btl {
            // The sender keeps handling its own events; the receiver does not.
            tracker.drain_side(world, Side::A);
            assert_pools_bounded(world, Side::B);
        }
        assert_pools_bounded(world, Side::A);
    }
    if pause {
        world.resume(Side::B);
    }
    let total = 2 * sent + 50;
    for i in sent..total {
        let (tag, header, payload) = message(i, eager);
        let msg = Message {
            header: &header,
            order: Order(0),
            ..Message::new(tag, &payload)
        };
        send(world, &mut tracker, Side::A, &msg);
    }
    deliver(world, &mut tracker, total as usize);
    check_in_order(&tracker, total, eager);
    assert_pools_idle(world, &tracker);
}

/// B stops polling: A sends until `OutOfResource` (pools never past
/// capacity), then B polls again and all messages, those before and after
/// the stall, arrive exactly once, in order per tag.
pub fn stalled_receiver_bounds_the_sender(world: &mut dyn World) {
    stall_then_resume(world, false);
}

/// Like [`stalled_receiver_bounds_the_sender`], with B's process paused
/// altogether (no progress either). Needs [`World::pause`].
pub fn paused_receiver_bounds_the_sender(world: &mut dyn World) {
    assert!(world.capabilities().pause, "needs the pause hook");
    stall_then_resume(world, true);
}

/// A sends `N` requests as fast as it is allowed; B answers each one with
/// a send made inside its event loop, between two `poll_event` calls,
/// keeping answers it cannot send yet for after the next poll. Every
/// request and answer arrives once and every descriptor of both comes
/// back.
pub fn replies_from_the_event_loop_are_accounted(world: &mut dyn World) {
    const N: u64 = 300;
    let (request, reply) = (Tag(0x84), Tag(0x85));
    let caps = world.capabilities();
    let mut tracker = Tracker::new(world);
    let b_home = tracker.home(Side::B);
    let mut next = 0u64;
    let mut owed: VecDeque<u64> = VecDeque::new();
    let received = |t: &Tracker, tag: Tag| t.received().filter(|(g, _)| *g == tag).count() as u64;
    let mut rounds = 0;
    while received(&tracker, reply) < N || !owed.is_empty() {
        rounds += 1;
        assert!(
            rounds <= caps.max_rounds,
            "exchange not done after {rounds} rounds"
        );
        while next < N {
            let data = [seq_header(next).as_slice(), &pattern(next, 40)].concat();
            match try_send(world, &mut tracker, Side::A, &Message::new(request, &data)) {
                Ok(()) => next += 1,
                Err(BtlError::OutOfResource) => break,
                Err(e) => panic!("request {next}: {e}"),
            }
        }
        // B's loop: whatever replies fit, then one event, and again.
        loop {
            flush_replies(world, &mut tracker, &mut owed, reply);
            let Some(seen) = tracker.poll(world, b_home) else {
                break;
            };
            if let Seen::Received { tag, data, .. } = seen
                && *tag == request
            {
                owed.push_back(seq_of(data));
            }
        }
        if !caps.same_btl {
            tracker.drain_side(world, Side::A);
        }
        world.progress();
    }
    deliver(world, &mut tracker, 2 * N as usize);
    for tag in [request, reply] {
        let mut seqs: Vec<u64> = tracker
            .received()
            .filter(|(t, _)| *t == tag)
            .map(|(_, d)| seq_of(d))
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..N).collect::<Vec<_>>(), "{tag:?}: each once");
    }
    assert_pools_idle(world, &tracker);
}

/// Sends B's owed replies, oldest first, until one is refused.
fn flush_replies(world: &mut dyn World, tracker: &mut Tracker, owed: &mut VecDeque<u64>, tag: Tag) {
    while let Some(&seq) = owed.front() {
        let data = [seq_header(seq).as_slice(), &pattern(!seq, 24)].concat();
        match try_send(world, tracker, Side::B, &Message::new(tag, &data)) {
            Ok(()) => {
                owed.pop_front();
            }
            Err(BtlError::OutOfResource) => return,
            Err(e) => panic!("reply {seq}: {e}"),
        }
    }
}
