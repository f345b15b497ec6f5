//! A peer: one process this engine talks to, and everything owed between
//! them.
//!
//! A peer coordinates parts it owns, each a small state machine with its
//! own tests: its links (`PeerLinks`, `peer/links.rs`: which are open,
//! wanted, retried, and which carries the next packet), what it is owed
//! (`Outbound`, `peer/outbound.rs`: the send window, the answers owed,
//! the messages and gets queued, what goes again), what it has sent
//! (`Received`, `peer/received.rs`: the receive window, and the
//! acknowledgement that waits for a refusal), its credits both ways
//! (`Credits`), the acknowledgement it owes (`AckOwed`), whether it still
//! answers (`Liveness`, `peer/liveness.rs`: when it was last heard and
//! asked, when to ask next), what its HELLO said (`Hello`), the peer's
//! keys it has learnt (`KeyCache`), its progress (`Progress`) and
//! round-trip estimate (`RttEstimator`). Its part in one-sided transfers
//! (serving the peer's GETs, routing this side's puts and gets by what the
//! peer said of its keys) is in `peer/transfers.rs`. The peer itself
//! decides what happens when: its state, its timers, what goes next. It
//! lives through `Idle` (known), `Connecting` (a link is being opened, or
//! opened again after one broke), `Open` (data flows over one or more
//! links) and `Lost` (given up: everything to it failed once).
//!
//! The engine feeds it what its links bring ([`Peer::on_packet`]) and the
//! time ([`Peer::on_timeout`]), and takes from it what to put on its links
//! ([`Peer::poll_packet`], [`Peer::poll_ack`], [`Peer::poll_probe`]), which
//! connections to ask the driver for ([`Peer::poll_connect`]), and which of
//! its links to drop ([`Peer::take_links`], [`Peer::take_silent_links`]).
//! What it shares with other peers (fragments, registered memory,
//! operations, events) it reaches through the engine's shared resources, lent for each call.

use heapless::Vec;

use crate::btl::{Access, BtlError, Completion, Limit, LostReason, RejectCode, RemoteKey};
use crate::desc::Descriptor;
use crate::endpoint::{EndpointId, ProcName};
use crate::time::{Duration, Instant};
use crate::wire::{
    CloseReason, ControlRepr, Flags, GetRepr, HeaderRepr, HelloRepr, KeyInfoRepr, RejectRepr,
    SendRepr,
};

use super::acks::AckOwed;
use super::config::EngineConfig;
use super::credits::Credits;
use super::events::Pending;
use super::framing::Framing;
use super::keys::KeyCache;
use super::link::Receiving;
use super::metrics::{PeerCounters, PeerMetrics};
use super::ops::{GET_REPLY, Next, OpKind, Path};
use super::outbox::Retained;
use super::packet::{
    Answer, ControlFrame, HEADER_RESERVE, Outgoing, Queued, Trailer, Trailers, ack_frame,
};
use super::progress::Progress;
use super::rdma::Route;
use super::room::Wanted;
use super::rtt::{RttConfig, RttEstimator};
use super::shared::Shared;
use super::storage::Storage;
use super::timers::{Deadlines, Timers};
use super::window::Ack;
use super::{ConnectFailure, LinkId};
use links::PeerLinks;
use liveness::{Liveness, Probe, ProbeRules};
use outbound::{Outbound, Released};
use received::{Held, Received};

/// Most connections per peer ([`EngineConfig::links`]).
pub const MAX_PEER_LINKS: usize = 4;

/// Where a peer is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Known; no link asked for yet.
    Idle,
    /// A link is being opened or handshaken (again, after a broken one,
    /// when the peer has been open before). `since` starts the peer
    /// timeout; `retry` is when to ask the driver again after a failed
    /// reconnect (`None`: a request is out).
    Connecting {
        /// Since when the peer has been waited for.
        since: Instant,
        /// When to ask for a connection again.
        retry: Option<Instant>,
    },
    /// Data flows.
    Open,
    /// Given up: every operation to it failed.
    Lost(LostReason),
}

/// A peer's deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerTimer {
    /// Silent for the peer timeout: lost.
    Lost,
    /// Ask for a connection again after a failed reconnection.
    Reconnect,
    /// Ask for link `i` again, which broke while others carry the peer.
    LinkRetry(u8),
    /// The acknowledgement owed may wait no longer.
    Ack,
    /// A retained packet's acknowledgement is overdue (lossy framing).
    Retransmit,
    /// Ask the peer for an acknowledgement: a keepalive, or a probe.
    Probe,
    /// Nothing acknowledged, or a gap not closed, for the peer timeout:
    /// lost (the engine's `progress` rule).
    Stalled,
    /// Ask again for the gets the peer answered `Busy`.
    BusyRetry,
}

/// What the peer's HELLO said, as the peer keeps it.
#[derive(Debug, Clone)]
pub struct Hello {
    /// The start of its process.
    pub epoch: u64,
    /// The largest body it accepts.
    pub max_body: u64,
    /// The SEND credits it grants to start with.
    pub initial_credits: u32,
    /// The trailers the handshake agreed on.
    pub trailers: Trailers,
    /// Whether it takes a put's notice (NOTIFY, from minor version 1).
    pub notices: bool,
    /// Whether it answers KEY (from minor version 2).
    pub keys: bool,
}

/// The minor protocol version that brought NOTIFY.
const NOTIFY_SINCE: u8 = 1;
/// The minor protocol version that brought KEY and KEY_INFO.
const KEYS_SINCE: u8 = 2;

impl Hello {
    /// The trailers `hello` agreed on: none before a handshake.
    fn trailers(hello: Option<&Hello>) -> &Trailers {
        const NONE: &Trailers = &Trailers {
            checksum: false,
            seal: None,
        };
        hello.map_or(NONE, |h| &h.trailers)
    }

    /// The facts of `hello`, with `trailers` as the handshake agreed.
    pub fn of(hello: &HelloRepr, trailers: Trailers) -> Self {
        Hello {
            epoch: hello.epoch,
            max_body: hello.max_body,
            initial_credits: hello.initial_credits,
            trailers,
            notices: hello.version_minor >= NOTIFY_SINCE,
            keys: hello.version_minor >= KEYS_SINCE,
        }
    }
}

