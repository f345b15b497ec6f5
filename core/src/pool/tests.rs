//! Unit and property tests of the fragment pools.

extern crate std;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32 as StdAtomicU32};
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

fn cfg(fragment_size: usize, num: u32, max: u32, inc: u32) -> FragmentPoolConfig {
    FragmentPoolConfig {
        fragment_size,
        num,
        max,
        inc,
    }
}

fn region_for(cfg: &FragmentPoolConfig) -> Vec<u8> {
    vec![0; FragmentPool::required_bytes(cfg)]
}

fn pools_cfg() -> FragmentPoolsConfig {
    FragmentPoolsConfig {
        small: cfg(64, 2, 2, 1),
        eager: cfg(1024, 2, 2, 1),
        max: cfg(4096, 1, 1, 1),
    }
}

#[test]
fn lifo_order() {
    let c = cfg(100, 4, 4, 1);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Eager, c).expect("pool");
    let a = pool.alloc().expect("a");
    let b = pool.alloc().expect("b");
    assert_eq!((a.index(), b.index()), (0, 1));
    assert_eq!(a.class(), FragmentClass::Eager);
    pool.free(a).expect("free a");
    pool.free(b).expect("free b");
    // The last freed comes back first.
    let b2 = pool.alloc().expect("b2");
    let a2 = pool.alloc().expect("a2");
    assert_eq!((b2.index(), a2.index()), (1, 0));
    pool.free(a2).expect("free");
    pool.free(b2).expect("free");
}

#[test]
fn exhaustion_error_and_failed_counter() {
    let c = cfg(8, 2, 2, 1);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
    let a = pool.alloc().expect("a");
    let b = pool.alloc().expect("b");
    for n in 1..=3 {
        assert_eq!(
            pool.alloc(),
            Err(PoolError::Exhausted {
                class: FragmentClass::Small
            })
        );
        assert_eq!(pool.stats().failed_allocs, n);
    }
    pool.free(b).expect("free");
    let b = pool.alloc().expect("again");
    assert_eq!(pool.stats().failed_allocs, 3);
    pool.free(a).expect("free");
    pool.free(b).expect("free");
}

#[test]
fn high_water_and_in_use() {
    let c = cfg(8, 4, 4, 1);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
    let held: Vec<_> = (0..3).map(|_| pool.alloc().expect("alloc")).collect();
    assert_eq!(pool.stats().in_use, 3);
    assert_eq!(pool.stats().high_water, 3);
    for f in held {
        pool.free(f).expect("free");
    }
    let f = pool.alloc().expect("alloc");
    let s = pool.stats();
    assert_eq!((s.in_use, s.high_water, s.capacity), (1, 3, 4));
    pool.free(f).expect("free");
    assert_eq!(pool.stats().in_use, 0);
}

/// `in_use` and `high_water` come from the free list's depths, not from
/// counters: check them after every step of a sequence with batch growth
/// (`inc > 1`, from an empty start), frees out of order and exhaustion.
#[test]
fn in_use_and_high_water_exact_through_growth() {
    let c = cfg(8, 0, 11, 4);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
    let mut held: Vec<Fragment> = Vec::new();
    let (mut high, mut failed) = (0, 0);
    let check = |held: &Vec<Fragment>, high: u32| {
        let s = pool.stats();
        assert_eq!((s.in_use, s.high_water), (held.len() as u32, high));
        assert_eq!(pool.free_slots().len() as u32, s.ready - s.in_use);
    };
    check(&held, high);
    // (allocs, index of the held fragment to free after each) per phase.
    for (allocs, frees) in [(3, &[1][..]), (4, &[0, 2]), (6, &[3, 0, 5, 1]), (9, &[])] {
        for _ in 0..allocs {
            match pool.alloc() {
                Ok(f) => held.push(f),
                Err(_) => {
                    assert_eq!(held.len(), 11);
                    failed += 1;
                }
            }
            high = high.max(held.len() as u32);
            check(&held, high);
        }
        for &at in frees {
            pool.free(held.swap_remove(at)).expect("free");
            check(&held, high);
        }
    }
    assert_eq!((pool.stats().ready, high), (11, 11));
    for f in held.drain(..) {
        pool.free(f).expect("free");
    }
    check(&held, high);
    assert_eq!((pool.stats().failed_allocs, failed), (4, 4));
}

