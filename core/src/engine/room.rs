//! Room after a refusal: what the upper layer was refused for one peer
//! with `OutOfResource`, kept so that [`Event::Room`] tells it when the
//! same would be taken.
//!
//! `OutOfResource` is backpressure, and backpressure needs a signal that
//! it has passed. A caller that polls in a loop finds out by trying again;
//! a handler called once per event (a server answering requests from a
//! progress thread) is not called again unless something happens, and a
//! reply it could not send would wait for nothing. So a refused send, put
//! or get to a peer is remembered (one [`Wanted`] per peer, however many
//! were refused), and once the engine has room for the largest of them
//! the next [`poll_event`] that finds no other event hands out
//! `Event::Room` for that peer, once. The event takes no place in the
//! event ring: it is made when it is polled, from the peer's record.
//!
//! [`Event::Room`]: crate::btl::Event::Room
//! [`poll_event`]: crate::btl::Btl::poll_event

use crate::btl::{BtlError, Event};
use crate::endpoint::EndpointId;
use crate::pool::FragmentClass;

use super::framing::Framing;
use super::storage::Storage;
use super::{Engine, HEADER_RESERVE};

/// What a refusal lacked, each part as the refusing check tested it, so
/// that room is told when exactly those checks would pass: no sooner
/// (the call would be refused again) and no later (a part the call does
/// not need holds nothing up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    /// A fragment of these classes (bit `i`: `FragmentClass::ALL[i]`)
    /// within the peer's share, for `alloc` and `prepare_src`.
    fragments: u8,
    /// A place in the peer's queue, for `send` and a get's GET.
    queue: bool,
    /// A place in the event ring, for what ends with an event.
    event: bool,
    /// An operation slot, for a put or a get.
    op: bool,
}

impl Wanted {
    /// A place in the peer's queue.
    pub const QUEUE: Wanted = Wanted {
        fragments: 0,
        queue: true,
        event: false,
        op: false,
    };

    /// A place in the event ring.
    pub const EVENT: Wanted = Wanted {
        fragments: 0,
        queue: false,
        event: true,
        op: false,
    };

    /// An operation slot and a place for its event: what a put or get
    /// claims first.
    pub const OP: Wanted = Wanted {
        fragments: 0,
        queue: false,
        event: true,
        op: true,
    };

    /// A fragment of `class`.
    pub fn fragment(class: FragmentClass) -> Self {
        let i = FragmentClass::ALL.iter().position(|&c| c == class);
        Wanted {
            fragments: i.map_or(0, |i| 1 << i),
            ..Wanted::default()
        }
    }

    /// What either refusal lacked: room is told when both would be taken.
    #[must_use]
    pub fn and(self, other: Wanted) -> Self {
        Wanted {
            fragments: self.fragments | other.fragments,
            queue: self.queue || other.queue,
            event: self.event || other.event,
            op: self.op || other.op,
        }
    }

    /// The fragment classes wanted.
    fn classes(self) -> impl Iterator<Item = FragmentClass> {
        FragmentClass::ALL
            .into_iter()
            .enumerate()
            .filter(move |(i, _)| self.fragments & (1 << i) != 0)
            .map(|(_, c)| c)
    }
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// Notes that `wanted` was refused for peer `p` if `result` is
    /// `OutOfResource`, for [`Event::Room`] to say when it would be
    /// taken; passes `result` on.
    pub(super) fn note_refusal<T>(
        &mut self,
        p: EndpointId,
        wanted: Wanted,
        result: Result<T, BtlError>,
    ) -> Result<T, BtlError> {
        if matches!(result, Err(BtlError::OutOfResource)) {
            self.want_room(p, wanted);
        }
        result
    }

    /// As [`note_refusal`](Self::note_refusal), for a descriptor of `len`
    /// bytes (a descriptor's reserve included): a fragment of its class.
    pub(super) fn note_fragment_refusal<T>(
        &mut self,
        p: EndpointId,
        len: usize,
        result: Result<T, BtlError>,
    ) -> Result<T, BtlError> {
        let class = self
            .shared
            .pools()
            .class_for(len.saturating_add(HEADER_RESERVE));
        match class {
            Ok(class) => self.note_refusal(p, Wanted::fragment(class), result),
            // Too large for any class: refused for size, not for room.
            Err(_) => result,
        }
    }

    /// Notes that `wanted` was refused for peer `p` with `OutOfResource`.
    pub(super) fn want_room(&mut self, p: EndpointId, wanted: Wanted) {
        if let Some(peer) = self.peers.get_mut(p)
            && peer.lost().is_none()
        {
            peer.want_room(wanted);
            self.room_hint = true;
        }
    }

    /// The first peer refused something that the engine now has room for:
    /// its note is cleared and its `Room` event made. A lost peer's note
    /// is dropped (its loss is told instead). Scans only while some peer
    /// waits.
    pub(super) fn poll_room(&mut self) -> Option<Event<'static>> {
        if !self.room_hint {
            return None;
        }
        let mut waiting = false;
        for i in 0..self.peers.len() {
            let Some(p) = self.peers.id_at(i) else {
                continue;
            };
            let Some((wanted, lost)) = self
                .peers
                .get(p)
                .and_then(|peer| Some((peer.room_wanted()?, peer.lost().is_some())))
            else {
                continue;
            };
            if lost || self.has_room_for(p, wanted) {
                if let Some(peer) = self.peers.get_mut(p) {
                    peer.forget_room_wanted();
                }
                if !lost {
                    // Counted no more until the next `progress` finds
                    // another.
                    self.room_ready = false;
                    return Some(Event::Room { endpoint: p });
                }
            } else {
                waiting = true;
            }
        }
        self.room_hint = waiting;
        None
    }

    /// Whether [`poll_room`](Self::poll_room) would make a `Room` event
    /// now: what `progress` keeps for the count of events ready, so that a
    /// caller blocked in a wait after a refusal wakes when room comes, not
    /// at its timeout.
    pub(super) fn any_room(&self) -> bool {
        self.peers.iter().any(|(p, _, peer)| {
            peer.lost().is_none()
                && peer
                    .room_wanted()
                    .is_some_and(|wanted| self.has_room_for(p, wanted))
        })
    }

    /// Whether each part of `wanted` would now pass the check that refused
    /// it.
    fn has_room_for(&self, p: EndpointId, wanted: Wanted) -> bool {
        (!wanted.event || self.shared.events.has_room())
            && (!wanted.op || self.shared.ops.free_slot().is_some())
            && (!wanted.queue || self.peers.get(p).is_some_and(|peer| peer.has_queue_room()))
            && wanted
                .classes()
                .all(|class| self.class_room(p, class).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_two_refusals_lacked_is_what_either_lacked() {
        let both = Wanted::fragment(FragmentClass::Small)
            .and(Wanted::fragment(FragmentClass::Max))
            .and(Wanted::QUEUE);
        assert_eq!(
            both.classes().collect::<heapless::Vec<_, 3>>(),
            [FragmentClass::Small, FragmentClass::Max],
            "room for a large fragment is not room for a small one"
        );
        assert!(both.queue && !both.event && !both.op);
        assert_eq!(Wanted::OP.and(Wanted::OP), Wanted::OP);
    }
}
