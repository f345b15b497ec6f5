//! Processes and endpoints: who a BTL talks to.
//!
//! A process is named by its job and rank ([`ProcName`]). A BTL that can
//! reach a process gives it an [`EndpointId`], a slot of the BTL's
//! [`EndpointTable`] and that slot's generation; an endpoint is
//! reference-counted, as in Motr, because several upper layers may add the
//! same process and only the last `del_procs` may forget it. [`Reachability`] is the bitmap `add_procs`
//! fills in: bit `i` set means `procs[i]` is reachable through this BTL.

use core::borrow::BorrowMut;
use core::fmt;

use crate::table::{Entry, Key, Table};

/// A process: the job it belongs to and its rank in that job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcName {
    /// Job identifier, shared by every process of the job.
    pub job: u64,
    /// Rank of the process in its job.
    pub rank: u32,
}

impl ProcName {
    /// The job of the names a process gives the peers it reaches by
    /// address alone, until their handshake tells their own. No process
    /// may announce a name of this job: a handshake that does is refused.
    pub const UNNAMED_JOB: u64 = u64::MAX;

    /// The process `rank` of `job`.
    pub const fn new(job: u64, rank: u32) -> Self {
        ProcName { job, rank }
    }

    /// The `n`th name this process gives a peer it reaches by address
    /// alone ([`UNNAMED_JOB`](Self::UNNAMED_JOB)).
    pub const fn unnamed(n: u32) -> Self {
        ProcName::new(Self::UNNAMED_JOB, n)
    }

    /// Whether this is a stand-in for a peer reached by address, whose
    /// own name is not known yet.
    pub const fn is_unnamed(&self) -> bool {
        self.job == Self::UNNAMED_JOB
    }
}

impl fmt::Display for ProcName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.job, self.rank)
    }
}

/// Handle of a reachable process inside one BTL.
///
/// Opaque to the upper layer: a BTL may pack more than a table index into
/// it. The engine puts a slot's generation in the high 16 bits, so that a
/// handle kept after the BTL forgot its peer (a client that left a server)
/// never names the newer peer that took the slot; such a handle is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId(pub u32);

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "endpoint {}", self.0)
    }
}

/// Why an endpoint could not be added or found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointError {
    /// The table is full: more distinct processes than its capacity.
    Full,
    /// No endpoint has this id (never added, or deleted).
    Unknown(EndpointId),
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Full => f.write_str("endpoint table is full"),
            EndpointError::Unknown(id) => write!(f, "no {id}"),
        }
    }
}

impl core::error::Error for EndpointError {}

/// A process a BTL knows, and what it keeps about it.
#[derive(Debug)]
pub struct Known<T> {
    proc: ProcName,
    /// How many times the upper layers added the process; 0 for one that
    /// came to this process on its own (a client of a server).
    refs: u32,
    value: T,
}

/// One slot of an [`EndpointTable`].
pub type EndpointSlot<T> = Entry<Known<T>>;

/// The processes a BTL knows, each with a reference count and a `T` (what
/// the BTL keeps about it), in slots the caller provides (`E`: one
/// [`EndpointSlot`] each; `O`: one `u16` each, see [`Table`]).
///
/// An [`EndpointId`] carries its slot's generation: once a process is
/// removed, its id names nothing, even after another process takes the
/// slot.
#[derive(Debug)]
pub struct EndpointTable<T, E, O> {
    table: Table<Known<T>, E, O>,
}

/// An endpoint table held in arrays: `N` processes inline.
pub type InlineEndpointTable<T, const N: usize> = EndpointTable<T, [EndpointSlot<T>; N], [u16; N]>;

impl<T, const N: usize> InlineEndpointTable<T, N> {
    /// An empty table of `N` slots.
    pub fn inline() -> Self {
        EndpointTable::new([const { Entry::EMPTY }; N], [0; N])
    }
}

impl EndpointId {
    /// The slot of its table the endpoint names (whatever its generation).
    pub fn slot(self) -> usize {
        (self.0 & 0xffff) as usize
    }
}

fn id_of(key: Key) -> EndpointId {
    EndpointId(u32::from(key.generation) << 16 | u32::from(key.index))
}

