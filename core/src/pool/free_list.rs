//! The lock-free free list behind a pool: a Treiber stack of slot indices
//! whose links also count the list's length.
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
//! Each slot's link is one word too, `depth << 16 | next`, where `depth` is
//! the number of free slots from that slot to the bottom of the list, itself
//! included (1..=65535). A push computes it from the slot it lands on, so the
//! list's length is the top's depth, read without any counter and hence
//! without a read-modify-write beyond the two CASes of an alloc/free pair.
//!
//! Depth adds nothing to the ABA argument for pops: a slot's link is written
//! only by its owner, before pushing it, and is fixed while the slot is on
//! the list; a pop reads `next` and `depth` in one load, and the CAS that
//! validates `next` validates the depth with it. It does for pushes, which
//! needed no tag before (`next = H` stays right however often `H` leaves and
//! returns) but now copy `H`'s depth, which differs if `H` was popped and
//! pushed back meanwhile; that moved the tag, so such a push fails its CAS
//! and retries. A push fooled by a wrapped tag would leave a wrong count
//! (the statistics), not a broken list. Pushes load the head with Acquire,
//! like pops, so that they see the depth `H`'s pusher wrote.
//!
//! The links are atomics kept apart from the fragments' data: a thread may
//! read the link of a slot another thread has just popped (its CAS then
//! fails), which is harmless on an atomic but would be a data race on bytes
//! the new owner is writing.

#[cfg(test)]
extern crate std;

use core::ops::{Deref, Range};

use crate::sync::{AtomicU32, Ordering};

/// End-of-list index; also why a pool holds at most 65535 fragments.
pub(super) const NIL: u32 = 0xFFFF;
const INDEX_MASK: u32 = 0xFFFF;
const TAG_ONE: u32 = 1 << 16;
const DEPTH_SHIFT: u32 = 16;

/// Head word with the tag advanced by one and `index` on top.
fn next_head(head: u32, index: u32) -> u32 {
    (head & !INDEX_MASK).wrapping_add(TAG_ONE) | index
}

/// Link word of a slot `depth` deep whose successor is `next`.
fn link_word(depth: u32, next: u32) -> u32 {
    depth << DEPTH_SHIFT | next
}

/// What a try to make the next batch ready came to.
enum Grow {
    /// This thread made a batch ready and keeps its first slot; the list
    /// then held the given number of free slots.
    Got(u32, u32),
    /// Another thread moved `ready` first; look at the list again.
    Raced,
    /// Every slot up to `max` is ready.
    Full,
}

/// The head word alone on its cache line: every alloc and free CASes it, and
/// the fields read on the same paths (`ready`, the links, the pool's id)
/// would otherwise be evicted from the reader's cache by each CAS on another
/// core.
#[repr(align(64))]
struct Head(AtomicU32);

impl Deref for Head {
    type Target = AtomicU32;

    fn deref(&self) -> &AtomicU32 {
        &self.0
    }
}

/// A Treiber stack of slot indices `0..max`, of which `ready` have been made
/// available so far. The links, one per slot, are kept by the pool (in its
/// region) and handed to each call as [`Links`].
pub(super) struct FreeList {
    head: Head,
    ready: AtomicU32,
    max: u32,
    inc: u32,
}

/// A free list's head and counters together with its links: what every
/// operation needs, assembled by the pool for the length of one call.
pub(super) struct Listed<'a> {
    list: &'a FreeList,
    links: &'a [AtomicU32],
}

impl FreeList {
    /// A list holding slots `0..num` in order (0 on top), growing by `inc`
    /// up to `max`; `links` holds at least `max` atomics, which are set
    /// here. The config has been validated: `num <= max <= 65535`,
    /// `inc >= 1`.
    pub(super) fn new(links: &[AtomicU32], num: u32, max: u32, inc: u32) -> Self {
        debug_assert!(num <= max && max <= NIL && inc >= 1);
        debug_assert!(links.len() >= max as usize);
        for link in &links[..max as usize] {
            link.store(NIL, Ordering::Relaxed);
        }
        for i in 0..num {
            let next = if i + 1 < num { i + 1 } else { NIL };
            links[i as usize].store(link_word(num - i, next), Ordering::Relaxed);
        }
        let top = if num > 0 { 0 } else { NIL };
        Self {
            head: Head(AtomicU32::new(top)),
            ready: AtomicU32::new(num),
            max,
            inc,
        }
    }

    /// The list with its links, for one operation. `links` must be the
    /// atomics the list was made with.
    pub(super) fn with<'a>(&'a self, links: &'a [AtomicU32]) -> Listed<'a> {
        debug_assert!(links.len() >= self.max as usize);
        Listed { list: self, links }
    }

    /// Slots made ready so far.
    pub(super) fn ready(&self) -> u32 {
        self.ready.load(Ordering::Relaxed)
    }
}

impl Deref for Listed<'_> {
    type Target = FreeList;

    fn deref(&self) -> &FreeList {
        self.list
    }
}

