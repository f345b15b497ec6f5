//! Unit and property tests of the send and receive windows.

extern crate std;

use std::collections::{BTreeSet, HashSet};
use std::string::ToString;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

/// The instant `n` ns after the start of the clock.
fn t(n: u64) -> Instant {
    Instant::from_nanos(n)
}

/// `n` ns.
fn d(n: u64) -> Duration {
    Duration::from_nanos(n)
}

fn ack(cumulative: u64, sack: u64) -> Ack {
    Ack { cumulative, sack }
}

fn release<T, const W: usize>(
    tx: &mut SendWindow<T, W>,
    a: Ack,
    now: u64,
) -> (Result<Acked, AckBeyondSent>, Vec<(u64, T)>) {
    let mut out = Vec::new();
    let r = tx.on_ack(a, t(now), |seq, item| out.push((seq, item)));
    (r, out)
}

fn seqs<T>(released: &[(u64, T)]) -> Vec<u64> {
    released.iter().map(|(s, _)| *s).collect()
}

// ------------------------------------------------------------- RecvWindow

#[test]
fn in_order_packets_are_delivered_and_acknowledged() {
    let mut rx = RecvWindow::<&str, 8>::new();
    assert_eq!(rx.ack(), ack(1, 0));
    assert_eq!(rx.classify(1), Arrival::InOrder);
    assert_eq!(rx.receive(1, "a"), Ok(1));
    // Held but not popped: already acknowledged, and a duplicate.
    assert_eq!(rx.ack(), ack(2, 0));
    assert_eq!(rx.receive(1, "again"), Err(Refused::Duplicate("again")));
    assert_eq!(rx.pop(), Some((1, "a")));
    assert_eq!(rx.pop(), None);
    assert_eq!(rx.expected(), 2);
    assert_eq!(rx.ack(), ack(2, 0));
}

#[test]
fn early_packets_wait_for_the_gap() {
    let mut rx = RecvWindow::<u64, 8>::new();
    assert_eq!(rx.receive(3, 30), Ok(0));
    assert_eq!(rx.ack(), ack(1, 0b10));
    assert_eq!(rx.receive(2, 20), Ok(0));
    assert_eq!(rx.ack(), ack(1, 0b11));
    assert_eq!(rx.receive(5, 50), Ok(0));
    assert_eq!(rx.ack(), ack(1, 0b1011));
    assert_eq!(rx.pop(), None);
    assert_eq!(rx.held(), 3);
    assert_eq!(rx.receive(1, 10), Ok(3));
    assert_eq!(rx.ack(), ack(4, 0b1));
    let got: Vec<_> = rx.deliver().collect();
    assert_eq!(got, vec![(1, 10), (2, 20), (3, 30)]);
    assert_eq!(rx.expected(), 4);
    assert_eq!(rx.held(), 1);
    assert_eq!(rx.receive(4, 40), Ok(2));
    let got: Vec<_> = rx.deliver().collect();
    assert_eq!(got, vec![(4, 40), (5, 50)]);
    assert_eq!(rx.ack(), ack(6, 0));
}

#[test]
fn a_partly_consumed_delivery_leaves_the_rest_ready() {
    let mut rx = RecvWindow::<u64, 4>::new();
    for seq in [2, 3, 1] {
        rx.receive(seq, seq).expect("in window");
    }
    assert_eq!(rx.deliver().size_hint(), (3, Some(3)));
    assert_eq!(rx.deliver().next(), Some((1, 1)));
    assert_eq!(rx.ready(), 2);
    assert_eq!(rx.deliver().collect::<Vec<_>>(), vec![(2, 2), (3, 3)]);
}

#[test]
fn duplicates_and_stale_numbers_are_refused() {
    let mut rx = RecvWindow::<u64, 8>::new();
    rx.receive(4, 4).expect("early");
    assert_eq!(rx.classify(4), Arrival::Duplicate);
    assert_eq!(rx.receive(4, 44), Err(Refused::Duplicate(44)));
    assert_eq!(rx.receive(0, 0), Err(Refused::Duplicate(0)));
    rx.receive(1, 1).expect("in order");
    rx.pop();
    assert_eq!(rx.receive(1, 1), Err(Refused::Duplicate(1)));
    assert!(Refused::Duplicate(1).should_ack());
    assert!(!Refused::OutsideWindow(1).should_ack());
    assert_eq!(rx.ack(), ack(2, 0b10));
}

#[test]
fn the_window_bounds_what_is_taken() {
    let mut rx = RecvWindow::<u64, 8>::new();
    // Expected 1: the window is 1..=8.
    assert_eq!(rx.classify(8), Arrival::Early);
    assert_eq!(rx.classify(9), Arrival::OutsideWindow);
    assert_eq!(rx.receive(9, 9), Err(Refused::OutsideWindow(9)));
    assert_eq!(rx.receive(u64::MAX, 0), Err(Refused::OutsideWindow(0)));
    assert_eq!(rx.receive(u64::MAX / 2, 0), Err(Refused::OutsideWindow(0)));
    // Nothing refused was marked.
    assert_eq!(rx.ack(), ack(1, 0));
    assert_eq!(rx.held(), 0);
    rx.receive(8, 8).expect("last of the window");
    assert_eq!(rx.ack(), ack(1, 1 << 6));
}

