//! The engine of one process over stream links: handshakes, framing,
//! reliable numbered packets, credits, sends, puts and gets, and the `Btl`
//! interface on top. It does no I/O: the driver reports connections,
//! bytes and time, and carries out the writes and connects it asks for.

use heapless::{Deque, Vec};

use super::config::{EngineConfig, Framing};
use super::handshake::{Handshake, HandshakePacket, LocalHello};
use super::mover::{PayloadTarget, ReadStep, StreamReader};
use super::rtt::RttEstimator;
use super::window::{Ack, Arrival, RecvWindow, Refused, SendWindow};
use crate::btl::{
    Access, Attributes, Btl, BtlError, BtlFlags, Completion, ErrorEvent, Event, Incoming,
    LostReason, MemHandle, MemSlice, OpId, Registrations, RejectCode, RemoteKey, RemoteSlice,
    SendError, SendStatus, Side, Tag,
};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::mca::Exclusivity;
use crate::pool::{Fragment, FragmentClass, FragmentPools};
use crate::wire::{
    AckRepr, CHECKSUM_LEN, CloseReason, CloseRepr, Crc32c, DoneRepr, Flags, GetRepr, HEADER_LEN,
    HeaderRepr, HelloAckRepr, HelloRepr, Limits, NONCE_LEN, PacketType, PutRepr, RejectRepr,
    SendRepr, WireError,
};

/// Reliable packets in flight per peer.
pub const WINDOW: usize = 64;
/// Puts and gets outstanding at once, this side's and peers' gets served.
pub const MAX_OPS: usize = 64;
/// Most slices one [`Transmit`] hands out (coalesced small packets).
pub const MAX_SEGMENTS: usize = 16;
const EVENTS: usize = 256;
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
/// Bit of a PUT's `xfer_id` marking data that answers the receiver's GET.
const GET_REPLY: u64 = 1 << 63;

/// A connection to one peer, as the driver and the engine name it. Valid
/// from the `handle_connected`/`handle_accepted` that made it until the
/// driver's `handle_closed`; after that the engine refuses it
/// ([`LinkError::UnknownLink`]) even once its slot serves a new link, so a
/// driver's late call about an old connection never touches a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkId {
    slot: u16,
    generation: u16,
}

/// Slices the driver writes, in order, on one link (one vectored write).
#[derive(Debug)]
pub struct Transmit<'a> {
    /// The link to write on.
    pub link: LinkId,
    /// The bytes, in order.
    pub segments: Vec<&'a [u8], MAX_SEGMENTS>,
}

/// A connection the engine wants the driver to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The peer.
    pub endpoint: EndpointId,
    /// Its process name, for the driver's address lookup.
    pub proc: ProcName,
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

/// A retained reliable packet, kept until the peer acknowledges it.
#[derive(Debug)]
enum Outgoing {
    /// An active message: prefix in the descriptor's headroom.
    Send {
        desc: Descriptor,
        trailer: [u8; CHECKSUM_LEN],
    },
    /// A piece of a put (or of the answer to a peer's get).
    Put {
        prefix: [u8; PUT_PREFIX],
        data: MemSlice,
        /// The operation's slot and id: a slot freed early (by a REJECT)
        /// and taken by another operation is not credited with this data.
        op: u16,
        xfer_id: u64,
        trailer: [u8; CHECKSUM_LEN],
    },
    /// A packet without payload (GET, REJECT, CLOSE).
    Control { bytes: [u8; CONTROL_MAX], len: u8 },
}

/// A packet of this side's making waiting for the link, credit or window
/// room.
#[derive(Debug)]
enum Queued {
    Send(Descriptor),
    Get(GetRepr),
}

/// A packet answering one of the peer's transfers, waiting for window room.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Reject(RejectRepr),
    Done(DoneRepr),
}

impl Answer {
    fn xfer_id(&self) -> u64 {
        match self {
            Answer::Reject(r) => r.xfer_id,
            Answer::Done(d) => d.xfer_id,
        }
    }
}

/// A reliable packet without payload, as it is numbered and written.
#[derive(Debug, Clone, Copy)]
enum ControlPacket {
    Get(GetRepr),
    Reject(RejectRepr),
    Done(DoneRepr),
}

impl From<Answer> for ControlPacket {
    fn from(a: Answer) -> Self {
        match a {
            Answer::Reject(r) => ControlPacket::Reject(r),
            Answer::Done(d) => ControlPacket::Done(d),
        }
    }
}

