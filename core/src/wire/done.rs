//! DONE (type 9): the GET `xfer_id` named a third process as its target,
//! and its data now lies in that process's memory.
//!
//! ```text
//!  0  u64  xfer_id   the GET, as its initiator numbered it
//! ```
//!
//! The process serving such a GET puts the data to the target and answers
//! the initiator with DONE once the target has acknowledged every packet,
//! or with REJECT when the target refused it or was lost. A GET whose
//! target is its initiator needs no DONE: the data itself arrives.

use super::field::{Fields, FieldsMut};

const XFER_ID: usize = 0;

/// A DONE body: the third-party GET `xfer_id` is complete at its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DoneRepr {
    /// The completed GET.
    pub xfer_id: u64,
}

impl DoneRepr {
    /// Body length.
    pub const LEN: usize = 8;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a DONE body; every value is valid.
    pub fn parse(body: &[u8; Self::LEN]) -> Self {
        Self {
            xfer_id: Fields(body).u64::<XFER_ID>(),
        }
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        FieldsMut(buf).set_u64::<XFER_ID>(self.xfer_id);
    }
}
