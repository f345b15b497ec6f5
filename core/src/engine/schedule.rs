//! Which slots of a table (peers, links) calls have touched, and when each
//! slot is next due: what lets the engine settle, time and write only what
//! a call moved, however many peers sit idle beside it.
//!
//! Three structures share one [`Slot`] per table slot, in storage the
//! caller lends:
//!
//! - the **touched** list: slots changed since the engine last settled;
//!   touching a slot already in it does nothing, so it holds each at most
//!   once. The engine takes the whole list ([`Schedule::detach_touched`])
//!   and walks it; a slot touched again meanwhile goes onto a fresh list.
//! - the **ready** list: links that may have bytes to write, for the
//!   driver ([`Schedule::pop_ready`]), kept the same way.
//! - the **timer heap**: a binary min-heap of the slots that have a
//!   deadline, each slot knowing its place in it, so that a deadline is set,
//!   moved or dropped in `O(log n)` and the earliest is read in `O(1)`.
//!
//! A slot index is a table's own (`Key::index`); what a slot holds now is
//! the table's to say: a slot emptied while listed is skipped by whoever
//! walks the list, and a new value in it inherits the listing harmlessly.

use core::borrow::BorrowMut;

use crate::time::Instant;

/// No slot: the end of a list, or a slot out of the heap.
const NONE: u16 = u16::MAX;

/// The two lists a slot may be in, as indexes of [`Slot::next`].
const TOUCHED: usize = 0;
const READY: usize = 1;

/// What the schedule keeps for one slot of a table (and, at the same
/// index, for one place of the heap).
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// The slot at this place of the heap (only the first `len` places
    /// mean anything).
    heap: u16,
    /// This slot's place in the heap; [`NONE`] without a deadline.
    place: u16,
    /// The next slot of the touched list, of the ready list.
    next: [u16; 2],
    /// Whether this slot is in the touched list, in the ready list.
    listed: [bool; 2],
    /// This slot's deadline, while it has a place in the heap.
    at: Instant,
}

impl Slot {
    /// A slot in no list, without a deadline.
    pub const EMPTY: Slot = Slot {
        heap: NONE,
        place: NONE,
        next: [NONE; 2],
        listed: [false; 2],
        at: Instant::NEVER,
    };
}

impl Default for Slot {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// The touched and ready lists and the timer heap of a table of
/// `slots.len()` slots (at most 65,535).
#[derive(Debug)]
pub struct Schedule<T> {
    slots: T,
    /// The first slot of the touched list, of the ready list.
    heads: [u16; 2],
    len: u16,
}

impl<T: BorrowMut<[Slot]>> Schedule<T> {
    /// Nothing touched, ready or timed, over `slots` (each made
    /// [`Slot::EMPTY`]).
    pub fn new(mut slots: T) -> Self {
        slots.borrow_mut().fill(Slot::EMPTY);
        Schedule {
            slots,
            heads: [NONE; 2],
            len: 0,
        }
    }

    fn slots(&self) -> &[Slot] {
        self.slots.borrow()
    }

    fn slots_mut(&mut self) -> &mut [Slot] {
        self.slots.borrow_mut()
    }

    /// Puts slot `i` at the front of `list`, unless it is in it already.
    fn push(&mut self, list: usize, i: usize) {
        let head = self.heads[list];
        let Some(slot) = self.slots_mut().get_mut(i) else {
            return;
        };
        if !slot.listed[list] {
            slot.listed[list] = true;
            slot.next[list] = head;
            self.heads[list] = i as u16;
        }
    }

    /// Takes slot `i` off `list`, where it stood before the slot returned.
    fn unlink(&mut self, list: usize, i: usize) -> Option<usize> {
        let slot = self.slots_mut().get_mut(i)?;
        slot.listed[list] = false;
        let next = core::mem::replace(&mut slot.next[list], NONE);
        (next != NONE).then_some(usize::from(next))
    }

    /// Lists slot `i` as touched, unless it is already.
    pub fn touch(&mut self, i: usize) {
        self.push(TOUCHED, i);
    }

