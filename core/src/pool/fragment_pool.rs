//! One pool of equal-sized fragments carved from a region.
//!
//! [`PoolCore`] is the pool without its region: layout, free list and
//! statistics. Every operation is handed the region's cells and derives its
//! pointers from them, so the pool never keeps a pointer into memory whose
//! owner may move. [`FragmentPool`] is a core together with its region.

#[cfg(any(test, loom))]
extern crate std;

use core::fmt;
use core::sync::atomic::AtomicU32 as StatCounter;

use super::free_list::{FreeList, Listed};
use super::region::{PoolCell, Region};
use super::{
    FRAGMENT_ALIGN, ForeignFragment, Fragment, FragmentClass, FragmentPoolConfig, NEXT_POOL_ID,
    PoolError, PoolStats, claim_pool_id,
};
use crate::sync::{AtomicU32, Ordering};

/// Bytes of one `next` link at the front of the region.
const LINK_BYTES: usize = core::mem::size_of::<AtomicU32>();
/// Alignment of the links; `AtomicU32` is always aligned to its size.
const LINK_ALIGN: usize = 4;

/// How a region at address `addr` splits for `cfg`: the offsets of the
/// links and of the first fragment, and the bytes used.
fn layout(addr: usize, cfg: &FragmentPoolConfig) -> (usize, usize, usize) {
    let max = cfg.max as usize;
    let links = addr.wrapping_neg() % LINK_ALIGN;
    let links_end = links + max * LINK_BYTES;
    let data = links_end + addr.wrapping_add(links_end).wrapping_neg() % FRAGMENT_ALIGN;
    (links, data, data + max * cfg.stride())
}

/// A pool's state without its region: where its links and fragments lie
/// in the region, its free list and its counters.
///
/// Every method that touches the region takes its cells; they must be the
/// cells the core was made over ([`FragmentPool`] and `FragmentPools` keep
/// the two together).
pub(super) struct PoolCore {
    id: u32,
    class: FragmentClass,
    fragment_size: usize,
    stride: usize,
    capacity: u32,
    /// Offsets of the links and of slot 0 in the region; slot 0 is
    /// cache-line aligned and the links 4-aligned, as the region never
    /// moves.
    links_at: usize,
    data_at: usize,
    list: FreeList,
    // Statistics are advisory and outside the free-list protocol, so they
    // stay `core` atomics under loom and do not widen the model. `in_use` is
    // no counter: it is `ready` minus the free list's length.
    high_water: StatCounter,
    failed_allocs: StatCounter,
    /// Loom's atomics cannot be laid over raw bytes: under loom the links
    /// live here, and the region's link bytes stay unused.
    #[cfg(loom)]
    links: std::boxed::Box<[AtomicU32]>,
}

impl PoolCore {
    /// The pool's id, which its fragments carry.
    pub(super) fn id(&self) -> u32 {
        self.id
    }

    /// Bytes of region that always suffice for `cfg`, whatever the region's
    /// alignment: the links, the fragments at their stride, and up to 63
    /// bytes of alignment slack. Saturates at `usize::MAX` for configurations
    /// that cannot fit in memory.
    pub(super) const fn required_bytes(cfg: &FragmentPoolConfig) -> usize {
        let max = cfg.max as usize;
        let links = max.saturating_mul(LINK_BYTES);
        let data = max.saturating_mul(cfg.stride());
        // Up to 3 bytes to align the links, then up to 60 from their 4-aligned
        // end to the next cache line.
        links
            .saturating_add(data)
            .saturating_add(FRAGMENT_ALIGN - 1)
    }

    /// Lays a pool of `class` fragments over `cells`, with `cfg.num` of them
    /// ready. Writes only the link table; the fragments' bytes are left as
    /// they are and are not touched before their batch is made ready.
    pub(super) fn new(
        cells: &[PoolCell],
        class: FragmentClass,
        cfg: FragmentPoolConfig,
    ) -> Result<Self, PoolError> {
        cfg.validate()?;
        let given = cells.len();
        let (links_at, data_at, end) = layout(cells.as_ptr().addr(), &cfg);
        if end > given {
            return Err(PoolError::RegionTooSmall {
                needed: Self::required_bytes(&cfg),
                given,
            });
        }
        let id = claim_pool_id(&NEXT_POOL_ID)?;
        let mut core = Self {
            id,
            class,
            fragment_size: cfg.fragment_size,
            stride: cfg.stride(),
            capacity: cfg.max,
            links_at,
            data_at,
            list: FreeList::new(&[], 0, 0, 1),
            high_water: StatCounter::new(0),
            failed_allocs: StatCounter::new(0),
            #[cfg(loom)]
            links: (0..cfg.max).map(|_| AtomicU32::new(0)).collect(),
        };
        core.list = FreeList::new(core.links(cells), cfg.num, cfg.max, cfg.inc);
        Ok(core)
    }

