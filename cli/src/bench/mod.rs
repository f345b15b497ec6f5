//! The measurements the `btl` command runs between two processes, over any
//! BTL: ping-pong latency, windowed bandwidth (as osu_bw) and the message
//! rate of small messages.
//!
//! One process leads ([`lead`]), the other answers ([`answer`]), or a
//! server answers any number of leads, one after another or at once
//! ([`Side::serve_once`]); every side handles what arrives alike
//! ([`Side`]), so over the `self` BTL one module plays both. A message
//! larger than the BTL's `max_send_size` goes as several sends, each with
//! a header that carries the whole message's length ([`message`]), so the
//! receiver knows when a message is complete. Data is sent from registered
//! memory, in place where the BTL can. Where the BTL says a get moves a
//! large message better than sends (`rdma_pipeline_send_length`, as
//! Open MPI's PML reads it), the sender sends a notice instead and the
//! receiver gets the message from the sender's registered memory: one
//! copy over shared memory.

pub mod alltoall;
pub mod message;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use btl_core::btl::{
    Access, Attributes, Btl, BtlError, BtlFlags, Event, LostReason, MemHandle, MemSlice,
    RemoteSlice, Tag,
};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::EndpointId;
use btl_std::driver::module::{Module, Transport};

pub use message::{Arrived, Assembly, Fetch, HEADER, Header, MessageError, NOTICE, Whole};

/// A ping: answer with a message of the same length.
pub const PING: Tag = Tag(0xF0);
/// The answer to a ping.
const PONG: Tag = Tag(0xF1);
/// A bandwidth or rate message: counted, not answered one by one.
const STREAM: Tag = Tag(0xF2);
/// A window of stream messages arrived.
const WINDOW_ACK: Tag = Tag(0xF3);
/// The lead is done: the answering side stops.
const DONE: Tag = Tag(0xF4);
/// Where the sender takes puts: a notice of its landing region.
const LANDING: Tag = Tag(0xF5);
/// How long a step may wait for the peer before the run fails.
pub const STALL: Duration = Duration::from_secs(30);

/// Which measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// Round trips of one message each way; reports one-way latency.
    PingPong,
    /// Windows of messages one way, one acknowledgement per window.
    Bandwidth,
    /// As bandwidth, for small messages sent with `sendi`: messages/s.
    Rate,
}

/// How the waiting side moves the BTL forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Call `progress` in a loop (lowest latency, a core busy).
    Poll,
    /// Spin briefly, then block in the poller (kind to shared cores).
    Block,
    /// Call `progress` in a loop, giving the core away after each call
    /// that found nothing (`sched_yield`): for more processes than cores,
    /// as Open MPI's `mpi_yield_when_idle`.
    Yield,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The measurement.
    pub test: Test,
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Untimed iterations first, per size.
    pub warmup: u32,
    /// Timed iterations per size.
    pub iters: u32,
    /// Whether `iters` (and `warmup`) hold at every size, as the user gave
    /// them; when not, large messages get fewer ([`BUDGET`](Self::BUDGET)).
    pub exact: bool,
    /// Messages per window (bandwidth and rate).
    pub window: u32,
}

impl Plan {
    /// Bytes one size's timed iterations move at most unless the plan is
    /// [`exact`](Self::exact): large messages get fewer iterations than
    /// `iters`, at least 10.
    pub const BUDGET: usize = 256 << 20;

    /// Timed and warm-up iterations for messages of `size`.
    pub fn iterations(&self, size: usize) -> (u32, u32) {
        if self.exact {
            return (self.iters, self.warmup);
        }
        let per_iter = match self.test {
            Test::PingPong => 2 * size,
            Test::Bandwidth | Test::Rate => size * self.window as usize,
        }
        .max(1);
        let cap = (Self::BUDGET / per_iter).clamp(10, u32::MAX as usize) as u32;
        let iters = self.iters.min(cap);
        (iters, self.warmup.min((iters / 10).max(2)))
    }
}

/// The result for one size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Message size in bytes.
    pub size: usize,
    /// Timed iterations.
    pub iters: u32,
    /// Median one-way latency in µs (ping-pong) or time per message
    /// (bandwidth, rate).
    pub median_us: f64,
    /// 99th percentile, as `median_us`.
    pub p99_us: f64,
    /// Payload bandwidth, MiB/s.
    pub mib_per_s: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
}

/// A BTL the benchmark can drive: the BTL, and what moves it forward as
/// told (the BTL itself, or a driver around it).
pub trait Driven {
    /// The BTL.
    type Btl: Btl<Memory = Vec<u8>>;

    /// The BTL, to send, put and take events.
    fn btl(&mut self) -> &mut Self::Btl;

