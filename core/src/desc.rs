//! Descriptors: what an upper layer hands a BTL to send, after Open MPI's
//! `mca_btl_base_descriptor_t`.
//!
//! A descriptor owns one pool fragment and describes at most two segments:
//!
//! 1. the fragment: *headroom* for the BTL's own packet header, then a
//!    *header reserve* the upper layer fills with its own header, then
//!    payload copied inline;
//! 2. optionally, a range of registered memory referenced in place, so a
//!    large send costs no copy (a stream BTL writes both segments with one
//!    vectored write).
//!
//! Referencing only *registered* memory (lent to the BTL for its lifetime)
//! keeps descriptors free of borrows: a queued descriptor can sit in a BTL's
//! queue without tying up the caller's stack.

use bitflags::bitflags;
use core::fmt;

use crate::btl::memory::MemSlice;
use crate::btl::tag::Tag;
use crate::pool::{ForeignFragment, Fragment, PoolError, PoolsRef};

bitflags! {
    /// How the BTL treats a descriptor after it has been sent.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct DescFlags: u8 {
        /// The BTL frees the descriptor itself once the send completes, so the
        /// upper layer need not keep it.
        const BTL_OWNERSHIP = 1 << 0;
        /// The completion event is delivered even when the send completed at
        /// once, for upper layers that account for every send in one place.
        const ALWAYS_CALLBACK = 1 << 1;
    }
}

/// Ordering channel of a descriptor: descriptors on the same channel to the
/// same peer are delivered in order; [`Order::ANY`] lets the BTL choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Order(pub u8);

impl Order {
    /// No ordering constraint: the BTL picks a channel.
    pub const ANY: Order = Order(0xFF);
}

/// Why a descriptor could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescError {
    /// The fragment pools could not supply a fragment (exhausted, too large).
    Pool(PoolError),
    /// The requested sizes do not fit the descriptor's 32-bit length fields.
    LengthOverflow,
}

impl From<PoolError> for DescError {
    fn from(e: PoolError) -> Self {
        DescError::Pool(e)
    }
}

impl fmt::Display for DescError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescError::Pool(e) => write!(f, "no fragment for the descriptor: {e}"),
            DescError::LengthOverflow => f.write_str("descriptor length does not fit in 32 bits"),
        }
    }
}

impl core::error::Error for DescError {}

/// A send descriptor: one fragment (header reserve + inline payload) and an
/// optional in-place reference to registered memory.
#[must_use = "a descriptor holds a pool fragment; free it or hand it to a BTL"]
#[derive(Debug)]
pub struct Descriptor {
    fragment: Fragment,
    headroom: u16,
    reserve: u32,
    inline_len: u32,
    referenced: Option<MemSlice>,
    order: Order,
    tag: Tag,
    flags: DescFlags,
}

