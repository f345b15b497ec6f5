//! The peers: their state, and their lifecycle from the first connect
//! request through reconnections to loss; and the timers that decide when a
//! silent peer is asked for an acknowledgement or given up.

use heapless::{Deque, Vec};

use super::link::LinkState;
use super::receive::Held;
use super::reliable::{Answer, Outgoing, Queued};
use super::{
    ANSWERS, ConnectRequest, Engine, LinkId, MAX_OPS, MAX_PEER_LINKS, PENDING, Pending, WINDOW,
};
use crate::btl::{BtlError, Completion, ErrorEvent, LostReason};
use crate::endpoint::{EndpointId, ProcName};
use crate::engine::config::EngineConfig;
use crate::engine::rtt::RttEstimator;
use crate::engine::window::{RecvWindow, SendWindow};
use crate::time::{Duration, Instant};
use crate::wire::CloseReason;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PeerState {
    /// Added; no link yet.
    Idle,
    /// A link is being opened or handshaken (again, after a broken one,
    /// when the peer has been open before). `since` starts the peer
    /// timeout; `retry` is when to ask the driver again after a failed
    /// reconnect (`None`: a request is out).
    Connecting {
        since: Instant,
        retry: Option<Instant>,
    },
    /// Data flows.
    Open,
    /// Given up: every operation failed.
    Lost(LostReason),
}

#[derive(Debug)]
pub(super) struct Peer {
    pub(super) proc: ProcName,
    pub(super) refs: u32,
    pub(super) state: PeerState,
    /// The peer's links by link index: open, or being opened.
    pub(super) links: [Option<LinkId>; MAX_PEER_LINKS],
    /// When to ask again for a link index that broke or failed to connect
    /// while another link carries the peer.
    pub(super) link_retry: [Option<Instant>; MAX_PEER_LINKS],
    /// PUT packets go to the open links in turn.
    pub(super) stripe: u8,
    pub(super) send: SendWindow<Outgoing, WINDOW>,
    pub(super) recv: RecvWindow<Held, WINDOW>,
    pub(super) queue: Deque<Queued, PENDING>,
    /// Answers owed to the peer: they go before anything queued.
    pub(super) answers: Deque<Answer, ANSWERS>,
    /// Largest body the peer accepts; CRC trailers on this link.
    pub(super) peer_max_body: u64,
    pub(super) checksum: bool,
    /// Credits: SENDs sent, the peer's initial grant and newest total.
    pub(super) sends_sent: u32,
    pub(super) peer_initial: u32,
    pub(super) peer_granted: u32,
    /// Credits this side granted beyond the initial ones (freed fragments).
    pub(super) granted: u32,
    /// Acknowledgement owed: received packets or grants not yet reported,
    /// since when, how many, and whether it must go at once.
    pub(super) ack_owed_since: Option<Instant>,
    pub(super) acks_pending: u32,
    pub(super) ack_urgent: bool,
    pub(super) last_heard: Instant,
    /// When this side last asked the peer for an acknowledgement
    /// (keepalive, or credit probe over datagrams).
    pub(super) last_probe: Instant,
    /// Retransmission timeout from measured round trips (datagrams), and
    /// the backoff of reconnection attempts.
    pub(super) rtt: RttEstimator,
    /// The peer has been open: a broken link is reconnected, not fatal.
    pub(super) was_open: bool,
    /// The xfer ids of this peer's refused puts already answered.
    pub(super) last_rejected: Option<u64>,
    /// The start of the process this record is about (its HELLO's epoch),
    /// once a link to it has opened.
    pub(super) epoch: Option<u64>,
    /// When the first of an unbroken run of refused reconnections was.
    pub(super) refused_since: Option<Instant>,
    /// SENDs received from the peer (each once): never more than the
    /// credits this side has granted ([`Peer::within_credits`]).
    pub(super) sends_received: u32,
}

impl Peer {
    fn new(proc: ProcName, rtt: RttEstimator) -> Self {
        Peer {
            proc,
            refs: 0,
            state: PeerState::Idle,
            links: [None; MAX_PEER_LINKS],
            link_retry: [None; MAX_PEER_LINKS],
            stripe: 0,
            send: SendWindow::new(),
            recv: RecvWindow::new(),
            queue: Deque::new(),
            answers: Deque::new(),
            peer_max_body: crate::wire::MIN_MAX_BODY,
            checksum: false,
            sends_sent: 0,
            peer_initial: 0,
            peer_granted: 0,
            granted: 0,
            ack_owed_since: None,
            acks_pending: 0,
            ack_urgent: false,
            last_heard: Instant::ZERO,
            last_probe: Instant::ZERO,
            rtt,
            was_open: false,
            last_rejected: None,
            epoch: None,
            refused_since: None,
            sends_received: 0,
        }
    }

