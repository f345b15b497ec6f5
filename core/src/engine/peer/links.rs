//! The links of one peer: which of its link indexes are connecting or
//! open, which the driver is to be asked for, when a broken one is asked
//! for again, and which link carries the next packet.
//!
//! A peer has up to [`MAX_PEER_LINKS`] links, each at a fixed index (the
//! index its handshake names). The peer decides *when* a link is wanted
//! (it connects, a link broke, a retry fell due); this part keeps *which*,
//! so that the peer's own code says what happens to it, not how its
//! arrays are walked.

use heapless::Vec;

use crate::time::Instant;

use super::super::{LinkId, MAX_PEER_LINKS};

/// A link of the peer, by its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeerLink {
    id: LinkId,
    open: bool,
}

/// The peer's links, by index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerLinks {
    slots: [Option<PeerLink>; MAX_PEER_LINKS],
    /// When to ask again for an index that broke or failed to connect
    /// while another link carries the peer.
    retry: [Option<Instant>; MAX_PEER_LINKS],
    /// Indexes to ask the driver for, one bit each.
    wants: u8,
    /// PUT packets go to the open links in turn.
    stripe: u8,
}

impl PeerLinks {
    /// The driver is to open link `index`: asked at the next
    /// [`poll_connect`](Self::poll_connect).
    pub fn want(&mut self, index: u8) {
        if usize::from(index) < MAX_PEER_LINKS {
            self.wants |= 1 << index;
        }
    }

    /// Every index below `n` that has no link: the side that opened
    /// the peer's first link asks for its others.
    pub fn want_missing(&mut self, n: u8) {
        for index in 0..n.min(MAX_PEER_LINKS as u8) {
            if self.slots[usize::from(index)].is_none() {
                self.want(index);
            }
        }
    }

    /// The next index to ask the driver for: one wanted that has no link.
    pub fn poll_connect(&mut self) -> Option<u8> {
        while self.wants != 0 {
            let index = self.wants.trailing_zeros() as u8;
            self.wants &= !(1 << index);
            if self.slots[usize::from(index)].is_none() {
                return Some(index);
            }
        }
        None
    }

    /// Whether an index is wanted.
    pub fn wants_connection(&self) -> bool {
        self.wants != 0
    }

    /// Nothing is wanted or retried any more (the peer is lost, or may
    /// not connect now).
    pub fn stop_asking(&mut self) {
        self.wants = 0;
        self.retry = [None; MAX_PEER_LINKS];
    }

    /// Link `id`, being opened by this side, is link `index` unless that
    /// index has one.
    pub fn connecting(&mut self, index: u8, id: LinkId) {
        if let Some(slot) = self.slots.get_mut(usize::from(index))
            && slot.is_none()
        {
            *slot = Some(PeerLink { id, open: false });
        }
    }

    /// Link `id` finished its handshake as link `index`: it is open, and
    /// that index is no longer retried.
    pub fn opened(&mut self, index: u8, id: LinkId) {
        let i = usize::from(index);
        self.slots[i] = Some(PeerLink { id, open: true });
        self.retry[i] = None;
    }

    /// The link at `index`, if any.
    pub fn at(&self, index: u8) -> Option<LinkId> {
        self.slots.get(usize::from(index))?.map(|l| l.id)
    }

    /// Every link, connecting or open.
    pub fn ids(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.slots.iter().flatten().map(|l| l.id)
    }

    /// Whether it has no link at all, not even one connecting.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Takes `id` out; its index if it was one.
    pub fn forget(&mut self, id: LinkId) -> Option<u8> {
        let i = self
            .slots
            .iter()
            .position(|l| l.is_some_and(|l| l.id == id))?;
        self.slots[i] = None;
        Some(i as u8)
    }

    /// Whether an open link other than `index` is there.
    pub fn open_besides(&self, index: u8) -> bool {
        self.slots
            .iter()
            .enumerate()
            .any(|(j, l)| j != usize::from(index) && l.is_some_and(|l| l.open))
    }

    /// The open link acknowledgements and probes go on: the first.
    pub fn first_open(&self) -> Option<LinkId> {
        self.slots.iter().flatten().find(|l| l.open).map(|l| l.id)
    }

    /// The link that carries the next packet: PUT packets (`stripe`) go to
    /// the open links in turn, everything else to the first, so that small
    /// messages queued together leave in one write.
    pub fn next_to_carry(&mut self, stripe: bool) -> Option<LinkId> {
        let mut open: Vec<LinkId, MAX_PEER_LINKS> = Vec::new();
        for l in self.slots.iter().flatten().filter(|l| l.open) {
            let _ = open.push(l.id);
        }
        if !stripe || open.len() < 2 {
            return open.first().copied();
        }
        self.stripe = self.stripe.wrapping_add(1);
        open.get(usize::from(self.stripe) % open.len()).copied()
    }

