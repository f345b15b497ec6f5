//! The shared-memory BTL's core: the [`Btl`] interface over a pair of
//! [`ring`](crate::ring)s per peer, one each way, in memory the driver
//! lends (a segment both processes map, or RAM two cores share). It is
//! not the socket engine: a ring neither loses nor reorders, so there are
//! no windows, acknowledgements or retransmissions, and the loopback's
//! shape fits: every call does its work at once, or refuses with
//! `OutOfResource` and says [`Event::Room`] when it may go.
//!
//! Messages are one record each (see [`record`]), left at the head of
//! their ring until [`Btl::poll_event`] reads them out; puts and gets
//! move in pieces of at most what one record holds, carried on by
//! [`Btl::progress`] as the peer's ring has room, or, when the driver
//! gives a way to copy across ([`CrossCopy`]), in one copy made by the
//! target. Everything a peer writes is checked: a record that does not
//! parse, or a ring that breaks its protocol, loses that peer
//! (`ProtocolViolation`), never the process.
//!

pub mod record;

use heapless::{Deque, Vec};

use crate::btl::{
    Access, Attributes, Btl, BtlError, BtlFlags, Completion, ErrorEvent, Event, Incoming, Limit,
    LostReason, MemHandle, MemSlice, OpId, RegSlot, RegisterError, Registrations, RejectCode,
    RemoteSlice, SendError, SendStatus, Tag,
};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::mca::Exclusivity;
use crate::pool::{Fragment, FragmentPools, PoolsRef, Region};
use crate::ring::{Bell, Consumer, PopError, Producer, PushError};
use crate::sync::AtomicU32;

use record::Record;

/// One peer: the ring this side writes and the one it reads.
#[derive(Debug)]
struct Peer<'a> {
    proc: ProcName,
    tx: Producer<'a>,
    rx: Consumer<'a>,
    refs: u32,
    lost: Option<LostReason>,
    /// A put of the peer's into memory this side refused: later pieces of
    /// it are dropped, and its last is answered with the code.
    refusing: Option<(u64, RejectCode)>,
    /// The put of the peer's whose pieces are coming: its operation and
    /// where its first piece went, for the notice.
    put_start: Option<(u64, u64)>,
    /// Answers owed to the peer that its ring had no room for. While it
    /// is full, the peer's puts and gets wait in its ring.
    owed: Deque<(u8, [u8; 9]), 8>,
    /// A get of the peer's being served: its operation, what is read and
    /// how far.
    serving: Option<Serving>,
    /// What a send, put or get to it was refused for lack of, to be told
    /// `Room` when it would be taken.
    wanted: Option<Wanted>,
    /// This side finalized and owes the peer its goodbye.
    bye_owed: bool,
    /// A message of the peer's waits at the head of its ring for
    /// `poll_event`: its later records wait behind it.
    held: bool,
    /// How to wake the peer if it sleeps, once the driver gave it.
    bell: Option<Bell<'a>>,
    /// How this side copies straight from and into the peer's memory,
    /// for its puts and gets in one copy.
    cross: Option<CrossCopy>,
    /// The peer copies this side's puts and gets in one go.
    copies_for_me: bool,
}

impl Peer<'_> {
    /// Pushes a record to the peer, and wakes it if it sleeps.
    fn push(&mut self, kind: u8, parts: &[&[u8]]) -> Result<(), PushError> {
        self.tx.push(kind, parts)?;
        if let Some(bell) = &self.bell {
            bell.ring();
        }
        Ok(())
    }
}

/// What refusals for room lacked, each as its check tested it.
#[derive(Debug, Clone, Copy, Default)]
struct Wanted {
    /// Room in the peer's ring for a record of this payload.
    record: Option<usize>,
    /// A fragment for a descriptor of this length.
    fragment: Option<usize>,
    /// A place for an event.
    event: bool,
    /// An operation slot (and a place for its event).
    op: bool,
}