/// What a receive window holds until delivery in order.
#[derive(Debug)]
enum Held {
    Send {
        tag: Tag,
        frag: Fragment,
        len: usize,
    },
    Put {
        xfer_id: u64,
        len: u64,
    },
    /// A PUT whose target was refused: answered once per transfer.
    Refused {
        xfer_id: u64,
        code: RejectCode,
    },
    Get(GetRepr),
    Reject(RejectRepr),
    Done(DoneRepr),
    Close(CloseReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerState {
    /// Added; no link yet.
    Idle,
    /// A link is being opened or handshaken (again, after a broken one,
    /// when the peer has been open before). `since` starts the peer
    /// timeout; `retry` is when to ask the driver again after a failed
    /// reconnect (`None`: a request is out).
    Connecting { since: u64, retry: Option<u64> },
    /// Data flows.
    Open,
    /// Given up: every operation failed.
    Lost(LostReason),
}

#[derive(Debug)]
struct Peer {
    proc: ProcName,
    refs: u32,
    state: PeerState,
    link: Option<LinkId>,
    send: SendWindow<Outgoing, WINDOW>,
    recv: RecvWindow<Held, WINDOW>,
    queue: Deque<Queued, PENDING>,
    /// Answers owed to the peer: they go before anything queued.
    answers: Deque<Answer, ANSWERS>,
    /// Largest body the peer accepts; CRC trailers on this link.
    peer_max_body: u64,
    checksum: bool,
    /// Credits: SENDs sent, the peer's initial grant and newest total.
    sends_sent: u32,
    peer_initial: u32,
    peer_granted: u32,
    /// Credits this side granted beyond the initial ones (freed fragments).
    granted: u32,
    /// Acknowledgement owed: received packets or grants not yet reported.
    ack_owed_since: Option<u64>,
    last_heard: u64,
    /// When this side last asked the peer for an acknowledgement
    /// (keepalive, or credit probe over datagrams).
    last_probe: u64,
    /// Retransmission timeout from measured round trips (datagrams), and
    /// the backoff of reconnection attempts.
    rtt: RttEstimator,
    /// The peer has been open: a broken link is reconnected, not fatal.
    was_open: bool,
    /// The xfer ids of this peer's refused puts already answered.
    last_rejected: Option<u64>,
}

impl Peer {
    fn new(proc: ProcName, rtt: RttEstimator) -> Self {
        Peer {
            proc,
            refs: 0,
            state: PeerState::Idle,
            link: None,
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
            last_heard: 0,
            last_probe: 0,
            rtt,
            was_open: false,
            last_rejected: None,
        }
    }

    fn has_credit(&self) -> bool {
        let allowed = self.peer_initial.wrapping_add(self.peer_granted);
        (allowed.wrapping_sub(self.sends_sent) as i32) > 0
    }

    /// Out of credit with nothing in flight: only the peer's next grant
    /// lets sends go on, and over datagrams the ACK carrying it may be lost.
    fn starved(&self) -> bool {
        !self.has_credit() && self.send.is_empty()
    }
}

#[derive(Debug)]
enum TxItem {
    /// A handshake packet, ACK or CLOSE, complete in place.
    Control { bytes: [u8; CONTROL_MAX], len: u8 },
    /// A retained packet of the link's peer.
    Reliable { seq: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    Handshaking,
    Open,
    /// Sending a CLOSE, then to be closed by the driver.
    Closing,
}

/// What the reader is receiving into.
#[derive(Debug)]
enum Receiving {
    None,
    Send {
        tag: Tag,
        seq: u64,
        frag: Fragment,
        have: usize,
        len: usize,
    },
    /// A SEND whose payload waits for a receive fragment.
    WaitingFragment {
        tag: Tag,
        seq: u64,
        len: usize,
    },
    Put {
        put: PutRepr,
        seq: u64,
        dst: Result<MemSlice, RejectCode>,
        have: u64,
    },
    /// A SEND or PUT received before: its payload is dropped unread, and
    /// the peer is owed an acknowledgement (it evidently missed one).
    Duplicate,
    Control(ControlIn),
}

#[derive(Debug, Clone, Copy)]
enum ControlIn {
    Hello(HelloRepr),
    HelloAck(HelloAckRepr),
    Get { seq: u64, get: GetRepr },
    Ack(AckRepr),
    Close { reason: CloseReason },
    Reject { seq: u64, reject: RejectRepr },
    Done { seq: u64, done: DoneRepr },
}

#[derive(Debug)]
struct Link {
    id: LinkId,
    peer: Option<usize>,
    state: LinkState,
    handshake: Handshake,
    reader: StreamReader,
    receiving: Receiving,
    tx: Deque<TxItem, TX_ITEMS>,
    /// Bytes of the front item already written.
    written: usize,
    opened_at: u64,
    /// When the handshake packets last went out (repeated over datagrams).
    hello_sent_at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Put,
    Get,
    /// A get whose data goes to a third process: `peer` puts it there and
    /// answers DONE.
    GetThirdParty,
    /// Serving a peer's get: this side puts, nobody here is told.
    Serve,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: OpKind,
    peer: usize,
    ctx: u64,
    id: u64,
    /// Bytes the operation moves.
    len: u64,
    /// Local data: put source, get destination, served get's source.
    /// A get for a third process has none here.
    local: Option<MemSlice>,
    /// Put destination (key, offset) at the peer.
    remote: RemoteSlice,
    /// A get served for a third process: the process that asked, to be
    /// answered DONE or REJECT under its transfer id.
    reply_to: Option<(ProcName, u64)>,
    /// Bytes handed to packets so far / acknowledged or received so far.
    queued: u64,
    done: u64,
    /// Packets of the transfer (for PUT headers).
    count: u32,
    next_index: u32,
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
    pools: FragmentPools<'r>,
    regs: Registrations<'m, REGS>,
    peers: [Option<Peer>; PEERS],
    links: [Option<Link>; LINKS],
    ops: [Option<Op>; MAX_OPS],
    events: Deque<Pending, EVENTS>,
    delivered: Option<(usize, Fragment)>,
    connects: Deque<ConnectRequest, PEERS>,
    closes: Deque<LinkId, LINKS>,
    /// Links made so far (mod 2^16): the generation of the next one.
    links_made: u16,
    next_op: u64,
    now: u64,
    finalized: bool,
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// An engine with `config`, its descriptors and receive fragments from
    /// `pools`.
    pub fn new(mut config: EngineConfig, pools: FragmentPools<'r>) -> Self {
        let mut eager = pools
            .class_size(FragmentClass::Eager)
            .saturating_sub(SEND_PREFIX);
        let mut max = pools
            .class_size(FragmentClass::Max)
            .saturating_sub(SEND_PREFIX);
        if let Framing::Datagram { mtu } = config.framing {
            // One frame per datagram: messages and PUT packets fit the MTU.
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
            regs: Registrations::new(),
            peers: core::array::from_fn(|_| None),
            links: core::array::from_fn(|_| None),
            ops: [None; MAX_OPS],
            events: Deque::new(),
            delivered: None,
            connects: Deque::new(),
            closes: Deque::new(),
            links_made: 0,
            next_op: 0,
            now: 0,
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
        // A peer lost (or finalized) since it asked wants no connection.
        while let Some(req) = self.connects.pop_front() {
            if self
                .peer(req.endpoint)
                .is_some_and(|p| matches!(p.state, PeerState::Connecting { .. }))
            {
                return Some(req);
            }
        }
        None
    }

    /// A link the driver should close now that its last bytes are written.
    pub fn poll_close(&mut self) -> Option<LinkId> {
        self.closes.pop_front()
    }

    /// The driver opened the connection asked for `endpoint`; `nonce` is 16
    /// fresh random bytes for its handshake.
    pub fn handle_connected(
        &mut self,
        endpoint: EndpointId,
        nonce: [u8; NONCE_LEN],
        now: u64,
    ) -> Result<LinkId, LinkError> {
        self.now = now;
        let index = usize::from(endpoint.0);
        let proc = self
            .peers
            .get(index)
            .and_then(Option::as_ref)
            .map(|p| p.proc)
            .ok_or(LinkError::UnknownEndpoint)?;
        let id = self.new_link(Some(proc), nonce, now)?;
        if let Some(link) = self.link_mut(id) {
            link.peer = Some(index);
        }
        if let Some(peer) = self.peers[index].as_mut() {
            peer.link = Some(id);
        }
        self.flush_handshake(usize::from(id.slot));
        Ok(id)
    }

    /// The driver accepted a connection from an unknown peer; it learns who
    /// from the HELLO.
    pub fn handle_accepted(
        &mut self,
        nonce: [u8; NONCE_LEN],
        now: u64,
    ) -> Result<LinkId, LinkError> {
        self.now = now;
        let id = self.new_link(None, nonce, now)?;
        self.flush_handshake(usize::from(id.slot));
        Ok(id)
    }

    /// The connection asked for `endpoint` could not be opened.
    pub fn handle_connect_failed(&mut self, endpoint: EndpointId, now: u64) {
        self.now = now;
        let index = usize::from(endpoint.0);
        if let Some(Some(peer)) = self.peers.get(index)
            && matches!(peer.state, PeerState::Connecting { .. })
        {
            if peer.was_open {
                self.retry_later(index);
            } else {
                self.lose_peer(index, LostReason::Closed);
            }
        }
    }

    /// A reconnection attempt failed: the next one waits a backoff, and
    /// the peer timeout keeps running.
    fn retry_later(&mut self, p: usize) {
        let now = self.now;
        if let Some(peer) = self.peers[p].as_mut()
            && let PeerState::Connecting { since, .. } = peer.state
        {
            peer.rtt.on_timeout();
            peer.state = PeerState::Connecting {
                since,
                retry: Some(now.saturating_add(peer.rtt.rto())),
            };
        }
    }

    /// A broken link of an open peer: connect again, resend what the peer
    /// has not acknowledged once open, and give up only after the peer
    /// timeout since it was last heard.
    fn reconnect(&mut self, p: usize) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.state = PeerState::Connecting {
            since: peer.last_heard,
            retry: None,
        };
        self.request_connect(p);
    }

    /// Asks the driver for a link to peer `p` (later, if the request queue
    /// is full).
    fn request_connect(&mut self, p: usize) {
        let Some(peer) = self.peers[p].as_ref() else {
            return;
        };
        let req = ConnectRequest {
            endpoint: EndpointId(p as u16),
            proc: peer.proc,
        };
        if self.connects.push_back(req).is_err() {
            self.retry_later(p);
        }
    }

    /// Bytes read from `link`; returns how many were taken. Fewer than
    /// given means the engine waits for receive fragments: hand the rest
    /// again after the upper layer has polled its events.
    pub fn handle_stream(
        &mut self,
        link: LinkId,
        data: &[u8],
        now: u64,
    ) -> Result<usize, LinkError> {
        self.now = now;
        let slot = self.slot_of(link).ok_or(LinkError::UnknownLink)?;
        let Some(taken) = self.read_all(slot, data) else {
            return Ok(data.len());
        };
        self.progress_queues();
        Ok(taken)
    }

    /// Feeds `data` to the link's reader until it takes no more (it waits
    /// for more bytes, or for a receive fragment); returns the bytes taken,
    /// or `None` once the link failed or is closing (the rest is dropped).
    fn read_all(&mut self, slot: usize, data: &[u8]) -> Option<usize> {
        let mut taken = 0;
        loop {
            match self.read_some(slot, &data[taken..]) {
                Ok((0, false)) => return Some(taken),
                Ok((n, _)) => taken += n,
                Err(reason) => {
                    self.fail_link(slot, reason);
                    return None;
                }
            }
            if self.links[slot]
                .as_ref()
                .is_none_or(|l| l.state == LinkState::Closing)
            {
                return None;
            }
        }
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
        now: u64,
    ) -> Result<(), LinkError> {
        self.now = now;
        let slot = self.slot_of(link).ok_or(LinkError::UnknownLink)?;
        let limits = Limits::new(self.config.max_body);
        let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) else {
            return Err(LinkError::UnknownLink);
        };
        if l.state == LinkState::Closing {
            return Ok(());
        }
        if let Err(e) = crate::wire::parse_datagram(datagram, &limits) {
            let damaged = matches!(e, WireError::ChecksumMismatch { .. });
            if l.state == LinkState::Handshaking && !damaged {
                self.fail_link(slot, e.close_reason());
            }
            return Ok(());
        }
        // A fresh reader per datagram, each one frame from its start,
        // whose checksum parse_datagram has just checked.
        l.reader = StreamReader::for_checked_frame(limits);
        l.receiving = Receiving::None;
        let Some(taken) = self.read_all(slot, datagram) else {
            return Ok(());
        };
        if taken < datagram.len()
            && let Some(l) = self.links[slot].as_mut()
        {
            // Waiting for a receive fragment, which holds nothing yet.
            l.receiving = Receiving::None;
        }
        self.progress_queues();
        Ok(())
    }

    /// The connection `link` broke or was closed by the peer.
    pub fn handle_closed(&mut self, link: LinkId, now: u64) {
        self.now = now;
        let Some(slot) = self.slot_of(link) else {
            return;
        };
        let Some(l) = self.links[slot].take() else {
            return;
        };
        if let Receiving::Send { frag, .. } = l.receiving {
            let _ = self.pools.free(frag);
        }
        if let Some(p) = l.peer
            && let Some(peer) = self.peers[p].as_mut()
            && peer.link == Some(link)
        {
            peer.link = None;
            match peer.state {
                PeerState::Open => self.reconnect(p),
                PeerState::Connecting { .. } if peer.was_open => self.retry_later(p),
                PeerState::Connecting { .. } => self.lose_peer(p, LostReason::Closed),
                _ => {}
            }
        }
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
                &self.pools,
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
        let peer = l.peer.and_then(|p| self.peers[p].as_ref());
        let checksum = peer.is_some_and(|p| p.checksum);
        while let Some(front) = l.tx.front() {
            let len = match front {
                TxItem::Control { len, .. } => usize::from(*len),
                TxItem::Reliable { seq } => peer
                    .and_then(|p| p.send.get(*seq))
                    .map_or(0, |out| frame_len(out, checksum, &self.pools, &self.regs)),
            };
            let rest = len.saturating_sub(l.written);
            if left < rest {
                l.written += left;
                return;
            }
            left -= rest;
            l.written = 0;
            l.tx.pop_front();
        }
        if l.state == LinkState::Closing {
            let _ = self.closes.push_back(link);
        }
    }

    /// Time passed: handshakes and silent peers time out, keepalives go
    /// out, and over datagrams lost packets and handshakes go again.
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = now;
        let datagram = self.datagram();
        let repeat_after = self.config.rtt.normalized().initial_rto;
        for slot in 0..LINKS {
            let Some(l) = self.links[slot].as_mut() else {
                continue;
            };
            if l.state != LinkState::Handshaking {
                continue;
            }
            if now.saturating_sub(l.opened_at) >= self.config.handshake_timeout {
                let reconnecting = l
                    .peer
                    .and_then(|p| self.peers[p].as_ref())
                    .is_some_and(|peer| peer.was_open && peer.link == Some(l.id));
                if reconnecting {
                    // Not the peer's fault: try again after a backoff.
                    let p = l.peer;
                    if let Some(p) = p
                        && let Some(peer) = self.peers[p].as_mut()
                    {
                        peer.link = None;
                    }
                    self.fail_link(slot, CloseReason::Normal);
                    if let Some(p) = p {
                        self.retry_later(p);
                    }
                } else {
                    self.fail_link(slot, CloseReason::Timeout);
                }
            } else if datagram && now.saturating_sub(l.hello_sent_at) >= repeat_after {
                l.hello_sent_at = now;
                l.handshake.repeat();
                self.flush_handshake(slot);
            }
        }
        for p in 0..PEERS {
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
                self.request_connect(p);
                continue;
            }
            if peer.state != PeerState::Open {
                continue;
            }
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
            if probe && datagram && peer.starved() {
                // Asked again ever more slowly while the peer grants nothing
                // (a receiver that stopped polling).
                peer.rtt.on_timeout();
            }
            for seq in lost {
                self.resend(p, seq);
            }
            if probe {
                self.probe(p);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next.
    pub fn poll_timeout(&self) -> Option<u64> {
        let datagram = self.datagram();
        let repeat_after = self.config.rtt.normalized().initial_rto;
        let links = self
            .links
            .iter()
            .flatten()
            .filter(|l| l.state == LinkState::Handshaking)
            .map(|l| {
                let fail = l.opened_at.saturating_add(self.config.handshake_timeout);
                if datagram {
                    fail.min(l.hello_sent_at.saturating_add(repeat_after))
                } else {
                    fail
                }
            });
        let peers = self.peers.iter().flatten().filter_map(|p| {
            let retransmit = match p.state {
                PeerState::Open if datagram => p.send.retransmit_deadline(p.rtt.rto()),
                PeerState::Connecting { retry, .. } => retry,
                _ => None,
            };
            [
                self.config.lost_by(p),
                retransmit,
                self.config.probe_at(p, datagram),
            ]
            .into_iter()
            .flatten()
            .min()
        });
        links.chain(peers).min()
    }

    /// Whether `endpoint`'s link has finished its handshake.
    pub fn is_connected(&self, endpoint: EndpointId) -> bool {
        self.peer(endpoint)
            .is_some_and(|p| p.state == PeerState::Open)
    }

    // ----- internals ---------------------------------------------------

    fn datagram(&self) -> bool {
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
        item_segments(item, peer, &self.pools, &self.regs, &mut segments, &mut 0);
        (!segments.is_empty()).then_some(Transmit { link, segments })
    }

    fn peer(&self, endpoint: EndpointId) -> Option<&Peer> {
        self.peers.get(usize::from(endpoint.0))?.as_ref()
    }

    fn link_mut(&mut self, id: LinkId) -> Option<&mut Link> {
        let slot = self.slot_of(id)?;
        self.links[slot].as_mut()
    }

    /// The slot of a current link; `None` for an id that is stale (closed,
    /// its slot perhaps reused) or was never handed out.
    fn slot_of(&self, id: LinkId) -> Option<usize> {
        let slot = usize::from(id.slot);
        self.links
            .get(slot)?
            .as_ref()
            .is_some_and(|l| l.id == id)
            .then_some(slot)
    }

    /// The id of the link in `slot` (a stale one if there is none).
    fn link_id(&self, slot: usize) -> LinkId {
        self.links.get(slot).and_then(Option::as_ref).map_or(
            LinkId {
                slot: slot as u16,
                generation: 0,
            },
            |l| l.id,
        )
    }

    fn new_link(
        &mut self,
        expected: Option<ProcName>,
        nonce: [u8; NONCE_LEN],
        now: u64,
    ) -> Result<LinkId, LinkError> {
        let slot = self
            .links
            .iter()
            .position(Option::is_none)
            .ok_or(LinkError::TooManyLinks)?;
        let local = LocalHello {
            me: self.config.me,
            link_index: 0,
            nonce,
            checksum: self.config.checksum,
            keyed: self.config.job_key.is_some(),
            max_body: self.config.max_body,
            initial_credits: self.config.initial_credits,
        };
        self.links_made = self.links_made.wrapping_add(1);
        let id = LinkId {
            slot: slot as u16,
            generation: self.links_made,
        };
        self.links[slot] = Some(Link {
            id,
            peer: None,
            state: LinkState::Handshaking,
            handshake: Handshake::new(&local, expected),
            reader: StreamReader::new(Limits::new(self.config.max_body)),
            receiving: Receiving::None,
            tx: Deque::new(),
            written: 0,
            opened_at: now,
            hello_sent_at: now,
        });
        Ok(id)
    }

    /// Queues whatever handshake packets are due on a link.
    fn flush_handshake(&mut self, slot: usize) {
        let key = self.config.job_key.clone();
        while let Some(packet) = self.links[slot]
            .as_mut()
            .and_then(|l| l.handshake.poll_send(key.as_deref()))
        {
            let mut bytes = [0u8; CONTROL_MAX];
            let len = match packet {
                HandshakePacket::Hello(h) => emit_control(
                    &mut bytes,
                    PacketType::Hello,
                    0,
                    0,
                    0,
                    Flags::empty(),
                    |b| h.emit(chunk(b)),
                ),
                HandshakePacket::HelloAck(a) => emit_control(
                    &mut bytes,
                    PacketType::HelloAck,
                    0,
                    0,
                    0,
                    Flags::empty(),
                    |b| a.emit(chunk(b)),
                ),
            };
            if let Some(l) = self.links[slot].as_mut() {
                let _ = l.tx.push_back(TxItem::Control { bytes, len });
            }
        }
        self.maybe_open(slot);
    }

    /// Opens the link's peer once its handshake completes.
    fn maybe_open(&mut self, slot: usize) {
        let Some(l) = self.links[slot].as_ref() else {
            return;
        };
        if l.state != LinkState::Handshaking || !l.handshake.is_complete() {
            return;
        }
        let Some(hello) = l.handshake.peer().copied() else {
            return;
        };
        let checksum = l.handshake.checksum();
        let proc = ProcName::new(hello.job, hello.rank);
        // A finalized engine opens nothing more.
        if self.finalized {
            self.fail_link(slot, CloseReason::Shutdown);
            return;
        }
        let index = match l.peer {
            Some(p) => p,
            None => match self.find_or_add_peer(proc) {
                Some(p) => p,
                None => {
                    self.fail_link(slot, CloseReason::ResourceExhausted);
                    return;
                }
            },
        };
        // A lost peer stays lost: reconnection is not built yet.
        if self.peers[index]
            .as_ref()
            .is_some_and(|p| matches!(p.state, PeerState::Lost(_)))
        {
            self.fail_link(slot, CloseReason::Normal);
            return;
        }
        let id = self.link_id(slot);
        if let Some(peer) = self.peers[index].as_mut() {
            if let Some(old) = peer.link
                && old != id
                && self.links[usize::from(old.slot)].is_some()
            {
                // Both sides connected at once: the connection opened by the
                // lower process name survives.
                let ours_outbound = self.links[slot].as_ref().is_some_and(|l| l.peer.is_some());
                let initiator = if ours_outbound { self.config.me } else { proc };
                let other = if ours_outbound { proc } else { self.config.me };
                if initiator > other {
                    self.fail_link(slot, CloseReason::Normal);
                    return;
                }
                self.fail_link(usize::from(old.slot), CloseReason::Normal);
            }
            let Some(peer) = self.peers[index].as_mut() else {
                return;
            };
            peer.link = Some(id);
            peer.state = PeerState::Open;
            if peer.was_open {
                // A reconnect: tell the peer at once what arrived, so it
                // resends no more than it must.
                peer.ack_owed_since = Some(self.now);
            }
            peer.was_open = true;
            peer.checksum = checksum;
            peer.peer_max_body = hello.max_body;
            peer.peer_initial = hello.initial_credits;
            peer.last_heard = self.now;
        }
        if let Some(l) = self.links[slot].as_mut() {
            l.peer = Some(index);
            l.state = LinkState::Open;
        }
        // What the peer has not acknowledged goes out again on this link:
        // after a switch from another one (both sides connected at once),
        // what was written there is lost. The peer drops duplicates.
        let mut retained: Vec<u64, WINDOW> = Vec::new();
        if let Some(peer) = self.peers[index].as_mut() {
            for resend in peer.send.resend_all(self.now) {
                let _ = retained.push(resend.seq);
            }
        }
        for seq in retained {
            self.enqueue_reliable(index, seq);
        }
        self.progress_queues();
    }

    fn find_or_add_peer(&mut self, proc: ProcName) -> Option<usize> {
        if let Some(i) = self
            .peers
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.proc == proc))
        {
            return Some(i);
        }
        let i = self.peers.iter().position(Option::is_none)?;
        self.peers[i] = Some(Peer::new(proc, RttEstimator::with_bounds(self.config.rtt)));
        Some(i)
    }

    /// Reads from `input` into the link's current frame; returns the bytes
    /// taken and whether anything happened (a frame may end without input).
    fn read_some(&mut self, slot: usize, input: &[u8]) -> Result<(usize, bool), CloseReason> {
        if let Some(l) = self.links[slot].as_mut()
            && let Receiving::WaitingFragment { tag, seq, len } = l.receiving
        {
            let Ok(frag) = self.pools.alloc(len) else {
                return Ok((0, false));
            };
            l.receiving = Receiving::Send {
                tag,
                seq,
                frag,
                have: 0,
                len,
            };
            l.reader.set_target(PayloadTarget::Engine);
        }
        let Some(l) = self.links[slot].as_mut() else {
            return Ok((input.len(), false));
        };
        let mut used = 0;
        let step = l
            .reader
            .step(input, &mut used)
            .map_err(|e| e.close_reason())?;
        match step {
            ReadStep::NeedMore => Ok((used, false)),
            ReadStep::Prefix { header } => {
                self.on_prefix(slot, header)?;
                Ok((used, true))
            }
            ReadStep::Payload { len } => {
                let bytes = &input[..len];
                self.on_payload(slot, bytes);
                if let Some(l) = self.links[slot].as_mut() {
                    l.reader.consume_payload(bytes);
                }
                Ok((len, true))
            }
            ReadStep::Done { header } => {
                self.on_frame(slot, header)?;
                Ok((used, true))
            }
        }
    }

    /// Header and fixed fields are in: decode them and choose the target.
    fn on_prefix(&mut self, slot: usize, header: HeaderRepr) -> Result<(), CloseReason> {
        let Some(l) = self.links[slot].as_ref() else {
            return Ok(());
        };
        let open = l.state == LinkState::Open;
        let peer = l.peer;
        let payload_left = l.reader.payload_left();
        let mut fixed = [0u8; HelloRepr::LEN];
        let n = l.reader.fixed().len().min(fixed.len());
        fixed[..n].copy_from_slice(&l.reader.fixed()[..n]);
        let fixed = &fixed[..n];
        let bad = |e: crate::wire::WireError| e.close_reason();
        let control = |c| (Receiving::Control(c), PayloadTarget::Discard);
        let discard = (Receiving::None, PayloadTarget::Discard);
        // A SEND or PUT already received: its payload is not read again (a
        // late duplicate must not overwrite memory the user owns again).
        let duplicate = matches!(header.packet_type, PacketType::Send | PacketType::Put)
            && peer.and_then(|p| self.peers[p].as_ref()).is_some_and(|p| {
                matches!(
                    p.recv.classify(header.seq),
                    Arrival::Duplicate | Arrival::OutsideWindow
                )
            });
        let (receiving, target) = match header.packet_type {
            PacketType::Hello => control(ControlIn::Hello(
                HelloRepr::parse(chunk_ref(fixed)?).map_err(bad)?,
            )),
            PacketType::HelloAck => {
                control(ControlIn::HelloAck(HelloAckRepr::parse(chunk_ref(fixed)?)))
            }
            PacketType::Close => control(ControlIn::Close {
                reason: CloseRepr::parse(chunk_ref(fixed)?).map_err(bad)?.reason,
            }),
            // Over datagrams the peer may finish its handshake first, and
            // its packets overtake the last of it: dropped, they come again.
            _ if !open && self.datagram() => discard,
            _ if !open => return Err(CloseReason::ProtocolError),
            _ if duplicate => (Receiving::Duplicate, PayloadTarget::Discard),
            PacketType::Ack => control(ControlIn::Ack(AckRepr::parse(chunk_ref(fixed)?))),
            PacketType::Reject => control(ControlIn::Reject {
                seq: header.seq,
                reject: RejectRepr::parse(chunk_ref(fixed)?).map_err(bad)?,
            }),
            PacketType::Get => control(ControlIn::Get {
                seq: header.seq,
                get: GetRepr::parse(chunk_ref(fixed)?).map_err(bad)?,
            }),
            PacketType::Done => control(ControlIn::Done {
                seq: header.seq,
                done: DoneRepr::parse(chunk_ref(fixed)?),
            }),
            PacketType::Send => {
                let tag = Tag(SendRepr::parse(chunk_ref(fixed)?).map_err(bad)?.tag);
                let len = usize::try_from(payload_left).map_err(|_| CloseReason::ProtocolError)?;
                match self.pools.alloc(len) {
                    Ok(frag) => (
                        Receiving::Send {
                            tag,
                            seq: header.seq,
                            frag,
                            have: 0,
                            len,
                        },
                        PayloadTarget::Engine,
                    ),
                    // No fragment now: the payload waits in the stream.
                    Err(crate::pool::PoolError::Exhausted { .. }) => {
                        if let Some(l) = self.links[slot].as_mut() {
                            l.receiving = Receiving::WaitingFragment {
                                tag,
                                seq: header.seq,
                                len,
                            };
                        }
                        // Take the header's acknowledgement and credits now:
                        // the fragments may all be held by this side's own
                        // sends, which only an acknowledgement gives back,
                        // and every later one waits behind this payload.
                        // (Taken again with the whole frame: a repeated
                        // acknowledgement releases nothing.)
                        if let Some(p) = peer {
                            let ack = Ack {
                                cumulative: header.ack,
                                sack: 0,
                            };
                            self.on_ack(p, ack, header.credits)?;
                        }
                        return Ok(());
                    }
                    Err(_) => return Err(CloseReason::ProtocolError),
                }
            }
            PacketType::Put => {
                let put = PutRepr::parse(chunk_ref(fixed)?, payload_left).map_err(bad)?;
                let dst = self.put_target(peer, &put, payload_left);
                let target = if dst.is_ok() {
                    PayloadTarget::Engine
                } else {
                    PayloadTarget::Discard
                };
                (
                    Receiving::Put {
                        put,
                        seq: header.seq,
                        dst,
                        have: 0,
                    },
                    target,
                )
            }
        };
        if let Some(l) = self.links[slot].as_mut() {
            l.receiving = receiving;
            l.reader.set_target(target);
        }
        Ok(())
    }

    /// Where a PUT's data lands: an outstanding get's buffer for a reply, a
    /// registration for a peer's put; the refusal code otherwise.
    fn put_target(
        &self,
        peer: Option<usize>,
        put: &PutRepr,
        len: u64,
    ) -> Result<MemSlice, RejectCode> {
        if put.xfer_id & GET_REPLY != 0 {
            let op = self
                .ops
                .iter()
                .flatten()
                .find(|o| {
                    o.kind == OpKind::Get
                        && Some(o.peer) == peer
                        && o.id == put.xfer_id & !GET_REPLY
                })
                .ok_or(RejectCode::BadHandle)?;
            let local = op.local.ok_or(RejectCode::BadHandle)?;
            let end = put.offset.checked_add(len).ok_or(RejectCode::OutOfBounds)?;
            if end > op.len {
                return Err(RejectCode::OutOfBounds);
            }
            return Ok(MemSlice {
                handle: local.handle,
                offset: local.offset + put.offset,
                len,
            });
        }
        let remote = RemoteSlice {
            key: RemoteKey(put.handle),
            offset: put.offset,
            len,
        };
        self.regs
            .check_remote(remote, Access::REMOTE_WRITE)
            .map_err(RejectCode::from)
    }

    fn on_payload(&mut self, slot: usize, bytes: &[u8]) {
        let Some(l) = self.links[slot].as_mut() else {
            return;
        };
        match &mut l.receiving {
            Receiving::Send { frag, have, .. } => {
                if let Ok(buf) = self.pools.bytes_mut(frag)
                    && let Some(dst) = buf.get_mut(*have..*have + bytes.len())
                {
                    dst.copy_from_slice(bytes);
                }
                *have += bytes.len();
            }
            Receiving::Put {
                dst: Ok(dst), have, ..
            } => {
                let part = MemSlice {
                    handle: dst.handle,
                    offset: dst.offset + *have,
                    len: bytes.len() as u64,
                };
                if let Ok(region) = self.regs.slice_mut(part) {
                    region.copy_from_slice(bytes);
                }
                *have += bytes.len() as u64;
            }
            _ => {}
        }
    }

    /// A whole frame arrived (trailer checked).
    fn on_frame(&mut self, slot: usize, header: HeaderRepr) -> Result<(), CloseReason> {
        let key = self.config.job_key.clone();
        let datagram = self.datagram();
        let Some(l) = self.links[slot].as_mut() else {
            return Ok(());
        };
        let receiving = core::mem::replace(&mut l.receiving, Receiving::None);
        let peer = l.peer;
        match receiving {
            Receiving::None => Ok(()),
            // Over datagrams handshake packets are repeated until they get
            // through: a repeated HELLO means the peer still waits for this
            // side's HELLO_ACK; a repeated HELLO_ACK is dropped.
            Receiving::Control(ControlIn::Hello(hello))
                if datagram && l.handshake.peer() == Some(&hello) =>
            {
                l.handshake.repeat_ack();
                self.flush_handshake(slot);
                Ok(())
            }
            Receiving::Control(ControlIn::HelloAck(_))
                if datagram && (l.handshake.is_verified() || l.handshake.peer().is_none()) =>
            {
                Ok(())
            }
            Receiving::Control(ControlIn::Hello(hello)) => {
                l.handshake.on_hello(hello).map_err(|e| e.close_reason())?;
                self.flush_handshake(slot);
                Ok(())
            }
            Receiving::Control(ControlIn::HelloAck(ack)) => {
                l.handshake
                    .on_hello_ack(&ack, key.as_deref())
                    .map_err(|e| e.close_reason())?;
                self.flush_handshake(slot);
                Ok(())
            }
            Receiving::Control(ControlIn::Close { reason, .. }) => {
                // The peer is closing this link: nothing more goes out on it.
                l.state = LinkState::Closing;
                l.tx.clear();
                l.written = 0;
                let _ = self.closes.push_back(self.link_id(slot));
                // Only the peer's current link takes the peer with it; the
                // other is a duplicate the peer drops (both connected at once).
                let current = self.link_id(slot);
                if let Some(p) = peer
                    && let Some(peer) = self.peers[p].as_mut()
                    && peer.link == Some(current)
                {
                    peer.link = None;
                    self.deliver(p, Held::Close(reason));
                }
                Ok(())
            }
            other => {
                let p = peer.ok_or(CloseReason::ProtocolError)?;
                self.on_peer_packet(p, header, other)
            }
        }
    }

    /// A packet of an open link's peer: acknowledgement and credits first,
    /// then the packet itself through the receive window.
    fn on_peer_packet(
        &mut self,
        p: usize,
        header: HeaderRepr,
        receiving: Receiving,
    ) -> Result<(), CloseReason> {
        let now = self.now;
        let sack = match &receiving {
            Receiving::Control(ControlIn::Ack(a)) => a.sack,
            _ => 0,
        };
        if let Some(peer) = self.peers[p].as_mut() {
            peer.last_heard = now;
            // A keepalive or credit probe, or a packet the peer sent
            // before (it missed the acknowledgement): answer.
            if header.flags.contains(Flags::ACK_REQUEST)
                || matches!(receiving, Receiving::Duplicate)
            {
                peer.ack_owed_since.get_or_insert(now);
            }
        }
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
            } => {
                let held = match dst {
                    Ok(_) => Held::Put {
                        xfer_id: put.xfer_id,
                        len: have,
                    },
                    Err(code) => Held::Refused {
                        xfer_id: put.xfer_id,
                        code,
                    },
                };
                Some((seq, held))
            }
            Receiving::Control(ControlIn::Get { seq, get }) => Some((seq, Held::Get(get))),
            Receiving::Control(ControlIn::Reject { seq, reject }) => {
                Some((seq, Held::Reject(reject)))
            }
            Receiving::Control(ControlIn::Done { seq, done }) => Some((seq, Held::Done(done))),
            _ => None,
        };
        let Some((seq, item)) = held else {
            return self.on_ack(p, ack, header.credits);
        };
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        match peer.recv.receive(seq, item) {
            Ok(_) => {}
            Err(Refused::Duplicate(item)) | Err(Refused::OutsideWindow(item)) => {
                if let Held::Send { frag, .. } = item {
                    let _ = self.pools.free(frag);
                }
            }
        }
        if let Some(peer) = self.peers[p].as_mut() {
            peer.ack_owed_since.get_or_insert(now);
        }
        while let Some((_, item)) = self.peers[p].as_mut().and_then(|peer| peer.recv.pop()) {
            self.deliver(p, item);
        }
        // The body before the acknowledgement: a REJECT must fail its put
        // before the ack of the refused packets could complete it.
        self.on_ack(p, ack, header.credits)
    }

    fn deliver(&mut self, p: usize, item: Held) {
        let from = EndpointId(p as u16);
        match item {
            Held::Send { tag, frag, len } => {
                if let Err(Pending::Received { frag, .. }) =
                    self.events.push_back(Pending::Received {
                        from,
                        tag,
                        frag,
                        len,
                    })
                {
                    let _ = self.pools.free(frag);
                }
            }
            Held::Put { xfer_id, len } if xfer_id & GET_REPLY != 0 => {
                let id = xfer_id & !GET_REPLY;
                if let Some(i) = self.find_op(OpKind::Get, p, id)
                    && let Some(op) = self.ops[i].as_mut()
                {
                    op.done = op.done.saturating_add(len);
                    if op.done >= op.len {
                        self.finish_op(i, Ok(()));
                    }
                }
            }
            Held::Put { .. } => {}
            Held::Refused { xfer_id, code } => {
                let peer = self.peers[p].as_mut();
                if let Some(peer) = peer
                    && peer.last_rejected != Some(xfer_id)
                {
                    peer.last_rejected = Some(xfer_id);
                    self.answer(p, Answer::Reject(RejectRepr { xfer_id, code }));
                }
            }
            Held::Get(get) => self.serve_get(p, get),
            Held::Reject(reject) => {
                // Any of this side's transfers to the peer: its put or get,
                // or the data of a get it serves.
                let id = reject.xfer_id;
                let found = self
                    .ops
                    .iter()
                    .position(|o| o.is_some_and(|o| o.peer == p && o.id == id));
                if let Some(i) = found {
                    self.finish_op(i, Err(BtlError::Rejected(reject.code)));
                }
            }
            Held::Done(done) => {
                if let Some(i) = self.find_op(OpKind::GetThirdParty, p, done.xfer_id) {
                    self.finish_op(i, Ok(()));
                }
            }
            Held::Close(reason) => {
                let lost = match reason {
                    CloseReason::VersionMismatch => LostReason::VersionMismatch,
                    CloseReason::AuthFailed => LostReason::AuthFailed,
                    CloseReason::Timeout => LostReason::Timeout,
                    CloseReason::ProtocolError => LostReason::ProtocolViolation,
                    _ => LostReason::Closed,
                };
                self.lose_peer(p, lost);
            }
        }
    }

    fn find_op(&self, kind: OpKind, peer: usize, id: u64) -> Option<usize> {
        self.ops
            .iter()
            .position(|o| o.is_some_and(|o| o.kind == kind && o.peer == peer && o.id == id))
    }

    fn finish_op(&mut self, i: usize, result: Result<(), BtlError>) {
        let Some(op) = self.ops[i].take() else {
            return;
        };
        let (op_id, ctx) = (OpId(op.id), op.ctx);
        let done = match op.kind {
            OpKind::Put => Completion::Put {
                op: op_id,
                ctx,
                result,
            },
            OpKind::Get | OpKind::GetThirdParty => Completion::Get {
                op: op_id,
                ctx,
                result,
            },
            OpKind::Serve => {
                if let Some((origin, xfer_id)) = op.reply_to {
                    self.answer_third_party(origin, xfer_id, result);
                }
                return;
            }
        };
        let _ = self.events.push_back(Pending::Done(done));
    }

    /// Tells the process that asked for a get on behalf of a third one how
    /// it ended: DONE once the target has acknowledged all of the data,
    /// REJECT with the target's code, or `NoTarget` when the target was
    /// lost. Nothing is owed to a process already lost, nor after finalize.
    fn answer_third_party(&mut self, origin: ProcName, xfer_id: u64, result: Result<(), BtlError>) {
        let answer = match result {
            Ok(()) => Answer::Done(DoneRepr { xfer_id }),
            Err(BtlError::Finalized) => return,
            Err(BtlError::Rejected(code)) => Answer::Reject(RejectRepr { xfer_id, code }),
            Err(_) => Answer::Reject(RejectRepr {
                xfer_id,
                code: RejectCode::NoTarget,
            }),
        };
        let found = self.peers.iter().position(|peer| {
            peer.as_ref().is_some_and(|peer| {
                peer.proc == origin && !matches!(peer.state, PeerState::Lost(_))
            })
        });
        if let Some(p) = found {
            self.answer(p, answer);
        }
    }

    /// A peer's get: check the source, then put it back as a reply, put it
    /// to the third process it names, or copy it within this process.
    fn serve_get(&mut self, p: usize, get: GetRepr) {
        let reject = |code| {
            Answer::Reject(RejectRepr {
                xfer_id: get.xfer_id,
                code,
            })
        };
        let src = RemoteSlice {
            key: RemoteKey(get.src_handle),
            offset: get.src_offset,
            len: get.len,
        };
        let dst = RemoteSlice {
            key: RemoteKey(get.dst_handle),
            offset: get.dst_offset,
            len: get.len,
        };
        let target = ProcName::new(get.target_job, get.target_rank);
        if target == self.config.me {
            // Into another of this process's registrations: one copy.
            let answer = match self.regs.copy(Side::Remote(src), Side::Remote(dst)) {
                Ok(()) => Answer::Done(DoneRepr {
                    xfer_id: get.xfer_id,
                }),
                Err(e) => reject(e.into()),
            };
            self.answer(p, answer);
            return;
        }
        let (to, id, reply_to) = if self.peers[p]
            .as_ref()
            .is_some_and(|peer| peer.proc == target)
        {
            (p, get.xfer_id | GET_REPLY, None)
        } else {
            let Some(q) = self.reach(target) else {
                self.answer(p, reject(RejectCode::NoTarget));
                return;
            };
            self.next_op += 1;
            (
                q,
                self.next_op & !GET_REPLY,
                Some((self.peer_proc(p), get.xfer_id)),
            )
        };
        let local = match self.regs.check_remote(src, Access::REMOTE_READ) {
            Ok(local) => local,
            Err(e) => {
                self.answer(p, reject(e.into()));
                return;
            }
        };
        let Some(i) = self.ops.iter().position(Option::is_none) else {
            self.answer(p, reject(RejectCode::TooLarge));
            return;
        };
        let chunk = self.put_chunk(to);
        self.ops[i] = Some(Op {
            kind: OpKind::Serve,
            peer: to,
            ctx: 0,
            id,
            len: get.len,
            local: Some(local),
            remote: dst,
            queued: 0,
            done: 0,
            count: packet_count(get.len, chunk),
            next_index: 0,
            reply_to,
        });
        if get.len == 0 {
            self.finish_op(i, Ok(()));
        }
        self.progress_queues();
    }

    /// The peer that is process `proc`, asked to connect if it is idle, or
    /// `None` when this engine does not know it or has lost it.
    fn reach(&mut self, proc: ProcName) -> Option<usize> {
        let q = self
            .peers
            .iter()
            .position(|peer| peer.as_ref().is_some_and(|peer| peer.proc == proc))?;
        self.check_endpoint(EndpointId(q as u16)).ok()
    }

    fn peer_proc(&self, p: usize) -> ProcName {
        self.peers[p]
            .as_ref()
            .map_or(self.config.me, |peer| peer.proc)
    }

    /// Queues an answer to one of peer `p`'s transfers, ahead of everything
    /// else it is owed; until a REJECT is numbered no bare ACK goes out, so
    /// the refused packets are never acknowledged before their refusal. A
    /// transfer already waiting for its answer gets no second one. A peer
    /// that outgrows [`ANSWERS`] breaks the protocol and is lost.
    fn answer(&mut self, p: usize, answer: Answer) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        if peer.answers.iter().any(|a| a.xfer_id() == answer.xfer_id()) {
            return;
        }
        if peer.answers.push_back(answer).is_err() {
            let lost = LostReason::ProtocolViolation;
            self.fail_peer(p, lost, BtlError::PeerLost(lost));
            return;
        }
        self.progress_queues();
    }

    fn put_chunk(&self, p: usize) -> u64 {
        let peer_max = self.peers[p]
            .as_ref()
            .map_or(crate::wire::MIN_MAX_BODY, |peer| peer.peer_max_body);
        self.config
            .put_chunk
            .min(peer_max.saturating_sub(PutRepr::LEN as u64))
            .max(1)
    }

    /// Takes an acknowledgement and a credit total from the peer.
    fn on_ack(&mut self, p: usize, ack: Ack, credits: u32) -> Result<(), CloseReason> {
        let now = self.now;
        let datagram = self.datagram();
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        if (credits.wrapping_sub(peer.peer_granted) as i32) > 0 {
            peer.peer_granted = credits;
        }
        if ack.cumulative == 0 {
            return Ok(());
        }
        let mut released: Vec<(u64, Outgoing), WINDOW> = Vec::new();
        let acked = peer
            .send
            .on_ack(ack, now, |seq, out| {
                let _ = released.push((seq, out));
            })
            .map_err(|_| CloseReason::ProtocolError)?;
        match acked.rtt {
            Some(rtt) => peer.rtt.on_sample(rtt),
            None if acked.released > 0 => peer.rtt.on_progress(),
            None => {}
        }
        // Holes the selective acknowledgement reveals go again at once.
        let mut lost: Vec<u64, WINDOW> = Vec::new();
        if datagram {
            while let Some(resend) = peer.send.next_fast_retransmit(now) {
                let _ = lost.push(resend.seq);
            }
        }
        for (_, out) in released {
            self.release(p, out, Ok(()));
        }
        for seq in lost {
            self.resend(p, seq);
        }
        self.progress_queues();
        Ok(())
    }

    /// A retained packet is done with: its operation may complete.
    fn release(&mut self, p: usize, out: Outgoing, result: Result<(), BtlError>) {
        match out {
            Outgoing::Send { desc, .. } => self.complete_send(p, desc, result),
            Outgoing::Put {
                op: i,
                xfer_id,
                data,
                ..
            } => {
                let i = usize::from(i);
                if let Some(op) = self.ops[i].as_mut()
                    && op.id == xfer_id
                    && op.peer == p
                {
                    op.done = op.done.saturating_add(data.len);
                    let all = op.done >= op.len;
                    if result.is_err() || all {
                        self.finish_op(i, result);
                    }
                }
            }
            Outgoing::Control { .. } => {}
        }
    }

    /// Ends a send: frees an owned descriptor and queues the completion
    /// its caller is owed. A send that owes none (`BTL_OWNERSHIP` without
    /// `ALWAYS_CALLBACK`, and `sendi`) was reported complete when it was
    /// made, so it ends silently whatever its result; a lost peer is
    /// reported by its error event.
    fn complete_send(&mut self, p: usize, desc: Descriptor, result: Result<(), BtlError>) {
        let endpoint = EndpointId(p as u16);
        let tag = desc.tag();
        let flags = desc.flags();
        let desc = if flags.contains(DescFlags::BTL_OWNERSHIP) {
            let _ = desc.free(&self.pools);
            None
        } else {
            Some(desc)
        };
        if desc.is_some() || flags.contains(DescFlags::ALWAYS_CALLBACK) {
            if let Err(Pending::Done(Completion::Send { desc: Some(d), .. })) =
                self.events.push_back(Pending::Done(Completion::Send {
                    endpoint,
                    tag,
                    desc,
                    result,
                }))
            {
                let _ = d.free(&self.pools);
            }
        }
    }

    /// Moves queued packets and bulk transfers into the send windows and
    /// onto the links, as credits, windows and links allow.
    fn progress_queues(&mut self) {
        for p in 0..PEERS {
            let Some(peer) = self.peers[p].as_ref() else {
                continue;
            };
            if peer.state != PeerState::Open {
                continue;
            }
            // Answers to the peer's transfers first.
            while let Some(peer) = self.peers[p].as_mut() {
                if peer.send.is_full() {
                    break;
                }
                let Some(answer) = peer.answers.pop_front() else {
                    break;
                };
                self.transmit_control(p, answer.into());
            }
            // Queued sends and gets, in order.
            while let Some(peer) = self.peers[p].as_mut() {
                let ready = match peer.queue.front() {
                    Some(Queued::Send(_)) => peer.has_credit() && !peer.send.is_full(),
                    Some(Queued::Get(_)) => !peer.send.is_full(),
                    None => false,
                };
                if !ready {
                    break;
                }
                match peer.queue.pop_front() {
                    Some(Queued::Send(desc)) => self.transmit_send(p, desc),
                    Some(Queued::Get(get)) => self.transmit_control(p, ControlPacket::Get(get)),
                    None => break,
                }
            }
            // Bulk packets.
            for i in 0..MAX_OPS {
                while let Some(op) = self.ops[i] {
                    let window_full = self.peers[p]
                        .as_ref()
                        .is_none_or(|peer| peer.send.is_full());
                    if op.peer != p
                        || !matches!(op.kind, OpKind::Put | OpKind::Serve)
                        || op.queued >= op.len
                        || window_full
                    {
                        break;
                    }
                    self.transmit_put(i);
                }
            }
        }
    }

    fn transmit_send(&mut self, p: usize, desc: Descriptor) {
        let now = self.now;
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.sends_sent = peer.sends_sent.wrapping_add(1);
        let out = Outgoing::Send {
            desc,
            trailer: [0; CHECKSUM_LEN],
        };
        match peer.send.push(out, now) {
            Ok(seq) => self.enqueue_reliable(p, seq),
            Err(e) => {
                if let Outgoing::Send { desc, .. } = e.into_item() {
                    self.complete_send(p, desc, Err(BtlError::OutOfResource));
                }
            }
        }
    }

    fn transmit_control(&mut self, p: usize, packet: ControlPacket) {
        let now = self.now;
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        let out = Outgoing::Control {
            bytes: [0; CONTROL_MAX],
            len: 0,
        };
        if let Ok(seq) = peer.send.push(out, now) {
            if let Some(Outgoing::Control { bytes, len }) = peer.send.get_mut(seq) {
                *len = match packet {
                    ControlPacket::Get(g) => {
                        emit_control(bytes, PacketType::Get, 0, seq, 0, Flags::empty(), |b| {
                            g.emit(chunk(b))
                        })
                    }
                    ControlPacket::Reject(r) => {
                        emit_control(bytes, PacketType::Reject, 0, seq, 0, Flags::empty(), |b| {
                            r.emit(chunk(b))
                        })
                    }
                    ControlPacket::Done(d) => {
                        emit_control(bytes, PacketType::Done, 0, seq, 0, Flags::empty(), |b| {
                            d.emit(chunk(b))
                        })
                    }
                };
            }
            self.enqueue_reliable(p, seq);
        }
    }

    fn transmit_put(&mut self, i: usize) {
        let now = self.now;
        let Some(op) = self.ops[i] else {
            return;
        };
        let Some(local) = op.local else {
            return;
        };
        let chunk = self.put_chunk(op.peer);
        let len = chunk.min(op.len - op.queued);
        let put = PutRepr {
            xfer_id: op.id,
            handle: op.remote.key.0,
            offset: op.remote.offset + op.queued,
            total_len: op.len,
            index: op.next_index,
            count: op.count,
        };
        let data = MemSlice {
            handle: local.handle,
            offset: local.offset + op.queued,
            len,
        };
        let mut prefix = [0u8; PUT_PREFIX];
        let (_, fixed) = prefix.split_at_mut(HEADER_LEN);
        put.emit(chunk_mut(fixed));
        let out = Outgoing::Put {
            prefix,
            data,
            op: i as u16,
            xfer_id: op.id,
            trailer: [0; CHECKSUM_LEN],
        };
        let Some(peer) = self.peers[op.peer].as_mut() else {
            return;
        };
        if let Ok(seq) = peer.send.push(out, now) {
            if let Some(o) = self.ops[i].as_mut() {
                o.queued += len;
                o.next_index += 1;
            }
            self.enqueue_reliable(op.peer, seq);
        }
    }

    /// Puts a retained packet on its peer's link.
    fn enqueue_reliable(&mut self, p: usize, seq: u64) {
        let Some(link) = self.peers[p].as_ref().and_then(|peer| peer.link) else {
            return;
        };
        let slot = usize::from(link.slot);
        // The header is written once, now, with the current ack and
        // credits: bytes handed to the driver never change afterwards.
        self.refresh(p, seq);
        if let Some(l) = self.links[slot].as_mut() {
            let _ = l.tx.push_back(TxItem::Reliable { seq });
        }
    }

    /// Puts a retained packet on its peer's link again (datagrams), unless
    /// it still waits there: its bytes must not change under the driver.
    fn resend(&mut self, p: usize, seq: u64) {
        let Some(link) = self.peers[p].as_ref().and_then(|peer| peer.link) else {
            return;
        };
        let waiting = self.links[usize::from(link.slot)]
            .as_ref()
            .is_some_and(|l| {
                l.tx.iter()
                    .any(|t| matches!(t, TxItem::Reliable { seq: s } if *s == seq))
            });
        if !waiting {
            self.enqueue_reliable(p, seq);
        }
    }

    /// Writes a retained packet's header with the current ack and credits.
    fn refresh(&mut self, p: usize, seq: u64) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        let checksum = peer.checksum;
        let (ack, credits) = (peer.recv.ack().cumulative, peer.granted);
        // This packet carries the acknowledgement and credits: no bare ACK
        // is owed for them any more.
        peer.ack_owed_since = None;
        let flags = if checksum {
            Flags::CHECKSUM
        } else {
            Flags::empty()
        };
        let Some(out) = peer.send.get_mut(seq) else {
            return;
        };
        match out {
            Outgoing::Send { desc, trailer } => {
                let body = (desc.len() - SEND_PREFIX) as u64 + SendRepr::LEN as u64;
                let header = HeaderRepr {
                    packet_type: PacketType::Send,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: body,
                };
                let tag = desc.tag();
                if let Ok(room) = desc.headroom_mut(&self.pools) {
                    let (head, fixed) = room.split_at_mut(HEADER_LEN);
                    header.emit(chunk_mut(head));
                    SendRepr { tag: tag.0 }.emit(chunk_mut(fixed));
                }
                if checksum {
                    let mut crc = Crc32c::new();
                    if let Ok(bytes) = desc.fragment_bytes(&self.pools) {
                        crc.update(bytes);
                    }
                    if let Some(r) = desc.referenced()
                        && let Ok(bytes) = self.regs.slice(r)
                    {
                        crc.update(bytes);
                    }
                    *trailer = crc.trailer();
                }
            }
            Outgoing::Put {
                prefix,
                data,
                trailer,
                ..
            } => {
                let body = PutRepr::LEN as u64 + data.len;
                let header = HeaderRepr {
                    packet_type: PacketType::Put,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: body,
                };
                let (head, _) = prefix.split_at_mut(HEADER_LEN);
                header.emit(chunk_mut(head));
                if checksum {
                    let mut crc = Crc32c::new();
                    crc.update(prefix);
                    if let Ok(bytes) = self.regs.slice(*data) {
                        crc.update(bytes);
                    }
                    *trailer = crc.trailer();
                }
            }
            Outgoing::Control { bytes, len } => {
                let Ok(packet_type) = PacketType::try_from(bytes[0]) else {
                    return;
                };
                let fixed = packet_type.fixed_body_len();
                let header = HeaderRepr {
                    packet_type,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: fixed as u64,
                };
                header.emit(chunk_mut(&mut bytes[..HEADER_LEN]));
                let mut n = HEADER_LEN + fixed;
                if checksum {
                    let t = crate::wire::crc32c(&bytes[..n]).to_be_bytes();
                    bytes[n..n + CHECKSUM_LEN].copy_from_slice(&t);
                    n += CHECKSUM_LEN;
                }
                *len = n as u8;
            }
        }
    }

    /// Queues an ACK on the peer's link when one is owed and nothing else
    /// would carry it soon.
    fn queue_ack_if_owed(&mut self, slot: usize) {
        let datagram = self.datagram();
        let Some(l) = self.links[slot].as_ref() else {
            return;
        };
        let Some(p) = l.peer else {
            return;
        };
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        // Over datagrams, packets held past a hole are reported at once:
        // only an ACK carries the selective acknowledgement.
        let holes = datagram && peer.recv.held() > 0;
        if l.state != LinkState::Open || (!l.tx.is_empty() && !holes) {
            return;
        }
        if peer.ack_owed_since.is_none() {
            return;
        }
        let reject_waiting = peer.answers.iter().any(|a| matches!(a, Answer::Reject(_)));
        if reject_waiting {
            return;
        }
        // The link is idle, so no packet would carry the acknowledgement:
        // send it now rather than stall the peer's window or credits.
        self.push_ack(p, slot, Flags::empty());
    }

    /// Queues an ACK (with `flags`) to peer `p` on its link `slot`: it
    /// carries the acknowledgement and credits owed.
    fn push_ack(&mut self, p: usize, slot: usize, flags: Flags) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.ack_owed_since = None;
        let ack = peer.recv.ack();
        let credits = peer.granted;
        let flags = if peer.checksum {
            flags | Flags::CHECKSUM
        } else {
            flags
        };
        let mut bytes = [0u8; CONTROL_MAX];
        let len = emit_control(
            &mut bytes,
            PacketType::Ack,
            credits,
            0,
            ack.cumulative,
            flags,
            |b| AckRepr { sack: ack.sack }.emit(chunk(b)),
        );
        if let Some(l) = self.links[slot].as_mut() {
            let _ = l.tx.push_back(TxItem::Control { bytes, len });
        }
    }

    /// Asks peer `p` for an acknowledgement: a keepalive, or a credit probe.
    fn probe(&mut self, p: usize) {
        let now = self.now;
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.last_probe = now;
        if let Some(link) = peer.link {
            self.push_ack(p, usize::from(link.slot), Flags::ACK_REQUEST);
        }
    }

    /// Ends a link after a protocol failure: a CLOSE goes out first.
    fn fail_link(&mut self, slot: usize, reason: CloseReason) {
        let Some(l) = self.links[slot].as_mut() else {
            return;
        };
        if l.state == LinkState::Closing {
            return;
        }
        l.state = LinkState::Closing;
        let mid_frame = l.written > 0;
        l.tx.clear();
        l.written = 0;
        if mid_frame {
            // A CLOSE after part of a frame would be read as the rest of
            // that frame (into a peer's memory, for a PUT): just close.
            let _ = self.closes.push_back(l.id);
        } else {
            let mut bytes = [0u8; CONTROL_MAX];
            let len = emit_control(
                &mut bytes,
                PacketType::Close,
                0,
                0,
                0,
                Flags::empty(),
                |b| CloseRepr { reason }.emit(chunk(b)),
            );
            let _ = l.tx.push_back(TxItem::Control { bytes, len });
        }
        if let Receiving::Send { frag, .. } = core::mem::replace(&mut l.receiving, Receiving::None)
        {
            let _ = self.pools.free(frag);
        }
        let peer = l.peer;
        if let Some(p) = peer
            && self.peers[p]
                .as_ref()
                .is_some_and(|peer| peer.link == Some(self.link_id(slot)))
        {
            if let Some(peer) = self.peers[p].as_mut() {
                peer.link = None;
            }
            let lost = match reason {
                CloseReason::VersionMismatch => LostReason::VersionMismatch,
                CloseReason::AuthFailed => LostReason::AuthFailed,
                CloseReason::Timeout => LostReason::Timeout,
                CloseReason::Normal => return,
                _ => LostReason::ProtocolViolation,
            };
            self.lose_peer(p, lost);
        }
    }

    /// Gives a peer up: every operation to it fails exactly once.
    fn lose_peer(&mut self, p: usize, reason: LostReason) {
        self.fail_peer(p, reason, BtlError::PeerLost(reason));
    }

    /// Gives a peer up for `reason`, failing every operation to it exactly
    /// once with `error` (`PeerLost`, or `Finalized` when the BTL shuts
    /// down, which reports no lost peer).
    fn fail_peer(&mut self, p: usize, reason: LostReason, error: BtlError) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        if matches!(peer.state, PeerState::Lost(_)) {
            return;
        }
        peer.state = PeerState::Lost(reason);
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
        if let Some(link) = peer.link.take() {
            let slot = usize::from(link.slot);
            if let Some(l) = self.links[slot].as_mut() {
                l.peer = None;
            }
            self.fail_link(slot, CloseReason::Normal);
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
                let _ = self.pools.free(frag);
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
                endpoint: Some(EndpointId(p as u16)),
                error,
            })));
    }

    fn check_endpoint(&mut self, endpoint: EndpointId) -> Result<usize, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let p = usize::from(endpoint.0);
        let peer = self
            .peers
            .get(p)
            .and_then(Option::as_ref)
            .ok_or(BtlError::Unreachable)?;
        match peer.state {
            PeerState::Lost(reason) => Err(BtlError::PeerLost(reason)),
            PeerState::Idle => {
                let proc = peer.proc;
                if self
                    .connects
                    .push_back(ConnectRequest { endpoint, proc })
                    .is_err()
                {
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

    /// A message of `len` bytes (reserve included) must fit one packet.
    fn check_send_size(&self, len: usize) -> Result<(), BtlError> {
        let max = self.attributes.max_send_size;
        if len > max {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max: max as u64,
            });
        }
        Ok(())
    }

    fn release_delivered(&mut self) {
        if let Some((p, frag)) = self.delivered.take() {
            let _ = self.pools.free(frag);
            if let Some(peer) = self.peers[p].as_mut() {
                peer.granted = peer.granted.wrapping_add(1);
                peer.ack_owed_since.get_or_insert(self.now);
            }
        }
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize> Btl<'m>
    for Engine<'r, 'm, PEERS, LINKS, REGS>
{
    fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    fn pools(&self) -> &FragmentPools<'_> {
        &self.pools
    }

    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        for (i, (proc, ep)) in procs.iter().zip(endpoints.iter_mut()).enumerate() {
            *ep = None;
            if *proc == self.config.me {
                continue;
            }
            let Some(p) = self.find_or_add_peer(*proc) else {
                return Err(BtlError::OutOfResource);
            };
            if let Some(peer) = self.peers[p].as_mut() {
                peer.refs = peer.refs.saturating_add(1);
            }
            if reachable.set(i) {
                *ep = Some(EndpointId(p as u16));
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        for ep in endpoints {
            let p = usize::from(ep.0);
            let peer = self
                .peers
                .get_mut(p)
                .and_then(Option::as_mut)
                .ok_or(BtlError::Unreachable)?;
            peer.refs = peer.refs.saturating_sub(1);
            if peer.refs == 0 {
                self.lose_peer(p, LostReason::Removed);
                self.peers[p] = None;
            }
        }
        Ok(())
    }

    fn alloc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check_endpoint(endpoint)?;
        self.check_send_size(size)?;
        Descriptor::alloc(&self.pools, SEND_PREFIX as u16, 0, size, order, flags)
            .map_err(desc_error)
    }

    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        desc.free(&self.pools)
            .map_err(|_| BtlError::Memory(crate::btl::MemError::UnknownRegion))
    }

    fn prepare_src(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check_endpoint(endpoint)?;
        self.check_send_size(data.len().saturating_add(reserve))?;
        Descriptor::prepare_src(&self.pools, SEND_PREFIX as u16, reserve, data, order, flags)
            .map_err(desc_error)
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check_endpoint(endpoint)?;
        self.regs.slice(data)?;
        if data.len as usize + reserve <= self.attributes.eager_limit {
            let bytes = self.regs.slice(data)?;
            return Descriptor::prepare_src(
                &self.pools,
                SEND_PREFIX as u16,
                reserve,
                bytes,
                order,
                flags,
            )
            .map_err(desc_error);
        }
        if data.len as usize + reserve > self.attributes.max_send_size {
            return Err(BtlError::TooLarge {
                len: data.len,
                max: self.attributes.max_send_size as u64,
            });
        }
        Descriptor::prepare_src_inplace(
            &self.pools,
            SEND_PREFIX as u16,
            reserve,
            data,
            order,
            flags,
        )
        .map_err(desc_error)
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        mut desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        let p = match self.check_endpoint(endpoint) {
            Ok(p) => p,
            Err(error) => return Err(SendError { error, desc }),
        };
        if desc.headroom() != SEND_PREFIX {
            return Err(SendError {
                error: BtlError::NotSupported,
                desc,
            });
        }
        if let Err(error) = self.check_send_size(desc.len() - SEND_PREFIX) {
            return Err(SendError { error, desc });
        }
        desc.set_tag(tag);
        // An owned descriptor without ALWAYS_CALLBACK owes its caller
        // nothing: the send counts as complete now (SendStatus::Completed
        // promises no event), and complete_send ends it silently.
        let quiet = desc.flags().contains(DescFlags::BTL_OWNERSHIP)
            && !desc.flags().contains(DescFlags::ALWAYS_CALLBACK);
        let Some(peer) = self.peers[p].as_mut() else {
            return Err(SendError {
                error: BtlError::Unreachable,
                desc,
            });
        };
        if let Err(Queued::Send(desc)) = peer.queue.push_back(Queued::Send(desc)) {
            return Err(SendError {
                error: BtlError::OutOfResource,
                desc,
            });
        }
        self.progress_queues();
        Ok(if quiet {
            SendStatus::Completed(None)
        } else {
            SendStatus::Queued
        })
    }

    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let len = header.len() + payload.len();
        // sendi is the path of small messages: what one eager fragment holds.
        if len > self.attributes.eager_limit {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max: self.attributes.eager_limit as u64,
            });
        }
        let ready = self.peers[p].as_ref().is_some_and(|peer| {
            peer.state == PeerState::Open
                && peer.queue.is_empty()
                && peer.answers.is_empty()
                && peer.has_credit()
                && !peer.send.is_full()
        });
        if !ready {
            return Err(BtlError::OutOfResource);
        }
        let mut desc = Descriptor::alloc(
            &self.pools,
            SEND_PREFIX as u16,
            0,
            len,
            order,
            flags | DescFlags::BTL_OWNERSHIP,
        )
        .map_err(desc_error)?;
        if let Ok(bytes) = desc.payload_mut(&self.pools) {
            bytes[..header.len()].copy_from_slice(header);
            bytes[header.len()..].copy_from_slice(payload);
        }
        desc.set_tag(tag);
        let desc_flags = desc.flags() - DescFlags::ALWAYS_CALLBACK;
        desc.set_flags(desc_flags);
        self.transmit_send(p, desc);
        Ok(())
    }

    fn register_mem(
        &mut self,
        region: &'m mut [u8],
        access: Access,
    ) -> Result<MemHandle, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        Ok(self.regs.register(region, access)?)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<&'m mut [u8], BtlError> {
        // A frame that reads the region must keep its length: a region
        // taken away mid-send would shorten the frame and desynchronise
        // the stream.
        let by_op = self
            .ops
            .iter()
            .flatten()
            .any(|o| o.local.is_some_and(|l| l.handle == handle));
        let by_packet = self.peers.iter_mut().flatten().any(|peer| {
            peer.send.unacked_mut().any(|(_, out)| match out {
                Outgoing::Send { desc, .. } => {
                    desc.referenced().is_some_and(|r| r.handle == handle)
                }
                Outgoing::Put { data, .. } => data.handle == handle,
                Outgoing::Control { .. } => false,
            }) || peer.queue.iter().any(|q| match q {
                Queued::Send(desc) => desc.referenced().is_some_and(|r| r.handle == handle),
                Queued::Get(_) => false,
            })
        });
        if by_op || by_packet {
            return Err(BtlError::Memory(crate::btl::MemError::InUse));
        }
        Ok(self.regs.deregister(handle)?)
    }

    fn region(&self, handle: MemHandle) -> Result<&[u8], BtlError> {
        Ok(self.regs.region(handle)?)
    }

    fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], BtlError> {
        Ok(self.regs.region_mut(handle)?)
    }

    fn put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        self.start_op(OpKind::Put, p, local, remote, ctx)
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let op = self.start_op(OpKind::Get, p, local, remote, ctx)?;
        let Some(i) = self.find_op(OpKind::Get, p, op.0) else {
            // Ended at once (empty, or refused): nothing to ask the peer.
            return Ok(op);
        };
        let me = self.config.me;
        let get = GetRepr {
            xfer_id: op.0,
            src_handle: remote.key.0,
            src_offset: remote.offset,
            len: remote.len,
            target_job: me.job,
            target_rank: me.rank,
            dst_handle: 0,
            dst_offset: 0,
        };
        self.queue_get(p, i, get)?;
        Ok(op)
    }

    fn progress(&mut self) -> usize {
        self.progress_queues();
        self.events.len()
    }

    fn poll_event(&mut self) -> Option<Event<'_>> {
        self.release_delivered();
        match self.events.pop_front()? {
            Pending::Received {
                from,
                tag,
                frag,
                len,
            } => {
                self.delivered = Some((usize::from(from.0), frag));
                let (_, frag) = self.delivered.as_ref()?;
                let data = self.pools.bytes(frag).ok()?.get(..len)?;
                Some(Event::Received(Incoming { from, tag, data }))
            }
            Pending::Done(c) => Some(c.into()),
        }
    }

    fn finalize(&mut self) {
        if self.finalized {
            return;
        }
        for p in 0..PEERS {
            if self.peers[p].is_some() {
                self.fail_peer(p, LostReason::Removed, BtlError::Finalized);
            }
        }
        self.finalized = true;
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// Checks a put's or get's ranges and starts it.
    fn start_op(
        &mut self,
        kind: OpKind,
        p: usize,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.regs.slice(local)?;
        if local.len != remote.len {
            return Err(BtlError::Memory(crate::btl::MemError::OutOfBounds {
                offset: remote.offset,
                len: local.len,
                size: remote.len,
            }));
        }
        let i = self
            .ops
            .iter()
            .position(Option::is_none)
            .ok_or(BtlError::OutOfResource)?;
        self.next_op += 1;
        let id = self.next_op & !GET_REPLY;
        let chunk = self.put_chunk(p);
        self.ops[i] = Some(Op {
            kind,
            peer: p,
            ctx,
            id,
            len: local.len,
            local: Some(local),
            remote,
            queued: 0,
            done: 0,
            count: packet_count(local.len, chunk),
            next_index: 0,
            reply_to: None,
        });
        if local.len == 0 {
            self.finish_op(i, Ok(()));
        } else if remote.offset.checked_add(remote.len).is_none() {
            // A range that wraps around u64 is outside any region; no packet
            // may carry it (the peer would take it for a protocol error).
            self.finish_op(i, Err(BtlError::Rejected(RejectCode::OutOfBounds)));
        } else {
            self.progress_queues();
        }
        Ok(OpId(id))
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// Asks the peer `source` to put its `src` into `dst`, a registration
    /// of process `target` (a third-party get, as Motr allows): the data
    /// moves from the source to the target without passing through this
    /// process. Completes with [`Event::GetComplete`] once the target holds
    /// the data, or with the error the source or target gave
    /// (`Rejected(NoTarget)` when the source does not reach the target).
    ///
    /// `target` may be this process (then it is [`get`](Btl::get) into the
    /// registration `dst` names) or the source itself (a copy between two
    /// of its registrations). `src` and `dst` must be the same length.
    pub fn get_third_party(
        &mut self,
        source: EndpointId,
        src: RemoteSlice,
        target: ProcName,
        dst: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        if target == self.config.me {
            let local = self.regs.check_remote(dst, Access::REMOTE_WRITE)?;
            return self.get(source, local, src, ctx);
        }
        let p = self.check_endpoint(source)?;
        if src.len != dst.len {
            return Err(BtlError::Memory(crate::btl::MemError::OutOfBounds {
                offset: dst.offset,
                len: src.len,
                size: dst.len,
            }));
        }
        let i = self
            .ops
            .iter()
            .position(Option::is_none)
            .ok_or(BtlError::OutOfResource)?;
        self.next_op += 1;
        let id = self.next_op & !GET_REPLY;
        self.ops[i] = Some(Op {
            kind: OpKind::GetThirdParty,
            peer: p,
            ctx,
            id,
            len: src.len,
            local: None,
            remote: src,
            queued: 0,
            done: 0,
            count: 0,
            next_index: 0,
            reply_to: None,
        });
        if src.len == 0 {
            self.finish_op(i, Ok(()));
            return Ok(OpId(id));
        }
        if src.offset.checked_add(src.len).is_none() || dst.offset.checked_add(dst.len).is_none() {
            self.finish_op(i, Err(BtlError::Rejected(RejectCode::OutOfBounds)));
            return Ok(OpId(id));
        }
        let get = GetRepr {
            xfer_id: id,
            src_handle: src.key.0,
            src_offset: src.offset,
            len: src.len,
            target_job: target.job,
            target_rank: target.rank,
            dst_handle: dst.key.0,
            dst_offset: dst.offset,
        };
        self.queue_get(p, i, get)?;
        Ok(OpId(id))
    }

    /// Queues a GET for the operation in slot `i`; a full queue ends the
    /// operation unreported, and the caller returns `OutOfResource`.
    fn queue_get(&mut self, p: usize, i: usize, get: GetRepr) -> Result<(), BtlError> {
        if let Some(peer) = self.peers[p].as_mut()
            && peer.queue.push_back(Queued::Get(get)).is_err()
        {
            self.ops[i] = None;
            return Err(BtlError::OutOfResource);
        }
        self.progress_queues();
        Ok(())
    }
}

impl EngineConfig {
    /// When `peer` counts as lost if nothing is heard from it: a peer
    /// being connected, or an open one with operations outstanding (any
    /// open one when keepalives are on), silent for the peer timeout.
    fn lost_by(&self, peer: &Peer) -> Option<u64> {
        let waiting = !peer.send.is_empty() || !peer.queue.is_empty() || !peer.answers.is_empty();
        let since = match peer.state {
            PeerState::Open if waiting || self.keepalive > 0 => peer.last_heard,
            PeerState::Connecting { since, .. } => since,
            _ => return None,
        };
        Some(since.saturating_add(self.peer_timeout))
    }

    /// When an open `peer` is next asked for an acknowledgement: after
    /// `keepalive` of silence (at most a third of the peer timeout, so that
    /// a live peer has answered a probe or two before it would count as
    /// lost), and over datagrams after a retransmission
    /// timeout when sends wait for credits with nothing in flight (the ACK
    /// that granted them may have been lost).
    fn probe_at(&self, peer: &Peer, datagram: bool) -> Option<u64> {
        if peer.state != PeerState::Open {
            return None;
        }
        let quiet_since = peer.last_heard.max(peer.last_probe);
        let interval = self.keepalive.min(self.peer_timeout / 3).max(1);
        let keepalive = (self.keepalive > 0).then(|| quiet_since.saturating_add(interval));
        let credit =
            (datagram && peer.starved()).then(|| quiet_since.saturating_add(peer.rtt.rto()));
        [keepalive, credit].into_iter().flatten().min()
    }
}

fn packet_count(len: u64, chunk: u64) -> u32 {
    u32::try_from(len.div_ceil(chunk).max(1)).unwrap_or(u32::MAX)
}

fn desc_error(e: crate::desc::DescError) -> BtlError {
    match e {
        crate::desc::DescError::Pool(p) => p.into(),
        crate::desc::DescError::LengthOverflow => BtlError::TooLarge {
            len: u64::MAX,
            max: u64::from(u32::MAX),
        },
    }
}

/// The bytes of a retained packet as the writer sends them, after dropping
/// the first `skip` bytes (already written).
fn frame_segments<'a, const REGS: usize>(
    out: &'a Outgoing,
    checksum: bool,
    pools: &'a FragmentPools<'_>,
    regs: &'a Registrations<'_, REGS>,
    segments: &mut Vec<&'a [u8], MAX_SEGMENTS>,
    skip: &mut usize,
) {
    let (first, second, trailer): (&[u8], &[u8], &[u8]) = match out {
        Outgoing::Send { desc, trailer } => (
            desc.fragment_bytes(pools).unwrap_or(&[]),
            desc.referenced()
                .and_then(|r| regs.slice(r).ok())
                .unwrap_or(&[]),
            trailer,
        ),
        Outgoing::Put {
            prefix,
            data,
            trailer,
            ..
        } => (prefix, regs.slice(*data).unwrap_or(&[]), trailer),
        Outgoing::Control { bytes, len } => (&bytes[..usize::from(*len)], &[], &[]),
    };
    push_skipping(segments, first, skip);
    push_skipping(segments, second, skip);
    if checksum && !matches!(out, Outgoing::Control { .. }) {
        push_skipping(segments, trailer, skip);
    }
}

