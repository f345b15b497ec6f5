//! The shared-memory ring alone, between two threads pinned to their own
//! cores (two processes mapping one segment behave the same: the ring is
//! all the memory they share): one-way latency by ping-pong over two rings
//! at 8 B, 4 KiB and 64 KiB, and the message rate of 8-byte records
//! streamed one way. A push plus a pop on one thread is the floor.
//!
//! Open MPI's vader BTL takes 0.17–0.19 µs one-way for 8 bytes on this
//! project's test machine and moves 9.6–10.7 M messages a second; the ring
//! is the part of `sm` that has to beat that by most.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use btl_core::ring::{self, Consumer, Producer, PushError};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A ring of 64 Ki words (256 KiB): records up to 128 KiB.
const CAPACITY: usize = 1 << 16;

fn new_ring() -> Vec<AtomicU32> {
    let words: Vec<AtomicU32> = (0..ring::words_for(CAPACITY))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    words
}

/// Pins the calling thread to CPU `cpu`, where the host has it. The
/// CPUs are the process's as it started: a thread pinned already sees only
/// its own.
fn pin(cpu: usize) {
    static CPUS: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();
    let cpus = CPUS.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    if let Some(&id) = cpus.get(cpu) {
        core_affinity::set_for_current(id);
    }
}

fn push(p: &mut Producer<'_>, data: &[u8]) {
    loop {
        match p.push(1, &[data]) {
            Ok(()) => return,
            Err(PushError::Full) => std::hint::spin_loop(),
            Err(e) => panic!("{e:?}"),
        }
    }
}

fn pop(c: &mut Consumer<'_>, out: &mut [u8]) -> usize {
    loop {
        if let Some(r) = c.pop(out).expect("a sound ring") {
            return r.len;
        }
        std::hint::spin_loop();
    }
}

fn bench(c: &mut Criterion) {
    pin(0);
    let mut group = c.benchmark_group("ring");
    let (ping, pong) = (new_ring(), new_ring());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The echo: every record on `ping` goes back on `pong`.
        s.spawn(|| {
            pin(1);
            let mut rx = Consumer::attach(&ping).expect("ring");
            let mut tx = Producer::attach(&pong).expect("ring");
            let mut buf = vec![0u8; 128 << 10];
            while !stop.load(Ordering::Relaxed) {
                if let Some(r) = rx.pop(&mut buf).expect("a sound ring") {
                    push(&mut tx, &buf[..r.len]);
                }
            }
        });
        let mut tx = Producer::attach(&ping).expect("ring");
        let mut rx = Consumer::attach(&pong).expect("ring");
        let mut buf = vec![0u8; 128 << 10];
        for size in [8usize, 4096, 65536] {
            let data = vec![7u8; size];
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_function(format!("one-way {size} B"), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        push(&mut tx, &data);
                        black_box(pop(&mut rx, &mut buf));
                    }
                    start.elapsed() / 2
                })
            });
        }
        stop.store(true, Ordering::Relaxed);
    });

    // A push and a pop on one thread: the ring's own cost.
    let words = new_ring();
    let (mut tx, mut rx) = (
        Producer::attach(&words).expect("ring"),
        Consumer::attach(&words).expect("ring"),
    );
    let mut buf = [0u8; 64];
    group.throughput(Throughput::Elements(1));
    group.bench_function("push + pop 8 B, one thread", |b| {
        b.iter(|| {
            push(&mut tx, black_box(&[7u8; 8]));
            black_box(pop(&mut rx, &mut buf))
        })
    });

    // 8-byte records streamed from one core to the other.
    group.bench_function("message rate 8 B", |b| {
        b.iter_custom(|iters| {
            let words = new_ring();
            let start = Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| {
                    pin(1);
                    let mut rx = Consumer::attach(&words).expect("ring");
                    let mut buf = [0u8; 64];
                    for _ in 0..iters {
                        black_box(pop(&mut rx, &mut buf));
                    }
                });
                let mut tx = Producer::attach(&words).expect("ring");
                for _ in 0..iters {
                    push(&mut tx, &[7u8; 8]);
                }
            });
            start.elapsed().max(Duration::from_nanos(1))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
