//! Loom models of btl-core's fragment pool: every interleaving (up to a
//! preemption bound) of threads that alloc and free concurrently, checking
//! that no fragment is ever held by two threads at once, that none is lost,
//! and that once the threads are joined the statistics are exact: `in_use`
//! counts the fragments still held, `high_water` lies between the most
//! fragments held at once and `capacity`.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p btl-sim --release --test loom_pool`.
//! Each model has its own preemption bound (2 to 4), chosen so that the
//! three finish in about 40 s; `LOOM_MAX_PREEMPTIONS` overrides it.
// Compiled only under `--cfg loom`; the docs above stay so that the empty
// crate of a normal build is documented.
#![cfg(loom)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32 as PlainU32, AtomicUsize};

use std::pin::Pin;

use btl_core::pool::{
    Fragment, FragmentClass, FragmentPool, FragmentPoolConfig, PoolCell, PoolError,
};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;

/// A pool shared by the model's threads, with the owner of each slot
/// recorded in loom atomics so that a double hand-out is seen whatever the
/// interleaving: swapping the owner in must find 0.
struct Shared {
    pool: FragmentPool<Pin<Box<[PoolCell]>>>,
    owners: Vec<AtomicU32>,
    /// Whether an alloc may fail while another thread publishes a batch
    /// (growth with `inc > 1`); otherwise every alloc must succeed, as the
    /// models never hold more than `max` fragments at once.
    may_fail: bool,
    /// Fragments held right now, counted from `alloc`'s return to the call
    /// of `free`, and the most ever held at once. Plain atomics, outside the
    /// model: loom runs one thread at a time, so they follow the schedule.
    held: PlainU32,
    peak: PlainU32,
}

impl Shared {
    fn new(cfg: FragmentPoolConfig) -> Arc<Self> {
        // Threads need `'static`: the pool owns its region.
        let region = PoolCell::boxed(FragmentPool::required_bytes(&cfg));
        Arc::new(Shared {
            pool: FragmentPool::owning(region, FragmentClass::Eager, cfg).expect("pool"),
            owners: (0..cfg.max).map(|_| AtomicU32::new(0)).collect(),
            may_fail: cfg.inc > 1 && cfg.num < cfg.max,
            held: PlainU32::new(0),
            peak: PlainU32::new(0),
        })
    }

    fn take(&self, thread: u32) -> Option<Fragment> {
        match self.pool.alloc() {
            Ok(frag) => {
                let prev = self.owners[frag.index()].swap(thread, Ordering::Relaxed);
                assert_eq!(prev, 0, "slot {} handed out twice", frag.index());
                let held = self.held.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                self.peak
                    .fetch_max(held, std::sync::atomic::Ordering::Relaxed);
                Some(frag)
            }
            Err(PoolError::Exhausted { .. }) if self.may_fail => None,
            Err(e) => panic!("thread {thread}: alloc failed with room left: {e}"),
        }
    }

    fn give(&self, frag: Option<Fragment>, thread: u32) {
        if let Some(frag) = frag {
            let prev = self.owners[frag.index()].swap(0, Ordering::Relaxed);
            assert_eq!(
                prev,
                thread,
                "slot {} changed hands while held",
                frag.index()
            );
            self.held.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            self.pool.free(frag).expect("own pool");
        }
    }

    /// After every thread is joined, with `kept` the fragments they still
    /// hold: the statistics are exact, and once those are freed all `max`
    /// fragments come out exactly once more, and then the pool is exhausted.
    fn check_after_join(&self, kept: Vec<(Option<Fragment>, u32)>) {
        let max = self.owners.len();
        let s = self.pool.stats();
        let out = kept.iter().filter(|(frag, _)| frag.is_some()).count();
        assert_eq!(s.in_use as usize, out, "in_use after join: {s:?}");
        let peak = self.peak.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            peak <= s.high_water && s.high_water <= s.capacity,
            "high_water {} outside {peak}..={}",
            s.high_water,
            s.capacity
        );
        for (frag, thread) in kept {
            self.give(frag, thread);
        }
        assert_eq!(self.pool.stats().in_use, 0);
        let all: Vec<Fragment> = (0..max)
            .map(|i| {
                self.pool
                    .alloc()
                    .unwrap_or_else(|e| panic!("fragment {i} lost: {e}"))
            })
            .collect();
        let distinct: HashSet<usize> = all.iter().map(Fragment::index).collect();
        assert_eq!(distinct.len(), max);
        assert!(self.pool.alloc().is_err());
        for frag in all {
            self.pool.free(frag).expect("own pool");
        }
    }
}

fn config(num: u32, max: u32, inc: u32) -> FragmentPoolConfig {
    FragmentPoolConfig {
        fragment_size: 8,
        num,
        max,
        inc,
    }
}

/// Runs `model` under loom with the given preemption bound unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise, and reports the interleavings seen.
fn check(name: &str, bound: usize, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(bound));
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let count = runs.clone();
    builder.check(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    println!("{name}: {runs} interleavings");
}

/// The steady list (all fragments ready): one thread takes two, frees the
/// first, takes again, while another takes and frees twice. This is the
/// shape of the ABA race: a pop that read head `A`, next `B` is overtaken by
/// pop A, pop B, push A; without the tag its CAS would install `B`, still held.
#[test]
fn steady_list_aba() {
    check("steady_list_aba", 4, || {
        let shared = Shared::new(config(3, 3, 1));
        let s = shared.clone();
        let t1 = thread::spawn(move || {
            let a = s.take(1);
            let b = s.take(1);
            s.give(a, 1);
            let c = s.take(1);
            s.give(b, 1);
            (c, 1)
        });
        let s = shared.clone();
        let t2 = thread::spawn(move || {
            let x = s.take(2);
            s.give(x, 2);
            let y = s.take(2);
            s.give(y, 2);
        });
        let kept = t1.join().expect("t1");
        t2.join().expect("t2");
        shared.check_after_join(vec![kept]);
    });
}

/// Growth one slot at a time from an empty pool: claims race with pops and
/// pushes; since `inc == 1` no alloc may fail while a slot is free or unready.
#[test]
fn growth_by_one() {
    check("growth_by_one", 4, || {
        let shared = Shared::new(config(0, 2, 1));
        let s = shared.clone();
        let t1 = thread::spawn(move || {
            let a = s.take(1);
            s.give(a, 1);
            let b = s.take(1);
            s.give(b, 1);
        });
        let s = shared.clone();
        let t2 = thread::spawn(move || {
            let x = s.take(2);
            s.give(x, 2);
            (s.take(2), 2)
        });
        t1.join().expect("t1");
        let kept = t2.join().expect("t2");
        shared.check_after_join(vec![kept]);
    });
}

/// Batch growth (`num 1`, `inc 2`, `max 3`) with three threads: one claims
/// a batch and pushes its tail as a chain while the others pop and push.
#[test]
fn batch_growth_three_threads() {
    check("batch_growth_three_threads", 2, || {
        let shared = Shared::new(config(1, 3, 2));
        let handles: Vec<_> = (1..=3)
            .map(|id| {
                let s = shared.clone();
                thread::spawn(move || {
                    let a = s.take(id);
                    if id == 3 {
                        return (a, id);
                    }
                    s.give(a, id);
                    if id == 1 {
                        let b = s.take(id);
                        s.give(b, id);
                    }
                    (None, id)
                })
            })
            .collect();
        let kept = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        shared.check_after_join(kept);
    });
}