/// A link that finished its handshake, as its peer takes it.
#[derive(Debug, Clone)]
pub struct Opened {
    /// Which of the peer's links it is.
    pub index: u8,
    /// The link.
    pub link: LinkId,
    /// What the peer's HELLO said.
    pub hello: Hello,
    /// Whether this side opened the connection.
    pub outbound: bool,
    /// Whether it took the place of another link at the same index (both
    /// sides connected at once), which may have lost what it carried.
    pub replaced: bool,
}

/// One peer, with a window of `W` packets each way.
#[derive(Debug)]
pub struct Peer<const W: usize> {
    id: EndpointId,
    proc: ProcName,
    /// The name its addresses are listed under: its own, or the stand-in
    /// it was reached by ([`ProcName::unnamed`]) before its handshake told
    /// its own.
    listed_as: ProcName,
    state: PeerState,
    links: PeerLinks,
    out: Outbound<W>,
    recv: Received<W>,
    /// What its HELLO said, once a link to it opened: the start of its
    /// process, the largest body it accepts, the trailers of packets both
    /// ways, whether it takes notices and answers KEY.
    hello: Option<Hello>,
    /// What it said of its keys.
    keys: KeyCache,
    credits: Credits,
    acks: AckOwed,
    progress: Progress,
    liveness: Liveness,
    /// Retransmission timeout from measured round trips (lossy framing),
    /// and the backoff of reconnection attempts.
    rtt: RttEstimator,
    /// When the first of an unbroken run of refused reconnections was.
    refused_since: Option<Instant>,
    /// When the gets the peer answered `Busy` ask again: a retransmission
    /// timeout after the first such answer.
    busy_retry: Option<Instant>,
    /// An acknowledgement is overdue: to go on the peer's first link.
    ack_due: bool,
    /// What the upper layer was refused for it, to be told when there is
    /// room ([`room`](super::room)).
    room_wanted: Option<Wanted>,
    /// Its traffic, for the people running the job.
    counters: PeerCounters,
}

impl<const W: usize> Peer<W> {
    /// A peer `id` for process `proc`, its timeouts within `rtt`.
    pub fn new(id: EndpointId, proc: ProcName, rtt: RttConfig) -> Self {
        Peer {
            id,
            proc,
            listed_as: proc,
            state: PeerState::Idle,
            links: PeerLinks::default(),
            out: Outbound::default(),
            recv: Received::default(),
            hello: None,
            keys: KeyCache::default(),
            credits: Credits::default(),
            acks: AckOwed::default(),
            progress: Progress::default(),
            liveness: Liveness::default(),
            rtt: RttEstimator::with_bounds(rtt),
            refused_since: None,
            busy_retry: None,
            ack_due: false,
            room_wanted: None,
            counters: PeerCounters::default(),
        }
    }

    /// Its traffic as of `now` ([`metrics`](super::metrics)).
    pub fn metrics(&self, now: Instant) -> PeerMetrics {
        self.counters.read(now, &self.rtt)
    }

    // ----- what it is ---------------------------------------------------

    /// Its endpoint.
    pub fn id(&self) -> EndpointId {
        self.id
    }

    /// Its process.
    pub fn proc(&self) -> ProcName {
        self.proc
    }

    /// Since when every connection to it was refused (its host answers,
    /// nothing listens at its address), while that lasts.
    pub fn refused_since(&self) -> Option<Instant> {
        self.refused_since
    }

    /// The name its addresses are listed under, for the driver's lookup:
    /// its own, or the stand-in it was reached by.
    pub fn listed_as(&self) -> ProcName {
        self.listed_as
    }

    /// Takes the name its handshake told: it was reached by address alone,
    /// as [`ProcName::unnamed`]; its addresses stay listed under that.
    pub fn rename(&mut self, proc: ProcName) {
        self.proc = proc;
    }

    /// Where it is in its life.
    pub fn state(&self) -> PeerState {
        self.state
    }

    /// Whether data flows.
    pub fn is_open(&self) -> bool {
        self.state == PeerState::Open
    }

    /// Why it was given up, if it was.
    pub fn lost(&self) -> Option<LostReason> {
        match self.state {
            PeerState::Lost(reason) => Some(reason),
            _ => None,
        }
    }

    /// The start of its process, once a link to it opened.
    pub fn epoch(&self) -> Option<u64> {
        self.hello.as_ref().map(|h| h.epoch)
    }

    /// The trailers of packets to and from it: none before its handshake.
    pub fn trailers(&self) -> &Trailers {
        Hello::trailers(self.hello.as_ref())
    }

    /// Whether it has been open: a broken link is reconnected.
    pub fn was_open(&self) -> bool {
        self.hello.is_some()
    }

    /// The largest body it accepts: the least any peer does until it says.
    fn max_body(&self) -> u64 {
        self.hello
            .as_ref()
            .map_or(crate::wire::MIN_MAX_BODY, |h| h.max_body)
    }

    /// Whether it answers KEY: assumed until its handshake says.
    fn answers_keys(&self) -> bool {
        self.hello.as_ref().is_none_or(|h| h.keys)
    }

    /// Since when it has been disconnected, waiting to connect again with
    /// no link under way: what makes it the first to give up for room.
    pub fn disconnected_since(&self) -> Option<Instant> {
        match self.state {
            PeerState::Connecting { since, .. } if self.links.is_empty() => Some(since),
            _ => None,
        }
    }

    /// What it still owes: packets not yet acknowledged, sends and gets
    /// queued, answers owed. Zero once lost.
    pub fn outstanding(&self) -> usize {
        if self.lost().is_some() {
            return 0;
        }
        self.out.len()
    }

    /// The sequence number below which lies everything sent, owed or
    /// queued to it so far: answers and queued packets are numbered, in
    /// that order, before anything sent later.
    pub fn send_mark(&self) -> u64 {
        self.out.mark()
    }

    /// Whether everything numbered below `mark` is acknowledged, or it is
    /// lost (and what it had has failed, with its events queued).
    pub fn acknowledged_below(&self, mark: u64) -> bool {
        self.lost().is_some() || self.out.acknowledged_below(mark)
    }

    /// Whether a packet retained or queued reads registration `handle`.
    pub fn reads(&self, handle: crate::btl::MemHandle) -> bool {
        self.out.reads(handle)
    }

    // ----- links --------------------------------------------------------

    /// The next link index to ask the driver for, if any: none unless the
    /// peer is connecting or open.
    pub fn poll_connect(&mut self) -> Option<u8> {
        if !matches!(self.state, PeerState::Connecting { .. } | PeerState::Open) {
            self.links.stop_asking();
            return None;
        }
        self.links.poll_connect()
    }

