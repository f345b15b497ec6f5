//! The typed errors of BTL operations.

use core::fmt;

use super::memory::MemError;
use crate::endpoint::EndpointError;
use crate::pool::PoolError;

use crate::wire::CloseReason;
pub use crate::wire::RejectCode;

impl From<MemError> for RejectCode {
    fn from(e: MemError) -> Self {
        match e {
            MemError::UnknownRegion | MemError::Full | MemError::InUse => RejectCode::BadHandle,
            MemError::OutOfBounds { .. } => RejectCode::OutOfBounds,
            MemError::AccessDenied => RejectCode::AccessDenied,
        }
    }
}

/// Why a peer counts as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// It did not answer within its module's peer timeout
    /// (`btl_<component>_peer_timeout`).
    Timeout,
    /// No handshake with it completed within `btl_<c>_handshake_timeout`:
    /// nothing answered where its card said it listens (over datagrams a
    /// dead port says nothing), or it never proved itself.
    HandshakeTimeout,
    /// It broke the protocol (garbage, bad lengths): it lost its connection.
    ProtocolViolation,
    /// It speaks another major protocol version.
    VersionMismatch,
    /// It could not prove the job key.
    AuthFailed,
    /// It closed the connection without a goodbye: it gave this process
    /// up (its CLOSE said `GaveUp`: this process stopped answering it, or
    /// came back as a start it had lost), the connection ended before it
    /// opened, or this side gave it up to make room.
    Closed,
    /// It left: its CLOSE said it is shutting down (it finalized, or is
    /// done with this process). Told as [`Event::PeerLeft`](super::Event::PeerLeft),
    /// not as an error; what was outstanding to it fails with
    /// `PeerLost(Left)`.
    Left,
    /// It was removed with `del_procs` or the BTL was finalized.
    Removed,
    /// It restarted: a HELLO came from a new start of the process (another
    /// epoch). What was outstanding to the old start failed; the endpoint
    /// goes on to the new one.
    Restarted,
    /// Its host refused the first connection, or every reconnection for
    /// the refusal timeout (`btl_<component>_refused_timeout`): nothing
    /// listens there any more (a TCP reset, an ICMP port unreachable over
    /// UDP), the process is gone.
    Refused,
    /// No connection could be made to it: no route, no address, or the
    /// connect timed out.
    Unreachable,
    /// It refused this process for want of room (every peer or link slot
    /// in use).
    NoRoom,
    /// It kept answering but stopped moving for its peer timeout: it
    /// acknowledged nothing this side sent, or never filled a gap in what
    /// it sent, while holding this side's fragments and event places.
    Stalled,
    /// Its process ended without a goodbye (killed, crashed): a driver
    /// that watches its peers' processes saw it go, as the shared-memory
    /// component does for the processes of its host.
    Exited,
    /// It was reached by address alone, and its handshake named a process
    /// that is already a peer here under another endpoint: that endpoint
    /// reaches it.
    Duplicate,
}

impl LostReason {
    /// Every reason, in the order their counts are kept
    /// ([`Losses`](crate::engine::metrics::Losses)).
    pub const ALL: [LostReason; 15] = [
        LostReason::Timeout,
        LostReason::HandshakeTimeout,
        LostReason::ProtocolViolation,
        LostReason::VersionMismatch,
        LostReason::AuthFailed,
        LostReason::Closed,
        LostReason::Left,
        LostReason::Removed,
        LostReason::Restarted,
        LostReason::Refused,
        LostReason::Unreachable,
        LostReason::NoRoom,
        LostReason::Stalled,
        LostReason::Exited,
        LostReason::Duplicate,
    ];

    /// Whether the peer went as peers go in order: it left with a goodbye,
    /// this side removed it, or it was a second name for a peer still
    /// reached.
    pub const fn is_clean(self) -> bool {
        matches!(
            self,
            LostReason::Left | LostReason::Removed | LostReason::Duplicate
        )
    }

    /// A short name in snake case, for a metric's label.
    pub const fn label(self) -> &'static str {
        match self {
            LostReason::Timeout => "timeout",
            LostReason::HandshakeTimeout => "handshake_timeout",
            LostReason::ProtocolViolation => "protocol_violation",
            LostReason::VersionMismatch => "version_mismatch",
            LostReason::AuthFailed => "auth_failed",
            LostReason::Closed => "closed",
            LostReason::Left => "left",
            LostReason::Removed => "removed",
            LostReason::Restarted => "restarted",
            LostReason::Refused => "refused",
            LostReason::Unreachable => "unreachable",
            LostReason::NoRoom => "no_room",
            LostReason::Stalled => "stalled",
            LostReason::Exited => "exited",
            LostReason::Duplicate => "duplicate",
        }
    }

    /// The loss a CLOSE with `reason` means for its peer, when the CLOSE
    /// ends the peer and not only one of its links (a `Normal` close is
    /// one link's end).
    pub const fn of_close(reason: CloseReason) -> Option<LostReason> {
        match reason {
            CloseReason::Normal => None,
            CloseReason::ProtocolError => Some(LostReason::ProtocolViolation),
            CloseReason::VersionMismatch => Some(LostReason::VersionMismatch),
            CloseReason::AuthFailed => Some(LostReason::AuthFailed),
            CloseReason::Timeout => Some(LostReason::Timeout),
            CloseReason::ResourceExhausted => Some(LostReason::NoRoom),
            CloseReason::Shutdown => Some(LostReason::Left),
            CloseReason::GaveUp | CloseReason::Other(_) => Some(LostReason::Closed),
        }
    }

    /// The loss this side's failing a link for `reason` means for the peer
    /// on it: `None` for `Normal` (a redundant link dropped: the peer
    /// stays), the reason itself where it names one (another version, a
    /// key not proven, silence), and a protocol violation otherwise (the
    /// peer sent what this side could not take).
    pub const fn of_failure(reason: CloseReason) -> Option<LostReason> {
        match reason {
            CloseReason::Normal => None,
            CloseReason::VersionMismatch => Some(LostReason::VersionMismatch),
            CloseReason::AuthFailed => Some(LostReason::AuthFailed),
            CloseReason::Timeout => Some(LostReason::Timeout),
            _ => Some(LostReason::ProtocolViolation),
        }
    }
}

