//! A state machine's deadlines, by kind.
//!
//! A peer or a link computes its table from its own state each time it is
//! asked ([`Timers`] is never stored), so that what it reports as its next
//! timeout and what it acts on when time passes are read from one place
//! and can never drift apart. Its deadlines go to a [`Deadlines`]: the
//! table, when it acts on them, or only their [`Earliest`], when the
//! engine asks every peer and link when it is next due (on every pass of
//! a driver, so without building a table each time).

use heapless::Vec;

use crate::time::Instant;

/// Where a state machine puts its deadlines.
pub trait Deadlines<K> {
    /// The deadline `at` of kind `kind`, if there is one.
    fn set(&mut self, kind: K, at: Option<Instant>);
}

/// The earliest of the deadlines set, whatever their kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Earliest(pub Option<Instant>);

impl<K> Deadlines<K> for Earliest {
    fn set(&mut self, _kind: K, at: Option<Instant>) {
        if let Some(at) = at
            && self.0.is_none_or(|e| at < e)
        {
            self.0 = Some(at);
        }
    }
}

/// Up to `N` deadlines, each of a kind `K`.
#[derive(Debug, Clone)]
pub struct Timers<K, const N: usize> {
    deadlines: Vec<(K, Instant), N>,
}

impl<K: Copy, const N: usize> Timers<K, N> {
    /// No deadline.
    pub fn new() -> Self {
        Timers {
            deadlines: Vec::new(),
        }
    }

    /// The earliest deadline.
    pub fn earliest(&self) -> Option<Instant> {
        self.deadlines.iter().map(|&(_, at)| at).min()
    }

    /// Whether a deadline of `kind` has come by `now`.
    pub fn is_due(&self, kind: K, now: Instant) -> bool
    where
        K: PartialEq,
    {
        self.deadlines.iter().any(|&(k, at)| k == kind && at <= now)
    }

    /// The kinds whose deadlines have come by `now`, in the order they
    /// were set.
    pub fn due(&self, now: Instant) -> impl Iterator<Item = K> + '_ {
        self.deadlines
            .iter()
            .filter(move |&&(_, at)| at <= now)
            .map(|&(k, _)| k)
    }
}

impl<K: Copy, const N: usize> Deadlines<K> for Timers<K, N> {
    fn set(&mut self, kind: K, at: Option<Instant>) {
        if let Some(at) = at {
            // A state machine has at most `N` kinds of deadline.
            let _ = self.deadlines.push((kind, at));
        }
    }
}

impl<K: Copy, const N: usize> Default for Timers<K, N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum T {
        A,
        B,
        C,
    }

    #[test]
    fn the_earliest_and_what_is_due() {
        let mut t = Timers::<T, 3>::new();
        assert_eq!(t.earliest(), None);
        t.set(T::A, Some(Instant::from_millis(5)));
        t.set(T::B, None);
        t.set(T::C, Some(Instant::from_millis(2)));
        assert_eq!(t.earliest(), Some(Instant::from_millis(2)));
        let due: std::vec::Vec<T> = t.due(Instant::from_millis(3)).collect();
        assert_eq!(due, [T::C]);
        assert!(t.is_due(T::A, Instant::from_millis(5)));
        assert!(!t.is_due(T::B, Instant::NEVER), "never set");
    }

    #[test]
    fn the_earliest_alone() {
        let mut e = Earliest::default();
        Deadlines::<T>::set(&mut e, T::A, Some(Instant::from_millis(5)));
        Deadlines::<T>::set(&mut e, T::B, None);
        Deadlines::<T>::set(&mut e, T::C, Some(Instant::from_millis(2)));
        Deadlines::<T>::set(&mut e, T::A, Some(Instant::from_millis(3)));
        assert_eq!(e, Earliest(Some(Instant::from_millis(2))));
    }
}
