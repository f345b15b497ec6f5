//! The events an engine owes its upper layer, in a ring the caller lends.
//!
//! Nothing is taken on without room for the event it ends with: a send
//! that owes a completion, a put or get, a SEND received into a fragment
//! each claim a place ([`Events::owe`]) before they start, and fill it when
//! they end ([`Events::push_owed`]). A quarter of the ring stays free
//! beyond the places claimed, for the errors of lost peers, which nobody
//! claims in advance. So no event is ever dropped: a full ring refuses new
//! work with `OutOfResource` until the upper layer polls.

use core::borrow::BorrowMut;

use crate::btl::{Completion, Tag};
use crate::endpoint::EndpointId;
use crate::pool::Fragment;

/// An event waiting to be polled.
#[derive(Debug)]
pub enum Pending {
    /// A message, its bytes in `frag`.
    Received {
        /// The sender.
        from: EndpointId,
        /// The tag it was sent with.
        tag: Tag,
        /// The receive fragment holding it.
        frag: Fragment,
        /// Its length.
        len: usize,
    },
    /// Anything else.
    Done(Completion),
}

/// One place of the event ring.
#[derive(Debug, Default)]
pub struct EventSlot(Option<Pending>);

impl EventSlot {
    /// An empty place.
    pub const EMPTY: Self = EventSlot(None);
}

/// The event ring of an engine, in slots `C` (an array, a lent slice, a
/// box).
#[derive(Debug)]
pub struct Events<C> {
    ring: C,
    head: usize,
    len: usize,
    /// Places claimed by work under way.
    owed: usize,
}

impl<C: BorrowMut<[EventSlot]>> Events<C> {
    /// An empty ring over `ring`.
    pub fn new(ring: C) -> Self {
        Events {
            ring,
            head: 0,
            len: 0,
            owed: 0,
        }
    }

    /// Places in all.
    pub fn capacity(&self) -> usize {
        self.ring.borrow().len()
    }

    /// Places work may claim: all but those kept for errors.
    pub fn claimable(&self) -> usize {
        self.capacity() - self.error_room()
    }

    /// Places kept for lost peers' errors.
    fn error_room(&self) -> usize {
        self.capacity() / 4
    }

    /// Events waiting to be polled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Places claimed by work under way.
    pub fn owed(&self) -> usize {
        self.owed
    }

    /// Whether one more place may be claimed.
    pub fn has_room(&self) -> bool {
        self.len + self.owed + self.error_room() < self.capacity()
    }

    /// Claims a place for an event to come; false when there is no room.
    pub fn owe(&mut self) -> bool {
        let room = self.has_room();
        self.owed += usize::from(room);
        room
    }

    /// Gives back a place claimed for an event that will not come (a SEND
    /// whose fragment was dropped, a GET that could not be queued).
    pub fn forgive(&mut self) {
        self.owed = self.owed.saturating_sub(1);
    }

    /// Queues the event a claimed place was kept for.
    pub fn push_owed(&mut self, event: Pending) {
        self.forgive();
        // Room was kept when the place was claimed.
        let _ = self.push(event);
    }

    /// Queues an event nobody claimed a place for (a lost peer's error):
    /// it takes the room kept for them, or any free place; it comes back if
    /// the ring is full.
    pub fn push(&mut self, event: Pending) -> Result<(), Pending> {
        let capacity = self.capacity();
        if self.len == capacity {
            return Err(event);
        }
        let at = (self.head + self.len) % capacity;
        self.ring.borrow_mut()[at].0 = Some(event);
        self.len += 1;
        Ok(())
    }

    /// The oldest event that `wanted` picks, taken out past the older
    /// ones, which keep their order.
    pub fn take_first(&mut self, wanted: impl Fn(&Pending) -> bool) -> Option<Pending> {
        let capacity = self.capacity();
        let ring = self.ring.borrow_mut();
        let found = (0..self.len).find(|i| {
            ring[(self.head + i) % capacity]
                .0
                .as_ref()
                .is_some_and(&wanted)
        })?;
        let event = ring[(self.head + found) % capacity].0.take();
        // The older events move up one place into the gap.
        for i in (0..found).rev() {
            let from = (self.head + i) % capacity;
            let to = (self.head + i + 1) % capacity;
            ring[to].0 = ring[from].0.take();
        }
        self.head = (self.head + 1) % capacity;
        self.len -= 1;
        event
    }

    /// The oldest event.
    pub fn pop(&mut self) -> Option<Pending> {
        if self.len == 0 {
            return None;
        }
        let capacity = self.capacity();
        let event = self.ring.borrow_mut()[self.head].0.take();
        self.head = (self.head + 1) % capacity;
        self.len -= 1;
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btl::{BtlError, ErrorEvent};

    fn error() -> Pending {
        Pending::Done(Completion::Error(ErrorEvent {
            fatal: false,
            endpoint: None,
            error: BtlError::Unreachable,
        }))
    }

    #[test]
    fn claims_keep_a_quarter_free_for_errors() {
        let mut e = Events::new([const { EventSlot::EMPTY }; 8]);
        let claimed = (0..8).take_while(|_| e.owe()).count();
        assert_eq!(claimed, 6, "8 places, 2 kept for errors");
        assert!(!e.has_room());
        for _ in 0..6 {
            e.push_owed(error());
        }
        assert_eq!((e.len(), e.owed()), (6, 0));
        assert!(e.push(error()).is_ok() && e.push(error()).is_ok());
        assert!(e.push(error()).is_err(), "full");
        assert!(e.pop().is_some());
        assert_eq!(e.len(), 7);
    }

    #[test]
    fn an_event_taken_past_older_ones_leaves_them_in_order() {
        let put = |op| {
            Pending::Done(Completion::Put {
                op: crate::btl::OpId(op),
                ctx: 0,
                result: Ok(()),
            })
        };
        let op_of = |p: &Pending| match p {
            Pending::Done(Completion::Put { op, .. }) => op.0,
            other => panic!("{other:?}"),
        };
        let mut e = Events::new([const { EventSlot::EMPTY }; 4]);
        // Around the ring's end: 3 pushed and 2 popped first.
        for op in 0..3 {
            let _ = e.push(put(op));
        }
        let _ = (e.pop(), e.pop());
        for op in 3..6 {
            let _ = e.push(put(op));
        }
        let taken = e.take_first(|p| op_of(p) == 4);
        assert_eq!(taken.as_ref().map(op_of), Some(4));
        assert!(e.take_first(|p| op_of(p) == 4).is_none(), "taken once");
        let rest: std::vec::Vec<u64> = core::iter::from_fn(|| e.pop()).map(|p| op_of(&p)).collect();
        assert_eq!(rest, [2, 3, 5]);
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn events_come_out_in_order_around_the_ring() {
        let mut e = Events::new([const { EventSlot::EMPTY }; 3]);
        for round in 0..5u32 {
            for i in 0..2 {
                let _ = e.push(Pending::Done(Completion::Put {
                    op: crate::btl::OpId(u64::from(round * 2 + i)),
                    ctx: 0,
                    result: Ok(()),
                }));
            }
            for i in 0..2 {
                match e.pop() {
                    Some(Pending::Done(Completion::Put { op, .. })) => {
                        assert_eq!(op.0, u64::from(round * 2 + i));
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        assert!(e.pop().is_none());
        e.forgive();
        assert_eq!(e.owed(), 0, "nothing to forgive");
    }
}
