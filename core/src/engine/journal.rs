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
//! arguments is the same bytes. [`Entry::encode_into`] and
//! [`Entry::decode`] are each other's inverse, and a decoder takes
//! untrusted bytes: a short or unknown entry is an error, never a panic.
//! An encoder writes in place, into memory the journal already holds: a
//! recorded call costs its fields' stores, not a copy between buffers.

use core::fmt;

use crate::btl::{
    Access, Event, MemHandle, MemSlice, RemoteKey, RemoteSlice, SendError, SendStatus, Tag,
};
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
    /// `prepare_src_registered`, with the bytes of the slice then.
    PrepareSrcRegistered {
        /// The peer.
        endpoint: EndpointId,
        /// The registered bytes sent.
        slice: MemSlice,
        /// Their contents.
        bytes: &'a [u8],
        /// Header bytes reserved before them.
        reserve: usize,
        /// Its order.
        order: Order,
        /// Its flags.
        flags: DescFlags,
    },
    /// `put`, `put_notify` (with `imm`) or `get` (with no bytes), with the
    /// local slice's contents for a put.
    Rdma {
        /// Which call.
        kind: RdmaCall,
        /// The peer.
        endpoint: EndpointId,
        /// The local slice.
        local: MemSlice,
        /// The peer's.
        remote: RemoteSlice,
        /// The caller's value.
        ctx: u64,
        /// A notice's value.
        imm: u64,
        /// The local slice's contents, for a put.
        bytes: &'a [u8],
    },
    /// `get_third_party`.
    GetThirdParty {
        /// The peer that holds the data.
        source: EndpointId,
        /// Where, at the source.
        src: RemoteSlice,
        /// The process the data goes to.
        target: ProcName,
        /// Where, at the target.
        dst: RemoteSlice,
        /// The caller's value.
        ctx: u64,
    },
    /// `poll_completion`: its digest is of the completion.
    PollCompletion,
    /// A call this version records by name only, which a replay cannot
    /// repeat: a device's transfers into and out of registered memory.
    Unreplayable(&'a str),
}

/// Which of the calls that move registered memory an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaCall {
    /// `put`.
    Put,
    /// `put_notify`.
    PutNotify,
    /// `get`.
    Get,
}

/// A list a call took: the caller's, or as a journal holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Listed<'a, T> {
    /// The caller's.
    Given(&'a [T]),
    /// As a journal holds it: [`Fixed::LEN`] bytes each.
    Encoded(&'a [u8]),
}

/// Process names as `add_procs` took them.
pub type ProcList<'a> = Listed<'a, ProcName>;

/// Endpoints as `del_procs` took them.
pub type EndpointList<'a> = Listed<'a, EndpointId>;

/// What a journal lists, each in a fixed number of bytes.
pub trait Fixed: Copy + fmt::Debug {
    /// Bytes each takes.
    const LEN: usize;
    /// The bytes of one.
    fn to_bytes(self) -> [u8; 12];
    /// One from its [`LEN`](Self::LEN) bytes.
    fn from_bytes(bytes: &[u8]) -> Self;
}

impl Fixed for ProcName {
    const LEN: usize = 12;

    fn to_bytes(self) -> [u8; 12] {
        let mut b = [0; 12];
        b[..8].copy_from_slice(&self.job.to_le_bytes());
        b[8..].copy_from_slice(&self.rank.to_le_bytes());
        b
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        let mut job = [0; 8];
        job.copy_from_slice(&bytes[..8]);
        let mut rank = [0; 4];
        rank.copy_from_slice(&bytes[8..12]);
        ProcName::new(u64::from_le_bytes(job), u32::from_le_bytes(rank))
    }
}

impl Fixed for EndpointId {
    const LEN: usize = 4;

    fn to_bytes(self) -> [u8; 12] {
        let mut b = [0; 12];
        b[..4].copy_from_slice(&self.0.to_le_bytes());
        b
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        let mut id = [0; 4];
        id.copy_from_slice(&bytes[..4]);
        EndpointId(u32::from_le_bytes(id))
    }
}

impl<T: Fixed> Listed<'_, T> {
    /// The items, in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        let (given, bytes) = match self {
            Listed::Given(items) => (*items, &[][..]),
            Listed::Encoded(b) => (&[][..], *b),
        };
        given
            .iter()
            .copied()
            .chain(bytes.chunks_exact(T::LEN).map(T::from_bytes))
    }

    fn len(&self) -> usize {
        match self {
            Listed::Given(items) => items.len(),
            Listed::Encoded(b) => b.len() / T::LEN,
        }
    }
}