    /// Whether the peer's SENDs so far are within the credits this side
    /// granted it: the initial ones (`initial`) and those given back since.
    /// A peer beyond them breaks the protocol.
    pub(super) fn within_credits(&self, initial: u32) -> bool {
        let allowed = initial.wrapping_add(self.granted);
        (self.sends_received.wrapping_sub(allowed) as i32) <= 0
    }

    /// Whether this side's last probe is still unanswered: nothing heard
    /// from the peer since it went.
    pub(super) fn probe_unanswered(&self) -> bool {
        self.last_probe > self.last_heard
    }

    pub(super) fn has_credit(&self) -> bool {
        let allowed = self.peer_initial.wrapping_add(self.peer_granted);
        (allowed.wrapping_sub(self.sends_sent) as i32) > 0
    }

    /// Notes an acknowledgement owed (a packet received, credits granted);
    /// `urgent` when it must not wait (a probe, a duplicate, a reconnect).
    pub(super) fn owe_ack(&mut self, now: Instant, urgent: bool) {
        self.ack_owed_since.get_or_insert(now);
        self.acks_pending = self.acks_pending.saturating_add(1);
        self.ack_urgent |= urgent;
    }

    /// The acknowledgement owed goes out (with a packet, or alone).
    pub(super) fn ack_sent(&mut self) {
        self.ack_owed_since = None;
        self.acks_pending = 0;
        self.ack_urgent = false;
    }

    /// Takes `link` out of the peer's links; whether it was one of them.
    pub(super) fn forget_link(&mut self, link: LinkId) -> bool {
        match self.links.iter_mut().find(|l| **l == Some(link)) {
            Some(entry) => {
                *entry = None;
                true
            }
            None => false,
        }
    }