#[test]
fn batch_growth_honours_num_inc_max() {
    let c = cfg(8, 2, 7, 3);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
    assert_eq!(pool.stats().ready, 2);
    let mut held = Vec::new();
    // ready after each alloc: the 3rd alloc makes 2..5 ready, the 6th 5..7.
    let expect_ready = [2, 2, 5, 5, 5, 7, 7];
    for (i, &ready) in expect_ready.iter().enumerate() {
        let f = pool.alloc().expect("alloc");
        assert_eq!(f.index(), i, "fresh slots go out in order");
        assert_eq!(pool.stats().ready, ready);
        held.push(f);
    }
    assert!(pool.alloc().is_err());
    assert_eq!(pool.stats().ready, 7);
    for f in held {
        pool.free(f).expect("free");
    }
    assert_eq!(pool.stats().ready, 7);
}

#[test]
fn empty_start_grows_on_first_alloc() {
    let c = cfg(8, 0, 3, 2);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
    assert_eq!(pool.stats().ready, 0);
    let a = pool.alloc().expect("a");
    assert_eq!((a.index(), pool.stats().ready), (0, 2));
    let b = pool.alloc().expect("b");
    let c3 = pool.alloc().expect("c");
    assert_eq!((b.index(), c3.index(), pool.stats().ready), (1, 2, 3));
    for f in [a, b, c3] {
        pool.free(f).expect("free");
    }
}

#[test]
fn untouched_beyond_ready() {
    // Slots past `ready` keep whatever the region held.
    let c = cfg(64, 1, 3, 1);
    let mut region = vec![0xAA; FragmentPool::required_bytes(&c)];
    let base = region.as_ptr().addr();
    {
        let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
        let mut f = pool.alloc().expect("alloc");
        pool.bytes_mut(&mut f).expect("bytes").fill(0x55);
        let data_at = pool.bytes(&f).expect("bytes").as_ptr().addr() - base;
        pool.free(f).expect("free");
        // The pool's borrow of the region ends with its last use.
        let slot1 = &region[data_at + 64..data_at + 192];
        assert!(slot1.iter().all(|&b| b == 0xAA));
        assert!(region[data_at..data_at + 64].iter().all(|&b| b == 0x55));
    }
}

#[test]
fn foreign_fragment_rejected() {
    let c = cfg(32, 1, 1, 1);
    let (mut r1, mut r2) = (region_for(&c), region_for(&c));
    let p1 = FragmentPool::new(&mut r1, FragmentClass::Eager, c).expect("p1");
    let p2 = FragmentPool::new(&mut r2, FragmentClass::Eager, c).expect("p2");
    let mut f = p1.alloc().expect("alloc");
    assert_eq!(p2.bytes(&f), Err(PoolError::Foreign));
    assert_eq!(p2.bytes_mut(&mut f).err(), Some(PoolError::Foreign));
    let ForeignFragment(f) = p2.free(f).expect_err("foreign");
    assert_eq!(p2.stats().in_use, 0);
    p1.free(f).expect("own pool takes it");
    assert_eq!(p1.stats().in_use, 0);
}

#[test]
fn fragment_of_dropped_pool_is_foreign_to_its_successor() {
    let c = cfg(32, 1, 1, 1);
    let mut region = region_for(&c);
    let stale = {
        let p = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("p");
        p.alloc().expect("alloc")
    };
    let p = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("p");
    assert_eq!(p.bytes(&stale), Err(PoolError::Foreign));
    assert!(p.free(stale).is_err());
}

