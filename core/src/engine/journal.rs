//! The engine's journal: every call that changes an engine, with what it
//! took in (bytes from a link, a nonce, the time, the upper layer's
//! arguments and payloads) and a digest of what it gave back. The engine
//! is sans-I/O and reads no clock and no randomness of its own, so a fresh
//! engine fed the same calls in the same order does the same thing: a
//! journal replays one real process exactly, and a replay that gives
//! another digest shows where it went another way.
//!
//! The engine writes to the journal its [`Storage`](super::Storage) names
//! ([`Storage::Journal`](super::Storage::Journal)); `()` keeps nothing and
//! costs nothing, so a board's engine carries no recorder. What a host
//! keeps, and how much, is the host's: btl-std keeps a bounded record in
//! memory and dumps it when a peer is lost.
//!
//! # Encoding
//!
//! An entry is one byte naming the call, its arguments in a fixed order
//! (integers little-endian, byte strings and lists after a `u32` length),
//! and the 8-byte digest of its result: the same call with the same
//! arguments is the same bytes. [`Entry::encode`] and [`Entry::decode`] are
//! each other's inverse, and a decoder takes untrusted bytes: a short or
//! unknown entry is an error, never a panic.

use core::fmt;

use crate::btl::{Access, Event, MemHandle, Tag};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName};
use crate::time::Instant;
use crate::wire::NONCE_LEN;

use super::{ConnectFailure, ConnectRequest, LinkId, Source};

/// Where an engine writes its journal: each call as it begins, then the
/// digest of its result as it returns (no recorded call makes another).
pub trait Journal {
    /// Whether entries are kept: when not, the engine does not describe
    /// its calls at all.
    fn is_on(&self) -> bool;

    /// Keeps `call`, which begins.
    fn call(&mut self, call: &Call<'_>);

    /// Keeps the digest of the result of the call kept last.
    fn out(&mut self, digest: u64);
}

impl Journal for () {
    #[inline(always)]
    fn is_on(&self) -> bool {
        false
    }