    /// Out of credit with nothing in flight: only the peer's next grant
    /// lets sends go on, and over datagrams the ACK carrying it may be lost.
    pub(super) fn starved(&self) -> bool {
        !self.has_credit() && self.send.is_empty()
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// The handle of the peer in slot `p`: the slot in the low half, its
    /// generation in the high half.
    pub(super) fn endpoint(&self, p: usize) -> EndpointId {
        let generation = self.generations.get(p).copied().unwrap_or(0);
        EndpointId(u32::from(generation) << 16 | p as u32)
    }

    /// The slot of the peer `endpoint` names, unless that peer has been
    /// forgotten since (its slot free, or another peer's now).
    pub(super) fn peer_slot(&self, endpoint: EndpointId) -> Option<usize> {
        let p = (endpoint.0 & 0xffff) as usize;
        let generation = (endpoint.0 >> 16) as u16;
        (self.peers.get(p)?.is_some() && self.generations[p] == generation).then_some(p)
    }

    pub(super) fn peer(&self, endpoint: EndpointId) -> Option<&Peer> {
        self.peers[self.peer_slot(endpoint)?].as_ref()
    }

    /// The slot of the peer that is process `proc`, if it is on record.
    pub(super) fn peer_named(&self, proc: ProcName) -> Option<usize> {
        self.present_peers
            .iter()
            .map(|&p| usize::from(p))
            .find(|&p| self.peers[p].as_ref().is_some_and(|peer| peer.proc == proc))
    }

    /// Whether start `epoch` of `proc` was lost and its record freed.
    pub(super) fn was_forgotten(&self, proc: ProcName, epoch: u64) -> bool {
        self.forgotten.iter().any(|&f| f == (proc, epoch))
    }

    /// Frees peer slot `p`: its handles go stale.
    pub(super) fn free_peer_slot(&mut self, p: usize) {
        self.peers[p] = None;
        self.present_peers.retain(|&i| usize::from(i) != p);
        self.generations[p] = self.generations[p].wrapping_add(1);
    }

    /// Frees the records of lost peers that nobody holds (`refs == 0`:
    /// they came to this side, the user never added them): a server's
    /// slots come back as its clients leave. Their starts are remembered
    /// (a bounded list, the oldest forgotten first), so that one coming
    /// back as if nothing happened is refused as a lost peer is. Links
    /// still naming a freed peer are closed.
    pub(super) fn forget_lost_peers(&mut self) {
        if !core::mem::take(&mut self.lost_unheld) {
            return;
        }
        let mut freed: Vec<usize, PEERS> = Vec::new();
        for &p in &self.present_peers {
            let p = usize::from(p);
            if self.peers[p]
                .as_ref()
                .is_some_and(|peer| peer.refs == 0 && matches!(peer.state, PeerState::Lost(_)))
            {
                let _ = freed.push(p);
            }
        }
        for p in freed {
            self.forget_peer(p);
        }
    }

    /// Frees the record of lost peer `p`, remembering its start (see
    /// [`forget_lost_peers`](Self::forget_lost_peers)) and closing any link
    /// that still names it.
    pub(super) fn forget_peer(&mut self, p: usize) {
        if let Some(peer) = self.peers[p].as_ref()
            && let Some(epoch) = peer.epoch
        {
            if self.forgotten.is_full() {
                self.forgotten.pop_front();
            }
            let _ = self.forgotten.push_back((peer.proc, epoch));
        }
        for s in self.present_links.clone() {
            let s = usize::from(s);
            if let Some(l) = self.links[s].as_mut()
                && l.peer == Some(p)
            {
                l.peer = None;
                self.fail_link(s, CloseReason::Shutdown);
            }
        }
        self.free_peer_slot(p);
    }

    /// Makes room for one more peer when every slot is taken: the peer
    /// nobody holds that has been disconnected longest (waiting for it to
    /// connect again) is given up, `PeerLost(Closed)`, and forgotten.
    /// Open peers are never chosen.
    fn evict_disconnected_peer(&mut self) -> bool {
        let victim = self
            .present_peers
            .iter()
            .map(|&p| usize::from(p))
            .filter_map(|p| Some((p, self.peers[p].as_ref()?)))
            .filter_map(|(p, peer)| match peer.state {
                PeerState::Connecting { since, .. }
                    if peer.refs == 0 && peer.links.iter().all(Option::is_none) =>
                {
                    Some((since, p))
                }
                _ => None,
            })
            .min()
            .map(|(_, p)| p);
        let Some(p) = victim else {
            return false;
        };
        self.lose_peer(p, LostReason::Closed);
        self.forget_lost_peers();
        true
    }

    pub(super) fn peer_proc(&self, p: usize) -> ProcName {
        self.peers[p]
            .as_ref()
            .map_or(self.config.me, |peer| peer.proc)
    }

    pub(super) fn find_or_add_peer(&mut self, proc: ProcName) -> Option<usize> {
        if let Some(i) = self.peer_named(proc) {
            return Some(i);
        }
        self.forget_lost_peers();
        if self.peers.iter().all(Option::is_some) && !self.evict_disconnected_peer() {
            return None;
        }
        let i = self.peers.iter().position(Option::is_none)?;
        self.peers[i] = Some(Peer::new(proc, RttEstimator::with_bounds(self.config.rtt)));
        let _ = self.present_peers.push(i as u16);
        Some(i)
    }

    /// The peer that is process `proc`, asked to connect if it is idle, or
    /// `None` when this engine does not know it or has lost it.
    pub(super) fn reach(&mut self, proc: ProcName) -> Option<usize> {
        let q = self.peer_named(proc)?;
        self.check_endpoint(self.endpoint(q)).ok()
    }

    pub(super) fn check_endpoint(&mut self, endpoint: EndpointId) -> Result<usize, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let p = self.peer_slot(endpoint).ok_or(BtlError::Unreachable)?;
        let peer = self.peers[p].as_ref().ok_or(BtlError::Unreachable)?;
        match peer.state {
            PeerState::Lost(reason) => Err(BtlError::PeerLost(reason)),
            PeerState::Idle => {
                let proc = peer.proc;
                let req = ConnectRequest {
                    endpoint,
                    proc,
                    link_index: 0,
                };
                if self.connects.push_back(req).is_err() {
                    return Err(BtlError::OutOfResource);
                }
                if let Some(peer) = self.peers[p].as_mut() {
                    peer.state = PeerState::Connecting {
                        since: self.now,
                        retry: None,
                    };
                }
                Ok(p)
            }
            _ => Ok(p),
        }
    }

    /// Asks the driver for link `link_index` to peer `p` (later, if the
    /// request queue is full).
    pub(super) fn request_connect(&mut self, p: usize, link_index: u8) {
        let Some(peer) = self.peers[p].as_ref() else {
            return;
        };
        let req = ConnectRequest {
            endpoint: self.endpoint(p),
            proc: peer.proc,
            link_index,
        };
        if self.connects.push_back(req).is_err() {
            if peer.state == PeerState::Open {
                self.retry_link_later(p, link_index);
            } else {
                self.retry_later(p);
            }
        }
    }