#[test]
fn region_too_small() {
    let c = cfg(100, 2, 2, 1);
    let need = FragmentPool::required_bytes(&c);
    assert_eq!(need, 2 * 4 + 2 * 128 + 63);
    let mut region = vec![0; need - 64];
    let err = FragmentPool::new(&mut region, FragmentClass::Small, c).expect_err("small");
    assert_eq!(
        err,
        PoolError::RegionTooSmall {
            needed: need,
            given: need - 64
        }
    );
    let mut region = vec![0; 10];
    assert!(matches!(
        FragmentPools::new(&mut region, pools_cfg()),
        Err(PoolError::RegionTooSmall { given: 10, .. })
    ));
}

#[test]
fn required_bytes_suffice_at_every_alignment() {
    let c = cfg(100, 3, 5, 2);
    let need = FragmentPool::required_bytes(&c);
    let mut buf = vec![0; need + 64];
    for offset in 0..64 {
        let region = &mut buf[offset..offset + need];
        FragmentPool::new(region, FragmentClass::Small, c).expect("fits");
    }
}

#[test]
fn config_validation() {
    let bad = [
        (cfg(0, 1, 1, 1), "fragment_size must be > 0"),
        (cfg(8, 0, 0, 1), "max must be >= 1"),
        (cfg(8, 1, 65536, 1), "max must be <= 65535"),
        (cfg(8, 3, 2, 1), "num must be <= max"),
        (cfg(8, 1, 2, 0), "inc must be >= 1"),
        (
            cfg(usize::MAX / 2, 1, 4, 1),
            "fragment_size * max does not fit in memory",
        ),
    ];
    let mut region = vec![0; 1024];
    for (c, rule) in bad {
        assert_eq!(c.validate(), Err(PoolError::InvalidConfig(rule)));
        assert_eq!(
            FragmentPool::new(&mut region, FragmentClass::Small, c).err(),
            Some(PoolError::InvalidConfig(rule))
        );
    }
    assert_eq!(cfg(1, 0, 65535, 65535).validate(), Ok(()));
    let mut unordered = pools_cfg();
    unordered.small.fragment_size = 2048;
    assert!(matches!(
        FragmentPools::new(&mut region, unordered),
        Err(PoolError::InvalidConfig(_))
    ));
}

#[test]
fn pool_ids_never_wrap() {
    let counter = IdCounter::new(u32::MAX - 2);
    assert_eq!(claim_pool_id(&counter), Ok(u32::MAX - 2));
    assert_eq!(claim_pool_id(&counter), Ok(u32::MAX - 1));
    assert_eq!(claim_pool_id(&counter), Err(PoolError::TooManyPools));
    assert_eq!(claim_pool_id(&counter), Err(PoolError::TooManyPools));
}

#[test]
fn data_round_trip() {
    let c = cfg(300, 3, 3, 1);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Eager, c).expect("pool");
    let mut frags: Vec<_> = (0..3).map(|_| pool.alloc().expect("alloc")).collect();
    for (i, f) in frags.iter_mut().enumerate() {
        let bytes = pool.bytes_mut(f).expect("mut");
        assert_eq!(bytes.len(), 300);
        bytes.fill(i as u8 + 1);
    }
    for (i, f) in frags.iter().enumerate() {
        assert!(
            pool.bytes(f)
                .expect("ref")
                .iter()
                .all(|&b| b == i as u8 + 1)
        );
    }
    for f in frags {
        pool.free(f).expect("free");
    }
}

