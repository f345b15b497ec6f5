//! The engine of one process over stream or datagram links: handshakes,
//! framing, reliable numbered packets, credits, sends, puts and gets, and
//! the `Btl` interface on top. It does no I/O: the driver reports
//! connections, bytes and time, and carries out the writes, connects and
//! closes it asks for ([`driver`] has the loop every driver runs).
//!
//! The engine dispatches between small state machines that own their
//! state, each testable alone:
//!
//! ```text
//!                   Engine (tables lent by the caller: Storage)
//!        ┌────────────────┬──────────────┴────────┬─────────────────┐
//!   Peer (per process)  Link (per connection)   Ops (puts, gets)   Events
//!   ├ SendWindow         ├ Handshake            └ transfers, mail   └ ring,
//!   ├ RecvWindow         ├ StreamReader (mover)                       places
//!   ├ Credits, AckOwed   └ Outbox (write queue)                       kept
//!   ├ RttEstimator
//!   └ queues, answers, timers
//! ```
//!
//! A [`Peer`] owns its windows, credits, acknowledgement state, queues and
//! timers; a [`Link`] its handshake, reader and write queue. The
//! [`Framing`] — [`Stream`] or [`Datagram`] — is part of the engine's type. [`window`] numbers every
//! reliable packet, acknowledges, retransmits, suppresses duplicates and
//! restores order; [`rtt`] turns acknowledgement round trips into a
//! retransmission timeout. Everything takes the time from the driver
//! ([`Instant`]) and lives in storage the caller chose ([`storage`]).
//!
//! The in-memory drivers the engine's tests run on (two engines over byte
//! pipes, or over a faulty datagram network) are in the `btl-tests` crate.

mod acks;
mod address;
mod admission;
pub mod config;
mod credits;
pub mod driver;
mod events;
mod forgotten;
pub mod framing;
pub mod handshake;
mod inbound;
mod interface;
pub mod journal;
mod keys;
pub mod link;
pub mod metrics;
pub mod mover;
mod ops;
mod outbox;
mod packet;
pub mod peer;
mod progress;
pub mod rdma;
#[cfg(any(test, feature = "alloc"))]
pub mod replay;
mod room;
pub mod rtt;
mod schedule;
mod scheduled;
mod share;
mod shared;
pub mod storage;
pub mod tables;
#[cfg(test)]
mod testkit;
mod timers;
pub mod window;

pub use address::{COOKIE_FRAME_LEN, Refusal, Stranger};
pub use events::EventSlot;
pub use forgotten::Start;
pub use framing::{Datagram, Framing, Stream};
pub use ops::OpSlot;
pub use packet::{HEADER_RESERVE, MAX_SEGMENTS, Segments};
pub use peer::MAX_PEER_LINKS;
pub use rdma::{Rdma, RdmaFailure, RdmaKind, RdmaToken};
pub use schedule::Slot;
pub use storage::{Lent, Storage};
pub use tables::{Capacities, Inline, Tables};

use heapless::Vec;

use crate::btl::{Access, Attributes, BtlError, BtlFlags, LostReason, Registrations, RejectCode};
use crate::endpoint::{EndpointId, ProcName};
use crate::mca::Exclusivity;
use crate::pool::{Fragment, FragmentClass, FragmentPools};
use crate::table::Key;
use crate::time::Instant;
use crate::wire::{
    CloseReason, GetRepr, Limits, MAX_MAX_BODY, MIN_MAX_BODY, NONCE_LEN, RejectRepr, SendRepr,
};

use config::EngineConfig;
use events::Events;
use forgotten::Forgotten;
use handshake::LocalHello;
use journal::{Journal, journal_call, journal_out};
use link::{Dropped, Link, LinkState};
use metrics::{ModuleMetrics, PeerMetrics, PeerReport, Refusals, Refused};
use ops::{Mail, Ops};
use peer::{Hello, Opened, Peer};
use shared::Shared;

/// A connection to one peer, as the driver and the engine name it. Valid
/// from the `handle_connected`/`handle_accepted` that made it until the
/// driver's `handle_closed`; after that the engine refuses it
/// ([`LinkError::UnknownLink`]) even once its slot serves a new link, so a
/// driver's late call about an old connection never touches a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(Key);

impl LinkId {
    /// The slot of the engine's link table it names: no two live links
    /// share one (a closed link's slot may serve a new link, under another
    /// `LinkId`), so a driver may keep what it knows of each link in a
    /// table indexed by it, below the engine's link capacity.
    pub fn slot(self) -> usize {
        usize::from(self.0.index)
    }
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
    /// Why this side gave the link's peer up, when that ended the link
    /// (the CLOSE then says it in the wire's terms: a protocol violation,
    /// a stalled peer's `Timeout`).
    pub lost: Option<LostReason>,
}

/// Slices the driver writes, in order, on one link (one vectored write).
#[derive(Debug)]
pub struct Transmit<'a> {
    /// The link to write on.
    pub link: LinkId,
    /// The bytes, in order.
    pub segments: Segments<'a>,
}

/// Where a connection a peer opened (or a datagram source) comes from, as
/// the driver names it: equal for every connection from one network
/// address (its IP address folded to 64 bits, say), so that one host cannot
/// take every slot of the handshake budget
/// ([`EngineConfig::handshake_budget_per_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source(pub u64);

impl Source {
    /// The source an IPv4 address names.
    pub const fn ipv4(octets: [u8; 4]) -> Source {
        Source(u32::from_be_bytes(octets) as u64)
    }

    /// The source an IPv6 address names: its /64 prefix, since one host
    /// has a whole prefix to choose addresses from. The top bit keeps it
    /// apart from every IPv4 source.
    pub const fn ipv6(octets: [u8; 16]) -> Source {
        let [a, b, c, d, e, f, g, h, ..] = octets;
        Source(u64::from_be_bytes([a, b, c, d, e, f, g, h]) | 1 << 63)
    }
}

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
    /// Its process name.
    pub proc: ProcName,
    /// The name its addresses are listed under, for the driver's lookup:
    /// `proc`, or for a peer reached by address alone the stand-in
    /// ([`ProcName::unnamed`]) the driver listed its address under.
    pub listed_as: ProcName,
    /// Which of the peer's links this is, from 0 (below
    /// [`EngineConfig::links`]): the driver pairs addresses by it.
    pub link_index: u8,
}

/// Why the driver's report could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// Every link slot is in use.
    TooManyLinks,
    /// The connection's source holds all it may of the link slots
    /// ([`EngineConfig::source_share`]).
    SourceFull,
    /// No such link (closed, or never opened).
    UnknownLink,
    /// No such endpoint.
    UnknownEndpoint,
}

impl core::fmt::Display for LinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            LinkError::TooManyLinks => "every link slot is in use",
            LinkError::SourceFull => "its address holds its share of the link slots",
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

use scheduled::{Links, Peers};

