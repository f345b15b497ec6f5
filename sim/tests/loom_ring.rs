//! Loom models of btl-core's shared-memory ring: a producer and a consumer
//! thread over one ring, every interleaving (up to a preemption bound) of
//! their atomic steps, checking that every record comes out once, whole
//! and in order: on the same slot as it is written, across the wrap (a
//! skip record, the zero past each record), and with the consumer's
//! position published lazily, so that the producer finds the ring full
//! and reads the position again.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p btl-sim --release --test loom_ring`.
//! `LOOM_MAX_PREEMPTIONS` overrides each model's bound.
// Compiled only under `--cfg loom`; the docs above stay so that the empty
// crate of a normal build is documented.
#![cfg(loom)]

use std::sync::atomic::AtomicUsize;

use btl_core::ring::{self, Consumer, Producer, PushError};
use loom::sync::Arc;
use loom::sync::atomic::AtomicU32;
use loom::thread;

/// The smallest ring: 16 words of data, so that a few records wrap.
const CAPACITY: usize = 16;

fn new_ring() -> Arc<Vec<AtomicU32>> {
    let words: Vec<AtomicU32> = (0..ring::words_for(CAPACITY))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    Arc::new(words)
}

/// Record `i`: `len` bytes that differ by `i`.
fn record(i: u8, len: usize) -> Vec<u8> {
    (0..len).map(|x| (x as u8) ^ i.wrapping_mul(31)).collect()
}

/// A producer thread pushes `lens.len()` records of those lengths (trying
/// again while the ring is full, yielding to the consumer); this thread
/// consumes them and checks each.
fn transfer(lens: &'static [usize]) {
    let words = new_ring();
    let theirs = Arc::clone(&words);
    let producer = thread::spawn(move || {
        let mut p = Producer::attach(&theirs).expect("producer");
        for (i, &len) in lens.iter().enumerate() {
            let data = record(i as u8, len);
            loop {
                match p.push(i as u8, &[&data]) {
                    Ok(()) => break,
                    Err(PushError::Full) => thread::yield_now(),
                    Err(e) => panic!("record {i}: {e:?}"),
                }
            }
        }
    });
    let mut c = Consumer::attach(&words).expect("consumer");
    let mut out = [0u8; 64];
    let mut next = 0;
    while next < lens.len() {
        match c.pop(&mut out).expect("a sound ring") {
            Some(r) => {
                assert_eq!(r.kind, next as u8, "records in order");
                assert_eq!(&out[..r.len], &record(next as u8, lens[next])[..]);
                next += 1;
            }
            None => thread::yield_now(),
        }
    }
    producer.join().expect("the producer");
    assert_eq!(c.pop(&mut out), Ok(None), "nothing more than was pushed");
}

/// Runs `model` under loom with the given preemption bound unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise, and reports the interleavings.
fn check(name: &str, bound: usize, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(bound));
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let count = runs.clone();
    builder.check(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    eprintln!(
        "{name}: {} interleavings",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn a_record_read_while_it_is_written_is_whole() {
    // Two small records: the consumer polls the very slot being written.
    check("same slot", 4, || transfer(&[4, 8]));
}

#[test]
fn records_wrap_behind_a_skip_and_the_full_ring_is_read_again() {
    // 16 words of data; 16 bytes take 6 words. The third record does not
    // fit before the end (offset 12): it goes at the start behind a skip
    // of 4 words, and needs 12 free words, so the producer finds the ring
    // full until the consumer has read the first two and published its
    // position.
    check("wrap and lazy tail", 4, || transfer(&[16, 16, 16]));
}
