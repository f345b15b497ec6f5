//! The seal on every datagram between two keyed processes (since minor
//! version 4).
//!
//! Over datagrams anyone who can send a packet can send it from a peer's
//! address, and a receiver cannot tell it from the peer's own: a forged
//! CLOSE would end the link, a forged acknowledgement or credit total
//! corrupt its state, a forged SEND be delivered. Once a handshake between
//! two processes that hold the job key has opened a datagram link, each
//! side therefore seals every datagram it sends to the other, and the
//! other takes none that is not sealed (the handshake's own packets
//! excepted: a HELLO, HELLO_ACK or COOKIE changes nothing on an open link
//! but what the engine doubts first). A sealed frame has
//! [`Flags::SEALED`](super::Flags::SEALED) in its header and ends with the
//! seal, after the body and the CRC32C trailer if there is one:
//!
//! ```text
//!  0          header (32 bytes, flags bit 2 set)
//! 32          body: fixed fields, then payload (SEND, PUT)
//! 32+body     CRC32C trailer, with Flags::CHECKSUM (4 bytes)
//! end-16      [u8;16]  seal = BLAKE3-keyed(sender's key, header || fixed fields)[..16]
//! ```
//!
//! The seal covers the header and the body's fixed fields: the whole of
//! every packet without payload, and of a SEND or PUT everything but its
//! data (the sequence number, acknowledgement, credits, tag, transfer,
//! handle, offset and length are all there). Its cost is then the same
//! small one for every packet, whatever its size: sealing the data as
//! well made a keyed UDP link three times slower at 64 KiB and more.
//!
//! Each direction has its own key, which both sides derive from the job
//! key and the two processes' starts when the link opens:
//!
//! ```text
//! key(S -> R) = HMAC-SHA256(job_key, "btl-seal-key-v1\0"
//!                           || S.job (u64 BE) || S.rank (u32 BE) || S.epoch (u64 BE)
//!                           || R.job          || R.rank          || R.epoch)
//! ```
//!
//! Only holders of the job key can compute it; the epochs make it another
//! key for every pair of starts, so nothing sealed for an earlier start is
//! taken by a later one; the order of sender and receiver makes a sealed
//! packet reflected back to its sender fail.
//!
//! The seal guards against those who can send but not see the traffic (a
//! forged source address): they cannot make a single packet the receiver
//! takes. It does not hide the bytes, nor guard the data of a SEND or PUT
//! against someone on the path who sees the packets and rewrites them (a
//! CRC32C trailer, when negotiated, catches damage, not intent); such a
//! network needs an encrypted tunnel under btl.

use blake3::Hasher;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{Flags, HEADER_LEN, Header, PacketType, WireError};

/// Bytes of a seal.
pub const SEAL_LEN: usize = 16;

/// Domain-separation prefix of a sealing key's derivation, so that no
/// other HMAC the job key makes (a handshake proof, a cookie) is ever a
/// sealing key.
pub const SEAL_KEY_CONTEXT: &[u8; 16] = b"btl-seal-key-v1\0";

/// One start of one process, as a sealing key names it: the HELLO's job,
/// rank and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// The process's job.
    pub job: u64,
    /// Its rank.
    pub rank: u32,
    /// This start of it ([`HelloRepr::epoch`](super::HelloRepr::epoch)).
    pub epoch: u64,
}

/// The two sealing keys of one pair of keyed processes: the one this side
/// seals with, and the one the peer's datagrams are checked with.
#[derive(Clone, PartialEq, Eq)]
pub struct Seal {
    outgoing: [u8; 32],
    incoming: [u8; 32],
}

impl core::fmt::Debug for Seal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Seal(..)")
    }
}

impl Seal {
    /// The keys between this start `me` and the peer's start `peer`, both
    /// holding `job_key`.
    pub fn derive(job_key: &[u8], me: Start, peer: Start) -> Self {
        Seal {
            outgoing: key(job_key, me, peer),
            incoming: key(job_key, peer, me),
        }
    }

    /// The seal of a frame this side sends whose header and fixed fields
    /// are `prefix` (what [`emit_prefix`](super::emit_prefix) writes).
    pub fn tag(&self, prefix: &[u8]) -> [u8; SEAL_LEN] {
        tag(&self.outgoing, prefix)
    }

    /// Writes the seal of `frame` into its last [`SEAL_LEN`] bytes: for a
    /// whole frame [`emit`](super::emit) wrote with [`Flags::SEALED`],
    /// which leaves them zero. A frame too short to hold its header, fixed
    /// fields and a seal is left as it is.
    pub fn seal_frame(&self, frame: &mut [u8]) {
        let Some(covered) = covered_len(frame) else {
            return;
        };
        let Some(at) = frame
            .len()
            .checked_sub(SEAL_LEN)
            .filter(|&at| at >= covered)
        else {
            return;
        };
        let seal = self.tag(&frame[..covered]);
        frame[at..].copy_from_slice(&seal);
    }