/// The engine of one process: its tables held as `S` says, its links
/// framed as `F` says, with a window of `W` packets (1 to 64) each way per
/// peer.
pub struct Engine<S: Storage, F: Framing = Stream, const W: usize = 64> {
    framing: F,
    attributes: Attributes,
    shared: Shared<S>,
    peers: Peers<S, W>,
    links: Links<S, W>,
    forgotten: Forgotten<S::Table<Start>>,
    /// The message [`Btl::poll_event`] handed out last: its fragment is
    /// freed, and its credit given back to its sender, at the next call.
    ///
    /// [`Btl::poll_event`]: crate::btl::Btl::poll_event
    delivered: Option<(EndpointId, Fragment)>,
    /// A peer nobody holds (no reference) was lost: its record is to be
    /// freed at the end of the call.
    lost_unheld: bool,
    /// Some peer may want a connection, some link may be closing: what
    /// `poll_connect` and `poll_close` look for, so that they scan nothing
    /// when nothing is asked.
    connect_hint: bool,
    close_hint: bool,
    /// Some peer was refused something with `OutOfResource` and waits for
    /// its `Room` event: what `poll_room` looks for.
    room_hint: bool,
    /// Some peer's `Room` would be made now, as of the last `progress`
    /// (a driver's every turn): counted among the events ready.
    room_ready: bool,
    /// A round of [`poll_ready_link`](Self::poll_ready_link) is under
    /// way: it hands out what was ready when it began.
    ready_round: bool,
    /// Links made so far: their order of age.
    serial: u32,
    finalized: bool,
    /// Where its calls are recorded ([`journal`]).
    journal: S::Journal,
    /// The clock as the journal last recorded it.
    journal_clock: Instant,
    /// The traffic of peers whose records were freed, summed.
    departed: PeerMetrics,
    /// What was refused before a link opened.
    refusals: Refusals,
}

