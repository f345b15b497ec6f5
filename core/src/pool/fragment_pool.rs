//! One pool of equal-sized fragments carved from a caller's region.

#[cfg(any(test, loom))]
extern crate std;

use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::AtomicU32 as StatCounter;

use super::free_list::{FreeList, NIL};
use super::{
    FRAGMENT_ALIGN, ForeignFragment, Fragment, FragmentClass, FragmentPoolConfig, NEXT_POOL_ID,
    PoolError, PoolStats, claim_pool_id,
};
use crate::sync::{AtomicU32, Ordering};

/// Bytes of one `next` link at the front of the region.
const LINK_BYTES: usize = core::mem::size_of::<AtomicU32>();
/// Alignment of the links; `AtomicU32` is always aligned to its size.
const LINK_ALIGN: usize = 4;

/// Where the free list's links live: carved from the front of the caller's
/// region, except under loom, whose atomics cannot be laid over raw bytes.
#[cfg(not(loom))]
type Links<'r> = &'r [AtomicU32];
#[cfg(loom)]
type Links<'r> = std::boxed::Box<[AtomicU32]>;

/// Turns `bytes` (4-aligned, `4 * n` long) into `n` links set to NIL.
#[cfg(not(loom))]
fn make_links(bytes: &mut [u8], n: usize) -> Links<'_> {
    assert!(bytes.len() == n * LINK_BYTES && bytes.as_ptr().addr() % LINK_ALIGN == 0);
    // SAFETY: `AtomicU32` has the size and bit validity of `u32` and an
    // alignment of 4, which the assert checks, and the `4 * n` bytes are
    // initialised, so they form `n` valid atomics. The pointer comes from a
    // `&mut` to exactly those bytes, so the new slice borrows them
    // exclusively for the same lifetime and nothing else can touch them.
    let links: &mut [AtomicU32] =
        unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<AtomicU32>(), n) };
    for link in links.iter_mut() {
        *link = AtomicU32::new(NIL);
    }
    links
}

/// Keeps loom's atomics on the heap; the region's link bytes stay unused.
#[cfg(loom)]
fn make_links(_bytes: &mut [u8], n: usize) -> Links<'_> {
    (0..n).map(|_| AtomicU32::new(NIL)).collect()
}

/// How a region of `len` bytes at address `addr` splits for `cfg`: the
/// offsets of the links and of the first fragment, and the bytes used.
fn layout(addr: usize, cfg: &FragmentPoolConfig) -> (usize, usize, usize) {
    let max = cfg.max as usize;
    let links = addr.wrapping_neg() % LINK_ALIGN;
    let links_end = links + max * LINK_BYTES;
    let data = links_end + addr.wrapping_add(links_end).wrapping_neg() % FRAGMENT_ALIGN;
    (links, data, data + max * cfg.stride())
}

/// A fixed-capacity, lock-free pool of fragments of one size and class.
///
/// See the [module documentation](super) for the design; `alloc` and `free`
/// may be called from any number of threads through `&self`.
pub struct FragmentPool<'r> {
    id: u32,
    class: FragmentClass,
    fragment_size: usize,
    stride: usize,
    capacity: u32,
    /// First byte of slot 0, cache-line aligned, valid for `capacity * stride`
    /// bytes of the region borrowed for `'r`.
    data: NonNull<u8>,
    list: FreeList<Links<'r>>,
    // Statistics are advisory and outside the free-list protocol, so they
    // stay `core` atomics under loom and do not widen the model. `in_use` is
    // no counter: it is `ready` minus the free list's length.
    high_water: StatCounter,
    failed_allocs: StatCounter,
    _region: PhantomData<&'r mut [u8]>,
}

// SAFETY: the pool owns an exclusive borrow of its region (`&mut [u8]` is
// `Send`) and otherwise holds atomics and plain values; moving it to another
// thread moves that borrow with it.
unsafe impl Send for FragmentPool<'_> {}

// SAFETY: through `&FragmentPool` a thread reaches a slot's bytes only by
// presenting that slot's `Fragment`: `bytes` takes `&Fragment`, `bytes_mut`
// takes `&mut Fragment`, and the result borrows the token. The free list
// lends each slot to at most one token at a time, tokens are neither `Clone`
// nor constructible outside this module, and the pool id inside them is
// unique per process, so sharing the pool between threads never creates a
// `&mut` to bytes that anyone else can see. All other shared state is atomic.
unsafe impl Sync for FragmentPool<'_> {}

impl<'r> FragmentPool<'r> {
    /// Bytes of region that always suffice for `cfg`, whatever the region's
    /// alignment: the links, the fragments at their stride, and up to 63
    /// bytes of alignment slack. Saturates at `usize::MAX` for configurations
    /// that cannot fit in memory.
    pub const fn required_bytes(cfg: &FragmentPoolConfig) -> usize {
        let max = cfg.max as usize;
        let links = max.saturating_mul(LINK_BYTES);
        let data = max.saturating_mul(cfg.stride());
        // Up to 3 bytes to align the links, then up to 60 from their 4-aligned
        // end to the next cache line.
        links
            .saturating_add(data)
            .saturating_add(FRAGMENT_ALIGN - 1)
    }

