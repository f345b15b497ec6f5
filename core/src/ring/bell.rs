//! Waking a consumer that sleeps: two words in memory both sides map,
//! beside the rings, and a way to wake the other side (a futex wake on
//! Linux, an event to the other core on a board).
//!
//! | word | written by | meaning |
//! |------|------------|---------|
//! | state | the consumer | [`Bell::POLLING`]: it never sleeps, so a producer does nothing more; [`Bell::AWAKE`]: it may sleep, and is awake; [`Bell::ASLEEP`]: it is about to sleep, or sleeps |
//! | sequence | producers | counts the wakes: the consumer sleeps only while it is the value it read before it said it sleeps |
//!
//! The consumer says `ASLEEP`, then looks at its rings once more, then
//! sleeps while the sequence is unchanged; a producer, after a record is
//! pushed, reads the state and, if the consumer sleeps, adds one to the
//! sequence and wakes it. Both sides put a sequentially consistent fence
//! between their write and their read, so that one of them sees the
//! other's: the consumer finds the record, or the producer finds the
//! consumer asleep. A consumer that only polls costs its producers one
//! read of a word that does not change.

use crate::sync::{AtomicU32, Ordering, fence};

/// The two words of a consumer that may sleep, and how to wake it.
#[derive(Clone, Copy)]
pub struct Bell<'a> {
    state: &'a AtomicU32,
    sequence: &'a AtomicU32,
    wake: fn(&AtomicU32),
}

impl core::fmt::Debug for Bell<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bell")
            .field("state", &self.state.load(Ordering::Relaxed))
            .field("sequence", &self.sequence.load(Ordering::Relaxed))
            .finish()
    }
}

impl<'a> Bell<'a> {
    /// The consumer never sleeps.
    pub const POLLING: u32 = 0;
    /// The consumer may sleep, and is awake.
    pub const AWAKE: u32 = 1;
    /// The consumer sleeps, or is about to.
    pub const ASLEEP: u32 = 2;

    /// The bell of a consumer whose words are `state` and `sequence`;
    /// `wake` wakes it once the sequence has moved (it is given the
    /// sequence word).
    pub fn new(state: &'a AtomicU32, sequence: &'a AtomicU32, wake: fn(&AtomicU32)) -> Self {
        Bell {
            state,
            sequence,
            wake,
        }
    }

    /// A record was pushed: wakes the consumer if it sleeps.
    #[inline]
    pub fn ring(&self) {
        if self.state.load(Ordering::Relaxed) == Self::POLLING {
            return;
        }
        fence(Ordering::SeqCst);
        if self.state.load(Ordering::Relaxed) == Self::ASLEEP {
            self.sequence.fetch_add(1, Ordering::Release);
            (self.wake)(self.sequence);
        }
    }

    /// The consumer's side: says it is about to sleep, and returns the
    /// sequence to sleep on. The caller looks at its rings once more, and
    /// sleeps only if they are empty and the sequence has not moved.
    pub fn going_to_sleep(&self) -> u32 {
        let seen = self.sequence.load(Ordering::Acquire);
        self.state.store(Self::ASLEEP, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        seen
    }

    /// The consumer's side: it is awake again (and may sleep later).
    pub fn awake(&self) {
        self.state.store(Self::AWAKE, Ordering::Relaxed);
    }

    /// The consumer's word that sleepers wait on.
    pub fn sequence(&self) -> &'a AtomicU32 {
        self.sequence
    }
}
