//! The `Btl` interface every backend offers, after Open MPI's BTL module
//! (`mca_btl_base_module_t`), translated to Rust ownership:
//!
//! - **Descriptors move.** `send` takes a [`Descriptor`] by value. If it
//!   completes at once the descriptor comes back in
//!   [`SendStatus::Completed`] (unless [`DescFlags::BTL_OWNERSHIP`] let the
//!   BTL free it); if it is queued, the BTL owns it until the matching
//!   [`Event::SendComplete`], which hands it back the same way. A refused
//!   send returns it in [`SendError`]. Nothing is lost or freed twice.
//! - **Callbacks are events.** Open MPI's BTL calls the upper layer back
//!   from inside `progress`; a Rust callback holding the BTL mutably could
//!   not send a reply. So `progress` only moves the protocol forward, and
//!   [`Btl::poll_event`] hands out what happened, one event at a time, each
//!   borrowing the BTL: a received message is seen in place and is valid
//!   only until the next call, exactly Open MPI's "valid only during the
//!   callback". [`TagTable`] turns received messages into handler calls.
//! - **Memory is handed over.** [`Btl::register_mem`] takes a region as the
//!   module holds memory ([`Btl::Memory`]: a `&'m mut [u8]` lent for the
//!   module's lifetime, or an owned buffer), and
//!   [`Btl::deregister_mem`] hands it back; peers name it by [`RemoteKey`],
//!   offset and length, and every remote access is checked against the
//!   registration. In-place sends reference registered memory, so a queued
//!   descriptor never borrows user memory the compiler cannot see.
//!
//! Every operation ends exactly once: with its immediate result, or with one
//! completion event carrying success or a typed [`BtlError`].

mod attributes;
mod error;
pub mod forward;
pub mod memory;
pub(crate) mod tag;

pub use attributes::{Attributes, BtlFlags};
pub use error::{BtlError, Limit, LostReason, RejectCode};
pub use memory::{
    Access, MemError, MemHandle, MemSlice, RegSlot, Registrations, RemoteKey, RemoteSlice, Side,
};
pub use tag::{Handler, Incoming, Tag, TagError, TagRange, TagTable};

use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::pool::PoolsRef;

/// What a `send` came to when it did not fail.
#[derive(Debug)]
#[must_use = "a completed send may hand the descriptor back"]
pub enum SendStatus {
    /// Sent at once. The descriptor is back with the caller, or `None` when
    /// `BTL_OWNERSHIP` let the BTL free it. An [`Event::SendComplete`]
    /// follows only with `ALWAYS_CALLBACK`.
    Completed(Option<Descriptor>),
    /// Queued: the BTL owns the descriptor until its [`Event::SendComplete`].
    Queued,
}

/// A refused `send`: why, and the descriptor back.
#[derive(Debug)]
pub struct SendError {
    /// Why the send was refused.
    pub error: BtlError,
    /// The descriptor, still the caller's.
    pub desc: Descriptor,
}

/// A refused `register_mem`: why, and the region back.
#[derive(Debug)]
pub struct RegisterError<M> {
    /// Why the region was not registered.
    pub error: BtlError,
    /// The region, still the caller's.
    pub region: M,
}

impl<M> core::fmt::Display for RegisterError<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "registering memory: {}", self.error)
    }
}

impl<M: core::fmt::Debug> core::error::Error for RegisterError<M> {}

impl<M> From<memory::Refused<M>> for RegisterError<M> {
    fn from(r: memory::Refused<M>) -> Self {
        RegisterError {
            error: r.error.into(),
            region: r.region,
        }
    }
}

/// Identifies a put or get until its completion event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// A fatal or non-fatal error reported outside any one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEvent {
    /// Fatal errors end the BTL; non-fatal ones concern one peer.
    pub fatal: bool,
    /// The peer concerned, if any.
    pub endpoint: Option<EndpointId>,
    /// What went wrong.
    pub error: BtlError,
}