impl Wanted {
    fn and(self, o: Wanted) -> Wanted {
        Wanted {
            record: self.record.max(o.record),
            fragment: self.fragment.max(o.fragment),
            event: self.event || o.event,
            op: self.op || o.op,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Serving {
    op: u64,
    src: RemoteSlice,
    sent: u64,
}

/// A put or get of this side's under way.
#[derive(Debug, Clone, Copy)]
struct Op {
    id: u64,
    peer: EndpointId,
    ctx: u64,
    kind: Kind,
    local: MemSlice,
    remote: RemoteSlice,
    /// Bytes pushed (a put) or received (a get).
    done: u64,
    /// The target copies it in one go (see [`CrossCopy`]).
    one: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put { imm: Option<u64> },
    Get { asked: bool },
}

#[derive(Debug)]
enum Pending {
    /// A message of `from`'s waits at the head of its ring: it is read
    /// from there when polled.
    Message {
        from: EndpointId,
    },
    Done(Completion),
}

/// The shared-memory BTL of process `me`, reaching at most `PEERS` peers,
/// with `REGS` registrations, `OPS` puts and gets under way and `EVENTS`
/// events waiting; descriptors and received messages in `pools`.
pub struct SharedMemory<
    'a,
    R,
    M,
    const PEERS: usize,
    const REGS: usize,
    const OPS: usize,
    const EVENTS: usize,
> {
    attributes: Attributes,
    pools: FragmentPools<R>,
    regs: Registrations<M, [RegSlot<M>; REGS]>,
    peers: Vec<Peer<'a>, PEERS>,
    ops: [Option<Op>; OPS],
    /// How many of `ops` are under way: `progress` looks at them only
    /// then.
    live_ops: usize,
    /// Puts and gets at least this long go in one copy, to a peer that
    /// copies.
    one_copy_min: u64,
    transfers: Transfers,
    next_op: u64,
    events: Deque<Pending, EVENTS>,
    /// Where `poll_event` reads a message out of its ring, kept while
    /// more events wait (a burst of messages costs one fragment) and
    /// given back when none do.
    scratch: Option<Fragment>,
    finalized: bool,
}

/// How this side copies straight between its memory and a peer's,
/// without the rings (Linux's cross-memory attach, `process_vm_readv` and
/// `process_vm_writev`): the driver's functions, given the peer's
/// `process`. Each returns whether the copy was made; one that was not
/// (the kernel refused, an address the peer gave was wrong) is answered
/// so that the peer moves it through the rings instead.
#[derive(Debug, Clone, Copy)]
pub struct CrossCopy {
    /// The peer's process, as the functions take it.
    pub process: u32,
    /// Copies the peer's bytes at an address into a buffer of this side's.
    pub read: fn(process: u32, address: u64, into: &mut [u8]) -> bool,
    /// Copies a buffer of this side's to the peer's bytes at an address.
    pub write: fn(process: u32, address: u64, from: &[u8]) -> bool,
}

/// How this side's puts and gets went, counted as they started: through
/// the rings in pieces (two copies: in, and out), or copied in one go by
/// the peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Puts and gets moved in pieces through the rings.
    pub rings: u64,
    /// Puts and gets the peer copied in one go.
    pub one_copy: u64,
    /// Of those asked in one copy, the ones the peer could not copy, then
    /// moved through the rings (and counted there too).
    pub fell_back: u64,
}

/// What the driver's attach refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachError {
    /// The words are not an empty ring each.
    NotARing,
    /// Every peer slot is taken, or the event queue has no place left to
    /// keep for another peer's loss.
    Full,
    /// A ring whose records are too small for a put's piece.
    RingTooSmall,
}

impl<
    'a,
    R: Region,
    M: AsRef<[u8]> + AsMut<[u8]>,
    const PEERS: usize,
    const REGS: usize,
    const OPS: usize,
    const EVENTS: usize,
> SharedMemory<'a, R, M, PEERS, REGS, OPS, EVENTS>
{
    /// A module with no peer yet, its descriptors and received messages
    /// from `pools`; [`attach`](Self::attach) joins the peers.
    pub fn new(pools: FragmentPools<R>) -> Self {
        const {
            assert!(
                EVENTS > PEERS + OPS,
                "events: a place for every peer's loss and operation's end, and more"
            )
        };
        let eager = pools.view().class_size(crate::pool::FragmentClass::Eager);
        let max = pools.view().class_size(crate::pool::FragmentClass::Max);
        SharedMemory {
            attributes: Attributes {
                name: "sm",
                eager_limit: eager.saturating_sub(record::MESSAGE_HEAD),
                max_send_size: max.saturating_sub(record::MESSAGE_HEAD),
                // Gets through the rings copy twice and wait a round trip:
                // never better than sends until they go in one copy.
                rdma_pipeline_send_length: usize::MAX,
                rdma_pipeline_frag_size: max,
                put_limit: u64::MAX >> 1,
                put_alignment: 1,
                get_limit: u64::MAX >> 1,
                get_alignment: 1,
                exclusivity: Exclusivity::SHARED_MEMORY,
                latency_us: 1,
                bandwidth_mbps: 80_000,
                flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET,
                registration_handle_size: 8,
            },
            pools,
            regs: Registrations::inline(),
            peers: Vec::new(),
            ops: [None; OPS],
            live_ops: 0,
            one_copy_min: u64::MAX,
            transfers: Transfers::default(),
            next_op: 0,
            events: Deque::new(),
            scratch: None,
            finalized: false,
        }
    }

    /// Joins peer `proc` over `tx`, the ring this side writes, and `rx`,
    /// the ring it reads (each made by [`ring::init`](crate::ring::init)
    /// and not used yet); its endpoint. The messages this side sends are
    /// capped by what one record of `tx` holds; the pools of both sides
    /// are to be alike (a record larger than any fragment here loses its
    /// sender).
    pub fn attach(
        &mut self,
        proc: ProcName,
        tx: &'a [AtomicU32],
        rx: &'a [AtomicU32],
    ) -> Result<EndpointId, AttachError> {
        let tx = Producer::attach(tx).map_err(|_| AttachError::NotARing)?;
        let rx = Consumer::attach(rx).map_err(|_| AttachError::NotARing)?;
        if tx.max_payload() <= record::PUT_HEAD {
            return Err(AttachError::RingTooSmall);
        }
        if !self.has_room(1) {
            return Err(AttachError::Full);
        }
        let most = tx.max_payload() - record::MESSAGE_HEAD;
        let id = EndpointId(self.peers.len() as u32);
        self.peers
            .push(Peer {
                proc,
                tx,
                rx,
                refs: 0,
                lost: None,
                refusing: None,
                put_start: None,
                owed: Deque::new(),
                serving: None,
                wanted: None,
                bye_owed: false,
                held: false,
                bell: None,
                cross: None,
                copies_for_me: false,
            })
            .map_err(|_| AttachError::Full)?;
        self.attributes.eager_limit = self.attributes.eager_limit.min(most);
        self.attributes.max_send_size = self.attributes.max_send_size.min(most);
        Ok(id)
    }

    /// Whether `endpoint` wrote records this side has not taken yet (a
    /// message held for `poll_event` among them): a peer whose process
    /// ended is lost only once what it wrote before has been read, so
    /// that its last messages are not lost with it.
    pub fn unread(&mut self, endpoint: EndpointId) -> bool {
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return false;
        };
        peer.lost.is_none() && (peer.held || matches!(peer.rx.peek(), Ok(Some(_))))
    }