#[test]
fn classify_does_not_mark() {
    let rx = RecvWindow::<u64, 8>::new();
    assert_eq!(rx.classify(3), Arrival::Early);
    assert_eq!(rx.classify(3), Arrival::Early);
    assert_eq!(rx.ack(), ack(1, 0));
}

#[test]
fn a_full_64_window_uses_every_bit() {
    let mut rx = RecvWindow::<u64, 64>::new();
    for seq in 2..=64 {
        assert_eq!(rx.receive(seq, seq), Ok(0));
    }
    assert_eq!(rx.ack(), ack(1, u64::MAX >> 1));
    assert_eq!(rx.classify(65), Arrival::OutsideWindow);
    assert_eq!(rx.receive(1, 1), Ok(64));
    // Every slot held: the cumulative ack covers all of them.
    assert_eq!(rx.ack(), ack(65, 0));
    let got: Vec<u64> = rx.deliver().map(|(s, _)| s).collect();
    assert_eq!(got, (1..=64).collect::<Vec<_>>());
    assert_eq!(rx.classify(65), Arrival::InOrder);
    assert_eq!(rx.classify(128), Arrival::Early);
    assert_eq!(rx.classify(129), Arrival::OutsideWindow);
}

#[test]
fn a_window_of_one_takes_only_the_next() {
    let mut rx = RecvWindow::<u64, 1>::new();
    assert_eq!(rx.classify(2), Arrival::OutsideWindow);
    assert_eq!(rx.receive(1, 1), Ok(1));
    assert_eq!(rx.classify(2), Arrival::OutsideWindow);
    assert_eq!(rx.pop(), Some((1, 1)));
    assert_eq!(rx.receive(2, 2), Ok(1));
}

#[test]
fn the_end_of_the_sequence_space_is_not_crossed() {
    let mut rx = RecvWindow::<u64, 8>::starting_at(u64::MAX - 2);
    assert_eq!(rx.receive(u64::MAX, 0), Err(Refused::OutsideWindow(0)));
    assert_eq!(rx.receive(u64::MAX - 1, 2), Ok(0));
    assert_eq!(rx.ack(), ack(u64::MAX - 2, 0b1));
    assert_eq!(rx.receive(u64::MAX - 2, 1), Ok(2));
    assert_eq!(rx.ack(), ack(u64::MAX, 0));
    assert_eq!(rx.deliver().count(), 2);
    assert_eq!(rx.expected(), u64::MAX);
    assert_eq!(rx.ack(), ack(u64::MAX, 0));
    for seq in [0, 1, u64::MAX - 1] {
        assert_eq!(rx.classify(seq), Arrival::Duplicate);
    }
    assert_eq!(rx.classify(u64::MAX), Arrival::OutsideWindow);
    assert_eq!(RecvWindow::<u8, 4>::starting_at(0).expected(), 1);
}

#[test]
fn draining_hands_back_every_held_packet_once() {
    let mut rx = RecvWindow::<u64, 8>::new();
    for seq in [1, 2, 4, 7] {
        rx.receive(seq, seq * 10).expect("in window");
    }
    rx.pop();
    let mut got = Vec::new();
    rx.drain_held(|seq, item| got.push((seq, item)));
    assert_eq!(got, vec![(2, 20), (4, 40), (7, 70)]);
    assert_eq!(rx.held(), 0);
    assert_eq!(rx.pop(), None);
    assert_eq!(rx.expected(), 3);
    let mut again = 0;
    rx.drain_held(|_, _| again += 1);
    assert_eq!(again, 0);
}

// ------------------------------------------------------------- SendWindow

#[test]
fn pushes_are_numbered_from_one_until_full() {
    let mut tx = SendWindow::<char, 3>::new();
    assert!(tx.is_empty());
    assert_eq!(tx.push('a', t(0)), Ok(1));
    assert_eq!(tx.push('b', t(0)), Ok(2));
    assert_eq!(tx.push('c', t(0)), Ok(3));
    assert!(tx.is_full());
    assert_eq!(tx.push('d', t(0)), Err(PushError::Full('d')));
    assert_eq!((tx.len(), tx.in_flight(), tx.next_seq()), (3, 3, 4));
    assert_eq!(tx.oldest_unacked(), Some(1));
}

