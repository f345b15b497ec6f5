//! Engine throughput over the in-memory stream pair (`btl_tests::pair::stream`), next
//! to a plain `copy_from_slice` of the same bytes in the same run.
//!
//! - `send/<size>`: A sends a batch of messages (`prepare_src` of an owned
//!   descriptor + `send`); the pair runs rounds while B polls until it has
//!   received them all. Throughput counts payload bytes.
//! - `put/1 MiB`: one put of 1 MiB from A's registered memory into B's,
//!   until A's completion (every packet acknowledged).
//! - `memcpy/<size>`: `copy_from_slice` of as many bytes, in the same
//!   chunks: the floor any byte transfer layer pays at least once.
//! - `sendi 8 B rate`: batches of 8-byte `sendi`s until B has them all.
//! - `pingpong 8 B`: A sends 8 bytes with `sendi`, B answers once it has
//!   them, A waits for the answer: the engines' share of a small
//!   message's round trip, without the system calls.
//!
//! The engines have CRC trailers off (the default), 64 credits and 128
//! fragments per class; the pipes hold 256 KiB. Every byte is copied
//! three times on the send path (into a fragment, into the pipe, into the
//! receive fragment) and twice on the put path (into the pipe, into the
//! target), so a ratio to memcpy near 1/3 and 1/2 is the best this driver
//! allows.

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, HEADER_RESERVE, Stream};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::Instant;
use btl_std::driver::heap::{Heap, HeapEngine};
use btl_std::driver::recorder::Recorder;
use btl_tests::pair::stream::StreamPair;
use btl_tests::world::Side;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

/// Messages per iteration of a send benchmark: half the credit window, so
/// that the acknowledgements of one batch never hold the next one back.
const BATCH: usize = 32;
/// Bytes of one put.
const PUT_LEN: usize = 1 << 20;
/// Rounds a batch may take before the benchmark counts as broken.
const MAX_ROUNDS: usize = 100_000;

type E = HeapEngine<Stream>;
type Pair = StreamPair<E, { 256 << 10 }, 2, Box<E>>;

fn config() -> FragmentPoolsConfig {
    let pool = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: 128,
        max: 128,
        inc: 128,
    };
    FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096),
        max: pool(64 << 10),
    }
}

/// Bytes of journal a recording engine keeps before it starts over, when
/// `ENGINE_BENCH_RECORD` is set: the cost of the flight recorder.
const RECORD: usize = 256 << 20;

/// Whether the engines record (`ENGINE_BENCH_RECORD=1`).
fn recording() -> bool {
    std::env::var_os("ENGINE_BENCH_RECORD").is_some()
}

/// Starts over the journal of each engine of `pair` whose journal is full.
fn keep_recording(pair: &mut Pair) {
    for side in [Side::A, Side::B] {
        let engine = pair.engine_mut(side);
        if engine.journal().is_full() {
            engine.journal_mut().clear();
        }
    }
}

fn engine(me: ProcName) -> Box<E> {
    let mut config = EngineConfig::new(me);
    config.initial_credits = 64;
    let capacities = Capacities {
        peers: 2,
        links: 2,
        ..Capacities::SOCKET_MODULE
    };
    let mut engine =
        Heap::engine(config, Stream, capacities, self::config(), Instant::ZERO).expect("pools");
    if recording() {
        *engine.journal_mut() = Recorder::with_limit(RECORD).expect("memory for the journal");
    }
    Box::new(engine)
}

/// One round, then `side` polls everything; returns the messages received.
fn round_and_poll(pair: &mut Pair, side: Side) -> usize {
    pair.round();
    let mut got = 0;
    while let Some(ev) = pair.engine_mut(side).poll_event() {
        if let Event::Received(m) = ev {
            black_box(m.data);
            got += 1;
        }
    }
    got
}

/// Runs rounds, `side` polling, until `want` more messages have arrived.
fn receive(pair: &mut Pair, side: Side, want: usize) {
    let mut got = 0;
    for _ in 0..MAX_ROUNDS {
        if got >= want {
            return;
        }
        got += round_and_poll(pair, side);
    }
    panic!("{got} of {want} messages arrived");
}

