//! Operations waiting for room to their peer, in the order they were
//! called: only the first of a peer's tries the module again, when the
//! module says there is room (`Room`) or the peer is gone; the others wait
//! behind it, so none overtakes another.

use std::collections::{BTreeMap, VecDeque};
use std::task::Waker;

use btl_std::EndpointId;

/// Per peer, the turns of the operations waiting, first to last, and the
/// waker of each that was polled. Ordered by peer, so that a stop wakes
/// them in the same order on every run (a simulation replays).
#[derive(Default)]
pub(crate) struct Room {
    waiting: BTreeMap<EndpointId, VecDeque<(u64, Option<Waker>)>>,
}

impl Room {
    /// Whether an operation to `peer` waits: a new one waits behind it.
    pub(crate) fn has_waiting(&self, peer: EndpointId) -> bool {
        self.waiting.get(&peer).is_some_and(|q| !q.is_empty())
    }

    /// `turn` waits for room to `peer`, last.
    pub(crate) fn join(&mut self, peer: EndpointId, turn: u64) {
        self.waiting
            .entry(peer)
            .or_default()
            .push_back((turn, None));
    }

    /// Whether `turn` is the first waiting for `peer`.
    pub(crate) fn is_first(&self, peer: EndpointId, turn: u64) -> bool {
        self.waiting
            .get(&peer)
            .and_then(|q| q.front())
            .is_some_and(|(t, _)| *t == turn)
    }

    /// The future of `turn` waits to be woken.
    pub(crate) fn wait(&mut self, peer: EndpointId, turn: u64, waker: &Waker) {
        let Some(q) = self.waiting.get_mut(&peer) else {
            return;
        };
        if let Some((_, w)) = q.iter_mut().find(|(t, _)| *t == turn)
            && !w.as_ref().is_some_and(|w| w.will_wake(waker))
        {
            *w = Some(waker.clone());
        }
    }

    /// `turn` started or was withdrawn: if it was first, the next one's
    /// turn has come.
    pub(crate) fn leave(&mut self, peer: EndpointId, turn: u64) {
        let Some(q) = self.waiting.get_mut(&peer) else {
            return;
        };
        let was_first = q.front().is_some_and(|(t, _)| *t == turn);
        q.retain(|(t, _)| *t != turn);
        if q.is_empty() {
            self.waiting.remove(&peer);
        } else if was_first {
            self.wake_first(peer);
        }
    }

    /// There may be room to `peer` (the module said so, or the peer is
    /// gone and the first is to learn it): the first tries again.
    pub(crate) fn wake_first(&mut self, peer: EndpointId) {
        if let Some((_, Some(w))) = self.waiting.get(&peer).and_then(|q| q.front()) {
            w.wake_by_ref();
        }
    }

    /// The endpoint stopped: every one learns it.
    pub(crate) fn wake_all(&mut self) {
        for (_, w) in self.waiting.values().flatten() {
            if let Some(w) = w {
                w.wake_by_ref();
            }
        }
    }
}