    fn call(&mut self, _: &Call<'_>) {}

    fn out(&mut self, _: u64) {}
}

/// Records a call in `$engine`'s journal, when it keeps one: first the
/// engine's clock, if calls since the last one recorded moved it (a
/// driver's turn sets it without a call of its own), then the call.
macro_rules! journal_call {
    ($engine:ident, $call:expr) => {
        if $crate::engine::journal::Journal::is_on(&$engine.journal) {
            $crate::engine::journal::clock(
                &mut $engine.journal,
                &mut $engine.journal_clock,
                $engine.shared.now,
            );
            let call = $call;
            $crate::engine::journal::Journal::call(&mut $engine.journal, &call);
        }
    };
}

/// Records the digest of the result of the call recorded last.
macro_rules! journal_out {
    ($engine:ident, $digest:expr) => {
        if $crate::engine::journal::Journal::is_on(&$engine.journal) {
            let digest = $digest;
            $crate::engine::journal::Journal::out(&mut $engine.journal, digest);
        }
    };
}

pub(crate) use {journal_call, journal_out};

/// Records the clock `now` in `journal` if it moved since `recorded`.
pub(crate) fn clock(journal: &mut impl Journal, recorded: &mut Instant, now: Instant) {
    if *recorded != now {
        *recorded = now;
        journal.call(&Call::Clock(now));
        journal.out(0);
    }
}

/// A descriptor as the journal names it: its fragment's class and index,
/// which the same allocations give a fresh engine too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DescId {
    /// The fragment's size class.
    pub class: u8,
    /// Its index in the class.
    pub index: u32,
}

impl DescId {
    /// The name of `desc`.
    pub fn of(desc: &Descriptor) -> DescId {
        let frag = desc.fragment();
        DescId {
            class: frag.class() as u8,
            index: frag.index() as u32,
        }
    }
}

/// One call to an engine: what it took in. Its result is recorded beside
/// it as a digest ([`Entry::out`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call<'a> {
    /// A driver's turn began at `now` ([`Engine::serve`](super::Engine::serve)).
    Clock(Instant),
    /// `poll_connect`.
    PollConnect,
    /// `handle_connected`.
    Connected {
        /// The request it answers.
        req: ConnectRequest,
        /// The handshake's nonce.
        nonce: [u8; NONCE_LEN],
        /// The time.
        now: Instant,
    },
    /// `handle_accepted`.
    Accepted {
        /// Where it came from.
        source: Source,
        /// The handshake's nonce.
        nonce: [u8; NONCE_LEN],
        /// The time.
        now: Instant,
    },
    /// `handle_connect_failed`.
    ConnectFailed {
        /// The request it answers.
        req: ConnectRequest,
        /// Why.
        why: ConnectFailure,
        /// The time.
        now: Instant,
    },
    /// `handle_closed`.
    Closed {
        /// The link.
        link: LinkId,
        /// The time.
        now: Instant,
    },
    /// `handle_refused`.
    Refused {
        /// The link.
        link: LinkId,
        /// The time.
        now: Instant,
    },
    /// `poll_close`.
    PollClose,
    /// `poll_transmit`: its digest is of the bytes it handed out.
    Transmit(LinkId),
    /// `handle_written`.
    Written {
        /// The link.
        link: LinkId,
        /// Bytes written.
        n: usize,
    },
    /// `handle_timeout`.
    Timeout(Instant),
    /// `poll_ready_link`.
    PollReadyLink,
    /// `handle_stream`.
    Stream {
        /// The link.
        link: LinkId,
        /// The bytes read.
        data: &'a [u8],
        /// The time.
        now: Instant,
    },
    /// `handle_payload_read`: the bytes the driver read into
    /// `payload_buffer`.
    PayloadRead {
        /// The link.
        link: LinkId,
        /// The bytes read.
        data: &'a [u8],
        /// The time.
        now: Instant,
    },
    /// `handle_datagram`.
    Datagram {
        /// The link.
        link: LinkId,
        /// The datagram.
        data: &'a [u8],
        /// The time.
        now: Instant,
    },
    /// `handle_stranger`: its digest is of the answer.
    Stranger {
        /// Its source as the driver names it.
        address: &'a [u8],
        /// The datagram.
        data: &'a [u8],
        /// The time.
        now: Instant,
    },
    /// `acknowledge_now`.
    AcknowledgeNow,
    /// `connect`.
    Connect(EndpointId),
    /// `add_procs`: its digest is of the endpoints and reachability.
    AddProcs(ProcList<'a>),
    /// `del_procs`.
    DelProcs(EndpointList<'a>),
    /// `alloc`: its digest names the descriptor.
    Alloc {
        /// The peer.
        endpoint: EndpointId,
        /// Its order.
        order: Order,
        /// Payload bytes.
        size: usize,
        /// Its flags.
        flags: DescFlags,
    },
    /// `free`.
    Free(DescId),
    /// `prepare_src` (copied).
    PrepareSrc {
        /// The peer.
        endpoint: EndpointId,
        /// The bytes copied in.
        data: &'a [u8],
        /// Header bytes reserved before them.
        reserve: usize,
        /// Its order.
        order: Order,
        /// Its flags.
        flags: DescFlags,
    },
    /// `send`, with the descriptor's bytes as they were then.
    Send {
        /// The peer.
        endpoint: EndpointId,
        /// The descriptor.
        desc: DescId,
        /// Its bytes (header reserve and payload).
        bytes: &'a [u8],
        /// The tag.
        tag: Tag,
    },
    /// `sendi`.
    Sendi {
        /// The peer.
        endpoint: EndpointId,
        /// The header bytes.
        header: &'a [u8],
        /// The payload bytes.
        payload: &'a [u8],
        /// The tag.
        tag: Tag,
        /// Its order.
        order: Order,
        /// Its flags.
        flags: DescFlags,
    },
    /// `progress`.
    Progress,
    /// `poll_event`: its digest is of the event.
    PollEvent,
    /// `finalize`.
    Finalize,
    /// `register_mem`, with the memory's bytes then.
    RegisterMem {
        /// The bytes.
        data: &'a [u8],
        /// The access granted.
        access: Access,
    },
    /// `deregister_mem`.
    DeregisterMem(MemHandle),
    /// A call this version records by name only, which a replay cannot
    /// repeat: what moves registered memory (puts, gets, in-place sends,
    /// writes through `region_mut`, a device's transfers).
    Unreplayable(&'a str),
}

/// Process names as a call took them (encoded, or borrowed from the
/// caller).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ProcList<'a> {
    /// The caller's.
    Names(&'a [ProcName]),
    /// As a journal holds them: 12 bytes each.
    Encoded(&'a [u8]),
}

impl ProcList<'_> {
    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = ProcName> + '_ {
        let (names, bytes) = match self {
            ProcList::Names(n) => (*n, &[][..]),
            ProcList::Encoded(b) => (&[][..], *b),
        };
        names.iter().copied().chain(bytes.chunks_exact(12).map(|c| {
            let mut job = [0; 8];
            job.copy_from_slice(&c[..8]);
            let mut rank = [0; 4];
            rank.copy_from_slice(&c[8..]);
            ProcName::new(u64::from_le_bytes(job), u32::from_le_bytes(rank))
        }))
    }

    fn len(&self) -> usize {
        match self {
            ProcList::Names(n) => n.len(),
            ProcList::Encoded(b) => b.len() / 12,
        }
    }
}

impl fmt::Debug for ProcList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Endpoints as a call took them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EndpointList<'a> {
    /// The caller's.
    Ids(&'a [EndpointId]),
    /// As a journal holds them: 4 bytes each.
    Encoded(&'a [u8]),
}

impl EndpointList<'_> {
    /// The endpoints, in order.
    pub fn iter(&self) -> impl Iterator<Item = EndpointId> + '_ {
        let (ids, bytes) = match self {
            EndpointList::Ids(n) => (*n, &[][..]),
            EndpointList::Encoded(b) => (&[][..], *b),
        };
        ids.iter().copied().chain(bytes.chunks_exact(4).map(|c| {
            let mut id = [0; 4];
            id.copy_from_slice(c);
            EndpointId(u32::from_le_bytes(id))
        }))
    }

    fn len(&self) -> usize {
        match self {
            EndpointList::Ids(n) => n.len(),
            EndpointList::Encoded(b) => b.len() / 4,
        }
    }
}

impl fmt::Debug for EndpointList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One call and the digest of its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The call.
    pub call: Call<'a>,
    /// The digest of its result ([`Digest`]).
    pub out: u64,
}

