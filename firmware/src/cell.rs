//! [`StaticCell`]: a static that hands out one `&'static mut` to its
//! contents, so storage can be reserved at link time and lent to drivers and
//! sockets without an allocator and without `static mut`.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// A value in a static that can be taken mutably exactly once.
pub struct StaticCell<T> {
    taken: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the only access to `value` is the `&mut` that `take` returns, and
// the atomic flag makes sure it is returned at most once, so no two threads
// (or anything else) can reach the value at the same time. `T: Send` because
// that `&mut` may be used on any thread.
unsafe impl<T: Send> Sync for StaticCell<T> {}

impl<T> StaticCell<T> {
    /// A cell holding `value`.
    pub const fn new(value: T) -> Self {
        Self {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The contents, the first time; `None` afterwards.
    // A `&mut` from a `&`: sound here because the flag lets only one out.
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut T> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: the flag was false, so this is the first and only call to
        // get here: no other reference to the value exists or will exist,
        // and the static lives forever.
        Some(unsafe { &mut *self.value.get() })
    }
}
