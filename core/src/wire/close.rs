//! CLOSE (type 7): ends the connection, saying why.
//!
//! ```text
//!  0  u8      reason     CloseReason
//!  1  [u8;7]  reserved   0
//! ```

use core::fmt;

use super::WireError;
use super::field::{Fields, FieldsMut, check_reserved};

const REASON: usize = 0;
const RESERVED: usize = 1;

/// Why a connection is closed. Reasons this version does not know keep
/// their number, so a newer peer's reason can still be logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// An orderly close: the sender has nothing more to send or receive.
    Normal,
    /// The peer sent something this side could not decode or did not
    /// expect.
    ProtocolError,
    /// The peer's HELLO has another major protocol version.
    VersionMismatch,
    /// The peer's HELLO_ACK proof was wrong, or only one side has a job key.
    AuthFailed,
    /// The peer did not answer in time.
    Timeout,
    /// The sender ran out of a resource it needs for this connection.
    ResourceExhausted,
    /// A goodbye: the sender's process is shutting down, or is done with
    /// the receiver's (it removed it).
    Shutdown,
    /// The sender gave the receiver's process up (it stopped answering,
    /// its host refused, or it is a start the sender lost before): the
    /// receiver is lost to it, which is no goodbye. Older peers read it as
    /// an unknown reason, which they treat alike.
    GaveUp,
    /// A reason this version does not know.
    Other(u8),
}

impl CloseReason {
    /// A short description for messages.
    pub const fn description(self) -> &'static str {
        match self {
            Self::Normal => "normal close",
            Self::ProtocolError => "protocol error",
            Self::VersionMismatch => "protocol version mismatch",
            Self::AuthFailed => "authentication failed",
            Self::Timeout => "timeout",
            Self::ResourceExhausted => "resources exhausted",
            Self::Shutdown => "shutting down",
            Self::GaveUp => "gave the peer up",
            Self::Other(_) => "unknown reason",
        }
    }
}

impl From<u8> for CloseReason {
    fn from(raw: u8) -> Self {
        match raw {
            0 => Self::Normal,
            1 => Self::ProtocolError,
            2 => Self::VersionMismatch,
            3 => Self::AuthFailed,
            4 => Self::Timeout,
            5 => Self::ResourceExhausted,
            6 => Self::Shutdown,
            7 => Self::GaveUp,
            other => Self::Other(other),
        }
    }
}

impl From<CloseReason> for u8 {
    fn from(reason: CloseReason) -> u8 {
        match reason {
            CloseReason::Normal => 0,
            CloseReason::ProtocolError => 1,
            CloseReason::VersionMismatch => 2,
            CloseReason::AuthFailed => 3,
            CloseReason::Timeout => 4,
            CloseReason::ResourceExhausted => 5,
            CloseReason::Shutdown => 6,
            CloseReason::GaveUp => 7,
            CloseReason::Other(raw) => raw,
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(raw) => write!(f, "unknown reason {raw}"),
            known => f.write_str(known.description()),
        }
    }
}

/// Only reasons in their canonical form: `Other(1)` would be sent as 1 and
/// come back as `ProtocolError`.
#[cfg(any(test, feature = "arbitrary"))]
impl<'a> arbitrary::Arbitrary<'a> for CloseReason {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Self::from(u8::arbitrary(u)?))
    }
}

/// A CLOSE body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct CloseRepr {
    /// Why the sender closes.
    pub reason: CloseReason,
}

impl CloseRepr {
    /// Body length.
    pub const LEN: usize = 8;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a CLOSE body.
    pub fn parse(body: &[u8; Self::LEN]) -> Result<Self, WireError> {
        let f = Fields(body);
        check_reserved(&f.bytes::<RESERVED, 7>(), "close.reserved")?;
        Ok(Self {
            reason: f.u8::<REASON>().into(),
        })
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u8::<REASON>(self.reason.into());
        f.set_bytes::<RESERVED, 7>([0; 7]);
    }
}