/// Why a journal's bytes could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalError {
    /// It ends inside an entry.
    Truncated,
    /// An entry names no call this version knows.
    UnknownCall(u8),
    /// A field holds a value no call takes.
    BadField(&'static str),
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Truncated => f.write_str("the journal ends inside an entry"),
            JournalError::UnknownCall(n) => write!(f, "entry of unknown call {n}"),
            JournalError::BadField(what) => write!(f, "entry with a bad {what}"),
        }
    }
}

impl core::error::Error for JournalError {}

/// A 64-bit FNV-1a digest, fed bytes or formatted text: what a journal
/// keeps of a result.
#[derive(Debug, Clone, Copy)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    /// Adds `bytes`.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// Adds `value`'s debug form.
    pub fn debug(&mut self, value: &impl fmt::Debug) -> &mut Self {
        let _ = fmt::write(self, format_args!("{value:?};"));
        self
    }

    /// The digest so far.
    pub fn get(&self) -> u64 {
        self.0
    }

    /// The digest of `value`'s debug form alone.
    pub fn of(value: &impl fmt::Debug) -> u64 {
        Digest::default().debug(value).get()
    }

    /// The digest of a descriptor's name and fields (not of the pool it
    /// came from, which another engine numbers otherwise).
    pub fn of_desc(desc: &Descriptor) -> u64 {
        Digest::default().desc(desc).get()
    }

    pub(crate) fn desc(&mut self, desc: &Descriptor) -> &mut Self {
        self.debug(&(
            DescId::of(desc),
            desc.len(),
            desc.headroom(),
            desc.reserve(),
            desc.order(),
            desc.flags(),
            desc.tag(),
        ))
    }

    /// The digest of an event handed to the upper layer, `bytes` being a
    /// received message's.
    pub fn of_event(event: &Event<'_>) -> u64 {
        let mut d = Digest::default();
        match event {
            Event::Received(m) => {
                d.debug(&("received", m.from, m.tag)).bytes(m.data);
            }
            Event::SendComplete {
                endpoint,
                tag,
                desc,
                result,
            } => {
                d.debug(&("sent", endpoint, tag, result));
                if let Some(desc) = desc {
                    d.desc(desc);
                }
            }
            other => {
                d.debug(other);
            }
        }
        d.get()
    }
}