    /// Whether any slot is listed as touched.
    pub fn has_touched(&self) -> bool {
        self.heads[TOUCHED] != NONE
    }

    /// Takes the whole touched list: its first slot, if any. Walk it with
    /// [`next_detached`](Self::next_detached); slots touched meanwhile
    /// start a new list.
    pub fn detach_touched(&mut self) -> Option<usize> {
        let head = core::mem::replace(&mut self.heads[TOUCHED], NONE);
        (head != NONE).then_some(usize::from(head))
    }

    /// The slot after `i` in a detached list, `i` taken off it (it may be
    /// touched again from now on).
    pub fn next_detached(&mut self, i: usize) -> Option<usize> {
        self.unlink(TOUCHED, i)
    }

    /// Lists slot `i` as ready to write, unless it is already.
    pub fn make_ready(&mut self, i: usize) {
        self.push(READY, i);
    }

    /// The next slot ready to write, taken off the list.
    pub fn pop_ready(&mut self) -> Option<usize> {
        let i = usize::from(self.heads[READY]);
        self.slots().get(i)?;
        self.heads[READY] = self.unlink(READY, i).map_or(NONE, |n| n as u16);
        Some(i)
    }

    /// Takes the earliest deadline off the heap if it has come by `now`,
    /// and the first slot `live` says holds something: a slot emptied
    /// while it was timed is dropped. The slot is touched, to be timed
    /// again once handled.
    pub fn pop_due_live<K>(
        &mut self,
        now: Instant,
        mut live: impl FnMut(usize) -> Option<K>,
    ) -> Option<K> {
        while let Some(i) = self.pop_due(now) {
            self.touch(i);
            if let Some(key) = live(i) {
                return Some(key);
            }
        }
        None
    }

    /// The earliest deadline, and whose.
    pub fn earliest(&self) -> Option<(usize, Instant)> {
        let slots = self.slots();
        if self.len == 0 {
            return None;
        }
        let i = usize::from(slots[0].heap);
        Some((i, slots[i].at))
    }

    /// Takes the earliest deadline off the heap if it has come by `now`:
    /// its slot.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let (i, at) = self.earliest()?;
        if at > now {
            return None;
        }
        self.set(i, None);
        Some(i)
    }

    /// Slot `i`'s deadline: `at`, or none.
    pub fn set(&mut self, i: usize, at: Option<Instant>) {
        let Some(&Slot { place, at: was, .. }) = self.slots().get(i) else {
            return;
        };
        match (place, at) {
            (NONE, None) => {}
            (NONE, Some(at)) => {
                let place = self.len;
                self.len += 1;
                self.slots_mut()[i].at = at;
                self.put(usize::from(place), i);
                self.up(usize::from(place));
            }
            (_, Some(at)) if at == was => {}
            (place, Some(at)) => {
                self.slots_mut()[i].at = at;
                if at < was {
                    self.up(usize::from(place));
                } else {
                    self.down(usize::from(place));
                }
            }
            (place, None) => {
                self.len -= 1;
                let last = usize::from(self.len);
                let moved = usize::from(self.slots()[last].heap);
                self.slots_mut()[i].place = NONE;
                self.slots_mut()[i].at = Instant::NEVER;
                if usize::from(place) != last {
                    self.put(usize::from(place), moved);
                    self.up(usize::from(place));
                    self.down(usize::from(place));
                }
            }
        }
    }

    /// Puts slot `i` at heap place `p`.
    fn put(&mut self, p: usize, i: usize) {
        let slots = self.slots_mut();
        slots[p].heap = i as u16;
        slots[i].place = p as u16;
    }

    /// The deadline at heap place `p`.
    fn at(&self, p: usize) -> Instant {
        let slots = self.slots();
        slots[usize::from(slots[p].heap)].at
    }

    fn swap(&mut self, a: usize, b: usize) {
        let (i, j) = {
            let slots = self.slots();
            (usize::from(slots[a].heap), usize::from(slots[b].heap))
        };
        self.put(a, j);
        self.put(b, i);
    }

    fn up(&mut self, mut p: usize) {
        while p > 0 {
            let parent = (p - 1) / 2;
            if self.at(p) >= self.at(parent) {
                break;
            }
            self.swap(p, parent);
            p = parent;
        }
    }

