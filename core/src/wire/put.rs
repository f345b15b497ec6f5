//! PUT (type 4): one packet of a bulk transfer into a registered region of
//! the receiver.
//!
//! ```text
//!  0  u64  xfer_id     the transfer this packet belongs to
//!  8  u64  handle      target registration key
//! 16  u64  offset      into that registration
//! 24  u64  total_len   of the whole transfer
//! 32  u32  index       packet index within the transfer
//! 36  u32  count       packets in the transfer
//! 40  ..   data        body_len - 40 bytes
//! ```
//!
//! Each packet says where its data goes, so packets of a transfer may
//! arrive in any order (over several links, or datagrams); the receiver
//! knows the transfer is complete when it has counted `count` packets.

use super::WireError;
use super::field::{Fields, FieldsMut};

const XFER_ID: usize = 0;
const HANDLE: usize = 8;
const OFFSET: usize = 16;
const TOTAL_LEN: usize = 24;
const INDEX: usize = 32;
const COUNT: usize = 36;

/// The fixed fields of a PUT body; the data follows them.
///
/// As with [`SendRepr`](super::SendRepr), the data is kept apart so that a
/// reader can look up the target registration from these fields and then
/// receive the data straight into it; [`PacketRepr::Put`](super::PacketRepr::Put)
/// pairs the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PutRepr {
    /// The transfer this packet belongs to, chosen by the initiator.
    pub xfer_id: u64,
    /// Key of the receiver's registration the data goes into.
    pub handle: u64,
    /// Where in that registration this packet's data goes.
    pub offset: u64,
    /// Length of the whole transfer, in bytes.
    pub total_len: u64,
    /// This packet's index within the transfer, below `count`.
    pub index: u32,
    /// Packets in the transfer, at least 1.
    pub count: u32,
}

impl PutRepr {
    /// Length of the fixed fields; the data starts here.
    pub const LEN: usize = 40;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes the fixed fields of a PUT whose data is `data_len` bytes
    /// long and checks them against it. Whether the target registration
    /// exists and holds `offset..offset + data_len` is for the engine.
    pub fn parse(fixed: &[u8; Self::LEN], data_len: u64) -> Result<Self, WireError> {
        let f = Fields(fixed);
        let repr = Self {
            xfer_id: f.u64::<XFER_ID>(),
            handle: f.u64::<HANDLE>(),
            offset: f.u64::<OFFSET>(),
            total_len: f.u64::<TOTAL_LEN>(),
            index: f.u32::<INDEX>(),
            count: f.u32::<COUNT>(),
        };
        repr.check(data_len)?;
        Ok(repr)
    }

    /// Checks that a packet with `data_len` bytes of data is consistent:
    /// `index < count` (so `count >= 1`), the data no longer than the whole
    /// transfer, and `offset + data_len` within 64 bits.
    pub fn check(&self, data_len: u64) -> Result<(), WireError> {
        if self.index >= self.count {
            return Err(WireError::BadIndex {
                index: self.index,
                count: self.count,
            });
        }
        if data_len > self.total_len {
            return Err(WireError::DataExceedsTotal {
                len: data_len,
                total: self.total_len,
            });
        }
        self.end(data_len).map(|_| ())
    }

    /// The end of this packet's data in the target registration,
    /// `offset + data_len`, or [`WireError::OffsetOverflow`].
    pub fn end(&self, data_len: u64) -> Result<u64, WireError> {
        self.offset
            .checked_add(data_len)
            .ok_or(WireError::OffsetOverflow {
                offset: self.offset,
                len: data_len,
            })
    }

    /// Writes the fixed fields.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u64::<XFER_ID>(self.xfer_id);
        f.set_u64::<HANDLE>(self.handle);
        f.set_u64::<OFFSET>(self.offset);
        f.set_u64::<TOTAL_LEN>(self.total_len);
        f.set_u32::<INDEX>(self.index);
        f.set_u32::<COUNT>(self.count);
    }
}