impl Descriptor {
    /// A descriptor with `headroom` bytes for the BTL's packet header,
    /// `reserve` header bytes and `len` payload bytes for the caller to fill,
    /// from the smallest fragment class that holds them all (Open MPI's
    /// `btl_alloc`).
    pub fn alloc(
        pools: PoolsRef<'_>,
        headroom: u16,
        reserve: usize,
        len: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Self, DescError> {
        let (reserve32, len32) = lengths(reserve, len)?;
        let total = usize::from(headroom)
            .checked_add(reserve)
            .and_then(|t| t.checked_add(len))
            .ok_or(DescError::LengthOverflow)?;
        let fragment = pools.alloc(total)?;
        Ok(Descriptor {
            fragment,
            headroom,
            reserve: reserve32,
            inline_len: len32,
            referenced: None,
            order,
            tag: Tag(0),
            flags,
        })
    }

    /// A descriptor that sends `data`, copied into the fragment behind a
    /// `reserve`-byte header (Open MPI's `prepare_src` for data that is not
    /// registered); `data` is free again at once.
    pub fn prepare_src(
        pools: PoolsRef<'_>,
        headroom: u16,
        reserve: usize,
        data: &[u8],
        order: Order,
        flags: DescFlags,
    ) -> Result<Self, DescError> {
        let mut d = Self::alloc(pools, headroom, reserve, data.len(), order, flags)?;
        match d.payload_mut(pools) {
            Ok(payload) => payload.copy_from_slice(data),
            Err(e) => {
                // The fragment came from these pools a moment ago, so it is
                // not foreign and freeing it cannot fail.
                let _ = d.free(pools);
                return Err(e.into());
            }
        }
        Ok(d)
    }

    /// A descriptor that sends a `reserve`-byte header from a fragment, then
    /// the registered memory `data` in place, without copying it.
    pub fn prepare_src_inplace(
        pools: PoolsRef<'_>,
        headroom: u16,
        reserve: usize,
        data: MemSlice,
        order: Order,
        flags: DescFlags,
    ) -> Result<Self, DescError> {
        u32::try_from(data.len).map_err(|_| DescError::LengthOverflow)?;
        let mut d = Self::alloc(pools, headroom, reserve, 0, order, flags)?;
        d.referenced = Some(data);
        Ok(d)
    }

    /// The headroom, for the BTL to write its packet header into.
    pub fn headroom_mut<'a>(&'a mut self, pools: PoolsRef<'a>) -> Result<&'a mut [u8], PoolError> {
        let headroom = usize::from(self.headroom);
        Ok(&mut pools.bytes_mut(&mut self.fragment)?[..headroom])
    }

    /// The header reserve, for the upper layer to write its header into.
    pub fn header_mut<'a>(&'a mut self, pools: PoolsRef<'a>) -> Result<&'a mut [u8], PoolError> {
        let start = usize::from(self.headroom);
        let end = start + self.reserve as usize;
        Ok(&mut pools.bytes_mut(&mut self.fragment)?[start..end])
    }

    /// The inline payload after the reserve (what [`Descriptor::alloc`] asked
    /// for, or the copy `prepare_src` made).
    pub fn payload_mut<'a>(&'a mut self, pools: PoolsRef<'a>) -> Result<&'a mut [u8], PoolError> {
        let (start, end) = self.inline_range();
        Ok(&mut pools.bytes_mut(&mut self.fragment)?[start..end])
    }

    /// The first segment: headroom, header reserve and inline payload.
    pub fn fragment_bytes<'a>(&'a self, pools: PoolsRef<'a>) -> Result<&'a [u8], PoolError> {
        let (_, end) = self.inline_range();
        Ok(&pools.bytes(&self.fragment)?[..end])
    }

    /// The pool fragment of the first segment. No other descriptor lent out
    /// by the same pools has it at the same time, so it tells a descriptor
    /// handed back in a send completion apart without reading its bytes.
    pub fn fragment(&self) -> &Fragment {
        &self.fragment
    }

    /// The second segment: registered memory sent in place, if any.
    pub fn referenced(&self) -> Option<MemSlice> {
        self.referenced
    }

    /// Bytes the descriptor sends: headroom, reserve, inline payload and
    /// referenced payload.
    pub fn len(&self) -> usize {
        let referenced = self.referenced.map_or(0, |r| r.len as usize);
        usize::from(self.headroom) + self.reserve as usize + self.inline_len as usize + referenced
    }

    /// Bytes of headroom kept for the BTL's packet header.
    pub fn headroom(&self) -> usize {
        usize::from(self.headroom)
    }

    /// True when the descriptor sends no byte at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size of the header reserve in front of the payload.
    pub fn reserve(&self) -> usize {
        self.reserve as usize
    }

    /// Ordering channel.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Active-message tag the peer dispatches on.
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// Sets the active-message tag.
    pub fn set_tag(&mut self, tag: Tag) {
        self.tag = tag;
    }

    /// Ownership and callback flags.
    pub fn flags(&self) -> DescFlags {
        self.flags
    }

    /// Replaces the ownership and callback flags.
    pub fn set_flags(&mut self, flags: DescFlags) {
        self.flags = flags;
    }

    /// Returns the descriptor's fragment to `pools`.
    pub fn free(self, pools: PoolsRef<'_>) -> Result<(), ForeignFragment> {
        pools.free(self.fragment)
    }

    fn inline_range(&self) -> (usize, usize) {
        let start = usize::from(self.headroom) + self.reserve as usize;
        (start, start + self.inline_len as usize)
    }
}

fn lengths(reserve: usize, inline: usize) -> Result<(u32, u32), DescError> {
    match (u32::try_from(reserve), u32::try_from(inline)) {
        (Ok(r), Ok(i)) => Ok((r, i)),
        _ => Err(DescError::LengthOverflow),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::btl::{Access, RegSlot, Registrations};
    use crate::pool::{FragmentClass, FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
    use std::vec;

    fn config() -> FragmentPoolsConfig {
        let pool = |fragment_size| FragmentPoolConfig {
            fragment_size,
            num: 2,
            max: 2,
            inc: 1,
        };
        FragmentPoolsConfig {
            small: pool(64),
            eager: pool(256),
            max: pool(1024),
        }
    }

    fn with_pools(test: impl FnOnce(PoolsRef<'_>)) {
        let cfg = config();
        let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
        let pools = FragmentPools::new(&mut region, cfg).expect("pools");
        test(pools.view());
    }

    #[test]
    fn data_is_copied_behind_the_reserve() {
        with_pools(|pools| {
            let data = [7u8; 40];
            let mut d =
                Descriptor::prepare_src(pools, 0, 16, &data, Order::ANY, DescFlags::empty())
                    .expect("descriptor");
            assert_eq!(d.referenced(), None);
            assert_eq!(d.len(), 56);
            d.header_mut(pools).expect("header").fill(0xAA);
            let bytes = d.fragment_bytes(pools).expect("bytes");
            assert_eq!(&bytes[..16], &[0xAA; 16]);
            assert_eq!(&bytes[16..], &data);
            d.free(pools).expect("free");
        });
    }

    #[test]
    fn registered_data_is_referenced_and_the_fragment_holds_only_the_reserve() {
        with_pools(|pools| {
            let mut region = vec![3u8; 4096];
            let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 1]>::inline();
            let Ok(handle) = regs.register(&mut region, Access::empty()) else {
                panic!("a free slot");
            };
            let slice = MemSlice {
                handle,
                offset: 0,
                len: 4096,
            };
            let d =
                Descriptor::prepare_src_inplace(pools, 0, 24, slice, Order(1), DescFlags::empty())
                    .expect("descriptor");
            assert_eq!(d.referenced(), Some(slice));
            assert_eq!(d.len(), 24 + 4096);
            assert_eq!(d.fragment_bytes(pools).expect("bytes").len(), 24);
            assert_eq!(d.fragment.class(), FragmentClass::Small);
            d.free(pools).expect("free");
        });
    }

    #[test]
    fn copying_more_than_the_largest_class_is_refused() {
        with_pools(|pools| {
            let data = vec![0u8; 2000];
            let err = Descriptor::prepare_src(pools, 0, 8, &data, Order::ANY, DescFlags::empty())
                .expect_err("too large");
            assert!(matches!(err, DescError::Pool(PoolError::TooLarge { .. })));
            for class in FragmentClass::ALL {
                assert_eq!(pools.stats(class).in_use, 0);
            }
        });
    }

    #[test]
    fn alloc_picks_the_smallest_class_that_fits() {
        with_pools(|pools| {
            let mut d = Descriptor::alloc(pools, 0, 16, 200, Order::ANY, DescFlags::BTL_OWNERSHIP)
                .expect("descriptor");
            assert_eq!(d.fragment.class(), FragmentClass::Eager);
            assert_eq!(d.payload_mut(pools).expect("payload").len(), 200);
            assert_eq!(d.header_mut(pools).expect("header").len(), 16);
            assert_eq!(d.flags(), DescFlags::BTL_OWNERSHIP);
            d.free(pools).expect("free");
            assert_eq!(pools.stats(FragmentClass::Eager).in_use, 0);
        });
    }

    #[test]
    fn exhaustion_is_an_error_and_free_makes_room() {
        with_pools(|pools| {
            let alloc = || Descriptor::alloc(pools, 0, 0, 1000, Order::ANY, DescFlags::empty());
            let a = alloc().expect("a");
            let b = alloc().expect("b");
            let err = alloc().expect_err("c");
            assert_eq!(
                err,
                DescError::Pool(PoolError::Exhausted {
                    class: FragmentClass::Max
                })
            );
            a.free(pools).expect("free a");
            let c = alloc().expect("c");
            b.free(pools).expect("free b");
            c.free(pools).expect("free c");
        });
    }

    #[test]
    fn tag_order_and_flags_are_kept() {
        with_pools(|pools| {
            let mut d = Descriptor::alloc(pools, 0, 4, 4, Order(3), DescFlags::empty()).expect("d");
            d.set_tag(Tag(200));
            d.set_flags(DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK);
            assert_eq!(d.tag(), Tag(200));
            assert_eq!(d.order(), Order(3));
            assert!(d.flags().contains(DescFlags::ALWAYS_CALLBACK));
            d.free(pools).expect("free");
        });
    }

    #[test]
    fn empty_descriptor_is_empty() {
        with_pools(|pools| {
            let d = Descriptor::prepare_src(pools, 0, 0, &[], Order::ANY, DescFlags::empty())
                .expect("d");
            assert!(d.is_empty());
            d.free(pools).expect("free");
        });
    }
}
