//! The engine over reliable-connected queue pairs.
//!
//! An RC queue pair delivers what it is given reliably and in order, so
//! the engine runs over it with its stream framing, unchanged: fragments,
//! credits piggy-backed on every header, acknowledgements, tags, puts and
//! gets, the handshake with its job key and epochs, peer loss and
//! reconnection are the engine's, as over TCP. What differs is below:
//!
//! - a link is a queue pair, connected by a [CPC](crate::cpc) when the
//!   engine asks for a connection (or when a peer's CPC connects to this
//!   side);
//! - what the engine writes is copied into a registered send buffer and
//!   posted as a SEND; the engine counts it written then, as a socket's
//!   buffer would;
//! - what arrives lands in a posted receive buffer and goes to the engine
//!   from there; a buffer goes back to the queue pair once the engine has
//!   taken all of it (bytes it cannot take yet, for want of a receive
//!   fragment, stay, and so do the buffers after them);
//! - a queue pair whose work fails (a peer gone, a retry count spent, a
//!   flush) closes its link, and the engine reconnects or loses the peer
//!   exactly as over TCP;
//! - puts and gets are RDMA writes and reads: a region the upper layer
//!   registers is registered with the device too, in place
//!   ([`register`](Transport::register)), and the engine hands the
//!   transport each transfer once it has checked it against what the
//!   peer said of its key ([`btl_core::engine::rdma`]). The transport
//!   posts it on the link's queue pair and reports its completion; a
//!   remote access error means the peer's key is stale. Registrations are
//!   the transport's table: a region leaves the device before it goes
//!   back to the user ([`deregister`](Transport::deregister)), so no
//!   peer's write can reach memory the user owns again.
//!
//! The engine's credits keep a sender within the receiver's fragments,
//! as openib's `rd_num`; they come back on every header, and alone in an
//! acknowledgement after a batch of 8 packets or grants (openib's
//! `rd_win`). A queue pair's receive buffers are reposted
//! as soon as the engine has copied them, so a sender runs out of them
//! only while the receiver is short of fragments; it then waits on the
//! RNR timer, without end.

mod channel;
mod datagram;
mod host;

pub use channel::{HUB_QUEUE, MemoryChannel, MemoryHub, SideChannel};
pub use datagram::{AddressBook, DatagramChannel, ENVELOPE, MAX_MESSAGE};
pub use host::Host;

use std::collections::BTreeMap;

use btl_core::btl::{Access as BtlAccess, Btl, BtlError, MemHandle};
use btl_core::endpoint::ProcName;
use btl_core::engine::driver::{Io, Nonces};
use btl_core::engine::{
    ConnectFailure, ConnectRequest, Engine, LinkId, Rdma, RdmaFailure, RdmaKind, Source, Storage,
    Stream,
};
use btl_core::time::Instant;
use btl_core::wire::DeviceKey;

use crate::cpc::{Cpc, CpcHost, QpTuning};
use crate::provider::{
    Access, LentMemory, LentRegion, Mr, Provider, QpNum, RemoteAddr, Rkey, SendOp, SendWr, Sge,
    VerbsError, WcStatus, WorkCompletion,
};
use host::{Held, HostEvent, Posted, WrId, WrKind};

/// How a verbs transport sizes its queue pairs and buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsConfig {
    /// The port its queue pairs use, from 1.
    pub port: u8,
    /// Most queue pairs at once (peers and attempts).
    pub max_peers: usize,
    /// Receives posted on each queue pair.
    pub recv_buffers: usize,
    /// Sends outstanding on each queue pair.
    pub send_buffers: usize,
    /// Bytes of each send and receive buffer: the most one SEND carries.
    pub buffer_size: usize,
    /// RDMA work requests outstanding on each queue pair (puts and gets;
    /// more wait in the engine).
    pub rdma_depth: usize,
    /// Timers and retries of its queue pairs.
    pub tuning: QpTuning,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            port: 1,
            max_peers: 64,
            recv_buffers: 16,
            send_buffers: 16,
            buffer_size: 16 << 10,
            rdma_depth: 16,
            tuning: QpTuning::default(),
        }
    }
}

