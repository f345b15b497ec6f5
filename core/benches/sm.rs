//! The shared-memory BTL's core between two threads pinned to their own
//! cores, as two processes over one segment: one-way latency of a
//! `sendi` / `send_copy` answered from the other side's `poll_event`, at
//! 8 B, 4 KiB and 64 KiB. The ring alone is `benches/ring.rs`: the
//! difference is what tags, events and descriptors cost.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use btl_core::btl::{Btl, Event, Tag};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig, PoolCell};
use btl_core::ring;
use btl_core::sm::SharedMemory;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

type Sm<'a> = SharedMemory<'a, &'a [PoolCell], Vec<u8>, 2, 4, 4, 64>;

/// A ring of 64 Ki words: records up to 128 KiB.
fn ring_words() -> Vec<AtomicU32> {
    let words: Vec<AtomicU32> = (0..ring::words_for(1 << 16))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    words
}

fn pools_config() -> FragmentPoolsConfig {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 32,
        max: 32,
        inc: 8,
    };
    FragmentPoolsConfig {
        small: pool(256),
        eager: pool(80 << 10),
        max: pool(128 << 10),
    }
}

fn module<'a>(
    region: &'a mut [u8],
    peer: ProcName,
    tx: &'a [AtomicU32],
    rx: &'a [AtomicU32],
) -> (Sm<'a>, EndpointId) {
    let mut sm: Sm<'a> =
        SharedMemory::new(FragmentPools::new(region, pools_config()).expect("pools"));
    sm.attach(peer, tx, rx).expect("attach");
    let mut eps = [None];
    let mut words = [0u64];
    sm.add_procs(&[peer], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    (sm, eps[0].expect("reachable"))
}

/// Pins the calling thread to CPU `cpu` of the process's CPUs.
fn pin(cpu: usize) {
    static CPUS: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();
    let cpus = CPUS.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    if let Some(&id) = cpus.get(cpu) {
        core_affinity::set_for_current(id);
    }
}

/// Sends `data` until the module takes it.
fn send(sm: &mut Sm<'_>, to: EndpointId, data: &[u8]) {
    while sm.send_copy(to, Tag(0x80), data).is_err() {
        sm.progress();
    }
}

fn bench(c: &mut Criterion) {
    pin(0);
    let (ab, ba) = (ring_words(), ring_words());
    let cfg = pools_config();
    let (mut ra, mut rb) = (
        vec![0u8; FragmentPools::required_bytes(&cfg)],
        vec![0u8; FragmentPools::required_bytes(&cfg)],
    );
    let stop = AtomicBool::new(false);
    let mut group = c.benchmark_group("sm");
    std::thread::scope(|s| {
        let (ab, ba, stop) = (&ab, &ba, &stop);
        let rb = &mut rb;
        // The echo: every message back to its sender.
        s.spawn(move || {
            pin(1);
            let (mut b, a_at_b) = module(rb, ProcName::new(1, 0), ba, ab);
            let mut copy = Vec::with_capacity(128 << 10);
            while !stop.load(Ordering::Relaxed) {
                b.progress();
                while let Some(event) = b.poll_event() {
                    if let Event::Received(m) = event {
                        copy.clear();
                        copy.extend_from_slice(m.data);
                        break;
                    }
                }
                if !copy.is_empty() {
                    send(&mut b, a_at_b, &copy);
                    copy.clear();
                }
            }
        });
        let (mut a, b_at_a) = module(&mut ra, ProcName::new(1, 1), ab, ba);
        for size in [8usize, 4096, 65536] {
            let data = vec![7u8; size];
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_function(format!("one-way {size} B"), |bench| {
                bench.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        send(&mut a, b_at_a, &data);
                        'wait: loop {
                            a.progress();
                            while let Some(event) = a.poll_event() {
                                if let Event::Received(m) = event {
                                    black_box(m.data.len());
                                    break 'wait;
                                }
                            }
                        }
                    }
                    start.elapsed() / 2
                })
            });
        }
        stop.store(true, Ordering::Relaxed);
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
