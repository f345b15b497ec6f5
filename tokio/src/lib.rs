//! `btl-tokio`: btl in a tokio service.
//!
//! An [`Endpoint`] is a handle on one module (TCP or UDP, the same engine
//! and transports as btl-std's), cheap to clone and shared by any number
//! of tasks. One driver task per endpoint moves the protocol forward, as
//! quinn's endpoint driver does: the module's sockets live in tokio's
//! reactor ([`TokioNet`]), so there is no poller of btl's own and no
//! progress thread; the driver wakes when a socket is ready, when the
//! engine's next timer is due, or when a handle asks.
//!
//! - [`Endpoint::send`] sends a copy of a buffer the caller owns (a `Vec`,
//!   a `Bytes`, anything `AsRef<[u8]>`) and completes once the peer has
//!   acknowledged it.
//! - [`Endpoint::put`], [`put_notify`](Endpoint::put_notify) and
//!   [`get`](Endpoint::get) take a `Vec<u8>` and hand it back when the
//!   data has moved; [`Endpoint::lend`] registers memory peers may reach.
//! - [`Endpoint::receiver`] gives a bounded inbox of the messages of a
//!   range of tags, a [`Stream`](futures_core::Stream);
//!   [`arrivals`](Endpoint::arrivals) and
//!   [`peer_events`](Endpoint::peer_events) tell puts that landed and peers
//!   gone.
//! - [`Endpoint::flush`] waits until everything sent is acknowledged;
//!   [`Endpoint::close`] then shuts the module down.
//!
//! Every future says what dropping it does ([`ops`] for the operations,
//! [`Inbox::recv`] for receiving); no completion is lost or taken twice
//! because a future was dropped. A peer lost fails every operation under
//! way to it with [`BtlError::PeerLost`].
//!
//! The same endpoint runs over a simulated network: btl-sim implements
//! [`Reactor`] for its turmoil network, so an async service's tests are
//! deterministic and replayable by seed.
//!
//! Why a crate of its own, not a feature of btl-std: services that do not
//! use tokio (MPI-like runtimes, tools, the firmware's host side) build
//! without it, and the simulation depends on it as on any other crate.

mod endpoint;
mod inbox;
mod net;
pub mod ops;
mod room;
mod spin;
mod state;

pub use endpoint::{
    DEFAULT_SPIN_LIMIT, Endpoint, Lent, TcpEndpoint, TcpReceiver, UdpEndpoint, UdpReceiver,
};
pub use inbox::{Arrival, Arrivals, Inbox, Item, Message, PeerEvent, PeerEvents, Receiver};
pub use net::{Reactor, Registered, TokioEvent, TokioNet, TokioPoller, TokioRegistry};
pub use ops::{Send, Transfer};

pub use btl_std::driver::module::Transport;
pub use btl_std::transports::tcp::Tcp;
pub use btl_std::transports::udp::Udp;
pub use btl_std::{
    Access, BtlError, EndpointId, LostReason, MemSlice, ModuleBuilder, ProcName, RemoteKey,
    RemoteSlice, Tag,
};
pub use bytes::Bytes;

/// Why an operation of an [`Endpoint`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The module refused or failed it: a peer lost (`PeerLost`), a
    /// message too large for the module (`TooLarge`: move that much with a
    /// put), an unknown endpoint, a remote region that does not allow it.
    #[error(transparent)]
    Btl(#[from] BtlError),
    /// The endpoint was closed ([`Endpoint::close`]).
    #[error("the endpoint is closed: open a new one to go on")]
    Closed,
    /// The driver task ended without a close: it was dropped (its runtime
    /// shut down, or the future [`Endpoint::new`] returned was never
    /// spawned or was aborted).
    #[error(
        "the endpoint's driver task is gone: spawn the driver Endpoint::new returns, and keep its runtime running"
    )]
    DriverGone,
    /// The module failed as a whole (its sockets, its poller).
    #[error("the endpoint's module failed: {0}")]
    Failed(BtlError),
    /// A get's buffer is shorter than the remote region it reads.
    #[error("a buffer of {len} bytes cannot take the {needed} bytes asked for")]
    BufferTooShort {
        /// Bytes the operation moves.
        needed: u64,
        /// The buffer's length.
        len: usize,
    },
    /// A receiver's tags overlap those of one already made.
    #[error("tags {:#x}..={:#x} overlap {:#x}..={:#x}, which a receiver takes already: drop it first, or ask for other tags", asked.0, asked.1, taken.0, taken.1)]
    TagsTaken {
        /// The range asked for, first and last tag.
        asked: (u8, u8),
        /// The range of the receiver that has them.
        taken: (u8, u8),
    },
    /// A close shut the module down with this many sends, puts or gets not
    /// yet acknowledged (their futures failed with [`Closed`](Self::Closed)).
    #[error("{0} sends, puts or gets were not acknowledged when the endpoint closed")]
    Undelivered(usize),
    /// The future was polled again after it completed.
    #[error("the operation's future was polled after it completed")]
    Polled,
}

/// A put or get that failed, with its buffer back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct TransferError {
    /// Why.
    pub error: Error,
    /// The buffer the operation was given.
    pub buffer: Vec<u8>,
}
