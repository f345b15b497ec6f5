//! The engine of one process over stream or datagram links: handshakes, framing,
//! reliable numbered packets, credits, sends, puts and gets, and the `Btl`
//! interface on top. It does no I/O: the driver reports connections,
//! bytes and time, and carries out the writes and connects it asks for.
//!
//! This module holds the public types, the engine and its driver interface;
//! one child module per concept holds the rest: `peer`, `link`, `receive`,
//! `reliable`, `frame`, `bulk` and `interface`.

mod bulk;
mod frame;
mod interface;
mod link;
mod peer;
mod receive;
mod reliable;

use heapless::{Deque, Vec};

use super::config::{EngineConfig, Framing};
use super::mover::StreamReader;
use crate::btl::{Attributes, BtlFlags, Completion, LostReason, RegSlot, Registrations, Tag};
use crate::endpoint::{EndpointId, ProcName};
use crate::mca::Exclusivity;
use crate::pool::{Fragment, FragmentClass, FragmentPools, PoolCell};
use crate::time::Instant;
use crate::wire::{
    CHECKSUM_LEN, CloseReason, HEADER_LEN, HelloRepr, Limits, MAX_MAX_BODY, MIN_MAX_BODY,
    NONCE_LEN, PutRepr, SendRepr, WireError,
};

use bulk::Op;
use frame::{frame_len, item_segments};
use link::{Link, LinkState, TxItem};
use peer::{Peer, PeerState};
use receive::Receiving;

/// Reliable packets in flight per peer.
pub const WINDOW: usize = 64;
/// Puts and gets outstanding at once, this side's and peers' gets served
/// (at most 64: one bit each in a word).
pub const MAX_OPS: usize = 64;
const _: () = assert!(MAX_OPS <= 64);
/// Most slices one [`Transmit`] hands out (coalesced small packets).
pub const MAX_SEGMENTS: usize = 16;
const EVENTS: usize = 256;
/// Events kept free for lost peers' `Error` events, beyond those every
/// message and completion owed is sure of ([`Engine::has_event_room`]).
const ERROR_ROOM: usize = EVENTS / 4;
const PENDING: usize = 64;
/// Answers (REJECT, DONE) waiting for a peer. Each answers one of the
/// peer's transfers, and a peer has at most `MAX_OPS` of them outstanding,
/// plus up to a window of late packets of transfers already answered: a
/// peer that needs more asks faster than it takes answers.
const ANSWERS: usize = MAX_OPS + WINDOW;
const TX_ITEMS: usize = 128;
const SEND_PREFIX: usize = HEADER_LEN + SendRepr::LEN;
const PUT_PREFIX: usize = HEADER_LEN + PutRepr::LEN;
const CONTROL_MAX: usize = HEADER_LEN + HelloRepr::LEN + CHECKSUM_LEN;
/// Most connections per peer ([`EngineConfig::links`]).
pub const MAX_PEER_LINKS: usize = 4;
/// The registrations of an engine: `REGS` regions lent for `'m`.
type Regs<'m, const REGS: usize> = Registrations<&'m mut [u8], [RegSlot<&'m mut [u8]>; REGS]>;

/// Bit of a PUT's `xfer_id` marking data that answers the receiver's GET.
const GET_REPLY: u64 = 1 << 63;

/// A connection to one peer, as the driver and the engine name it. Valid
/// from the `handle_connected`/`handle_accepted` that made it until the
/// driver's `handle_closed`; after that the engine refuses it
/// ([`LinkError::UnknownLink`]) even once its slot serves a new link, so a
/// driver's late call about an old connection never touches a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId {
    slot: u16,
    generation: u16,
}

/// Why a link ends, for the driver to log as it closes the connection
/// ([`Engine::link_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEnd {
    /// The reason in the CLOSE this side sent, or the peer's.
    pub reason: CloseReason,
    /// Whether the peer closed the link (its CLOSE came) rather than this
    /// side.
    pub by_peer: bool,
    /// Whether the handshake had completed: `false` for a connection
    /// refused (or given up) before it carried anything.
    pub verified: bool,
}

