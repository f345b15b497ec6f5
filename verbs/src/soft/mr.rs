//! A device's memory regions and their keys.
//!
//! A key is a slot and that slot's generation (its low byte), as real
//! HCAs build theirs from an index and an 8-bit variant: a region's keys
//! die with it, and the next region in the slot gets other ones. The local
//! and the remote key of a region are the same number.
//!
//! A region's bytes are the device's (handed to it) or their owner's (lent
//! in place). Lent bytes are reached only through their owner, while it
//! serves the device ([`LentMemory`]): the byte operations here take the
//! owner's memory when the caller has it, and say when they needed it
//! and did not have it.

use crate::provider::{Access, LentMemory, Lkey, Pd, Rkey, Sge, VerbsError};

use super::ContextId;

/// One registered region.
#[derive(Debug)]
pub(crate) struct Region {
    pub(crate) ctx: ContextId,
    pub(crate) pd: Pd,
    pub(crate) access: Access,
    pub(crate) memory: Memory,
}

/// Where a region's bytes are.
#[derive(Debug)]
pub(crate) enum Memory {
    /// Handed to the device: here.
    Owned(Vec<u8>),
    /// Lent in place by their owner, who calls them `id`.
    Lent { id: u64, len: u64 },
}

impl Memory {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Memory::Owned(bytes) => bytes.len() as u64,
            Memory::Lent { len, .. } => *len,
        }
    }

    /// Bytes `at` of the region, through `lender` if they are lent;
    /// `None` if they are lent and the lender does not give them.
    fn slice_mut<'a>(
        &'a mut self,
        at: std::ops::Range<usize>,
        lender: Option<&'a mut (dyn LentMemory + '_)>,
    ) -> Option<&'a mut [u8]> {
        match self {
            Memory::Owned(bytes) => bytes.get_mut(at),
            Memory::Lent { id, .. } => lender?.bytes(*id)?.get_mut(at),
        }
    }
}

/// The owner whose lent memory an operation needs.
pub(crate) type Owner = ContextId;

#[derive(Debug, Default)]
struct Slot {
    generation: u8,
    region: Option<Region>,
}

/// Why a region refused an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No live region has the key, or it is in another protection domain.
    Key,
    /// The range is not inside the region.
    Bounds,
    /// The region does not allow the access.
    Access,
}

/// The regions of one device.
#[derive(Debug, Default)]
pub(crate) struct Regions {
    slots: Vec<Slot>,
}

const fn key(slot: usize, generation: u8) -> u32 {
    ((slot as u32) << 8) | generation as u32
}

impl Regions {
    /// Registers `bytes`; its key.
    pub(crate) fn register(&mut self, region: Region, max: usize) -> Result<u32, VerbsError> {
        let slot = match self.slots.iter().position(|s| s.region.is_none()) {
            Some(i) => i,
            None if self.slots.len() < max => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
            None => return Err(VerbsError::Exhausted("memory regions")),
        };
        let s = &mut self.slots[slot];
        s.region = Some(region);
        Ok(key(slot, s.generation))
    }

    /// Deregisters the region of `key`: its memory, its key dead.
    pub(crate) fn deregister(&mut self, key: u32, ctx: ContextId) -> Result<Vec<u8>, VerbsError> {
        let s = self
            .slot_mut(key)
            .filter(|s| s.region.as_ref().is_some_and(|r| r.ctx == ctx))
            .ok_or(VerbsError::Unknown("memory region"))?;
        let region = s
            .region
            .take()
            .ok_or(VerbsError::Unknown("memory region"))?;
        s.generation = s.generation.wrapping_add(1);
        Ok(match region.memory {
            Memory::Owned(bytes) => bytes,
            Memory::Lent { .. } => Vec::new(),
        })
    }

    fn slot_mut(&mut self, key: u32) -> Option<&mut Slot> {
        let slot = self.slots.get_mut((key >> 8) as usize)?;
        (slot.generation == key as u8).then_some(slot)
    }

    /// The live region of `key`.
    pub(crate) fn get(&self, key: u32) -> Option<&Region> {
        let slot = self.slots.get((key >> 8) as usize)?;
        if slot.generation != key as u8 {
            return None;
        }
        slot.region.as_ref()
    }

    /// The live region of `key`, to change it.
    pub(crate) fn get_mut(&mut self, key: u32) -> Option<&mut Region> {
        self.slot_mut(key)?.region.as_mut()
    }