    /// Link `link_index` of peer `p` is gone (broke, or its reconnection's
    /// handshake timed out) and no longer counts among its links. If
    /// another open link carries the peer, what the peer has not
    /// acknowledged goes out there (what was written on the lost link may
    /// be lost with it; the peer drops duplicates) and the link is asked
    /// for again after a backoff. Otherwise the peer reconnects, or, if it
    /// has never been open, is lost.
    pub(super) fn link_gone(&mut self, p: usize, link_index: u8) {
        let Some(peer) = self.peers[p].as_ref() else {
            return;
        };
        let carried = peer.state == PeerState::Open
            && peer.links.iter().flatten().any(|&id| {
                self.slot_of(id)
                    .and_then(|s| self.links[s].as_ref())
                    .is_some_and(|l| l.state == LinkState::Open)
            });
        match peer.state {
            PeerState::Open if carried => {
                let now = self.now;
                let mut retained: Vec<u64, WINDOW> = Vec::new();
                if let Some(peer) = self.peers[p].as_mut() {
                    for resend in peer.send.resend_all(now) {
                        let _ = retained.push(resend.seq);
                    }
                }
                for seq in retained {
                    self.resend(p, seq);
                }
                self.retry_link_later(p, link_index);
            }
            PeerState::Open => self.reconnect(p),
            PeerState::Connecting { .. } if peer.was_open => self.retry_later(p),
            PeerState::Connecting { .. } => self.lose_peer(p, LostReason::Closed),
            _ => {}
        }
    }

    /// Drops every open link of peer `p` quietly (see
    /// [`end_link_quietly`](Self::end_link_quietly)): the peer is
    /// connected again.
    pub(super) fn reset_links(&mut self, p: usize) {
        let Some(peer) = self.peers[p].as_ref() else {
            return;
        };
        for id in peer.links.into_iter().flatten() {
            if let Some(slot) = self.slot_of(id) {
                self.end_link_quietly(slot, CloseReason::Timeout);
            }
        }
    }

    /// A broken link of an open peer that no other link carries: connect
    /// again, resend what the peer has not acknowledged once open, and
    /// give up only after the peer timeout since it was last heard.
    pub(super) fn reconnect(&mut self, p: usize) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.state = PeerState::Connecting {
            since: peer.last_heard,
            retry: None,
        };
        self.request_connect(p, 0);
    }

    /// Link `link_index` of an open peer could not be had: ask for it again
    /// after a backoff (doubling, up to the largest retransmission
    /// timeout), while the peer's other links carry it.
    pub(super) fn retry_link_later(&mut self, p: usize, link_index: u8) {
        let now = self.now;
        if let Some(peer) = self.peers[p].as_mut()
            && let Some(retry) = peer.link_retry.get_mut(usize::from(link_index))
        {
            peer.rtt.on_timeout();
            *retry = Some(now + peer.rtt.rto());
        }
    }

    /// A reconnection attempt failed: the next one waits a backoff, and
    /// the peer timeout keeps running.
    pub(super) fn retry_later(&mut self, p: usize) {
        let now = self.now;
        if let Some(peer) = self.peers[p].as_mut()
            && let PeerState::Connecting { since, .. } = peer.state
        {
            peer.rtt.on_timeout();
            peer.state = PeerState::Connecting {
                since,
                retry: Some(now + peer.rtt.rto()),
            };
        }
    }

    /// A new start of peer `p`'s process: everything outstanding to the
    /// old one fails with `PeerLost(Restarted)`, and the record starts over
    /// under the same endpoint, as many times added as before.
    /// Links still in their handshake reach the new start (the old one
    /// died before they connected): they are kept, not closed.
    pub(super) fn renew_peer(&mut self, p: usize) {
        let Some(peer) = self.peers[p].as_ref() else {
            return;
        };
        let mut opening: Vec<LinkId, MAX_PEER_LINKS> = Vec::new();
        for id in peer.links.iter().flatten() {
            let handshaking = self
                .slot_of(*id)
                .and_then(|s| self.links[s].as_ref())
                .is_some_and(|l| l.state == LinkState::Handshaking);
            if handshaking {
                let _ = opening.push(*id);
            }
        }
        let was_lost = matches!(peer.state, PeerState::Lost(_));
        if let Some(peer) = self.peers[p].as_mut() {
            for id in &opening {
                peer.forget_link(*id);
            }
        }
        if was_lost {
            // Its operations failed already; the caller still learns that
            // the endpoint now names a new start.
            let _ = self
                .events
                .push_back(Pending::Done(Completion::Error(ErrorEvent {
                    fatal: false,
                    endpoint: Some(self.endpoint(p)),
                    error: BtlError::PeerLost(LostReason::Restarted),
                })));
        } else {
            self.lose_peer(p, LostReason::Restarted);
        }
        let rtt = RttEstimator::with_bounds(self.config.rtt);
        if let Some(peer) = self.peers[p].as_mut() {
            let refs = peer.refs;
            *peer = Peer::new(peer.proc, rtt);
            peer.refs = refs;
        }
    }

    /// Gives a peer up: every operation to it fails exactly once.
    pub(super) fn lose_peer(&mut self, p: usize, reason: LostReason) {
        self.fail_peer(p, reason, BtlError::PeerLost(reason));
    }

    /// Gives a peer up for `reason`, failing every operation to it exactly
    /// once with `error` (`PeerLost`, or `Finalized` when the BTL shuts
    /// down, which reports no lost peer).
    pub(super) fn fail_peer(&mut self, p: usize, reason: LostReason, error: BtlError) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        if matches!(peer.state, PeerState::Lost(_)) {
            return;
        }
        peer.state = PeerState::Lost(reason);
        self.lost_unheld |= peer.refs == 0;
        let mut released: Vec<Outgoing, WINDOW> = Vec::new();
        peer.send.drain(|_, out| {
            let _ = released.push(out);
        });
        let mut queued: Vec<Queued, PENDING> = Vec::new();
        while let Some(q) = peer.queue.pop_front() {
            let _ = queued.push(q);
        }
        peer.answers.clear();
        let mut held: Vec<Held, WINDOW> = Vec::new();
        peer.recv.drain_held(|_, h| {
            let _ = held.push(h);
        });
        peer.link_retry = [None; MAX_PEER_LINKS];
        let links = core::mem::take(&mut peer.links);
        for link in links.into_iter().flatten() {
            let Some(slot) = self.slot_of(link) else {
                continue;
            };
            if let Some(l) = self.links[slot].as_mut() {
                l.peer = None;
            }
            // Shutdown, not Normal: the peer is to lose this process too,
            // not to connect again as after a redundant link's close.
            self.fail_link(slot, CloseReason::Shutdown);
        }
        for out in released {
            self.release(p, out, Err(error));
        }
        for q in queued {
            if let Queued::Send(desc) = q {
                self.complete_send(p, desc, Err(error));
            }
        }
        for h in held {
            if let Held::Send { frag, .. } = h {
                self.drop_received(frag);
            }
        }
        for i in 0..MAX_OPS {
            if self.ops[i].is_some_and(|o| o.peer == p) {
                self.finish_op(i, Err(error));
            }
        }
        if error == BtlError::Finalized {
            return;
        }
        let _ = self
            .events
            .push_back(Pending::Done(Completion::Error(ErrorEvent {
                fatal: false,
                endpoint: Some(self.endpoint(p)),
                error,
            })));
    }
}