    /// Whether it wants a connection from the driver.
    pub fn wants_connection(&self) -> bool {
        self.links.wants_connection()
    }

    /// Link `id`, being opened by this side, is the peer's link `index`
    /// unless it has one.
    pub fn link_connecting(&mut self, index: u8, id: LinkId) {
        self.links.connecting(index, id);
    }

    /// The peer's link at `index`, if any.
    pub fn link_at(&self, index: u8) -> Option<LinkId> {
        self.links.at(index)
    }

    /// The peer's links.
    pub fn links(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.links.ids()
    }

    /// Takes `id` out of the peer's links; its index if it was one.
    pub fn forget_link(&mut self, id: LinkId) -> Option<u8> {
        self.links.forget(id)
    }

    /// Whether an open link other than `index` carries the peer.
    fn carried_without(&self, index: u8) -> bool {
        self.state == PeerState::Open && self.links.open_besides(index)
    }

    /// The link acknowledgements and probes go on.
    pub fn first_link(&self) -> Option<LinkId> {
        self.links.first_open()
    }

    /// A link finished its handshake with this peer at `now`: the peer
    /// opens (again), what it has not acknowledged goes out again unless
    /// another link carried it (or the link took another's place, which
    /// may have lost it), and the side that opened the link asks for the
    /// peer's other links.
    pub fn open_link(&mut self, opened: Opened, config: &EngineConfig, now: Instant) {
        let Opened {
            index,
            link: id,
            hello,
            outbound,
            replaced,
        } = opened;
        let carried = self.carried_without(index);
        self.links.opened(index, id);
        self.refused_since = None;
        self.state = PeerState::Open;
        if self.was_open() && !carried {
            // A reconnection: tell the peer at once what arrived, so it
            // resends no more than it must.
            self.acks.owe(now, true);
            self.counters.reconnected();
        }
        self.credits.open(hello.initial_credits);
        self.hello = Some(hello);
        self.liveness.heard(now);
        if !carried {
            self.progress
                .restart(now, self.out.window.len(), self.recv.held());
        }
        if !carried || replaced {
            self.out.resend_all(now);
        }
        if outbound {
            self.links.want_missing(config.links);
        }
    }

    /// Link `index` is gone (it broke, or its reconnection's handshake
    /// timed out). If another open link carries the peer, what the peer has
    /// not acknowledged goes out there and the link is asked for again
    /// after a backoff; otherwise the peer reconnects, or, if it has never
    /// been open, is lost.
    pub fn link_gone<S: Storage>(&mut self, index: u8, shared: &mut Shared<S>) {
        let now = shared.now;
        if self.state == PeerState::Open {
            self.counters.link_flapped();
        }
        match self.state {
            PeerState::Open if self.carried_without(index) => {
                self.out.resend_all(now);
                self.retry_link_later(index, now);
            }
            PeerState::Open => {
                self.state = PeerState::Connecting {
                    since: self.liveness.last_heard(),
                    retry: None,
                };
                self.links.want(0);
            }
            PeerState::Connecting { .. } if self.was_open() => self.retry_later(now),
            PeerState::Connecting { .. } => {
                self.lose(LostReason::Closed, shared);
            }
            _ => {}
        }
    }

    /// Link `index` was closed by the peer as redundant (`Normal`): when
    /// both sides connect at once, the one whose connection loses closes
    /// it so, and its own connection is on its way. A peer never open
    /// waits for that one, asking again after a backoff until its peer
    /// timeout, rather than being lost because the other connection has
    /// not been accepted here yet; any other is as [`link_gone`](Self::link_gone).
    pub fn link_superseded<S: Storage>(&mut self, index: u8, shared: &mut Shared<S>) {
        match self.state {
            PeerState::Connecting { .. } if !self.was_open() => self.retry_later(shared.now),
            _ => self.link_gone(index, shared),
        }
    }

    /// The connection asked for as link `index` could not be opened, for
    /// `why`: another link carries the peer, so try later; a peer that was
    /// open is tried again after a backoff, until its peer timeout or,
    /// refused every time, the refusal timeout; one never open is lost.
    pub fn connect_failed<S: Storage>(
        &mut self,
        index: u8,
        why: ConnectFailure,
        shared: &mut Shared<S>,
    ) {
        let now = shared.now;
        match self.state {
            PeerState::Open => self.retry_link_later(index, now),
            // One reached by address alone waits for its server to start,
            // until its peer timeout.
            PeerState::Connecting { .. } if self.proc.is_unnamed() => {
                match why {
                    ConnectFailure::Refused => _ = self.refused_since.get_or_insert(now),
                    ConnectFailure::Unreachable => self.refused_since = None,
                }
                self.retry_later(now);
            }
            PeerState::Connecting { .. } if self.was_open() => match why {
                ConnectFailure::Refused => {
                    let first = *self.refused_since.get_or_insert(now);
                    if now - first >= shared.config.refused_timeout {
                        self.lose(LostReason::Refused, shared);
                    } else {
                        self.retry_later(now);
                    }
                }
                ConnectFailure::Unreachable => {
                    self.refused_since = None;
                    self.retry_later(now);
                }
            },
            PeerState::Connecting { .. } => {
                let reason = match why {
                    ConnectFailure::Refused => LostReason::Refused,
                    ConnectFailure::Unreachable => LostReason::Unreachable,
                };
                self.lose(reason, shared);
            }
            _ => {}
        }
    }

    /// Link `index` of an open peer could not be had: ask for it again
    /// after a backoff (doubling, up to the largest retransmission
    /// timeout), while the peer's other links carry it.
    fn retry_link_later(&mut self, index: u8, now: Instant) {
        self.rtt.on_timeout();
        self.links.retry_at(index, now + self.rtt.rto());
    }

    /// A reconnection failed: the next waits a backoff; the peer timeout
    /// keeps running.
    fn retry_later(&mut self, now: Instant) {
        if let PeerState::Connecting { since, .. } = self.state {
            self.rtt.on_timeout();
            self.state = PeerState::Connecting {
                since,
                retry: Some(now + self.rtt.rto()),
            };
        }
    }

