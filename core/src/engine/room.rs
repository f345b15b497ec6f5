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

use super::Engine;
use super::framing::Framing;
use super::storage::Storage;

/// What the upper layer was refused for one peer: a message of up to
/// `send` bytes, a put or get, or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    /// The largest message refused, in bytes (a descriptor's reserve
    /// included, the engine's header not).
    pub send: Option<usize>,
    /// A put or a get was refused.
    pub op: bool,
}

impl Wanted {
    /// A message of `len` bytes was refused.
    pub fn send(len: usize) -> Self {
        Wanted {
            send: Some(len),
            op: false,
        }
    }

    /// A put or a get was refused.
    pub fn op() -> Self {
        Wanted {
            send: None,
            op: true,
        }
    }

    /// What both refusals wanted: room for either is not room for both.
    #[must_use]
    pub fn and(self, other: Wanted) -> Self {
        Wanted {
            send: self.send.max(other.send),
            op: self.op || other.op,
        }
    }
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// Notes that `wanted` was refused for peer `p` with `OutOfResource`,
    /// for [`Event::Room`] to say when it would be taken; passes `result`
    /// on.
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
    /// its record is cleared and its `Room` event made. A lost peer's
    /// record is dropped (its loss is told instead). Scans only while some
    /// peer waits.
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
                .and_then(|peer| Some((peer.wanted()?, peer.lost().is_some())))
            else {
                continue;
            };
            if lost || self.has_room_for(p, wanted) {
                if let Some(peer) = self.peers.get_mut(p) {
                    peer.forget_wanted();
                }
                if !lost {
                    return Some(Event::Room { endpoint: p });
                }
            } else {
                waiting = true;
            }
        }
        self.room_hint = waiting;
        None
    }

    /// Whether what was refused for `p` would be taken now: a place in
    /// the event ring and in the peer's queue, and a fragment within the
    /// peer's share for a message, an operation slot for a put or get.
    fn has_room_for(&self, p: EndpointId, wanted: Wanted) -> bool {
        if !self.shared.events.has_room()
            || !self.peers.get(p).is_some_and(|peer| peer.has_queue_room())
        {
            return false;
        }
        if wanted.op && self.shared.ops.free_slot().is_none() {
            return false;
        }
        wanted
            .send
            .is_none_or(|len| self.check_send_room(p, len).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_for_both_refusals_is_room_for_the_larger_of_them() {
        let both = Wanted::send(100).and(Wanted::send(4000)).and(Wanted::op());
        assert_eq!(
            both,
            Wanted {
                send: Some(4000),
                op: true
            }
        );
        assert_eq!(Wanted::op().and(Wanted::op()), Wanted::op());
    }
}