#[test]
fn cumulative_acks_release_in_order_exactly_once() {
    let mut tx = SendWindow::<u64, 4>::new();
    for i in 1..=4 {
        tx.push(i * 10, t(0)).expect("room");
    }
    let (r, out) = release(&mut tx, ack(3, 0), 5);
    assert_eq!(out, vec![(1, 10), (2, 20)]);
    assert_eq!(r.map(|a| a.released), Ok(2));
    // Repeated and stale acks release nothing.
    for stale in [ack(3, 0), ack(2, 0), ack(1, 0), ack(0, 0)] {
        let (r, out) = release(&mut tx, stale, 6);
        assert_eq!(r, Ok(Acked::default()));
        assert!(out.is_empty());
    }
    assert_eq!(tx.oldest_unacked(), Some(3));
    assert_eq!(tx.push(50, t(7)), Ok(5));
    assert_eq!(tx.push(60, t(7)), Ok(6));
    assert!(tx.is_full());
    let (_, out) = release(&mut tx, ack(7, 0), 8);
    assert_eq!(seqs(&out), vec![3, 4, 5, 6]);
    assert!(tx.is_empty());
    assert_eq!(tx.in_flight(), 0);
}

#[test]
fn selective_acks_release_the_middle_and_the_window_waits_for_the_gap() {
    let mut tx = SendWindow::<u64, 8>::new();
    for i in 1..=6 {
        tx.push(i, t(0)).expect("room");
    }
    // 1 missing; 3 and 5 arrived (bits 1 and 3 after cumulative 1).
    let (_, out) = release(&mut tx, ack(1, 0b1010), 1);
    assert_eq!(seqs(&out), vec![3, 5]);
    assert_eq!((tx.len(), tx.in_flight()), (4, 6));
    assert_eq!(tx.oldest_unacked(), Some(1));
    // Cumulative 4 releases 1 and 2 (3 is gone already), then sack 6.
    let (r, out) = release(&mut tx, ack(4, 0b10), 2);
    assert_eq!(seqs(&out), vec![1, 2, 6]);
    assert_eq!(r.map(|a| a.released), Ok(3));
    assert_eq!(tx.oldest_unacked(), Some(4));
    assert_eq!(tx.in_flight(), 3);
}

#[test]
fn a_stale_cumulative_ack_still_counts_its_sack() {
    let mut tx = SendWindow::<u64, 8>::new();
    for i in 1..=4 {
        tx.push(i, t(0)).expect("room");
    }
    release(&mut tx, ack(3, 0), 1).0.expect("ack");
    // Reordered older ack: cumulative 1, and 4 (bit 2) arrived.
    let (_, out) = release(&mut tx, ack(1, 0b100), 2);
    assert_eq!(seqs(&out), vec![4]);
    assert_eq!(tx.oldest_unacked(), Some(3));
    // Cumulative 2 is below base 3; bit 0 names 3.
    let (_, out) = release(&mut tx, ack(2, 0b1), 3);
    assert_eq!(seqs(&out), vec![3]);
    assert!(tx.is_empty());
    assert_eq!(tx.next_seq(), 5);
}

#[test]
fn acks_beyond_what_was_sent_are_refused_whole() {
    let mut tx = SendWindow::<u64, 8>::new();
    for i in 1..=3 {
        tx.push(i, t(0)).expect("room");
    }
    let beyond = [
        ack(5, 0),
        ack(u64::MAX, 0),
        ack(4, 1),       // names 5
        ack(1, 0b100),   // names 4
        ack(0, 0b1000),  // names 4
        ack(2, 1 << 63), // names 66
        ack(u64::MAX, u64::MAX),
    ];
    for a in beyond {
        let (r, out) = release(&mut tx, a, 1);
        assert_eq!(
            r,
            Err(AckBeyondSent {
                ack: a,
                next_seq: 4
            }),
            "{a:?}"
        );
        assert!(out.is_empty());
    }
    assert_eq!(tx.len(), 3);
    // Exactly everything sent is fine.
    let (_, out) = release(&mut tx, ack(1, 0b11), 1);
    assert_eq!(seqs(&out), vec![2, 3]);
    let (_, out) = release(&mut tx, ack(4, 0), 1);
    assert_eq!(seqs(&out), vec![1]);
    // Nothing sent yet: only cumulative <= next with no sack passes.
    let mut fresh = SendWindow::<u64, 8>::new();
    assert!(release(&mut fresh, ack(1, 0), 0).0.is_ok());
    assert!(release(&mut fresh, ack(1, 1), 0).0.is_err());
    assert!(release(&mut fresh, ack(2, 0), 0).0.is_err());
    let e = AckBeyondSent {
        ack: ack(9, 2),
        next_seq: 4,
    };
    assert_eq!(
        e.to_string(),
        "acknowledgement (cumulative 9, sack 0x2) covers packets never sent (next is 4)"
    );
}

