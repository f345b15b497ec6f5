//! Registered memory: the regions a BTL may read and write on behalf of a
//! peer, for `put`, `get` and in-place sends.
//!
//! A region is handed to the BTL (lent for a lifetime, or an owned buffer
//! it gives back at deregistration) and named by a local
//! [`MemHandle`]; peers name it by a [`RemoteKey`] (8 bytes on the wire), an
//! offset and a length, never by an address. Every remote access is checked
//! against the registration: the key must be current (a key of a
//! deregistered region is refused, even if its slot was reused), the range
//! must lie inside the region, and the region must allow that access.

use bitflags::bitflags;
use core::borrow::BorrowMut;
use core::fmt;
use core::marker::PhantomData;

use crate::wire::{DeviceKey, KeyRegion};

bitflags! {
    /// What peers may do with a registered region. What this process does
    /// with its own regions needs no flag: the source of its `put` or
    /// in-place send, the destination of its `get`, are checked against
    /// the region's bounds only. A region only this process uses is
    /// registered with `Access::empty()`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Access: u8 {
        /// Peers may read it: a peer's `get` from it (for itself or for a
        /// third process).
        const REMOTE_READ = 1 << 0;
        /// Peers may write it: a peer's `put` or `put_notify` into it, or
        /// the data of a get a peer asked on this region's behalf.
        const REMOTE_WRITE = 1 << 1;
    }
}

/// A registered region, as its owner names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemHandle {
    index: u16,
    generation: u32,
}

impl MemHandle {
    /// The key that names this region to peers.
    pub fn remote_key(self) -> RemoteKey {
        RemoteKey(u64::from(self.generation) << 16 | u64::from(self.index))
    }

    /// `len` bytes of the region from `offset`, as put, get and in-place
    /// sends name them (checked against the region when used).
    pub const fn slice(self, offset: u64, len: u64) -> MemSlice {
        MemSlice {
            handle: self,
            offset,
            len,
        }
    }
}

/// A registered region as peers name it: generation and slot, 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteKey(pub u64);

impl RemoteKey {
    /// Bytes a key takes in a message to a peer.
    pub const LEN: usize = 8;

    /// The key as a message carries it to the peers that will name the
    /// region ([`from_bytes`](Self::from_bytes) reads it back).
    pub const fn to_bytes(self) -> [u8; Self::LEN] {
        self.0.to_le_bytes()
    }

    /// A key a peer sent with [`to_bytes`](Self::to_bytes); `None` unless
    /// `bytes` is exactly [`LEN`](Self::LEN) long.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(RemoteKey(u64::from_le_bytes(bytes.try_into().ok()?)))
    }

    /// `len` bytes of the peer's region from `offset` (checked by the peer
    /// when used).
    pub const fn slice(self, offset: u64, len: u64) -> RemoteSlice {
        RemoteSlice {
            key: self,
            offset,
            len,
        }
    }

    pub(crate) fn handle(self) -> Option<MemHandle> {
        let generation = u32::try_from(self.0 >> 16).ok()?;
        Some(MemHandle {
            index: (self.0 & 0xFFFF) as u16,
            generation,
        })
    }
}

/// A byte range of a local registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemSlice {
    /// The region.
    pub handle: MemHandle,
    /// First byte, from the start of the region.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

/// A byte range of a peer's registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteSlice {
    /// The peer's key for the region.
    pub key: RemoteKey,
    /// First byte, from the start of the region.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

/// One side of a copy within a table: named by its owner, or by a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Named by the local process: no access check beyond bounds.
    Local(MemSlice),
    /// Named by a peer: the registration must allow the access.
    Remote(RemoteSlice),
}

/// Why a registration or an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// Every registration slot is in use.
    Full,
    /// No current registration has this handle or key.
    UnknownRegion,
    /// The range does not lie inside the region.
    OutOfBounds {
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Size of the region.
        size: u64,
    },
    /// The region does not allow this access.
    AccessDenied,
    /// The region cannot be deregistered: an operation in flight still
    /// reads or writes it.
    InUse,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::Full => f.write_str("no free registration slot"),
            MemError::UnknownRegion => f.write_str("no such registered region"),
            MemError::OutOfBounds { offset, len, size } => write!(
                f,
                "{len} bytes at offset {offset} do not fit a region of {size} bytes"
            ),
            MemError::AccessDenied => f.write_str("the region does not allow this access"),
            MemError::InUse => f.write_str("the region is in use by an operation in flight"),
        }
    }
}