    /// Moves the BTL forward once, waiting a little if `waiting` says so.
    fn step(&mut self, waiting: Waiting);
}

impl<R: btl_core::pool::Region, const REGS: usize, const QUEUE: usize> Driven
    for btl_core::loopback::Loopback<R, Vec<u8>, REGS, QUEUE>
{
    type Btl = Self;

    fn btl(&mut self) -> &mut Self {
        self
    }

    fn step(&mut self, _waiting: Waiting) {
        self.progress();
    }
}

/// `Driven` for a BTL that moves itself forward (`progress`, counting the
/// events ready) and waits for a peer (`wait`, up to a time).
macro_rules! driven_by_itself {
    ($(impl$(<$g:ident: $bound:path>)? for $ty:ty;)*) => {$(
        impl$(<$g: $bound>)? Driven for $ty {
            type Btl = Self;

            fn btl(&mut self) -> &mut Self {
                self
            }

            fn step(&mut self, waiting: Waiting) {
                match waiting {
                    Waiting::Poll => {
                        self.progress();
                    }
                    Waiting::Yield => {
                        if self.progress() == 0 {
                            std::thread::yield_now();
                        }
                    }
                    Waiting::Block => {
                        let _ = self.wait(Duration::from_millis(10));
                    }
                }
            }
        }
    )*};
}