impl EngineConfig {
    /// When `peer` counts as lost if nothing is heard from it: a peer
    /// being connected, or an open one with operations outstanding (any
    /// open one when keepalives are on), silent for the peer timeout.
    pub(super) fn lost_by(&self, peer: &Peer) -> Option<Instant> {
        let waiting = !peer.send.is_empty() || !peer.queue.is_empty() || !peer.answers.is_empty();
        let since = match peer.state {
            PeerState::Open if waiting || !self.keepalive.is_zero() => peer.last_heard,
            PeerState::Connecting { since, .. } => since,
            _ => return None,
        };
        Some(since + self.peer_timeout)
    }

    /// When an open `peer` is next asked for an acknowledgement: after
    /// `keepalive` of silence (at most a third of the peer timeout, so that
    /// a live peer has answered a probe or two before it would count as
    /// lost), and over datagrams after a retransmission
    /// timeout when sends wait for credits with nothing in flight (the ACK
    /// that granted them may have been lost) or when the last probe went
    /// unanswered (it may have been lost).
    pub(super) fn probe_at(&self, peer: &Peer, datagram: bool) -> Option<Instant> {
        if peer.state != PeerState::Open {
            return None;
        }
        let quiet_since = peer.last_heard.max(peer.last_probe);
        let interval = self
            .keepalive
            .min(self.peer_timeout / 3)
            .max(Duration::from_nanos(1));
        let keepalive = (!self.keepalive.is_zero()).then(|| quiet_since + interval);
        let credit = (datagram && peer.starved()).then(|| quiet_since + peer.rtt.rto());
        // Over datagrams a probe may be lost like any packet: one left
        // unanswered goes again after the retransmission timeout (backing
        // off), so that a few lost datagrams never add up to a lost peer.
        let repeat =
            (datagram && peer.probe_unanswered()).then(|| peer.last_probe + peer.rtt.rto());
        [keepalive, credit, repeat].into_iter().flatten().min()
    }
}