/// Completions taken from the queue at once.
const POLL_BATCH: usize = 32;
/// Side-channel messages a poll takes: a peer that floods the channel
/// (every one a REQ the CPC must look at) must not hold the pass there,
/// while the connections being made and the links carrying data wait.
/// What is left is taken on the next poll, which the module makes at once
/// ([`side_channel_left`](Transport::side_channel_left)).
const SIDE_MESSAGES_PER_POLL: usize = 64;

/// An engine's links over queue pairs of one port of one device.
pub struct Transport<P: Provider> {
    host: Host<P>,
    cpc: Box<dyn Cpc<Host<P>> + Send>,
    nonces: Box<dyn Nonces + Send>,
    /// Connections the engine asked for, by peer.
    pending: BTreeMap<ProcName, ConnectRequest>,
    links: BTreeMap<LinkId, QpNum>,
    /// Room for [`feed_all`](Self::feed_all) and `write`, kept from pass
    /// to pass so that a pass allocates nothing.
    scratch: Vec<QpNum>,
    scratch_links: Vec<LinkId>,
    /// The port's largest message: the most one RDMA work request moves.
    max_msg: u64,
    /// The upper layer's regions the device holds, by their key.
    regions: BTreeMap<u64, Registered>,
    /// The last poll left side-channel messages unread.
    side_left: bool,
}

/// A region of the upper layer's, registered with the device in place.
#[derive(Debug, Clone, Copy)]
struct Registered {
    handle: MemHandle,
    mr: Mr,
}

/// The engine's registered memory, as the device asks for it by a
/// region's key while the transport serves it.
struct EngineMemory<'a, S: Storage, const W: usize> {
    engine: &'a mut Engine<S, Stream, W>,
    regions: &'a BTreeMap<u64, Registered>,
}

impl<S: Storage, const W: usize> LentMemory for EngineMemory<'_, S, W> {
    fn bytes(&mut self, id: u64) -> Option<&mut [u8]> {
        let handle = self.regions.get(&id)?.handle;
        self.engine.region_mut(handle).ok()
    }
}

impl<P: Provider> Transport<P> {
    /// A transport on `provider`: its domain, completion queue and buffer
    /// regions are made now. `cpc` must be initialized, and must have
    /// answered [`query`](Cpc::query) for the port.
    pub fn new(
        provider: P,
        config: VerbsConfig,
        cpc: Box<dyn Cpc<Host<P>> + Send>,
        channel: Box<dyn SideChannel + Send>,
        mut nonces: Box<dyn Nonces + Send>,
    ) -> Result<Self, VerbsError> {
        if config.buffer_size == 0 || config.recv_buffers == 0 || config.send_buffers == 0 {
            return Err(VerbsError::Invalid(
                "buffers must be at least one byte, one each",
            ));
        }
        let seed = u64::from_le_bytes(nonces.nonce()[..8].try_into().unwrap_or([1; 8]));
        Ok(Transport {
            max_msg: u64::from(provider.port(config.port)?.max_msg_size.max(1)),
            host: Host::new(provider, config, channel, seed)?,
            cpc,
            nonces,
            pending: BTreeMap::new(),
            links: BTreeMap::new(),
            scratch: Vec::new(),
            scratch_links: Vec::new(),
            regions: BTreeMap::new(),
            side_left: false,
        })
    }