fn key_of(id: EndpointId) -> Key {
    Key {
        index: (id.0 & 0xffff) as u16,
        generation: (id.0 >> 16) as u16,
    }
}

impl<T, E: BorrowMut<[EndpointSlot<T>]>, O: BorrowMut<[u16]>> EndpointTable<T, E, O> {
    /// An empty table over `slots` and `order` (see [`Table::new`]).
    pub fn new(slots: E, order: O) -> Self {
        EndpointTable {
            table: Table::new(slots, order),
        }
    }

    /// Processes the table can hold.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Processes known now.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no process is known.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Whether every slot is taken.
    pub fn is_full(&self) -> bool {
        self.table.is_full()
    }

    /// The endpoint of `proc`, if it has one.
    pub fn find(&self, proc: ProcName) -> Option<EndpointId> {
        self.table
            .iter()
            .find(|(_, k)| k.proc == proc)
            .map(|(key, _)| id_of(key))
    }

    /// Makes `proc` known with `value` and no reference yet; the value
    /// comes back when every slot is taken.
    pub fn insert(&mut self, proc: ProcName, value: T) -> Result<EndpointId, T> {
        self.table
            .insert(Known {
                proc,
                refs: 0,
                value,
            })
            .map(id_of)
            .map_err(|k| k.value)
    }

    /// Makes `proc` known with the value `make` makes of its endpoint and
    /// no reference yet; `None` when every slot is taken.
    pub fn insert_with(
        &mut self,
        proc: ProcName,
        make: impl FnOnce(EndpointId) -> T,
    ) -> Option<EndpointId> {
        self.table
            .insert_with(|key| Known {
                proc,
                refs: 0,
                value: make(id_of(key)),
            })
            .map(id_of)
    }

    /// Adds one reference to `id`; the count now.
    pub fn add_ref(&mut self, id: EndpointId) -> Result<u32, EndpointError> {
        let known = self
            .table
            .get_mut(key_of(id))
            .ok_or(EndpointError::Unknown(id))?;
        known.refs = known.refs.saturating_add(1);
        Ok(known.refs)
    }

    /// Drops one reference to `id`; the references left (the process stays
    /// known at 0: [`remove`](Self::remove) forgets it).
    pub fn release(&mut self, id: EndpointId) -> Result<u32, EndpointError> {
        let known = self
            .table
            .get_mut(key_of(id))
            .ok_or(EndpointError::Unknown(id))?;
        known.refs = known.refs.saturating_sub(1);
        Ok(known.refs)
    }

    /// Forgets `id`: its process and value come back, and `id` names
    /// nothing from now on.
    pub fn remove(&mut self, id: EndpointId) -> Option<(ProcName, T)> {
        self.table.remove(key_of(id)).map(|k| (k.proc, k.value))
    }

    /// The process behind an endpoint.
    pub fn proc(&self, id: EndpointId) -> Result<ProcName, EndpointError> {
        self.table
            .get(key_of(id))
            .map(|k| k.proc)
            .ok_or(EndpointError::Unknown(id))
    }

    /// Gives endpoint `id` the name `proc` (a peer reached by address
    /// learned its own from its handshake). The caller makes sure no other
    /// endpoint has that name.
    pub fn rename(&mut self, id: EndpointId, proc: ProcName) -> Result<(), EndpointError> {
        let known = self
            .table
            .get_mut(key_of(id))
            .ok_or(EndpointError::Unknown(id))?;
        known.proc = proc;
        Ok(())
    }

    /// How many references an endpoint has (0 if it does not exist).
    pub fn refs(&self, id: EndpointId) -> u32 {
        self.table.get(key_of(id)).map_or(0, |k| k.refs)
    }

    /// What the BTL keeps about `id`.
    pub fn get(&self, id: EndpointId) -> Option<&T> {
        self.table.get(key_of(id)).map(|k| &k.value)
    }

    /// What the BTL keeps about `id`, writable.
    pub fn get_mut(&mut self, id: EndpointId) -> Option<&mut T> {
        self.table.get_mut(key_of(id)).map(|k| &mut k.value)
    }

    /// The `i`th endpoint in the order the processes became known.
    pub fn id_at(&self, i: usize) -> Option<EndpointId> {
        self.table.key_at(i).map(id_of)
    }