impl core::error::Error for MemError {}

/// One registration: the region while it is registered, what peers may do
/// with it, and the generation its handles carry.
#[derive(Debug)]
pub struct RegSlot<M> {
    region: Option<M>,
    access: Access,
    generation: u32,
    /// How a device that moves bytes itself reaches the region, once the
    /// driver has registered it there.
    device: Option<DeviceKey>,
}

impl<M> RegSlot<M> {
    /// A slot never used.
    pub const EMPTY: Self = RegSlot {
        region: None,
        access: Access::empty(),
        generation: 0,
        device: None,
    };
}

impl<M> Default for RegSlot<M> {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// A registration refused: why, and the region back, still the caller's.
#[derive(Debug)]
pub struct Refused<M> {
    /// Why the region was not registered.
    pub error: MemError,
    /// The region, handed back.
    pub region: M,
}

/// A table of registered regions in slots the caller provides (`C`: an
/// array, a lent slice, a box), each region held as `M` (`&mut [u8]`, or an
/// owned buffer the table keeps until deregistration hands it back).
#[derive(Debug)]
pub struct Registrations<M, C> {
    slots: C,
    _memory: PhantomData<M>,
}

impl<M, const N: usize> Registrations<M, [RegSlot<M>; N]> {
    /// An empty table of `N` slots held inline.
    pub const fn inline() -> Self {
        Registrations {
            slots: [const { RegSlot::EMPTY }; N],
            _memory: PhantomData,
        }
    }
}

impl<M, const N: usize> Default for Registrations<M, [RegSlot<M>; N]> {
    fn default() -> Self {
        Self::inline()
    }
}

impl<M: AsRef<[u8]> + AsMut<[u8]>, C: BorrowMut<[RegSlot<M>]>> Registrations<M, C> {
    /// A table over `slots`, which must be empty; at most 65536 of them are
    /// used (the handle's slot index is 16 bits).
    pub fn new(slots: C) -> Self {
        Registrations {
            slots,
            _memory: PhantomData,
        }
    }

    fn slots(&self) -> &[RegSlot<M>] {
        let slots = self.slots.borrow();
        &slots[..slots.len().min(1 << 16)]
    }

    fn slots_mut(&mut self) -> &mut [RegSlot<M>] {
        let slots = self.slots.borrow_mut();
        let n = slots.len().min(1 << 16);
        &mut slots[..n]
    }

    /// Slots in all, registered or free.
    pub fn capacity(&self) -> usize {
        self.slots().len()
    }

    /// Regions registered now.
    pub fn len(&self) -> usize {
        self.slots().iter().filter(|s| s.region.is_some()).count()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lends `region` to the table with the given peer access; when every
    /// slot is taken, the region comes back with [`MemError::Full`].
    pub fn register(&mut self, region: M, access: Access) -> Result<MemHandle, Refused<M>> {
        let Some((index, slot)) = self
            .slots_mut()
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.region.is_none())
        else {
            return Err(Refused {
                error: MemError::Full,
                region,
            });
        };
        // Generations start at 1, so no key is ever 0, and never repeat for
        // a slot until 2^32 registrations of it: a stale key stays refused.
        slot.generation = slot.generation.wrapping_add(1).max(1);
        slot.region = Some(region);
        slot.access = access;
        slot.device = None;
        Ok(MemHandle {
            index: index as u16,
            generation: slot.generation,
        })
    }

    /// The local range a peer's slice names, after every check (key
    /// current, access `need` allowed, range inside): where a peer's put
    /// lands or what its get reads.
    pub fn check_remote(&self, s: RemoteSlice, need: Access) -> Result<MemSlice, MemError> {
        let (_, r) = self.resolve(Side::Remote(s), need)?;
        let handle = s.key.handle().ok_or(MemError::UnknownRegion)?;
        Ok(MemSlice {
            handle,
            offset: r.start as u64,
            len: r.len() as u64,
        })
    }

    /// Ends a registration and gives the region back.
    pub fn deregister(&mut self, handle: MemHandle) -> Result<M, MemError> {
        let slot = self.slot_mut(handle)?;
        slot.access = Access::empty();
        slot.device = None;
        slot.region.take().ok_or(MemError::UnknownRegion)
    }

    /// Records how the driver's device reaches registration `handle`
    /// (`None`: it does not), for the peers that ask
    /// ([`describe`](Self::describe)) and for this side's transfers.
    pub fn set_device(
        &mut self,
        handle: MemHandle,
        device: Option<DeviceKey>,
    ) -> Result<(), MemError> {
        self.slot_mut(handle)?.device = device;
        Ok(())
    }

