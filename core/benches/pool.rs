//! Cost of one alloc + free of a 2 KiB fragment: btl's `FragmentPool`
//! against heapless's lock-free pools and the system allocator, single
//! threaded and with two threads contending for one pool.
//!
//! Run with `cargo bench -p btl-core --bench pool`.

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use btl_core::pool::{FragmentClass, FragmentPool, FragmentPoolConfig};
use criterion::{Criterion, criterion_group, criterion_main};

const SIZE: usize = 2048;
const COUNT: u32 = 64;
const CFG: FragmentPoolConfig = FragmentPoolConfig {
    fragment_size: SIZE,
    num: COUNT,
    max: COUNT,
    inc: 1,
};

/// heapless's pools are singletons over `&'static mut` blocks: they live
/// in statics, handed out once.
#[cfg(target_arch = "x86_64")]
mod hl {
    use std::sync::Once;

    use heapless::pool::boxed::BoxBlock;
    use heapless::pool::object::ObjectBlock;
    use heapless::{box_pool, object_pool};
    use static_cell::StaticCell;

    box_pool!(BoxPool: [u8; super::SIZE]);
    object_pool!(ObjectPool: [u8; super::SIZE]);

    const COUNT: usize = super::COUNT as usize;
    static BOX_BLOCKS: StaticCell<[BoxBlock<[u8; super::SIZE]>; COUNT]> = StaticCell::new();
    static OBJECT_BLOCKS: StaticCell<[ObjectBlock<[u8; super::SIZE]>; COUNT]> = StaticCell::new();

    /// Gives both pools `COUNT` blocks, once per process.
    pub fn setup() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let boxes = BOX_BLOCKS.init_with(|| std::array::from_fn(|_| BoxBlock::new()));
            for block in boxes {
                BoxPool.manage(block);
            }
            let objects = OBJECT_BLOCKS
                .init_with(|| std::array::from_fn(|_| ObjectBlock::new([0; super::SIZE])));
            for block in objects {
                ObjectPool.manage(block);
            }
        });
    }
}

/// Runs `pair` `iters` times on each of two threads at once; the time is the
/// wall clock of the whole, i.e. per pair on each thread.
fn contended(iters: u64, pair: impl Fn() + Sync) -> Duration {
    let start = Instant::now();
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters {
                    pair();
                }
            });
        }
    });
    start.elapsed()
}

fn single_thread(c: &mut Criterion) {
    let mut region = vec![0u8; FragmentPool::required_bytes(&CFG)];
    let pool = FragmentPool::new(&mut region, FragmentClass::Max, CFG).expect("pool");
    let mut g = c.benchmark_group("alloc_free_2KiB");
    g.bench_function("btl FragmentPool", |b| {
        b.iter(|| {
            let f = pool.alloc().expect("alloc");
            pool.free(black_box(f)).expect("free");
        })
    });
    #[cfg(target_arch = "x86_64")]
    {
        hl::setup();
        g.bench_function("heapless object_pool", |b| {
            b.iter(|| black_box(hl::ObjectPool.request().expect("request")))
        });
        g.bench_function("heapless box_pool (moves 2 KiB in)", |b| {
            b.iter(|| black_box(hl::BoxPool.alloc([0; SIZE]).expect("alloc")))
        });
    }
    g.bench_function("Box::new([0u8; 2048])", |b| {
        b.iter(|| black_box(Box::new([0u8; SIZE])))
    });
    g.bench_function("Box::<[u8; 2048]>::new_uninit", |b| {
        b.iter(|| black_box(Box::<[u8; SIZE]>::new_uninit()))
    });
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut region = vec![0u8; FragmentPool::required_bytes(&CFG)];
    let pool = FragmentPool::new(&mut region, FragmentClass::Max, CFG).expect("pool");
    let mut g = c.benchmark_group("alloc_free_2KiB_2_threads");
    g.bench_function("btl FragmentPool", |b| {
        b.iter_custom(|iters| {
            contended(iters, || {
                let f = pool.alloc().expect("alloc");
                pool.free(black_box(f)).expect("free");
            })
        })
    });
    #[cfg(target_arch = "x86_64")]
    {
        hl::setup();
        g.bench_function("heapless object_pool", |b| {
            b.iter_custom(|iters| {
                contended(iters, || {
                    black_box(hl::ObjectPool.request().expect("request"));
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, single_thread, two_threads);
criterion_main!(benches);