impl Listed<'_> {
    fn link(&self, index: u32) -> &AtomicU32 {
        &self.links[index as usize]
    }

    /// Free slots from `index` down, 0 for the end of the list. Exact if
    /// `index` was on top of a head value this thread loaded with Acquire
    /// and still is; otherwise the CAS that follows fails or the caller
    /// only wants an estimate.
    fn depth(&self, index: u32) -> u32 {
        if index == NIL {
            0
        } else {
            self.link(index).load(Ordering::Relaxed) >> DEPTH_SHIFT
        }
    }

    /// Free slots on the list: the top's depth. Exact when no push or pop
    /// runs concurrently and the last ones happened before this call;
    /// otherwise some length the list had recently, or, if the top is
    /// popped and pushed again between the two loads, an estimate.
    pub(super) fn free_len(&self) -> u32 {
        // Acquire: the top's link was written before the push that put it
        // there, and this makes that write visible.
        self.depth(self.head.load(Ordering::Acquire) & INDEX_MASK)
    }

    /// Takes a free slot: the most recently freed one, else the first of a
    /// new batch; `None` when all `max` slots are out. Also returns the
    /// list's length just after the slot left it (for a slot from a new
    /// batch, just after the rest of the batch was pushed).
    ///
    /// Under concurrent growth this can report `None` while another thread
    /// sits between claiming a batch and publishing it (only when `inc > 1`);
    /// waiting for that thread instead could hang an interrupt handler that
    /// preempted it.
    pub(super) fn alloc(&self) -> Option<(u32, u32)> {
        loop {
            if let Some(taken) = self.pop() {
                return Some(taken);
            }
            match self.grow() {
                Grow::Got(index, len) => return Some((index, len)),
                Grow::Raced => {}
                // A slot may have been freed or published since the pop.
                Grow::Full if self.is_empty() => return None,
                Grow::Full => {}
            }
        }
    }

    /// Puts a slot back on top of the list.
    pub(super) fn free(&self, index: u32) {
        self.push_range(index..index + 1);
    }

    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) & INDEX_MASK == NIL
    }

    /// Pops the top slot; returns it and the list's length after the pop.
    fn pop(&self) -> Option<(u32, u32)> {
        // Acquire, on the load and on a failed CAS alike: the head's value
        // was written by a push (Release) or by an RMW in its release
        // sequence, so this makes both the popped slot's link and the data
        // its last owner wrote visible here.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let index = head & INDEX_MASK;
            if index == NIL {
                return None;
            }
            // May be stale if `index` has been popped meanwhile; then the
            // tag has moved and the CAS below fails.
            let link = self.link(index).load(Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                next_head(head, link & INDEX_MASK),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                // The CAS validated the link read above: its depth counts
                // the popped slot and everything below it.
                Ok(_) => return Some((index, (link >> DEPTH_SHIFT).saturating_sub(1))),
                Err(current) => head = current,
            }
        }
    }

    /// Pushes the slots of `range`, which only this thread can reach, as one
    /// chain with the first on top, with one CAS; returns the list's length
    /// after it. An empty range pushes nothing, but still CASes the head
    /// (moving only its tag) so that the length is exact at that point.
    fn push_range(&self, range: Range<u32>) -> u32 {
        // Acquire (also on a failed CAS): the depth of the slot below is
        // read from its link, written before the push that put it on top.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let mut top = head & INDEX_MASK;
            // Every link of the chain is rewritten on every try: depths count
            // from the slot the chain lands on, which a failed CAS changed.
            let mut depth = self.depth(top);
            for index in range.clone().rev() {
                depth += 1;
                self.link(index)
                    .store(link_word(depth, top), Ordering::Relaxed);
                top = index;
            }
            // Release publishes the links above, the data written to the
            // slots and, after growth, the claim on `ready` to the threads
            // that pop later.
            match self.head.compare_exchange_weak(
                head,
                next_head(head, top),
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return depth,
                Err(current) => head = current,
            }
        }
    }

    /// Walks the list from the top, checking that each slot's depth counts
    /// it and those below it; returns the slots and depths in order. Only for tests,
    /// with no alloc or free running.
    #[cfg(test)]
    pub(super) fn walk(&self) -> std::vec::Vec<(u32, u32)> {
        let mut slots = std::vec::Vec::new();
        let mut index = self.head.load(Ordering::Acquire) & INDEX_MASK;
        while index != NIL {
            let link = self.link(index).load(Ordering::Relaxed);
            slots.push((index, link >> DEPTH_SHIFT));
            index = link & INDEX_MASK;
            assert!(slots.len() <= self.max as usize, "cycle in the free list");
        }
        let len = slots.len() as u32;
        for (at, &(index, depth)) in slots.iter().enumerate() {
            assert_eq!(depth, len - at as u32, "depth of slot {index}");
        }
        slots
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
        // Push the rest of the batch, if any, and take the list's length from
        // that CAS. Even with nothing to push, the length comes from a CAS,
        // not a load: a load could miss a concurrent pop whose thread also
        // missed this claim on `ready` (store buffering), and both allocs
        // would under-count what is out. A CAS is ordered with the pop on
        // `head`: if first, the pop sees the claim; if second, it sees the pop.
        Grow::Got(start, self.push_range(start + 1..end))
    }
}