    /// The driver found peer `endpoint` gone (its process died): it is
    /// lost with `reason`, once; what was under way to it fails.
    pub fn lose(&mut self, endpoint: EndpointId, reason: LostReason) {
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return;
        };
        if peer.lost.is_some() {
            return;
        }
        peer.lost = Some(reason);
        peer.serving = None;
        peer.owed.clear();
        peer.wanted = None;
        if reason != LostReason::Left {
            // Best effort: a peer given up for what it did hears of it, and
            // its operations to this side end rather than wait.
            let _ = peer.push(record::BYE, &[]);
        }
        let error = BtlError::PeerLost(reason);
        for slot in &mut self.ops {
            if let Some(op) = slot.filter(|op| op.peer == endpoint) {
                *slot = None;
                self.live_ops -= 1;
                let _ = self.events.push_back(Pending::Done(done(op, Err(error))));
            }
        }
        let event = if reason == LostReason::Left {
            Completion::PeerLeft { endpoint }
        } else {
            Completion::Error(ErrorEvent {
                fatal: false,
                endpoint: Some(endpoint),
                error,
            })
        };
        // The queue keeps room for losses: see `has_room`.
        let _ = self.events.push_back(Pending::Done(event));
    }

    /// Wakes peer `endpoint` through `bell` after every record pushed to
    /// it, for a peer that sleeps when it has nothing to do.
    pub fn set_bell(&mut self, endpoint: EndpointId, bell: Bell<'a>) {
        if let Some(peer) = self.peers.get_mut(endpoint.0 as usize) {
            peer.bell = Some(bell);
        }
    }

    /// Puts and gets of at least `len` bytes go in one copy to the peers
    /// that copy ([`set_cross_copy`](Self::set_cross_copy)); none do
    /// until this is set. From `len` on, the attributes say a message
    /// moves better by get than by sends (`rdma_pipeline_send_length`).
    pub fn set_one_copy_min(&mut self, len: u64) {
        self.one_copy_min = len;
        self.attributes.rdma_pipeline_send_length = usize::try_from(len).unwrap_or(usize::MAX);
    }

    /// How this side copies across to peer `endpoint` (`None`: it does
    /// not, and refuses the peer's puts and gets in one copy), and
    /// whether the peer copies across to this side (`peer_copies`), so
    /// that this side's large puts and gets to it go in one copy.
    pub fn set_cross_copy(
        &mut self,
        endpoint: EndpointId,
        cross: Option<CrossCopy>,
        peer_copies: bool,
    ) {
        if let Some(peer) = self.peers.get_mut(endpoint.0 as usize) {
            peer.cross = cross;
            peer.copies_for_me = peer_copies;
        }
    }

    /// How this side's puts and gets have gone so far.
    pub fn transfers(&self) -> Transfers {
        self.transfers
    }

    /// Whether a put or get under way reads or writes registration
    /// `handle`: its deregistration is refused (`InUse`) until they end.
    pub fn region_in_use(&self, handle: MemHandle) -> bool {
        self.ops.iter().flatten().any(|o| o.local.handle == handle)
    }

    /// Why peer `endpoint` was lost, if it was (`None` too for an
    /// endpoint never attached): the driver lets go of its memory then.
    pub fn lost(&self, endpoint: EndpointId) -> Option<LostReason> {
        self.peers.get(endpoint.0 as usize).and_then(|p| p.lost)
    }

    /// Whether a goodbye [`finalize`](Btl::finalize) owes a peer still
    /// waits for room in its ring: the driver calls `progress` until it is
    /// sent, or the peer is lost, before it lets go of the memory.
    pub fn owes_goodbyes(&self) -> bool {
        self.peers.iter().any(|p| p.bye_owed && p.lost.is_none())
    }

    fn peer(&mut self, endpoint: EndpointId) -> Result<&mut Peer<'a>, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let peer = self
            .peers
            .get_mut(endpoint.0 as usize)
            .filter(|p| p.refs > 0)
            .ok_or(BtlError::Unreachable)?;
        match peer.lost {
            Some(reason) => Err(BtlError::PeerLost(reason)),
            None => Ok(peer),
        }
    }

    /// Whether `n` more events may be promised: a place per peer stays
    /// free for its loss, and one per operation under way for its end.
    fn has_room(&self, n: usize) -> bool {
        debug_assert_eq!(self.live_ops, self.ops.iter().flatten().count());
        self.events.len() + n + self.peers.len() + self.live_ops <= EVENTS
    }

    /// A message of `len` bytes fits one record.
    fn check_size(&self, len: usize) -> Result<(), BtlError> {
        Limit::Here.admits(len, self.attributes.max_send_size)
    }

    /// Notes that `wanted` was refused for room to `endpoint` if `r` is
    /// `OutOfResource`, for `Event::Room`; passes `r` on.
    fn refused<T>(
        &mut self,
        endpoint: EndpointId,
        wanted: Wanted,
        r: Result<T, BtlError>,
    ) -> Result<T, BtlError> {
        if matches!(r, Err(BtlError::OutOfResource))
            && let Some(peer) = self.peers.get_mut(endpoint.0 as usize)
            && peer.lost.is_none()
        {
            peer.wanted = Some(peer.wanted.map_or(wanted, |w| w.and(wanted)));
        }
        r
    }

    /// The first peer refused something for room that would now be
    /// taken: its `Room` event.
    fn poll_room(&mut self) -> Option<Event<'static>> {
        for p in 0..self.peers.len() {
            match self.room_for(p) {
                Some(Ok(true)) => {
                    self.peers[p].wanted = None;
                    return Some(Event::Room {
                        endpoint: EndpointId(p as u32),
                    });
                }
                Some(Err(_)) => self.lose(EndpointId(p as u32), LostReason::ProtocolViolation),
                Some(Ok(false)) | None => {}
            }
        }
        None
    }

    /// Whether [`poll_room`](Self::poll_room) would make an event now (a
    /// `Room`, or a loss for a ring found broken): counted among the
    /// events ready, so that a wait after a refusal ends when room comes.
    fn room_ready(&mut self) -> bool {
        (0..self.peers.len()).any(|p| !matches!(self.room_for(p), Some(Ok(false)) | None))
    }

    /// Whether what peer `p` was refused would now be taken; `None` when
    /// it was refused nothing, an error when its ring's record of room is
    /// broken.
    fn room_for(&mut self, p: usize) -> Option<Result<bool, PushError>> {
        let w = self.peers[p].wanted?;
        let op = !w.op || (self.ops.iter().any(Option::is_none) && self.has_room(1));
        let event = !w.event || self.has_room(1);
        let fragment = w.fragment.is_none_or(|len| {
            let pools = self.pools.view();
            pools.class_for(len).is_ok_and(|c| {
                let st = pools.stats(c);
                st.in_use < st.capacity
            })
        });
        let record = match w.record {
            None => true,
            Some(len) => match self.peers[p].tx.has_room(len) {
                Ok(room) => room,
                Err(e) => return Some(Err(e)),
            },
        };
        Some(Ok(op && event && fragment && record))
    }

    /// The largest piece of a put or get to peer `p`, behind a head of
    /// `head` bytes: what one record of its ring and one fragment hold.
    fn piece(&self, p: usize, head: usize) -> u64 {
        let fragment = self
            .pools
            .view()
            .class_size(crate::pool::FragmentClass::Max);
        let record = self.peers.get(p).map_or(0, |peer| peer.tx.max_payload());
        record.min(fragment).saturating_sub(head).max(1) as u64
    }

    /// Starts a put or get of `kind`.
    fn start(
        &mut self,
        endpoint: EndpointId,
        kind: Kind,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.peer(endpoint)?;
        self.regs.slice(local)?;
        if local.len != remote.len {
            return Err(BtlError::TooLarge {
                len: local.len,
                max: remote.len,
                whose: Limit::Here,
            });
        }
        let free = self.ops.iter().position(Option::is_none);
        let Some(i) = free.filter(|_| self.has_room(1)) else {
            let wanted = Wanted {
                op: true,
                ..Wanted::default()
            };
            return self.refused(endpoint, wanted, Err(BtlError::OutOfResource));
        };
        self.next_op += 1;
        let id = self.next_op;
        let op = Op {
            id,
            peer: endpoint,
            ctx,
            kind,
            local,
            remote,
            done: 0,
            one: local.len >= self.one_copy_min && self.peers[endpoint.0 as usize].copies_for_me,
        };
        if remote.offset.checked_add(remote.len).is_none() {
            // A range that wraps around u64 is outside any region: refused
            // as the peer would refuse it (room was checked above).
            let refused = Err(BtlError::Rejected(RejectCode::OutOfBounds));
            let _ = self.events.push_back(Pending::Done(done(op, refused)));
            return Ok(OpId(id));
        }
        self.ops[i] = Some(op);
        self.live_ops += 1;
        if op.one {
            self.transfers.one_copy += 1;
        } else {
            self.transfers.rings += 1;
        }
        self.move_ops();
        Ok(OpId(id))
    }

    /// Carries every put and get on as far as the rings take it, and every
    /// answer and served get of every peer.
    fn move_ops(&mut self) {
        for p in 0..self.peers.len() {
            let peer = &self.peers[p];
            let (owing, serving) = (
                peer.bye_owed || !peer.owed.is_empty(),
                peer.serving.is_some(),
            );
            if owing {
                self.answer_owed(EndpointId(p as u32));
            }
            if serving {
                self.serve(EndpointId(p as u32));
            }
        }
        if self.live_ops == 0 {
            return;
        }
        let mut corrupt = None;
        for i in 0..OPS {
            let Some(mut op) = self.ops[i] else { continue };
            let chunk = self.piece(op.peer.0 as usize, record::PUT_HEAD);
            let Some(peer) = self.peers.get_mut(op.peer.0 as usize) else {
                continue;
            };
            match op.kind {
                Kind::Put { imm } if op.one => {
                    if op.done > 0 {
                        self.ops[i] = Some(op);
                        continue;
                    }
                    let Ok(bytes) = self.regs.slice(op.local) else {
                        continue;
                    };
                    let flags = if imm.is_some() { record::NOTIFY } else { 0 };
                    let ask = record::put_one(
                        op.id,
                        op.remote.key,
                        op.remote.offset,
                        op.local.len,
                        bytes.as_ptr() as u64,
                        imm.unwrap_or(0),
                        flags,
                    );
                    match peer.push(record::PUT_ONE, &[&ask]) {
                        Ok(()) => op.done = op.local.len + 1,
                        Err(PushError::Corrupt) => corrupt = Some(op.peer),
                        Err(_) => {}
                    }
                }
                Kind::Get { asked: false } if op.one => {
                    let Ok(bytes) = self.regs.slice_mut(op.local) else {
                        continue;
                    };
                    let ask = record::get_one(
                        op.id,
                        op.remote.key,
                        op.remote.offset,
                        op.local.len,
                        bytes.as_mut_ptr() as u64,
                    );
                    match peer.push(record::GET_ONE, &[&ask]) {
                        Ok(()) => op.kind = Kind::Get { asked: true },
                        Err(PushError::Corrupt) => corrupt = Some(op.peer),
                        Err(_) => {}
                    }
                }
                Kind::Get { asked: false } => {
                    let ask = record::get(op.id, op.remote.key, op.remote.offset, op.remote.len);
                    match peer.push(record::GET, &[&ask]) {
                        Ok(()) => op.kind = Kind::Get { asked: true },
                        Err(PushError::Corrupt) => corrupt = Some(op.peer),
                        Err(_) => {}
                    }
                }
                Kind::Put { imm } => {
                    // One put at a time is in pieces to a peer, so that a
                    // target reads each put's pieces together.
                    let mid = |o: &Option<Op>| {
                        o.is_some_and(|o| {
                            o.peer == op.peer
                                && o.id != op.id
                                && matches!(o.kind, Kind::Put { .. })
                                && o.done > 0
                                && o.done <= o.local.len
                        })
                    };
                    if op.done == 0 && self.ops.iter().any(mid) {
                        continue;
                    }
                    // Pieces until the last is pushed (an empty put is one
                    // empty last piece); then `done` is past the length
                    // while the answer is awaited.
                    while op.done <= op.local.len && !(op.done == op.local.len && op.local.len > 0)
                    {
                        let len = (op.local.len - op.done).min(chunk);
                        let last = op.done + len == op.local.len;
                        let Ok(bytes) = self.regs.slice(MemSlice {
                            handle: op.local.handle,
                            offset: op.local.offset + op.done,
                            len,
                        }) else {
                            break;
                        };
                        let flags = if last { record::LAST } else { 0 }
                            | if imm.is_some() { record::NOTIFY } else { 0 };
                        let head = record::put_head(
                            op.id,
                            op.remote.key,
                            op.remote.offset + op.done,
                            imm.unwrap_or(0),
                            flags,
                        );
                        match peer.push(record::PUT, &[&head, bytes]) {
                            Ok(()) => {}
                            Err(PushError::Corrupt) => {
                                corrupt = Some(op.peer);
                                break;
                            }
                            Err(_) => break,
                        }
                        op.done = if last {
                            op.local.len + 1
                        } else {
                            op.done + len
                        };
                    }
                }
                Kind::Get { asked: true } => {}
            }
            self.ops[i] = Some(op);
        }
        if let Some(p) = corrupt {
            self.lose(p, LostReason::ProtocolViolation);
        }
    }

    /// Sends what `endpoint` is owed (answers, a goodbye), while its ring
    /// takes it.
    fn answer_owed(&mut self, endpoint: EndpointId) {
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return;
        };
        let mut corrupt = false;
        while let Some((kind, body)) = peer.owed.front().copied() {
            match peer.push(kind, &[&body]) {
                Ok(()) => drop(peer.owed.pop_front()),
                Err(e) => {
                    corrupt = e == PushError::Corrupt;
                    break;
                }
            }
        }
        if peer.bye_owed && peer.owed.is_empty() && peer.push(record::BYE, &[]).is_ok() {
            peer.bye_owed = false;
        }
        if corrupt {
            self.lose(endpoint, LostReason::ProtocolViolation);
        }
    }

    /// Owes `endpoint` an answer: sent now if there is room, else kept.
    /// There is always room to keep it: a peer's puts and gets wait in its
    /// ring while its answers are full (see `read_one`); `false` only if
    /// that broke.
    fn owe(&mut self, endpoint: EndpointId, kind: u8, body: [u8; 9]) -> bool {
        self.answer_owed(endpoint);
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return true;
        };
        if peer.owed.is_empty() && peer.push(kind, &[&body]).is_ok() {
            return true;
        }
        peer.owed.push_back((kind, body)).is_ok()
    }

    /// Streams the get `endpoint` asked for, as its ring takes it.
    fn serve(&mut self, endpoint: EndpointId) {
        let chunk = self.piece(endpoint.0 as usize, record::GET_DATA_HEAD);
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return;
        };
        let Some(mut s) = peer.serving else { return };
        loop {
            let len = (s.src.len - s.sent).min(chunk);
            let last = s.sent + len == s.src.len;
            let piece = RemoteSlice {
                key: s.src.key,
                offset: s.src.offset + s.sent,
                len,
            };
            let Ok(bytes) = self.regs.remote_read(piece) else {
                // Deregistered while served: refused from here on.
                peer.serving = None;
                let code = record::code(RejectCode::BadHandle);
                if !self.owe(endpoint, record::GET_FAIL, record::answer(s.op, code)) {
                    self.lose(endpoint, LostReason::ProtocolViolation);
                }
                return;
            };
            let head = record::get_data_head(s.op, s.sent, last);
            match peer.push(record::GET_DATA, &[&head, bytes]) {
                Ok(()) => {}
                Err(PushError::Corrupt) => {
                    self.lose(endpoint, LostReason::ProtocolViolation);
                    return;
                }
                Err(_) => {
                    peer.serving = Some(s);
                    return;
                }
            }
            s.sent += len;
            if last {
                peer.serving = None;
                return;
            }
        }
    }
}