/// Slices the driver writes, in order, on one link (one vectored write).
#[derive(Debug)]
pub struct Transmit<'a> {
    /// The link to write on.
    pub link: LinkId,
    /// The bytes, in order.
    pub segments: Vec<&'a [u8], MAX_SEGMENTS>,
}

/// Where a connection a peer opened (or a datagram source) comes from, as
/// the driver names it: equal for every connection from one network
/// address (its IP address folded to 64 bits, say), so that one host cannot
/// take every slot of the handshake budget
/// ([`EngineConfig::handshake_budget_per_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source(pub u64);

/// Why a connection the engine asked for could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectFailure {
    /// The peer's host answered that nothing listens there (a TCP reset,
    /// `ECONNREFUSED`): its process is gone. Refusals that last
    /// [`EngineConfig::refused_timeout`] lose the peer with
    /// `PeerLost(Refused)`.
    Refused,
    /// No connection, for any other reason (no route, no address known,
    /// the connect timed out): the network may come back, so a peer that
    /// was open is tried again until its peer timeout.
    Unreachable,
}

/// A connection the engine wants the driver to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The peer.
    pub endpoint: EndpointId,
    /// Its process name, for the driver's address lookup.
    pub proc: ProcName,
    /// Which of the peer's links this is, from 0 (below
    /// [`EngineConfig::links`]): the driver pairs addresses by it.
    pub link_index: u8,
}

/// Why the driver's report could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// Every link slot is in use.
    TooManyLinks,
    /// No such link (closed, or never opened).
    UnknownLink,
    /// No such endpoint.
    UnknownEndpoint,
}

impl core::fmt::Display for LinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            LinkError::TooManyLinks => "every link slot is in use",
            LinkError::UnknownLink => "no such link",
            LinkError::UnknownEndpoint => "no such endpoint",
        })
    }
}

impl core::error::Error for LinkError {}

/// What an engine holds now, against its capacities ([`Engine::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Peers on record (open, connecting, or lost and still referenced).
    pub peers: usize,
    /// Links, in any state.
    pub links: usize,
    /// Links still in their handshake.
    pub handshaking: usize,
    /// Memory registrations.
    pub registrations: usize,
    /// Puts and gets not yet complete, this side's and peers' gets served.
    pub operations: usize,
    /// Events waiting to be polled.
    pub events: usize,
    /// Events owed and not queued yet: completions of operations under
    /// way, messages received and not yet delivered. Their places in the
    /// event queue are kept.
    pub events_owed: usize,
}

#[derive(Debug)]
enum Pending {
    Received {
        from: EndpointId,
        tag: Tag,
        frag: Fragment,
        len: usize,
    },
    Done(Completion),
}