/// Something that happened, handed out by [`Btl::poll_event`].
#[derive(Debug)]
pub enum Event<'a> {
    /// An active message; its bytes are valid until the next `poll_event`.
    Received(Incoming<'a>),
    /// A queued send (or an `ALWAYS_CALLBACK` one) finished.
    SendComplete {
        /// The peer.
        endpoint: EndpointId,
        /// The tag it was sent with.
        tag: Tag,
        /// The descriptor back, or `None` when the BTL owned and freed it.
        desc: Option<Descriptor>,
        /// Success, or why it failed.
        result: Result<(), BtlError>,
    },
    /// A put finished: the data is in the peer's memory, or it failed.
    PutComplete {
        /// The operation.
        op: OpId,
        /// The caller's value given to `put`.
        ctx: u64,
        /// Success, or why it failed.
        result: Result<(), BtlError>,
    },
    /// A get finished: the data is in local memory, or it failed.
    GetComplete {
        /// The operation.
        op: OpId,
        /// The caller's value given to `get`.
        ctx: u64,
        /// Success, or why it failed.
        result: Result<(), BtlError>,
    },
    /// A peer's [`put_notify`](Btl::put_notify) landed here: its data is
    /// in `slice` of one of this process's registrations.
    PutArrived {
        /// The peer that put.
        from: EndpointId,
        /// Where the data lies.
        slice: MemSlice,
        /// The value the peer gave.
        imm: u64,
    },
    /// A peer left: it said goodbye (it finalized, or is done with this
    /// process), which is no error. Operations still outstanding to it
    /// failed with `PeerLost(Left)`; a send to it now fails the same way.
    PeerLeft {
        /// The peer.
        endpoint: EndpointId,
    },
    /// There is room again for what was refused for a peer: a send
    /// (`send`, `prepare_src`, `alloc`, and so `send_copy`), a put or a get
    /// to `endpoint` failed with `OutOfResource`, and the largest of them
    /// would now be taken. Told once per run of refusals, when nothing else
    /// is waiting to be polled, and not at all if the peer is lost first
    /// (its `Error` or `PeerLeft` says so). It takes no place among the
    /// events kept: a handler that holds what was refused (a reply it owes)
    /// sends it here, and so never loses it. Room is no promise: another
    /// caller may take it first, and a refusal then brings another `Room`;
    /// and it may come when what was refused went meanwhile. A refused
    /// `sendi` brings none (its caller falls back to `prepare_src` and
    /// `send`, which do). It is made when polled, and counted among the
    /// events `progress` returns once the room is there, so that a caller
    /// that waits for events after a refusal wakes for it.
    Room {
        /// The peer.
        endpoint: EndpointId,
    },
    /// An error not tied to one operation (a peer lost, the BTL failed).
    Error(ErrorEvent),
}

/// An event a BTL keeps until it is polled: every [`Event`] but a received
/// message, whose bytes stay wherever the BTL holds them.
#[derive(Debug)]
pub enum Completion {
    /// See [`Event::SendComplete`].
    Send {
        /// The peer.
        endpoint: EndpointId,
        /// The tag it was sent with.
        tag: Tag,
        /// The descriptor back, or `None` when the BTL owned and freed it.
        desc: Option<Descriptor>,
        /// Success, or why it failed.
        result: Result<(), BtlError>,
    },
    /// See [`Event::PutComplete`].
    Put {
        /// The operation.
        op: OpId,
        /// The caller's value given to `put`.
        ctx: u64,
        /// Success, or why it failed.
        result: Result<(), BtlError>,
    },
    /// See [`Event::GetComplete`].
    Get {
        /// The operation.
        op: OpId,
        /// The caller's value given to `get`.
        ctx: u64,
        /// Success, or why it failed.
        result: Result<(), BtlError>,
    },
    /// See [`Event::PutArrived`].
    PutArrived {
        /// The peer that put.
        from: EndpointId,
        /// Where the data lies.
        slice: MemSlice,
        /// The value the peer gave.
        imm: u64,
    },
    /// See [`Event::PeerLeft`].
    PeerLeft {
        /// The peer.
        endpoint: EndpointId,
    },
    /// See [`Event::Room`].
    Room {
        /// The peer.
        endpoint: EndpointId,
    },
    /// See [`Event::Error`].
    Error(ErrorEvent),
}

impl From<Completion> for Event<'_> {
    fn from(c: Completion) -> Self {
        match c {
            Completion::Send {
                endpoint,
                tag,
                desc,
                result,
            } => Event::SendComplete {
                endpoint,
                tag,
                desc,
                result,
            },
            Completion::Put { op, ctx, result } => Event::PutComplete { op, ctx, result },
            Completion::Get { op, ctx, result } => Event::GetComplete { op, ctx, result },
            Completion::PutArrived { from, slice, imm } => Event::PutArrived { from, slice, imm },
            Completion::PeerLeft { endpoint } => Event::PeerLeft { endpoint },
            Completion::Room { endpoint } => Event::Room { endpoint },
            Completion::Error(e) => Event::Error(e),
        }
    }
}

