//! HELLO_ACK (type 2): answers the peer's HELLO with proof of the job key.
//!
//! ```text
//!  0  [u8;32]  proof   HMAC-SHA256 (see `proof`), zeros without a key
//! ```

use super::PROOF_LEN;

/// A HELLO_ACK body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct HelloAckRepr {
    /// [`hello_proof`](super::hello_proof) of the two HELLOs under the
    /// sender's job key; all zeros when the sender has none.
    pub proof: [u8; PROOF_LEN],
}

impl HelloAckRepr {
    /// Body length.
    pub const LEN: usize = PROOF_LEN;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a HELLO_ACK body. Any proof decodes; whether it is right is
    /// for [`verify_proof`](super::verify_proof) to say.
    pub fn parse(body: &[u8; Self::LEN]) -> Self {
        Self { proof: *body }
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        *buf = self.proof;
    }
}