#[test]
fn karns_rule_gates_rtt_samples() {
    let mut tx = SendWindow::<u64, 8>::new();
    tx.push(1, t(100)).expect("room");
    tx.push(2, t(150)).expect("room");
    tx.push(3, t(160)).expect("room");
    // The newest released (2) was sent once: sample from its send time.
    let (r, _) = release(&mut tx, ack(3, 0), 400);
    assert_eq!(r.map(|a| a.rtt), Ok(Some(d(250))));
    // 3 is retransmitted: its ack is ambiguous.
    let resent = tx.next_retransmit(t(1_000), d(500)).expect("expired");
    assert_eq!((resent.seq, resent.transmits), (3, 2));
    tx.push(4, t(1_000)).expect("room");
    let (r, _) = release(&mut tx, ack(4, 0), 1_100);
    assert_eq!(r.map(|a| (a.released, a.rtt)), Ok((1, None)));
    // Newest released once-sent item gives a sample even if an older one
    // in the same ack was retransmitted.
    tx.push(5, t(1_000)).expect("room");
    tx.next_retransmit(t(2_000), d(500)).expect("4 expired");
    let (r, _) = release(&mut tx, ack(6, 0), 2_050);
    assert_eq!(r.map(|a| (a.released, a.rtt)), Ok((2, Some(d(1_050)))));
    // No release, no sample; a clock that went backwards gives 0.
    assert_eq!(release(&mut tx, ack(6, 0), 9).0, Ok(Acked::default()));
    tx.push(6, t(500)).expect("room");
    assert_eq!(
        release(&mut tx, ack(7, 0), 10).0.map(|a| a.rtt),
        Ok(Some(Duration::ZERO))
    );
}

#[test]
fn retransmission_picks_expired_packets_oldest_first() {
    let mut tx = SendWindow::<u64, 8>::new();
    tx.push(1, t(0)).expect("room");
    tx.push(2, t(10)).expect("room");
    tx.push(3, t(20)).expect("room");
    assert_eq!(tx.oldest_sent_at(), Some(t(0)));
    assert_eq!(tx.retransmit_deadline(d(100)), Some(t(100)));
    assert!(tx.next_retransmit(t(99), d(100)).is_none());
    let r = tx.next_retransmit(t(110), d(100)).expect("1 and 2 expired");
    assert_eq!((r.seq, *r.item, r.transmits), (1, 1, 2));
    *r.item = 11; // the engine may rewrite the retained packet (new ack field)
    let r = tx.next_retransmit(t(110), d(100)).expect("2 expired");
    assert_eq!((r.seq, r.transmits), (2, 2));
    assert!(tx.next_retransmit(t(110), d(100)).is_none());
    assert_eq!(tx.oldest_sent_at(), Some(t(20)));
    assert_eq!(tx.retransmit_deadline(d(100)), Some(t(120)));
    let r = tx.next_retransmit(t(500), d(100)).expect("all expired");
    assert_eq!((r.seq, *r.item, r.transmits), (1, 11, 3));
    // An rto of 0 still lets a loop until None terminate.
    let mut n = 0;
    while tx.next_retransmit(t(600), d(0)).is_some() {
        n += 1;
        assert!(n <= 3);
    }
    assert_eq!(n, 3);
    assert_eq!(tx.retransmit_deadline(d(0)), Some(t(601)));
    assert_eq!(SendWindow::<u8, 2>::new().retransmit_deadline(d(5)), None);
}

#[test]
fn fast_retransmit_after_three_later_packets_are_sacked() {
    let mut tx = SendWindow::<u64, 16>::new();
    for i in 1..=6 {
        tx.push(i, t(0)).expect("room");
    }
    release(&mut tx, ack(1, 0b11), 1).0.expect("sack 2, 3");
    assert!(tx.next_fast_retransmit(t(2)).is_none());
    release(&mut tx, ack(1, 0b111), 3).0.expect("sack 4");
    let r = tx.next_fast_retransmit(t(4)).expect("1 presumed lost");
    assert_eq!((r.seq, r.transmits), (1, 2));
    // Once only; 5 and 6 have not been overtaken.
    assert!(tx.next_fast_retransmit(t(5)).is_none());
    tx.push(7, t(6)).expect("room");
    release(&mut tx, ack(1, 0b10_0111), 7).0.expect("sack 7");
    assert!(tx.next_fast_retransmit(t(8)).is_none());
    tx.push(8, t(8)).expect("room");
    tx.push(9, t(8)).expect("room");
    release(&mut tx, ack(1, 0b1110_0111), 9)
        .0
        .expect("sack 8, 9");
    // 5 and 6 each have 7, 8, 9 after them.
    assert_eq!(tx.next_fast_retransmit(t(10)).map(|r| r.seq), Some(5));
    assert_eq!(tx.next_fast_retransmit(t(10)).map(|r| r.seq), Some(6));
    assert!(tx.next_fast_retransmit(t(10)).is_none());
}

#[test]
fn resending_everything_walks_the_ring_in_order() {
    let mut tx = SendWindow::<u64, 4>::new();
    for i in 1..=4 {
        tx.push(i, t(0)).expect("room");
    }
    release(&mut tx, ack(3, 0), 1).0.expect("ack");
    tx.push(5, t(2)).expect("room");
    tx.push(6, t(2)).expect("room");
    // Slots wrapped: 5 and 6 sit before 3 and 4 in the ring.
    let order: Vec<u64> = tx.iter().map(|(s, _)| s).collect();
    assert_eq!(order, vec![3, 4, 5, 6]);
    release(&mut tx, ack(3, 0b10), 3).0.expect("sack 5");
    let retained: Vec<u64> = tx.iter().map(|(s, _)| s).collect();
    for seq in retained {
        *tx.get_mut(seq).expect("retained") += 100;
    }
    let resent: Vec<(u64, u64, u32)> = tx
        .resend_all(t(50))
        .map(|r| (r.seq, *r.item, r.transmits))
        .collect();
    assert_eq!(resent, vec![(3, 103, 2), (4, 104, 2), (6, 106, 2)]);
    assert_eq!(tx.oldest_sent_at(), Some(t(50)));
    // Resent packets give no RTT sample.
    assert_eq!(release(&mut tx, ack(7, 0), 60).0.map(|a| a.rtt), Ok(None));
}

