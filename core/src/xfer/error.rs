//! Why a transfer machine call was refused, or why a buffer completed
//! without success.

use core::fmt;

use super::TmState;
use crate::btl::{BtlError, TagError};

/// A refused call, or the failure a buffer completed with. Motr reports
/// both as errno values; here one enum serves both, since a buffer's failure
/// is often a call's refusal seen later (a BTL error, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XferError {
    /// A call the machine's current state does not allow (adding a buffer
    /// needs Started, say). It names the call and both states, so that the
    /// message alone tells which call came too early or too late.
    State {
        /// The refused method, e.g. `"start"` or `"add_msg_send"`.
        call: &'static str,
        /// The state the machine was in.
        state: TmState,
        /// The states in which `call` is allowed.
        needs: &'static [TmState],
    },
    /// Every buffer slot is in use.
    Full,
    /// No registered buffer has this id (never registered, or deregistered).
    UnknownBuffer,
    /// The buffer is queued, or its completion has not been polled yet.
    Busy,
    /// The buffer completed (cancelled or timed out) but the BTL still holds
    /// it and may still touch its memory; retry after `progress`.
    InFlight,
    /// `del` of a buffer that is not queued.
    NotQueued,
    /// A length exceeds what the buffer or the descriptor holds.
    TooLong {
        /// Bytes asked for.
        len: u64,
        /// Bytes available.
        max: u64,
    },
    /// A MSG_RECV buffer needs a non-zero `min_receive_size` and `max_messages`.
    ZeroReceiveLimit,
    /// The descriptor's passive queue does not pair with this active queue.
    WrongDirection,
    /// The deadline had already passed when the buffer was added (Motr's `-ETIME`).
    Expired,
    /// The tag is not an XFER tag.
    Tag(TagError),
    /// The BTL failed the operation or refused the buffer's memory.
    Btl(BtlError),
    /// Cancelled by `del` or by `stop` (Motr's `-ECANCELED`).
    Cancelled,
    /// The deadline passed before the operation completed (Motr's `-ETIMEDOUT`).
    Timeout,
    /// The active peer reported that its bulk transfer failed.
    RemoteFailed,
    /// The peer's notification does not match the buffer (more bytes than offered).
    Protocol,
}

impl From<BtlError> for XferError {
    fn from(e: BtlError) -> Self {
        XferError::Btl(e)
    }
}

impl fmt::Display for XferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XferError::State { call, state, needs } => {
                write!(f, "{call}: the transfer machine is {state}; it must be ")?;
                write_states(f, needs)
            }
            XferError::Full => f.write_str("no free buffer slot"),
            XferError::UnknownBuffer => f.write_str("no such registered buffer"),
            XferError::Busy => f.write_str("buffer queued or its completion not yet polled"),
            XferError::InFlight => {
                f.write_str("buffer still held by the BTL, retry after progress")
            }
            XferError::NotQueued => f.write_str("buffer is not queued"),
            XferError::TooLong { len, max } => write!(f, "{len} bytes exceed the {max} available"),
            XferError::ZeroReceiveLimit => {
                f.write_str("min_receive_size and max_messages must not be 0")
            }
            XferError::WrongDirection => {
                f.write_str("descriptor's passive queue does not pair with this active queue")
            }
            XferError::Expired => f.write_str("deadline already passed"),
            XferError::Tag(e) => e.fmt(f),
            XferError::Btl(e) => e.fmt(f),
            XferError::Cancelled => f.write_str("cancelled"),
            XferError::Timeout => f.write_str("timed out"),
            XferError::RemoteFailed => f.write_str("the peer's bulk transfer failed"),
            XferError::Protocol => f.write_str("peer notification does not match the buffer"),
        }
    }
}

impl core::error::Error for XferError {}

/// Writes `states` as a list a sentence can end with: "started",
/// "initialized or starting", "initialized, starting or started".
fn write_states(f: &mut fmt::Formatter<'_>, states: &[TmState]) -> fmt::Result {
    let last = states.len().saturating_sub(1);
    for (i, state) in states.iter().enumerate() {
        let sep = match i {
            0 => "",
            _ if i == last => " or ",
            _ => ", ",
        };
        write!(f, "{sep}{state}")?;
    }
    Ok(())
}