    /// The endpoint whose slot is `index`, if one is known there.
    pub fn id_of_slot(&self, index: usize) -> Option<EndpointId> {
        self.table.key_of_slot(index).map(id_of)
    }

    /// The known processes' endpoints, in the order they became known.
    pub fn ids(&self) -> impl Iterator<Item = EndpointId> + '_ {
        self.table.keys().map(id_of)
    }

    /// The known processes, with their endpoints and values.
    pub fn iter(&self) -> impl Iterator<Item = (EndpointId, ProcName, &T)> + '_ {
        self.table
            .iter()
            .map(|(key, k)| (id_of(key), k.proc, &k.value))
    }

    /// Every value, writable, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.table.values_mut().map(|k| &mut k.value)
    }
}

/// Which of the processes passed to `add_procs` a BTL reaches: one bit per
/// process, in storage the caller provides (`procs.len().div_ceil(64)` words).
#[derive(Debug)]
pub struct Reachability<'a> {
    words: &'a mut [u64],
}

impl<'a> Reachability<'a> {
    /// A bitmap over `words`, all bits cleared.
    pub fn new(words: &'a mut [u64]) -> Self {
        words.fill(0);
        Reachability { words }
    }

    /// How many processes the bitmap can describe.
    pub fn capacity(&self) -> usize {
        self.words.len() * 64
    }

    /// Marks process `i` reachable; false if `i` is beyond the capacity.
    pub fn set(&mut self, i: usize) -> bool {
        match self.words.get_mut(i / 64) {
            Some(w) => {
                *w |= 1 << (i % 64);
                true
            }
            None => false,
        }
    }

    /// Whether process `i` is reachable.
    pub fn get(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Number of reachable processes.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_counted_and_removal_forgets() {
        let mut t = InlineEndpointTable::<char, 2>::inline();
        let a = ProcName::new(7, 0);
        let id = t.insert(a, 'a').expect("room");
        assert_eq!(t.find(a), Some(id));
        assert_eq!(t.add_ref(id), Ok(1));
        assert_eq!(t.add_ref(id), Ok(2));
        assert_eq!(t.refs(id), 2);
        assert_eq!(t.release(id), Ok(1));
        assert_eq!(t.proc(id), Ok(a));
        assert_eq!(t.release(id), Ok(0));
        assert_eq!(t.get(id), Some(&'a'), "known at no reference");
        assert_eq!(t.remove(id), Some((a, 'a')));
        assert_eq!(t.proc(id), Err(EndpointError::Unknown(id)));
        assert_eq!(t.release(id), Err(EndpointError::Unknown(id)));
        assert_eq!(t.find(a), None);
    }

    #[test]
    fn a_full_table_refuses_and_a_freed_slot_gets_a_new_id() {
        let mut t = InlineEndpointTable::<(), 2>::inline();
        let a = t.insert(ProcName::new(1, 0), ()).expect("a");
        t.insert(ProcName::new(1, 1), ()).expect("b");
        assert_eq!(t.insert(ProcName::new(1, 2), ()), Err(()));
        t.remove(a).expect("known");
        let c = t.insert(ProcName::new(1, 2), ()).expect("the freed slot");
        assert_eq!(c.0 & 0xffff, a.0 & 0xffff, "the same slot");
        assert_ne!(c, a, "a stale id names nothing");
        assert_eq!(t.get(a), None);
        assert_eq!(t.iter().count(), 2);
        assert_eq!(
            t.release(EndpointId(9)),
            Err(EndpointError::Unknown(EndpointId(9)))
        );
    }

    #[test]
    fn reachability_bits() {
        let mut words = [u64::MAX; 2];
        let mut r = Reachability::new(&mut words);
        assert_eq!(r.count(), 0);
        assert!(r.set(0) && r.set(65) && !r.set(128));
        assert!(r.get(0) && r.get(65) && !r.get(1) && !r.get(500));
        assert_eq!(r.count(), 2);
        assert_eq!(r.capacity(), 128);
    }

    #[test]
    fn names_print_as_job_dot_rank() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(ProcName::new(42, 3).to_string(), "42.3");
    }
}