driven_by_itself! {
    impl for btl_std::SmModule;
    impl for btl_std::Bml;
    impl<T: Transport> for Module<T>;
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The BTL refused an operation.
    #[error("{what}: {error}")]
    Btl {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        error: BtlError,
    },
    /// The peer went quiet.
    #[error("no answer from the peer within {0:?}")]
    Stalled(Duration),
    /// The peer broke the benchmark's protocol.
    #[error("the peer broke the benchmark's protocol: {0}")]
    Protocol(#[from] MessageError),
}

impl BenchError {
    /// The BTL error behind this one, if there is one.
    pub fn btl_error(&self) -> Option<BtlError> {
        match self {
            BenchError::Btl { error, .. } => Some(*error),
            _ => None,
        }
    }
}

fn btl_err(what: &'static str) -> impl Fn(BtlError) -> BenchError {
    move |error| BenchError::Btl { what, error }
}

/// The registered buffer every message is sent from: one per process,
/// sized for the largest message it sends, kept until it exits (a server
/// registers it once, whatever number of clients it serves).
struct Source {
    handle: MemHandle,
    /// The same bytes, for `sendi`, which copies.
    copy: Vec<u8>,
}

/// The length from which a message over a BTL of attributes `a` goes as a
/// fetch notice: the BTL's own word (`rdma_pipeline_send_length`) where it
/// gets and the message takes more than one send; never otherwise.
fn fetch_from(a: &Attributes) -> usize {
    if !a.flags.contains(BtlFlags::GET) {
        return usize::MAX;
    }
    a.rdma_pipeline_send_length
        .max(a.max_send_size.saturating_sub(HEADER) + 1)
}

impl Source {
    fn register<B: Btl<Memory = Vec<u8>>>(btl: &mut B, len: usize) -> Result<Self, BenchError> {
        let copy: Vec<u8> = (0..len.max(1)).map(|i| i as u8).collect();
        let region = copy.clone();
        let handle = btl
            .register_mem(region, Access::REMOTE_READ)
            .map_err(|e| btl_err("registering the send buffer")(e.error))?;
        Ok(Source { handle, copy })
    }

    /// Sends the next piece of a message of `len` bytes with `tag` to `to`,
    /// from byte `sent` on: the bytes of the message it carried.
    fn send_piece<B: Btl<Memory = Vec<u8>>>(
        &self,
        btl: &mut B,
        to: EndpointId,
        tag: Tag,
        header: &Header,
        sent: usize,
    ) -> Result<usize, BtlError> {
        let len = header.total as usize;
        let flags = DescFlags::BTL_OWNERSHIP;
        let a = btl.attributes_for(to);
        let (fetch, max, eager) = (fetch_from(a), a.max_send_size, a.eager_limit);
        if len >= fetch {
            // The source never changes, so the receiver may get it while
            // later messages are sent from it: no notice comes back.
            let from = self.handle.remote_key().slice(0, len as u64);
            btl.send_copy(to, tag, &header.notice(from))?;
            return Ok(len);
        }
        let max = max.saturating_sub(HEADER).max(1);
        let chunk = (len - sent).min(max);
        let header = header.emit();
        if chunk + HEADER <= eager {
            let payload = self.copy.get(sent..sent + chunk).unwrap_or_default();
            match btl.sendi(to, &header, payload, tag, Order(0), flags) {
                // Not at once: queued as a descriptor, whose refusal (a
                // full queue) brings `Event::Room`, where sendi's brings
                // none.
                Err(BtlError::TooLarge { .. } | BtlError::OutOfResource) => {}
                other => return other.map(|()| chunk),
            }
        }
        // Larger than sendi takes here, or not now: a descriptor of the
        // buffer itself.
        let data = MemSlice {
            handle: self.handle,
            offset: sent as u64,
            len: chunk as u64,
        };
        let mut desc = btl.prepare_src_registered(to, data, HEADER, Order(0), flags)?;
        if let Ok(h) = desc.header_mut(btl.pools()) {
            h.copy_from_slice(&header);
        }
        btl.send(to, desc, tag).map(|_| chunk).map_err(|e| {
            let _ = btl.free(e.desc);
            e.error
        })
    }
}

/// A reply owed to a peer, partly sent.
#[derive(Debug, Clone, Copy)]
struct Reply {
    tag: Tag,
    len: u64,
    sent: u64,
}

/// What one side knows of one peer: the message being received from it,
/// the stream messages counted for its window, and the replies it is owed.
#[derive(Debug)]
struct Peer {
    assembly: Assembly,
    streamed: u64,
    acked: u64,
    replies: VecDeque<Reply>,
    /// Bytes of the replies not yet sent.
    owed: u64,
    /// Messages to get from it, each with the number its get carries;
    /// the first `getting` are being got.
    fetches: VecDeque<(u32, Fetch)>,
    getting: usize,
    /// The number the next message to get takes.
    next_get: u32,
}

/// Gets in flight from one peer at a time: the next one's request travels
/// while the last one is copied.
const GETS_IN_FLIGHT: usize = 4;

/// The replies one peer may be owed at once: a ping-pong owes one, a
/// windowed run one per window; a peer that sends faster than it reads
/// its replies is no longer served.
pub const MAX_REPLIES: usize = 64;

/// One process's side of the measurements: it answers whoever sends to it
/// (echoes pings, acknowledges each window of stream messages) and counts
/// what it is answered. The leading process and an answering one (or a
/// server of many) run the same; over the `self` BTL one module plays
/// both.
///
/// Nothing a peer sends makes it hold more than its share: a message of
/// at most `max_message` bytes being received, at most [`MAX_REPLIES`]
/// replies of at most as many bytes as their message brought. A peer that
/// breaks the benchmark's protocol or outgrows its share is dropped (with
/// `del_procs`: it is told, and its slot comes back), and only that peer.
pub struct Side {
    source: Source,
    /// Where messages sent as fetch notices are got to: one region for
    /// every peer, whose bytes nobody reads, registered when the first
    /// notice comes (only peers over a BTL that gets send them).
    sink: Option<MemHandle>,
    /// Fetch notices queued, over all peers.
    fetches: usize,
    /// Replies owed, over all peers: a round with none owed looks at no
    /// peer.
    replies: usize,
    max_message: u64,
    peers: BTreeMap<EndpointId, Peer>,
    /// This side's window, sent in every header.
    window: u32,
    /// Messages completed per tag: PONG, STREAM, WINDOW_ACK, DONE.
    counted: [u64; 4],
    /// Peers dropped for breaking the protocol or outgrowing their share.
    dropped: u64,
    /// DONEs per peer, for a process that runs with several in turn.
    dones: BTreeMap<EndpointId, u64>,
    /// Peers that may leave once they have sent this many DONEs: their
    /// leaving then ends nothing.
    may_leave: BTreeMap<EndpointId, u64>,
    /// Where each peer takes puts, once it has said.
    landings: BTreeMap<EndpointId, RemoteSlice>,
    /// Puts completed.
    puts_done: u64,
    /// Messages got from their senders' memory (fetch notices served).
    gets_done: u64,
    /// Where the round of replies starts next, so that every peer is
    /// served in turn.
    turn: Option<EndpointId>,
    /// The peers a round of replies goes to, in turn.
    order: Vec<EndpointId>,
}

impl Side {
    /// A side that sends messages of up to `max_message` bytes and takes
    /// as many, with `window` stream messages per acknowledgement.
    pub fn new<B: Btl<Memory = Vec<u8>>>(
        btl: &mut B,
        max_message: usize,
        window: u32,
    ) -> Result<Self, BenchError> {
        let source = Source::register(btl, max_message)?;
        Ok(Side {
            source,
            sink: None,
            fetches: 0,
            replies: 0,
            max_message: max_message as u64,
            peers: BTreeMap::new(),
            window: window.max(1),
            counted: [0; 4],
            dropped: 0,
            dones: BTreeMap::new(),
            may_leave: BTreeMap::new(),
            landings: BTreeMap::new(),
            puts_done: 0,
            gets_done: 0,
            turn: None,
            order: Vec::new(),
        })
    }

    /// Runs that ended (a DONE came) so far.
    pub fn runs(&self) -> u64 {
        self.counted[3]
    }

    /// Peers dropped so far for breaking the benchmark's protocol or
    /// outgrowing their share.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Peers this side is in the middle of something with.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    fn peer(&mut self, from: EndpointId) -> &mut Peer {
        let max = self.max_message;
        self.peers.entry(from).or_insert_with(|| Peer {
            assembly: Assembly::new(max),
            streamed: 0,
            acked: 0,
            replies: VecDeque::new(),
            owed: 0,
            fetches: VecDeque::new(),
            getting: 0,
            next_get: 0,
        })
    }

    /// Sends a whole message of `len` bytes with `tag` to `to`, stepping
    /// while the BTL has no room and taking what arrives meanwhile (its
    /// replies are sent later), or failing after [`STALL`].
    fn send<B: Driven>(
        &mut self,
        btl: &mut B,
        to: EndpointId,
        tag: Tag,
        len: usize,
        waiting: Waiting,
    ) -> Result<(), BenchError> {
        let header = Header {
            total: len as u64,
            window: self.window,
            fetch: false,
        };
        let mut sent = 0;
        loop {
            sent += self.retry(btl, waiting, "sending", |side, b| {
                side.source.send_piece(b, to, tag, &header, sent)
            })?;
            if sent >= len {
                return Ok(());
            }
        }
    }

    /// Takes every event there is: counts messages, owes replies, forgets
    /// peers that are gone. With `lead`, a peer's loss or a protocol
    /// breach is the run's end (an error); otherwise only that peer's.
    /// Whether anything came.
    fn take<B: Btl<Memory = Vec<u8>>>(
        &mut self,
        btl: &mut B,
        lead: bool,
    ) -> Result<bool, BenchError> {
        let mut any = false;
        while let Some(ev) = btl.poll_event() {
            any = true;
            let breach = match ev {
                Event::Received(m) => {
                    let (from, tag) = (m.from, m.tag);
                    match self.peer(from).assembly.piece(tag, m.data) {
                        Ok(Some(Arrived::Whole(whole))) => {
                            self.on_whole(from, whole).err().map(|e| (from, e))
                        }
                        Ok(Some(Arrived::Fetch(fetch))) => {
                            self.on_fetch(from, fetch).err().map(|e| (from, e))
                        }
                        Ok(None) => None,
                        Err(e) => Some((from, BenchError::Protocol(e))),
                    }
                }
                Event::PutComplete { result, .. } => match result {
                    Ok(()) => {
                        self.puts_done += 1;
                        None
                    }
                    Err(error) if lead => return Err(btl_err("a put")(error)),
                    Err(_) => None,
                },
                Event::GetComplete { ctx, result, .. } => {
                    let from = EndpointId((ctx >> 32) as u32);
                    self.got(from, ctx as u32, result).err().map(|e| (from, e))
                }
                Event::Error(e) => {
                    if let Some(ep) = e.endpoint {
                        self.forget(ep);
                    }
                    let expected = matches!(e.error, BtlError::PeerLost(_))
                        && e.endpoint.is_some_and(|ep| self.done_with(ep));
                    if lead && !expected {
                        return Err(BenchError::Btl {
                            what: "the peer",
                            error: e.error,
                        });
                    }
                    tracing::debug!("a peer is gone: {:?} ({})", e.endpoint, e.error);
                    None
                }
                Event::PeerLeft { endpoint } => {
                    self.forget(endpoint);
                    if lead && !self.done_with(endpoint) {
                        return Err(BenchError::Btl {
                            what: "the peer",
                            error: BtlError::PeerLost(LostReason::Left),
                        });
                    }
                    tracing::debug!("a peer left: {endpoint:?}");
                    None
                }
                Event::SendComplete { desc, result, .. } => {
                    if let Some(d) = desc {
                        let _ = btl.free(d);
                    }
                    match result {
                        Err(error) if lead => {
                            return Err(BenchError::Btl {
                                what: "a send",
                                error,
                            });
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some((from, e)) = breach {
                if lead {
                    return Err(e);
                }
                self.drop_peer(btl, from, &e);
            }
        }
        if self.fetches > 0 {
            self.start_gets(btl, lead)?;
        }
        Ok(any)
    }

    /// Queues a message to get from `from`.
    fn on_fetch(&mut self, from: EndpointId, fetch: Fetch) -> Result<(), BenchError> {
        if fetch.tag == LANDING {
            self.landings.insert(from, fetch.from);
            return Ok(());
        }
        let peer = self.peer(from);
        if peer.fetches.len() >= MAX_REPLIES {
            return Err(BenchError::Protocol(MessageError::Fetches {
                queued: peer.fetches.len(),
            }));
        }
        peer.fetches.push_back((peer.next_get, fetch));
        peer.next_get = peer.next_get.wrapping_add(1);
        self.fetches += 1;
        Ok(())
    }

    /// Starts the gets of the messages queued of every peer, up to
    /// [`GETS_IN_FLIGHT`] each, as far as the BTL takes them.
    fn start_gets<B: Btl<Memory = Vec<u8>>>(
        &mut self,
        btl: &mut B,
        lead: bool,
    ) -> Result<(), BenchError> {
        // Registered at the first notice, whichever peer sent it.
        let sink = match self.sink {
            Some(sink) => sink,
            None => {
                let region = vec![0u8; self.max_message as usize];
                let sink = btl
                    .register_mem(region, Access::empty())
                    .map_err(|e| btl_err("registering the receive buffer")(e.error))?;
                *self.sink.insert(sink)
            }
        };
        let mut failed = None;
        'peers: for (&ep, peer) in &mut self.peers {
            if !peer.fetches.is_empty()
                && fetch_from(btl.attributes_for(ep)) as u64 > self.max_message
            {
                // Its BTL does not get messages of this side's size: the
                // notice breaks the protocol.
                failed = Some((ep, BenchError::Protocol(MessageError::NoFetch)));
                break;
            }
            while peer.getting < GETS_IN_FLIGHT
                && let Some(&(number, fetch)) = peer.fetches.get(peer.getting)
            {
                let ctx = u64::from(ep.0) << 32 | u64::from(number);
                match btl.get(ep, sink.slice(0, fetch.len), fetch.from, ctx) {
                    Ok(_) => peer.getting += 1,
                    Err(BtlError::OutOfResource) => break,
                    Err(error) => {
                        failed = Some((ep, btl_err("getting a message")(error)));
                        break 'peers;
                    }
                }
            }
        }
        match failed {
            Some((_, e)) if lead => Err(e),
            Some((ep, e)) => {
                self.drop_peer(btl, ep, &e);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The get of message `number` from `from` ended: the message is
    /// whole, or the peer is lost.
    fn got(
        &mut self,
        from: EndpointId,
        number: u32,
        result: Result<(), BtlError>,
    ) -> Result<(), BenchError> {
        let Some(peer) = self.peers.get_mut(&from) else {
            return Ok(());
        };
        let Some(at) = peer
            .fetches
            .iter()
            .take(peer.getting)
            .position(|&(n, _)| n == number)
        else {
            return Ok(());
        };
        let Some((_, fetch)) = peer.fetches.remove(at) else {
            return Ok(());
        };
        peer.getting -= 1;
        self.fetches -= 1;
        result.map_err(btl_err("getting a message"))?;
        self.gets_done += 1;
        self.on_whole(
            from,
            Whole {
                tag: fetch.tag,
                len: fetch.len,
                window: fetch.window,
            },
        )
    }

    /// Forgets `peer` and what it was owed or queued.
    fn forget(&mut self, peer: EndpointId) {
        if let Some(p) = self.peers.remove(&peer) {
            self.fetches -= p.fetches.len();
            self.replies -= p.replies.len();
        }
    }

    /// Stops serving `peer`, which broke the protocol or outgrew its
    /// share; the BTL forgets it (and tells it so).
    fn drop_peer<B: Btl<Memory = Vec<u8>>>(
        &mut self,
        btl: &mut B,
        peer: EndpointId,
        why: &BenchError,
    ) {
        tracing::debug!("dropping {peer}: {why}");
        self.forget(peer);
        self.dropped += 1;
        let _ = btl.del_procs(&[peer]);
    }

    /// What a side does with a whole message: count it, and owe an echo
    /// for a ping and an acknowledgement for each window of stream
    /// messages.
    fn on_whole(&mut self, from: EndpointId, whole: Whole) -> Result<(), BenchError> {
        let reply = match whole.tag {
            PING => Some((PONG, whole.len)),
            PONG => {
                self.counted[0] += 1;
                None
            }
            STREAM => {
                self.counted[1] += 1;
                let peer = self.peer(from);
                peer.streamed += 1;
                // The sender's window decides when to acknowledge.
                let window = u64::from(whole.window.max(1));
                (peer.streamed >= peer.acked + window).then(|| {
                    peer.acked += window;
                    (WINDOW_ACK, 0)
                })
            }
            WINDOW_ACK => {
                self.counted[2] += 1;
                None
            }
            DONE => {
                self.counted[3] += 1;
                *self.dones.entry(from).or_default() += 1;
                if self
                    .peers
                    .get(&from)
                    .is_some_and(|p| p.replies.is_empty() && p.fetches.is_empty())
                {
                    self.forget(from);
                }
                None
            }
            _ => None,
        };
        let Some((tag, len)) = reply else {
            return Ok(());
        };
        let max = self.max_message;
        let peer = self.peer(from);
        if peer.replies.len() >= MAX_REPLIES || peer.owed.saturating_add(len) > 2 * max {
            return Err(BenchError::Protocol(MessageError::Unread {
                replies: peer.replies.len(),
                owed: peer.owed,
            }));
        }
        peer.owed += len;
        peer.replies.push_back(Reply { tag, len, sent: 0 });
        self.replies += 1;
        Ok(())
    }

    /// Sends the replies owed, every peer in turn, as far as the BTL takes
    /// them without waiting: a peer that does not read holds up nobody.
    /// With `lead`, a failure is the run's end; otherwise the peer's.
    fn reply<B: Btl<Memory = Vec<u8>>>(
        &mut self,
        btl: &mut B,
        lead: bool,
    ) -> Result<bool, BenchError> {
        if self.replies == 0 {
            return Ok(false);
        }
        // Kept from round to round: a round allocates nothing.
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(
            self.peers
                .iter()
                .filter(|(_, p)| !p.replies.is_empty())
                .map(|(&ep, _)| ep),
        );
        if let Some(turn) = self.turn {
            let first = order.partition_point(|&ep| ep < turn);
            order.rotate_left(first);
        }
        self.turn = order.get(1).copied();
        let result = self.reply_in(btl, lead, &order);
        self.order = order;
        result
    }

    /// Sends what is owed to the peers in `order`, each as far as the BTL
    /// takes it; whether anything went.
    fn reply_in<B: Btl<Memory = Vec<u8>>>(
        &mut self,
        btl: &mut B,
        lead: bool,
        order: &[EndpointId],
    ) -> Result<bool, BenchError> {
        let mut any = false;
        for &to in order {
            while let Some(reply) = self.peers.get(&to).and_then(|p| p.replies.front().copied()) {
                let header = Header {
                    total: reply.len,
                    window: self.window,
                    fetch: false,
                };
                let sent = usize::try_from(reply.sent).unwrap_or(usize::MAX);
                match self.source.send_piece(btl, to, reply.tag, &header, sent) {
                    Ok(n) => {
                        any = true;
                        let Some(peer) = self.peers.get_mut(&to) else {
                            break;
                        };
                        peer.owed = peer.owed.saturating_sub(n as u64);
                        if let Some(front) = peer.replies.front_mut() {
                            front.sent += n as u64;
                            if front.sent >= front.len {
                                peer.replies.pop_front();
                                self.replies -= 1;
                            }
                        }
                    }
                    Err(BtlError::OutOfResource) => break,
                    Err(error) if lead => {
                        return Err(BenchError::Btl {
                            what: "sending",
                            error,
                        });
                    }
                    Err(error) => {
                        // Lost, most likely: its error event follows.
                        tracing::debug!("replying to {to}: {error}");
                        self.forget(to);
                        break;
                    }
                }
            }
        }
        Ok(any)
    }

    /// One round of an answering side: events, then replies, then a step
    /// of the BTL (which sends the replies at once). Whether anything
    /// moved.
    pub fn serve_once<B: Driven>(&mut self, btl: &mut B, waiting: Waiting) -> bool {
        // Answering, no peer's failure is this side's (`lead` is false).
        let took = self.take(btl.btl(), false).unwrap_or(false);
        let replied = self.reply(btl.btl(), false).unwrap_or(false);
        btl.step(waiting);
        took || replied
    }

    /// Steps until `counted[k]` reaches `n`, answering what arrives;
    /// fails after `stall` without an arrival.
    fn until<B: Driven>(
        &mut self,
        btl: &mut B,
        k: usize,
        n: u64,
        waiting: Waiting,
    ) -> Result<(), BenchError> {
        self.until_with(btl, waiting, |side| side.counted[k] >= n)
    }

    /// Steps until `done` says so, answering what arrives; fails after
    /// `stall` without an arrival.
    fn until_with<B: Driven>(
        &mut self,
        btl: &mut B,
        waiting: Waiting,
        done: impl Fn(&Side) -> bool,
    ) -> Result<(), BenchError> {
        let mut patience = Patience::new(STALL);
        while !done(self) {
            let moved = self.take(btl.btl(), true)?;
            self.reply(btl.btl(), true)?;
            if moved {
                patience.moved();
            } else if patience.idle() {
                return Err(BenchError::Stalled(STALL));
            }
            if !done(self) {
                btl.step(waiting);
            }
        }
        Ok(())
    }

    /// Registers a region of `len` bytes that peers may put into, and
    /// returns where it lies for them.
    fn open_landing<B: Btl<Memory = Vec<u8>>>(
        &mut self,
        btl: &mut B,
        len: usize,
    ) -> Result<RemoteSlice, BenchError> {
        let handle = btl
            .register_mem(vec![0u8; len.max(1)], Access::REMOTE_WRITE)
            .map_err(|e| btl_err("registering the landing region")(e.error))?;
        Ok(handle.remote_key().slice(0, len.max(1) as u64))
    }

    /// Tells `to` where this process takes puts.
    fn send_landing<B: Driven>(
        &mut self,
        btl: &mut B,
        to: EndpointId,
        at: RemoteSlice,
        waiting: Waiting,
    ) -> Result<(), BenchError> {
        let header = Header {
            total: at.len,
            window: self.window,
            fetch: true,
        };
        let notice = header.notice(at);
        self.retry(btl, waiting, "telling where to put", |_, b| {
            b.send_copy(to, LANDING, &notice)
        })
    }

    /// Puts the first `len` bytes of the source into `at` at `to`: counted
    /// in `puts_done` once in the peer's memory.
    fn put<B: Driven>(
        &mut self,
        btl: &mut B,
        to: EndpointId,
        at: RemoteSlice,
        len: usize,
        waiting: Waiting,
    ) -> Result<(), BenchError> {
        // Where the peer said it takes puts: no more than it said.
        if len as u64 > at.len {
            return Err(BenchError::Protocol(MessageError::TooLarge {
                total: len as u64,
                max: at.len,
            }));
        }
        let local = MemSlice {
            handle: self.source.handle,
            offset: 0,
            len: len as u64,
        };
        let remote = RemoteSlice {
            len: len as u64,
            ..at
        };
        self.retry(btl, waiting, "putting", |_, b| b.put(to, local, remote, 0))?;
        Ok(())
    }

    /// Calls `op` (`what` it does, for an error) until the BTL has room
    /// for it, stepping and taking what arrives meanwhile (answered later,
    /// or both sides could wait for each other's room); fails after
    /// [`STALL`] without room.
    #[inline]
    fn retry<B: Driven, T>(
        &mut self,
        btl: &mut B,
        waiting: Waiting,
        what: &'static str,
        mut op: impl FnMut(&mut Side, &mut B::Btl) -> Result<T, BtlError>,
    ) -> Result<T, BenchError> {
        // The clock is read only once the BTL has no room.
        let mut refused_since = None;
        loop {
            match op(self, btl.btl()) {
                Ok(done) => return Ok(done),
                Err(BtlError::OutOfResource) => {
                    let since = *refused_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > STALL {
                        return Err(BenchError::Stalled(STALL));
                    }
                    btl.step(waiting);
                    self.take(btl.btl(), true)?;
                }
                Err(error) => return Err(BenchError::Btl { what, error }),
            }
        }
    }

    /// Lets `peer` leave without failing the run once it has sent `dones`
    /// DONEs: its last word.
    fn may_leave_after(&mut self, peer: EndpointId, dones: u64) {
        self.may_leave.insert(peer, dones);
    }

    /// Whether `peer` has said its last word, so that its leaving is
    /// expected.
    fn done_with(&self, peer: EndpointId) -> bool {
        self.may_leave
            .get(&peer)
            .is_some_and(|&n| self.dones_from(peer) >= n)
    }

    /// DONEs `peer` has sent so far.
    fn dones_from(&self, peer: EndpointId) -> u64 {
        self.dones.get(&peer).copied().unwrap_or(0)
    }
}

/// How long a loop that spins for arrivals waits before it gives up,
/// checked without reading the clock on every step: the loop is what a
/// latency measurement spins in, so the clock is read once every 4,096
/// idle steps, and not at all while things arrive.
struct Patience {
    limit: Duration,
    idle: u32,
    since: Option<Instant>,
}

impl Patience {
    fn new(limit: Duration) -> Self {
        Patience {
            limit,
            idle: 0,
            since: None,
        }
    }

    /// Something arrived: the wait starts again.
    fn moved(&mut self) {
        self.idle = 0;
        self.since = None;
    }

    /// Nothing arrived this step; whether the wait has run out.
    fn idle(&mut self) -> bool {
        self.idle = self.idle.wrapping_add(1);
        if !self.idle.is_multiple_of(4096) {
            return false;
        }
        let now = Instant::now();
        now.duration_since(*self.since.get_or_insert(now)) > self.limit
    }
}

/// Runs `plan` against the answering process at `peer`; `on_row` sees each
/// size's result as it is done. Ends the answering side's run.
pub fn lead<B: Driven>(
    btl: &mut B,
    peer: EndpointId,
    plan: &Plan,
    waiting: Waiting,
    mut on_row: impl FnMut(&Row),
) -> Result<Vec<Row>, BenchError> {
    let max = plan.sizes.iter().copied().max().unwrap_or(0);
    let mut side = Side::new(btl.btl(), max, plan.window)?;
    let mut rows = Vec::new();
    for &size in &plan.sizes {
        let (iters, warmup) = plan.iterations(size);
        let mut samples = Vec::with_capacity(iters as usize);
        let mut timed_from = Instant::now();
        // One clock read an iteration: where one ends the next begins.
        let mut t = timed_from;
        for i in 0..warmup + iters {
            match plan.test {
                Test::PingPong => {
                    let want = side.counted[0] + 1;
                    side.send(btl, peer, PING, size, waiting)?;
                    side.until(btl, 0, want, waiting)?;
                }
                Test::Bandwidth | Test::Rate => {
                    let want = side.counted[2] + 1;
                    for _ in 0..plan.window {
                        side.send(btl, peer, STREAM, size, waiting)?;
                    }
                    side.until(btl, 2, want, waiting)?;
                }
            }
            let now = Instant::now();
            if i >= warmup {
                samples.push(now - t);
            }
            t = now;
            if i + 1 == warmup {
                // The timed part starts after the warm-up.
                timed_from = now;
            }
        }
        let elapsed = timed_from.elapsed();
        rows.push(row(plan.test, plan.window, size, &mut samples, elapsed));
        on_row(rows.last().expect("just pushed"));
    }
    side.send(btl, peer, DONE, 0, waiting)?;
    // Let the DONE leave before the caller tears the module down.
    for _ in 0..100 {
        btl.step(Waiting::Poll);
    }
    Ok(rows)
}

/// Answers leading processes until one says it is done (a local run's
/// second process): echoes pings, acknowledges windows. Fails when
/// nothing arrives for `patience`. Takes messages of up to `max_message`
/// bytes.
pub fn answer<B: Driven>(
    btl: &mut B,
    max_message: usize,
    waiting: Waiting,
    patience: Duration,
) -> Result<(), BenchError> {
    let mut side = Side::new(btl.btl(), max_message, 1)?;
    let mut waited = Patience::new(patience);
    while side.runs() == 0 {
        if side.serve_once(btl, waiting) {
            waited.moved();
        } else if waited.idle() {
            return Err(BenchError::Stalled(patience));
        }
    }
    for _ in 0..100 {
        btl.step(Waiting::Poll);
    }
    Ok(())
}

/// Median, 99th percentile and rates of one size's timed samples, which
/// took `elapsed` in all.
pub(crate) fn row(
    test: Test,
    window: u32,
    size: usize,
    samples: &mut [Duration],
    elapsed: Duration,
) -> Row {
    samples.sort_unstable();
    let pick = |q: f64| {
        if samples.is_empty() {
            return 0.0;
        }
        let i = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[i].as_secs_f64() * 1e6
    };
    let iters = samples.len() as u32;
    let per_iter = match test {
        Test::PingPong => 2.0,
        Test::Bandwidth | Test::Rate => f64::from(window.max(1)),
    };
    let messages = match test {
        Test::PingPong => f64::from(iters),
        Test::Bandwidth | Test::Rate => f64::from(iters) * f64::from(window),
    };
    let timed = elapsed.as_secs_f64().max(1e-9);
    Row {
        size,
        iters,
        median_us: pick(0.5) / per_iter,
        p99_us: pick(0.99) / per_iter,
        mib_per_s: messages * size as f64 / timed / f64::from(1u32 << 20),
        msgs_per_s: messages / timed,
    }
}

/// Sizes from `min` to `max`, doubling (with `min` 0 taken as 1).
pub fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        s = s.saturating_mul(2);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(iters: u32, exact: bool) -> Plan {
        Plan {
            test: Test::PingPong,
            sizes: vec![8, 4 << 20],
            warmup: iters / 10,
            iters,
            exact,
            window: 64,
        }
    }

    #[test]
    fn iterations_given_hold_at_every_size() {
        assert_eq!(plan(200, true).iterations(4 << 20), (200, 20));
        assert_eq!(plan(200, true).iterations(8), (200, 20));
    }

    #[test]
    fn by_default_large_sizes_move_about_the_budget() {
        // 4 MiB each way: 32 round trips make 256 MiB.
        assert_eq!(plan(1000, false).iterations(4 << 20), (32, 3));
        assert_eq!(plan(1000, false).iterations(8), (1000, 100));
        // Never fewer than 10.
        assert_eq!(plan(1000, false).iterations(1 << 30).0, 10);
    }
}