impl fmt::Write for Digest {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

/// Call numbers on the wire of a journal.
mod code {
    pub const CLOCK: u8 = 1;
    pub const POLL_CONNECT: u8 = 2;
    pub const CONNECTED: u8 = 3;
    pub const ACCEPTED: u8 = 4;
    pub const CONNECT_FAILED: u8 = 5;
    pub const CLOSED: u8 = 6;
    pub const REFUSED: u8 = 7;
    pub const POLL_CLOSE: u8 = 8;
    pub const TRANSMIT: u8 = 9;
    pub const WRITTEN: u8 = 10;
    pub const TIMEOUT: u8 = 11;
    pub const POLL_READY_LINK: u8 = 12;
    pub const STREAM: u8 = 13;
    pub const PAYLOAD_READ: u8 = 14;
    pub const DATAGRAM: u8 = 15;
    pub const STRANGER: u8 = 16;
    pub const ACKNOWLEDGE_NOW: u8 = 17;
    pub const CONNECT: u8 = 18;
    pub const ADD_PROCS: u8 = 19;
    pub const DEL_PROCS: u8 = 20;
    pub const ALLOC: u8 = 21;
    pub const FREE: u8 = 22;
    pub const PREPARE_SRC: u8 = 23;
    pub const SEND: u8 = 24;
    pub const SENDI: u8 = 25;
    pub const PROGRESS: u8 = 26;
    pub const POLL_EVENT: u8 = 27;
    pub const FINALIZE: u8 = 28;
    pub const REGISTER_MEM: u8 = 29;
    pub const DEREGISTER_MEM: u8 = 30;
    pub const UNREPLAYABLE: u8 = 31;
}

/// Writes fields to a sink.
struct Writer<'s>(&'s mut dyn FnMut(&[u8]));

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        (self.0)(&[v]);
    }
    fn u16(&mut self, v: u16) {
        (self.0)(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        (self.0)(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        (self.0)(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(n as u32);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        (self.0)(b);
    }
    fn time(&mut self, t: Instant) {
        self.u64(t.as_nanos());
    }
    fn link(&mut self, l: LinkId) {
        self.u16(l.0.index);
        self.u16(l.0.generation);
    }
    fn proc(&mut self, p: ProcName) {
        self.u64(p.job);
        self.u32(p.rank);
    }
    fn req(&mut self, r: &ConnectRequest) {
        self.u32(r.endpoint.0);
        self.proc(r.proc);
        self.proc(r.listed_as);
        self.u8(r.link_index);
    }
    fn desc(&mut self, d: DescId) {
        self.u8(d.class);
        self.u32(d.index);
    }
}

/// Reads fields from a journal's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], JournalError> {
        let end = self.at.checked_add(n).ok_or(JournalError::Truncated)?;
        let b = self
            .bytes
            .get(self.at..end)
            .ok_or(JournalError::Truncated)?;
        self.at = end;
        Ok(b)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], JournalError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, JournalError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, JournalError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, JournalError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, JournalError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn usize(&mut self) -> Result<usize, JournalError> {
        usize::try_from(self.u64()?).map_err(|_| JournalError::BadField("length"))
    }
    fn bytes(&mut self) -> Result<&'a [u8], JournalError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn time(&mut self) -> Result<Instant, JournalError> {
        Ok(Instant::from_nanos(self.u64()?))
    }
    fn link(&mut self) -> Result<LinkId, JournalError> {
        let index = self.u16()?;
        let generation = self.u16()?;
        Ok(LinkId(crate::table::Key { index, generation }))
    }
    fn proc(&mut self) -> Result<ProcName, JournalError> {
        Ok(ProcName::new(self.u64()?, self.u32()?))
    }
    fn endpoint(&mut self) -> Result<EndpointId, JournalError> {
        Ok(EndpointId(self.u32()?))
    }
    fn req(&mut self) -> Result<ConnectRequest, JournalError> {
        Ok(ConnectRequest {
            endpoint: self.endpoint()?,
            proc: self.proc()?,
            listed_as: self.proc()?,
            link_index: self.u8()?,
        })
    }
    fn desc(&mut self) -> Result<DescId, JournalError> {
        Ok(DescId {
            class: self.u8()?,
            index: self.u32()?,
        })
    }
    fn order(&mut self) -> Result<Order, JournalError> {
        Ok(Order(self.u8()?))
    }
    fn flags(&mut self) -> Result<DescFlags, JournalError> {
        DescFlags::from_bits(self.u8()?).ok_or(JournalError::BadField("descriptor flags"))
    }
}

