//! SEND (type 3): an active message, dispatched by tag at the receiver.
//!
//! ```text
//!  0  u8      tag
//!  1  [u8;7]  reserved   0
//!  8  ..      payload    body_len - 8 bytes
//! ```

use super::WireError;
use super::field::{Fields, FieldsMut, check_reserved};

const TAG: usize = 0;
const RESERVED: usize = 1;

/// The fixed fields of a SEND body; the payload follows them.
///
/// The payload is not part of this struct so that a reader can decode the
/// fixed fields from scratch space and receive the payload straight into
/// the buffer its tag selects; [`PacketRepr::Send`](super::PacketRepr::Send)
/// pairs the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SendRepr {
    /// The active-message tag that selects the receiver's handler.
    pub tag: u8,
}

impl SendRepr {
    /// Length of the fixed fields; the payload starts here.
    pub const LEN: usize = 8;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes the fixed fields.
    pub fn parse(fixed: &[u8; Self::LEN]) -> Result<Self, WireError> {
        let f = Fields(fixed);
        check_reserved(&f.bytes::<RESERVED, 7>(), "send.reserved")?;
        Ok(Self { tag: f.u8::<TAG>() })
    }

    /// Writes the fixed fields.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u8::<TAG>(self.tag);
        f.set_bytes::<RESERVED, 7>([0; 7]);
    }
}
