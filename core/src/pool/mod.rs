//! Fixed fragment pools: the counterpart of Open MPI's `opal_free_list`,
//! without a heap.
//!
//! A [`FragmentPool`] carves fixed-size fragments out of a byte region the
//! caller hands in at construction and lends them out as move-only
//! [`Fragment`] tokens. Alloc and free are O(1) and lock-free from any number
//! of threads (and from interrupt handlers: no path ever waits for another
//! thread), reuse is LIFO so the cache-hot fragment goes out next, and
//! exhaustion is an error value, never an allocation.
//!
//! [`FragmentPools`] holds the three classes a BTL needs, carved from one
//! region: [`FragmentClass::Small`] (descriptor-sized, Open MPI's "rdma"
//! list), [`FragmentClass::Eager`] (`eager_limit` bytes) and
//! [`FragmentClass::Max`] (`max_send_size` bytes). Descriptors and the
//! `Btl` interface reach them through a [`PoolsRef`].
//!
//! The region is lent (a `&mut [u8]`, a [`PoolRegion`] in a `static` on a
//! board) or owned by the pools (any [`Region`], such as a pinned box of
//! [`PoolCell`]s on a host), so that a module can keep its pools and their
//! memory in one value.
//!
//! Each pool makes `num` fragments ready at start and `inc` more at a time
//! when the free list runs dry, up to the hard cap `max`. Fragments past the
//! ready count are never touched, so their memory is not faulted in until it
//! is needed; the verbs backend relies on this to register each batch with
//! the HCA only when it becomes ready.
//!
//! # Example
//!
//! ```
//! use btl_core::pool::{FragmentClass, FragmentPool, FragmentPoolConfig, PoolRegion};
//!
//! const CFG: FragmentPoolConfig = FragmentPoolConfig { fragment_size: 256, num: 2, max: 4, inc: 2 };
//! let mut region = PoolRegion::<{ FragmentPool::required_bytes(&CFG) }>::new();
//! let pool = FragmentPool::new(region.as_mut_slice(), FragmentClass::Eager, CFG)?;
//!
//! let mut frag = pool.alloc()?;
//! pool.bytes_mut(&mut frag)?[..5].copy_from_slice(b"hello");
//! assert_eq!(&pool.bytes(&frag)?[..5], b"hello");
//! pool.free(frag).map_err(|_| "fragment of another pool")?;
//! assert_eq!(pool.stats().in_use, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
// The pool is the one module of btl-core that needs `unsafe`: it turns the
// region's cells into atomics and into per-fragment slices, and vouches
// for the regions that never move. Every block says why it holds.
#![allow(unsafe_code)]

mod fragment_pool;
mod free_list;
mod params;
mod pools;
mod region;
#[cfg(test)]
mod tests;

pub use fragment_pool::FragmentPool;
pub use params::{
    MAX_FRAGMENT_PAYLOAD, PoolDefaults, PoolParams, PoolParamsError, pool_param_specs,
};
pub use pools::{FragmentPools, FragmentPoolsConfig, PoolSets, PoolsRef};
pub use region::{PoolCell, Region};

use core::fmt;
use core::sync::atomic::{AtomicU32 as IdCounter, Ordering};

/// Alignment of every fragment's data: one cache line, so that two fragments
/// never share a line and DMA into one never disturbs its neighbour.
pub const FRAGMENT_ALIGN: usize = 64;

/// Most fragments one pool can hold: indices are 16 bits wide so that the
/// free-list head (tag and index) fits a 32-bit compare-and-swap, and
/// `0xFFFF` marks the end of the list.
pub const MAX_FRAGMENTS: u32 = 0xFFFF;

/// The size class of a fragment, after Open MPI's three BTL free lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FragmentClass {
    /// Descriptor-sized fragments for control messages and RDMA
    /// descriptors (Open MPI's "rdma" free list).
    Small,
    /// Fragments that hold a whole eager message (`eager_limit` bytes).
    Eager,
    /// Fragments that hold one piece of a pipelined large send
    /// (`max_send_size` bytes).
    Max,
}

impl FragmentClass {
    /// The classes from the smallest to the largest, the order in which
    /// [`PoolsRef::alloc`] tries them.
    pub const ALL: [FragmentClass; 3] = [Self::Small, Self::Eager, Self::Max];

