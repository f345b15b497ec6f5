//! A global allocator that counts the calling thread's allocations, for the
//! tests that prove a data path allocates nothing.
//!
//! A test binary installs it and reads the count around the code it
//! checks:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: btl_tests::alloc_count::Counting = btl_tests::alloc_count::Counting;
//!
//! let before = btl_tests::alloc_count::allocations();
//! // ... the data path ...
//! assert_eq!(btl_tests::alloc_count::allocations() - before, 0);
//! ```
// Counting allocations needs a `GlobalAlloc`, which is an unsafe trait.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting each allocation of the thread that makes
/// it.
pub struct Counting;

thread_local! {
    // Per thread, so that the test harness's own threads do not count.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// How many allocations this thread has made so far (only while
/// [`Counting`] is the global allocator).
pub fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator unchanged, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}