impl<T: Fixed> fmt::Debug for Listed<'_, T> {
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
    /// Adds `bytes`, eight at a time.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0; 8];
            w.copy_from_slice(word);
            self.word(u64::from_le_bytes(w));
        }
        for &b in words.remainder() {
            self.word(u64::from(b));
        }
        self
    }

    /// Adds one 64-bit value.
    pub fn word(&mut self, value: u64) -> &mut Self {
        self.0 ^= value;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3).rotate_left(23);
        self
    }

    /// Adds `value`'s debug form: for what is rare (errors), where the
    /// cost of formatting does not matter.
    pub fn debug(&mut self, value: &impl fmt::Debug) -> &mut Self {
        let _ = fmt::write(self, format_args!("{value:?};"));
        self
    }

    /// Adds `value`.
    pub fn add(&mut self, value: &(impl Digestible + ?Sized)) -> &mut Self {
        value.digest(self);
        self
    }

    /// The digest so far.
    pub fn get(&self) -> u64 {
        self.0
    }

    /// The digest of `value` alone.
    pub fn of(value: &(impl Digestible + ?Sized)) -> u64 {
        Digest::default().add(value).get()
    }

    /// The digest of a descriptor's name and fields (not of the pool it
    /// came from, which another engine numbers otherwise).
    pub fn of_desc(desc: &Descriptor) -> u64 {
        Digest::default().desc(desc).get()
    }

    /// A finished send, as an event or as a completion: the descriptor
    /// by its name.
    fn send_done(
        &mut self,
        endpoint: EndpointId,
        tag: Tag,
        desc: Option<&Descriptor>,
        result: &Result<(), crate::btl::BtlError>,
    ) -> &mut Self {
        self.word(2)
            .word(u64::from(endpoint.0))
            .word(u64::from(tag.0))
            .add(result);
        if let Some(desc) = desc {
            self.desc(desc);
        }
        self
    }

    pub(crate) fn desc(&mut self, desc: &Descriptor) -> &mut Self {
        let id = DescId::of(desc);
        self.word(u64::from(id.class) << 32 | u64::from(id.index))
            .word(desc.len() as u64)
            .word(desc.headroom() as u64)
            .word(desc.reserve() as u64)
            .word(u64::from(desc.order().0))
            .word(u64::from(desc.flags().bits()))
            .word(u64::from(desc.tag().0))
    }

    /// The digest of a send's result: queued, completed, or refused with
    /// the descriptor back.
    pub fn of_send(result: &Result<SendStatus, SendError>) -> u64 {
        let mut d = Digest::default();
        match result {
            Ok(SendStatus::Queued) => d.word(1),
            Ok(SendStatus::Completed(None)) => d.word(2),
            Ok(SendStatus::Completed(Some(desc))) => d.word(3).desc(desc),
            Err(e) => d.word(4).debug(&e.error).desc(&e.desc),
        };
        d.get()
    }

    /// The digest of an event handed to the upper layer, `bytes` being a
    /// received message's.
    pub fn of_event(event: &Event<'_>) -> u64 {
        let mut d = Digest::default();
        match event {
            Event::Received(m) => {
                d.word(1)
                    .word(u64::from(m.from.0))
                    .word(u64::from(m.tag.0))
                    .bytes(m.data);
            }
            Event::SendComplete {
                endpoint,
                tag,
                desc,
                result,
            } => {
                d.send_done(*endpoint, *tag, desc.as_ref(), result);
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

/// A call's result as a journal digests it: the common results by their
/// values, without formatting (the journal takes one per call), the rare
/// ones (errors) by their debug form.
pub trait Digestible {
    /// Adds the value to `d`.
    fn digest(&self, d: &mut Digest);
}

impl Digestible for () {
    fn digest(&self, d: &mut Digest) {
        d.word(0x5eed);
    }
}

impl Digestible for usize {
    fn digest(&self, d: &mut Digest) {
        d.word(*self as u64);
    }
}

impl Digestible for LinkId {
    fn digest(&self, d: &mut Digest) {
        d.word(u64::from(self.0.index) << 16 | u64::from(self.0.generation));
    }
}

impl Digestible for EndpointId {
    fn digest(&self, d: &mut Digest) {
        d.word(u64::from(self.0));
    }
}

impl Digestible for crate::btl::OpId {
    fn digest(&self, d: &mut Digest) {
        d.word(self.0);
    }
}

impl Digestible for MemHandle {
    fn digest(&self, d: &mut Digest) {
        d.word(self.remote_key().0);
    }
}

impl Digestible for ConnectRequest {
    fn digest(&self, d: &mut Digest) {
        d.word(u64::from(self.endpoint.0))
            .word(self.proc.job)
            .word(u64::from(self.proc.rank))
            .word(self.listed_as.job)
            .word(u64::from(self.listed_as.rank))
            .word(u64::from(self.link_index));
    }
}

impl<T: Digestible> Digestible for Option<T> {
    fn digest(&self, d: &mut Digest) {
        match self {
            None => _ = d.word(0),
            Some(v) => v.digest(d.word(1)),
        }
    }
}

impl<T: Digestible, E: fmt::Debug> Digestible for Result<T, E> {
    fn digest(&self, d: &mut Digest) {
        match self {
            Ok(v) => v.digest(d.word(2)),
            Err(e) => _ = d.word(3).debug(e),
        }
    }
}

impl<T: Digestible> Digestible for [T] {
    fn digest(&self, d: &mut Digest) {
        d.word(self.len() as u64);
        for v in self {
            v.digest(d);
        }
    }
}

impl<A: Digestible + ?Sized, B: Digestible + ?Sized> Digestible for (&A, &B) {
    fn digest(&self, d: &mut Digest) {
        self.0.digest(d);
        self.1.digest(d);
    }
}

impl<T: Digestible + ?Sized> Digestible for &T {
    fn digest(&self, d: &mut Digest) {
        (**self).digest(d);
    }
}

impl Digestible for crate::btl::BtlError {
    fn digest(&self, d: &mut Digest) {
        d.debug(self);
    }
}

impl Digestible for crate::btl::Undelivered {
    fn digest(&self, d: &mut Digest) {
        d.debug(self);
    }
}

impl Digestible for crate::btl::Completion {
    fn digest(&self, d: &mut Digest) {
        match self {
            // As its event is, the descriptor by its name (its pool's
            // number is another engine's).
            crate::btl::Completion::Send {
                endpoint,
                tag,
                desc,
                result,
            } => _ = d.send_done(*endpoint, *tag, desc.as_ref(), result),
            other => _ = d.debug(other),
        }
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
    pub const PREPARE_SRC_REGISTERED: u8 = 32;
    pub const RDMA: u8 = 33;
    pub const GET_THIRD_PARTY: u8 = 34;
    pub const POLL_COMPLETION: u8 = 35;
}

/// Writes fields at the start of a slice, and counts what does not fit:
/// an entry is written in place, with no copy between.
struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    /// The bytes written, or those the entry needs where `out` was
    /// shorter (what it holds then is unspecified).
    fn finish(self) -> Result<usize, usize> {
        if self.at <= self.out.len() {
            Ok(self.at)
        } else {
            Err(self.at)
        }
    }
    #[inline(always)]
    fn fixed<const N: usize>(&mut self, field: [u8; N]) {
        if let Some(to) = self.out.get_mut(self.at..self.at + N) {
            to.copy_from_slice(&field);
        }
        self.at += N;
    }
    #[inline(always)]
    fn raw(&mut self, b: &[u8]) {
        if let Some(to) = self.out.get_mut(self.at..self.at + b.len()) {
            to.copy_from_slice(b);
        }
        self.at += b.len();
    }
    #[inline(always)]
    fn u8(&mut self, v: u8) {
        self.fixed([v]);
    }
    #[inline(always)]
    fn u16(&mut self, v: u16) {
        self.fixed(v.to_le_bytes());
    }
    #[inline(always)]
    fn u32(&mut self, v: u32) {
        self.fixed(v.to_le_bytes());
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.fixed(v.to_le_bytes());
    }
    #[inline(always)]
    fn len(&mut self, n: usize) {
        self.u32(n as u32);
    }
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.raw(b);
    }
    #[inline(always)]
    fn time(&mut self, t: Instant) {
        self.u64(t.as_nanos());
    }
    #[inline(always)]
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
    fn list<T: Fixed>(&mut self, items: &Listed<'_, T>) {
        self.len(items.len() * T::LEN);
        for item in items.iter() {
            self.raw(&item.to_bytes()[..T::LEN]);
        }
    }
    fn slice(&mut self, s: MemSlice) {
        self.u64(s.handle.remote_key().0);
        self.u64(s.offset);
        self.u64(s.len);
    }
    fn remote(&mut self, s: RemoteSlice) {
        self.u64(s.key.0);
        self.u64(s.offset);
        self.u64(s.len);
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
    fn list<T: Fixed>(&mut self, what: &'static str) -> Result<Listed<'a, T>, JournalError> {
        let b = self.bytes()?;
        if b.len() % T::LEN != 0 {
            return Err(JournalError::BadField(what));
        }
        Ok(Listed::Encoded(b))
    }
    fn slice(&mut self) -> Result<MemSlice, JournalError> {
        let handle = RemoteKey(self.u64()?)
            .handle()
            .ok_or(JournalError::BadField("memory handle"))?;
        Ok(MemSlice {
            handle,
            offset: self.u64()?,
            len: self.u64()?,
        })
    }
    fn remote(&mut self) -> Result<RemoteSlice, JournalError> {
        Ok(RemoteSlice {
            key: RemoteKey(self.u64()?),
            offset: self.u64()?,
            len: self.u64()?,
        })
    }
    fn flags(&mut self) -> Result<DescFlags, JournalError> {
        DescFlags::from_bits(self.u8()?).ok_or(JournalError::BadField("descriptor flags"))
    }
}

impl Entry<'_> {
    /// Writes the entry at the start of `out`: the bytes written, or, if
    /// `out` is too short, the bytes it needs (what `out` holds then is
    /// unspecified).
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, usize> {
        let mut w = Writer { out, at: 0 };
        self.call.write(&mut w);
        w.u64(self.out);
        w.finish()
    }

    /// The entry's bytes.
    #[cfg(any(test, feature = "alloc"))]
    pub fn to_vec(&self) -> alloc::vec::Vec<u8> {
        to_vec(|out| self.encode_into(out))
    }
}

/// What `encode` writes, in a vector of the length it needs.
#[cfg(any(test, feature = "alloc"))]
fn to_vec(encode: impl Fn(&mut [u8]) -> Result<usize, usize>) -> alloc::vec::Vec<u8> {
    let mut bytes = alloc::vec![0; encode(&mut []).unwrap_or_else(|needs| needs)];
    let written = encode(&mut bytes);
    debug_assert_eq!(written, Ok(bytes.len()));
    bytes
}

impl Call<'_> {
    /// Writes the call at the start of `out`, as an entry begins (its
    /// result's digest follows it): the bytes written, or, if `out` is too
    /// short, the bytes it needs (what `out` holds then is unspecified).
    #[inline(always)]
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, usize> {
        let mut w = Writer { out, at: 0 };
        self.write(&mut w);
        w.finish()
    }

    /// The call's bytes, without a digest.
    #[cfg(any(test, feature = "alloc"))]
    pub fn to_vec(&self) -> alloc::vec::Vec<u8> {
        to_vec(|out| self.encode_into(out))
    }

    // Inlined where a recorded call is made, so that its variant is known
    // there and only its fields are written.
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            Call::Clock(now) => {
                w.u8(code::CLOCK);
                w.time(*now);
            }
            Call::PollConnect => w.u8(code::POLL_CONNECT),
            Call::Connected { req, nonce, now } => {
                w.u8(code::CONNECTED);
                w.req(req);
                w.fixed(*nonce);
                w.time(*now);
            }
            Call::Accepted { source, nonce, now } => {
                w.u8(code::ACCEPTED);
                w.u64(source.0);
                w.fixed(*nonce);
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
                w.list(procs);
            }
            Call::DelProcs(endpoints) => {
                w.u8(code::DEL_PROCS);
                w.list(endpoints);
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
            Call::PrepareSrcRegistered {
                endpoint,
                slice,
                bytes,
                reserve,
                order,
                flags,
            } => {
                w.u8(code::PREPARE_SRC_REGISTERED);
                w.u32(endpoint.0);
                w.slice(*slice);
                w.bytes(bytes);
                w.u64(*reserve as u64);
                w.u8(order.0);
                w.u8(flags.bits());
            }
            Call::Rdma {
                kind,
                endpoint,
                local,
                remote,
                ctx,
                imm,
                bytes,
            } => {
                w.u8(code::RDMA);
                w.u8(match kind {
                    RdmaCall::Put => 0,
                    RdmaCall::PutNotify => 1,
                    RdmaCall::Get => 2,
                });
                w.u32(endpoint.0);
                w.slice(*local);
                w.remote(*remote);
                w.u64(*ctx);
                w.u64(*imm);
                w.bytes(bytes);
            }
            Call::GetThirdParty {
                source,
                src,
                target,
                dst,
                ctx,
            } => {
                w.u8(code::GET_THIRD_PARTY);
                w.u32(source.0);
                w.remote(*src);
                w.proc(*target);
                w.remote(*dst);
                w.u64(*ctx);
            }
            Call::PollCompletion => w.u8(code::POLL_COMPLETION),
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
            code::ADD_PROCS => Call::AddProcs(r.list("process list")?),
            code::DEL_PROCS => Call::DelProcs(r.list("endpoint list")?),
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
            code::PREPARE_SRC_REGISTERED => Call::PrepareSrcRegistered {
                endpoint: r.endpoint()?,
                slice: r.slice()?,
                bytes: r.bytes()?,
                reserve: r.usize()?,
                order: r.order()?,
                flags: r.flags()?,
            },
            code::RDMA => Call::Rdma {
                kind: match r.u8()? {
                    0 => RdmaCall::Put,
                    1 => RdmaCall::PutNotify,
                    2 => RdmaCall::Get,
                    _ => return Err(JournalError::BadField("memory call")),
                },
                endpoint: r.endpoint()?,
                local: r.slice()?,
                remote: r.remote()?,
                ctx: r.u64()?,
                imm: r.u64()?,
                bytes: r.bytes()?,
            },
            code::GET_THIRD_PARTY => Call::GetThirdParty {
                source: r.endpoint()?,
                src: r.remote()?,
                target: r.proc()?,
                dst: r.remote()?,
                ctx: r.u64()?,
            },
            code::POLL_COMPLETION => Call::PollCompletion,
            other => return Err(JournalError::UnknownCall(other)),
        };
        let out = r.u64()?;
        Ok((Entry { call, out }, r.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(entry: Entry<'_>) {
        let bytes = entry.to_vec();
        let (back, len) = Entry::decode(&bytes).expect("decodes");
        assert_eq!(len, bytes.len());
        assert_eq!(back.to_vec(), bytes, "{entry:?}");
        let mut short = bytes.clone();
        short.pop();
        assert_eq!(entry.encode_into(&mut short), Err(bytes.len()));
        assert_eq!(entry.call.to_vec(), bytes[..bytes.len() - 8]);
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
        let handle = RemoteKey(12 << 16 | 3).handle().expect("a handle");
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
            Call::AddProcs(ProcList::Given(&procs)),
            Call::DelProcs(EndpointList::Given(&[EndpointId(1), EndpointId(2)])),
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
            Call::Unreplayable("poll_rdma"),
            Call::PrepareSrcRegistered {
                endpoint: EndpointId(2),
                slice: handle.slice(4, 3),
                bytes: b"abc",
                reserve: 0,
                order: Order(1),
                flags: DescFlags::empty(),
            },
            Call::Rdma {
                kind: RdmaCall::PutNotify,
                endpoint: EndpointId(2),
                local: handle.slice(0, 2),
                remote: RemoteKey(77).slice(8, 2),
                ctx: 5,
                imm: 6,
                bytes: b"xy",
            },
            Call::GetThirdParty {
                source: EndpointId(3),
                src: RemoteKey(1).slice(0, 9),
                target: ProcName::new(4, 4),
                dst: RemoteKey(2).slice(9, 9),
                ctx: 1,
            },
            Call::PollCompletion,
            Call::DeregisterMem(
                crate::btl::RemoteKey(12 << 16 | 3)
                    .handle()
                    .expect("a handle"),
            ),
        ];
        for call in calls {
            round_trip(Entry { call, out: 0x1234 });
        }
        let listed = Entry {
            call: Call::AddProcs(ProcList::Given(&procs)),
            out: 0,
        }
        .to_vec();
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
        let long = Digest::default().bytes(b"0123456789abcdef!").get();
        let bent = Digest::default().bytes(b"0123456789abcdeg!").get();
        assert_ne!(long, bent);
        assert_ne!(Digest::of(&Some(0usize)), Digest::of(&None::<usize>));
        assert_ne!(Digest::of(&Ok::<usize, ()>(0)), Digest::of(&Some(0usize)));
    }
}
