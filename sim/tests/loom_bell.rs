//! A loom model of btl-core's ring bell (`btl_core::ring::Bell`): a
//! consumer about to sleep and a producer pushing a record and ringing,
//! in every interleaving of their atomic steps. No wake is ever lost:
//! either the consumer, looking at its ring once more after it said it
//! sleeps, finds the record, or the producer finds it asleep and moves
//! the sequence the consumer would sleep on, so that its sleep (a futex
//! wait on that value) ends at once.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p btl-sim --release --test loom_bell`.
// Compiled only under `--cfg loom`; the docs above stay so that the empty
// crate of a normal build is documented.
#![cfg(loom)]

use btl_core::ring::Bell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;

/// The words a consumer shares with its producer: its sleep state and wake
/// sequence, and a stand-in for a record's stamp.
struct Shared {
    state: AtomicU32,
    sequence: AtomicU32,
    record: AtomicU32,
}

/// What the futex wake would do: the sequence has already moved.
fn wake(_: &AtomicU32) {}

#[test]
fn a_consumer_going_to_sleep_never_misses_a_push() {
    loom::model(|| {
        let shared = Arc::new(Shared {
            state: AtomicU32::new(Bell::AWAKE),
            sequence: AtomicU32::new(0),
            record: AtomicU32::new(0),
        });
        let theirs = Arc::clone(&shared);
        let producer = thread::spawn(move || {
            let bell = Bell::new(&theirs.state, &theirs.sequence, wake);
            // The record's stamp, published as the ring does.
            theirs.record.store(1, Ordering::Release);
            bell.ring();
        });
        let bell = Bell::new(&shared.state, &shared.sequence, wake);
        let seen = bell.going_to_sleep();
        let found = shared.record.load(Ordering::Acquire) == 1;
        producer.join().expect("the producer");
        let moved = shared.sequence.load(Ordering::Acquire) != seen;
        assert!(
            found || moved,
            "the consumer would sleep on a sequence nobody moves, with a record waiting"
        );
    });
}

#[test]
fn a_polling_consumer_costs_its_producer_no_wake() {
    loom::model(|| {
        let shared = Arc::new(Shared {
            state: AtomicU32::new(Bell::POLLING),
            sequence: AtomicU32::new(0),
            record: AtomicU32::new(0),
        });
        let theirs = Arc::clone(&shared);
        let producer = thread::spawn(move || {
            theirs.record.store(1, Ordering::Release);
            Bell::new(&theirs.state, &theirs.sequence, wake).ring();
        });
        producer.join().expect("the producer");
        assert_eq!(shared.sequence.load(Ordering::Relaxed), 0);
    });
}
