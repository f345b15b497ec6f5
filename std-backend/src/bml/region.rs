//! One registered region held by every module of a [`Bml`](super::Bml):
//! each module keeps it as its own registration, so that a peer reaches
//! it over whichever module carries that peer, and nothing is copied.

use std::cell::UnsafeCell;
use std::rc::Rc;

/// A buffer that every module of one `Bml` holds a clone of.
///
/// Each module reads and writes its registered memory only inside its own
/// calls (a `Btl` method hands out a borrow tied to the module's borrow,
/// never one that outlives the call), and the `Bml` calls one module at a
/// time, through `&mut self` or `&self`. So however many modules hold a
/// clone, at most one borrows the bytes at any moment; this is what makes
/// the `unsafe` below sound, and why the type never leaves the crate.
pub(crate) struct Shared(Rc<UnsafeCell<Vec<u8>>>);

impl Shared {
    /// The region `bytes`, to hand to every module.
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Shared(Rc::new(UnsafeCell::new(bytes)))
    }

    /// Another holder of the same bytes.
    pub(crate) fn holder(&self) -> Self {
        Shared(Rc::clone(&self.0))
    }

    /// The bytes back, once every other holder has let go.
    pub(crate) fn into_inner(self) -> Result<Vec<u8>, Shared> {
        Rc::try_unwrap(self.0)
            .map(UnsafeCell::into_inner)
            .map_err(Shared)
    }
}

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: no holder borrows the bytes mutably while this borrow
        // lives: holders are the modules of one `Bml`, which borrow their
        // memory only within their own calls, one module at a time (see
        // the type's documentation).
        unsafe { (*self.0.get()).as_slice() }
    }
}

impl AsMut<[u8]> for Shared {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_ref`: the one module being called is the only
        // one borrowing the bytes, and its borrow ends with its call.
        unsafe { (*self.0.get()).as_mut_slice() }
    }
}

// SAFETY: the holders of one region all live in one `Bml` and move between
// threads with it, together: no two threads ever hold clones at once, so
// neither the bytes nor the count of holders is ever touched from two.
unsafe impl Send for Shared {}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Shared({} bytes, {} holders)",
            self.as_ref().len(),
            Rc::strong_count(&self.0)
        )
    }
}
