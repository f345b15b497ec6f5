//! GET (type 5): asks the receiver to PUT part of one of its registrations
//! to a process, itself or a third one (as Motr allows).
//!
//! ```text
//!  0  u64  xfer_id      the transfer, echoed in the PUTs and any REJECT
//!  8  u64  src_handle   receiver's registration to read
//! 16  u64  src_offset   into it
//! 24  u64  len          bytes to move
//! 32  u64  target_job   process to PUT to
//! 40  u32  target_rank
//! 44  u32  reserved     0
//! 48  u64  dst_handle   target's registration to write
//! 56  u64  dst_offset   into it
//! ```

use super::WireError;
use super::field::{Fields, FieldsMut, check_reserved};

const XFER_ID: usize = 0;
const SRC_HANDLE: usize = 8;
const SRC_OFFSET: usize = 16;
const LEN: usize = 24;
const TARGET_JOB: usize = 32;
const TARGET_RANK: usize = 40;
const RESERVED: usize = 44;
const DST_HANDLE: usize = 48;
const DST_OFFSET: usize = 56;

/// A GET body: "PUT `len` bytes of your registration `src_handle` at
/// `src_offset` to process (`target_job`, `target_rank`), into its
/// registration `dst_handle` at `dst_offset`".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct GetRepr {
    /// The transfer, chosen by the initiator.
    pub xfer_id: u64,
    /// Key of the receiver's registration to read from.
    pub src_handle: u64,
    /// Where in it to start.
    pub src_offset: u64,
    /// Bytes to move.
    pub len: u64,
    /// Job of the process to PUT the data to.
    pub target_job: u64,
    /// Rank of the process to PUT the data to.
    pub target_rank: u32,
    /// Key of the target's registration to write into.
    pub dst_handle: u64,
    /// Where in it to start.
    pub dst_offset: u64,
}

impl GetRepr {
    /// Body length.
    pub const LEN: usize = 64;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a GET body and checks that neither range overflows 64 bits.
    /// Whether the registrations exist and hold the ranges is for the
    /// engines at both ends.
    pub fn parse(body: &[u8; Self::LEN]) -> Result<Self, WireError> {
        let f = Fields(body);
        check_reserved(&f.bytes::<RESERVED, 4>(), "get.reserved")?;
        let repr = Self {
            xfer_id: f.u64::<XFER_ID>(),
            src_handle: f.u64::<SRC_HANDLE>(),
            src_offset: f.u64::<SRC_OFFSET>(),
            len: f.u64::<LEN>(),
            target_job: f.u64::<TARGET_JOB>(),
            target_rank: f.u32::<TARGET_RANK>(),
            dst_handle: f.u64::<DST_HANDLE>(),
            dst_offset: f.u64::<DST_OFFSET>(),
        };
        repr.src_end()?;
        repr.dst_end()?;
        Ok(repr)
    }

    /// `src_offset + len`, or [`WireError::OffsetOverflow`].
    pub fn src_end(&self) -> Result<u64, WireError> {
        end(self.src_offset, self.len)
    }

    /// `dst_offset + len`, or [`WireError::OffsetOverflow`].
    pub fn dst_end(&self) -> Result<u64, WireError> {
        end(self.dst_offset, self.len)
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u64::<XFER_ID>(self.xfer_id);
        f.set_u64::<SRC_HANDLE>(self.src_handle);
        f.set_u64::<SRC_OFFSET>(self.src_offset);
        f.set_u64::<LEN>(self.len);
        f.set_u64::<TARGET_JOB>(self.target_job);
        f.set_u32::<TARGET_RANK>(self.target_rank);
        f.set_u32::<RESERVED>(0);
        f.set_u64::<DST_HANDLE>(self.dst_handle);
        f.set_u64::<DST_OFFSET>(self.dst_offset);
    }
}

fn end(offset: u64, len: u64) -> Result<u64, WireError> {
    offset
        .checked_add(len)
        .ok_or(WireError::OffsetOverflow { offset, len })
}