impl Entry<'_> {
    /// Writes the entry's bytes to `sink`, in pieces.
    pub fn encode(&self, sink: &mut dyn FnMut(&[u8])) {
        self.call.encode(sink);
        sink(&self.out.to_le_bytes());
    }
}

impl Call<'_> {
    /// Writes the call's bytes to `sink`, in pieces: an entry without its
    /// result's digest, which follows it.
    pub fn encode(&self, sink: &mut dyn FnMut(&[u8])) {
        let mut w = Writer(sink);
        match self {
            Call::Clock(now) => {
                w.u8(code::CLOCK);
                w.time(*now);
            }
            Call::PollConnect => w.u8(code::POLL_CONNECT),
            Call::Connected { req, nonce, now } => {
                w.u8(code::CONNECTED);
                w.req(req);
                (w.0)(nonce);
                w.time(*now);
            }
            Call::Accepted { source, nonce, now } => {
                w.u8(code::ACCEPTED);
                w.u64(source.0);
                (w.0)(nonce);
                w.time(*now);
            }
            Call::ConnectFailed { req, why, now } => {
                w.u8(code::CONNECT_FAILED);
                w.req(req);
                w.u8(match why {
                    ConnectFailure::Refused => 0,
                    ConnectFailure::Unreachable => 1,
                });
                w.time(*now);
            }
            Call::Closed { link, now } => {
                w.u8(code::CLOSED);
                w.link(*link);
                w.time(*now);
            }
            Call::Refused { link, now } => {
                w.u8(code::REFUSED);
                w.link(*link);
                w.time(*now);
            }
            Call::PollClose => w.u8(code::POLL_CLOSE),
            Call::Transmit(link) => {
                w.u8(code::TRANSMIT);
                w.link(*link);
            }
            Call::Written { link, n } => {
                w.u8(code::WRITTEN);
                w.link(*link);
                w.u64(*n as u64);
            }
            Call::Timeout(now) => {
                w.u8(code::TIMEOUT);
                w.time(*now);
            }
            Call::PollReadyLink => w.u8(code::POLL_READY_LINK),
            Call::Stream { link, data, now } => {
                w.u8(code::STREAM);
                w.link(*link);
                w.bytes(data);
                w.time(*now);
            }
            Call::PayloadRead { link, data, now } => {
                w.u8(code::PAYLOAD_READ);
                w.link(*link);
                w.bytes(data);
                w.time(*now);
            }
            Call::Datagram { link, data, now } => {
                w.u8(code::DATAGRAM);
                w.link(*link);
                w.bytes(data);
                w.time(*now);
            }
            Call::Stranger { address, data, now } => {
                w.u8(code::STRANGER);
                w.bytes(address);
                w.bytes(data);
                w.time(*now);
            }
            Call::AcknowledgeNow => w.u8(code::ACKNOWLEDGE_NOW),
            Call::Connect(ep) => {
                w.u8(code::CONNECT);
                w.u32(ep.0);
            }
            Call::AddProcs(procs) => {
                w.u8(code::ADD_PROCS);
                w.len(procs.len() * 12);
                for p in procs.iter() {
                    w.proc(p);
                }
            }
            Call::DelProcs(eps) => {
                w.u8(code::DEL_PROCS);
                w.len(eps.len() * 4);
                for e in eps.iter() {
                    w.u32(e.0);
                }
            }
            Call::Alloc {
                endpoint,
                order,
                size,
                flags,
            } => {
                w.u8(code::ALLOC);
                w.u32(endpoint.0);
                w.u8(order.0);
                w.u64(*size as u64);
                w.u8(flags.bits());
            }
            Call::Free(desc) => {
                w.u8(code::FREE);
                w.desc(*desc);
            }
            Call::PrepareSrc {
                endpoint,
                data,
                reserve,
                order,
                flags,
            } => {
                w.u8(code::PREPARE_SRC);
                w.u32(endpoint.0);
                w.bytes(data);
                w.u64(*reserve as u64);
                w.u8(order.0);
                w.u8(flags.bits());
            }
            Call::Send {
                endpoint,
                desc,
                bytes,
                tag,
            } => {
                w.u8(code::SEND);
                w.u32(endpoint.0);
                w.desc(*desc);
                w.bytes(bytes);
                w.u8(tag.0);
            }
            Call::Sendi {
                endpoint,
                header,
                payload,
                tag,
                order,
                flags,
            } => {
                w.u8(code::SENDI);
                w.u32(endpoint.0);
                w.bytes(header);
                w.bytes(payload);
                w.u8(tag.0);
                w.u8(order.0);
                w.u8(flags.bits());
            }
            Call::Progress => w.u8(code::PROGRESS),
            Call::PollEvent => w.u8(code::POLL_EVENT),
            Call::Finalize => w.u8(code::FINALIZE),
            Call::RegisterMem { data, access } => {
                w.u8(code::REGISTER_MEM);
                w.bytes(data);
                w.u8(access.bits());
            }
            Call::DeregisterMem(handle) => {
                w.u8(code::DEREGISTER_MEM);
                w.u64(handle.remote_key().0);
            }
            Call::Unreplayable(what) => {
                w.u8(code::UNREPLAYABLE);
                w.bytes(what.as_bytes());
            }
        }
    }
}