#[test]
fn draining_fails_every_packet_once_and_numbers_are_not_reused() {
    let mut tx = SendWindow::<u64, 4>::new();
    for i in 1..=4 {
        tx.push(i, t(0)).expect("room");
    }
    release(&mut tx, ack(1, 0b10), 1).0.expect("sack 3");
    let mut failed = Vec::new();
    tx.drain(|seq, item| failed.push((seq, item)));
    assert_eq!(failed, vec![(1, 1), (2, 2), (4, 4)]);
    assert!(tx.is_empty() && !tx.is_full());
    tx.drain(|_, _| panic!("drained twice"));
    assert_eq!(tx.push(5, t(2)), Ok(5));
    // Acks for the drained numbers release nothing and are not refused.
    assert_eq!(release(&mut tx, ack(3, 0), 3).0, Ok(Acked::default()));
}

#[test]
fn the_sequence_space_ends_before_u64_max() {
    let mut tx = SendWindow::<u64, 8>::starting_at(u64::MAX - 2);
    assert_eq!(tx.push(1, t(0)), Ok(u64::MAX - 2));
    assert_eq!(tx.push(2, t(0)), Ok(u64::MAX - 1));
    assert_eq!(tx.push(3, t(0)), Err(PushError::SeqExhausted(3)));
    assert!(tx.is_full());
    assert!(release(&mut tx, ack(u64::MAX, 1), 1).0.is_err());
    assert!(release(&mut tx, ack(u64::MAX - 1, 1), 1).0.is_err());
    let (_, out) = release(&mut tx, ack(u64::MAX - 2, 1), 1);
    assert_eq!(seqs(&out), vec![u64::MAX - 1]);
    let (_, out) = release(&mut tx, ack(u64::MAX, 0), 1);
    assert_eq!(seqs(&out), vec![u64::MAX - 2]);
    assert!(tx.is_empty());
    assert_eq!(SendWindow::<u8, 4>::starting_at(0).next_seq(), 1);
    assert_eq!(PushError::Full(1).to_string(), "send window full");
    assert_eq!(PushError::SeqExhausted(7).into_item(), 7);
    assert_eq!(Refused::OutsideWindow(3).into_item(), 3);
    assert_eq!(Refused::Duplicate(()).to_string(), "duplicate packet");
}

#[test]
fn a_64_wide_send_window_uses_every_bit() {
    let mut tx = SendWindow::<u64, 64>::new();
    for i in 1..=64 {
        assert_eq!(tx.push(i, t(0)), Ok(i));
    }
    assert!(tx.is_full());
    // Cumulative 1 with all 63 sack bits: everything but 1.
    let (_, out) = release(&mut tx, ack(1, u64::MAX >> 1), 1);
    assert_eq!(seqs(&out), (2..=64).collect::<Vec<_>>());
    assert!(release(&mut tx, ack(1, u64::MAX), 1).0.is_err());
    assert_eq!((tx.len(), tx.in_flight()), (1, 64));
    assert_eq!(tx.next_fast_retransmit(t(2)).map(|r| r.seq), Some(1));
    let (_, out) = release(&mut tx, ack(65, 0), 3);
    assert_eq!(seqs(&out), vec![1]);
    assert!(tx.is_empty());
}

// ---------------------------------------------------------------- property

/// One step of the lossy-channel simulation.
#[derive(Debug, Clone)]
enum Step {
    /// The user queues this many packets (as far as the window allows).
    Push(u8),
    /// The network delivers one in-flight packet (any, so reordering).
    Deliver(Index),
    /// The network copies one in-flight packet.
    Duplicate(Index),
    /// The network loses one in-flight packet.
    Lose(Index),
    /// The network delivers one in-flight ack.
    DeliverAck(Index),
    /// The network copies one in-flight ack.
    DuplicateAck(Index),
    /// The network loses one in-flight ack.
    LoseAck(Index),
    /// Time passes; expired packets are retransmitted.
    Tick(u64),
    /// The sender retransmits what selective acks show missing.
    FastRetransmit,
    /// The sender puts everything retained on the wire again, as after a
    /// reconnect.
    ResendAll,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u8..5).prop_map(Step::Push),
        6 => any::<Index>().prop_map(Step::Deliver),
        1 => any::<Index>().prop_map(Step::Duplicate),
        2 => any::<Index>().prop_map(Step::Lose),
        4 => any::<Index>().prop_map(Step::DeliverAck),
        1 => any::<Index>().prop_map(Step::DuplicateAck),
        2 => any::<Index>().prop_map(Step::LoseAck),
        2 => (0u64..250).prop_map(Step::Tick),
        1 => Just(Step::FastRetransmit),
        1 => Just(Step::ResendAll),
    ]
}