    /// Lays a pool of `class` fragments over `region`, with `cfg.num` of them
    /// ready. Writes only the link table; the fragments' bytes are left as
    /// they are and are not touched before their batch is made ready.
    pub fn new(
        region: &'r mut [u8],
        class: FragmentClass,
        cfg: FragmentPoolConfig,
    ) -> Result<Self, PoolError> {
        cfg.validate()?;
        let given = region.len();
        let (links_at, data_at, end) = layout(region.as_ptr().addr(), &cfg);
        if end > given {
            return Err(PoolError::RegionTooSmall {
                needed: Self::required_bytes(&cfg),
                given,
            });
        }
        let id = claim_pool_id(&NEXT_POOL_ID)?;
        let max = cfg.max as usize;
        let (head, data) = region[..end].split_at_mut(data_at);
        let links = make_links(&mut head[links_at..links_at + max * LINK_BYTES], max);
        Ok(Self {
            id,
            class,
            fragment_size: cfg.fragment_size,
            stride: cfg.stride(),
            capacity: cfg.max,
            data: NonNull::from(data).cast::<u8>(),
            list: FreeList::new(links, cfg.num, cfg.max, cfg.inc),
            high_water: StatCounter::new(0),
            failed_allocs: StatCounter::new(0),
            _region: PhantomData,
        })
    }

    /// Lends out a fragment: the most recently freed one, else one of the
    /// next batch. Lock-free; fails with [`PoolError::Exhausted`] when all
    /// `max` are in use.
    pub fn alloc(&self) -> Result<Fragment, PoolError> {
        let Some((index, free_len)) = self.list.alloc() else {
            self.failed_allocs.fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::Exhausted { class: self.class });
        };
        // Loaded after the pop's Acquire, so `ready` covers every slot that
        // was on the list then; only growth racing with this alloc can make
        // the difference approximate. The high-water mark is written only
        // when exceeded, which is rare.
        let in_use = self.list.ready().saturating_sub(free_len);
        if in_use > self.high_water.load(Ordering::Relaxed) {
            self.high_water.fetch_max(in_use, Ordering::Relaxed);
        }
        Ok(Fragment {
            pool: self.id,
            // Lossless: indices are below `capacity <= 65535`.
            index: index as u16,
            class: self.class,
        })
    }

    /// Takes a fragment back. A fragment of another pool is handed back
    /// untouched as [`ForeignFragment`].
    pub fn free(&self, frag: Fragment) -> Result<(), ForeignFragment> {
        if frag.pool != self.id {
            return Err(ForeignFragment(frag));
        }
        self.list.free(u32::from(frag.index));
        Ok(())
    }

    /// The fragment's `fragment_size` bytes, for as long as both the pool
    /// and the token are borrowed.
    pub fn bytes<'a>(&'a self, frag: &'a Fragment) -> Result<&'a [u8], PoolError> {
        let slot = self.slot(frag)?;
        // SAFETY: `slot` points at `fragment_size` bytes of this pool's slot
        // `frag.index` inside the region borrowed for `'r`, which outlives
        // `&'a self`. The token shows that slot is lent to its holder alone,
        // and the result borrows the token shared, so no `&mut` to the bytes
        // (which needs `&mut Fragment`) can exist while it lives.
        Ok(unsafe { core::slice::from_raw_parts(slot.as_ptr(), self.fragment_size) })
    }

    /// The fragment's `fragment_size` bytes, writable, for as long as both
    /// the pool and the token are borrowed; tying the borrow to the token is
    /// what keeps two `&mut` to one fragment from existing at once.
    pub fn bytes_mut<'a>(&'a self, frag: &'a mut Fragment) -> Result<&'a mut [u8], PoolError> {
        let slot = self.slot(frag)?;
        // SAFETY: as in `bytes`: the bytes are slot `frag.index` of the
        // region, lent to the token's holder alone; the result borrows the
        // token exclusively, so it is the only reference to those bytes
        // while it lives. Slots do not overlap (`stride >= fragment_size`).
        Ok(unsafe { core::slice::from_raw_parts_mut(slot.as_ptr(), self.fragment_size) })
    }

    /// Start of the slot named by `frag`, after checking it is this pool's.
    fn slot(&self, frag: &Fragment) -> Result<NonNull<u8>, PoolError> {
        if frag.pool != self.id {
            return Err(PoolError::Foreign);
        }
        let index = usize::from(frag.index);
        debug_assert!(index < self.capacity as usize);
        // SAFETY: this pool made `frag`, so `index < capacity`, and the data
        // area spans `capacity * stride` bytes, so the offset stays inside it.
        Ok(unsafe { self.data.add(index * self.stride) })
    }

    /// The free list's slots from the top, with their depths checked.
    #[cfg(test)]
    pub(super) fn free_slots(&self) -> std::vec::Vec<u32> {
        self.list
            .walk()
            .into_iter()
            .map(|(index, _)| index)
            .collect()
    }

    /// Usable bytes of each fragment.
    pub fn fragment_size(&self) -> usize {
        self.fragment_size
    }

    /// The class this pool's fragments carry.
    pub fn class(&self) -> FragmentClass {
        self.class
    }

    /// A snapshot of the statistics; see [`PoolStats`] for when it is exact.
    pub fn stats(&self) -> PoolStats {
        // The list's length first: `ready`, loaded after it, then covers
        // every slot that was on the list.
        let free_len = self.list.free_len();
        let ready = self.list.ready();
        PoolStats {
            in_use: ready.saturating_sub(free_len),
            high_water: self.high_water.load(Ordering::Relaxed),
            failed_allocs: self.failed_allocs.load(Ordering::Relaxed),
            ready,
            capacity: self.capacity,
        }
    }
}

impl fmt::Debug for FragmentPool<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FragmentPool")
            .field("id", &self.id)
            .field("class", &self.class)
            .field("fragment_size", &self.fragment_size)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