/// The engine of one process. `'r` is the fragment pools' region, `'m`
/// the lifetime of registered memory; `PEERS`, `LINKS` and `REGS` bound the
/// peers, connections and registrations.
pub struct Engine<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize> {
    config: EngineConfig,
    attributes: Attributes,
    pools: FragmentPools<&'r [PoolCell]>,
    regs: Regs<'m, REGS>,
    peers: [Option<Peer>; PEERS],
    /// Bumped each time a peer slot is freed: the high half of the slot's
    /// [`EndpointId`]s, so that a handle of a forgotten peer is refused.
    generations: [u16; PEERS],
    /// Starts of processes whose records were freed unannounced (see
    /// [`Engine::forget_lost_peers`]): a link from one of them is refused
    /// with Shutdown, as from a lost peer still on record.
    forgotten: Deque<(ProcName, u64), PEERS>,
    /// A peer nobody holds (`refs == 0`) was lost: its slot is to be
    /// freed at the end of the current call.
    lost_unheld: bool,
    links: [Option<Link>; LINKS],
    ops: [Option<Op>; MAX_OPS],
    events: Deque<Pending, EVENTS>,
    /// Events owed but not queued yet: the completions of accepted
    /// operations that end with one, and the SENDs received into a
    /// fragment and not yet delivered. Each is sure of its place in
    /// `events`: nothing is taken on without room for its event.
    owed: usize,
    /// The message [`Btl::poll_event`] handed out last: its fragment is
    /// freed, and its credit given back to its sender, at the next call.
    ///
    /// [`Btl::poll_event`]: crate::btl::Btl::poll_event
    delivered: Option<(EndpointId, Fragment)>,
    connects: Deque<ConnectRequest, PEERS>,
    /// The peer and link slots in use: what the per-call scans visit, so
    /// that an engine sized for many peers costs little with few.
    present_peers: Vec<u16, PEERS>,
    present_links: Vec<u16, LINKS>,
    /// Bit `i`: the operation in slot `i` still has packets to hand out
    /// (a put, or a get served); what the bulk scan visits.
    sending: u64,
    closes: Deque<LinkId, LINKS>,
    /// Links made so far (mod 2^16): the generation of the next one.
    links_made: u16,
    next_op: u64,
    now: Instant,
    finalized: bool,
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// An engine with `config`, its descriptors and receive fragments from
    /// `pools`, started at `now` on the driver's clock (what a connection
    /// asked for at once is timed from).
    ///
    /// The body limit it announces and enforces (`max_body`) is at most
    /// what its largest receive fragment holds as a SEND: a peer that
    /// keeps to it is never refused for size.
    pub fn new(
        mut config: EngineConfig,
        pools: FragmentPools<&'r [PoolCell]>,
        now: Instant,
    ) -> Self {
        const { assert!(PEERS <= 1 << 16, "an engine has at most 65536 peers") };
        let largest_send =
            pools.view().class_size(FragmentClass::Max) as u64 + SendRepr::LEN as u64;
        config.max_body = config
            .max_body
            .min(largest_send)
            .clamp(MIN_MAX_BODY, MAX_MAX_BODY);
        config.handshake_budget = config
            .handshake_budget
            .clamp(1, LINKS.min(u16::MAX as usize) as u16);
        config.handshake_budget_per_source = config
            .handshake_budget_per_source
            .clamp(1, config.handshake_budget);
        let mut eager = pools
            .view()
            .class_size(FragmentClass::Eager)
            .saturating_sub(SEND_PREFIX);
        let mut max = pools
            .view()
            .class_size(FragmentClass::Max)
            .saturating_sub(SEND_PREFIX);
        config.links = config.links.clamp(1, MAX_PEER_LINKS as u8);
        if let Framing::Datagram { mtu } = config.framing {
            // One frame per datagram: messages and PUT packets fit the MTU;
            // one association per peer.
            config.links = 1;
            let room = mtu.saturating_sub(SEND_PREFIX + CHECKSUM_LEN);
            eager = eager.min(room);
            max = max.min(room);
            let put_room = mtu.saturating_sub(PUT_PREFIX + CHECKSUM_LEN) as u64;
            config.put_chunk = config.put_chunk.min(put_room).max(1);
        }
        Engine {
            attributes: Attributes {
                name: "engine",
                eager_limit: eager,
                max_send_size: max,
                rdma_pipeline_send_length: max,
                rdma_pipeline_frag_size: config.put_chunk as usize,
                put_limit: u64::MAX >> 1,
                put_alignment: 1,
                get_limit: u64::MAX >> 1,
                get_alignment: 1,
                exclusivity: Exclusivity::LOW.plus(100),
                latency_us: 100,
                bandwidth_mbps: 10_000,
                flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET | BtlFlags::SEND_INPLACE,
                registration_handle_size: 8,
            },
            config,
            pools,
            regs: Registrations::inline(),
            peers: core::array::from_fn(|_| None),
            generations: [0; PEERS],
            forgotten: Deque::new(),
            lost_unheld: false,
            links: core::array::from_fn(|_| None),
            ops: [None; MAX_OPS],
            events: Deque::new(),
            owed: 0,
            delivered: None,
            connects: Deque::new(),
            present_peers: Vec::new(),
            present_links: Vec::new(),
            sending: 0,
            closes: Deque::new(),
            links_made: 0,
            next_op: 0,
            now,
            finalized: false,
        }
    }

    /// Sets the attributes' name (`tcp`, `udp`, ...), for the driver that
    /// wraps the engine.
    pub fn set_name(&mut self, name: &'static str) {
        self.attributes.name = name;
    }

    // ----- driver interface ---------------------------------------------