/// Why a BTL operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BtlError {
    /// No fragment, credit or queue slot now; retry after `progress`.
    OutOfResource,
    /// The endpoint is not one this BTL reaches.
    Unreachable,
    /// The endpoint table refused.
    Endpoint(EndpointError),
    /// The peer was lost; its outstanding operations fail with this.
    PeerLost(LostReason),
    /// A local registration check failed.
    Memory(MemError),
    /// The peer refused a put or get.
    Rejected(RejectCode),
    /// Longer than this BTL, or the peer, takes in one operation.
    TooLarge {
        /// Bytes asked for.
        len: u64,
        /// The limit.
        max: u64,
        /// Whose limit it is: this BTL's (its [`Attributes`](super::Attributes))
        /// or the peer's, which its handshake said.
        whose: Limit,
    },
    /// This BTL does not offer the operation.
    NotSupported,
    /// The BTL was finalized.
    Finalized,
}

/// Whose limit a [`BtlError::TooLarge`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// This side's: the BTL's [`Attributes`](super::Attributes), or a
    /// buffer of the caller's.
    Here,
    /// The peer's: what its handshake said it takes in one message
    /// (`Module::max_send_to` in btl-std).
    Peer,
}

impl Limit {
    /// `Ok` if `len` bytes are within this side's or the peer's `max`,
    /// else `TooLarge` naming both and whose limit it is.
    pub fn admits(self, len: usize, max: usize) -> Result<(), BtlError> {
        if len > max {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max: max as u64,
                whose: self,
            });
        }
        Ok(())
    }
}

impl From<MemError> for BtlError {
    fn from(e: MemError) -> Self {
        BtlError::Memory(e)
    }
}

impl From<EndpointError> for BtlError {
    fn from(e: EndpointError) -> Self {
        BtlError::Endpoint(e)
    }
}

impl From<PoolError> for BtlError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::TooLarge { requested, max } => BtlError::TooLarge {
                len: requested as u64,
                max: max as u64,
                whose: Limit::Here,
            },
            _ => BtlError::OutOfResource,
        }
    }
}

impl LostReason {
    /// A short description for messages and logs.
    pub const fn description(self) -> &'static str {
        match self {
            LostReason::Timeout => "no answer within the peer timeout",
            LostReason::HandshakeTimeout => "no handshake within the handshake timeout",
            LostReason::ProtocolViolation => "protocol violation",
            LostReason::VersionMismatch => "different protocol version",
            LostReason::AuthFailed => "job key not proven",
            LostReason::Closed => "closed by the peer",
            LostReason::Left => "it left (it finalized, or is done with this process)",
            LostReason::Removed => "removed",
            LostReason::Restarted => "restarted",
            LostReason::Refused => "nothing listens at its address (its process is gone)",
            LostReason::Unreachable => "no connection could be made",
            LostReason::NoRoom => "it has no room for this process",
            LostReason::Stalled => "no progress within the peer timeout",
            LostReason::Exited => "its process ended without a goodbye",
            LostReason::Duplicate => "its process is already a peer under another endpoint",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

impl fmt::Display for BtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BtlError::OutOfResource => f.write_str("out of resources, retry after progress"),
            BtlError::Unreachable => f.write_str("peer not reachable by this BTL"),
            BtlError::Endpoint(e) => e.fmt(f),
            BtlError::PeerLost(r) => write!(f, "peer lost: {r}"),
            BtlError::Memory(e) => e.fmt(f),
            BtlError::Rejected(c) => write!(f, "refused by the peer: {c}"),
            BtlError::TooLarge {
                len,
                max,
                whose: Limit::Here,
            } => write!(f, "{len} bytes exceed the limit of {max}"),
            BtlError::TooLarge {
                len,
                max,
                whose: Limit::Peer,
            } => write!(
                f,
                "{len} bytes exceed the peer's limit of {max} (what its largest receive fragment holds, which may be below this side's max_send_size): send less, or move it with a put"
            ),
            BtlError::NotSupported => f.write_str("operation not offered by this BTL"),
            BtlError::Finalized => f.write_str("BTL finalized"),
        }
    }
}

impl core::error::Error for BtlError {}

impl From<crate::desc::DescError> for BtlError {
    /// A descriptor that could not be made: its fragment's pool error, or
    /// lengths beyond what a descriptor holds (`u32::MAX`).
    fn from(e: crate::desc::DescError) -> Self {
        match e {
            crate::desc::DescError::Pool(p) => p.into(),
            crate::desc::DescError::LengthOverflow => BtlError::TooLarge {
                len: u64::MAX,
                max: u64::from(u32::MAX),
                whose: Limit::Here,
            },
        }
    }
}