const RTO: u64 = 100;

/// A sender and a receiver joined by a network that may lose, copy and
/// reorder packets and acks. Item `k` is pushed `k`-th, so it gets
/// sequence number `k + 1`.
struct Sim<const W: usize> {
    tx: SendWindow<u64, W>,
    rx: RecvWindow<u64, W>,
    wire: Vec<(u64, u64)>,
    acks: Vec<Ack>,
    now: u64,
    pushed: u64,
    total: u64,
    delivered: Vec<u64>,
    released: Vec<u32>,
    received: HashSet<u64>,
}

impl<const W: usize> Sim<W> {
    fn new(total: u64) -> Self {
        Sim {
            tx: SendWindow::new(),
            rx: RecvWindow::new(),
            wire: Vec::new(),
            acks: Vec::new(),
            now: 0,
            pushed: 0,
            total,
            delivered: Vec::new(),
            released: vec![0; usize::try_from(total).expect("small")],
            received: HashSet::new(),
        }
    }

    fn push(&mut self, n: u8) -> Result<(), TestCaseError> {
        for _ in 0..n {
            if self.pushed == self.total {
                return Ok(());
            }
            match self.tx.push(self.pushed, t(self.now)) {
                Ok(seq) => {
                    prop_assert_eq!(seq, self.pushed + 1);
                    self.wire.push((seq, self.pushed));
                    self.pushed += 1;
                }
                Err(e) => {
                    prop_assert_eq!(e, PushError::Full(self.pushed));
                    prop_assert_eq!(self.tx.in_flight(), W as u64);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn arrive(&mut self, (seq, item): (u64, u64)) -> Result<(), TestCaseError> {
        prop_assert_eq!(item + 1, seq);
        match self.rx.receive(seq, item) {
            Ok(_) => {
                prop_assert!(self.received.insert(seq), "{} taken twice", seq);
                for (seq, item) in self.rx.deliver() {
                    prop_assert_eq!(seq, self.delivered.len() as u64 + 1);
                    prop_assert_eq!(item + 1, seq);
                    self.delivered.push(item);
                }
            }
            Err(Refused::Duplicate(_)) => {
                prop_assert!(self.received.contains(&seq));
            }
            Err(Refused::OutsideWindow(_)) => {
                prop_assert!(false, "a correct sender stays in the window: {}", seq);
            }
        }
        let a = self.rx.ack();
        check_ack(&a, &self.received)?;
        self.acks.push(a);
        Ok(())
    }

    fn apply_ack(&mut self, a: Ack) -> Result<(), TestCaseError> {
        let mut out = Vec::new();
        let r = self
            .tx
            .on_ack(a, t(self.now), |seq, item| out.push((seq, item)));
        prop_assert!(r.is_ok(), "an honest ack was refused: {:?}", r);
        let mut last = 0;
        for (seq, item) in out {
            prop_assert!(seq > last, "released out of order");
            last = seq;
            prop_assert_eq!(item + 1, seq);
            prop_assert!(self.received.contains(&seq), "released {} unreceived", seq);
            self.released[item as usize] += 1;
            prop_assert_eq!(self.released[item as usize], 1);
        }
        Ok(())
    }

    fn retransmit(&mut self) {
        while let Some(r) = self.tx.next_retransmit(t(self.now), d(RTO)) {
            self.wire.push((r.seq, *r.item));
        }
    }

    fn step(&mut self, s: Step) -> Result<(), TestCaseError> {
        match s {
            Step::Push(n) => self.push(n)?,
            Step::Deliver(i) if !self.wire.is_empty() => {
                let p = self.wire.swap_remove(i.index(self.wire.len()));
                self.arrive(p)?;
            }
            Step::Duplicate(i) if !self.wire.is_empty() => {
                self.wire.push(self.wire[i.index(self.wire.len())]);
            }
            Step::Lose(i) if !self.wire.is_empty() => {
                self.wire.swap_remove(i.index(self.wire.len()));
            }
            Step::DeliverAck(i) if !self.acks.is_empty() => {
                let a = self.acks.swap_remove(i.index(self.acks.len()));
                self.apply_ack(a)?;
            }
            Step::DuplicateAck(i) if !self.acks.is_empty() => {
                self.acks.push(self.acks[i.index(self.acks.len())]);
            }
            Step::LoseAck(i) if !self.acks.is_empty() => {
                self.acks.swap_remove(i.index(self.acks.len()));
            }
            Step::Tick(dt) => {
                self.now += dt;
                self.retransmit();
            }
            Step::FastRetransmit => {
                while let Some(r) = self.tx.next_fast_retransmit(t(self.now)) {
                    self.wire.push((r.seq, *r.item));
                }
            }
            Step::ResendAll => {
                for r in self.tx.resend_all(t(self.now)) {
                    self.wire.push((r.seq, *r.item));
                }
            }
            _ => {}
        }
        // The timer's start, however found, is the oldest transmission.
        prop_assert_eq!(self.tx.oldest_sent_at(), self.tx.oldest_sent_scanned());
        prop_assert!(self.tx.len() <= W);
        prop_assert!(self.tx.in_flight() <= W as u64);
        prop_assert!(self.rx.held() <= W);
        Ok(())
    }

    /// The network heals: every round, time passes, expired packets are
    /// resent and everything in flight arrives, in order.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..10 * self.total + 10 {
            if self.pushed == self.total && self.tx.is_empty() {
                break;
            }
            self.now += RTO;
            self.push(u8::MAX)?;
            self.retransmit();
            for p in std::mem::take(&mut self.wire) {
                self.arrive(p)?;
            }
            for a in std::mem::take(&mut self.acks) {
                self.apply_ack(a)?;
            }
        }
        prop_assert!(self.tx.is_empty(), "sender did not drain");
        prop_assert_eq!(self.pushed, self.total);
        prop_assert_eq!(&self.delivered, &(0..self.total).collect::<Vec<_>>());
        prop_assert!(self.released.iter().all(|&n| n == 1));
        prop_assert_eq!(self.rx.held(), 0);
        Ok(())
    }
}

/// An ack from an honest receiver claims exactly what it took.
fn check_ack(a: &Ack, received: &HashSet<u64>) -> Result<(), TestCaseError> {
    prop_assert!(a.cumulative >= 1);
    prop_assert!((1..a.cumulative).all(|s| received.contains(&s)));
    prop_assert!(!received.contains(&a.cumulative));
    for i in 0..64u64 {
        let Some(seq) = a.cumulative.checked_add(1 + i) else {
            break;
        };
        let bit = a.sack >> i & 1 == 1;
        prop_assert_eq!(bit, received.contains(&seq), "sack bit for {}", seq);
    }
    Ok(())
}

fn simulate<const W: usize>(total: u64, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let mut sim = Sim::<W>::new(total);
    for s in steps {
        sim.step(s)?;
    }
    sim.settle()
}

/// A forged acknowledgement: near the numbers in use, or anything.
fn forged_ack() -> impl Strategy<Value = Ack> {
    let cumulative = prop_oneof![3 => 0u64..40, 1 => any::<u64>(), 1 => Just(u64::MAX)];
    let sack = prop_oneof![2 => 0u64..256, 1 => any::<u64>()];
    (cumulative, sack).prop_map(|(cumulative, sack)| Ack { cumulative, sack })
}

/// A sequence number from the wire: near the numbers in use, or anything.
fn forged_seq() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0u64..120, 1 => any::<u64>(), 1 => Just(u64::MAX)]
}