    /// The upper layer wants to talk to the peer at `now`: an idle one
    /// starts connecting; a lost one cannot be reached.
    pub fn reach(&mut self, now: Instant) -> Result<(), BtlError> {
        match self.state {
            PeerState::Lost(reason) => Err(BtlError::PeerLost(reason)),
            PeerState::Idle => {
                self.state = PeerState::Connecting {
                    since: now,
                    retry: None,
                };
                self.links.want(0);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The links to drop now that the peer is lost (or started again):
    /// they are the engine's to fail.
    pub fn take_links(&mut self) -> impl Iterator<Item = LinkId> + use<W> {
        self.links.take_all()
    }

    /// The links to drop quietly because they carry nothing any more (a
    /// stream whose probe went unanswered for a whole interval): the peer
    /// connects again, well within its peer timeout.
    pub fn take_silent_links(&mut self) -> Option<impl Iterator<Item = LinkId> + use<W>> {
        if !self.liveness.take_silent() {
            return None;
        }
        Some(self.links.all())
    }

    // ----- loss ---------------------------------------------------------

    /// Gives the peer up: every operation to it fails once with
    /// `PeerLost(reason)`, and its error event is queued.
    pub fn lose<S: Storage>(&mut self, reason: LostReason, shared: &mut Shared<S>) {
        self.fail(reason, BtlError::PeerLost(reason), shared);
    }

    /// Gives the peer up for `reason`, failing every operation to it once
    /// with `error` (`PeerLost`, or `Finalized` when the BTL shuts down,
    /// which reports no lost peer). Its links stay listed for the engine
    /// to fail ([`take_links`](Self::take_links)).
    pub fn fail<S: Storage>(
        &mut self,
        reason: LostReason,
        error: BtlError,
        shared: &mut Shared<S>,
    ) {
        if self.lost().is_some() {
            return;
        }
        self.state = PeerState::Lost(reason);
        if error != BtlError::Finalized {
            self.counters.lost(reason);
            if !reason.is_clean() {
                let (n, _) = shared.unclean_losses;
                shared.unclean_losses = (n + 1, Some((self.proc, reason)));
            }
        }
        self.counters.credit_back(shared.now);
        self.links.stop_asking();
        self.liveness.stop();
        self.ack_due = false;
        self.room_wanted = None;
        // Packets the peer acknowledged while a link wrote them reached it.
        let id = self.id;
        self.out.clear(|released| match released {
            Released::Acknowledged(out) => release(id, out, Ok(()), shared),
            Released::Unacknowledged(out) => release(id, out, Err(error), shared),
            Released::Unsent(desc) => shared.complete_send(id, desc, Err(error)),
        });
        self.recv.drain(|h| drop_held(h, shared));
        shared.ops.fail_peer(self.id, error, &mut shared.events);
        // A peer reached by address that never answered was never a
        // process to the upper layer: the call that reached it says why
        // (what was sent to it fails, each send once).
        if error != BtlError::Finalized && !self.proc.is_unnamed() {
            shared.report_lost(self.id, error);
        }
    }

    /// A new start of the peer's process: everything outstanding to the
    /// old one fails with `PeerLost(Restarted)` (a lost peer is only told
    /// so again), and the record starts over under the same endpoint.
    /// Links still in their handshake reach the new start and are kept;
    /// the open ones are the old start's, for the engine to fail.
    pub fn renew<S: Storage>(&mut self, shared: &mut Shared<S>) -> Vec<LinkId, MAX_PEER_LINKS> {
        let old = self.links.renew();
        let opening = core::mem::take(&mut self.links);
        if self.lost().is_some() {
            // Its operations failed already; the caller still learns that
            // the endpoint now names a new start.
            shared.report_lost(self.id, BtlError::PeerLost(LostReason::Restarted));
        } else {
            self.lose(LostReason::Restarted, shared);
        }
        let (listed_as, mut counters) = (self.listed_as, core::mem::take(&mut self.counters));
        counters.restarted();
        *self = Peer::new(self.id, self.proc, shared.config.rtt);
        self.listed_as = listed_as;
        self.counters = counters;
        self.links = opening;
        old
    }

    // ----- timers -------------------------------------------------------

    /// When it counts as lost if nothing is heard: a peer being connected,
    /// or an open one with something outstanding (any open one when
    /// keepalives are on), silent for the peer timeout.
    fn lost_by(&self, config: &EngineConfig) -> Option<Instant> {
        let waiting = !self.out.is_empty();
        let since = match self.state {
            PeerState::Open if waiting || !config.keepalive.is_zero() => self.liveness.last_heard(),
            PeerState::Connecting { since, .. } => since,
            _ => return None,
        };
        Some(since + config.peer_timeout)
    }

    /// Out of credit with nothing in flight: only the peer's next grant
    /// lets sends go on, and over a lossy transport the ACK carrying it may
    /// be lost.
    fn starved(&self) -> bool {
        !self.credits.has_credit() && self.out.window.is_empty()
    }

    /// What its next probe is timed by ([`Liveness`]); `None` unless it
    /// is open.
    fn probe_rules<F: Framing>(&self, config: &EngineConfig) -> Option<ProbeRules> {
        (self.state == PeerState::Open).then(|| ProbeRules {
            keepalive: config.keepalive,
            peer_timeout: config.peer_timeout,
            lossy: F::LOSSY,
            starved: self.starved(),
            rto: self.rtt.rto(),
        })
    }

    /// Its deadlines.
    pub fn timers<F: Framing>(&self, framing: &F, config: &EngineConfig) -> Timers<PeerTimer, 11> {
        let mut t = Timers::new();
        self.deadlines(framing, config, &mut t);
        t
    }

    /// Its deadlines, into `t`: the table [`timers`](Self::timers) acts
    /// on, or only their earliest, which the engine's `poll_timeout` asks.
    pub fn deadlines<F: Framing>(
        &self,
        framing: &F,
        config: &EngineConfig,
        t: &mut impl Deadlines<PeerTimer>,
    ) {
        t.set(PeerTimer::Lost, self.lost_by(config));
        match self.state {
            PeerState::Connecting { retry, .. } => t.set(PeerTimer::Reconnect, retry),
            PeerState::Open => {
                for (i, at) in self.links.retries() {
                    t.set(PeerTimer::LinkRetry(i), at);
                }
                t.set(
                    PeerTimer::Ack,
                    self.acks.deadline(framing.ack_delay(config)),
                );
                t.set(
                    PeerTimer::Retransmit,
                    framing
                        .retransmit_timeout(&self.rtt)
                        .and_then(|rto| self.out.window.retransmit_deadline(rto)),
                );
                t.set(
                    PeerTimer::Probe,
                    self.probe_rules::<F>(config)
                        .and_then(|rules| self.liveness.next_probe(&rules)),
                );
                t.set(
                    PeerTimer::Stalled,
                    self.progress.stalled_by(config.peer_timeout),
                );
                t.set(PeerTimer::BusyRetry, self.busy_retry);
            }
            _ => {}
        }
    }

    /// Time passed: a silent peer is lost, reconnections and lost links are
    /// asked for again, an overdue acknowledgement goes, lost packets go
    /// again (lossy framing), and a silent peer is probed; a stream whose
    /// probe went unanswered for a whole interval is found silent.
    pub fn on_timeout<S: Storage, F: Framing>(&mut self, framing: &F, shared: &mut Shared<S>) {
        let now = shared.now;
        let t = self.timers(framing, &shared.config);
        if t.is_due(PeerTimer::Lost, now) {
            // A server reached by address that refused every try is not
            // there: said as such, not as a silence.
            let refused = self.proc.is_unnamed() && self.refused_since.is_some();
            let reason = if refused {
                LostReason::Refused
            } else {
                LostReason::Timeout
            };
            self.lose(reason, shared);
            return;
        }
        if t.is_due(PeerTimer::Stalled, now) {
            self.lose(LostReason::Stalled, shared);
            return;
        }
        if let PeerState::Connecting {
            since,
            retry: Some(_),
        } = self.state
            && t.is_due(PeerTimer::Reconnect, now)
        {
            self.state = PeerState::Connecting { since, retry: None };
            self.links.want(0);
            return;
        }
        if self.state != PeerState::Open {
            return;
        }
        for i in 0..MAX_PEER_LINKS as u8 {
            if t.is_due(PeerTimer::LinkRetry(i), now) {
                self.links.retry_due(i);
            }
        }
        self.ack_due |= t.is_due(PeerTimer::Ack, now);
        if t.is_due(PeerTimer::BusyRetry, now) {
            self.busy_retry = None;
            self.reroute(shared, |op| op.path == Path::Busy, |_, _| Route::Packets);
        }
        if let Some(rto) = framing.retransmit_timeout(&self.rtt)
            && self.out.resend_timed_out(now, rto)
        {
            self.rtt.on_timeout();
        }
        let Some(rules) = self.probe_rules::<F>(&shared.config) else {
            return;
        };
        if let Probe::Sent { backoff: true } = self.liveness.on_timeout(now, &rules) {
            // Asked again ever more slowly while the peer grants nothing (a
            // receiver that stopped polling) or answers nothing.
            self.rtt.on_timeout();
        }
    }

    // ----- sending ------------------------------------------------------

    /// Queues a message; it comes back when the queue is full.
    pub fn queue_send(&mut self, desc: Descriptor) -> Result<(), Descriptor> {
        self.out.queue_send(desc)
    }

    /// Whether one more send or GET fits its queue.
    pub fn has_queue_room(&self) -> bool {
        self.out.has_queue_room()
    }

    /// Notes that `wanted` was refused for it, with what was refused before.
    pub fn want_room(&mut self, wanted: Wanted) {
        self.room_wanted = Some(self.room_wanted.map_or(wanted, |w| w.and(wanted)));
    }

    /// What the upper layer was refused for it and not yet told has room.
    pub fn room_wanted(&self) -> Option<Wanted> {
        self.room_wanted
    }

    /// The upper layer is told there is room.
    pub fn forget_room_wanted(&mut self) {
        self.room_wanted = None;
    }

    /// Queues a GET; false when the queue is full.
    pub fn queue_get(&mut self, get: GetRepr) -> bool {
        self.out.queue_get(get)
    }

    /// Whether `sendi` takes a message for the peer: an open peer's goes
    /// at once (nothing waits ahead of it, credit and window room are
    /// there), so that a sender ahead of its peer learns at once; one being
    /// connected waits for the connection in the queue, while it has room,
    /// as the first messages of every connection do.
    pub fn takes_sendi(&self) -> bool {
        match self.state {
            PeerState::Open => {
                self.out.queue.is_empty()
                    && self.out.answers.is_empty()
                    && self.credits.has_credit()
                    && !self.out.window.is_full()
            }
            PeerState::Idle | PeerState::Connecting { .. } => self.out.has_queue_room(),
            PeerState::Lost(_) => false,
        }
    }

    /// Whether the peer holds `share` or more of this side's messages,
    /// queued or sent and not acknowledged (each with its fragment). The
    /// count is made only when queue and window together could reach it.
    pub fn holds_sends(&self, share: usize) -> bool {
        self.out.holds_sends(share)
    }

    /// Whether the peer takes a put's notice: it knows NOTIFY, or has not
    /// said yet (a put to a peer being connected is checked when its
    /// notice is due).
    pub fn takes_notices(&self) -> bool {
        self.hello.as_ref().is_none_or(|h| h.notices)
    }

    /// The largest message the peer takes, once it has said (its
    /// handshake); `None` before.
    pub fn max_message(&self) -> Option<u64> {
        self.was_open()
            .then(|| self.max_body().saturating_sub(SendRepr::LEN as u64))
    }

    /// Whether the peer accepts a message of `len` bytes, once it has said
    /// what it accepts (a peer not yet open is checked when the message
    /// leaves).
    pub fn accepts(&self, len: usize) -> Result<(), BtlError> {
        if !self.was_open() {
            return Ok(());
        }
        let max = self.max_body().saturating_sub(SendRepr::LEN as u64);
        if len as u64 > max {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max,
                whose: Limit::Peer,
            });
        }
        Ok(())
    }

    /// The largest data one PUT packet to the peer carries.
    pub fn put_chunk<S: Storage>(&self, shared: &Shared<S>) -> u64 {
        shared.put_chunk(self.max_body())
    }

    /// Queues an answer to one of the peer's transfers, ahead of everything
    /// else it is owed; until a REJECT is numbered no bare ACK goes out,
    /// so the refused packets are never acknowledged before their refusal.
    /// A transfer already waiting for its answer gets no second one. A
    /// peer that outgrows the answers it is owed (it asks faster than it
    /// takes answers) breaks the protocol and is lost.
    pub fn answer<S: Storage>(&mut self, answer: Answer, shared: &mut Shared<S>) {
        if self.lost().is_none() && self.out.owe(answer).is_err() {
            self.lose(LostReason::ProtocolViolation, shared);
        }
    }

    /// When it was last heard from (a packet of its, not a handshake's).
    pub fn last_heard(&self) -> Instant {
        self.liveness.last_heard()
    }

    /// Asks the peer for an acknowledgement at once (a HELLO claims its
    /// process started again: is the old start alive?); how long its
    /// answer may take.
    pub fn probe_now(&mut self, now: Instant) -> Duration {
        self.liveness.probe_now(now);
        self.rtt.rto()
    }

    /// The next packet to put on a link, and the link: a packet to go
    /// again, then answers, queued messages and gets, and bulk packets, as
    /// credits and the window allow. `None` for the link when no open link
    /// carries the peer: the packet stays retained and goes when one opens.
    pub fn poll_packet<S: Storage>(
        &mut self,
        shared: &mut Shared<S>,
    ) -> Option<(u64, Option<LinkId>)> {
        if let Some((seq, stripe)) = self.out.next_resend() {
            return Some((seq, self.links.next_to_carry(stripe)));
        }
        if self.state != PeerState::Open {
            return None;
        }
        if !self.answers_keys() && self.keys.drop_pending() {
            self.keys_unanswerable(shared);
        }
        while !self.out.window.is_full() {
            if let Some(answer) = self.out.answers.pop_front() {
                let packet = answer.packet(|key| KeyInfoRepr {
                    key,
                    region: shared
                        .regs
                        .describe(RemoteKey(key))
                        .map_err(RejectCode::from),
                });
                return self.push(Outgoing::control(packet), shared);
            }
            if self.answers_keys()
                && let Some(key) = self.keys.poll_query()
            {
                return self.push(Outgoing::control(ControlRepr::Key(key)), shared);
            }
            match self.out.queue.front() {
                Some(Queued::Send(_)) if self.credits.has_credit() => {
                    let Some(Queued::Send(desc)) = self.out.pop_queued() else {
                        break;
                    };
                    // Never more than the peer announced it accepts (it
                    // would take the frame for a protocol violation).
                    let payload = (desc.len() - HEADER_RESERVE) as u64;
                    let room = self.max_body().saturating_sub(SendRepr::LEN as u64);
                    if payload > room {
                        let error = BtlError::TooLarge {
                            len: payload,
                            max: room,
                            whose: Limit::Peer,
                        };
                        shared.complete_send(self.id, desc, Err(error));
                        continue;
                    }
                    self.credits.spend();
                    self.counters.sent_message(payload as usize);
                    return self.push(
                        Outgoing::Send {
                            desc,
                            trailer: Trailer::default(),
                        },
                        shared,
                    );
                }
                Some(Queued::Get(_)) => {
                    let Some(Queued::Get(get)) = self.out.pop_queued() else {
                        break;
                    };
                    return self.push(Outgoing::control(ControlRepr::Get(get)), shared);
                }
                Some(Queued::Send(_)) => self.counters.out_of_credit(shared.now),
                None => {}
            }
            let chunk = self.put_chunk(shared);
            match shared.ops.next_put(self.id, chunk)? {
                Next::Put { put, data, op } => {
                    let out = Outgoing::put(&put, data, op);
                    let ops = &mut shared.ops;
                    let seq = self.out.push(out, shared.now, |_| {
                        ops.unput(usize::from(op), data.len);
                    })?;
                    self.counters.sent_data(data.len);
                    self.progress.on_sent(shared.now);
                    return Some((seq, self.links.next_to_carry(true)));
                }
                Next::Notice { op, .. } if !self.takes_notices() => {
                    let error = Err(BtlError::NotSupported);
                    shared
                        .ops
                        .finish(usize::from(op), error, &mut shared.events);
                }
                // A notice spends a credit, as a message does: its event
                // takes a place at the peer until it is polled.
                Next::Notice { op, .. } if !self.credits.has_credit() => {
                    shared.ops.unnotice(usize::from(op));
                    self.counters.out_of_credit(shared.now);
                    return None;
                }
                Next::Notice { notify, .. } => {
                    self.credits.spend();
                    return self.push(Outgoing::control(ControlRepr::Notify(notify)), shared);
                }
            }
        }
        if !self.out.queue.is_empty() {
            self.counters.window_full();
        }
        None
    }

    /// Numbers `out` in the send window and names its link.
    fn push<S: Storage>(
        &mut self,
        out: Outgoing,
        shared: &mut Shared<S>,
    ) -> Option<(u64, Option<LinkId>)> {
        let (id, now) = (self.id, shared.now);
        let seq = self.out.push(out, now, |out| {
            if let Outgoing::Send { desc, .. } = out {
                shared.complete_send(id, desc, Err(BtlError::OutOfResource));
            }
        })?;
        self.progress.on_sent(now);
        Some((seq, self.links.next_to_carry(false)))
    }

    /// Writes retained packet `seq`'s header with the current
    /// acknowledgement and credits, as it is put on a link: it carries the
    /// acknowledgement owed, so no bare ACK is owed for it any more.
    pub fn stamp<S: Storage>(&mut self, seq: u64, shared: &Shared<S>) {
        let (ack, credits) = (self.ack_to_send().cumulative, self.credits.granted());
        self.acks.sent();
        if self.out.window.transmits(seq).is_some_and(|n| n > 1) {
            self.counters.retransmitted();
        }
        if let Some(out) = self.out.window.get_mut(seq) {
            let trailers = Hello::trailers(self.hello.as_ref());
            out.stamp(seq, ack, credits, trailers, shared.pools());
        }
    }

    /// The acknowledgement to put on link `link_idle` (whether the link has
    /// nothing else queued), if one is owed and due: over a stream it may
    /// wait a little for a packet going back to carry it; over a lossy
    /// transport, packets held past a hole are reported at once (only an
    /// ACK carries the selective acknowledgement). None while a REJECT
    /// waits: the refused packets must not be acknowledged first.
    pub fn poll_ack<F: Framing>(
        &mut self,
        framing: &F,
        config: &EngineConfig,
        link_idle: bool,
        now: Instant,
    ) -> Option<ControlFrame> {
        let holes = F::LOSSY && self.recv.held() > 0;
        if self.state != PeerState::Open || (!link_idle && !holes) {
            return None;
        }
        if !self.acks.is_due(now, framing.ack_delay(config)) {
            return None;
        }
        if self.out.owes_reject() {
            return None;
        }
        Some(self.ack(Flags::empty()))
    }

    /// Whether this side owes the peer an acknowledgement (of packets, or
    /// of credits given back): the engine asks its first link to be
    /// written, where [`poll_ack`](Self::poll_ack) says whether it goes
    /// now.
    pub fn owes_ack(&self) -> bool {
        self.state == PeerState::Open && self.acks.is_owed()
    }

    /// Makes the acknowledgement this side owes go at the next write,
    /// without waiting out its delay: before a CLOSE, so that the peer
    /// learns its last packets arrived instead of failing them with the
    /// peer that left.
    pub fn acknowledge_now(&mut self, now: Instant) {
        if self.owes_ack() {
            self.acks.owe(now, true);
            self.ack_due = true;
        }
    }

    /// Whether an acknowledgement is overdue ([`PeerTimer::Ack`]): the
    /// engine puts it on the peer's first link.
    pub fn take_ack_due(&mut self) -> bool {
        core::mem::take(&mut self.ack_due)
    }

    /// The probe to send, and where: an ACK asking for an acknowledgement.
    pub fn poll_probe(&mut self) -> Option<(LinkId, ControlFrame)> {
        if !self.liveness.take_probe() {
            return None;
        }
        let link = self.first_link()?;
        Some((link, self.ack(Flags::ACK_REQUEST)))
    }

    /// An ACK of what arrived and the credits given back, with `flags`.
    fn ack(&mut self, flags: Flags) -> ControlFrame {
        self.acks.sent();
        ack_frame(
            self.ack_to_send(),
            self.credits.granted(),
            self.trailers(),
            flags,
        )
    }

    /// The acknowledgement to send: what arrived, stopped short of a
    /// refused PUT packet while its REJECT may not have reached the peer
    /// (see [`Received::ack`]). The window is looked at only when a
    /// refusal is pending: this runs for every packet sent.
    fn ack_to_send(&mut self) -> Ack {
        let out = &self.out;
        self.recv.ack(|| out.rejects_in_flight())
    }

    /// A link began writing retained packet `seq` and wrote part of it.
    pub fn pin(&mut self, seq: u64) {
        self.out.pin(seq);
    }

    /// A link is done with retained packet `seq` (written whole, or the
    /// link is gone): if the peer acknowledged it meanwhile, it completes.
    pub fn unpin<S: Storage>(&mut self, seq: u64, shared: &mut Shared<S>) {
        if let Some(out) = self.out.unpin(seq) {
            release(self.id, out, Ok(()), shared);
        }
    }

    // ----- receiving ----------------------------------------------------

    /// Whether the peer's SEND or NOTIFY numbered `seq` may claim an event
    /// place now: one delivered at once always may; one to be held past a
    /// gap only while the peer holds fewer than `share` packets so (its
    /// fair share of the event places, worked out only then).
    pub fn may_hold(&self, seq: u64, share: impl FnOnce() -> usize) -> bool {
        self.recv.may_hold(seq, share)
    }

    /// Whether a SEND or PUT numbered `seq` was received before: its
    /// payload is not read again (a late duplicate must not overwrite
    /// memory the user owns again).
    pub fn is_duplicate(&self, seq: u64) -> bool {
        self.recv.is_duplicate(seq)
    }

    /// Takes an acknowledgement and a credit total from the peer: what it
    /// acknowledges completes (or waits for the link writing it), round
    /// trips are measured, and over a lossy transport the holes a
    /// selective acknowledgement reveals go again at once.
    pub fn on_ack<S: Storage, F: Framing>(
        &mut self,
        ack: Ack,
        credits: u32,
        _framing: &F,
        shared: &mut Shared<S>,
    ) -> Result<(), CloseReason> {
        self.credits.on_grant(credits);
        if self.credits.has_credit() {
            self.counters.credit_back(shared.now);
        }
        if ack.cumulative == 0 {
            return Ok(());
        }
        let now = shared.now;
        let id = self.id;
        let acked = self
            .out
            .on_ack(ack, now, |out| release(id, out, Ok(()), shared))
            .map_err(|_| CloseReason::ProtocolError)?;
        self.progress
            .on_acked(now, acked.released, self.out.window.len());
        if acked.released > 0 {
            self.counters.window_moved();
        }
        match acked.rtt {
            Some(rtt) => self.rtt.on_sample(rtt),
            None if acked.released > 0 => self.rtt.on_progress(),
            None => {}
        }
        if F::LOSSY {
            self.out.resend_holes(now);
        }
        Ok(())
    }

    /// A packet from the peer, read whole from one of its links: its
    /// acknowledgement and credits, then the packet itself through the
    /// receive window, delivered in order. An error is a protocol
    /// violation: the engine fails the link it came on.
    pub fn on_packet<S: Storage, F: Framing>(
        &mut self,
        header: &HeaderRepr,
        receiving: Receiving,
        framing: &F,
        shared: &mut Shared<S>,
    ) -> Result<(), CloseReason> {
        let now = shared.now;
        if self.liveness.heard(now) && F::LOSSY {
            // The answer to probes sent again and again: the path works
            // again, and their backoff ends.
            self.rtt.on_progress();
        }
        // A keepalive or credit probe, or a packet the peer sent before
        // (it missed the acknowledgement): answer.
        let duplicate = matches!(receiving, Receiving::Duplicate);
        if duplicate {
            self.counters.duplicate();
        }
        if header.flags.contains(Flags::ACK_REQUEST) || duplicate {
            self.acks.owe(now, true);
        }
        let sack = match &receiving {
            Receiving::Ack(a) => a.sack,
            _ => 0,
        };
        let ack = Ack {
            cumulative: header.ack,
            sack,
        };
        let held = match receiving {
            Receiving::Send {
                tag,
                seq,
                frag,
                len,
                ..
            } => Some((seq, Held::Send { tag, frag, len })),
            Receiving::Put {
                put,
                seq,
                dst,
                have,
            } => Some((
                seq,
                match dst {
                    Ok(_) => Held::Put {
                        xfer_id: put.xfer_id,
                        len: have,
                    },
                    Err(code) => Held::Refused {
                        xfer_id: put.xfer_id,
                        code,
                    },
                },
            )),
            Receiving::Control { seq, packet } => Some((seq, Held::Control(packet))),
            _ => None,
        };
        let Some((seq, item)) = held else {
            return self.on_ack(ack, header.credits, framing, shared);
        };
        let spends_credit = matches!(
            item,
            Held::Send { .. } | Held::Control(ControlRepr::Notify(_))
        );
        match self.recv.receive(seq, item) {
            // Every new SEND or NOTIFY spends one credit: a peer that sends
            // past what this side granted breaks the protocol (it would fill
            // the fragments and event places every other peer needs).
            Ok(()) if spends_credit && !self.credits.receive(shared.config.initial_credits) => {
                return Err(CloseReason::ProtocolError);
            }
            Ok(()) => {}
            Err(refused) => {
                self.counters.duplicate();
                drop_held(refused, shared);
            }
        }
        self.acks.owe(now, false);
        let mut delivered = 0;
        while let Some(item) = self.recv.pop() {
            self.deliver(item, shared);
            delivered += 1;
        }
        self.progress.on_received(now, delivered, self.recv.held());
        // The body before the acknowledgement: a REJECT must fail its put
        // before the ack of the refused packets could complete it.
        self.on_ack(ack, header.credits, framing, shared)
    }

    /// Acts on a packet delivered in order.
    fn deliver<S: Storage>(&mut self, item: Held, shared: &mut Shared<S>) {
        match item {
            Held::Send { tag, frag, len } => {
                self.counters.received_message(len);
                shared.deliver(self.id, tag, frag, len);
            }
            Held::Put { xfer_id, len } if xfer_id & GET_REPLY != 0 => {
                self.counters.received_data(len);
                let id = xfer_id & !GET_REPLY;
                if let Some(i) = shared.ops.find(OpKind::Get, self.id, id) {
                    shared
                        .ops
                        .credit(i, self.id, id, len, Ok(()), &mut shared.events);
                }
            }
            Held::Put { len, .. } => self.counters.received_data(len),
            Held::Refused { xfer_id, code } => {
                if self.recv.reject_once(xfer_id) {
                    self.answer(Answer::Reject(RejectRepr { xfer_id, code }), shared);
                }
            }
            Held::Control(packet) => self.on_control(packet, shared),
        }
    }

    /// Acts on a numbered control packet delivered in order.
    fn on_control<S: Storage>(&mut self, packet: ControlRepr, shared: &mut Shared<S>) {
        match packet {
            ControlRepr::Get(get) => self.serve_get(get, shared),
            ControlRepr::Key(k) => self.answer(Answer::KeyInfo(k.key), shared),
            ControlRepr::KeyInfo(info) => {
                if self.keys.answer(&info) {
                    self.settle_key(info.key, info.region, shared);
                }
            }
            ControlRepr::Reject(reject) => {
                // Any of this side's transfers to the peer: its put or get,
                // or the data of a get it serves. A get the peer had no
                // room for asks again after a retransmission timeout.
                let Some(i) = shared.ops.find_any(self.id, reject.xfer_id) else {
                    return;
                };
                let busy_get = reject.code == RejectCode::Busy
                    && shared.ops.get(i).is_some_and(|op| op.kind == OpKind::Get);
                if busy_get {
                    shared
                        .ops
                        .update(i, self.id, reject.xfer_id, |op| op.path = Path::Busy);
                    self.busy_retry.get_or_insert(shared.now + self.rtt.rto());
                } else {
                    shared
                        .ops
                        .finish(i, Err(BtlError::Rejected(reject.code)), &mut shared.events);
                }
            }
            ControlRepr::Done(done) => {
                if let Some(i) = shared
                    .ops
                    .find(OpKind::GetThirdParty, self.id, done.xfer_id)
                {
                    shared.ops.finish(i, Ok(()), &mut shared.events);
                }
            }
            ControlRepr::Notify(n) => {
                // Of a put this side refused, or naming memory it may not
                // write: the REJECT said what happened, and no event is due.
                let landed = shared.regs.check_remote(
                    RemoteKey(n.handle).slice(n.offset, n.len),
                    Access::REMOTE_WRITE,
                );
                match landed {
                    Ok(slice) if !self.recv.was_refused(n.xfer_id) => {
                        let from = self.id;
                        shared
                            .events
                            .push_owed(Pending::Done(Completion::PutArrived {
                                from,
                                slice,
                                imm: n.imm,
                            }));
                    }
                    _ => {
                        shared.events.forgive();
                        self.give_back_credit(shared.now);
                    }
                }
            }
        }
    }

    /// The upper layer is done with a message from the peer at `now`: its
    /// credit goes back with the next acknowledgement.
    pub fn give_back_credit(&mut self, now: Instant) {
        self.credits.give_back();
        self.acks.owe(now, false);
    }
}

/// Peer `id`'s retained packet `out` is done with, with `result`: its
/// operation may complete.
fn release<S: Storage>(
    id: EndpointId,
    out: Outgoing,
    result: Result<(), BtlError>,
    shared: &mut Shared<S>,
) {
    match out {
        Outgoing::Send { desc, .. } => shared.complete_send(id, desc, result),
        Outgoing::Put {
            op, xfer_id, data, ..
        } => {
            let events = &mut shared.events;
            shared
                .ops
                .credit(usize::from(op), id, xfer_id, data.len, result, events);
        }
        Outgoing::Control {
            packet: ControlRepr::Notify(n),
            ..
        } => {
            if let Some(i) = shared.ops.find(OpKind::Put, id, n.xfer_id) {
                let events = &mut shared.events;
                shared.ops.notice_taken(i, id, n.xfer_id, result, events);
            }
        }
        Outgoing::Control { .. } => {}
    }
}

/// Lets go of what a packet that will not be delivered holds: a SEND's
/// fragment, a notice's event place.
fn drop_held<S: Storage>(item: Held, shared: &mut Shared<S>) {
    match item {
        Held::Send { frag, .. } => shared.drop_received(frag),
        Held::Control(ControlRepr::Notify(_)) => shared.events.forgive(),
        _ => {}
    }
}

impl<const W: usize> Retained for Peer<W> {
    fn retained(&self, seq: u64) -> Option<&Outgoing> {
        self.out.retained(seq)
    }

    fn let_go(&self) -> Option<u64> {
        Some(self.out.let_go())
    }
}

mod links;
mod liveness;
mod outbound;
mod received;
mod transfers;

#[cfg(test)]
mod tests;