    /// Checks a datagram from the peer: its header says
    /// [`Flags::SEALED`] and its last [`SEAL_LEN`] bytes are the seal of
    /// its header and fixed fields under the peer's key, compared in
    /// constant time. Else [`WireError::BadSeal`]: a datagram someone else
    /// sent from the peer's address, or one damaged on the way.
    pub fn check(&self, datagram: &[u8]) -> Result<(), WireError> {
        let sealed =
            Header::new_checked(datagram).is_ok_and(|h| h.flags_raw() & Flags::SEALED.bits() != 0);
        let covered = covered_len(datagram).ok_or(WireError::BadSeal)?;
        let at = datagram.len().saturating_sub(SEAL_LEN);
        if !sealed || at < covered {
            return Err(WireError::BadSeal);
        }
        let expected = tag(&self.incoming, &datagram[..covered]);
        let differ = expected
            .iter()
            .zip(&datagram[at..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if differ == 0 {
            Ok(())
        } else {
            Err(WireError::BadSeal)
        }
    }
}

/// Bytes of `frame` the seal covers: its header and the fixed fields of
/// the type its header names; `None` for a frame with no known type.
fn covered_len(frame: &[u8]) -> Option<usize> {
    let header = Header::new_checked(frame).ok()?;
    let packet_type = PacketType::from_u8(header.type_raw())?;
    Some(HEADER_LEN + packet_type.fixed_body_len())
}

fn key(job_key: &[u8], sender: Start, receiver: Start) -> [u8; 32] {
    // HMAC takes keys of any length, so this never fails; were it to, the
    // all-zero key seals what no peer with the job key accepts.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(job_key) else {
        return [0; 32];
    };
    mac.update(SEAL_KEY_CONTEXT);
    for start in [sender, receiver] {
        mac.update(&start.job.to_be_bytes());
        mac.update(&start.rank.to_be_bytes());
        mac.update(&start.epoch.to_be_bytes());
    }
    mac.finalize().into_bytes().into()
}

fn tag(key: &[u8; 32], prefix: &[u8]) -> [u8; SEAL_LEN] {
    let mut hasher = Hasher::new_keyed(key);
    hasher.update(prefix);
    let mut seal = [0; SEAL_LEN];
    seal.copy_from_slice(&hasher.finalize().as_bytes()[..SEAL_LEN]);
    seal
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AckRepr, HeaderRepr, PacketRepr, emit};

    const A: Start = Start {
        job: 7,
        rank: 0,
        epoch: 1,
    };
    const B: Start = Start {
        job: 7,
        rank: 1,
        epoch: 2,
    };

    /// An ACK from A to B, sealed by `seal`, with a CRC trailer if
    /// `checksum`.
    fn sealed_ack(seal: &Seal, checksum: bool) -> std::vec::Vec<u8> {
        let packet = PacketRepr::Ack(AckRepr { sack: 3 });
        let mut flags = Flags::SEALED;
        flags.set(Flags::CHECKSUM, checksum);
        let header = HeaderRepr {
            flags,
            ack: 9,
            ..HeaderRepr::new(&packet)
        };
        let mut frame = std::vec![0; header.frame_len().expect("a length")];
        emit(&header, &packet, &mut frame).expect("an ACK frame");
        seal.seal_frame(&mut frame);
        frame
    }

    #[test]
    fn only_the_peer_takes_what_a_side_sealed() {
        let (a, b) = (Seal::derive(b"key", A, B), Seal::derive(b"key", B, A));
        for checksum in [false, true] {
            let frame = sealed_ack(&a, checksum);
            assert_eq!(b.check(&frame), Ok(()), "B takes A's frame");
            assert_eq!(a.check(&frame), Err(WireError::BadSeal), "not reflected");
            let other_key = Seal::derive(b"another job", B, A);
            assert_eq!(other_key.check(&frame), Err(WireError::BadSeal));
            let later_start = Seal::derive(b"key", B, Start { epoch: 3, ..A });
            assert_eq!(
                later_start.check(&frame),
                Err(WireError::BadSeal),
                "a seal of an earlier start is not taken"
            );
        }
    }

    #[test]
    fn any_change_to_what_it_covers_breaks_the_seal() {
        let (a, b) = (Seal::derive(b"key", A, B), Seal::derive(b"key", B, A));
        let frame = sealed_ack(&a, true);
        let trailer = frame.len() - SEAL_LEN - crate::wire::CHECKSUM_LEN;
        for at in (0..trailer).chain(frame.len() - SEAL_LEN..frame.len()) {
            let mut changed = frame.clone();
            changed[at] ^= 0x01;
            assert_eq!(b.check(&changed), Err(WireError::BadSeal), "byte {at}");
        }
        assert_eq!(
            b.check(&frame[..frame.len() - 1]),
            Err(WireError::BadSeal),
            "cut short"
        );
        let mut unsealed = frame.clone();
        unsealed[1] &= !Flags::SEALED.bits();
        assert_eq!(b.check(&unsealed), Err(WireError::BadSeal), "no flag");
        assert_eq!(b.check(&frame[..20]), Err(WireError::BadSeal), "no header");
        let mut unknown = frame.clone();
        unknown[0] = 0x7f;
        assert_eq!(b.check(&unknown), Err(WireError::BadSeal), "no such type");
    }

    /// A SEND's data is not sealed (the CRC, when negotiated, catches its
    /// damage): its header and tag are.
    #[test]
    fn a_send_is_sealed_up_to_its_data() {
        let (a, b) = (Seal::derive(b"key", A, B), Seal::derive(b"key", B, A));
        let packet = PacketRepr::Send {
            send: crate::wire::SendRepr { tag: 5 },
            payload: b"data",
        };
        let header = HeaderRepr {
            flags: Flags::SEALED,
            seq: 3,
            ..HeaderRepr::new(&packet)
        };
        let mut frame = std::vec![0; header.frame_len().expect("a length")];
        emit(&header, &packet, &mut frame).expect("a SEND frame");
        a.seal_frame(&mut frame);
        assert_eq!(b.check(&frame), Ok(()));
        let tag = HEADER_LEN + 7;
        let mut retagged = frame.clone();
        retagged[tag] ^= 1;
        assert_eq!(b.check(&retagged), Err(WireError::BadSeal), "the tag is");
        let mut data = frame.clone();
        data[HEADER_LEN + 8] ^= 1;
        assert_eq!(b.check(&data), Ok(()), "the data is not");
    }
}