fn bench(c: &mut Criterion) {
    let names = [ProcName::new(9, 0), ProcName::new(9, 1)];
    let src = vec![0x5Au8; PUT_LEN];
    let dst = vec![0u8; PUT_LEN];
    let mut pair = Box::new(Pair::new(engine(names[0]), engine(names[1]), names, 1));
    let [ep_b, ep_a]: [EndpointId; 2] = pair.introduce().expect("each reaches the other");
    let hs = pair.a().register_mem(src, Access::empty()).expect("source");
    let hd = pair
        .b()
        .register_mem(dst, Access::REMOTE_WRITE)
        .expect("target");
    // Connect before measuring.
    let d = pair
        .a()
        .prepare_src(ep_b, b"hello", 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
        .expect("descriptor");
    let _ = pair.a().send(ep_b, d, Tag(0x80)).expect("send");
    receive(&mut pair, Side::B, 1);

    let plain_src = vec![0xA5u8; PUT_LEN];
    let mut plain_dst = vec![0u8; PUT_LEN];
    let mut group = c.benchmark_group("engine");
    for (size, label) in [(64usize, "64 B"), (4096, "4 KiB"), (64 << 10, "64 KiB")] {
        let payload = vec![0x3Cu8; size];
        group.throughput(Throughput::Bytes((BATCH * size) as u64));
        group.bench_function(format!("send/{label}"), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    let a = pair.a();
                    let d = a
                        .prepare_src(
                            ep_b,
                            black_box(&payload),
                            0,
                            Order::ANY,
                            DescFlags::BTL_OWNERSHIP,
                        )
                        .expect("descriptor");
                    let _ = a.send(ep_b, d, Tag(0x81)).expect("send");
                }
                receive(&mut pair, Side::B, BATCH);
            })
        });
        group.bench_function(format!("memcpy/{label}"), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    plain_dst[..size].copy_from_slice(black_box(&plain_src[..size]));
                    black_box(&plain_dst[..size]);
                }
            })
        });
    }

    group.throughput(Throughput::Bytes(PUT_LEN as u64));
    let local = MemSlice {
        handle: hs,
        offset: 0,
        len: PUT_LEN as u64,
    };
    let remote = RemoteSlice {
        key: hd.remote_key(),
        offset: 0,
        len: PUT_LEN as u64,
    };
    group.bench_function("put/1 MiB", |b| {
        b.iter(|| {
            pair.a().put(ep_b, local, remote, 1).expect("put");
            for _ in 0..MAX_ROUNDS {
                pair.round();
                let mut done = false;
                while let Some(ev) = pair.a().poll_event() {
                    if let Event::PutComplete { result, .. } = ev {
                        result.expect("the put lands");
                        done = true;
                    }
                }
                if done {
                    return;
                }
            }
            panic!("the put never completed");
        })
    });
    group.bench_function("memcpy/1 MiB", |b| {
        b.iter(|| {
            plain_dst.copy_from_slice(black_box(&plain_src));
            black_box(&plain_dst);
        })
    });

    group.throughput(Throughput::Elements(BATCH as u64));
    let eight = [7u8; 8];
    group.bench_function("sendi 8 B rate", |b| {
        b.iter(|| {
            let (mut sent, mut got) = (0, 0);
            for _ in 0..MAX_ROUNDS {
                while sent < BATCH {
                    match pair.a().sendi(
                        ep_b,
                        &[],
                        black_box(&eight),
                        Tag(0x82),
                        Order::ANY,
                        DescFlags::empty(),
                    ) {
                        Ok(()) => sent += 1,
                        // No credit or window room yet: let the pair run.
                        Err(_) => break,
                    }
                }
                if sent == BATCH {
                    break;
                }
                got += round_and_poll(&mut pair, Side::B);
            }
            receive(&mut pair, Side::B, BATCH.saturating_sub(got));
            keep_recording(&mut pair);
        })
    });

    // One message each way, each waiting for the other: the engine's share
    // of a small message's latency, without a system call.
    group.throughput(Throughput::Elements(1));
    group.bench_function("pingpong 8 B", |b| {
        b.iter(|| {
            pair.a()
                .sendi(
                    ep_b,
                    &[],
                    black_box(&eight),
                    Tag(0x83),
                    Order::ANY,
                    DescFlags::empty(),
                )
                .expect("A has credits: every ping was answered");
            receive(&mut pair, Side::B, 1);
            pair.b()
                .sendi(
                    ep_a,
                    &[],
                    black_box(&eight),
                    Tag(0x83),
                    Order::ANY,
                    DescFlags::empty(),
                )
                .expect("B has credits: every pong was answered");
            receive(&mut pair, Side::A, 1);
            keep_recording(&mut pair);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
