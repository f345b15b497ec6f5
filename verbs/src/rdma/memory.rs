//! The bytes behind a registered region, where the HCA can reach them
//! zero-based.
//!
//! A region is registered at I/O virtual address (IOVA) 0, with
//! `ibv_reg_mr_iova`, so that its addresses are offsets from its start as
//! [`crate::provider`] promises. The IOVA is the address space of every
//! access through the region's keys, local and remote alike: the `addr` of
//! a scatter/gather entry naming the lkey and the remote address of an
//! RDMA operation naming the rkey are both `0 + offset`, never a pointer of
//! this process (rdma-core's `ibv_reg_mr(3)`: the IOVA is "the virtual
//! base address of the MR when accessed through a lkey or rkey").
//!
//! The kernel maps an IOVA only onto memory at the same offset in its page
//! (it refuses the registration with `EINVAL` otherwise), so IOVA 0 needs
//! memory that starts on a page boundary, which a `Vec<u8>`'s buffer seldom
//! does. Such a buffer is registered where it is; any other is moved, for
//! as long as it is registered, into page-aligned memory of its own, given
//! back as a new `Vec` when the region is deregistered. Whole pages also
//! keep `ibv_reg_mr`'s fork protection (`madvise(MADV_DONTFORK)` on every
//! page the region touches) off memory the region does not own.

use std::alloc::{self, Layout};
use std::ffi::c_void;
use std::ptr::NonNull;

use crate::provider::VerbsError;

// SAFETY: `getpagesize` is the C library's, with this signature; it takes
// nothing and returns a constant of the system, so calling it is safe.
unsafe extern "C" {
    safe fn getpagesize() -> std::ffi::c_int;
}

/// The size of a memory page, the unit the kernel registers memory in.
pub(super) fn page_size() -> usize {
    usize::try_from(getpagesize())
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// The bytes of one region.
#[derive(Debug)]
pub(super) enum Memory {
    /// The caller's buffer, which starts on a page boundary.
    InPlace(Vec<u8>),
    /// A copy of the caller's bytes in page-aligned memory.
    Moved(Pages),
    /// Memory its owner keeps and lent in place, registered at the IOVA of
    /// its offset in its page: not the provider's to read or give back.
    Lent,
}

impl Memory {
    /// Places `bytes` where a zero-based registration can take them, with
    /// pages of `page` bytes (a power of two). `bytes` must not be empty.
    pub(super) fn place(bytes: Vec<u8>, page: usize) -> Result<Memory, VerbsError> {
        if bytes.is_empty() {
            return Err(VerbsError::Invalid("an empty memory region"));
        }
        if bytes.as_ptr().addr().is_multiple_of(page) {
            return Ok(Memory::InPlace(bytes));
        }
        Pages::copy_of(&bytes, page).map(Memory::Moved)
    }

    /// The IOVA a region lent in place at `addr` is registered at: its
    /// offset in its page of `page` bytes, the only one the kernel maps
    /// onto it, and below a page as [`Mr::base`](crate::provider::Mr)
    /// promises.
    pub(super) fn lent_base(addr: *const u8, page: usize) -> u64 {
        (addr.addr() & (page - 1)) as u64
    }

    /// Whether the caller's buffer is registered where it was.
    #[cfg(test)]
    pub(super) fn in_place(&self) -> bool {
        matches!(self, Memory::InPlace(_))
    }

    /// The first byte, for the registration: it stays where it is for as
    /// long as `self` lives.
    pub(super) fn start(&mut self) -> *mut c_void {
        match self {
            Memory::InPlace(v) => v.as_mut_ptr().cast(),
            Memory::Moved(p) => p.ptr.as_ptr().cast(),
            Memory::Lent => std::ptr::null_mut(),
        }
    }

    /// The region's bytes; `None` for lent memory, its owner's.
    pub(super) fn as_slice(&self) -> Option<&[u8]> {
        match self {
            Memory::InPlace(v) => Some(v),
            Memory::Moved(p) => Some(p.as_slice()),
            Memory::Lent => None,
        }
    }

    /// The region's bytes, to change them; `None` for lent memory.
    pub(super) fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match self {
            Memory::InPlace(v) => Some(v),
            Memory::Moved(p) => Some(p.as_mut_slice()),
            Memory::Lent => None,
        }
    }

    /// The bytes as a `Vec` again, once the region is deregistered (none
    /// for lent memory, which stayed its owner's).
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            Memory::InPlace(v) => v,
            Memory::Moved(p) => p.as_slice().to_vec(),
            Memory::Lent => Vec::new(),
        }
    }
}