    /// A connection the engine wants opened, if any.
    pub fn poll_connect(&mut self) -> Option<ConnectRequest> {
        // A peer lost (or finalized) since it asked wants no connection,
        // nor does a link index that has one again.
        // Nor one that a connection in its handshake will carry.
        while let Some(req) = self.connects.pop_front() {
            if self.peer(req.endpoint).is_some_and(|p| {
                matches!(p.state, PeerState::Connecting { .. } | PeerState::Open)
                    && p.links[usize::from(req.link_index)].is_none()
            }) && !self.link_coming(req.proc, req.link_index)
            {
                return Some(req);
            }
        }
        None
    }

    /// Whether a connection in its handshake will carry link `index` of
    /// process `proc`: one this side opened, or one whose HELLO named it.
    pub(super) fn link_coming(&self, proc: ProcName, index: u8) -> bool {
        self.present_links.iter().any(|&s| {
            self.links[usize::from(s)].as_ref().is_some_and(|l| {
                l.state == LinkState::Handshaking
                    && match l.peer {
                        Some(p) => {
                            l.index == index
                                && self.peers[p].as_ref().is_some_and(|peer| peer.proc == proc)
                        }
                        None => l.handshake.peer().is_some_and(|h| {
                            ProcName::new(h.job, h.rank) == proc && h.link_index == u16::from(index)
                        }),
                    }
            })
        })
    }

    /// A link the driver should close now that its last bytes are written.
    pub fn poll_close(&mut self) -> Option<LinkId> {
        self.closes.pop_front()
    }

    /// Why `link` is closing, until the driver reports it closed; `None`
    /// for a link that is not closing (or not current).
    pub fn link_end(&self, link: LinkId) -> Option<LinkEnd> {
        let l = self.links[self.slot_of(link)?].as_ref()?;
        let (reason, by_peer) = l.end?;
        Some(LinkEnd {
            reason,
            by_peer,
            verified: l.handshake.is_verified(),
        })
    }

    /// The driver opened the connection `req` asked for; `nonce` is 16
    /// fresh random bytes for its handshake.
    pub fn handle_connected(
        &mut self,
        req: ConnectRequest,
        nonce: [u8; NONCE_LEN],
        now: Instant,
    ) -> Result<LinkId, LinkError> {
        self.now = now;
        let index = self
            .peer_slot(req.endpoint)
            .ok_or(LinkError::UnknownEndpoint)?;
        let proc = self.peer_proc(index);
        let link_index = usize::from(req.link_index);
        if link_index >= MAX_PEER_LINKS {
            return Err(LinkError::UnknownEndpoint);
        }
        let id = self.new_link(Some(proc), nonce, now, req.link_index)?;
        if let Some(link) = self.link_mut(id) {
            link.peer = Some(index);
        }
        if let Some(peer) = self.peers[index].as_mut()
            && peer.links[link_index].is_none()
        {
            peer.links[link_index] = Some(id);
        }
        self.flush_handshake(usize::from(id.slot));
        Ok(id)
    }

    /// The driver accepted a connection from an unknown peer at `source`;
    /// the engine learns who it is from the HELLO.
    ///
    /// Accepted links still in their handshake are held to the handshake
    /// budget ([`EngineConfig::handshake_budget`], and per source): beyond
    /// it the oldest is dropped, a silent one first, with a CLOSE saying
    /// `ResourceExhausted`. Links of verified peers are never dropped for
    /// a stranger. [`LinkError::TooManyLinks`] means every slot is in use:
    /// the driver refuses the connection (over a stream, with a CLOSE of
    /// its own saying `ResourceExhausted`, so the peer knows why).
    pub fn handle_accepted(
        &mut self,
        source: Source,
        nonce: [u8; NONCE_LEN],
        now: Instant,
    ) -> Result<LinkId, LinkError> {
        self.now = now;
        self.make_room_for_stranger(source);
        let id = self.new_link(None, nonce, now, 0)?;
        if let Some(l) = self.link_mut(id) {
            l.source = Some(source);
        }
        self.flush_handshake(usize::from(id.slot));
        Ok(id)
    }