#[test]
fn every_fragment_cache_line_aligned() {
    for offset in [0, 1, 3, 17, 63] {
        let c = cfg(70, 5, 5, 1);
        let mut buf = vec![0; FragmentPool::required_bytes(&c) + offset];
        let pool = FragmentPool::new(&mut buf[offset..], FragmentClass::Small, c).expect("pool");
        let frags: Vec<_> = (0..5).map(|_| pool.alloc().expect("alloc")).collect();
        let mut starts: Vec<usize> = frags
            .iter()
            .map(|f| pool.bytes(f).expect("bytes").as_ptr().addr())
            .collect();
        assert!(starts.iter().all(|a| a % FRAGMENT_ALIGN == 0));
        starts.sort_unstable();
        assert!(starts.windows(2).all(|w| w[1] - w[0] == 128));
        for f in frags {
            pool.free(f).expect("free");
        }
    }
}

#[test]
fn full_sized_pool() {
    let c = cfg(1, 1, MAX_FRAGMENTS, 4096);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
    let frags: Vec<_> = (0..MAX_FRAGMENTS)
        .map(|_| pool.alloc().expect("alloc"))
        .collect();
    let distinct: HashSet<usize> = frags.iter().map(Fragment::index).collect();
    assert_eq!(distinct.len(), MAX_FRAGMENTS as usize);
    assert!(pool.alloc().is_err());
    for f in frags {
        pool.free(f).expect("free");
    }
    assert_eq!(pool.stats().in_use, 0);
}

#[test]
fn pools_pick_smallest_class_without_fallback() {
    let c = pools_cfg();
    let mut region = vec![0; FragmentPools::required_bytes(&c)];
    let pools = FragmentPools::new(&mut region, c).expect("pools");
    let pools = pools.view();
    assert_eq!(pools.class_size(FragmentClass::Eager), 1024);
    let classes: Vec<_> = [0, 64, 65, 1024, 1025, 4096]
        .iter()
        .map(|&len| pools.class_for(len).expect("fits"))
        .collect();
    use FragmentClass::*;
    assert_eq!(classes, [Small, Small, Eager, Eager, Max, Max]);
    assert_eq!(
        pools.alloc(4097),
        Err(PoolError::TooLarge {
            requested: 4097,
            max: 4096
        })
    );
    let a = pools.alloc(10).expect("small");
    let b = pools.alloc(10).expect("small");
    // Small is exhausted; eager has room but is not used in its stead.
    assert_eq!(pools.alloc(10), Err(PoolError::Exhausted { class: Small }));
    assert_eq!(pools.stats(Small).failed_allocs, 1);
    assert_eq!(pools.stats(Eager).in_use, 0);
    let mut m = pools.alloc_class(Max).expect("max");
    pools.bytes_mut(&mut m).expect("bytes")[4095] = 7;
    assert_eq!(pools.bytes(&m).expect("bytes")[4095], 7);
    assert_eq!(pools.bytes(&a).expect("bytes").len(), 64);
    for f in [a, b, m] {
        pools.free(f).expect("free");
    }
    for class in FragmentClass::ALL {
        assert_eq!(pools.stats(class).in_use, 0);
    }
    // A fragment from other pools is handed back.
    let mut other = vec![0; FragmentPools::required_bytes(&c)];
    let others = FragmentPools::new(&mut other, c).expect("pools");
    let others = others.view();
    let f = others.alloc(1).expect("alloc");
    assert_eq!(pools.bytes(&f), Err(PoolError::Foreign));
    let ForeignFragment(f) = pools.free(f).expect_err("foreign");
    others.free(f).expect("free");
}

#[test]
fn static_region_and_display() {
    const C: FragmentPoolConfig = FragmentPoolConfig {
        fragment_size: 48,
        num: 2,
        max: 2,
        inc: 1,
    };
    let mut region = PoolRegion::<{ FragmentPool::required_bytes(&C) }>::new();
    assert_eq!(region.as_mut_slice().as_ptr().addr() % 64, 0);
    let pool = FragmentPool::new(region.as_mut_slice(), FragmentClass::Max, C).expect("pool");
    let f = pool.alloc().expect("alloc");
    assert_eq!(std::format!("{}", f.class()), "max");
    let e = PoolError::Exhausted {
        class: FragmentClass::Small,
    };
    assert_eq!(std::format!("{e}"), "small fragment pool exhausted");
    assert!(std::format!("{pool:?}").contains("in_use: 1"));
    pool.free(f).expect("free");
}