    /// Whether `ctx` holds any region in `pd`.
    pub(crate) fn uses_pd(&self, ctx: ContextId, pd: Pd) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.region.as_ref())
            .any(|r| r.ctx == ctx && r.pd == pd)
    }

    /// Deregisters every region of `ctx`.
    pub(crate) fn drop_context(&mut self, ctx: ContextId) {
        for s in &mut self.slots {
            if s.region.as_ref().is_some_and(|r| r.ctx == ctx) {
                s.region = None;
                s.generation = s.generation.wrapping_add(1);
            }
        }
    }

    /// Checks that `len` bytes from `offset` of the region of `key`, in
    /// `pd`, allow `need`.
    pub(crate) fn check(
        &self,
        key: u32,
        pd: Pd,
        offset: u64,
        len: u64,
        need: Access,
    ) -> Result<(), Refused> {
        let r = self.get(key).filter(|r| r.pd == pd).ok_or(Refused::Key)?;
        let end = offset.checked_add(len).ok_or(Refused::Bounds)?;
        if end > r.memory.len() {
            return Err(Refused::Bounds);
        }
        if !r.access.contains(need) {
            return Err(Refused::Access);
        }
        Ok(())
    }

    /// Checks a scatter/gather list against `pd` and `need`.
    pub(crate) fn check_list(&self, sg: &[Sge], pd: Pd, need: Access) -> Result<(), Refused> {
        sg.iter()
            .try_for_each(|s| self.check(s.lkey.0, pd, s.offset, u64::from(s.len), need))
    }

    /// The owner of the lent memory a checked scatter/gather list names,
    /// if it names any (a list's regions share a domain, so one owner).
    pub(crate) fn lent_owner(&self, sg: &[Sge]) -> Option<Owner> {
        sg.iter().find_map(|s| self.lent_owner_of(s.lkey.0))
    }

    /// The owner of region `key`, if its memory is lent.
    pub(crate) fn lent_owner_of(&self, key: u32) -> Option<Owner> {
        self.get(key)
            .filter(|r| matches!(r.memory, Memory::Lent { .. }))
            .map(|r| r.ctx)
    }

    /// Appends the bytes a checked scatter/gather list names to `out`,
    /// lent ones through `lender`; `false` if some were out of reach.
    pub(crate) fn gather(
        &mut self,
        sg: &[Sge],
        mut lender: Option<&mut dyn LentMemory>,
        out: &mut Vec<u8>,
    ) -> bool {
        for s in sg {
            let start = s.offset as usize;
            let at = start..start + s.len as usize;
            let bytes = self
                .get_mut(s.lkey.0)
                .and_then(|r| r.memory.slice_mut(at, lender.as_deref_mut()));
            let Some(bytes) = bytes else {
                return false;
            };
            out.extend_from_slice(bytes);
        }
        true
    }

    /// Spreads `data` over a checked scatter/gather list, in order, as far
    /// as it reaches, lent bytes through `lender`; `false` if some were
    /// out of reach.
    pub(crate) fn scatter(
        &mut self,
        sg: &[Sge],
        mut lender: Option<&mut dyn LentMemory>,
        mut data: &[u8],
    ) -> bool {
        for s in sg {
            if data.is_empty() {
                break;
            }
            let n = data.len().min(s.len as usize);
            let start = s.offset as usize;
            let bytes = self
                .get_mut(s.lkey.0)
                .and_then(|r| r.memory.slice_mut(start..start + n, lender.as_deref_mut()));
            let Some(bytes) = bytes else {
                return false;
            };
            bytes.copy_from_slice(&data[..n]);
            data = &data[n..];
        }
        true
    }

    /// Appends `len` bytes from `offset` of a checked region to `out`;
    /// `false` if they were out of reach.
    pub(crate) fn read(
        &mut self,
        key: u32,
        offset: u64,
        len: usize,
        lender: Option<&mut dyn LentMemory>,
        out: &mut Vec<u8>,
    ) -> bool {
        let start = offset as usize;
        let Some(bytes) = self
            .get_mut(key)
            .and_then(|r| r.memory.slice_mut(start..start + len, lender))
        else {
            return false;
        };
        out.extend_from_slice(bytes);
        true
    }

    /// Writes `data` at `offset` of a checked region; `false` if it was
    /// out of reach.
    pub(crate) fn write(
        &mut self,
        key: u32,
        offset: u64,
        lender: Option<&mut dyn LentMemory>,
        data: &[u8],
    ) -> bool {
        let start = offset as usize;
        let Some(bytes) = self
            .get_mut(key)
            .and_then(|r| r.memory.slice_mut(start..start + data.len(), lender))
        else {
            return false;
        };
        bytes.copy_from_slice(data);
        true
    }

    /// The bytes of a region handed to the device; `None` for lent ones,
    /// which are their owner's.
    pub(crate) fn owned(&self, key: u32) -> Option<&[u8]> {
        match &self.get(key)?.memory {
            Memory::Owned(bytes) => Some(bytes),
            Memory::Lent { .. } => None,
        }
    }

    /// As [`owned`](Self::owned), to change them.
    pub(crate) fn owned_mut(&mut self, key: u32) -> Option<&mut [u8]> {
        match &mut self.get_mut(key)?.memory {
            Memory::Owned(bytes) => Some(bytes),
            Memory::Lent { .. } => None,
        }
    }
}