    /// How the driver's device reaches registration `handle`, if it does.
    pub fn device(&self, handle: MemHandle) -> Option<DeviceKey> {
        self.slot(handle).ok()?.device
    }

    /// What `key` names, as a peer that asks is told (KEY_INFO): the
    /// region's length, access and device key; `UnknownRegion` for a key
    /// that is not current.
    pub fn describe(&self, key: RemoteKey) -> Result<KeyRegion, MemError> {
        let slot = self.slot(key.handle().ok_or(MemError::UnknownRegion)?)?;
        Ok(KeyRegion {
            len: slot.region.as_ref().map_or(0, |r| r.as_ref().len()) as u64,
            access: slot.access.bits(),
            device: slot.device,
        })
    }

    /// The whole region of a local handle.
    pub fn region(&self, handle: MemHandle) -> Result<&[u8], MemError> {
        self.slot(handle)?
            .region
            .as_ref()
            .map(AsRef::as_ref)
            .ok_or(MemError::UnknownRegion)
    }

    /// The whole region of a local handle, writable.
    pub fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], MemError> {
        self.slot_mut(handle)?
            .region
            .as_mut()
            .map(AsMut::as_mut)
            .ok_or(MemError::UnknownRegion)
    }

    /// The bytes of a local slice, bounds-checked.
    pub fn slice(&self, s: MemSlice) -> Result<&[u8], MemError> {
        within(self.region(s.handle)?, s.offset, s.len)
    }

    /// The bytes of a local slice, writable, bounds-checked.
    pub fn slice_mut(&mut self, s: MemSlice) -> Result<&mut [u8], MemError> {
        within_mut(self.region_mut(s.handle)?, s.offset, s.len)
    }

    /// The bytes a peer asks to read: key current, range inside, read allowed.
    pub fn remote_read(&self, s: RemoteSlice) -> Result<&[u8], MemError> {
        let handle = s.key.handle().ok_or(MemError::UnknownRegion)?;
        let slot = self.slot(handle)?;
        check_access(slot, Access::REMOTE_READ)?;
        within(
            slot.region
                .as_ref()
                .map(AsRef::as_ref)
                .ok_or(MemError::UnknownRegion)?,
            s.offset,
            s.len,
        )
    }

    /// The bytes a peer asks to write: key current, range inside, write allowed.
    pub fn remote_write(&mut self, s: RemoteSlice) -> Result<&mut [u8], MemError> {
        let handle = s.key.handle().ok_or(MemError::UnknownRegion)?;
        let slot = self.slot_mut(handle)?;
        check_access(slot, Access::REMOTE_WRITE)?;
        within_mut(
            slot.region
                .as_mut()
                .map(AsMut::as_mut)
                .ok_or(MemError::UnknownRegion)?,
            s.offset,
            s.len,
        )
    }

    /// Copies `src` to `dst` within this table, what a put or get between
    /// two regions of one process does. A [`Side::Remote`] source needs
    /// read access and a remote destination write access; local sides are
    /// their owner's and need none. The lengths must match; nothing is
    /// written when any check fails.
    pub fn copy(&mut self, src: Side, dst: Side) -> Result<(), MemError> {
        let (si, src_range) = self.resolve(src, Access::REMOTE_READ)?;
        let (di, dst_range) = self.resolve(dst, Access::REMOTE_WRITE)?;
        if src_range.len() != dst_range.len() {
            return Err(MemError::OutOfBounds {
                offset: dst_range.start as u64,
                len: src_range.len() as u64,
                size: dst_range.len() as u64,
            });
        }
        let slots = self.slots_mut();
        if si == di {
            let region = slots[si]
                .region
                .as_mut()
                .map(AsMut::as_mut)
                .ok_or(MemError::UnknownRegion)?;
            region.copy_within(src_range, dst_range.start);
            return Ok(());
        }
        let (low, high) = slots.split_at_mut(si.max(di));
        let (a, b) = (&mut low[si.min(di)], &mut high[0]);
        let (src_slot, dst_slot) = if si < di { (a, b) } else { (b, a) };
        let from = src_slot
            .region
            .as_ref()
            .map(AsRef::as_ref)
            .ok_or(MemError::UnknownRegion)?;
        let to = dst_slot
            .region
            .as_mut()
            .map(AsMut::as_mut)
            .ok_or(MemError::UnknownRegion)?;
        to[dst_range].copy_from_slice(&from[src_range]);
        Ok(())
    }