/// Several threads alloc, stamp, hold, verify and free; a fragment handed
/// out twice shows up as a stamp overwritten by another thread.
#[test]
fn threads_never_share_a_fragment() {
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 20_000;
    let c = cfg(64, 2, 6, 2);
    let mut region = region_for(&c);
    let pool = FragmentPool::new(&mut region, FragmentClass::Eager, c).expect("pool");
    let owners: Vec<StdAtomicU32> = (0..c.max).map(|_| StdAtomicU32::new(0)).collect();
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 1..=THREADS {
            let (pool, owners, failed) = (&pool, &owners, &failed);
            s.spawn(move || {
                let mut held: Vec<Fragment> = Vec::new();
                for round in 0..ROUNDS {
                    let stamp = (t << 24) | round;
                    if round % 3 != 2
                        && let Ok(mut f) = pool.alloc()
                    {
                        let prev = owners[f.index()].swap(t, Ordering::Relaxed);
                        if prev != 0 {
                            failed.store(true, Ordering::Relaxed);
                        }
                        pool.bytes_mut(&mut f).expect("own")[..4]
                            .copy_from_slice(&stamp.to_le_bytes());
                        held.push(f);
                    }
                    if (held.len() > 1 || round % 3 == 2)
                        && let Some(f) = held.pop()
                    {
                        let bytes = pool.bytes(&f).expect("own");
                        let seen = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                        if seen >> 24 != t || owners[f.index()].swap(0, Ordering::Relaxed) != t {
                            failed.store(true, Ordering::Relaxed);
                        }
                        pool.free(f).expect("free");
                    }
                }
                for f in held {
                    owners[f.index()].store(0, Ordering::Relaxed);
                    pool.free(f).expect("free");
                }
            });
        }
    });
    assert!(!failed.load(Ordering::Relaxed), "a fragment was shared");
    let s = pool.stats();
    assert_eq!(s.in_use, 0);
    // Each thread held up to 2 at once.
    assert!(s.high_water >= 2 && s.high_water <= 6 && s.ready <= 6);
    assert_eq!(pool.free_slots().len() as u32, s.ready);
    // Nothing lost: all 6 come out once more, distinct.
    let all: Vec<_> = (0..6).map(|_| pool.alloc().expect("alloc")).collect();
    let distinct: HashSet<usize> = all.iter().map(Fragment::index).collect();
    assert_eq!(distinct.len(), 6);
    assert!(pool.alloc().is_err());
    for f in all {
        pool.free(f).expect("free");
    }
}

/// Threads alloc and free with batch growth racing, each ending with a
/// different number held: once they are joined the statistics are exact.
#[test]
fn stats_exact_after_threads_join() {
    const THREADS: u32 = 4;
    for round in 0..50 {
        let c = cfg(8, 1, 40, 3);
        let mut region = region_for(&c);
        let pool = FragmentPool::new(&mut region, FragmentClass::Small, c).expect("pool");
        let held: Vec<Vec<Fragment>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut held = Vec::new();
                        for i in 0..200 + round {
                            if (i + t) % 5 < 3 {
                                held.push(pool.alloc().expect("room left"));
                            } else if let Some(f) = held.pop() {
                                pool.free(f).expect("free");
                            }
                            if held.len() > 8 {
                                pool.free(held.swap_remove(0)).expect("free");
                            }
                        }
                        // Keep t + 1 (at most 9 each, 36 in all).
                        while held.len() > t as usize + 1 {
                            pool.free(held.pop().expect("held")).expect("free");
                        }
                        while held.len() < t as usize + 1 {
                            held.push(pool.alloc().expect("room left"));
                        }
                        held
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let out: u32 = held.iter().map(|h| h.len() as u32).sum();
        let s = pool.stats();
        assert_eq!(s.in_use, out);
        assert!(s.high_water >= 9 && s.high_water <= 40, "{s:?}");
        assert_eq!(pool.free_slots().len() as u32, s.ready - out);
        for f in held.into_iter().flatten() {
            pool.free(f).expect("free");
        }
        assert_eq!(pool.stats().in_use, 0);
    }
}