    /// The connection `req` asked for could not be opened, for `why`.
    ///
    /// A peer never open is lost at once (`PeerLost(Refused)` or
    /// `PeerLost(Unreachable)`); a reconnecting one is tried again after a
    /// backoff, until its peer timeout, or, refused every time, until
    /// [`EngineConfig::refused_timeout`] after the first refusal.
    pub fn handle_connect_failed(
        &mut self,
        req: ConnectRequest,
        why: ConnectFailure,
        now: Instant,
    ) {
        self.now = now;
        let Some(index) = self.peer_slot(req.endpoint) else {
            return;
        };
        let refused_timeout = self.config.refused_timeout;
        let Some(peer) = self.peers[index].as_mut() else {
            return;
        };
        match peer.state {
            // Another link carries the peer: try this one again later.
            PeerState::Open => self.retry_link_later(index, req.link_index),
            PeerState::Connecting { .. } if peer.was_open => match why {
                ConnectFailure::Refused => {
                    let first = *peer.refused_since.get_or_insert(now);
                    if now - first >= refused_timeout {
                        self.lose_peer(index, LostReason::Refused);
                    } else {
                        self.retry_later(index);
                    }
                }
                ConnectFailure::Unreachable => {
                    peer.refused_since = None;
                    self.retry_later(index);
                }
            },
            PeerState::Connecting { .. } => {
                let reason = match why {
                    ConnectFailure::Refused => LostReason::Refused,
                    ConnectFailure::Unreachable => LostReason::Unreachable,
                };
                self.lose_peer(index, reason);
            }
            _ => {}
        }
        self.forget_lost_peers();
    }

    /// Bytes read from `link`; returns how many were taken. Fewer than
    /// given means the engine waits for receive fragments: hand the rest
    /// again after the upper layer has polled its events.
    pub fn handle_stream(
        &mut self,
        link: LinkId,
        data: &[u8],
        now: Instant,
    ) -> Result<usize, LinkError> {
        self.now = now;
        let slot = self.slot_of(link).ok_or(LinkError::UnknownLink)?;
        self.mark_heard(slot, data);
        let taken = match self.read_all(slot, data) {
            Some(taken) => {
                self.progress_queues();
                taken
            }
            None => data.len(),
        };
        self.forget_lost_peers();
        Ok(taken)
    }

    /// One datagram received on `link` (datagram framing): one whole frame.
    ///
    /// A datagram that is damaged, cut short or not a frame is dropped, as
    /// the network might have dropped it, and retransmission repairs the
    /// loss; only during the handshake does it fail the link, with a CLOSE
    /// that says why. A frame that finds no receive fragment is dropped
    /// too, unacknowledged, and comes again.
    pub fn handle_datagram(
        &mut self,
        link: LinkId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), LinkError> {
        self.now = now;
        let slot = self.slot_of(link).ok_or(LinkError::UnknownLink)?;
        self.mark_heard(slot, datagram);
        self.read_datagram(slot, datagram);
        self.forget_lost_peers();
        Ok(())
    }

    fn read_datagram(&mut self, slot: usize, datagram: &[u8]) {
        let limits = Limits::new(self.config.max_body);
        let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if l.state == LinkState::Closing {
            return;
        }
        if let Err(e) = crate::wire::parse_datagram(datagram, &limits) {
            let damaged = matches!(e, WireError::ChecksumMismatch { .. });
            if l.state == LinkState::Handshaking && !damaged {
                self.fail_link(slot, e.close_reason());
            }
            return;
        }
        // A fresh reader per datagram, each one frame from its start,
        // whose checksum parse_datagram has just checked.
        l.reader = StreamReader::for_checked_frame(limits);
        l.receiving = Receiving::None;
        let Some(taken) = self.read_all(slot, datagram) else {
            return;
        };
        if taken < datagram.len()
            && let Some(l) = self.links[slot].as_mut()
        {
            // Waiting for a receive fragment, which holds nothing yet.
            l.receiving = Receiving::None;
        }
        self.progress_queues();
    }