    /// Registers `handle`, just registered with `engine` with peer access
    /// `access`, with the device too, in place, and tells the engine its
    /// device key: puts and gets from it go by RDMA, and peers' reach it.
    /// A region the device refuses (an empty one; one beyond what the
    /// device pins) stays the engine's alone, and its transfers go in
    /// packets: the error says why.
    ///
    /// The region must leave the device through
    /// [`deregister`](Self::deregister), never the engine's
    /// `deregister_mem` alone (the engine refuses while the device holds
    /// it).
    pub fn register<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        handle: MemHandle,
        access: BtlAccess,
    ) -> Result<(), VerbsError> {
        let bytes = engine
            .region_mut(handle)
            .map_err(|_| VerbsError::Unknown("registration"))?;
        let region = LentRegion {
            id: handle.remote_key().0,
            addr: bytes.as_mut_ptr(),
            len: bytes.len(),
        };
        let mut device = Access::LOCAL_WRITE;
        if access.contains(BtlAccess::REMOTE_WRITE) {
            device |= Access::REMOTE_WRITE;
        }
        if access.contains(BtlAccess::REMOTE_READ) {
            device |= Access::REMOTE_READ;
        }
        // SAFETY: the engine keeps the region's bytes where they are until
        // it deregisters them, which it refuses while a device key is set;
        // `deregister` takes the region from the device before it clears
        // the key. Peers write and read it only in transfers the BTL's
        // contract gives the memory to.
        #[allow(unsafe_code)]
        let mr = unsafe { self.host.provider.reg_lent(self.host.pd, region, device) }?;
        let key = DeviceKey {
            key: u64::from(mr.rkey.0),
            base: mr.base,
        };
        if engine.set_device_key(handle, Some(key)).is_err() {
            let _ = self.host.provider.dereg_mr(mr.lkey);
            return Err(VerbsError::Unknown("registration"));
        }
        self.regions.insert(region.id, Registered { handle, mr });
        Ok(())
    }

    /// Deregisters `handle`: from the device first, so that no RDMA
    /// reaches the memory once it is the user's again, then from the
    /// engine, which gives the memory back. A region a transfer or a send
    /// still uses is refused (`InUse`) and left as it was, on the device
    /// too, so that peers' keys for it stay good.
    pub fn deregister<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        handle: MemHandle,
    ) -> Result<S::Memory, BtlError> {
        if engine.region_in_use(handle) {
            return Err(BtlError::Memory(btl_core::btl::MemError::InUse));
        }
        let id = handle.remote_key().0;
        if let Some(r) = self.regions.get(&id) {
            // A device that cannot let go (none ever failed so) keeps the
            // engine from giving the memory back.
            if self.host.provider.dereg_mr(r.mr.lkey).is_err() {
                return Err(BtlError::Memory(btl_core::btl::MemError::InUse));
            }
            self.regions.remove(&id);
            engine.set_device_key(handle, None)?;
        }
        engine.deregister_mem(handle)
    }

    /// Regions the device holds for the upper layer.
    pub fn registrations(&self) -> usize {
        self.regions.len()
    }

    /// The completion queue, which a test may overrun.
    pub fn cq(&self) -> crate::provider::Cq {
        self.host.cq
    }

    /// The queue pairs carrying the engine's links.
    pub fn links(&self) -> impl Iterator<Item = (LinkId, QpNum)> + '_ {
        self.links.iter().map(|(&l, &q)| (l, q))
    }

    /// Queue pairs held (connected or being connected).
    pub fn queue_pairs(&self) -> usize {
        self.host.qps.len()
    }

    /// One pass at `now`: the input ([`poll`](Self::poll)), then the
    /// engine's loop (its timers, connections, writes and closes, puts and
    /// gets posted), then the device's turn at what was just posted from
    /// registered memory. Whether anything moved.
    pub fn progress<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) -> bool {
        let moved = self.poll(engine, now);
        engine.serve(self, now, true);
        self.apply_events(engine, now);
        // What was just posted from registered memory, for a device that
        // reaches it only now.
        self.serve_memory(engine);
        moved
    }

    /// Lets the device reach the engine's registered memory
    /// ([`Provider::serve`]).
    fn serve_memory<S: Storage, const W: usize>(&mut self, engine: &mut Engine<S, Stream, W>) {
        if self.regions.is_empty() {
            return;
        }
        let mut memory = EngineMemory {
            engine,
            regions: &self.regions,
        };
        self.host.provider.serve(&mut memory);
    }

    /// The input half of [`progress`](Self::progress), for a driver that
    /// runs the engine's loop itself: the device's turn at registered
    /// memory, the completions, side-channel messages to the CPC, its
    /// timers, and received bytes the engine could not take before.
    /// Whether anything moved.
    pub fn poll<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) -> bool {
        self.host.provider.set_time(now);
        self.serve_memory(engine);
        // Completions before the side channel: a peer's new REQ replaces
        // the queue pair it had, and what that pair completed (a remote
        // access error saying a key is stale) would go with it.
        let mut moved = self.poll_completions(engine, now);
        self.side_left = true;
        for _ in 0..SIDE_MESSAGES_PER_POLL {
            let Some((from, message)) = self.host.channel.recv() else {
                self.side_left = self.host.channel.left_unread();
                break;
            };
            self.cpc.handle_message(&mut self.host, from, &message, now);
            moved = true;
        }
        if self.cpc.poll_timeout().is_some_and(|t| t <= now) {
            self.cpc.handle_timeout(&mut self.host, now);
        }
        self.apply_events(engine, now);
        moved |= self.feed_all(engine, now);
        moved
    }

    /// Whether the last [`poll`](Self::poll) left side-channel messages
    /// unread, its share taken: the next is to come without waiting for
    /// the socket to say so (it will not: its poller is edge-triggered).
    pub fn side_channel_left(&self) -> bool {
        self.side_left
    }

    /// Takes every region from the device and destroys every queue
    /// pair: the engine must be finalized first. Its memory may go once
    /// this returns (the engine's registrations still name device keys,
    /// which nothing reaches any more).
    pub fn finalize(&mut self) {
        for (_, r) in std::mem::take(&mut self.regions) {
            let _ = self.host.provider.dereg_mr(r.mr.lkey);
        }
        self.cpc.finalize(&mut self.host);
        let qps: Vec<QpNum> = self.host.qps.keys().copied().collect();
        for qp in qps {
            self.host.destroy_qp(qp);
        }
        self.host.events.clear();
        self.links.clear();
        self.pending.clear();
    }

    /// Tells the engine what the CPC reported.
    fn apply_events<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) {
        while let Some(event) = self.host.events.pop_front() {
            match event {
                HostEvent::Connected(peer, qp) => self.on_connected(engine, peer, qp, now),
                HostEvent::Failed(peer, why) => {
                    if let Some(req) = self.pending.remove(&peer) {
                        engine.handle_connect_failed(req, why, now);
                    }
                }
                HostEvent::LinkGone(link) => {
                    self.links.remove(&link);
                    engine.handle_closed(link, now);
                }
            }
        }
    }

    /// `qp` is connected to `peer`: a link for it, as asked for by the
    /// engine or as accepted from the peer.
    fn on_connected<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        peer: ProcName,
        qp: QpNum,
        now: Instant,
    ) {
        if !self.host.qps.contains_key(&qp) {
            return;
        }
        let nonce = self.nonces.nonce();
        let req = self.pending.remove(&peer);
        let link = match req {
            Some(req) => engine.handle_connected(req, nonce, now),
            None => {
                let source = Source(peer.job << 32 ^ u64::from(peer.rank));
                engine.handle_accepted(source, nonce, now)
            }
        };
        let Ok(link) = link else {
            // No link slot: the queue pair goes, and a connection the
            // engine asked for failed.
            self.cpc.drop_qp(&mut self.host, peer, qp);
            self.host.destroy_qp(qp);
            if let Some(req) = req {
                engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            }
            return;
        };
        if let Some(q) = self.host.qps.get_mut(&qp) {
            q.peer = Some(peer);
            q.link = Some(link);
        }
        self.links.insert(link, qp);
        self.feed(engine, qp, now);
    }

    /// Takes what the completion queue holds; whether anything came.
    fn poll_completions<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) -> bool {
        let mut any = false;
        loop {
            let mut batch = [WorkCompletion::default(); POLL_BATCH];
            let n = match self.host.provider.poll_cq(self.host.cq, &mut batch) {
                Ok(n) => n,
                Err(_) => {
                    // An overrun queue lost completions: every queue pair
                    // on it is in Err, and nothing it says can be trusted.
                    // They go, and a new queue takes the next ones.
                    // (If no new queue can be made, new queue pairs cannot
                    // be either: connections fail, and the engine loses its
                    // peers in time.)
                    self.break_all(engine, now);
                    let _ = self.host.renew_cq();
                    return true;
                }
            };
            for wc in &batch[..n] {
                self.on_completion(engine, wc, now);
            }
            any |= n > 0;
            if n < POLL_BATCH {
                return any;
            }
        }
    }

    fn on_completion<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        wc: &WorkCompletion,
        now: Instant,
    ) {
        let id = WrId::decode(wc.wr_id);
        let Some(q) = self.host.qps.get(&wc.qp) else {
            // A queue pair already destroyed: nothing to do.
            return;
        };
        if q.slot != id.slot {
            return;
        }
        if id.kind == WrKind::Rdma {
            self.on_rdma_completion(engine, wc, id.index as u32, now);
            return;
        }
        if !wc.status.is_success() {
            self.break_qp(engine, wc.qp, now);
            return;
        }
        if id.kind == WrKind::Send {
            let n = self.host.config.send_buffers;
            let q = self.host.qps.get_mut(&wc.qp).expect("present above");
            q.sends_out = q.sends_out.saturating_sub(1);
            q.send_first = (q.send_first + 1) % n;
            if q.closing && q.is_idle() {
                self.finish_close(engine, wc.qp, now);
            }
            return;
        }
        if q.link.is_none() {
            // The peer sends: it is in Rts, whatever its RTU is doing.
            self.cpc.handle_receive(&mut self.host, wc.qp);
            self.apply_events(engine, now);
        }
        if let Some(q) = self.host.qps.get_mut(&wc.qp) {
            // A receive brings at most its buffer, whatever the device says.
            let len = (wc.byte_len as usize).min(self.host.config.buffer_size);
            q.held.push_back(Held {
                index: id.index,
                len,
                taken: 0,
            });
        }
        self.feed(engine, wc.qp, now);
    }

    /// RDMA transfer `number` of `wc.qp` completed: the engine hears how
    /// (a remote access error means the peer's key is stale), and a
    /// failure takes the queue pair with it (the engine hands what it
    /// carried out again on the next link).
    fn on_rdma_completion<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        wc: &WorkCompletion,
        number: u32,
        now: Instant,
    ) {
        let Some(q) = self.host.qps.get_mut(&wc.qp) else {
            return;
        };
        // In order: a completion is for the oldest transfer outstanding.
        let Some(posted) = q.rdma.front().copied().filter(|p| p.number == number) else {
            self.break_qp(engine, wc.qp, now);
            return;
        };
        q.rdma.pop_front();
        q.rdma_requests = q.rdma_requests.saturating_sub(posted.requests);
        match wc.status {
            WcStatus::Success => {
                engine.handle_rdma(posted.token, Ok(()));
                let q = self.host.qps.get(&wc.qp).expect("present above");
                if q.closing && q.is_idle() {
                    self.finish_close(engine, wc.qp, now);
                }
            }
            WcStatus::RemoteAccess => {
                engine.handle_rdma(posted.token, Err(RdmaFailure::KeyRefused));
                self.break_qp(engine, wc.qp, now);
            }
            _ => self.break_qp(engine, wc.qp, now),
        }
    }

    /// Posts the transfers the engine has for `link` as RDMA writes and
    /// reads on its queue pair, as far as the queue pair takes them: one
    /// work request per piece of at most the port's largest message, only
    /// the last one signaled.
    fn post_rdma<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        link: LinkId,
        now: Instant,
    ) {
        let Some(&qp) = self.links.get(&link) else {
            return;
        };
        let max_msg = self.max_msg;
        loop {
            let Some(q) = self.host.qps.get(&qp) else {
                return;
            };
            let pieces_room = self.host.config.rdma_depth.saturating_sub(q.rdma_requests);
            if q.closing || pieces_room == 0 {
                return;
            }
            let Some(r) = engine.poll_rdma(link) else {
                return;
            };
            let Ok(rkey) = u32::try_from(r.remote_key) else {
                // No HCA's key: the peer said something no device would.
                engine.handle_rdma(r.token, Err(RdmaFailure::KeyRefused));
                continue;
            };
            let pieces = r.local.len.div_ceil(max_msg).max(1) as usize;
            let local = self
                .regions
                .get(&r.local.handle.remote_key().0)
                .map(|g| g.mr);
            let Some(local) = local.filter(|_| pieces <= self.host.config.rdma_depth) else {
                // Larger than the queue pair ever takes (or, which cannot
                // be, from a region the device has not got): in packets.
                engine.handle_rdma(r.token, Err(RdmaFailure::Declined));
                continue;
            };
            if pieces > pieces_room {
                // Room comes back as transfers complete; until then, this
                // one goes in packets rather than wait.
                engine.handle_rdma(r.token, Err(RdmaFailure::Declined));
                continue;
            }
            if self
                .post_pieces(qp, &r, Rkey(rkey), local, max_msg, pieces)
                .is_err()
            {
                self.break_qp(engine, qp, now);
                return;
            }
        }
    }

    /// Posts transfer `r` on `qp`, to the peer's region `rkey`, in
    /// `pieces` work requests of at most `max_msg` bytes.
    fn post_pieces(
        &mut self,
        qp: QpNum,
        r: &Rdma,
        rkey: Rkey,
        local: Mr,
        max_msg: u64,
        pieces: usize,
    ) -> Result<(), VerbsError> {
        let q = self
            .host
            .qps
            .get_mut(&qp)
            .ok_or(VerbsError::Unknown("queue pair"))?;
        let (slot, number) = (q.slot, q.rdma_next);
        for piece in 0..pieces {
            let done = piece as u64 * max_msg;
            let len = (r.local.len - done).min(max_msg);
            let sg = [Sge {
                lkey: local.lkey,
                offset: local.base + r.local.offset + done,
                len: len as u32,
            }];
            let at = RemoteAddr {
                rkey,
                offset: r.remote_addr + done,
            };
            let last = piece + 1 == pieces;
            let wr = SendWr {
                wr_id: WrId {
                    kind: WrKind::Rdma,
                    slot,
                    index: number as usize,
                }
                .encode(),
                op: match r.kind {
                    RdmaKind::Write => SendOp::RdmaWrite(at),
                    RdmaKind::Read => SendOp::RdmaRead(at),
                },
                sg: &sg,
                signaled: last,
            };
            self.host
                .provider
                .post_send(qp, &[wr])
                .map_err(|e| e.error)?;
        }
        let q = self
            .host
            .qps
            .get_mut(&qp)
            .ok_or(VerbsError::Unknown("queue pair"))?;
        q.rdma.push_back(Posted {
            number,
            token: r.token,
            requests: pieces,
        });
        q.rdma_requests += pieces;
        q.rdma_next = number.wrapping_add(1);
        Ok(())
    }

    /// Gives the engine what `qp` received, in order, as far as it takes
    /// it; reposts each buffer it has taken whole.
    fn feed<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        qp: QpNum,
        now: Instant,
    ) -> bool {
        let mut moved = false;
        loop {
            let Some(q) = self.host.qps.get(&qp) else {
                return moved;
            };
            let (Some(link), Some(&held)) = (q.link, q.held.front()) else {
                return moved;
            };
            let slot = q.slot;
            let start = self.host.recv_offset(slot, held.index) as usize;
            let range = start + held.taken..start + held.len;
            let lkey = self.host.recv.lkey;
            let taken = self.host.provider.with_mr(lkey, |m| {
                m.get(range.clone())
                    .map(|bytes| engine.handle_stream(link, bytes, now))
            });
            let n = match taken {
                Ok(Some(Ok(n))) => n,
                // The link is gone (the engine failed it), or the buffer
                // is not what it should be.
                _ => {
                    self.break_qp(engine, qp, now);
                    return true;
                }
            };
            moved |= n > 0;
            let q = self.host.qps.get_mut(&qp).expect("present above");
            let front = q.held.front_mut().expect("present above");
            front.taken += n;
            if front.taken < front.len {
                // The engine waits for a receive fragment.
                return moved;
            }
            q.held.pop_front();
            if self.host.post_recv(qp, slot, held.index).is_err() {
                self.break_qp(engine, qp, now);
                return true;
            }
        }
    }

    /// Feeds every queue pair that holds bytes.
    fn feed_all<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) -> bool {
        let mut qps = std::mem::take(&mut self.scratch);
        qps.clear();
        qps.extend(
            self.host
                .qps
                .iter()
                .filter(|(_, q)| !q.held.is_empty())
                .map(|(&qp, _)| qp),
        );
        let mut moved = false;
        for &qp in &qps {
            moved |= self.feed(engine, qp, now);
        }
        self.scratch = qps;
        moved
    }

    /// Copies what the engine has to send on `link` into free send
    /// buffers, and posts them.
    fn write_link<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        link: LinkId,
        now: Instant,
    ) {
        let Some(&qp) = self.links.get(&link) else {
            return;
        };
        let size = self.host.config.buffer_size;
        let buffers = self.host.config.send_buffers;
        loop {
            let Some(q) = self.host.qps.get(&qp) else {
                return;
            };
            if q.sends_out >= buffers || q.closing {
                return;
            }
            let index = (q.send_first + q.sends_out) % buffers;
            let offset = self.host.send_offset(q.slot, index);
            let slot = q.slot;
            let Some(t) = engine.poll_transmit(link) else {
                return;
            };
            let lkey = self.host.send.lkey;
            let copied = self
                .host
                .provider
                .with_mr_mut(lkey, |m| {
                    let mut out = &mut m[offset as usize..offset as usize + size];
                    let mut copied = 0;
                    for seg in &t.segments {
                        let n = seg.len().min(out.len());
                        out[..n].copy_from_slice(&seg[..n]);
                        out = &mut out[n..];
                        copied += n;
                        if out.is_empty() {
                            break;
                        }
                    }
                    copied
                })
                .unwrap_or(0);
            drop(t);
            if copied == 0 {
                return;
            }
            let sg = [Sge {
                lkey,
                offset,
                len: copied as u32,
            }];
            let wr = SendWr {
                wr_id: WrId {
                    kind: WrKind::Send,
                    slot,
                    index,
                }
                .encode(),
                op: SendOp::Send,
                sg: &sg,
                signaled: true,
            };
            if self.host.provider.post_send(qp, &[wr]).is_err() {
                self.break_qp(engine, qp, now);
                return;
            }
            if let Some(q) = self.host.qps.get_mut(&qp) {
                q.sends_out += 1;
            }
            engine.handle_written(link, copied);
        }
    }

    /// `qp` failed: its link closes, and the CPC and the provider let it
    /// go.
    fn break_qp<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        qp: QpNum,
        now: Instant,
    ) {
        let Some(q) = self.host.qps.get(&qp) else {
            return;
        };
        if let Some(peer) = q.peer {
            self.cpc.drop_qp(&mut self.host, peer, qp);
        }
        self.host.destroy_qp(qp);
        self.apply_events(engine, now);
    }

    /// Every queue pair failed at once (an overrun completion queue).
    fn break_all<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) {
        let qps: Vec<QpNum> = self.host.qps.keys().copied().collect();
        for qp in qps {
            self.break_qp(engine, qp, now);
        }
    }

    /// The engine is done with `qp`'s link and its sends are out: the
    /// queue pair goes, and the engine hears the link closed.
    fn finish_close<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        qp: QpNum,
        now: Instant,
    ) {
        let Some(q) = self.host.qps.get_mut(&qp) else {
            return;
        };
        let (peer, link) = (q.peer, q.link.take());
        if let Some(peer) = peer {
            self.cpc.drop_qp(&mut self.host, peer, qp);
        }
        self.host.destroy_qp(qp);
        if let Some(link) = link {
            self.links.remove(&link);
            engine.handle_closed(link, now);
        }
        self.apply_events(engine, now);
    }
}