    /// Lower-case name as used in parameters and messages (`small`, `eager`, `max`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Small => "small",
            Self::Eager => "eager",
            Self::Max => "max",
        }
    }
}

impl fmt::Display for FragmentClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fragment lent out by a pool: a move-only token that names the slot.
///
/// It is neither `Clone` nor `Copy` and can only be made by a pool, so whoever
/// holds it is the slot's only user; the pool's id inside keeps it from being
/// used with any other pool. Give it back with `free`: a dropped fragment is
/// lost to its pool.
#[must_use = "a fragment that is not given back with `free` is lost to its pool"]
#[derive(Debug, PartialEq, Eq)]
pub struct Fragment {
    pool: u32,
    index: u16,
    class: FragmentClass,
}

impl Fragment {
    /// The class of the pool this fragment came from.
    pub fn class(&self) -> FragmentClass {
        self.class
    }

    /// The fragment's slot in its pool (`0..capacity`), e.g. to find its
    /// registration or to key per-fragment state in a table.
    pub fn index(&self) -> usize {
        usize::from(self.index)
    }
}

/// A fragment that [`FragmentPool::free`] refused because another pool lent
/// it out; the caller gets it back to return it to the right pool.
#[derive(Debug, PartialEq, Eq)]
pub struct ForeignFragment(pub Fragment);

impl fmt::Display for ForeignFragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} fragment belongs to another pool", self.0.class)
    }
}

impl core::error::Error for ForeignFragment {}

/// Why a pool operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolError {
    /// Every fragment of the class is in use and the pool is at its `max`.
    Exhausted {
        /// The class that ran out.
        class: FragmentClass,
    },
    /// No class holds `requested` bytes; the largest holds `max`.
    TooLarge {
        /// The length asked for.
        requested: usize,
        /// The largest fragment size of the pools.
        max: usize,
    },
    /// The fragment was lent out by another pool.
    Foreign,
    /// The region handed in cannot hold the configured pool.
    RegionTooSmall {
        /// Bytes that always suffice, whatever the region's alignment.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// The configuration breaks the named rule.
    InvalidConfig(&'static str),
    /// The process has made 2^32 - 1 pools; ids must not repeat, or a
    /// fragment of a dropped pool could pass for one of a new pool.
    TooManyPools,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exhausted { class } => write!(f, "{class} fragment pool exhausted"),
            Self::TooLarge { requested, max } => {
                write!(f, "no fragment holds {requested} bytes (largest is {max})")
            }
            Self::Foreign => f.write_str("fragment belongs to another pool"),
            Self::RegionTooSmall { needed, given } => {
                write!(
                    f,
                    "pool region too small: {given} bytes given, {needed} needed"
                )
            }
            Self::InvalidConfig(rule) => write!(f, "invalid pool configuration: {rule}"),
            Self::TooManyPools => f.write_str("pool ids exhausted"),
        }
    }
}

impl core::error::Error for PoolError {}

/// Size and growth of one pool, in the terms of Open MPI's
/// `btl_<name>_free_list_{num,max,inc}` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentPoolConfig {
    /// Usable bytes of each fragment (> 0); slots are this rounded up to
    /// [`FRAGMENT_ALIGN`].
    pub fragment_size: usize,
    /// Fragments ready at start (`free_list_num`, at most `max`).
    pub num: u32,
    /// Hard cap on fragments (`free_list_max`, 1..=[`MAX_FRAGMENTS`]).
    pub max: u32,
    /// Fragments made ready at a time once the free list runs dry
    /// (`free_list_inc`, at least 1).
    pub inc: u32,
}

impl FragmentPoolConfig {
    /// Checks the rules on the fields, naming the first one broken.
    pub const fn validate(&self) -> Result<(), PoolError> {
        if self.fragment_size == 0 {
            return Err(PoolError::InvalidConfig("fragment_size must be > 0"));
        }
        if self.max == 0 {
            return Err(PoolError::InvalidConfig("max must be >= 1"));
        }
        if self.max > MAX_FRAGMENTS {
            return Err(PoolError::InvalidConfig("max must be <= 65535"));
        }
        if self.num > self.max {
            return Err(PoolError::InvalidConfig("num must be <= max"));
        }
        if self.inc == 0 {
            return Err(PoolError::InvalidConfig("inc must be >= 1"));
        }
        if FragmentPool::required_bytes(self) == usize::MAX {
            return Err(PoolError::InvalidConfig(
                "fragment_size * max does not fit in memory",
            ));
        }
        Ok(())
    }