/// Page-aligned memory holding `len` bytes, in whole pages.
#[derive(Debug)]
pub(super) struct Pages {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
}

impl Pages {
    /// A page-aligned copy of `bytes` (not empty).
    fn copy_of(bytes: &[u8], page: usize) -> Result<Pages, VerbsError> {
        let layout = bytes
            .len()
            .checked_next_multiple_of(page)
            .and_then(|size| Layout::from_size_align(size, page).ok())
            .ok_or(VerbsError::Invalid("memory region too large"))?;
        // SAFETY: the layout's size is at least `bytes.len()`, which is not
        // zero.
        let ptr = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        // SAFETY: `ptr` is a fresh allocation of at least `bytes.len()`
        // bytes, so it cannot overlap `bytes`.
        unsafe {
            ptr.as_ptr()
                .copy_from_nonoverlapping(bytes.as_ptr(), bytes.len())
        };
        Ok(Pages {
            ptr,
            layout,
            len: bytes.len(),
        })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the allocation were initialized
        // by `copy_of`, and the allocation lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`; `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated with `layout` by the global allocator
        // and is freed only here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two());
        assert!(page_size() >= 4096);
    }

    #[test]
    fn a_buffer_on_a_page_boundary_stays_where_it_is() {
        // With pages of one byte every buffer starts on a boundary.
        let bytes = vec![7u8; 100];
        let at = bytes.as_ptr();
        let mut memory = Memory::place(bytes, 1).expect("placed");
        assert!(memory.in_place());
        assert_eq!(memory.start().cast_const().cast::<u8>(), at);
        let back = memory.into_vec();
        assert_eq!(back.as_ptr(), at);
        assert_eq!(back, vec![7u8; 100]);
    }

    #[test]
    fn any_other_buffer_moves_to_aligned_memory_and_comes_back() {
        let page = 1 << 16;
        // A buffer aligned by chance is kept aside, so that the next one
        // lies elsewhere.
        let mut aside = Vec::new();
        let bytes = loop {
            let bytes: Vec<u8> = (0..=255).cycle().take(5000).collect();
            if !bytes.as_ptr().addr().is_multiple_of(page) {
                break bytes;
            }
            aside.push(bytes);
        };
        let expected = bytes.clone();
        let mut memory = Memory::place(bytes, page).expect("placed");
        assert!(!memory.in_place());
        assert!(memory.start().addr().is_multiple_of(page));
        assert_eq!(memory.as_slice(), Some(&expected[..]));
        memory.as_mut_slice().expect("its bytes")[4999] = 1;
        let back = memory.into_vec();
        assert_eq!(back.len(), 5000);
        assert_eq!(back[..4999], expected[..4999]);
        assert_eq!(back[4999], 1);
    }

    #[test]
    fn lent_memory_is_registered_at_its_offset_in_its_page() {
        let page = page_size();
        let bytes = vec![0u8; 3 * page];
        let inside = bytes[page + 100..].as_ptr();
        assert_eq!(
            Memory::lent_base(inside, page),
            (inside.addr() % page) as u64
        );
        assert!(Memory::lent_base(inside, page) < page as u64);
        assert_eq!(Memory::Lent.as_slice(), None);
        assert_eq!(Memory::Lent.into_vec(), Vec::<u8>::new());
    }

    #[test]
    fn an_empty_region_is_refused() {
        assert_eq!(
            Memory::place(Vec::new(), page_size()).err(),
            Some(VerbsError::Invalid("an empty memory region"))
        );
    }
}