impl<P: Provider, S: Storage, const W: usize> Io<Engine<S, Stream, W>> for Transport<P> {
    fn connect(&mut self, engine: &mut Engine<S, Stream, W>, req: ConnectRequest, now: Instant) {
        self.pending.insert(req.proc, req);
        self.cpc.start_connect(&mut self.host, req.proc, now);
        self.apply_events(engine, now);
    }

    fn write(&mut self, engine: &mut Engine<S, Stream, W>, now: Instant) {
        // Links may close while they are written: their list is taken
        // first, into room kept from pass to pass.
        let mut links = std::mem::take(&mut self.scratch_links);
        links.clear();
        links.extend(self.links.keys().copied());
        for &link in &links {
            self.post_rdma(engine, link, now);
            self.write_link(engine, link, now);
        }
        self.scratch_links = links;
    }

    fn close(&mut self, engine: &mut Engine<S, Stream, W>, link: LinkId, now: Instant) {
        let Some(&qp) = self.links.get(&link) else {
            engine.handle_closed(link, now);
            return;
        };
        let Some(q) = self.host.qps.get_mut(&qp) else {
            self.links.remove(&link);
            engine.handle_closed(link, now);
            return;
        };
        q.closing = true;
        if q.is_idle() {
            self.finish_close(engine, qp, now);
        }
    }
}