impl<'a> Entry<'a> {
    /// Reads the entry at the start of `bytes`: it and its length.
    pub fn decode(bytes: &'a [u8]) -> Result<(Entry<'a>, usize), JournalError> {
        let mut r = Reader { bytes, at: 0 };
        let call = match r.u8()? {
            code::CLOCK => Call::Clock(r.time()?),
            code::POLL_CONNECT => Call::PollConnect,
            code::CONNECTED => Call::Connected {
                req: r.req()?,
                nonce: r.array()?,
                now: r.time()?,
            },
            code::ACCEPTED => Call::Accepted {
                source: Source(r.u64()?),
                nonce: r.array()?,
                now: r.time()?,
            },
            code::CONNECT_FAILED => Call::ConnectFailed {
                req: r.req()?,
                why: match r.u8()? {
                    0 => ConnectFailure::Refused,
                    1 => ConnectFailure::Unreachable,
                    _ => return Err(JournalError::BadField("connect failure")),
                },
                now: r.time()?,
            },
            code::CLOSED => Call::Closed {
                link: r.link()?,
                now: r.time()?,
            },
            code::REFUSED => Call::Refused {
                link: r.link()?,
                now: r.time()?,
            },
            code::POLL_CLOSE => Call::PollClose,
            code::TRANSMIT => Call::Transmit(r.link()?),
            code::WRITTEN => Call::Written {
                link: r.link()?,
                n: r.usize()?,
            },
            code::TIMEOUT => Call::Timeout(r.time()?),
            code::POLL_READY_LINK => Call::PollReadyLink,
            code::STREAM => Call::Stream {
                link: r.link()?,
                data: r.bytes()?,
                now: r.time()?,
            },
            code::PAYLOAD_READ => Call::PayloadRead {
                link: r.link()?,
                data: r.bytes()?,
                now: r.time()?,
            },
            code::DATAGRAM => Call::Datagram {
                link: r.link()?,
                data: r.bytes()?,
                now: r.time()?,
            },
            code::STRANGER => Call::Stranger {
                address: r.bytes()?,
                data: r.bytes()?,
                now: r.time()?,
            },
            code::ACKNOWLEDGE_NOW => Call::AcknowledgeNow,
            code::CONNECT => Call::Connect(r.endpoint()?),
            code::ADD_PROCS => {
                let b = r.bytes()?;
                if b.len() % 12 != 0 {
                    return Err(JournalError::BadField("process list"));
                }
                Call::AddProcs(ProcList::Encoded(b))
            }
            code::DEL_PROCS => {
                let b = r.bytes()?;
                if b.len() % 4 != 0 {
                    return Err(JournalError::BadField("endpoint list"));
                }
                Call::DelProcs(EndpointList::Encoded(b))
            }
            code::ALLOC => Call::Alloc {
                endpoint: r.endpoint()?,
                order: r.order()?,
                size: r.usize()?,
                flags: r.flags()?,
            },
            code::FREE => Call::Free(r.desc()?),
            code::PREPARE_SRC => Call::PrepareSrc {
                endpoint: r.endpoint()?,
                data: r.bytes()?,
                reserve: r.usize()?,
                order: r.order()?,
                flags: r.flags()?,
            },
            code::SEND => Call::Send {
                endpoint: r.endpoint()?,
                desc: r.desc()?,
                bytes: r.bytes()?,
                tag: Tag(r.u8()?),
            },
            code::SENDI => Call::Sendi {
                endpoint: r.endpoint()?,
                header: r.bytes()?,
                payload: r.bytes()?,
                tag: Tag(r.u8()?),
                order: r.order()?,
                flags: r.flags()?,
            },
            code::PROGRESS => Call::Progress,
            code::POLL_EVENT => Call::PollEvent,
            code::FINALIZE => Call::Finalize,
            code::REGISTER_MEM => Call::RegisterMem {
                data: r.bytes()?,
                access: Access::from_bits(r.u8()?).ok_or(JournalError::BadField("access"))?,
            },
            code::DEREGISTER_MEM => Call::DeregisterMem(
                crate::btl::RemoteKey(r.u64()?)
                    .handle()
                    .ok_or(JournalError::BadField("memory handle"))?,
            ),
            code::UNREPLAYABLE => Call::Unreplayable(
                core::str::from_utf8(r.bytes()?).map_err(|_| JournalError::BadField("name"))?,
            ),
            other => return Err(JournalError::UnknownCall(other)),
        };
        let out = r.u64()?;
        Ok((Entry { call, out }, r.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn round_trip(entry: Entry<'_>) {
        let mut bytes = Vec::new();
        entry.encode(&mut |b| bytes.extend_from_slice(b));
        let (back, len) = Entry::decode(&bytes).expect("decodes");
        assert_eq!(len, bytes.len());
        let mut again = Vec::new();
        back.encode(&mut |b| again.extend_from_slice(b));
        assert_eq!(again, bytes, "{entry:?}");
        for cut in 0..bytes.len() {
            assert_eq!(
                Entry::decode(&bytes[..cut]).map(|_| ()),
                Err(JournalError::Truncated)
            );
        }
    }

    #[test]
    fn every_call_encodes_and_decodes_to_the_same_bytes() {
        let link = LinkId(crate::table::Key {
            index: 3,
            generation: 9,
        });
        let req = ConnectRequest {
            endpoint: EndpointId(7),
            proc: ProcName::new(1, 2),
            listed_as: ProcName::unnamed(0),
            link_index: 1,
        };
        let now = Instant::from_micros(42);
        let procs = [ProcName::new(5, 6), ProcName::new(7, 8)];
        let calls = [
            Call::Clock(now),
            Call::PollConnect,
            Call::Connected {
                req,
                nonce: [4; NONCE_LEN],
                now,
            },
            Call::Accepted {
                source: Source(99),
                nonce: [5; NONCE_LEN],
                now,
            },
            Call::ConnectFailed {
                req,
                why: ConnectFailure::Unreachable,
                now,
            },
            Call::Closed { link, now },
            Call::Refused { link, now },
            Call::PollClose,
            Call::Transmit(link),
            Call::Written { link, n: 77 },
            Call::Timeout(now),
            Call::PollReadyLink,
            Call::Stream {
                link,
                data: b"abc",
                now,
            },
            Call::PayloadRead {
                link,
                data: b"de",
                now,
            },
            Call::Datagram {
                link,
                data: b"f",
                now,
            },
            Call::Stranger {
                address: &[127, 0, 0, 1],
                data: b"gh",
                now,
            },
            Call::AcknowledgeNow,
            Call::Connect(EndpointId(3)),
            Call::AddProcs(ProcList::Names(&procs)),
            Call::DelProcs(EndpointList::Ids(&[EndpointId(1), EndpointId(2)])),
            Call::Alloc {
                endpoint: EndpointId(1),
                order: Order(2),
                size: 100,
                flags: DescFlags::BTL_OWNERSHIP,
            },
            Call::Free(DescId { class: 1, index: 5 }),
            Call::PrepareSrc {
                endpoint: EndpointId(1),
                data: b"xyz",
                reserve: 8,
                order: Order::ANY,
                flags: DescFlags::empty(),
            },
            Call::Send {
                endpoint: EndpointId(1),
                desc: DescId { class: 0, index: 1 },
                bytes: b"payload",
                tag: Tag(9),
            },
            Call::Sendi {
                endpoint: EndpointId(1),
                header: b"h",
                payload: b"p",
                tag: Tag(3),
                order: Order(0),
                flags: DescFlags::empty(),
            },
            Call::Progress,
            Call::PollEvent,
            Call::Finalize,
            Call::RegisterMem {
                data: b"memory",
                access: Access::REMOTE_READ,
            },
            Call::Unreplayable("put"),
            Call::DeregisterMem(
                crate::btl::RemoteKey(12 << 16 | 3)
                    .handle()
                    .expect("a handle"),
            ),
        ];
        for call in calls {
            round_trip(Entry { call, out: 0x1234 });
        }
        let mut listed = Vec::new();
        Entry {
            call: Call::AddProcs(ProcList::Names(&procs)),
            out: 0,
        }
        .encode(&mut |b| listed.extend_from_slice(b));
        let (back, _) = Entry::decode(&listed).expect("decodes");
        let Call::AddProcs(back) = back.call else {
            panic!("add_procs")
        };
        assert!(back.iter().eq(procs.iter().copied()));
    }

    #[test]
    fn unknown_calls_and_bad_fields_are_errors() {
        assert_eq!(
            Entry::decode(&[0]).map(|_| ()),
            Err(JournalError::UnknownCall(0))
        );
        assert_eq!(
            Entry::decode(&[250]).map(|_| ()),
            Err(JournalError::UnknownCall(250))
        );
        let mut bad = std::vec![code::CONNECT_FAILED];
        bad.extend_from_slice(&[0; 4 + 12 + 12 + 1]);
        bad.push(7);
        bad.extend_from_slice(&[0; 16]);
        assert_eq!(
            Entry::decode(&bad).map(|_| ()),
            Err(JournalError::BadField("connect failure"))
        );
    }

    #[test]
    fn a_digest_tells_bytes_apart() {
        let a = Digest::default().bytes(b"ab").get();
        let b = Digest::default().bytes(b"ba").get();
        assert_ne!(a, b);
        assert_eq!(a, Digest::default().bytes(b"a").bytes(b"b").get());
    }
}