/// The bytes of one queued item as the writer sends them, after dropping
/// the first `skip`; nothing for a retained packet acknowledged since.
fn item_segments<'a, const REGS: usize>(
    item: &'a TxItem,
    peer: Option<&'a Peer>,
    pools: &'a FragmentPools<'_>,
    regs: &'a Registrations<'_, REGS>,
    segments: &mut Vec<&'a [u8], MAX_SEGMENTS>,
    skip: &mut usize,
) {
    match item {
        TxItem::Control { bytes, len } => {
            push_skipping(segments, &bytes[..usize::from(*len)], skip);
        }
        TxItem::Reliable { seq } => {
            if let Some(peer) = peer
                && let Some(out) = peer.send.get(*seq)
            {
                frame_segments(out, peer.checksum, pools, regs, segments, skip);
            }
        }
    }
}

/// Bytes a retained packet takes on the wire.
fn frame_len<const REGS: usize>(
    out: &Outgoing,
    checksum: bool,
    pools: &FragmentPools<'_>,
    regs: &Registrations<'_, REGS>,
) -> usize {
    let mut segments: Vec<&[u8], MAX_SEGMENTS> = Vec::new();
    let mut skip = 0;
    frame_segments(out, checksum, pools, regs, &mut segments, &mut skip);
    segments.iter().map(|s| s.len()).sum()
}

