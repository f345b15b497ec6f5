//! NOTIFY (type 10): the PUT `xfer_id` asked for an event at its target,
//! as an RDMA write with immediate data does: its data lies in the
//! target's registration, and the target's upper layer is to be told.
//!
//! ```text
//!  0  u64  xfer_id   the PUT, as its sender numbered it
//!  8  u64  handle    the target's registration the PUT wrote
//! 16  u64  offset    where its data starts in it
//! 24  u64  len       bytes of data
//! 32  u64  imm       the sender's value, handed to the target's event
//! ```
//!
//! The sender numbers it after the PUT's last packet, so the target
//! delivers it after all of them. A NOTIFY spends a SEND credit (the
//! target's event takes a place as a message does) and is answered by the
//! target's acknowledgement like any reliable packet. A NOTIFY of a PUT
//! the target refused is dropped: the REJECT says what happened.

use super::field::{Fields, FieldsMut};

const XFER_ID: usize = 0;
const HANDLE: usize = 8;
const OFFSET: usize = 16;
const LEN: usize = 24;
const IMM: usize = 32;

/// A NOTIFY body: PUT `xfer_id` wrote `len` bytes at `offset` of the
/// registration `handle`, and its sender says `imm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct NotifyRepr {
    /// The PUT, as its sender numbered it.
    pub xfer_id: u64,
    /// Key of the target's registration the PUT wrote.
    pub handle: u64,
    /// Where its data starts in it.
    pub offset: u64,
    /// Bytes of data.
    pub len: u64,
    /// The sender's value for the target's event.
    pub imm: u64,
}

impl NotifyRepr {
    /// Body length.
    pub const LEN: usize = 40;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a NOTIFY body; every value is valid here (the target checks
    /// the range against its registration).
    pub fn parse(body: &[u8; Self::LEN]) -> Self {
        let f = Fields(body);
        Self {
            xfer_id: f.u64::<XFER_ID>(),
            handle: f.u64::<HANDLE>(),
            offset: f.u64::<OFFSET>(),
            len: f.u64::<LEN>(),
            imm: f.u64::<IMM>(),
        }
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u64::<XFER_ID>(self.xfer_id);
        f.set_u64::<HANDLE>(self.handle);
        f.set_u64::<OFFSET>(self.offset);
        f.set_u64::<LEN>(self.len);
        f.set_u64::<IMM>(self.imm);
    }
}
