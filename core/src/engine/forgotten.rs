//! The starts of processes an engine lost and forgot, so that one coming
//! back as if nothing happened is refused as a lost peer on record is.
//!
//! A bounded ring in a table the caller lends: when it is full the oldest
//! start is forgotten for good.

use core::borrow::BorrowMut;

use crate::endpoint::ProcName;

/// One start of a process: its name and its epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Start(Option<(ProcName, u64)>);

impl Start {
    /// No start.
    pub const EMPTY: Self = Start(None);
}

/// Starts of processes lost and forgotten, in slots `C`.
#[derive(Debug)]
pub struct Forgotten<C> {
    ring: C,
    next: usize,
}

impl<C: BorrowMut<[Start]>> Forgotten<C> {
    /// An empty ring over `ring`.
    pub fn new(ring: C) -> Self {
        Forgotten { ring, next: 0 }
    }

    /// Remembers start `epoch` of `proc`, forgetting the oldest if full.
    pub fn remember(&mut self, proc: ProcName, epoch: u64) {
        let ring = self.ring.borrow_mut();
        if ring.is_empty() {
            return;
        }
        ring[self.next % ring.len()] = Start(Some((proc, epoch)));
        self.next = (self.next + 1) % ring.len();
    }

    /// Whether start `epoch` of `proc` was lost and forgotten.
    pub fn contains(&self, proc: ProcName, epoch: u64) -> bool {
        self.ring
            .borrow()
            .iter()
            .any(|s| s.0 == Some((proc, epoch)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_start_goes_when_the_ring_is_full() {
        let mut f = Forgotten::new([Start::EMPTY; 2]);
        let p = ProcName::new(1, 0);
        f.remember(p, 1);
        f.remember(p, 2);
        assert!(f.contains(p, 1) && f.contains(p, 2));
        f.remember(p, 3);
        assert!(!f.contains(p, 1) && f.contains(p, 2) && f.contains(p, 3));
        assert!(!f.contains(ProcName::new(1, 1), 3));
        let mut none = Forgotten::new([Start::EMPTY; 0]);
        none.remember(p, 1);
        assert!(!none.contains(p, 1));
    }
}