/// The keys of a region registered with key `key`.
pub(crate) const fn keys(key: u32) -> (Lkey, Rkey) {
    (Lkey(key), Rkey(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: ContextId = ContextId(1);

    fn region(len: usize, access: Access) -> Region {
        Region {
            ctx: CTX,
            pd: Pd(1),
            access,
            memory: Memory::Owned(vec![0; len]),
        }
    }

    #[test]
    fn a_dead_key_stays_dead_when_its_slot_is_reused() {
        let mut regions = Regions::default();
        let old = regions
            .register(region(64, Access::REMOTE_WRITE), 8)
            .expect("room for it");
        assert!(
            regions
                .check(old, Pd(1), 0, 64, Access::REMOTE_WRITE)
                .is_ok()
        );
        assert_eq!(
            regions.deregister(old, CTX).expect("deregistered").len(),
            64
        );
        let new = regions
            .register(region(64, Access::REMOTE_WRITE), 8)
            .expect("room for it");
        assert_ne!(old, new, "the slot is reused, the key is not");
        assert_eq!(
            regions.check(old, Pd(1), 0, 8, Access::REMOTE_WRITE),
            Err(Refused::Key)
        );
        assert!(
            regions
                .check(new, Pd(1), 0, 8, Access::REMOTE_WRITE)
                .is_ok()
        );
    }

    #[test]
    fn keys_bounds_domains_and_access_are_checked() {
        let mut regions = Regions::default();
        let k = regions
            .register(region(100, Access::REMOTE_READ), 8)
            .expect("room for it");
        assert_eq!(
            regions.check(k, Pd(2), 0, 1, Access::REMOTE_READ),
            Err(Refused::Key)
        );
        assert_eq!(
            regions.check(k, Pd(1), 90, 11, Access::REMOTE_READ),
            Err(Refused::Bounds)
        );
        assert_eq!(
            regions.check(k, Pd(1), u64::MAX, 2, Access::REMOTE_READ),
            Err(Refused::Bounds)
        );
        assert_eq!(
            regions.check(k, Pd(1), 0, 1, Access::REMOTE_WRITE),
            Err(Refused::Access)
        );
        assert!(regions.check(k, Pd(1), 90, 10, Access::REMOTE_READ).is_ok());
        assert_eq!(
            regions.deregister(k, ContextId(2)),
            Err(VerbsError::Unknown("memory region")),
            "another context cannot deregister it"
        );
    }

    #[test]
    fn gather_and_scatter_follow_the_list_in_order() {
        let mut regions = Regions::default();
        let a = regions
            .register(region(8, Access::LOCAL_WRITE), 8)
            .expect("room for it");
        let b = regions
            .register(region(8, Access::LOCAL_WRITE), 8)
            .expect("room for it");
        let sg = [
            Sge {
                lkey: Lkey(a),
                offset: 6,
                len: 2,
            },
            Sge {
                lkey: Lkey(b),
                offset: 0,
                len: 4,
            },
        ];
        assert!(regions.scatter(&sg, None, b"abcde"));
        let mut out = Vec::new();
        assert!(regions.gather(&sg, None, &mut out));
        assert_eq!(out, b"abcde\0");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut regions = Regions::default();
        regions
            .register(region(1, Access::empty()), 1)
            .expect("room for it");
        assert_eq!(
            regions.register(region(1, Access::empty()), 1),
            Err(VerbsError::Exhausted("memory regions"))
        );
    }
}