/// Pushes a message of `tag` whose bytes are `header`, then `payload`, to
/// `peer`: a ring that is full is `OutOfResource`, one whose consumer
/// broke the protocol loses the peer (the caller marks it).
fn push_message(
    peer: &mut Peer<'_>,
    tag: Tag,
    header: &[u8],
    payload: &[u8],
) -> Result<(), BtlError> {
    let tag = [tag.0];
    match peer.push(record::MESSAGE, &[&tag, header, payload]) {
        Ok(()) => Ok(()),
        Err(PushError::Full) => Err(BtlError::OutOfResource),
        Err(PushError::TooLarge | PushError::ReservedKind) => Err(BtlError::TooLarge {
            len: (header.len() + payload.len()) as u64,
            max: peer.tx.max_payload().saturating_sub(record::MESSAGE_HEAD) as u64,
            whose: Limit::Here,
        }),
        Err(PushError::Corrupt) => Err(BtlError::PeerLost(LostReason::ProtocolViolation)),
    }
}

/// The answer to a put or get in one copy whose region was found: done,
/// or the copy across could not be made.
fn one_copy(copied: bool) -> u8 {
    if copied { 0 } else { record::ONE_COPY_REFUSED }
}

/// The completion of `op` with `result`.
fn done(op: Op, result: Result<(), BtlError>) -> Completion {
    match op.kind {
        Kind::Put { .. } => Completion::Put {
            op: OpId(op.id),
            ctx: op.ctx,
            result,
        },
        Kind::Get { .. } => Completion::Get {
            op: OpId(op.id),
            ctx: op.ctx,
            result,
        },
    }
}

