//! The lock-free free list behind a pool: a Treiber stack of slot indices.
//!
//! The head is one 32-bit word, `tag << 16 | index`, so a single 32-bit
//! compare-and-swap updates it on any target with one (x86_64, Cortex-M3 and
//! up), where pointer-based stacks need a double-word CAS that Cortex-M
//! lacks. Every successful CAS bumps the 16-bit tag: a thread that read
//! head `A`, then was overtaken by pops and pushes that put `A` back on top,
//! fails its CAS instead of installing a stale `next` (the ABA problem).
//! The tag can only be fooled by exactly a multiple of 65536 updates between
//! one thread's load and its CAS.
//!
//! The `next` links are atomics kept apart from the fragments' data: a thread
//! may read the link of a slot another thread has just popped (its CAS then
//! fails), which is harmless on an atomic but would be a data race on bytes
//! the new owner is writing.

use core::ops::Deref;

use crate::sync::{AtomicU32, Ordering};

/// End-of-list index; also why a pool holds at most 65535 fragments.
pub(super) const NIL: u32 = 0xFFFF;
const INDEX_MASK: u32 = 0xFFFF;
const TAG_ONE: u32 = 1 << 16;

/// Head word with the tag advanced by one and `index` on top.
fn next_head(head: u32, index: u32) -> u32 {
    (head & !INDEX_MASK).wrapping_add(TAG_ONE) | index
}

/// What a try to make the next batch ready came to.
enum Grow {
    /// This thread made a batch ready and keeps its first slot.
    Got(u32),
    /// Another thread moved `ready` first; look at the list again.
    Raced,
    /// Every slot up to `max` is ready.
    Full,
}

/// A Treiber stack of slot indices `0..max`, of which `ready` have been made
/// available so far. `L` stores one `next` link per slot.
pub(super) struct FreeList<L> {
    head: AtomicU32,
    ready: AtomicU32,
    max: u32,
    inc: u32,
    links: L,
}

impl<L: Deref<Target = [AtomicU32]>> FreeList<L> {
    /// A list holding slots `0..num` in order (0 on top), growing by `inc`
    /// up to `max`; `links` holds at least `max` atomics. The config has
    /// been validated: `num <= max <= 65535`, `inc >= 1`.
    pub(super) fn new(links: L, num: u32, max: u32, inc: u32) -> Self {
        debug_assert!(num <= max && max <= NIL && inc >= 1);
        debug_assert!(links.len() >= max as usize);
        for i in 0..num {
            let next = if i + 1 < num { i + 1 } else { NIL };
            links[i as usize].store(next, Ordering::Relaxed);
        }
        let top = if num > 0 { 0 } else { NIL };
        Self {
            head: AtomicU32::new(top),
            ready: AtomicU32::new(num),
            max,
            inc,
            links,
        }
    }

    fn link(&self, index: u32) -> &AtomicU32 {
        &self.links[index as usize]
    }

    /// Slots made ready so far.
    pub(super) fn ready(&self) -> u32 {
        self.ready.load(Ordering::Relaxed)
    }

    /// Takes a free slot: the most recently freed one, else the first of a
    /// new batch; `None` when all `max` slots are out.
    ///
    /// Under concurrent growth this can report `None` while another thread
    /// sits between claiming a batch and publishing it (only when `inc > 1`);
    /// waiting for that thread instead could hang an interrupt handler that
    /// preempted it.
    pub(super) fn alloc(&self) -> Option<u32> {
        loop {
            if let Some(index) = self.pop() {
                return Some(index);
            }
            match self.grow() {
                Grow::Got(index) => return Some(index),
                Grow::Raced => {}
                // A slot may have been freed or published since the pop.
                Grow::Full if self.is_empty() => return None,
                Grow::Full => {}
            }
        }
    }

    /// Puts a slot back on top of the list.
    pub(super) fn free(&self, index: u32) {
        self.push_chain(index, index);
    }

    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) & INDEX_MASK == NIL
    }

    fn pop(&self) -> Option<u32> {
        // Acquire, on the load and on a failed CAS alike: the head's value
        // was written by a push (Release) or by an RMW in its release
        // sequence, so this makes both the popped slot's `next` link and the
        // data its last owner wrote visible here.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let index = head & INDEX_MASK;
            if index == NIL {
                return None;
            }
            // May be stale if `index` has been popped meanwhile; then the
            // tag has moved and the CAS below fails.
            let next = self.link(index).load(Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                next_head(head, next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(index),
                Err(current) => head = current,
            }
        }
    }

    /// Pushes the chain `first -> .. -> last`, already linked, with one CAS.
    fn push_chain(&self, first: u32, last: u32) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            self.link(last).store(head & INDEX_MASK, Ordering::Relaxed);
            // Release publishes the link above, the chain's links and the
            // data written to the slots to the thread that pops them.
            match self.head.compare_exchange_weak(
                head,
                next_head(head, first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Claims the next batch of up to `inc` never-used slots by a CAS on
    /// `ready`, keeps the first and pushes the rest as one chain.
    fn grow(&self) -> Grow {
        // Relaxed: `ready` only hands out disjoint ranges of fresh slots; the
        // links of a range are published through `head` like any push.
        let start = self.ready.load(Ordering::Relaxed);
        if start >= self.max {
            return Grow::Full;
        }
        let end = start.saturating_add(self.inc).min(self.max);
        if self
            .ready
            .compare_exchange(start, end, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Grow::Raced;
        }
        let (first, last) = (start + 1, end - 1);
        if first <= last {
            for i in first..last {
                self.link(i).store(i + 1, Ordering::Relaxed);
            }
            self.push_chain(first, last);
        }
        Grow::Got(start)
    }
}