    fn down(&mut self, mut p: usize) {
        let len = usize::from(self.len);
        loop {
            let (l, r) = (2 * p + 1, 2 * p + 2);
            let mut least = p;
            if l < len && self.at(l) < self.at(least) {
                least = l;
            }
            if r < len && self.at(r) < self.at(least) {
                least = r;
            }
            if least == p {
                break;
            }
            self.swap(p, least);
            p = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern crate std;
    use std::vec::Vec;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn schedule(n: usize) -> Schedule<Vec<Slot>> {
        Schedule::new(std::vec![Slot::EMPTY; n])
    }

    /// Every slot due by `now`, in the order the heap gives them.
    fn due(s: &mut Schedule<Vec<Slot>>, now: Instant) -> Vec<usize> {
        core::iter::from_fn(|| s.pop_due(now)).collect()
    }

    #[test]
    fn a_touched_slot_is_listed_once_and_again_only_once_taken() {
        let mut s = schedule(4);
        s.touch(2);
        s.touch(0);
        s.touch(2);
        let mut walked = Vec::new();
        let mut next = s.detach_touched();
        while let Some(i) = next {
            next = s.next_detached(i);
            walked.push(i);
            // Touched while the list is walked: onto a new list.
            s.touch(i);
        }
        assert_eq!(walked, [0, 2]);
        let mut again = Vec::new();
        let mut next = s.detach_touched();
        while let Some(i) = next {
            next = s.next_detached(i);
            again.push(i);
        }
        assert_eq!(again, [2, 0]);
        assert_eq!(s.detach_touched(), None);
        s.touch(9);
        assert_eq!(s.detach_touched(), None, "a slot the table lacks");
    }

    #[test]
    fn ready_slots_come_out_once_each() {
        let mut s = schedule(3);
        s.make_ready(1);
        s.make_ready(2);
        s.make_ready(1);
        assert_eq!(s.pop_ready(), Some(2));
        assert_eq!(s.pop_ready(), Some(1));
        assert_eq!(s.pop_ready(), None);
        s.make_ready(1);
        assert_eq!(s.pop_ready(), Some(1));
    }

    #[test]
    fn deadlines_come_due_earliest_first_as_they_are_set_moved_and_dropped() {
        let mut s = schedule(6);
        for (i, at) in [(0, 50), (1, 10), (2, 40), (3, 20), (4, 30)] {
            s.set(i, Some(ms(at)));
        }
        assert_eq!(s.earliest(), Some((1, ms(10))));
        // Moved later, moved earlier, dropped.
        s.set(1, Some(ms(45)));
        s.set(0, Some(ms(5)));
        s.set(3, None);
        assert_eq!(s.earliest(), Some((0, ms(5))));
        assert_eq!(due(&mut s, ms(4)), Vec::<usize>::new());
        assert_eq!(due(&mut s, ms(40)), [0, 4, 2]);
        assert_eq!(s.earliest(), Some((1, ms(45))));
        assert_eq!(due(&mut s, Instant::NEVER), [1]);
        assert_eq!(s.earliest(), None);
        s.set(5, None);
        assert_eq!(s.earliest(), None, "dropping what has none does nothing");
    }

    #[test]
    fn the_heap_stays_ordered_through_many_changes() {
        let n = 64;
        let mut s = schedule(n);
        let mut want: Vec<Option<u64>> = std::vec![None; n];
        // A fixed walk of sets, moves and drops.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % n as u64) as usize;
            let at = (x >> 8) % 1000;
            let at = (!at.is_multiple_of(5)).then_some(at);
            s.set(i, at.map(ms));
            want[i] = at;
            let least = want.iter().flatten().min().copied();
            assert_eq!(s.earliest().map(|(_, at)| at), least.map(ms));
        }
        let mut last = ms(0);
        while let Some((i, at)) = s.earliest() {
            assert!(at >= last);
            assert_eq!(Some(at), want[i].map(ms));
            last = at;
            s.set(i, None);
        }
    }
}