    /// Distance between two fragments: the size rounded up to a cache line
    /// (saturates; [`validate`](Self::validate) rejects that).
    pub const fn stride(&self) -> usize {
        match self.fragment_size.checked_next_multiple_of(FRAGMENT_ALIGN) {
            Some(stride) => stride,
            None => usize::MAX,
        }
    }
}

/// What a pool has lent out and made ready: a snapshot for monitoring, not
/// a synchronisation point.
///
/// No counter is kept for `in_use`, so that alloc and free cost no atomic
/// read-modify-write beyond the free list's own compare-and-swap: it is
/// `ready` minus the free list's length, which the list keeps in its links.
/// A fragment counts as out from the moment `alloc` takes it off the list
/// until `free` puts it back.
///
/// - **Quiescent**: if no alloc or free of the pool runs during the call to
///   [`FragmentPool::stats`] and the earlier ones happened before it (made by
///   this thread, or by threads it has joined or otherwise synchronised with
///   since), `in_use` is exactly the fragments out.
/// - **Concurrent**: while other threads alloc and free, `in_use` is
///   approximate (the list's top and `ready` are read with separate loads and
///   may move in between), though never above `ready`.
/// - `high_water` is recorded by each alloc from the list's length at its own
///   compare-and-swap, so it never misses a peak, concurrent or not. It is
///   exact unless allocs ever raced with growth: the slots of a batch being
///   made ready by another thread count as out until they are on the list,
///   so it can then exceed the true peak, never `capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Fragments currently lent out (exact when quiescent, see above).
    pub in_use: u32,
    /// Most fragments ever lent out at once (never below it, see above).
    pub high_water: u32,
    /// Allocations refused because the pool was exhausted (wraps at 2^32).
    pub failed_allocs: u32,
    /// Fragments made ready so far (`num`, growing by `inc` up to `max`).
    pub ready: u32,
    /// The hard cap, `max`.
    pub capacity: u32,
}

impl PoolStats {
    /// The counters of two pools taken together.
    pub fn sum(self, other: PoolStats) -> PoolStats {
        PoolStats {
            in_use: self.in_use.saturating_add(other.in_use),
            high_water: self.high_water.saturating_add(other.high_water),
            failed_allocs: self.failed_allocs.wrapping_add(other.failed_allocs),
            ready: self.ready.saturating_add(other.ready),
            capacity: self.capacity.saturating_add(other.capacity),
        }
    }
}

/// Cache-line-aligned storage for pools, for a `static` or a stack frame on
/// bare metal where there is no allocator. Size it with
/// [`FragmentPool::required_bytes`] or [`FragmentPools::required_bytes`].
#[repr(C, align(64))]
pub struct PoolRegion<const N: usize>(pub [u8; N]);

impl<const N: usize> PoolRegion<N> {
    /// Zeroed storage; in a `static` it lands in `.bss` and costs no flash.
    pub const fn new() -> Self {
        Self([0; N])
    }

    /// The bytes, to hand to [`FragmentPool::new`] or [`FragmentPools::new`].
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl<const N: usize> fmt::Debug for PoolRegion<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolRegion").field("len", &N).finish()
    }
}

impl<const N: usize> Default for PoolRegion<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Source of pool ids, process-wide. A plain `core` atomic even under loom:
/// ids only need to be unique, they take no part in the free-list protocol.
static NEXT_POOL_ID: IdCounter = IdCounter::new(0);

/// Takes the next id from `counter`, refusing once it is used up rather than
/// wrapping, so that no two pools of a process ever share an id.
fn claim_pool_id(counter: &IdCounter) -> Result<u32, PoolError> {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| id.checked_add(1))
        .map_err(|_| PoolError::TooManyPools)
}
