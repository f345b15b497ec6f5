//! Messages between two shared-memory modules alone, without the `btl`
//! command's benchmark protocol: two threads pinned to two cores, as two
//! processes would be, one sending a message and the other sending it
//! back, each with `send_copy` and `poll_event` in a loop of its own.
//! The one-way latency at 8 B and 4 KiB:
//! `cargo bench -p btl-std --bench sm_message`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, Event, Tag};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_std::SmModule;
use common::{open, pin, reach};
#[path = "common/sm.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};

const PING: Tag = Tag(0x80);

/// Sends `data` to `to`, moving `sm` while its ring is full.
fn send(sm: &mut SmModule, to: EndpointId, data: &[u8]) {
    while sm.send_copy(to, PING, data).is_err() {
        sm.progress();
    }
}

/// Moves `sm` until a message arrives; its length.
fn receive(sm: &mut SmModule) -> usize {
    loop {
        sm.progress();
        while let Some(e) = sm.poll_event() {
            if let Event::Received(m) = e {
                return m.data.len();
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("btl-bench-sm-message-{}", std::process::id()));
    let job = u64::from(std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let (stop, dir) = (Arc::clone(&stop), dir.clone());
        std::thread::spawn(move || {
            pin(1);
            let mut b = open(job, 1, &dir, &[]);
            let a = reach(&mut b, ProcName::new(job, 0));
            let back = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                b.progress();
                let mut got = None;
                while let Some(e) = b.poll_event() {
                    if let Event::Received(m) = e {
                        got = Some(m.data.len());
                    }
                }
                if let Some(len) = got {
                    send(&mut b, a, &back[..len]);
                }
            }
        })
    };
    pin(0);
    let mut a = open(job, 0, &dir, &[]);
    let b = reach(&mut a, ProcName::new(job, 1));
    let mut group = c.benchmark_group("sm_message");
    for size in [8usize, 4096] {
        let data = vec![7u8; size];
        group.bench_function(format!("one-way {size} B"), |bench| {
            bench.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    send(&mut a, b, &data);
                    assert_eq!(receive(&mut a), size);
                }
                // A round trip is two one-way trips.
                start.elapsed() / 2
            })
        });
    }
    group.finish();
    stop.store(true, Ordering::Relaxed);
    // The echo may wait on a last message to send back: keep taking.
    while !echo.is_finished() {
        a.progress();
        while a.poll_event().is_some() {}
    }
    echo.join().expect("the echo thread");
    drop(a);
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