/// An exact model of the pool: a LIFO stack of indices plus the batch rule.
struct Model {
    stack: Vec<u32>,
    ready: u32,
    held: HashSet<u32>,
    high_water: u32,
    failed: u32,
    cfg: FragmentPoolConfig,
}

impl Model {
    fn new(cfg: FragmentPoolConfig) -> Self {
        Model {
            stack: (0..cfg.num).rev().collect(),
            ready: cfg.num,
            held: HashSet::new(),
            high_water: 0,
            failed: 0,
            cfg,
        }
    }

    fn alloc(&mut self) -> Option<u32> {
        let index = match self.stack.pop() {
            Some(i) => i,
            None if self.ready < self.cfg.max => {
                let start = self.ready;
                self.ready = (start + self.cfg.inc).min(self.cfg.max);
                self.stack.extend((start + 1..self.ready).rev());
                start
            }
            None => {
                self.failed += 1;
                return None;
            }
        };
        assert!(self.held.insert(index), "model handed out {index} twice");
        self.high_water = self.high_water.max(self.held.len() as u32);
        Some(index)
    }

    fn free(&mut self, index: u32) {
        assert!(self.held.remove(&index));
        self.stack.push(index);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Alloc,
    /// Free the held fragment at this position (modulo the number held).
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => Just(Op::Alloc), 2 => any::<usize>().prop_map(Op::Free)]
}

fn config() -> impl Strategy<Value = FragmentPoolConfig> {
    (1usize..200, 1u32..24, 1u32..6)
        .prop_flat_map(|(size, max, inc)| (Just(size), 0..=max, Just(max), Just(inc)))
        .prop_map(|(size, num, max, inc)| cfg(size, num, max, inc))
}

proptest! {
    #[test]
    fn pool_matches_model(c in config(), ops in proptest::collection::vec(op(), 0..200)) {
        let mut region = region_for(&c);
        let pool = FragmentPool::new(&mut region, FragmentClass::Eager, c).expect("pool");
        let mut model = Model::new(c);
        let mut held: Vec<Fragment> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc => match (pool.alloc(), model.alloc()) {
                    (Ok(f), Some(i)) => {
                        prop_assert_eq!(f.index() as u32, i);
                        held.push(f);
                    }
                    (Err(e), None) => {
                        prop_assert_eq!(e, PoolError::Exhausted { class: FragmentClass::Eager });
                    }
                    (got, want) => prop_assert!(false, "pool {:?}, model {:?}", got, want),
                },
                Op::Free(at) if !held.is_empty() => {
                    let f = held.swap_remove(at % held.len());
                    model.free(f.index() as u32);
                    prop_assert!(pool.free(f).is_ok());
                }
                Op::Free(_) => {}
            }
            // The free list, depths included, is the model's stack.
            let top_first: Vec<u32> = model.stack.iter().rev().copied().collect();
            prop_assert_eq!(pool.free_slots(), top_first);
            let s = pool.stats();
            prop_assert_eq!(s.in_use as usize, model.held.len());
            prop_assert_eq!(s.high_water, model.high_water);
            prop_assert_eq!(s.failed_allocs, model.failed);
            prop_assert_eq!(s.ready, model.ready);
            prop_assert!(s.ready <= c.max);
            let distinct: HashSet<usize> = held.iter().map(Fragment::index).collect();
            prop_assert_eq!(distinct.len(), held.len());
        }
        for f in held {
            prop_assert!(pool.free(f).is_ok());
        }
        let s = pool.stats();
        prop_assert_eq!((s.in_use, s.high_water), (0, model.high_water));
        prop_assert_eq!(pool.free_slots().len() as u32, s.ready);
    }

    #[test]
    fn pools_route_by_length(lens in proptest::collection::vec(0usize..5000, 0..40)) {
        let c = pools_cfg();
        let mut region = vec![0; FragmentPools::required_bytes(&c)];
        let pools = FragmentPools::new(&mut region, c).expect("pools");
        let pools = pools.view();
        let mut held = Vec::new();
        for len in lens {
            match pools.alloc(len) {
                Ok(f) => {
                    let size = pools.class_size(f.class());
                    prop_assert!(len <= size);
                    prop_assert_eq!(pools.bytes(&f).expect("bytes").len(), size);
                    if let Some(smaller) = FragmentClass::ALL.iter().take_while(|&&k| k != f.class()).last() {
                        prop_assert!(len > pools.class_size(*smaller));
                    }
                    held.push(f);
                }
                Err(PoolError::TooLarge { requested, max }) => {
                    prop_assert!(requested > max && max == 4096);
                }
                Err(PoolError::Exhausted { class }) => {
                    let s = pools.stats(class);
                    prop_assert_eq!(s.in_use, s.capacity);
                }
                Err(e) => prop_assert!(false, "unexpected {}", e),
            }
        }
        for f in held {
            prop_assert!(pools.free(f).is_ok());
        }
    }
}