impl<
    'a,
    R: Region,
    M: AsRef<[u8]> + AsMut<[u8]>,
    const PEERS: usize,
    const REGS: usize,
    const OPS: usize,
    const EVENTS: usize,
> SharedMemory<'a, R, M, PEERS, REGS, OPS, EVENTS>
{
    /// Reads the message of `from`'s that waits at the head of its ring
    /// into the scratch fragment, then what follows it there: its length
    /// with the tag; `None` while no fragment can be had for the scratch;
    /// `Err` if there is no message to read (the peer was lost, or broke
    /// the protocol by rewriting it).
    fn take_message(&mut self, from: EndpointId) -> Result<Option<usize>, ()> {
        let pools = self.pools.view();
        if self.scratch.is_none() {
            let largest = pools.class_size(crate::pool::FragmentClass::Max);
            match pools.alloc(largest) {
                Ok(frag) => self.scratch = Some(frag),
                Err(_) => return Ok(None),
            }
        }
        let peer = self.peers.get_mut(from.0 as usize).ok_or(())?;
        peer.held = false;
        if peer.lost.is_some() {
            return Err(());
        }
        let taken = match self.scratch.as_mut().map(|f| pools.bytes_mut(f)) {
            Some(Ok(bytes)) => peer.rx.pop(bytes),
            _ => Err(PopError::Corrupt),
        };
        match taken {
            Ok(Some(r)) if r.kind == record::MESSAGE && r.len >= record::MESSAGE_HEAD => {
                // What follows it, so that a burst is polled without
                // another progress.
                for _ in 0..64 {
                    if !self.read_one(from) {
                        break;
                    }
                }
                Ok(Some(r.len))
            }
            _ => {
                self.lose(from, LostReason::ProtocolViolation);
                Err(())
            }
        }
    }

    /// Reads what every peer sent, while there is room for what it
    /// brings, up to 64 records each, so that one busy peer does not keep
    /// the others out; whether any was read.
    fn read_all(&mut self) -> bool {
        let mut any = false;
        for p in 0..self.peers.len() {
            let from = EndpointId(p as u32);
            for _ in 0..64 {
                if !self.read_one(from) {
                    break;
                }
                any = true;
            }
        }
        any
    }

    /// Takes one record of `from`'s; whether one was taken.
    fn read_one(&mut self, from: EndpointId) -> bool {
        let Some(peer) = self.peers.get_mut(from.0 as usize) else {
            return false;
        };
        if peer.lost.is_some() || peer.held {
            return false;
        }
        let record = match peer.rx.peek() {
            Ok(Some(r)) => r,
            Ok(None) => return false,
            Err(_) => {
                self.lose(from, LostReason::ProtocolViolation);
                return false;
            }
        };
        // A get waits while another of the peer's is served; every record
        // may end with an event, kept room for.
        let busy = record.kind == record::GET && peer.serving.is_some();
        // A put's last piece or a get is answered: it waits while the
        // answers this side owes the peer are all it may keep.
        let owing = matches!(
            record.kind,
            record::PUT | record::GET | record::PUT_ONE | record::GET_ONE
        ) && peer.owed.is_full();
        if busy || owing || !self.has_room(1) {
            return false;
        }
        let peer = &mut self.peers[from.0 as usize];
        let pools = self.pools.view();
        if pools.class_for(record.len).is_err() {
            // Larger than any fragment here: more than this side takes.
            self.lose(from, LostReason::ProtocolViolation);
            return false;
        }
        if record.kind == record::MESSAGE {
            if record.len < record::MESSAGE_HEAD {
                self.lose(from, LostReason::ProtocolViolation);
                return false;
            }
            // Read when polled, straight into the scratch fragment.
            peer.held = true;
            let _ = self.events.push_back(Pending::Message { from });
            return true;
        }
        let Ok(mut frag) = pools.alloc(record.len.max(1)) else {
            return false;
        };
        let taken = match pools.bytes_mut(&mut frag) {
            Ok(bytes) => peer.rx.pop(bytes),
            Err(_) => Err(PopError::Corrupt),
        };
        // What was taken is what was looked at: a peer that rewrote the
        // record between the two broke the protocol.
        if taken != Ok(Some(record)) {
            let _ = pools.free(frag);
            self.lose(from, LostReason::ProtocolViolation);
            return false;
        }
        let kept = self.handle(from, record.kind, &frag, record.len);
        let _ = self.pools.view().free(frag);
        if !kept {
            self.lose(from, LostReason::ProtocolViolation);
        }
        kept
    }

    /// Acts on a record other than a message; `false` if it breaks the
    /// protocol.
    fn handle(&mut self, from: EndpointId, kind: u8, frag: &Fragment, len: usize) -> bool {
        let pools = self.pools.view();
        let Some(bytes) = pools.bytes(frag).ok().and_then(|b| b.get(..len)) else {
            return false;
        };
        let Ok(record) = Record::parse(kind, bytes) else {
            return false;
        };
        match record {
            Record::Message { .. } => true,
            Record::Put {
                op,
                key,
                offset,
                imm,
                flags,
                data,
            } => {
                let Some(peer) = self.peers.get_mut(from.0 as usize) else {
                    return false;
                };
                let refused = peer.refusing.filter(|(o, _)| *o == op).map(|(_, c)| c);
                let landed = match refused {
                    Some(code) => Err(code),
                    None => {
                        let at = RemoteSlice {
                            key,
                            offset,
                            len: data.len() as u64,
                        };
                        self.regs
                            .remote_write(at)
                            .map(|dst| dst.copy_from_slice(data))
                            .map_err(RejectCode::from)
                    }
                };
                let peer = &mut self.peers[from.0 as usize];
                peer.refusing = landed.err().map(|code| (op, code));
                let start = match peer.put_start {
                    Some((o, start)) if o == op => start,
                    _ => offset,
                };
                peer.put_start = Some((op, start));
                if flags & record::LAST == 0 {
                    return true;
                }
                peer.refusing = None;
                peer.put_start = None;
                let code = landed.err().map_or(0, record::code);
                let Some(before) = offset.checked_sub(start) else {
                    // A piece before the put's first: no put does that.
                    return false;
                };
                if code == 0 && flags & record::NOTIFY != 0 {
                    // The notice names the whole put, from its first piece.
                    let whole = RemoteSlice {
                        key,
                        offset: start,
                        len: before.saturating_add(data.len() as u64),
                    };
                    self.arrived(from, whole, imm);
                }
                self.owe(from, record::PUT_DONE, record::answer(op, code))
            }
            Record::PutOne {
                op,
                key,
                offset,
                len,
                address,
                imm,
                flags,
            } => {
                let at = RemoteSlice { key, offset, len };
                let cross = self.peers.get(from.0 as usize).and_then(|p| p.cross);
                let code = match self.regs.remote_write(at) {
                    Ok(dst) => one_copy(cross.is_some_and(|c| (c.read)(c.process, address, dst))),
                    Err(e) => record::code(RejectCode::from(e)),
                };
                if code == 0 && flags & record::NOTIFY != 0 {
                    self.arrived(from, at, imm);
                }
                self.owe(from, record::PUT_DONE, record::answer(op, code))
            }
            Record::GetOne {
                op,
                key,
                offset,
                len,
                address,
            } => {
                let at = RemoteSlice { key, offset, len };
                let cross = self.peers.get(from.0 as usize).and_then(|p| p.cross);
                let code = match self.regs.remote_read(at) {
                    Ok(src) => one_copy(cross.is_some_and(|c| (c.write)(c.process, address, src))),
                    Err(e) => record::code(RejectCode::from(e)),
                };
                self.owe(from, record::GET_FAIL, record::answer(op, code))
            }
            Record::PutDone { op, code } => self.finish(from, op, true, code),
            Record::GetFail { op, code } => self.finish(from, op, false, code),
            Record::Get {
                op,
                key,
                offset,
                len,
            } => {
                let src = RemoteSlice { key, offset, len };
                match self.regs.remote_read(src) {
                    Ok(_) => {
                        self.peers[from.0 as usize].serving = Some(Serving { op, src, sent: 0 });
                        self.serve(from);
                        true
                    }
                    Err(e) => {
                        let code = record::code(RejectCode::from(e));
                        self.owe(from, record::GET_FAIL, record::answer(op, code))
                    }
                }
            }
            Record::GetData { op, at, last, data } => {
                let Some(i) = self.find(from, op, false) else {
                    return false;
                };
                let Some(mut o) = self.ops[i] else {
                    return false;
                };
                let fits = at == o.done
                    && at
                        .checked_add(data.len() as u64)
                        .is_some_and(|end| end <= o.local.len);
                if !fits {
                    return false;
                }
                let dst = MemSlice {
                    handle: o.local.handle,
                    offset: o.local.offset + at,
                    len: data.len() as u64,
                };
                let Ok(buf) = self.regs.slice_mut(dst) else {
                    return false;
                };
                buf.copy_from_slice(data);
                o.done += data.len() as u64;
                self.ops[i] = Some(o);
                if last {
                    if o.done != o.local.len {
                        return false;
                    }
                    self.ops[i] = None;
                    self.live_ops -= 1;
                    let _ = self.events.push_back(Pending::Done(done(o, Ok(()))));
                }
                true
            }
            Record::Bye => {
                self.lose(from, LostReason::Left);
                true
            }
        }
    }

    /// Tells of a put of `from`'s that landed in `at`, checked again as a
    /// whole: `Event::PutArrived` with `imm`.
    fn arrived(&mut self, from: EndpointId, at: RemoteSlice, imm: u64) {
        if let Ok(slice) = self.regs.check_remote(at, Access::REMOTE_WRITE) {
            let _ =
                self.events
                    .push_back(Pending::Done(Completion::PutArrived { from, slice, imm }));
        }
    }

    /// The slot of this side's operation `op` to `from`, a put (waiting
    /// for its answer) or a get.
    fn find(&self, from: EndpointId, op: u64, put: bool) -> Option<usize> {
        self.ops.iter().position(|o| {
            o.is_some_and(|o| {
                o.id == op
                    && o.peer == from
                    && match o.kind {
                        Kind::Put { .. } => put && o.done > o.local.len,
                        Kind::Get { asked } => !put && asked,
                    }
            })
        })
    }

    /// Ends operation `op` with `code` (0: done), or moves it through the
    /// rings when the peer could not copy it in one go.
    fn finish(&mut self, from: EndpointId, op: u64, put: bool, code: u8) -> bool {
        let Some(i) = self.find(from, op, put) else {
            return false;
        };
        let Some(mut o) = self.ops[i] else {
            return false;
        };
        if o.one && code == record::ONE_COPY_REFUSED {
            o.one = false;
            o.done = 0;
            if !put {
                o.kind = Kind::Get { asked: false };
            }
            self.ops[i] = Some(o);
            self.transfers.fell_back += 1;
            self.transfers.rings += 1;
            if let Some(peer) = self.peers.get_mut(from.0 as usize) {
                peer.copies_for_me = false;
            }
            return true;
        }
        if code == 0 && !put && !o.one {
            // Only a get in one copy ends without its data.
            return false;
        }
        self.ops[i] = None;
        self.live_ops -= 1;
        let result = match code {
            0 => Ok(()),
            c => Err(BtlError::Rejected(RejectCode::from(c))),
        };
        let _ = self.events.push_back(Pending::Done(done(o, result)));
        true
    }
}

