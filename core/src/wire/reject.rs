//! REJECT (type 8): the receiver refused a PUT or GET.
//!
//! ```text
//!  0  u64     xfer_id    the refused transfer
//!  8  u8      code       RejectCode
//!  9  [u8;7]  reserved   0
//! ```

use core::fmt;

use super::WireError;
use super::field::{Fields, FieldsMut, check_reserved};

const XFER_ID: usize = 0;
const CODE: usize = 8;
const RESERVED: usize = 9;

/// Why a PUT or GET was refused. Codes this version does not know keep
/// their number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectCode {
    /// No registration has the given handle.
    BadHandle,
    /// The range is not inside the registration.
    OutOfBounds,
    /// The registration does not allow this access (a PUT into read-only
    /// memory, a GET from write-only memory).
    AccessDenied,
    /// The transfer is larger than the receiver accepts.
    TooLarge,
    /// The GET's target process is not reachable from the receiver.
    NoTarget,
    /// The receiver has no room for the transfer now: the sender holds
    /// all it may of the receiver's operation slots (transfers it has not
    /// taken whole yet), or every slot is in use. It may be tried again
    /// once earlier transfers end.
    Busy,
    /// A code this version does not know.
    Other(u8),
}

impl RejectCode {
    /// A short description for messages.
    pub const fn description(self) -> &'static str {
        match self {
            Self::BadHandle => "no registration with that handle",
            Self::OutOfBounds => "range outside the registration",
            Self::AccessDenied => "access denied by the registration",
            Self::TooLarge => "transfer too large",
            Self::NoTarget => "target process unreachable",
            Self::Busy => "no room for the transfer now",
            Self::Other(_) => "unknown code",
        }
    }
}

impl From<u8> for RejectCode {
    fn from(raw: u8) -> Self {
        match raw {
            1 => Self::BadHandle,
            2 => Self::OutOfBounds,
            3 => Self::AccessDenied,
            4 => Self::TooLarge,
            5 => Self::NoTarget,
            6 => Self::Busy,
            other => Self::Other(other),
        }
    }
}

impl From<RejectCode> for u8 {
    fn from(code: RejectCode) -> u8 {
        match code {
            RejectCode::BadHandle => 1,
            RejectCode::OutOfBounds => 2,
            RejectCode::AccessDenied => 3,
            RejectCode::TooLarge => 4,
            RejectCode::NoTarget => 5,
            RejectCode::Busy => 6,
            RejectCode::Other(raw) => raw,
        }
    }
}

impl fmt::Display for RejectCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(raw) => write!(f, "unknown code {raw}"),
            known => f.write_str(known.description()),
        }
    }
}

/// Only codes in their canonical form: `Other(1)` would be sent as 1 and
/// come back as `BadHandle`.
#[cfg(any(test, feature = "arbitrary"))]
impl<'a> arbitrary::Arbitrary<'a> for RejectCode {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Self::from(u8::arbitrary(u)?))
    }
}

/// A REJECT body: the initiator fails the transfer `xfer_id` with `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct RejectRepr {
    /// The refused transfer.
    pub xfer_id: u64,
    /// Why it was refused.
    pub code: RejectCode,
}

impl RejectRepr {
    /// Body length.
    pub const LEN: usize = 16;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a REJECT body.
    pub fn parse(body: &[u8; Self::LEN]) -> Result<Self, WireError> {
        let f = Fields(body);
        check_reserved(&f.bytes::<RESERVED, 7>(), "reject.reserved")?;
        Ok(Self {
            xfer_id: f.u64::<XFER_ID>(),
            code: f.u8::<CODE>().into(),
        })
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u64::<XFER_ID>(self.xfer_id);
        f.set_u8::<CODE>(self.code.into());
        f.set_bytes::<RESERVED, 7>([0; 7]);
    }
}