#[derive(Debug, Clone)]
enum AckStep {
    Push,
    Ack(Ack),
}

/// Drives a receiver with arbitrary sequence numbers and pops, checking
/// it against the set of numbers it took.
fn receiver_model<const W: usize>(
    start: u64,
    steps: Vec<(u64, Option<u8>)>,
) -> Result<(), TestCaseError> {
    let mut rx = RecvWindow::<u64, W>::starting_at(start);
    let mut taken = BTreeSet::new();
    let mut next_delivery = start;
    for (seq, pops) in steps {
        let expected = rx.expected();
        let outside = seq == u64::MAX || u128::from(seq) >= u128::from(expected) + W as u128;
        let duplicate = seq < expected || taken.contains(&seq);
        let class = rx.classify(seq);
        match rx.receive(seq, seq) {
            Ok(_) => {
                prop_assert!(!outside && !duplicate);
                prop_assert!(matches!(class, Arrival::InOrder | Arrival::Early));
                prop_assert_eq!(class == Arrival::InOrder, seq == expected);
                taken.insert(seq);
            }
            Err(Refused::Duplicate(s)) => {
                prop_assert_eq!(s, seq);
                prop_assert!(duplicate && class == Arrival::Duplicate);
            }
            Err(Refused::OutsideWindow(s)) => {
                prop_assert_eq!(s, seq);
                prop_assert!(outside && !duplicate && class == Arrival::OutsideWindow);
            }
        }
        if let Some(n) = pops {
            for (seq, item) in rx.deliver().take(usize::from(n)) {
                prop_assert_eq!(seq, next_delivery);
                prop_assert_eq!(item, seq);
                next_delivery += 1;
            }
        }
        prop_assert!(rx.held() <= W);
        // The ack claims exactly what was taken, relative to the start.
        let a = rx.ack();
        prop_assert!(a.cumulative >= start);
        prop_assert!(taken.range(start..a.cumulative).count() as u64 == a.cumulative - start);
        prop_assert!(!taken.contains(&a.cumulative));
        let claimed: BTreeSet<u64> = (0..64u64)
            .filter(|i| a.sack >> i & 1 == 1)
            .map(|i| a.cumulative + 1 + i)
            .collect();
        let above: BTreeSet<u64> = taken.range(a.cumulative..).copied().collect();
        prop_assert_eq!(claimed, above);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn lossy_channel_delivers_everything_once_in_order_narrow(
        total in 0u64..60,
        steps in proptest::collection::vec(step(), 0..400),
    ) {
        simulate::<4>(total, steps)?;
    }

    #[test]
    fn forged_acks_release_only_what_they_cover(
        steps in proptest::collection::vec(
            prop_oneof![1 => Just(AckStep::Push), 2 => forged_ack().prop_map(AckStep::Ack)],
            0..200,
        ),
    ) {
        let mut tx = SendWindow::<u64, 8>::new();
        let mut retained = BTreeSet::new();
        let mut ever = 0u64;
        for s in steps {
            match s {
                AckStep::Push => match tx.push(tx.next_seq(), t(0)) {
                    Ok(seq) => {
                        retained.insert(seq);
                        ever += 1;
                    }
                    Err(e) => prop_assert_eq!(tx.in_flight(), 8, "{}", e),
                },
                AckStep::Ack(a) => {
                    let next = tx.next_seq();
                    // Beyond sent: cumulative past next, or a sack bit
                    // naming next or later.
                    let highest_sacked = (a.sack != 0).then(|| {
                        u128::from(a.cumulative) + 1 + u128::from(63 - a.sack.leading_zeros())
                    });
                    let beyond = a.cumulative > next
                        || highest_sacked.is_some_and(|h| h >= u128::from(next));
                    let covers = |s: u64| {
                        s < a.cumulative
                            || (s > a.cumulative && s - a.cumulative - 1 < 64
                                && a.sack >> (s - a.cumulative - 1) & 1 == 1)
                    };
                    let want: Vec<u64> = if beyond {
                        Vec::new()
                    } else {
                        retained.iter().copied().filter(|&s| covers(s)).collect()
                    };
                    let (r, out) = release(&mut tx, a, 0);
                    prop_assert_eq!(r.is_err(), beyond);
                    for (seq, item) in &out {
                        prop_assert_eq!(seq, item);
                    }
                    prop_assert_eq!(seqs(&out), want.clone());
                    prop_assert_eq!(r.map_or(0, |a| a.released), want.len());
                    for s in want {
                        retained.remove(&s);
                    }
                }
            }
            prop_assert_eq!(tx.len(), retained.len());
            prop_assert_eq!(tx.oldest_unacked(), retained.first().copied());
            prop_assert!(tx.in_flight() <= 8);
        }
        // Every number pushed comes back exactly once in all.
        let mut rest = Vec::new();
        tx.drain(|seq, _| rest.push(seq));
        prop_assert_eq!(rest, retained.iter().copied().collect::<Vec<_>>());
        prop_assert!(ever >= retained.len() as u64);
    }

    #[test]
    fn forged_sequence_numbers_never_break_the_receiver(
        steps in proptest::collection::vec(
            (forged_seq(), proptest::option::of(0u8..10)),
            0..300,
        ),
    ) {
        receiver_model::<8>(1, steps.clone())?;
        receiver_model::<64>(1, steps)?;
    }

    #[test]
    fn forged_sequence_numbers_near_the_end_of_the_space(
        steps in proptest::collection::vec(
            (prop_oneof![(u64::MAX - 80)..=u64::MAX, any::<u64>()], proptest::option::of(0u8..10)),
            0..200,
        ),
    ) {
        receiver_model::<8>(u64::MAX - 70, steps.clone())?;
        receiver_model::<64>(u64::MAX - 70, steps)?;
    }

    #[test]
    fn forged_packets_and_acks_between_real_windows(
        pushes in 0u64..30,
        seqs in proptest::collection::vec(forged_seq(), 0..100),
        acks in proptest::collection::vec(forged_ack(), 0..50),
    ) {
        // A receiver fed arbitrary numbers acks only what it took, and a
        // sender given those acks releases only that; forged acks on top
        // are refused or release only what they name.
        let mut tx = SendWindow::<u64, 16>::new();
        let mut rx = RecvWindow::<u64, 16>::new();
        for i in 0..pushes {
            let _ = tx.push(i, t(0));
        }
        let mut taken = HashSet::new();
        for s in seqs {
            if rx.receive(s, s).is_ok() {
                taken.insert(s);
            }
            let (r, out) = release(&mut tx, rx.ack(), 1);
            // The receiver may have taken numbers this sender never sent.
            if r.is_ok() {
                for (seq, _) in out {
                    prop_assert!(taken.contains(&seq));
                }
            } else {
                prop_assert!(out.is_empty());
            }
        }
        for a in acks {
            let before = tx.len();
            let (r, out) = release(&mut tx, a, 2);
            prop_assert_eq!(before - tx.len(), out.len());
            if r.is_err() {
                prop_assert!(out.is_empty());
            }
        }
    }
}

proptest! {
    // Fewer cases: each runs hundreds of packets through a 64-wide window.
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn lossy_channel_delivers_everything_once_in_order_wide(
        total in 0u64..200,
        steps in proptest::collection::vec(step(), 0..600),
    ) {
        simulate::<64>(total, steps)?;
    }
}
