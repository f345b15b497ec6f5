//! The bytes pools are carved from, as a pool holds them.
//!
//! A pool hands out fragments from `&self` to any number of threads, so it
//! writes bytes it reaches only through a shared reference: each byte is a
//! [`PoolCell`] (a `u8` with interior mutability). A [`Region`] is any
//! holder of such cells whose bytes stay where they are for as long as the
//! pool keeps it: a slice lent from a caller's `&mut [u8]`
//! ([`PoolCell::from_mut`]), or an owning pointer pinned in place
//! (`Pin<Box<[PoolCell]>>` on a host), so that a pool and the memory it
//! carves can be kept in one value without a borrow between them.

use core::cell::UnsafeCell;
use core::marker::PhantomPinned;
use core::ops::Deref;
use core::pin::Pin;

/// One byte of a pool's region.
///
/// `!Unpin`, so that a pinned region of cells is known never to move.
#[repr(transparent)]
pub struct PoolCell(UnsafeCell<u8>, PhantomPinned);

// SAFETY: a pool touches a cell only as the free list's atomics (which are
// `Sync`) or as part of a fragment's bytes, which a `Fragment` token lends
// to one holder at a time (see `FragmentPool`'s `Sync`); nothing else reads
// or writes a cell through a shared reference.
unsafe impl Sync for PoolCell {}

impl PoolCell {
    /// A zero byte.
    pub const fn new() -> Self {
        PoolCell(UnsafeCell::new(0), PhantomPinned)
    }

    /// The cells of `bytes`, borrowed as long as `bytes` is.
    pub fn from_mut(bytes: &mut [u8]) -> &[PoolCell] {
        // SAFETY: `PoolCell` is `repr(transparent)` over `UnsafeCell<u8>`
        // (the marker is a ZST), which has the layout of `u8`; the cells
        // borrow `bytes` exclusively for the same lifetime, so nothing else
        // reads or writes them meanwhile.
        unsafe { core::slice::from_raw_parts(bytes.as_mut_ptr().cast::<PoolCell>(), bytes.len()) }
    }
}

#[cfg(feature = "alloc")]
impl PoolCell {
    /// `len` zero cells on the heap, pinned: a region for pools to own. The
    /// allocator hands back zeroed memory, whose pages take room only once
    /// a fragment is written (and cost no byte-by-byte start).
    pub fn boxed(len: usize) -> Pin<alloc::boxed::Box<[PoolCell]>> {
        let bytes = alloc::vec![0u8; len].into_boxed_slice();
        let cells = alloc::boxed::Box::into_raw(bytes) as *mut [PoolCell];
        // SAFETY: `PoolCell` is `repr(transparent)` over `UnsafeCell<u8>`
        // (the marker is a ZST), which has the layout of `u8`: the box's
        // allocation has the layout a box of `len` cells frees, and every
        // byte is an initialised cell. The bytes' box gave up ownership.
        alloc::boxed::Box::into_pin(unsafe { alloc::boxed::Box::from_raw(cells) })
    }
}

impl Default for PoolCell {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for PoolCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("PoolCell")
    }
}

/// Cells a pool can keep: their address never changes while the pool
/// holds them, which fragment alignment and the free list's atomics rely
/// on.
///
/// # Safety
///
/// Every deref must yield the same cells (same address, same length) for
/// as long as the value lives.
pub unsafe trait Region: Deref<Target = [PoolCell]> {}

// SAFETY: a shared slice always points at the same cells.
unsafe impl Region for &[PoolCell] {}

// SAFETY: `PoolCell` is `!Unpin`, so `[PoolCell]` is too, and `Pin`
// guarantees the pointee is not moved (nor its memory reused) until it is
// dropped; `Deref` of a pinned pointer yields the pointee.
unsafe impl<P: Deref<Target = [PoolCell]>> Region for Pin<P> {}