    /// The slot and byte range a side names, after every check.
    fn resolve(
        &self,
        side: Side,
        remote_access: Access,
    ) -> Result<(usize, core::ops::Range<usize>), MemError> {
        let (handle, offset, len, need) = match side {
            Side::Local(s) => (s.handle, s.offset, s.len, Access::empty()),
            Side::Remote(s) => (
                s.key.handle().ok_or(MemError::UnknownRegion)?,
                s.offset,
                s.len,
                remote_access,
            ),
        };
        let slot = self.slot(handle)?;
        check_access(slot, need)?;
        let size = slot.region.as_ref().map_or(0, |r| r.as_ref().len());
        Ok((usize::from(handle.index), range(size, offset, len)?))
    }

    fn slot(&self, h: MemHandle) -> Result<&RegSlot<M>, MemError> {
        self.slots()
            .get(usize::from(h.index))
            .filter(|s| s.region.is_some() && s.generation == h.generation)
            .ok_or(MemError::UnknownRegion)
    }

    fn slot_mut(&mut self, h: MemHandle) -> Result<&mut RegSlot<M>, MemError> {
        self.slots_mut()
            .get_mut(usize::from(h.index))
            .filter(|s| s.region.is_some() && s.generation == h.generation)
            .ok_or(MemError::UnknownRegion)
    }
}

/// The checks of a peer's registration for `s` with access `need`, made
/// against what the peer said of it ([`Registrations::describe`]) in the
/// order the peer makes them: access, then range.
pub fn check_described(region: &KeyRegion, s: RemoteSlice, need: Access) -> Result<(), MemError> {
    if !Access::from_bits_truncate(region.access).contains(need) {
        return Err(MemError::AccessDenied);
    }
    let size = usize::try_from(region.len).unwrap_or(usize::MAX);
    range(size, s.offset, s.len).map(|_| ())
}

fn check_access<M>(slot: &RegSlot<M>, need: Access) -> Result<(), MemError> {
    if slot.access.contains(need) {
        Ok(())
    } else {
        Err(MemError::AccessDenied)
    }
}

fn range(size: usize, offset: u64, len: u64) -> Result<core::ops::Range<usize>, MemError> {
    let err = MemError::OutOfBounds {
        offset,
        len,
        size: size as u64,
    };
    let end = offset.checked_add(len).ok_or(err)?;
    if end > size as u64 {
        return Err(err);
    }
    // Both fit in usize: they are at most `size`.
    Ok(offset as usize..end as usize)
}

fn within(region: &[u8], offset: u64, len: u64) -> Result<&[u8], MemError> {
    Ok(&region[range(region.len(), offset, len)?])
}