    /// The connection `link` broke or was closed by the peer.
    pub fn handle_closed(&mut self, link: LinkId, now: Instant) {
        self.now = now;
        let Some(slot) = self.slot_of(link) else {
            return;
        };
        let Some(l) = self.links[slot].take() else {
            return;
        };
        self.present_links.retain(|&s| usize::from(s) != slot);
        if let Receiving::Send { frag, .. } = l.receiving {
            self.drop_received(frag);
        }
        if let (Some(p), Some(out)) = (l.peer, l.detached) {
            // The peer has it: only the rest of its frame was not written.
            self.release(p, out, Ok(()));
        }
        if let Some(p) = l.peer
            && self.peers[p]
                .as_mut()
                .is_some_and(|peer| peer.forget_link(link))
        {
            self.link_gone(p, l.index);
        }
        self.forget_lost_peers();
    }

    /// The next bytes to write on `link`, if any.
    ///
    /// Over datagrams each transmit is one datagram: send it whole, then
    /// report it with [`handle_written`](Self::handle_written) (also if it
    /// had to be dropped).
    pub fn poll_transmit(&mut self, link: LinkId) -> Option<Transmit<'_>> {
        let slot = self.slot_of(link)?;
        self.queue_ack_if_owed(slot);
        if self.datagram() {
            return self.poll_datagram(link);
        }
        let l = self.links.get_mut(slot)?.as_mut()?;
        let peer = l.peer.and_then(|p| self.peers[p].as_ref());
        // Packets acknowledged since they were queued (sent on another
        // link too) are not written at all, unless begun.
        while l.written == 0
            && let Some(TxItem::Reliable { seq }) = l.tx.front()
            && peer.is_some_and(|p| p.send.get(*seq).is_none())
        {
            l.tx.pop_front();
        }
        let l = self.links.get(slot)?.as_ref()?;
        let peer = l.peer.and_then(|p| self.peers[p].as_ref());
        let mut segments: Vec<&[u8], MAX_SEGMENTS> = Vec::new();
        let mut skip = l.written;
        for item in l.tx.iter() {
            if segments.len() + 3 > MAX_SEGMENTS {
                break;
            }
            item_segments(
                item,
                peer,
                l.detached.as_ref(),
                self.pools.view(),
                &self.regs,
                &mut segments,
                &mut skip,
            );
        }
        if segments.is_empty() {
            return None;
        }
        Some(Transmit { link, segments })
    }

    /// `n` bytes of what [`poll_transmit`](Self::poll_transmit) handed out
    /// were written (over datagrams: the datagram was sent, whatever `n`).
    pub fn handle_written(&mut self, link: LinkId, n: usize) {
        let Some(slot) = self.slot_of(link) else {
            return;
        };
        let mut left = n;
        let datagram = self.datagram();
        let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if datagram {
            l.tx.pop_front();
            if l.state == LinkState::Closing && l.tx.is_empty() {
                let _ = self.closes.push_back(link);
            }
            return;
        }
        let p = l.peer;
        let peer = p.and_then(|p| self.peers[p].as_ref());
        let checksum = peer.is_some_and(|p| p.checksum);
        let mut finished = None;
        while let Some(front) = l.tx.front() {
            let len = match front {
                TxItem::Control { len, .. } => usize::from(*len),
                TxItem::Reliable { seq } => peer.and_then(|p| p.send.get(*seq)).map_or(0, |out| {
                    frame_len(out, checksum, self.pools.view(), &self.regs)
                }),
                TxItem::Detached => l.detached.as_ref().map_or(0, |out| {
                    frame_len(out, checksum, self.pools.view(), &self.regs)
                }),
            };
            let rest = len.saturating_sub(l.written);
            if left < rest {
                l.written += left;
                break;
            }
            left -= rest;
            l.written = 0;
            if let Some(TxItem::Detached) = l.tx.pop_front() {
                finished = l.detached.take();
            }
        }
        if l.state == LinkState::Closing && l.tx.is_empty() {
            let _ = self.closes.push_back(link);
        }
        if let (Some(p), Some(out)) = (p, finished) {
            // Its last byte is written: the acknowledged packet completes.
            self.release(p, out, Ok(()));
        }
    }

    /// Time passed: handshakes and silent peers time out, keepalives go
    /// out, and over datagrams lost packets and handshakes go again.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        let datagram = self.datagram();
        let repeat_after = self.config.rtt.normalized().initial_rto;
        for slot in self.present_links.clone().into_iter().map(usize::from) {
            let Some(l) = self.links[slot].as_mut() else {
                continue;
            };
            if l.state != LinkState::Handshaking {
                continue;
            }
            if now - l.opened_at >= self.config.handshake_timeout {
                let (id, index) = (l.id, l.index);
                let reconnecting = l.peer.filter(|&p| {
                    self.peers[p]
                        .as_ref()
                        .is_some_and(|peer| peer.was_open && peer.links.contains(&Some(id)))
                });
                if let Some(p) = reconnecting {
                    // Not the peer's fault: try again after a backoff.
                    if let Some(peer) = self.peers[p].as_mut() {
                        peer.forget_link(id);
                    }
                    self.fail_link(slot, CloseReason::Normal);
                    self.link_gone(p, index);
                } else {
                    self.fail_link(slot, CloseReason::Timeout);
                }
            } else if datagram && now - l.hello_sent_at >= repeat_after {
                l.hello_sent_at = now;
                l.handshake.repeat();
                self.flush_handshake(slot);
            }
        }
        for p in self.present_peers.clone().into_iter().map(usize::from) {
            let Some(peer) = self.peers[p].as_mut() else {
                continue;
            };
            if self.config.lost_by(peer).is_some_and(|t| now >= t) {
                self.lose_peer(p, LostReason::Timeout);
                continue;
            }
            if let PeerState::Connecting {
                since,
                retry: Some(at),
            } = peer.state
                && now >= at
            {
                peer.state = PeerState::Connecting { since, retry: None };
                self.request_connect(p, 0);
                continue;
            }
            if peer.state != PeerState::Open {
                continue;
            }
            for index in 0..MAX_PEER_LINKS {
                if let Some(peer) = self.peers[p].as_mut()
                    && peer.link_retry[index].is_some_and(|at| now >= at)
                {
                    peer.link_retry[index] = None;
                    self.request_connect(p, index as u8);
                }
            }
            if !datagram
                && self.peers[p]
                    .as_ref()
                    .and_then(|peer| peer.ack_owed_since)
                    .is_some_and(|since| now >= since + self.config.ack_delay)
            {
                self.flush_ack(p);
            }
            let Some(peer) = self.peers[p].as_mut() else {
                continue;
            };
            let mut lost: Vec<u64, WINDOW> = Vec::new();
            if datagram {
                let rto = peer.rtt.rto();
                while let Some(resend) = peer.send.next_retransmit(now, rto) {
                    let _ = lost.push(resend.seq);
                }
                if !lost.is_empty() {
                    peer.rtt.on_timeout();
                }
            }
            let probe = self
                .config
                .probe_at(peer, datagram)
                .is_some_and(|t| now >= t);
            if probe && datagram && (peer.starved() || peer.probe_unanswered()) {
                // Asked again ever more slowly while the peer grants nothing
                // (a receiver that stopped polling) or answers nothing.
                peer.rtt.on_timeout();
            }
            // A stream whose last probe went unanswered for a whole
            // interval carries nothing any more (a middlebox dropped its
            // bytes, or a network dropped them without telling TCP, as
            // turmoil's does across a partition): its links are dropped
            // and the peer is connected again, well within the peer
            // timeout, and what it had not acknowledged goes again.
            let unanswered = !datagram && peer.state == PeerState::Open && peer.probe_unanswered();
            for seq in lost {
                self.resend(p, seq);
            }
            if probe && unanswered {
                self.reset_links(p);
            } else if probe {
                self.probe(p);
            }
        }
        self.forget_lost_peers();
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let datagram = self.datagram();
        let repeat_after = self.config.rtt.normalized().initial_rto;
        let links = self
            .present_links
            .iter()
            .filter_map(|&s| self.links[usize::from(s)].as_ref())
            .filter(|l| l.state == LinkState::Handshaking)
            .map(|l| {
                let fail = l.opened_at + self.config.handshake_timeout;
                if datagram {
                    fail.min(l.hello_sent_at + repeat_after)
                } else {
                    fail
                }
            });
        let peers = self
            .present_peers
            .iter()
            .filter_map(|&p| self.peers[usize::from(p)].as_ref())
            .filter_map(|p| {
                let retransmit = match p.state {
                    PeerState::Open if datagram => p.send.retransmit_deadline(p.rtt.rto()),
                    PeerState::Connecting { retry, .. } => retry,
                    _ => None,
                };
                let link_retry = match p.state {
                    PeerState::Open => p.link_retry.iter().flatten().copied().min(),
                    _ => None,
                };
                let ack = match p.state {
                    PeerState::Open if !datagram => {
                        p.ack_owed_since.map(|since| since + self.config.ack_delay)
                    }
                    _ => None,
                };
                [
                    self.config.lost_by(p),
                    retransmit,
                    self.config.probe_at(p, datagram),
                    link_retry,
                    ack,
                ]
                .into_iter()
                .flatten()
                .min()
            });
        links.chain(peers).min()
    }

    /// Events ready for [`Btl::poll_event`], without moving
    /// anything: what a driver checks before it waits.
    ///
    /// [`Btl::poll_event`]: crate::btl::Btl::poll_event
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// Whether `endpoint`'s link has finished its handshake.
    pub fn is_connected(&self, endpoint: EndpointId) -> bool {
        self.peer(endpoint)
            .is_some_and(|p| p.state == PeerState::Open)
    }

    /// The peers on record, whoever added them (the user, or a peer that
    /// connected): what a server iterates to see its clients.
    pub fn endpoints(&self) -> impl Iterator<Item = EndpointId> + '_ {
        self.present_peers
            .iter()
            .map(|&p| self.endpoint(usize::from(p)))
    }

    /// What this side still owes its peers: packets sent and not yet
    /// acknowledged, sends and gets queued, and puts and gets not yet
    /// complete. Zero means every send so far reached its peer (or failed
    /// and was reported): what a graceful close waits for before
    /// [`finalize`](crate::btl::Btl::finalize).
    pub fn outstanding(&self) -> usize {
        let packets: usize = self
            .present_peers
            .iter()
            .filter_map(|&p| self.peers[usize::from(p)].as_ref())
            .filter(|p| !matches!(p.state, PeerState::Lost(_)))
            .map(|p| p.send.len() + p.queue.len() + p.answers.len())
            .sum();
        packets + self.ops.iter().flatten().count()
    }

    /// How much of its fixed storage the engine uses now: what an operator
    /// compares with the capacities, and a test with a baseline.
    pub fn usage(&self) -> Usage {
        Usage {
            peers: self.present_peers.len(),
            links: self.present_links.len(),
            handshaking: self
                .present_links
                .iter()
                .filter_map(|&s| self.links[usize::from(s)].as_ref())
                .filter(|l| l.state == LinkState::Handshaking)
                .count(),
            registrations: self.regs.len(),
            operations: self.ops.iter().flatten().count(),
            events: self.events.len(),
            events_owed: self.owed,
        }
    }

    /// Whether [`finalize`](crate::btl::Btl::finalize) has been called.
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// The largest packet body this engine accepts and announces.
    pub fn max_body(&self) -> u64 {
        self.config.max_body
    }

    // ----- internals ---------------------------------------------------

    pub(super) fn datagram(&self) -> bool {
        matches!(self.config.framing, Framing::Datagram { .. })
    }

    /// The front packet of a datagram link, skipping retained packets
    /// acknowledged since they were queued.
    fn poll_datagram(&mut self, link: LinkId) -> Option<Transmit<'_>> {
        let l = self.links.get_mut(usize::from(link.slot))?.as_mut()?;
        let peer = l.peer.and_then(|p| self.peers[p].as_ref());
        while let Some(TxItem::Reliable { seq }) = l.tx.front() {
            if peer.is_some_and(|p| p.send.get(*seq).is_some()) {
                break;
            }
            l.tx.pop_front();
        }
        let mut segments: Vec<&[u8], MAX_SEGMENTS> = Vec::new();
        let item = l.tx.front()?;
        item_segments(
            item,
            peer,
            None,
            self.pools.view(),
            &self.regs,
            &mut segments,
            &mut 0,
        );
        (!segments.is_empty()).then_some(Transmit { link, segments })
    }
}