    /// The free list's links, one atomic per slot at the front of the
    /// region.
    #[cfg(not(loom))]
    fn links<'c>(&self, cells: &'c [PoolCell]) -> &'c [AtomicU32] {
        let n = self.capacity as usize;
        let bytes = &cells[self.links_at..self.links_at + n * LINK_BYTES];
        assert_eq!(bytes.as_ptr().addr() % LINK_ALIGN, 0, "the region moved");
        // SAFETY: `AtomicU32` has the size of four bytes and interior
        // mutability, as the cells do, and an alignment of 4, which the
        // assert checks; the bytes are initialised (a `PoolCell` always
        // is). The pool uses these bytes only as atomics, and the result
        // borrows the cells shared for no longer than they are borrowed.
        unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<AtomicU32>(), n) }
    }

    #[cfg(loom)]
    fn links<'c>(&'c self, _cells: &'c [PoolCell]) -> &'c [AtomicU32] {
        &self.links
    }

    fn listed<'c>(&'c self, cells: &'c [PoolCell]) -> Listed<'c> {
        self.list.with(self.links(cells))
    }

    /// Lends out a fragment: the most recently freed one, else one of the
    /// next batch. Lock-free; fails with [`PoolError::Exhausted`] when all
    /// `max` are in use.
    pub(super) fn alloc(&self, cells: &[PoolCell]) -> Result<Fragment, PoolError> {
        let list = self.listed(cells);
        let Some((index, free_len)) = list.alloc() else {
            self.failed_allocs.fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::Exhausted { class: self.class });
        };
        // Loaded after the pop's Acquire, so `ready` covers every slot that
        // was on the list then; only growth racing with this alloc can make
        // the difference approximate. The high-water mark is written only
        // when exceeded, which is rare.
        let in_use = list.ready().saturating_sub(free_len);
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
    pub(super) fn free(&self, cells: &[PoolCell], frag: Fragment) -> Result<(), ForeignFragment> {
        if frag.pool != self.id {
            return Err(ForeignFragment(frag));
        }
        self.listed(cells).free(u32::from(frag.index));
        Ok(())
    }

    /// The fragment's `fragment_size` bytes, for as long as both the cells
    /// and the token are borrowed.
    pub(super) fn bytes<'a>(
        &self,
        cells: &'a [PoolCell],
        frag: &'a Fragment,
    ) -> Result<&'a [u8], PoolError> {
        let slot = self.slot(cells, frag)?;
        // SAFETY: `slot` is the first of `fragment_size` cells of slot
        // `frag.index`, inside `cells` (see `slot`). The token shows that
        // slot is lent to its holder alone, and the result borrows the token
        // shared, so no `&mut` to the bytes (which needs `&mut Fragment`)
        // can exist while it lives. The pointer comes from the cells'
        // `UnsafeCell`s, so reading through it is allowed.
        Ok(unsafe { core::slice::from_raw_parts(slot, self.fragment_size) })
    }

    /// The fragment's `fragment_size` bytes, writable, for as long as both
    /// the cells and the token are borrowed; tying the borrow to the token
    /// is what keeps two `&mut` to one fragment from existing at once.
    pub(super) fn bytes_mut<'a>(
        &self,
        cells: &'a [PoolCell],
        frag: &'a mut Fragment,
    ) -> Result<&'a mut [u8], PoolError> {
        let slot = self.slot(cells, frag)?;
        // SAFETY: as in `bytes`: the bytes are slot `frag.index`, lent to the
        // token's holder alone; the result borrows the token exclusively,
        // so it is the only reference to those bytes while it lives. Slots
        // do not overlap (`stride >= fragment_size`), and writing through a
        // pointer from an `UnsafeCell` under a shared borrow is allowed.
        Ok(unsafe { core::slice::from_raw_parts_mut(slot, self.fragment_size) })
    }

    /// Start of the slot named by `frag`, after checking it is this pool's.
    fn slot(&self, cells: &[PoolCell], frag: &Fragment) -> Result<*mut u8, PoolError> {
        if frag.pool != self.id {
            return Err(PoolError::Foreign);
        }
        let start = self.data_at + usize::from(frag.index) * self.stride;
        // This pool made `frag`, so `index < capacity`, and the region
        // spans the data area's `capacity * stride` bytes: never out of
        // range. The cell's pointer covers the slot's bytes after it.
        let first = cells
            .get(start..start + self.fragment_size)
            .ok_or(PoolError::Foreign)?;
        debug_assert_eq!(first.as_ptr().addr() % FRAGMENT_ALIGN, 0);
        Ok(first.as_ptr().cast::<u8>().cast_mut())
    }

    /// The free list's slots from the top, with their depths checked.
    #[cfg(test)]
    pub(super) fn free_slots(&self, cells: &[PoolCell]) -> std::vec::Vec<u32> {
        self.listed(cells)
            .walk()
            .into_iter()
            .map(|(index, _)| index)
            .collect()
    }

    /// Usable bytes of each fragment.
    pub(super) fn fragment_size(&self) -> usize {
        self.fragment_size
    }

    /// The class this pool's fragments carry.
    pub(super) fn class(&self) -> FragmentClass {
        self.class
    }

    /// A snapshot of the statistics; see [`PoolStats`] for when it is exact.
    pub(super) fn stats(&self, cells: &[PoolCell]) -> PoolStats {
        // The list's length first: `ready`, loaded after it, then covers
        // every slot that was on the list.
        let free_len = self.listed(cells).free_len();
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

/// A fixed-capacity, lock-free pool of fragments of one size and class,
/// with the region it is carved from.
///
/// See the [module documentation](super) for the design; `alloc` and `free`
/// may be called from any number of threads through `&self`. `R` is how
/// the pool holds its region: cells lent from a caller's bytes
/// ([`FragmentPool::new`]), or any [`Region`] it owns
/// ([`FragmentPool::owning`]).
pub struct FragmentPool<R> {
    region: R,
    core: PoolCore,
}

impl<'r> FragmentPool<&'r [PoolCell]> {
    /// Lays a pool of `class` fragments over `region`, with `cfg.num` of
    /// them ready. Writes only the link table; the fragments' bytes are
    /// left as they are and are not touched before their batch is made
    /// ready.
    pub fn new(
        region: &'r mut [u8],
        class: FragmentClass,
        cfg: FragmentPoolConfig,
    ) -> Result<Self, PoolError> {
        Self::owning(PoolCell::from_mut(region), class, cfg)
    }
}

impl FragmentPool<()> {
    /// Bytes of region that always suffice for `cfg`, whatever the region's
    /// alignment: the links, the fragments at their stride, and up to 63
    /// bytes of alignment slack. Saturates at `usize::MAX` for configurations
    /// that cannot fit in memory.
    pub const fn required_bytes(cfg: &FragmentPoolConfig) -> usize {
        PoolCore::required_bytes(cfg)
    }
}

impl<R: Region> FragmentPool<R> {
    /// As [`new`](FragmentPool::new), over a region the pool keeps.
    pub fn owning(
        region: R,
        class: FragmentClass,
        cfg: FragmentPoolConfig,
    ) -> Result<Self, PoolError> {
        let core = PoolCore::new(&region, class, cfg)?;
        Ok(FragmentPool { region, core })
    }

    /// Lends out a fragment: the most recently freed one, else one of the
    /// next batch. Lock-free; fails with [`PoolError::Exhausted`] when all
    /// `max` are in use.
    pub fn alloc(&self) -> Result<Fragment, PoolError> {
        self.core.alloc(&self.region)
    }

    /// Takes a fragment back. A fragment of another pool is handed back
    /// untouched as [`ForeignFragment`].
    pub fn free(&self, frag: Fragment) -> Result<(), ForeignFragment> {
        self.core.free(&self.region, frag)
    }

    /// The fragment's `fragment_size` bytes, for as long as both the pool
    /// and the token are borrowed.
    pub fn bytes<'a>(&'a self, frag: &'a Fragment) -> Result<&'a [u8], PoolError> {
        self.core.bytes(&self.region, frag)
    }

    /// The fragment's `fragment_size` bytes, writable, for as long as both
    /// the pool and the token are borrowed; tying the borrow to the token is
    /// what keeps two `&mut` to one fragment from existing at once.
    pub fn bytes_mut<'a>(&'a self, frag: &'a mut Fragment) -> Result<&'a mut [u8], PoolError> {
        self.core.bytes_mut(&self.region, frag)
    }

    /// The free list's slots from the top, with their depths checked.
    #[cfg(test)]
    pub(super) fn free_slots(&self) -> std::vec::Vec<u32> {
        self.core.free_slots(&self.region)
    }

    /// Usable bytes of each fragment.
    pub fn fragment_size(&self) -> usize {
        self.core.fragment_size()
    }

    /// The class this pool's fragments carry.
    pub fn class(&self) -> FragmentClass {
        self.core.class()
    }

    /// A snapshot of the statistics; see [`PoolStats`] for when it is exact.
    pub fn stats(&self) -> PoolStats {
        self.core.stats(&self.region)
    }
}

impl<R: Region> fmt::Debug for FragmentPool<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FragmentPool")
            .field("id", &self.core.id)
            .field("class", &self.core.class)
            .field("fragment_size", &self.core.fragment_size)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