impl<
    'a,
    R: Region,
    M: AsRef<[u8]> + AsMut<[u8]>,
    const PEERS: usize,
    const REGS: usize,
    const OPS: usize,
    const EVENTS: usize,
> Btl for SharedMemory<'a, R, M, PEERS, REGS, OPS, EVENTS>
{
    type Memory = M;

    fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    fn pools(&self) -> PoolsRef<'_> {
        self.pools.view()
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
            let Some(p) = self
                .peers
                .iter()
                .position(|p| p.proc == *proc && p.lost.is_none())
            else {
                continue;
            };
            if reachable.set(i) {
                *ep = Some(EndpointId(p as u32));
                self.peers[p].refs = self.peers[p].refs.saturating_add(1);
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        for &ep in endpoints {
            let peer = self
                .peers
                .get_mut(ep.0 as usize)
                .filter(|p| p.refs > 0)
                .ok_or(BtlError::Unreachable)?;
            peer.refs -= 1;
            if peer.refs == 0 {
                // Forgotten: what was under way to it fails, and nothing
                // more is read from it.
                self.lose(ep, LostReason::Removed);
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
        self.peer(endpoint)?;
        self.check_size(size)?;
        let desc = Descriptor::alloc(self.pools.view(), 0, 0, size, order, flags);
        let wanted = Wanted {
            fragment: Some(size),
            ..Wanted::default()
        };
        self.refused(endpoint, wanted, desc.map_err(BtlError::from))
    }

    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        desc.free(self.pools.view())
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
        self.peer(endpoint)?;
        self.check_size(data.len().saturating_add(reserve))?;
        let desc = Descriptor::prepare_src(self.pools.view(), 0, reserve, data, order, flags);
        let wanted = Wanted {
            fragment: Some(data.len() + reserve),
            ..Wanted::default()
        };
        self.refused(endpoint, wanted, desc.map_err(BtlError::from))
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.peer(endpoint)?;
        self.check_size((data.len as usize).saturating_add(reserve))?;
        let bytes = self.regs.slice(data)?;
        let wanted = Wanted {
            fragment: Some(bytes.len() + reserve),
            ..Wanted::default()
        };
        let desc = Descriptor::prepare_src(self.pools.view(), 0, reserve, bytes, order, flags);
        self.refused(endpoint, wanted, desc.map_err(BtlError::from))
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        let flags = desc.flags();
        let callback = flags.contains(DescFlags::ALWAYS_CALLBACK);
        if let Err(error) = self.peer(endpoint) {
            return Err(SendError { error, desc });
        }
        if callback && !self.has_room(1) {
            let wanted = Wanted {
                event: true,
                ..Wanted::default()
            };
            let _ = self.refused::<()>(endpoint, wanted, Err(BtlError::OutOfResource));
            return Err(SendError {
                error: BtlError::OutOfResource,
                desc,
            });
        }
        let pushed = match desc.fragment_bytes(self.pools.view()) {
            // The ring copies: the bytes are free again once it took them.
            Ok(bytes) => push_message(&mut self.peers[endpoint.0 as usize], tag, &[], bytes),
            Err(e) => Err(BtlError::from(e)),
        };
        if pushed == Err(BtlError::PeerLost(LostReason::ProtocolViolation)) {
            self.lose(endpoint, LostReason::ProtocolViolation);
        }
        let wanted = Wanted {
            record: Some(desc.len() + record::MESSAGE_HEAD),
            ..Wanted::default()
        };
        if let Err(error) = self.refused(endpoint, wanted, pushed) {
            return Err(SendError { error, desc });
        }
        let owned = flags.contains(DescFlags::BTL_OWNERSHIP);
        let back = if owned {
            let _ = desc.free(self.pools.view());
            None
        } else {
            Some(desc)
        };
        if callback {
            // The descriptor comes back with its event (room was checked
            // above), as a queued send's does.
            let _ = self.events.push_back(Pending::Done(Completion::Send {
                endpoint,
                tag,
                desc: back,
                result: Ok(()),
            }));
            return Ok(SendStatus::Queued);
        }
        Ok(SendStatus::Completed(back))
    }

    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        _order: Order,
        _flags: DescFlags,
    ) -> Result<(), BtlError> {
        let len = header.len() + payload.len();
        Limit::Here.admits(len, self.attributes.eager_limit)?;
        let peer = self.peer(endpoint)?;
        let pushed = push_message(peer, tag, header, payload);
        if pushed == Err(BtlError::PeerLost(LostReason::ProtocolViolation)) {
            self.lose(endpoint, LostReason::ProtocolViolation);
        }
        pushed
    }

    fn register_mem(&mut self, region: M, access: Access) -> Result<MemHandle, RegisterError<M>> {
        if self.finalized {
            return Err(RegisterError {
                error: BtlError::Finalized,
                region,
            });
        }
        Ok(self.regs.register(region, access)?)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<M, BtlError> {
        // A peer's get of it is refused from here on (see `serve`).
        if self.region_in_use(handle) {
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
        self.start(endpoint, Kind::Put { imm: None }, local, remote, ctx)
    }

    fn put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.start(endpoint, Kind::Put { imm: Some(imm) }, local, remote, ctx)
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.start(endpoint, Kind::Get { asked: false }, local, remote, ctx)
    }

    fn progress(&mut self) -> usize {
        if self.finalized {
            // Only the goodbyes still go out.
            for p in 0..self.peers.len() {
                self.answer_owed(EndpointId(p as u32));
            }
            return self.events.len();
        }
        self.move_ops();
        if self.read_all() {
            self.move_ops();
        }
        self.events.len() + usize::from(self.room_ready())
    }

    fn poll_event(&mut self) -> Option<Event<'_>> {
        loop {
            let Some(pending) = self.events.pop_front() else {
                // The message handed out last is done with.
                if let Some(frag) = self.scratch.take() {
                    let _ = self.pools.view().free(frag);
                }
                // Nothing else: a peer refused for room whose refusal would
                // now be taken may try again.
                return self.poll_room();
            };
            let from = match pending {
                Pending::Done(c) => return Some(c.into()),
                Pending::Message { from } => from,
            };
            match self.take_message(from) {
                Ok(Some(len)) => {
                    let bytes = self
                        .scratch
                        .as_ref()
                        .and_then(|f| self.pools.view().bytes(f).ok())
                        .and_then(|b| b.get(..len))?;
                    return Some(Event::Received(Incoming {
                        from,
                        tag: Tag(bytes[0]),
                        data: &bytes[record::MESSAGE_HEAD..],
                    }));
                }
                Ok(None) => {
                    // No fragment to read it into yet: it waits.
                    let _ = self.events.push_front(Pending::Message { from });
                    return None;
                }
                // The peer was lost meanwhile, or rewrote its message.
                Err(()) => continue,
            }
        }
    }

    fn finalize(&mut self) -> crate::btl::Undelivered {
        if self.finalized {
            return crate::btl::Undelivered::default();
        }
        let outstanding = self.ops.iter().flatten().count();
        self.live_ops = 0;
        for slot in &mut self.ops {
            if let Some(op) = slot.take() {
                let _ = self
                    .events
                    .push_back(Pending::Done(done(op, Err(BtlError::Finalized))));
            }
        }
        for peer in &mut self.peers {
            peer.wanted = None;
            // Behind the answers still owed; `progress` sends it when the
            // ring has room.
            peer.bye_owed = peer.lost.is_none();
        }
        self.finalized = true;
        for p in 0..self.peers.len() {
            self.answer_owed(EndpointId(p as u32));
        }
        crate::btl::Undelivered { outstanding }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