impl<S: Storage, F: Framing, const W: usize> core::fmt::Debug for Engine<S, F, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.attributes.name)
            .field("me", &self.shared.config.me)
            .field("framing", &self.framing)
            .field("usage", &self.usage())
            .field("finalized", &self.finalized)
            .finish_non_exhaustive()
    }
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// An engine with `config`, its links framed as `framing`, its state in
    /// `tables`, its descriptors and receive fragments from `pools`,
    /// started at `now` on the driver's clock (what a connection asked for
    /// at once is timed from).
    ///
    /// The body limit it announces and enforces (`max_body`) is at most
    /// what its largest receive fragment holds as a SEND: a peer that
    /// keeps to it is never refused for size.
    pub fn new(
        mut config: EngineConfig,
        framing: F,
        tables: Tables<S, W>,
        pools: FragmentPools<S::Region>,
        now: Instant,
    ) -> Self {
        const { assert!(W >= 1 && W <= 64, "a window covers 1 to 64 packets") };
        let view = pools.view();
        let largest_send = view.class_size(FragmentClass::Max) as u64 + SendRepr::LEN as u64;
        config.max_body = config
            .max_body
            .min(largest_send)
            .clamp(MIN_MAX_BODY, MAX_MAX_BODY);
        let links = Links::new(tables.links, tables.link_order, tables.link_schedule);
        let most_strangers = links.capacity().clamp(1, admission::MAX_CANDIDATES);
        config.handshake_budget = config.handshake_budget.clamp(1, most_strangers as u16);
        config.handshake_budget_per_source = config
            .handshake_budget_per_source
            .clamp(1, config.handshake_budget);
        config.links = config.links.clamp(1, MAX_PEER_LINKS as u8);
        let mut eager = view
            .class_size(FragmentClass::Eager)
            .saturating_sub(HEADER_RESERVE);
        let mut max = view
            .class_size(FragmentClass::Max)
            .saturating_sub(HEADER_RESERVE);
        framing.fit(&mut config, &mut eager, &mut max, W);
        Engine {
            framing,
            attributes: Attributes {
                name: "engine",
                eager_limit: eager,
                max_send_size: max,
                // A get moves through the same link as sends, and a
                // ping-pong over TCP measured it slower from 256 to 512 KiB
                // and faster from 1 MiB: no length is said to be better yet.
                rdma_pipeline_send_length: usize::MAX,
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
            shared: Shared {
                config,
                pools,
                regs: Registrations::new(tables.registrations),
                ops: Ops::new(tables.ops),
                events: Events::new(tables.events),
                peers: 0,
                now,
                unclean_losses: (0, None),
            },
            peers: Peers::new(tables.peers, tables.peer_order, tables.peer_schedule),
            links,
            forgotten: Forgotten::new(tables.forgotten),
            delivered: None,
            lost_unheld: false,
            connect_hint: false,
            close_hint: false,
            room_hint: false,
            room_ready: false,
            ready_round: false,
            serial: 0,
            finalized: false,
            journal: tables.journal,
            journal_clock: now,
            departed: PeerMetrics::default(),
            refusals: Refusals::default(),
        }
    }

    /// Sets the attributes' name (`tcp`, `udp`, ...), for the driver that
    /// wraps the engine.
    pub fn set_name(&mut self, name: &'static str) {
        self.attributes.name = name;
    }

    /// The configuration in force (after the engine fitted it to its pools
    /// and framing).
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    // ----- driver interface ---------------------------------------------

    /// A connection the engine wants opened, if any.
    pub fn poll_connect(&mut self) -> Option<ConnectRequest> {
        if !self.connect_hint {
            return None;
        }
        let result = self.next_connection();
        journal_call!(self, journal::Call::PollConnect);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn next_connection(&mut self) -> Option<ConnectRequest> {
        if !self.connect_hint {
            return None;
        }
        for i in 0..self.peers.len() {
            let Some(id) = self.peers.id_at(i) else {
                continue;
            };
            while let Some(peer) = self.peers.get_mut(id)
                && let Some(index) = peer.poll_connect()
            {
                let (proc, listed_as) = (peer.proc(), peer.listed_as());
                // Nor one that a connection in its handshake will carry.
                if !self.link_coming(proc, index) {
                    return Some(ConnectRequest {
                        endpoint: id,
                        proc,
                        listed_as,
                        link_index: index,
                    });
                }
            }
        }
        self.connect_hint = false;
        None
    }

    /// A link the driver should close now that its last bytes are written.
    pub fn poll_close(&mut self) -> Option<LinkId> {
        if !self.close_hint {
            return None;
        }
        let result = self.next_close();
        journal_call!(self, journal::Call::PollClose);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn next_close(&mut self) -> Option<LinkId> {
        if !self.close_hint {
            return None;
        }
        for i in 0..self.links.len() {
            let Some(key) = self.links.key_at(i) else {
                continue;
            };
            if self.links.get_mut(key).is_some_and(|l| l.poll_close()) {
                return Some(LinkId(key));
            }
        }
        self.close_hint = self.links.iter().any(|(_, l)| l.is_closing());
        None
    }

    /// Why `link` is closing, until the driver reports it closed; `None`
    /// for a link that is not closing (or not current).
    pub fn link_end(&self, link: LinkId) -> Option<LinkEnd> {
        self.links.get(link.0)?.link_end()
    }

    /// The driver opened the connection `req` asked for; `nonce` is 16
    /// fresh random bytes for its handshake.
    pub fn handle_connected(
        &mut self,
        req: ConnectRequest,
        nonce: [u8; NONCE_LEN],
        now: Instant,
    ) -> Result<LinkId, LinkError> {
        let result = self.open_connected(req, nonce, now);
        journal_call!(self, journal::Call::Connected { req, nonce, now });
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn open_connected(
        &mut self,
        req: ConnectRequest,
        nonce: [u8; NONCE_LEN],
        now: Instant,
    ) -> Result<LinkId, LinkError> {
        self.shared.now = now;
        let proc = self
            .peers
            .proc(req.endpoint)
            .map_err(|_| LinkError::UnknownEndpoint)?;
        if usize::from(req.link_index) >= MAX_PEER_LINKS {
            return Err(LinkError::UnknownEndpoint);
        }
        // A peer reached by address alone is whoever answers there.
        let expected = (!proc.is_unnamed()).then_some(proc);
        let id = self.new_link(expected, Some(req.endpoint), None, nonce, req.link_index)?;
        if let Some(peer) = self.peers.get_mut(req.endpoint) {
            peer.link_connecting(req.link_index, id);
        }
        self.queue_handshake(id);
        self.settle();
        Ok(id)
    }

    /// The driver accepted a connection from an unknown peer at `source`;
    /// the engine learns who it is from the HELLO.
    ///
    /// Accepted links still in their handshake are held to the handshake
    /// budget ([`EngineConfig::handshake_budget`], and per source): beyond
    /// it one gives way as the engine's `admission` chooses, with a CLOSE saying
    /// `ResourceExhausted`. Links of verified peers are never dropped for
    /// a stranger. [`LinkError::TooManyLinks`] means every slot is in use,
    /// [`LinkError::SourceFull`] that `source` holds its share of them
    /// ([`EngineConfig::source_share`], without a job key): the driver
    /// refuses the connection (over a stream, with a CLOSE of its own
    /// saying `ResourceExhausted`, so the peer knows why).
    pub fn handle_accepted(
        &mut self,
        source: Source,
        nonce: [u8; NONCE_LEN],
        now: Instant,
    ) -> Result<LinkId, LinkError> {
        let result = self.open_accepted(source, nonce, now);
        journal_call!(self, journal::Call::Accepted { source, nonce, now });
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn open_accepted(
        &mut self,
        source: Source,
        nonce: [u8; NONCE_LEN],
        now: Instant,
    ) -> Result<LinkId, LinkError> {
        self.shared.now = now;
        if self
            .source_share_of(self.links.capacity())
            .is_some_and(|share| self.links_from(source) >= share)
        {
            self.refusals.count(Refused::SourceFull);
            return Err(LinkError::SourceFull);
        }
        self.make_room_for_stranger(source);
        let id = self
            .new_link(None, None, Some(source), nonce, 0)
            .inspect_err(|_| self.refusals.count(Refused::TooManyLinks))?;
        self.queue_handshake(id);
        self.settle();
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
        self.connection_failed(req, why, now);
        journal_call!(self, journal::Call::ConnectFailed { req, why, now });
        journal_out!(self, 0);
    }

    fn connection_failed(&mut self, req: ConnectRequest, why: ConnectFailure, now: Instant) {
        self.shared.now = now;
        if let Some(peer) = self.peers.get_mut(req.endpoint) {
            peer.connect_failed(req.link_index, why, &mut self.shared);
        }
        self.settle();
    }

    /// The connection `link` broke or was closed by the peer.
    pub fn handle_closed(&mut self, link: LinkId, now: Instant) {
        self.link_closed(link, now);
        journal_call!(self, journal::Call::Closed { link, now });
        journal_out!(self, 0);
    }

    fn link_closed(&mut self, link: LinkId, now: Instant) {
        self.shared.now = now;
        if let Some((peer, index)) = self.drop_link(link)
            && let Some(peer) = self.peers.get_mut(peer)
        {
            peer.link_gone(index, &mut self.shared);
        }
        self.settle();
    }

    /// The host of `link`'s peer answered a datagram of the link's with
    /// "nothing listens here" (an ICMP port unreachable): the peer's
    /// process is gone, or the address was never its. The link is dropped
    /// (the driver forgets it) as a stream that broke is, and one still in
    /// its handshake as a refused connection: a peer never open is lost
    /// at once with `PeerLost(Refused)`, and one that was open asks again
    /// until its refusals have lasted [`EngineConfig::refused_timeout`],
    /// as a TCP peer whose host resets every reconnection.
    pub fn handle_refused(&mut self, link: LinkId, now: Instant) {
        self.link_refused(link, now);
        journal_call!(self, journal::Call::Refused { link, now });
        journal_out!(self, 0);
    }

    fn link_refused(&mut self, link: LinkId, now: Instant) {
        let handshaking = self.links.get(link.0).is_some_and(|l| l.is_handshaking());
        if !handshaking {
            return self.link_closed(link, now);
        }
        self.shared.now = now;
        if let Some((peer, index)) = self.drop_link(link)
            && let Some(peer) = self.peers.get_mut(peer)
        {
            peer.connect_failed(index, ConnectFailure::Refused, &mut self.shared);
        }
        self.settle();
    }

    /// Takes `link` out of the tables, and what it held back; its peer and
    /// index if it was one of the peer's links.
    fn drop_link(&mut self, link: LinkId) -> Option<(EndpointId, u8)> {
        let l = self.links.remove(link.0)?;
        let (peer, index) = (l.peer(), l.index());
        self.release_dropped(peer, l.closed());
        self.shared.ops.unpost(link, &mut self.shared.events);
        let p = peer?;
        self.peers.get_mut(p)?.forget_link(link)?;
        Some((p, index))
    }

    /// The next bytes to write on `link`, if any.
    ///
    /// Over datagrams each transmit is one datagram: send it whole, then
    /// report it with [`handle_written`](Self::handle_written) (also if it
    /// had to be dropped).
    pub fn poll_transmit(&mut self, link: LinkId) -> Option<Transmit<'_>> {
        let Engine {
            framing,
            shared,
            peers,
            links,
            journal,
            journal_clock,
            ..
        } = self;
        // Asking about a link with nothing to write touches nothing: a
        // driver asks about every link it was told is ready.
        let l = links.peek_mut(link.0)?;
        let p = l.peer();
        // An acknowledgement owed goes now if nothing else would carry it
        // soon.
        let mut acked = false;
        if l.is_open()
            && let Some(peer) = p.and_then(|p| peers.peek_mut(p))
        {
            let idle = l.outbox().is_empty();
            if let Some(ack) = peer.poll_ack(framing, &shared.config, idle, shared.now) {
                l.outbox().set_ack(ack);
                acked = true;
            }
        }
        if l.outbox().is_empty() {
            return None;
        }
        if let Some(p) = p.filter(|_| acked) {
            peers.touch(p);
        }
        links.touch(link.0);
        let l = links.peek_mut(link.0)?;
        let peer = p.and_then(|p| peers.get(p));
        let segments =
            l.outbox()
                .poll_transmit::<F, Peer<W>>(peer, shared.pools.view(), &shared.regs);
        if journal.is_on() {
            // What goes out is the call's result: its bytes' digest.
            journal::clock(journal, journal_clock, shared.now);
            let mut digest = journal::Digest::default();
            for segment in segments.iter().flatten() {
                digest.bytes(segment);
            }
            journal.call(&journal::Call::Transmit(link));
            journal.out(digest.get());
        }
        Some(Transmit {
            link,
            segments: segments?,
        })
    }

    /// `n` bytes of what [`poll_transmit`](Self::poll_transmit) handed out
    /// were written (over datagrams: the datagram was sent, whatever `n`).
    pub fn handle_written(&mut self, link: LinkId, n: usize) {
        self.written(link, n);
        journal_call!(self, journal::Call::Written { link, n });
        journal_out!(self, 0);
    }

    fn written(&mut self, link: LinkId, n: usize) {
        let Engine {
            shared,
            peers,
            links,
            close_hint,
            ..
        } = self;
        let Some(l) = links.get_mut(link.0) else {
            return;
        };
        let p = l.peer();
        let written = l.outbox().handle_written::<F, Peer<W>>(
            n,
            p.and_then(|p| peers.get(p)),
            shared.pools.view(),
            &shared.regs,
        );
        *close_hint |= l.is_closing();
        if let Some(peer) = p.and_then(|p| peers.get_mut(p)) {
            if let Some(seq) = written.pinned {
                peer.pin(seq);
            }
            if let Some(seq) = written.unpinned {
                peer.unpin(seq, shared);
            }
        }
    }

    /// Time passed: handshakes and silent peers time out, keepalives go
    /// out, and over datagrams lost packets and handshakes go again.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.time_passed(now);
        journal_call!(self, journal::Call::Timeout(now));
        journal_out!(self, 0);
    }

    fn time_passed(&mut self, now: Instant) {
        self.shared.now = now;
        while let Some(key) = self.links.pop_due(now) {
            self.on_link_timeout(LinkId(key));
        }
        while let Some(id) = self.peers.pop_due(now) {
            if let Some(peer) = self.peers.get_mut(id) {
                peer.on_timeout(&self.framing, &mut self.shared);
            }
        }
        self.settle();
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next: the
    /// earliest deadline of its links and peers.
    ///
    /// Drivers ask on every pass, so each peer and link is timed when a
    /// call touched it (at the end of the call, with what it settles),
    /// and the deadlines are kept in order: asking costs nothing however
    /// many peers sit idle.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.links.earliest(), self.peers.earliest()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A link that may have bytes to write: one a call touched before this
    /// round of asking began. A driver writes these (until
    /// [`poll_transmit`](Self::poll_transmit) has nothing for each, or the
    /// connection would block) rather than every link it has; one that
    /// would block it writes again when its socket says it can. `None`
    /// ends the round: links touched meanwhile (by the writes themselves)
    /// come in the next.
    pub fn poll_ready_link(&mut self) -> Option<LinkId> {
        let idle = !self.ready_round && !self.links.has_touched();
        let result = self.next_ready_link();
        if result.is_some() || !idle {
            journal_call!(self, journal::Call::PollReadyLink);
            journal_out!(self, journal::Digest::of(&result));
        }
        result
    }

    fn next_ready_link(&mut self) -> Option<LinkId> {
        if !core::mem::replace(&mut self.ready_round, true) {
            self.retime_links();
        }
        let link = self.links.pop_ready().map(LinkId);
        self.ready_round = link.is_some();
        link
    }

    /// Events ready for [`Btl::poll_event`], without moving
    /// anything: what a driver checks before it waits.
    ///
    /// [`Btl::poll_event`]: crate::btl::Btl::poll_event
    pub fn pending_events(&self) -> usize {
        self.shared.events.len() + usize::from(self.room_ready)
    }

    /// The largest message a send to `endpoint` takes: this side's
    /// `max_send_size`, or the peer's limit where it is lower (a send
    /// beyond it fails `TooLarge` naming `Limit::Peer`). The peer's limit
    /// is known once a link to it has opened; before, this side's is
    /// given. `None` for an unknown endpoint.
    pub fn max_send_to(&self, endpoint: EndpointId) -> Option<usize> {
        let peer = self.peers.get(endpoint)?;
        let own = self.attributes.max_send_size;
        Some(
            peer.max_message()
                .map_or(own, |m| own.min(usize::try_from(m).unwrap_or(usize::MAX))),
        )
    }

    /// Whether `endpoint`'s link has finished its handshake.
    pub fn is_connected(&self, endpoint: EndpointId) -> bool {
        self.peers.get(endpoint).is_some_and(Peer::is_open)
    }

    /// The process behind `endpoint`: for a peer reached by address alone,
    /// its stand-in ([`ProcName::unnamed`]) until its handshake told its
    /// own name, then that name. `None` for an unknown endpoint.
    pub fn proc_of(&self, endpoint: EndpointId) -> Option<ProcName> {
        self.peers.proc(endpoint).ok()
    }

    /// Why `endpoint`'s peer is lost, while its record is kept (until the
    /// upper layer removes it, or the engine needs its slot).
    pub fn lost(&self, endpoint: EndpointId) -> Option<LostReason> {
        self.peers.get(endpoint)?.lost()
    }

    /// Whether every connection to `endpoint`'s peer was refused since it
    /// last connected (its host answers, nothing listens at its address).
    pub fn refused(&self, endpoint: EndpointId) -> bool {
        self.peers
            .get(endpoint)
            .is_some_and(|p| p.refused_since().is_some())
    }

    /// Starts connecting to `endpoint`'s peer now if it is idle, without
    /// waiting for a first message to it: for a caller that wants to know
    /// the peer is there before it sends anything.
    pub fn connect(&mut self, endpoint: EndpointId) -> Result<(), BtlError> {
        let result = self.reach_endpoint(endpoint);
        journal_call!(self, journal::Call::Connect(endpoint));
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn reach_endpoint(&mut self, endpoint: EndpointId) -> Result<(), BtlError> {
        self.check_endpoint(endpoint).map(|_| ())
    }

    /// The peers on record, whoever added them (the user, or a peer that
    /// connected): what a server iterates to see its clients.
    pub fn endpoints(&self) -> impl Iterator<Item = EndpointId> + '_ {
        self.peers.ids()
    }

    /// What this side still owes its peers: packets sent and not yet
    /// acknowledged, sends and gets queued, and puts and gets not yet
    /// complete. Zero means every send so far reached its peer (or failed
    /// and was reported): what a graceful close waits for before
    /// [`finalize`](crate::btl::Btl::finalize).
    pub fn outstanding(&self) -> usize {
        let packets: usize = self.peers.iter().map(|(_, _, p)| p.outstanding()).sum();
        packets + self.shared.ops.len()
    }

    /// Sends every acknowledgement owed at the next write, without its
    /// delay: what a driver does before it finalizes, so that its peers
    /// learn that their last messages arrived, instead of failing them
    /// when the CLOSE comes.
    pub fn acknowledge_now(&mut self) {
        self.acknowledge_all();
        journal_call!(self, journal::Call::AcknowledgeNow);
        journal_out!(self, 0);
    }

    fn acknowledge_all(&mut self) {
        let now = self.shared.now;
        for i in 0..self.peers.len() {
            let Some(p) = self.peers.id_at(i) else {
                continue;
            };
            if let Some(peer) = self.peers.get_mut(p) {
                peer.acknowledge_now(now);
            }
        }
        self.settle();
    }

    /// A mark of what is outstanding now, for a flush to wait for: per
    /// peer, the sequence number below which lies everything sent or
    /// queued to it ([`send_marks`](Self::send_marks)), and the operations
    /// under way. What is sent later lies beyond it, so a flush ends even
    /// while the peers keep the module busy.
    pub fn ops_mark(&self) -> u64 {
        self.shared.ops.mark()
    }

    /// Each peer and the sequence number below which lies everything sent,
    /// owed or queued to it so far (see [`ops_mark`](Self::ops_mark)).
    pub fn send_marks(&self) -> impl Iterator<Item = (EndpointId, u64)> + '_ {
        self.peers.iter().map(|(id, _, p)| (id, p.send_mark()))
    }

    /// Whether what was outstanding at the marks is done: every peer of
    /// `send_marks` acknowledged everything below its mark (or is lost, its
    /// failures queued as events), and no operation started at or before
    /// `ops_mark` is under way.
    pub fn reached(&self, send_marks: &[(EndpointId, u64)], ops_mark: u64) -> bool {
        let acknowledged = send_marks.iter().all(|&(id, mark)| {
            self.peers
                .get(id)
                .is_none_or(|p| p.acknowledged_below(mark))
        });
        acknowledged && !self.shared.ops.any_at_or_below(ops_mark)
    }

    /// How much of its storage the engine uses now: what an operator
    /// compares with the capacities, and a test with a baseline.
    pub fn usage(&self) -> Usage {
        Usage {
            peers: self.peers.len(),
            links: self.links.len(),
            handshaking: self
                .links
                .iter()
                .filter(|(_, l)| l.is_handshaking())
                .count(),
            registrations: self.shared.regs.len(),
            operations: self.shared.ops.len(),
            events: self.shared.events.len(),
            events_owed: self.shared.events.owed(),
        }
    }

    /// How many peers were lost for a reason other than a clean close
    /// ([`LostReason::is_clean`]), and the last of them: what a flight
    /// recorder writes its record for.
    pub fn unclean_losses(&self) -> (u64, Option<(ProcName, LostReason)>) {
        self.shared.unclean_losses
    }

    /// Where its calls are recorded ([`journal`]).
    pub fn journal(&self) -> &S::Journal {
        &self.journal
    }

    /// Where its calls are recorded, to turn recording on before the first
    /// call or to take what was recorded.
    pub fn journal_mut(&mut self) -> &mut S::Journal {
        &mut self.journal
    }

    /// The module's traffic: the counters of every peer it has known
    /// summed, those forgotten since included, and what it refused.
    pub fn metrics(&self) -> ModuleMetrics {
        let mut peers = self.departed;
        for (_, _, peer) in self.peers.iter() {
            peers.add(&peer.metrics(self.shared.now));
        }
        ModuleMetrics {
            peers,
            refusals: self.refusals,
        }
    }

    /// Each peer on record, with its traffic: at most the peer table's
    /// capacity, however many peers came and went.
    pub fn peer_metrics(&self) -> impl Iterator<Item = PeerReport> + '_ {
        self.peers.iter().map(|(endpoint, proc, peer)| PeerReport {
            endpoint,
            proc,
            state: peer.state(),
            metrics: peer.metrics(self.shared.now),
        })
    }

    /// Peers on record: what [`usage`](Self::usage) counts first, without
    /// its walk over the links.
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Whether [`finalize`](crate::btl::Btl::finalize) has been called.
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// The largest packet body this engine accepts and announces.
    pub fn max_body(&self) -> u64 {
        self.shared.config.max_body
    }

    // ----- links --------------------------------------------------------

    /// A new link, announcing this process as link `index`.
    fn new_link(
        &mut self,
        expected: Option<ProcName>,
        peer: Option<EndpointId>,
        source: Option<Source>,
        nonce: [u8; NONCE_LEN],
        index: u8,
    ) -> Result<LinkId, LinkError> {
        let config = &self.shared.config;
        let local = LocalHello {
            me: config.me,
            link_index: u16::from(index),
            nonce,
            checksum: config.checksum,
            keyed: config.job_key.is_some(),
            max_body: config.max_body,
            initial_credits: config.initial_credits,
            epoch: config.epoch,
        };
        self.serial = self.serial.wrapping_add(1);
        let link = Link::new(
            &local,
            expected,
            peer,
            source,
            Limits::new(config.max_body),
            self.shared.now,
            self.serial,
        );
        self.links
            .insert(link)
            .map(LinkId)
            .ok_or(LinkError::TooManyLinks)
    }

    /// Whether a connection in its handshake will carry link `index` of
    /// process `proc`: one this side opened, or one whose HELLO named it.
    fn link_coming(&self, proc: ProcName, index: u8) -> bool {
        self.links.iter().any(|(_, l)| {
            l.is_handshaking()
                && match l.peer() {
                    Some(p) => l.index() == index && self.peers.proc(p) == Ok(proc),
                    None => l.handshake().peer().is_some_and(|h| {
                        ProcName::new(h.job, h.rank) == proc && h.link_index == u16::from(index)
                    }),
                }
        })
    }

    /// Keeps the links strangers opened within the handshake budget before
    /// one more from `source` comes: past the budget of its source, or the
    /// whole budget, one gives way as [`admission`] chooses (of the
    /// newcomer's source, or of the source holding the most; silent before
    /// heard, then oldest). It is closed with `ResourceExhausted`; no
    /// verified peer's link is ever chosen.
    fn make_room_for_stranger(&mut self, source: Source) {
        let mut candidates: Vec<admission::Candidate, { admission::MAX_CANDIDATES }> = Vec::new();
        for (key, l) in self.links.iter() {
            if let (true, Some(from)) = (l.is_handshaking(), l.source()) {
                // The budget keeps them within the table.
                let _ = candidates.push(admission::Candidate {
                    link: LinkId(key),
                    source: from,
                    heard: l.heard(),
                    age: l.age(),
                });
            }
        }
        let config = &self.shared.config;
        let budget = admission::Budget {
            all: usize::from(config.handshake_budget),
            per_source: usize::from(config.handshake_budget_per_source),
        };
        if let Some(link) = admission::give_way(&mut candidates, source, budget, self.shared.now) {
            self.fail_link(link, CloseReason::ResourceExhausted);
        }
    }

    /// What one source may hold of `capacity` slots without a job key
    /// ([`EngineConfig::source_share`]); `None` with a key, or with a share
    /// of 100 %.
    fn source_share_of(&self, capacity: usize) -> Option<usize> {
        let config = &self.shared.config;
        let percent = usize::from(config.source_share.min(100));
        if config.job_key.is_some() || percent == 100 {
            return None;
        }
        Some((capacity * percent / 100).max(1))
    }

    /// Links from `source` that are not closing: a closing link's slot is
    /// the driver's to free, and is not held against its source.
    fn links_from(&self, source: Source) -> usize {
        self.links
            .iter()
            .filter(|(_, l)| l.source() == Some(source) && l.state() != LinkState::Closing)
            .count()
    }

    /// Open peers whose first link comes from `source`.
    fn peers_from(&self, source: Source) -> usize {
        self.links
            .iter()
            .filter(|(key, l)| {
                l.source() == Some(source)
                    && l.is_open()
                    && l.peer()
                        .and_then(|p| self.peers.get(p))
                        .and_then(|p| p.first_link())
                        == Some(LinkId(*key))
            })
            .count()
    }

    /// Queues the handshake packets due on `link`, and opens its peer once
    /// its handshake completes.
    fn queue_handshake(&mut self, link: LinkId) {
        let key = self.shared.config.job_key.as_deref();
        if let Some(l) = self.links.get_mut(link.0) {
            l.queue_handshake(key);
        }
        self.maybe_open(link);
    }

    /// Opens the link's peer once its handshake completes: the peer is
    /// found (or made), a new start of its process renews it, a lost one's
    /// same start is refused, and when both sides connected the same link
    /// at once the connection opened by the lower process name survives.
    fn maybe_open(&mut self, link: LinkId) {
        let Some(l) = self.links.get(link.0) else {
            return;
        };
        if !l.is_handshaking() {
            return;
        }
        // A peer reached by address alone is checked as soon as its HELLO
        // names it, before this side proves anything to it.
        if let (Some(p), Some(hello)) = (l.peer(), l.handshake().peer())
            && self.peers.proc(p).is_ok_and(|n| n.is_unnamed())
            && !self.may_name(p, ProcName::new(hello.job, hello.rank), hello.epoch, link)
        {
            return;
        }
        let Some(l) = self.links.get(link.0) else {
            return;
        };
        if !l.handshake().is_complete() {
            return;
        }
        let Some(hello) = l.handshake().peer().copied() else {
            return;
        };
        let trailers = l.handshake().trailers(self.shared.config.key(), F::LOSSY);
        let (outbound, own_index, known) = (l.peer().is_some(), l.index(), l.peer());
        let proc = ProcName::new(hello.job, hello.rank);
        // A finalized engine opens nothing more.
        if self.finalized {
            self.fail_link(link, CloseReason::Shutdown);
            return;
        }
        let p = match known {
            Some(p) if self.peers.proc(p).is_ok_and(|n| n.is_unnamed()) => {
                let _ = self.peers.rename(p, proc);
                if let Some(peer) = self.peers.get_mut(p) {
                    peer.rename(proc);
                }
                p
            }
            Some(p) => p,
            None => {
                let new = self.peers.find(proc).is_none();
                if new && self.forgotten.contains(proc, hello.epoch) {
                    // The same start of a process this side gave up and
                    // forgot: it stays lost, and is told so.
                    self.fail_link(link, CloseReason::GaveUp);
                    return;
                }
                // Without a key, one source holds at most its share of the
                // peer slots, whatever names its connections claim.
                let crowded = l.source().is_some_and(|s| {
                    self.source_share_of(self.peers.capacity())
                        .is_some_and(|share| self.peers_from(s) >= share)
                });
                if new && crowded {
                    self.fail_link(link, CloseReason::ResourceExhausted);
                    return;
                }
                match self.find_or_add_peer(proc) {
                    Some(p) => p,
                    None => {
                        self.fail_link(link, CloseReason::ResourceExhausted);
                        return;
                    }
                }
            }
        };
        // Another epoch is another start of the process: what the old one
        // owed fails, and the new one is a fresh peer. The same start of a
        // lost peer stays lost, and is told so.
        let Some(peer) = self.peers.get(p) else {
            return;
        };
        let lost = peer.lost().is_some();
        let restarted = peer
            .epoch()
            .or(lost.then_some(hello.epoch))
            .is_some_and(|e| e != hello.epoch);
        if restarted {
            // A live peer is not displaced by a claim: it is asked first,
            // and a new start is believed once the old one has not
            // answered (see `weigh_restart`).
            if !self.weigh_restart(link, p) {
                return;
            }
            self.renew_peer(p);
        } else if lost {
            self.fail_link(link, CloseReason::GaveUp);
            return;
        }
        let index = if outbound {
            own_index
        } else {
            match u8::try_from(hello.link_index) {
                Ok(i) if usize::from(i) < MAX_PEER_LINKS => i,
                _ => {
                    self.fail_link(link, CloseReason::ResourceExhausted);
                    return;
                }
            }
        };
        // Both sides connected link `index` at once: the connection opened
        // by the lower process name survives, the other is closed.
        let crossed = self
            .peers
            .get(p)
            .and_then(|peer| peer.link_at(index))
            .filter(|&old| old != link && self.links.get(old.0).is_some());
        if let Some(old) = crossed {
            let me = self.shared.config.me;
            let (initiator, other) = if outbound { (me, proc) } else { (proc, me) };
            if initiator > other {
                self.fail_link(link, CloseReason::Normal);
                return;
            }
            self.fail_link(old, CloseReason::Normal);
        }
        let seal = trailers.seal.clone();
        if let Some(peer) = self.peers.get_mut(p) {
            let opened = Opened {
                index,
                link,
                hello: Hello::of(&hello, trailers),
                outbound,
                replaced: crossed.is_some(),
            };
            peer.open_link(opened, &self.shared.config, self.shared.now);
            self.connect_hint |= peer.wants_connection();
        }
        if let Some(l) = self.links.get_mut(link.0) {
            l.open(p, index, seal);
        }
    }

    /// Whether peer `p`, reached by address alone, may take the name
    /// `proc` that the HELLO on `link` told. A process that is already a
    /// peer here under its name, or a start of one this side gave up, is
    /// not made a second time: `link` closes and `p` is lost (`Duplicate`,
    /// `Closed`). The CLOSE of a duplicate says `Normal`, so that the
    /// process keeps this one as the peer it already is.
    fn may_name(&mut self, p: EndpointId, proc: ProcName, epoch: u64, link: LinkId) -> bool {
        let refused = if self.peers.find(proc).is_some() {
            (CloseReason::Normal, LostReason::Duplicate)
        } else if self.forgotten.contains(proc, epoch) {
            (CloseReason::GaveUp, LostReason::Closed)
        } else {
            return true;
        };
        self.fail_link(link, refused.0);
        self.lose_peer(p, refused.1);
        false
    }

    /// Whether the claim `link` makes, that peer `p`'s process started
    /// again, is to be believed now. A peer that is open, on another link
    /// than `link`, is asked for an acknowledgement first, and the claim is
    /// weighed a retransmission timeout later (`link`'s `Doubt` timer): if
    /// the peer answered meanwhile its old start is alive, and `link` (a
    /// stranger taking its name, or its old address) is refused, or, the
    /// peer's own link, keeps carrying it; if not, the restart is believed.
    /// So a HELLO with a new epoch, keyed or not, forged from a live peer's
    /// address or naming it from elsewhere, displaces nobody.
    fn weigh_restart(&mut self, link: LinkId, p: EndpointId) -> bool {
        let live = self
            .peers
            .get(p)
            .is_some_and(|peer| peer.is_open() && peer.links().any(|l| l != link));
        if !live {
            return true;
        }
        match self.links.get(link.0).and_then(|l| l.doubt()) {
            None => {
                self.doubt(link, p);
                false
            }
            Some(d) if self.shared.now < d.until => false,
            Some(_) => {
                let alive = self.old_start_answered(link, p);
                if alive {
                    self.fail_link(link, CloseReason::AuthFailed);
                }
                !alive
            }
        }
    }

    /// Doubts the restart of peer `p` that `link` claims: the peer is asked
    /// for an acknowledgement now, and `link`'s `Doubt` timer weighs the
    /// claim a retransmission timeout later.
    fn doubt(&mut self, link: LinkId, p: EndpointId) {
        let now = self.shared.now;
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        let wait = peer.probe_now(now);
        if let Some(l) = self.links.get_mut(link.0) {
            l.set_doubt(Some(link::Doubt {
                since: now,
                until: now + wait,
            }));
        }
        self.settle_peer(p);
    }

    /// Ends `link`'s doubt of peer `p`: whether `p` was heard from since
    /// it was asked (its old start is alive, the claim false).
    fn old_start_answered(&mut self, link: LinkId, p: EndpointId) -> bool {
        let Some(l) = self.links.get_mut(link.0) else {
            return false;
        };
        let doubt = l.doubt();
        l.set_doubt(None);
        let heard = self.peers.get(p).map(|peer| peer.last_heard());
        doubt.zip(heard).is_some_and(|(d, at)| at > d.since)
    }

    /// Ends `link` after a failure, a CLOSE with `reason` going out first;
    /// its peer, for a reason that is the peer's fault, is lost.
    fn fail_link(&mut self, link: LinkId, reason: CloseReason) {
        let Some(l) = self.links.get_mut(link.0) else {
            return;
        };
        let refused = l
            .is_handshaking()
            .then(|| Refused::of_close(reason))
            .flatten();
        let Some(dropped) = l.fail(reason) else {
            return;
        };
        if let Some(why) = refused {
            self.refusals.count(why);
        }
        let peer = l.peer();
        self.close_hint = true;
        self.release_dropped(peer, dropped);
        let Some(p) = peer else {
            return;
        };
        let carried = self
            .peers
            .get_mut(p)
            .is_some_and(|peer| peer.forget_link(link).is_some());
        // This side's reasons: any but a redundant link's is the peer's
        // fault.
        if carried && let Some(lost) = LostReason::of_failure(reason) {
            self.lose_peer(p, lost);
        }
    }

    /// Ends `link` without a CLOSE, keeping its peer: the peer's other
    /// links, or a new one, carry on, and what was not acknowledged goes
    /// again. For a datagram link whose peer process started again from
    /// the same address (nobody is left to read a CLOSE), and for a stream
    /// that stopped carrying anything (a CLOSE would be lost in it too).
    fn end_link_quietly(&mut self, link: LinkId, reason: CloseReason) {
        let Some(l) = self.links.get_mut(link.0) else {
            return;
        };
        let (peer, index) = (l.peer(), l.index());
        let dropped = l.end(reason, false);
        self.close_hint = true;
        self.release_dropped(peer, dropped);
        if let Some(p) = peer
            && let Some(peer) = self.peers.get_mut(p)
            && peer.forget_link(link).is_some()
        {
            peer.link_gone(index, &mut self.shared);
        }
    }

    /// What an ended link leaves: the receive fragment it was filling and
    /// the event place it kept go back, and its peer may let go of a packet
    /// it was writing.
    fn release_dropped(&mut self, peer: Option<EndpointId>, dropped: Dropped) {
        if let Some(frag) = dropped.fragment {
            self.shared.drop_received(frag);
        }
        if dropped.event_place {
            self.shared.events.forgive();
        }
        if let Some(seq) = dropped.unpinned
            && let Some(peer) = peer.and_then(|p| self.peers.get_mut(p))
        {
            peer.unpin(seq, &mut self.shared);
        }
    }

    /// A link's deadlines: a handshake that timed out fails its link (a
    /// reconnection's quietly, to try again), one over datagrams repeats
    /// its packets.
    fn on_link_timeout(&mut self, link: LinkId) {
        let now = self.shared.now;
        let Some(l) = self.links.get(link.0) else {
            return;
        };
        let timers = l.timers(&self.framing, &self.shared.config);
        if timers.is_due(link::LinkTimer::Handshake, now) {
            let (index, peer) = (l.index(), l.peer());
            let reconnecting = peer.filter(|&p| {
                self.peers
                    .get(p)
                    .is_some_and(|peer| peer.was_open() && peer.links().any(|l| l == link))
            });
            match reconnecting {
                Some(p) => {
                    // Not the peer's fault: try again after a backoff.
                    if let Some(peer) = self.peers.get_mut(p) {
                        peer.forget_link(link);
                    }
                    self.fail_link(link, CloseReason::Normal);
                    if let Some(peer) = self.peers.get_mut(p) {
                        peer.link_gone(index, &mut self.shared);
                    }
                }
                None => {
                    // A first connection: its peer (if this side asked for
                    // it) is lost to the handshake's timer, named as such.
                    if let Some(p) = peer {
                        self.lose_peer(p, LostReason::HandshakeTimeout);
                    }
                    self.fail_link(link, CloseReason::Timeout);
                }
            }
        } else if timers.is_due(link::LinkTimer::Doubt, now) {
            if l.is_open() {
                // The peer's own link, on which another start was claimed.
                let answered = l.peer().is_some_and(|p| self.old_start_answered(link, p));
                if !answered {
                    self.end_link_quietly(link, CloseReason::Normal);
                }
            } else {
                self.maybe_open(link);
            }
        } else if timers.is_due(link::LinkTimer::HelloRepeat, now) {
            let key = self.shared.config.job_key.as_deref();
            if let Some(l) = self.links.get_mut(link.0) {
                l.repeat_hello(now, key);
            }
            self.maybe_open(link);
        }
    }

    // ----- peers --------------------------------------------------------

    /// The peer that is process `proc`, made if it is not on record; `None`
    /// when every slot is taken by peers that cannot give theirs up.
    fn find_or_add_peer(&mut self, proc: ProcName) -> Option<EndpointId> {
        if let Some(id) = self.peers.find(proc) {
            return Some(id);
        }
        self.forget_lost_peers();
        if self.peers.is_full() && !self.evict_disconnected_peer() {
            return None;
        }
        let rtt = self.shared.config.rtt;
        let id = self.peers.insert_with(proc, |id| Peer::new(id, proc, rtt));
        self.shared.peers = self.peers.len();
        id
    }

    /// Makes room for one more peer when every slot is taken: the peer
    /// nobody holds that has been disconnected longest (waiting for it to
    /// connect again) is given up, `PeerLost(Closed)`, and forgotten.
    /// Open peers are never chosen.
    fn evict_disconnected_peer(&mut self) -> bool {
        let victim = self
            .peers
            .iter()
            .filter(|(id, _, _)| self.peers.refs(*id) == 0)
            .filter_map(|(id, _, p)| Some((p.disconnected_since()?, id)))
            .min()
            .map(|(_, id)| id);
        let Some(p) = victim else {
            return false;
        };
        self.lose_peer(p, LostReason::Closed);
        self.forget_lost_peers();
        true
    }

    /// The peer `endpoint` names, asked to connect if it is idle: what
    /// every call of the upper layer checks first.
    fn check_endpoint(&mut self, endpoint: EndpointId) -> Result<EndpointId, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let peer = self.peers.get_mut(endpoint).ok_or(BtlError::Unreachable)?;
        peer.reach(self.shared.now)?;
        self.connect_hint |= peer.wants_connection();
        Ok(endpoint)
    }

    /// Gives peer `p` up for `reason`, and fails its links with
    /// `Shutdown`, `ProtocolError` for a protocol violation, or `Timeout`
    /// for a stalled peer (not `Normal`: the peer is to lose this process
    /// too, not to connect again as after a redundant link's close).
    fn lose_peer(&mut self, p: EndpointId, reason: LostReason) {
        if let Some(peer) = self.peers.get_mut(p) {
            peer.lose(reason, &mut self.shared);
        }
        self.drop_links_of_lost(p);
    }

    /// Fails the links of lost peer `p`, and notes whether its record is
    /// to be freed.
    fn drop_links_of_lost(&mut self, p: EndpointId) {
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        if peer.lost().is_none() {
            return;
        }
        let lost = peer.lost();
        // A peer lost for its own doing is told why: a protocol violation
        // (a KEY flood, answers it never takes), or a stall, told as the
        // silence a stalled peer amounts to. One removed (or finalized
        // away) is told goodbye; any other was given up.
        let close = match lost {
            Some(LostReason::ProtocolViolation) => CloseReason::ProtocolError,
            Some(LostReason::Stalled) => CloseReason::Timeout,
            Some(LostReason::Removed | LostReason::Left) => CloseReason::Shutdown,
            _ => CloseReason::GaveUp,
        };
        let links: Vec<LinkId, MAX_PEER_LINKS> = peer.take_links().collect();
        self.lost_unheld |= self.peers.refs(p) == 0;
        for link in links {
            if let Some(l) = self.links.get_mut(link.0) {
                l.forget_peer(lost);
            }
            self.fail_link(link, close);
        }
    }

    /// A new start of peer `p`'s process: the old start's operations fail
    /// and its open links close; the record starts over.
    fn renew_peer(&mut self, p: EndpointId) {
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        let old = peer.renew(&mut self.shared);
        for link in old {
            if let Some(l) = self.links.get_mut(link.0) {
                l.forget_peer(None);
            }
            self.fail_link(link, CloseReason::Shutdown);
        }
    }

    /// Frees the records of lost peers that nobody holds (no reference:
    /// they came to this side, the user never added them): a server's
    /// slots come back as its clients leave. Their starts are remembered,
    /// so that one coming back as if nothing happened is refused as a lost
    /// peer is.
    fn forget_lost_peers(&mut self) {
        if !core::mem::take(&mut self.lost_unheld) {
            return;
        }
        let mut i = 0;
        while let Some(id) = self.peers.id_at(i) {
            let unheld_and_lost =
                self.peers.refs(id) == 0 && self.peers.get(id).is_some_and(|p| p.lost().is_some());
            if unheld_and_lost {
                self.forget_peer(id);
            } else {
                i += 1;
            }
        }
    }

    /// Frees the record of lost peer `p`, remembering its start and
    /// closing any link that still names it. Never inlined: the peer it
    /// takes out of the table is tens of kilobytes, and a caller that
    /// inlined it would probe that much stack on every call, most of which
    /// forget nothing.
    #[inline(never)]
    fn forget_peer(&mut self, p: EndpointId) {
        if let Some(peer) = self.peers.get(p) {
            self.departed.add(&peer.metrics(self.shared.now));
            if let Some(epoch) = peer.epoch() {
                self.forgotten.remember(peer.proc(), epoch);
            }
        }
        for i in 0..self.links.len() {
            let Some(key) = self.links.key_at(i) else {
                continue;
            };
            if let Some(l) = self.links.get_mut(key)
                && l.peer() == Some(p)
            {
                l.forget_peer(None);
                self.fail_link(LinkId(key), CloseReason::Shutdown);
            }
        }
        self.peers.remove(p);
        self.shared.peers = self.peers.len();
    }

    /// The peer that is process `proc`, asked to connect if it is idle, or
    /// `None` when this engine does not know it or has lost it.
    fn reach(&mut self, proc: ProcName) -> Option<EndpointId> {
        let id = self.peers.find(proc)?;
        self.check_endpoint(id).ok()
    }

    // ----- after every call ---------------------------------------------

    /// Carries out what the peers and operations asked for during a call:
    /// links of lost peers fail, silent streams are dropped, probes and
    /// overdue acknowledgements go out, packets go onto links, mail
    /// between peers is delivered, and lost peers nobody holds are
    /// forgotten.
    fn settle(&mut self) {
        self.deliver_mail();
        let mut cursor = self.peers.take_touched();
        while let Some(id) = self.peers.next_to_settle(&mut cursor) {
            self.settle_peer(id);
            let at = self.peers.get(id).and_then(|peer| {
                let mut earliest = timers::Earliest::default();
                peer.deadlines(&self.framing, &self.shared.config, &mut earliest);
                earliest.0
            });
            self.peers.set_deadline(id, at);
        }
        self.deliver_mail();
        self.forget_lost_peers();
        self.retime_links();
    }

    /// Times again the links touched since they were last timed, and lists
    /// them for the driver to write.
    fn retime_links(&mut self) {
        let (framing, config) = (&self.framing, &self.shared.config);
        self.links.retime_touched(|l| {
            let mut earliest = timers::Earliest::default();
            l.deadlines(framing, config, &mut earliest);
            earliest.0
        });
    }

    /// What peer `p` asked for: see [`settle`](Self::settle).
    fn settle_peer(&mut self, p: EndpointId) {
        self.drop_links_of_lost(p);
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        if peer.lost().is_some() {
            return;
        }
        if let Some(silent) = peer.take_silent_links() {
            let silent: Vec<LinkId, MAX_PEER_LINKS> = silent.collect();
            for link in silent {
                self.end_link_quietly(link, CloseReason::Timeout);
            }
        }
        self.flush_peer(p);
        let Engine {
            framing,
            shared,
            peers,
            links,
            connect_hint,
            ..
        } = self;
        let Some(peer) = peers.get_mut(p) else {
            return;
        };
        *connect_hint |= peer.wants_connection();
        if let Some((link, probe)) = peer.poll_probe()
            && let Some(l) = links.get_mut(link.0)
        {
            l.outbox().set_ack(probe);
        }
        if peer.take_ack_due()
            && let Some(l) = peer.first_link().and_then(|link| links.get_mut(link.0))
        {
            let idle = l.outbox().is_empty();
            if let Some(ack) = peer.poll_ack(framing, &shared.config, idle, shared.now) {
                l.outbox().set_ack(ack);
            }
        }
        // An acknowledgement still owed (credits given back as the upper
        // layer polled) goes when its link is written: the driver is to
        // ask about that link, though nothing else touched it.
        if peer.owes_ack()
            && let Some(link) = peer.first_link()
        {
            links.touch(link.0);
        }
    }

    /// Puts what peer `p` has to send onto its links, as credits and its
    /// window allow. A packet to go again that still waits on one of the
    /// peer's links stays there: its bytes must not change under the
    /// driver.
    fn flush_peer(&mut self, p: EndpointId) {
        let Engine {
            shared,
            peers,
            links,
            ..
        } = self;
        let Some(peer) = peers.get_mut(p) else {
            return;
        };
        while let Some((seq, link)) = peer.poll_packet(shared) {
            let Some(link) = link else {
                continue;
            };
            let waiting = peer
                .links()
                .any(|l| links.get(l.0).is_some_and(|l| l.holds(seq)));
            if waiting {
                continue;
            }
            peer.stamp(seq, shared);
            if let Some(l) = links.get_mut(link.0) {
                l.outbox().enqueue(seq, &*peer);
            }
        }
    }

    /// Delivers what operations left for other peers than their own: gets
    /// into a third process are routed to it (or refused), and the answers
    /// of gets served on behalf of a third process go to the process that
    /// asked (nothing is owed to one already lost).
    fn deliver_mail(&mut self) {
        while let Some(mail) = self.shared.ops.take_mail() {
            match mail {
                Mail::Route { from, get } => self.route_get(from, get),
                Mail::Answer { to, answer } => {
                    if let Some(p) = self.peers.find(to)
                        && let Some(peer) = self.peers.get_mut(p)
                    {
                        peer.answer(answer, &mut self.shared);
                    }
                }
            }
        }
    }

    /// Serves peer `from`'s get whose data goes to a third process: this
    /// side puts its data there, and answers `from` once it has landed; or
    /// refuses at once.
    fn route_get(&mut self, from: EndpointId, get: GetRepr) {
        if let Err(code) = self.serve_for(from, get)
            && let Some(peer) = self.peers.get_mut(from)
        {
            let reject = RejectRepr {
                xfer_id: get.xfer_id,
                code,
            };
            peer.answer(packet::Answer::Reject(reject), &mut self.shared);
        }
    }

    /// Starts serving `get` of peer `from` into its target process.
    fn serve_for(&mut self, from: EndpointId, get: GetRepr) -> Result<(), RejectCode> {
        let (src, dst, target) = ops::get_parts(&get);
        let to = self.reach(target).ok_or(RejectCode::NoTarget)?;
        let local = self
            .shared
            .regs
            .check_remote(src, Access::REMOTE_READ)
            .map_err(RejectCode::from)?;
        let origin = self.peers.proc(from).map_err(|_| RejectCode::NoTarget)?;
        let chunk = self
            .peers
            .get(to)
            .map_or(MIN_MAX_BODY, |p| p.put_chunk(&self.shared));
        let id = self.shared.ops.new_id();
        self.shared
            .serve(to, chunk, id, local, dst, Some((origin, get.xfer_id)))
    }
}

#[cfg(test)]
mod tests;