/// Pushes `bytes` after dropping the first `skip` of the stream.
fn push_skipping<'a>(
    segments: &mut Vec<&'a [u8], MAX_SEGMENTS>,
    bytes: &'a [u8],
    skip: &mut usize,
) {
    if *skip >= bytes.len() {
        *skip -= bytes.len();
        return;
    }
    if !bytes[*skip..].is_empty() {
        let _ = segments.push(&bytes[*skip..]);
    }
    *skip = 0;
}

fn emit_control(
    bytes: &mut [u8; CONTROL_MAX],
    packet_type: PacketType,
    credits: u32,
    seq: u64,
    ack: u64,
    flags: Flags,
    body: impl FnOnce(&mut [u8]),
) -> u8 {
    let fixed = packet_type.fixed_body_len();
    let checksum = flags.contains(Flags::CHECKSUM);
    let header = HeaderRepr {
        packet_type,
        flags,
        credits,
        seq,
        ack,
        body_len: fixed as u64,
    };
    let (head, rest) = bytes.split_at_mut(HEADER_LEN);
    header.emit(chunk_mut(head));
    body(&mut rest[..fixed]);
    let mut n = HEADER_LEN + fixed;
    if checksum {
        let t = crate::wire::crc32c(&bytes[..n]).to_be_bytes();
        bytes[n..n + CHECKSUM_LEN].copy_from_slice(&t);
        n += CHECKSUM_LEN;
    }
    n as u8
}

fn chunk<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    chunk_mut(b)
}

fn chunk_mut<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    b.first_chunk_mut()
        .expect("callers size the buffer for the packet")
}

fn chunk_ref<const N: usize>(b: &[u8]) -> Result<&[u8; N], CloseReason> {
    b.first_chunk().ok_or(CloseReason::ProtocolError)
}