/// The interface of one BTL module.
pub trait Btl {
    /// How the module holds registered memory: `&'m mut [u8]` lent for a
    /// lifetime, or an owned buffer (`Vec<u8>`, `Box<[u8]>`) that it keeps
    /// until [`deregister_mem`](Self::deregister_mem) hands it back.
    type Memory: AsRef<[u8]> + AsMut<[u8]>;

    /// The module's published attributes.
    fn attributes(&self) -> &Attributes;

    /// The attributes that hold for `endpoint`: a BTL over several (btl-std's
    /// `Bml`) gives those of the one that carries the peer, whose limits may
    /// be wider than the ones every module keeps ([`attributes`](Self::attributes));
    /// any other BTL gives its own.
    fn attributes_for(&self, endpoint: EndpointId) -> &Attributes {
        let _ = endpoint;
        self.attributes()
    }

    /// The fragment pools descriptors come from, to fill their headers and
    /// payloads (`Descriptor::header_mut(btl.pools())`).
    fn pools(&self) -> PoolsRef<'_>;

    /// Makes the processes known: `endpoints[i]` and bit `i` of `reachable`
    /// are set for every `procs[i]` this module reaches. Connections are made
    /// lazily, on first use. `endpoints` must be as long as `procs`.
    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError>;

    /// Forgets endpoints (reference-counted: a process added twice must be
    /// deleted twice). Outstanding operations to a forgotten peer fail with
    /// `PeerLost(Removed)`. A peer the BTL added on its own (one that
    /// connected to this process, seen only in its events) is forgotten at
    /// once: how a server drops a client that misbehaves.
    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError>;

    /// A descriptor with `size` payload bytes for the caller to fill
    /// (Open MPI's `btl_alloc`).
    fn alloc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError>;

    /// Returns a descriptor the caller owns.
    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError>;

