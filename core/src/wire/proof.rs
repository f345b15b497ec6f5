//! The job-key proof a HELLO_ACK carries.
//!
//! Processes of one job share a secret job key (handed out by the launcher).
//! Each side answers the peer's HELLO with
//!
//! ```text
//! proof = HMAC-SHA256(job_key, "btl-hello-ack-v1"
//!                     || sender job (u64 BE) || sender rank (u32 BE)
//!                     || receiver job        || receiver rank
//!                     || receiver's nonce    || sender's nonce
//!                     || receiver's epoch (u64 BE) || sender's epoch)
//! ```
//!
//! where the sender is the side sending the HELLO_ACK and the receiver the
//! side whose HELLO it answers. Only a holder of the key can compute it;
//! the receiver's fresh nonce stops replays from other connections, the
//! epochs bind the proof to these two starts of the processes, and the
//! fixed order of the fields stops a proof being reflected back to the
//! process that asked for it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{Capabilities, HelloRepr, WireError};

/// Bytes of a proof: one SHA-256 output.
pub const PROOF_LEN: usize = 32;

/// Domain-separation prefix of the proof's input, so that an HMAC the key
/// makes for any other purpose is never a valid proof. The `v1` changes
/// with the proof's layout.
pub const PROOF_CONTEXT: &[u8; 16] = b"btl-hello-ack-v1";

/// The proof the sender of a HELLO_ACK computes under its job `key`:
/// `sender` is its own HELLO, `receiver` the peer's HELLO it answers.
pub fn hello_proof(key: &[u8], sender: &HelloRepr, receiver: &HelloRepr) -> [u8; PROOF_LEN] {
    // HMAC takes keys of any length, so `mac` is never `None`; were it to
    // be, the all-zero proof is refused by every keyed peer.
    mac(key, sender, receiver).map_or([0; PROOF_LEN], |mac| mac.finalize().into_bytes().into())
}

/// Checks the `proof` in a HELLO_ACK from the peer whose HELLO was `sender`,
/// answering this side's HELLO `receiver`, given this side's job `key`.
///
/// Whether the peer has a key is what its HELLO says
/// ([`Capabilities::JOB_KEY`]). Without a key on either side there is
/// nothing to check; with a key on one side only, the peers cannot
/// authenticate each other and the handshake fails with
/// [`WireError::KeyMismatch`]; with keys on both sides, the proof must be
/// the HMAC under this side's key, compared in constant time, else
/// [`WireError::BadProof`].
pub fn verify_proof(
    key: Option<&[u8]>,
    proof: &[u8; PROOF_LEN],
    sender: &HelloRepr,
    receiver: &HelloRepr,
) -> Result<(), WireError> {
    let peer_has_key = sender.capabilities.contains(Capabilities::JOB_KEY);
    match (key, peer_has_key) {
        (None, false) => Ok(()),
        (Some(_), false) => Err(WireError::KeyMismatch {
            local_has_key: true,
        }),
        (None, true) => Err(WireError::KeyMismatch {
            local_has_key: false,
        }),
        (Some(key), true) => mac(key, sender, receiver)
            .ok_or(WireError::BadProof)?
            .verify_slice(proof)
            .map_err(|_| WireError::BadProof),
    }
}

fn mac(key: &[u8], sender: &HelloRepr, receiver: &HelloRepr) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(PROOF_CONTEXT);
    mac.update(&sender.job.to_be_bytes());
    mac.update(&sender.rank.to_be_bytes());
    mac.update(&receiver.job.to_be_bytes());
    mac.update(&receiver.rank.to_be_bytes());
    mac.update(&receiver.nonce);
    mac.update(&sender.nonce);
    mac.update(&receiver.epoch.to_be_bytes());
    mac.update(&sender.epoch.to_be_bytes());
    Some(mac)
}
