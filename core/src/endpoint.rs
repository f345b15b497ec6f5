//! Processes and endpoints: who a BTL talks to.
//!
//! A process is named by its job and rank ([`ProcName`]). A BTL that can
//! reach a process gives it an [`EndpointId`], a small index into the BTL's
//! fixed [`EndpointTable`]; an endpoint is reference-counted, as in Motr,
//! because several upper layers may add the same process and only the last
//! `del_procs` may forget it. [`Reachability`] is the bitmap `add_procs`
//! fills in: bit `i` set means `procs[i]` is reachable through this BTL.

use core::fmt;

/// A process: the job it belongs to and its rank in that job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcName {
    /// Job identifier, shared by every process of the job.
    pub job: u64,
    /// Rank of the process in its job.
    pub rank: u32,
}

impl ProcName {
    /// The process `rank` of `job`.
    pub const fn new(job: u64, rank: u32) -> Self {
        ProcName { job, rank }
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

#[derive(Debug, Clone, Copy)]
struct Entry {
    proc: ProcName,
    refs: u32,
}

/// A fixed table of up to `N` endpoints with reference counts.
#[derive(Debug)]
pub struct EndpointTable<const N: usize> {
    entries: [Option<Entry>; N],
}

impl<const N: usize> Default for EndpointTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> EndpointTable<N> {
    /// An empty table. `N` must fit the 16-bit [`EndpointId`].
    pub const fn new() -> Self {
        assert!(
            N <= u16::MAX as usize,
            "an endpoint table holds at most 65535 entries"
        );
        EndpointTable { entries: [None; N] }
    }

    /// The endpoint of `proc`, created with one reference or with one more
    /// reference if it exists.
    pub fn add(&mut self, proc: ProcName) -> Result<EndpointId, EndpointError> {
        if let Some(id) = self.find(proc) {
            if let Some(e) = self.entries[id.0 as usize].as_mut() {
                e.refs = e.refs.saturating_add(1);
            }
            return Ok(id);
        }
        let slot = self
            .entries
            .iter()
            .position(Option::is_none)
            .ok_or(EndpointError::Full)?;
        self.entries[slot] = Some(Entry { proc, refs: 1 });
        // `N <= u16::MAX` is asserted at construction.
        Ok(EndpointId(slot as u32))
    }

    /// Drops one reference; returns true when it was the last and the
    /// endpoint is gone.
    pub fn release(&mut self, id: EndpointId) -> Result<bool, EndpointError> {
        let slot = self
            .entries
            .get_mut(id.0 as usize)
            .ok_or(EndpointError::Unknown(id))?;
        let entry = slot.as_mut().ok_or(EndpointError::Unknown(id))?;
        entry.refs -= 1;
        if entry.refs == 0 {
            *slot = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// The endpoint of `proc`, if it has one.
    pub fn find(&self, proc: ProcName) -> Option<EndpointId> {
        self.entries
            .iter()
            .position(|e| e.is_some_and(|e| e.proc == proc))
            .map(|i| EndpointId(i as u32))
    }

    /// The process behind an endpoint.
    pub fn proc(&self, id: EndpointId) -> Result<ProcName, EndpointError> {
        self.entries
            .get(id.0 as usize)
            .copied()
            .flatten()
            .map(|e| e.proc)
            .ok_or(EndpointError::Unknown(id))
    }

    /// How many references an endpoint has (0 if it does not exist).
    pub fn refs(&self, id: EndpointId) -> u32 {
        self.entries
            .get(id.0 as usize)
            .copied()
            .flatten()
            .map_or(0, |e| e.refs)
    }

    /// The live endpoints and their processes.
    pub fn iter(&self) -> impl Iterator<Item = (EndpointId, ProcName)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.map(|e| (EndpointId(i as u32), e.proc)))
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
    fn add_counts_references_and_release_forgets_at_zero() {
        let mut t = EndpointTable::<2>::new();
        let a = ProcName::new(7, 0);
        let id = t.add(a).expect("room");
        assert_eq!(t.add(a), Ok(id));
        assert_eq!(t.refs(id), 2);
        assert_eq!(t.release(id), Ok(false));
        assert_eq!(t.proc(id), Ok(a));
        assert_eq!(t.release(id), Ok(true));
        assert_eq!(t.proc(id), Err(EndpointError::Unknown(id)));
        assert_eq!(t.release(id), Err(EndpointError::Unknown(id)));
        assert_eq!(t.find(a), None);
    }

    #[test]
    fn full_table_is_an_error_and_slots_are_reused() {
        let mut t = EndpointTable::<2>::new();
        let a = t.add(ProcName::new(1, 0)).expect("a");
        t.add(ProcName::new(1, 1)).expect("b");
        assert_eq!(t.add(ProcName::new(1, 2)), Err(EndpointError::Full));
        t.release(a).expect("release");
        assert_eq!(t.add(ProcName::new(1, 2)), Ok(a));
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