    /// A descriptor sending `reserve` header bytes then `data` (copied).
    fn prepare_src(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError>;

    /// A descriptor sending `reserve` header bytes then registered memory,
    /// referenced in place when the module offers `SEND_INPLACE` and the
    /// data is large, copied otherwise.
    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError>;

    /// Sends a descriptor as an active message with `tag`.
    fn send(
        &mut self,
        endpoint: EndpointId,
        desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError>;

    /// Sends `header` then `payload` at once without a descriptor, or fails
    /// with `OutOfResource` when it cannot go now (no fragment, no credit):
    /// the caller then falls back to `prepare_src` + `send`, as
    /// [`send_copy`](Self::send_copy) does. At most
    /// [`Attributes::eager_limit`] bytes in all (`TooLarge` beyond). A
    /// message to a peer still being connected waits for the connection,
    /// as a queued `send` does.
    ///
    /// A success means the BTL has taken the message: both buffers are the
    /// caller's again, and no event follows. The message is delivered
    /// unless its peer is lost first (the peer's `Error` event says so) or
    /// the BTL is finalized first, which drops what is unacknowledged: a
    /// graceful close waits for the acknowledgements before it finalizes
    /// (the socket modules' `flush`).
    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError>;

    /// Sends a copy of `data` as one message with `tag`: through
    /// [`sendi`](Self::sendi) when it fits ([`Attributes::eager_limit`])
    /// and goes at once, else through `prepare_src` + `send`, whose
    /// descriptor the module owns and frees. No event follows a success.
    ///
    /// Messages to one peer arrive in the order `send_copy` took them,
    /// whichever way each went: every BTL of this project keeps one
    /// sequence per peer (the conformance suite's
    /// `send_copy_keeps_order_per_peer` holds each to it). Messages to
    /// different peers are not ordered with each other.
    ///
    /// `OutOfResource` is backpressure: the module has no room for it now
    /// (no fragment, or the peer's queue is full, because the peer takes
    /// messages more slowly than they are sent). Serve the module (poll its
    /// events: replies hand credits and fragments back) and send again;
    /// an [`Event::Room`] for the peer says when it would be taken, for a
    /// handler that has no loop to try again in.
    /// Beyond [`Attributes::max_send_size`] it is `TooLarge`: move that
    /// much with a put.
    fn send_copy(&mut self, endpoint: EndpointId, tag: Tag, data: &[u8]) -> Result<(), BtlError> {
        let (eager, max) = {
            let a = self.attributes();
            (a.eager_limit, a.max_send_size)
        };
        if data.len() <= eager {
            match self.sendi(endpoint, &[], data, tag, Order::ANY, DescFlags::empty()) {
                Err(BtlError::OutOfResource) => {}
                taken => return taken,
            }
        }
        Limit::Here.admits(data.len(), max)?;
        let desc = self.prepare_src(endpoint, data, 0, Order::ANY, DescFlags::BTL_OWNERSHIP)?;
        match self.send(endpoint, desc, tag) {
            Ok(SendStatus::Completed(Some(desc))) => self.free(desc),
            Ok(_) => Ok(()),
            Err(refused) => {
                let _ = self.free(refused.desc);
                Err(refused.error)
            }
        }
    }

    /// Hands `region` to the module for put, get and in-place sends, until
    /// [`deregister_mem`](Self::deregister_mem); a refused region comes back
    /// in the error.
    fn register_mem(
        &mut self,
        region: Self::Memory,
        access: Access,
    ) -> Result<MemHandle, RegisterError<Self::Memory>>;

    /// Ends a registration and gives the region back.
    fn deregister_mem(&mut self, handle: MemHandle) -> Result<Self::Memory, BtlError>;

    /// A registered region, to read what puts and gets left there.
    fn region(&self, handle: MemHandle) -> Result<&[u8], BtlError>;

    /// A registered region, to write what will be put or sent.
    fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], BtlError>;

    /// Writes `local` into the peer's `remote`; completes (event) once the
    /// data is in the peer's memory.
    fn put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError>;

    /// As [`put`](Self::put), and the peer is told: once the data is in
    /// its memory it gets an [`Event::PutArrived`] naming where the data
    /// lies and carrying `imm`, as an RDMA write with immediate data tells
    /// its target. The put completes here once the peer has taken the
    /// notice. Like a message, the notice spends one of the peer's
    /// credits until it polls the event. `NotSupported` from a peer too
    /// old to know it.
    fn put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError>;

    /// Reads the peer's `remote` into `local`; completes (event) once the
    /// data is in local memory.
    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError>;

    /// Moves the protocol forward; returns how many events are ready to poll.
    fn progress(&mut self) -> usize;

    /// The next event, if any; a received message's bytes are valid until
    /// the next call.
    fn poll_event(&mut self) -> Option<Event<'_>>;

    /// Shuts the module down: every outstanding operation fails with
    /// `Finalized` (its event is still delivered), sends that owe no event
    /// are dropped, peers are told goodbye (`Event::PeerLeft`), later calls
    /// fail. Returns how much was still outstanding, so that nothing is
    /// lost without a word.
    ///
    /// The engine shuts down at once. btl-std's socket modules first wait,
    /// up to their `linger` (`btl_<c>_linger`, 1 s), for what was sent to
    /// be acknowledged; to wait longer, or to know it all arrived, flush
    /// first (`Module::flush(timeout)`; over the engine directly, call
    /// `progress` until `Engine::outstanding()` is zero).
    fn finalize(&mut self) -> Undelivered;
}

/// Adds the one process `proc` to `btl` ([`Btl::add_procs`]): its endpoint,
/// or `None` where `btl` does not reach it. For drivers that join their
/// peers one at a time.
pub fn add_proc<B: Btl + ?Sized>(
    btl: &mut B,
    proc: ProcName,
) -> Result<Option<EndpointId>, BtlError> {
    let mut endpoint = [None];
    let mut word = [0u64];
    btl.add_procs(&[proc], &mut endpoint, &mut Reachability::new(&mut word))?;
    Ok(endpoint[0])
}

/// What [`Btl::finalize`] could not deliver: the sends, puts and gets
/// still outstanding when it shut the module down, each failed with
/// `Finalized` (the events of those that owe one are queued; the others,
/// `sendi` and owned descriptors, are dropped with this count as their
/// only trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Undelivered {
    /// Packets and operations outstanding at the shutdown.
    pub outstanding: usize,
}

impl Undelivered {
    /// Whether everything was delivered.
    pub fn is_empty(&self) -> bool {
        self.outstanding == 0
    }
}

impl core::fmt::Display for Undelivered {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} sends, puts or gets not acknowledged when the module was finalized",
            self.outstanding
        )
    }
}