/// Two modules' pools as one: each fragment is read and given back where
/// it was made; allocation and sizes are the first set's.
#[test]
fn many_pools_find_each_fragment_in_its_own_set() {
    struct Two<'a>([PoolsRef<'a>; 2]);
    impl PoolSets for Two<'_> {
        fn len(&self) -> usize {
            2
        }
        fn set(&self, i: usize) -> Option<PoolsRef<'_>> {
            self.0.get(i).copied()
        }
    }
    let c = pools_cfg();
    let (mut r1, mut r2, mut r3) = (
        vec![0; FragmentPools::required_bytes(&c)],
        vec![0; FragmentPools::required_bytes(&c)],
        vec![0; FragmentPools::required_bytes(&c)],
    );
    let one = FragmentPools::new(&mut r1, c).expect("pools");
    let two = FragmentPools::new(&mut r2, c).expect("pools");
    let other = FragmentPools::new(&mut r3, c).expect("pools");
    let sets = Two([one.view(), two.view()]);
    let many = PoolsRef::many(&sets);

    let mut a = one.view().alloc(10).expect("a fragment of the first");
    let mut b = two.view().alloc(10).expect("a fragment of the second");
    assert!(many.owns(&a) && many.owns(&b));
    many.bytes_mut(&mut a).expect("a's bytes")[0] = 1;
    many.bytes_mut(&mut b).expect("b's bytes")[0] = 2;
    assert_eq!(one.view().bytes(&a).expect("in the first")[0], 1);
    assert_eq!(two.view().bytes(&b).expect("in the second")[0], 2);
    assert_eq!(many.stats(FragmentClass::Small).in_use, 2, "summed");

    let stranger = other.view().alloc(10).expect("a fragment of neither");
    assert!(!many.owns(&stranger));
    assert_eq!(many.bytes(&stranger), Err(PoolError::Foreign));
    let ForeignFragment(stranger) = many.free(stranger).expect_err("not theirs");
    other.view().free(stranger).expect("back home");

    let c2 = many.alloc(10).expect("allocated from the first set");
    assert!(one.view().owns(&c2));
    assert_eq!(many.class_size(FragmentClass::Eager), 1024);
    for f in [a, b, c2] {
        many.free(f).expect("each to its own pools");
    }
    assert_eq!(one.view().stats(FragmentClass::Small).in_use, 0);
    assert_eq!(two.view().stats(FragmentClass::Small).in_use, 0);
}
