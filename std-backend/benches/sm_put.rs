//! Puts and gets between two shared-memory modules (two threads pinned
//! to two cores, as two processes would be), moved in one copy by the
//! target (cross-memory attach) and through the rings in pieces, in one
//! run: `cargo bench -p btl-std --bench sm_put`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteKey, RemoteSlice, Tag};
use btl_core::endpoint::ProcName;
use btl_std::SmModule;
use common::{open, pin, reach};
#[path = "common/sm.rs"]
mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const MAX: usize = 4 << 20;
const KEY: Tag = Tag(0x80);

/// Moves `sm` until `take` takes an event.
fn until<R>(sm: &mut SmModule, mut take: impl FnMut(Event<'_>) -> Option<R>) -> R {
    loop {
        sm.progress();
        while let Some(e) = sm.poll_event() {
            if let Some(r) = take(e) {
                return r;
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("btl-bench-sm-put-{}", std::process::id()));
    let mut group = c.benchmark_group("sm_put");
    for (name, limit) in [("one copy", "32k"), ("rings", "0")] {
        let job = u64::from(std::process::id()) << 8 | u64::from(limit == "0");
        let stop = Arc::new(AtomicBool::new(false));
        let target = {
            let (stop, dir) = (Arc::clone(&stop), dir.clone());
            std::thread::spawn(move || {
                pin(1);
                let mut b = open(job, 1, &dir, &[("btl_sm_single_copy_limit", limit)]);
                let a = reach(&mut b, ProcName::new(job, 0));
                let lent = b
                    .register_mem(vec![0u8; MAX], Access::REMOTE_WRITE | Access::REMOTE_READ)
                    .expect("lent");
                while b
                    .send_copy(a, KEY, &lent.remote_key().0.to_le_bytes())
                    .is_err()
                {
                    b.progress();
                }
                while !stop.load(Ordering::Relaxed) {
                    b.progress();
                    while b.poll_event().is_some() {}
                }
            })
        };
        pin(0);
        let mut a = open(job, 0, &dir, &[("btl_sm_single_copy_limit", limit)]);
        let b_at_a = reach(&mut a, ProcName::new(job, 1));
        let key = until(&mut a, |e| match e {
            Event::Received(m) if m.tag == KEY => {
                Some(RemoteKey(u64::from_le_bytes(m.data.try_into().ok()?)))
            }
            _ => None,
        });
        let src = a
            .register_mem(vec![7u8; MAX], Access::empty())
            .expect("src");
        for size in [64usize << 10, 1 << 20, 4 << 20] {
            let local = MemSlice {
                handle: src,
                offset: 0,
                len: size as u64,
            };
            let remote = RemoteSlice {
                key,
                offset: 0,
                len: size as u64,
            };
            group.throughput(Throughput::Bytes(size as u64));
            for (what, put) in [("put", true), ("get", false)] {
                group.bench_function(format!("{what} {size} B, {name}"), |bench| {
                    bench.iter_custom(|iters| {
                        let start = Instant::now();
                        for _ in 0..iters {
                            if put {
                                a.put(b_at_a, local, remote, 0).expect("put");
                            } else {
                                a.get(b_at_a, local, remote, 0).expect("get");
                            }
                            until(&mut a, |e| match e {
                                Event::PutComplete { result, .. }
                                | Event::GetComplete { result, .. } => Some(result),
                                _ => None,
                            })
                            .expect("moved");
                        }
                        start.elapsed()
                    })
                });
            }
        }
        let moved = a.transfers();
        assert!(
            (limit == "0") == (moved.one_copy == 0),
            "{name}: the transfers went as asked: {moved:?}"
        );
        stop.store(true, Ordering::Relaxed);
        target.join().expect("the target thread");
        drop(a);
    }
    group.finish();
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