    /// Index `index` is to be asked for again at `at`.
    pub fn retry_at(&mut self, index: u8, at: Instant) {
        if let Some(retry) = self.retry.get_mut(usize::from(index)) {
            *retry = Some(at);
        }
    }

    /// When each index is to be asked for again, by index.
    pub fn retries(&self) -> impl Iterator<Item = (u8, Option<Instant>)> + '_ {
        self.retry.iter().enumerate().map(|(i, at)| (i as u8, *at))
    }

    /// Index `index`'s retry fell due: it is wanted now.
    pub fn retry_due(&mut self, index: u8) {
        if let Some(retry) = self.retry.get_mut(usize::from(index)) {
            *retry = None;
            self.want(index);
        }
    }

    /// Takes every link, for the engine to drop.
    pub fn take_all(&mut self) -> impl Iterator<Item = LinkId> + use<> {
        core::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .map(|l| l.id)
    }

    /// Every link, leaving them in place.
    pub fn all(&self) -> impl Iterator<Item = LinkId> + use<> {
        self.slots.into_iter().flatten().map(|l| l.id)
    }

    /// Splits off a new start of the peer's process: the open links are
    /// the old start's (returned, for the engine to fail); those still in
    /// their handshake reach the new start and are all the new record
    /// keeps.
    pub fn renew(&mut self) -> Vec<LinkId, MAX_PEER_LINKS> {
        let mut old = Vec::new();
        let mut opening = PeerLinks::default();
        for (i, l) in self.slots.iter().enumerate() {
            match l {
                Some(l) if l.open => {
                    let _ = old.push(l.id);
                }
                Some(l) => opening.slots[i] = Some(*l),
                None => {}
            }
        }
        *self = opening;
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testkit::link;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn wanted_indexes_are_asked_for_once_and_only_without_a_link() {
        let mut l = PeerLinks::default();
        assert_eq!(l.poll_connect(), None);
        l.want(0);
        l.want(2);
        assert!(l.wants_connection());
        assert_eq!(l.poll_connect(), Some(0));
        l.connecting(0, link(7));
        l.want(0);
        assert_eq!(l.poll_connect(), Some(2), "index 0 has a link");
        assert_eq!(l.poll_connect(), None);
        assert!(!l.wants_connection());
        l.want(u8::MAX);
        assert!(!l.wants_connection(), "no such index");
    }

    #[test]
    fn the_first_open_link_carries_all_but_puts_which_go_in_turn() {
        let mut l = PeerLinks::default();
        l.connecting(0, link(1));
        assert_eq!(l.first_open(), None, "connecting, not open");
        assert_eq!(l.next_to_carry(false), None);
        l.opened(0, link(1));
        l.opened(1, link(2));
        assert_eq!(l.first_open(), Some(link(1)));
        assert_eq!(l.next_to_carry(false), Some(link(1)));
        let puts: [Option<LinkId>; 4] = core::array::from_fn(|_| l.next_to_carry(true));
        assert_eq!(
            puts,
            [Some(link(2)), Some(link(1)), Some(link(2)), Some(link(1))]
        );
        assert!(l.open_besides(0) && l.open_besides(1));
        assert_eq!(l.forget(link(2)), Some(1));
        assert!(!l.open_besides(0), "only index 0 is open");
        assert_eq!(l.forget(link(2)), None, "forgotten once");
        assert_eq!(l.next_to_carry(true), Some(link(1)), "one link: no turns");
    }

    #[test]
    fn a_retried_index_is_wanted_when_due_and_cleared_when_it_opens() {
        let mut l = PeerLinks::default();
        l.opened(0, link(1));
        l.retry_at(1, at(30));
        assert_eq!(l.retries().nth(1), Some((1, Some(at(30)))));
        l.retry_due(1);
        assert_eq!(l.retries().nth(1), Some((1, None)));
        assert_eq!(l.poll_connect(), Some(1));
        l.retry_at(1, at(60));
        l.opened(1, link(2));
        assert!(l.retries().all(|(_, at)| at.is_none()), "open: no retry");
        l.retry_at(2, at(90));
        l.want(2);
        l.stop_asking();
        assert!(!l.wants_connection() && l.retries().all(|(_, at)| at.is_none()));
    }

    #[test]
    fn a_new_start_keeps_the_links_in_their_handshake_and_gives_back_the_open() {
        let mut l = PeerLinks::default();
        l.opened(0, link(1));
        l.connecting(1, link(2));
        l.want_missing(3);
        assert_eq!(l.poll_connect(), Some(2), "the only index without a link");
        let old = l.renew();
        assert_eq!(old.as_slice(), [link(1)]);
        assert_eq!(l.at(1), Some(link(2)));
        assert_eq!(l.at(0), None);
        assert_eq!(l.first_open(), None);
        assert_eq!(l.all().collect::<Vec<_, 4>>().as_slice(), [link(2)]);
        assert_eq!(l.take_all().collect::<Vec<_, 4>>().as_slice(), [link(2)]);
        assert!(l.is_empty());
    }
}
