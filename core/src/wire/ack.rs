//! ACK (type 6): acknowledges reliable packets; the header's `ack` and
//! `credits` carry the cumulative part, the body a selective one.
//!
//! ```text
//!  0  u64  sack   bit i set: packet seq (ack + 1 + i) received
//! ```

use super::field::{Fields, FieldsMut};

const SACK: usize = 0;

/// An ACK body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct AckRepr {
    /// Selective acknowledgement, relative to the header's `ack`: bit `i`
    /// set means the reliable packet with sequence number `ack + 1 + i`
    /// has been received (packet `ack` itself is the first one missing).
    /// Lets a datagram sender retransmit only the holes.
    pub sack: u64,
}

impl AckRepr {
    /// Body length.
    pub const LEN: usize = 8;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes an ACK body; every bitmap is valid.
    pub fn parse(body: &[u8; Self::LEN]) -> Self {
        Self {
            sack: Fields(body).u64::<SACK>(),
        }
    }

    /// Whether the bitmap reports packet `seq` received, given the
    /// header's cumulative `ack`. Packets below `ack` are received by
    /// definition; `ack` itself and those beyond the 64-bit window are not
    /// reported.
    pub fn is_acked(&self, ack: u64, seq: u64) -> bool {
        if seq < ack {
            return true;
        }
        match seq.checked_sub(ack).and_then(|d| d.checked_sub(1)) {
            Some(bit) if bit < 64 => self.sack & (1 << bit) != 0,
            _ => false,
        }
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        FieldsMut(buf).set_u64::<SACK>(self.sack);
    }
}