fn within_mut(region: &mut [u8], offset: u64, len: u64) -> Result<&mut [u8], MemError> {
    let r = range(region.len(), offset, len)?;
    Ok(&mut region[r])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(h: MemHandle, offset: u64, len: u64) -> RemoteSlice {
        h.remote_key().slice(offset, len)
    }

    #[test]
    fn keys_go_to_peers_as_eight_bytes_and_come_back() {
        let mut a = [0u8; 4];
        let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 2]>::inline();
        let h = regs.register(&mut a, Access::REMOTE_WRITE).expect("room");
        let key = h.remote_key();
        let shipped = key.to_bytes();
        assert_eq!(RemoteKey::from_bytes(&shipped), Some(key));
        assert_eq!(RemoteKey::from_bytes(&shipped[..7]), None, "too short");
        assert_eq!(RemoteKey::from_bytes(&[0; 9]), None, "too long");
        assert_eq!(
            key.slice(1, 2),
            RemoteSlice {
                key,
                offset: 1,
                len: 2
            }
        );
        assert_eq!(
            h.slice(1, 3),
            MemSlice {
                handle: h,
                offset: 1,
                len: 3
            }
        );
        assert_eq!(
            regs.remote_write(key.slice(1, 3)).expect("in bounds").len(),
            3
        );
    }

    #[test]
    fn remote_access_is_checked_against_the_registration() {
        let mut a = [1u8; 16];
        let mut b = [0u8; 16];
        let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 4]>::inline();
        let ra = regs.register(&mut a, Access::REMOTE_READ).expect("a");
        let rb = regs.register(&mut b, Access::REMOTE_WRITE).expect("b");

        assert_eq!(regs.remote_read(rs(ra, 0, 16)).expect("read").len(), 16);
        assert_eq!(regs.remote_read(rs(rb, 0, 1)), Err(MemError::AccessDenied));
        assert_eq!(
            regs.remote_write(rs(ra, 0, 1)).err(),
            Some(MemError::AccessDenied)
        );
        assert_eq!(
            regs.remote_read(rs(ra, 10, 7)),
            Err(MemError::OutOfBounds {
                offset: 10,
                len: 7,
                size: 16
            })
        );
        assert!(matches!(
            regs.remote_read(rs(ra, u64::MAX, 2)),
            Err(MemError::OutOfBounds { .. })
        ));
        assert_eq!(
            regs.remote_read(RemoteSlice {
                key: RemoteKey(u64::MAX),
                offset: 0,
                len: 0
            }),
            Err(MemError::UnknownRegion)
        );
    }

    #[test]
    fn copy_between_regions_and_within_one() {
        let mut a = *b"abcdefgh";
        let mut b = [0u8; 8];
        let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 2]>::inline();
        let ra = regs.register(&mut a, Access::all()).expect("a");
        let rb = regs.register(&mut b, Access::REMOTE_WRITE).expect("b");
        let r = |h, o, l| Side::Remote(rs(h, o, l));
        regs.copy(r(ra, 2, 4), r(rb, 0, 4)).expect("copy");
        assert_eq!(&regs.region(rb).expect("b")[..4], b"cdef");
        regs.copy(r(ra, 0, 4), r(ra, 4, 4)).expect("within");
        assert_eq!(regs.region(ra).expect("a"), b"abcdabcd");
        // A refused copy writes nothing.
        assert_eq!(
            regs.copy(r(rb, 0, 4), r(ra, 0, 4)),
            Err(MemError::AccessDenied)
        );
        assert!(matches!(
            regs.copy(r(ra, 0, 4), r(rb, 6, 4)),
            Err(MemError::OutOfBounds { .. })
        ));
        assert_eq!(&regs.region(rb).expect("b")[4..], &[0; 4]);
        // The owner's own side needs no access: b is write-only to peers.
        let local = Side::Local(MemSlice {
            handle: rb,
            offset: 0,
            len: 4,
        });
        regs.copy(local, r(ra, 0, 4)).expect("local source");
        assert_eq!(&regs.region(ra).expect("a")[..4], b"cdef");
    }

    #[test]
    fn stale_keys_are_refused_after_the_slot_is_reused() {
        let mut a = [0u8; 4];
        let mut b = [0u8; 4];
        let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 1]>::inline();
        let ha = regs.register(&mut a, Access::all()).expect("a");
        let mut spare = [0u8; 1];
        let refused = regs
            .register(&mut spare, Access::all())
            .expect_err("no free slot");
        assert_eq!((refused.error, refused.region.len()), (MemError::Full, 1));
        let back = regs.deregister(ha).expect("dereg");
        assert_eq!(back.len(), 4);
        let hb = regs.register(&mut b, Access::all()).expect("b");
        assert_ne!(ha.remote_key(), hb.remote_key());
        assert_eq!(regs.remote_read(rs(ha, 0, 1)), Err(MemError::UnknownRegion));
        assert_eq!(regs.region(ha), Err(MemError::UnknownRegion));
        assert!(regs.remote_read(rs(hb, 0, 1)).is_ok());
    }

    #[test]
    fn local_slices_are_bounds_checked() {
        let mut a = [5u8; 8];
        let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 1]>::inline();
        let h = regs.register(&mut a, Access::empty()).expect("a");
        let s = MemSlice {
            handle: h,
            offset: 4,
            len: 4,
        };
        regs.slice_mut(s).expect("slice").fill(9);
        assert_eq!(regs.slice(s).expect("slice"), &[9; 4]);
        assert!(
            regs.slice(MemSlice {
                handle: h,
                offset: 5,
                len: 4
            })
            .is_err()
        );
    }

    proptest::proptest! {
        #[test]
        fn any_remote_slice_is_refused_or_in_bounds(key in proptest::num::u64::ANY, offset in proptest::num::u64::ANY, len in 0u64..64) {
            let mut a = [0u8; 32];
            let mut regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 2]>::inline();
            let h = regs.register(&mut a, Access::all()).expect("a");
            for key in [RemoteKey(key), h.remote_key()] {
                let s = RemoteSlice { key, offset, len };
                if let Ok(bytes) = regs.remote_read(s) {
                    proptest::prop_assert_eq!(bytes.len() as u64, len);
                    proptest::prop_assert!(offset + len <= 32);
                }
            }
        }
    }
}
