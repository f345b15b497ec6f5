//! The handshake of one link: both sides send a HELLO, and each answers the
//! peer's HELLO with a HELLO_ACK whose proof shows it holds the job key.
//!
//! A link is open when this side has sent its HELLO and its HELLO_ACK and
//! has verified the peer's HELLO_ACK. A peer speaking another major
//! version, holding another key, holding a key when this side has none (or
//! the reverse), or sending anything out of order fails the handshake with a
//! [`HandshakeError`] that says which CLOSE reason to send before dropping
//! the link.

use core::fmt;

use crate::endpoint::ProcName;
use crate::wire::{
    Capabilities, CloseReason, HelloAckRepr, HelloRepr, NONCE_LEN, Seal, Start, VERSION_MINOR,
    WireError, hello_proof, verify_proof,
};

use super::packet::Trailers;

/// What this side announces in its HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalHello {
    /// This process.
    pub me: ProcName,
    /// Which of this side's links to the peer the connection is.
    pub link_index: u16,
    /// Fresh random bytes from the driver (the core has no randomness).
    pub nonce: [u8; NONCE_LEN],
    /// Whether this side wants CRC32C trailers.
    pub checksum: bool,
    /// Whether this side holds a job key.
    pub keyed: bool,
    /// The largest body this side accepts.
    pub max_body: u64,
    /// SEND credits granted to the peer to start with.
    pub initial_credits: u32,
    /// This start of the process (see [`HelloRepr::epoch`]).
    pub epoch: u64,
}

impl LocalHello {
    /// The HELLO packet body.
    pub fn repr(&self) -> HelloRepr {
        let mut capabilities = Capabilities::empty();
        capabilities.set(Capabilities::CRC32C, self.checksum);
        capabilities.set(Capabilities::JOB_KEY, self.keyed);
        HelloRepr {
            version_minor: VERSION_MINOR,
            link_index: self.link_index,
            job: self.me.job,
            rank: self.me.rank,
            capabilities,
            nonce: self.nonce,
            max_body: self.max_body,
            initial_credits: self.initial_credits,
            epoch: self.epoch,
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer's packet was refused by the wire layer or the proof check
    /// (another version, a bad proof, a key on one side only).
    Wire(WireError),
    /// The peer sent a packet the handshake does not expect now (a second
    /// HELLO, a HELLO_ACK before its HELLO, data before the handshake ends).
    OutOfOrder,
    /// The peer is not the process this side connected to.
    UnexpectedPeer {
        /// The process this side expected.
        expected: ProcName,
        /// The process the HELLO named.
        found: ProcName,
    },
    /// The peer claims to be this very process.
    SelfConnection,
    /// The peer announces a name of [`ProcName::UNNAMED_JOB`], which
    /// stands for peers not yet named and is no process's own.
    ReservedName,
}

impl HandshakeError {
    /// The CLOSE reason to send before dropping the link.
    pub fn close_reason(&self) -> CloseReason {
        match self {
            HandshakeError::Wire(e) => e.close_reason(),
            _ => CloseReason::ProtocolError,
        }
    }
}

impl From<WireError> for HandshakeError {
    fn from(e: WireError) -> Self {
        HandshakeError::Wire(e)
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Wire(e) => write!(f, "handshake refused: {e}"),
            HandshakeError::OutOfOrder => f.write_str("handshake packet out of order"),
            HandshakeError::UnexpectedPeer { expected, found } => {
                write!(f, "connected to process {found}, expected {expected}")
            }
            HandshakeError::SelfConnection => f.write_str("the peer claims to be this process"),
            HandshakeError::ReservedName => {
                f.write_str("the peer announces a name of the job reserved for unnamed peers")
            }
        }
    }
}

impl core::error::Error for HandshakeError {}

/// A handshake packet to send next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakePacket {
    /// This side's HELLO.
    Hello(HelloRepr),
    /// The answer to the peer's HELLO.
    HelloAck(HelloAckRepr),
}

/// The handshake state of one link.
#[derive(Debug, Clone)]
pub struct Handshake {
    local: HelloRepr,
    me: ProcName,
    expected: Option<ProcName>,
    peer: Option<HelloRepr>,
    sent_hello: bool,
    sent_ack: bool,
    verified: bool,
}

impl Handshake {
    /// A handshake announcing `local`; `expected` is the process an
    /// outgoing link was opened to (`None` for an accepted link, whose peer
    /// is learned from its HELLO).
    pub fn new(local: &LocalHello, expected: Option<ProcName>) -> Self {
        Handshake {
            local: local.repr(),
            me: local.me,
            expected,
            peer: None,
            sent_hello: false,
            sent_ack: false,
            verified: false,
        }
    }

    /// The next handshake packet to send, if any; `key` is this side's job
    /// key. Call until `None` after every received packet.
    pub fn poll_send(&mut self, key: Option<&[u8]>) -> Option<HandshakePacket> {
        if !self.sent_hello {
            self.sent_hello = true;
            return Some(HandshakePacket::Hello(self.local));
        }
        match (&self.peer, self.sent_ack) {
            (Some(peer), false) => {
                self.sent_ack = true;
                let proof = key.map_or([0; 32], |k| hello_proof(k, &self.local, peer));
                Some(HandshakePacket::HelloAck(HelloAckRepr { proof }))
            }
            _ => None,
        }
    }

    /// Takes the peer's HELLO.
    pub fn on_hello(&mut self, hello: HelloRepr) -> Result<ProcName, HandshakeError> {
        if self.peer.is_some() {
            return Err(HandshakeError::OutOfOrder);
        }
        let found = ProcName::new(hello.job, hello.rank);
        if found == self.me {
            return Err(HandshakeError::SelfConnection);
        }
        if found.is_unnamed() {
            return Err(HandshakeError::ReservedName);
        }
        if let Some(expected) = self.expected
            && expected != found
        {
            return Err(HandshakeError::UnexpectedPeer { expected, found });
        }
        // A key on one side only cannot end well: refused now, not after
        // the HELLO_ACK that would never prove anything.
        let job_key = Capabilities::JOB_KEY;
        let local_has_key = self.local.capabilities.contains(job_key);
        if hello.capabilities.contains(job_key) != local_has_key {
            return Err(WireError::KeyMismatch { local_has_key }.into());
        }
        self.peer = Some(hello);
        Ok(found)
    }

    /// Takes the peer's HELLO_ACK and checks its proof with this side's key.
    pub fn on_hello_ack(
        &mut self,
        ack: &HelloAckRepr,
        key: Option<&[u8]>,
    ) -> Result<(), HandshakeError> {
        let peer = self.peer.as_ref().ok_or(HandshakeError::OutOfOrder)?;
        if self.verified || !self.sent_hello {
            return Err(HandshakeError::OutOfOrder);
        }
        verify_proof(key, &ack.proof, peer, &self.local)?;
        self.verified = true;
        Ok(())
    }

    /// Over datagrams, where handshake packets may be lost: sends the
    /// HELLO again, and the HELLO_ACK if it had gone out.
    pub fn repeat(&mut self) {
        self.sent_hello = false;
        self.sent_ack = false;
    }

    /// Over datagrams: sends the HELLO_ACK again (the peer repeated its
    /// HELLO, so it has not verified this side yet), if it had gone out.
    pub fn repeat_ack(&mut self) {
        self.sent_ack = false;
    }

    /// Whether the peer's HELLO_ACK has been verified.
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    /// True once both HELLO_ACKs have gone their way and the peer's proof
    /// checked out: data may flow.
    pub fn is_complete(&self) -> bool {
        self.sent_hello && self.sent_ack && self.verified
    }

    /// The peer's HELLO, once received.
    pub fn peer(&self) -> Option<&HelloRepr> {
        self.peer.as_ref()
    }

    /// The peer's process, once its HELLO arrived.
    pub fn peer_name(&self) -> Option<ProcName> {
        self.peer.map(|h| ProcName::new(h.job, h.rank))
    }

    /// Whether both sides asked for CRC32C trailers: only then are they used.
    pub fn checksum(&self) -> bool {
        self.local.capabilities.contains(Capabilities::CRC32C)
            && self
                .peer
                .is_some_and(|p| p.capabilities.contains(Capabilities::CRC32C))
    }

    /// The trailers of the link this handshake opens: a CRC32C if both
    /// asked, and over `datagrams`, between two holders of the job `key`
    /// that both speak minor version [`SEALS_SINCE`] or later, the seal.
    pub fn trailers(&self, key: Option<&[u8]>, datagrams: bool) -> Trailers {
        let start = |h: &HelloRepr| Start {
            job: h.job,
            rank: h.rank,
            epoch: h.epoch,
        };
        let seal = match (key, &self.peer) {
            (Some(key), Some(peer))
                if datagrams
                    && self.verified
                    && peer.capabilities.contains(Capabilities::JOB_KEY)
                    && peer.version_minor >= SEALS_SINCE =>
            {
                Some(Seal::derive(key, start(&self.local), start(peer)))
            }
            _ => None,
        };
        Trailers {
            checksum: self.checksum(),
            seal,
        }
    }
}

/// The minor protocol version that brought the seal.
pub const SEALS_SINCE: u8 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    const A: ProcName = ProcName::new(7, 0);
    const B: ProcName = ProcName::new(7, 1);

    fn local(me: ProcName, nonce: u8, keyed: bool, checksum: bool) -> LocalHello {
        LocalHello {
            me,
            link_index: 0,
            nonce: [nonce; NONCE_LEN],
            checksum,
            keyed,
            max_body: 1 << 20,
            initial_credits: 8,
            epoch: u64::from(nonce),
        }
    }

    /// Runs both sides to completion, like two ends of a stream; returns the
    /// first error either side reports.
    fn run(
        a: &mut Handshake,
        a_key: Option<&[u8]>,
        b: &mut Handshake,
        b_key: Option<&[u8]>,
    ) -> Result<(), HandshakeError> {
        for _ in 0..4 {
            while let Some(p) = a.poll_send(a_key) {
                deliver(p, b, b_key)?;
            }
            while let Some(p) = b.poll_send(b_key) {
                deliver(p, a, a_key)?;
            }
        }
        Ok(())
    }

    fn deliver(
        p: HandshakePacket,
        to: &mut Handshake,
        key: Option<&[u8]>,
    ) -> Result<(), HandshakeError> {
        match p {
            HandshakePacket::Hello(h) => to.on_hello(h).map(|_| ()),
            HandshakePacket::HelloAck(ack) => to.on_hello_ack(&ack, key),
        }
    }

    #[test]
    fn keyed_peers_complete_and_learn_each_other() {
        let key: &[u8] = b"job secret";
        let mut a = Handshake::new(&local(A, 1, true, true), Some(B));
        let mut b = Handshake::new(&local(B, 2, true, false), None);
        run(&mut a, Some(key), &mut b, Some(key)).expect("handshake");
        assert!(a.is_complete() && b.is_complete());
        assert_eq!((a.peer_name(), b.peer_name()), (Some(B), Some(A)));
        assert!(!a.checksum() && !b.checksum(), "CRC only when both ask");
    }

    #[test]
    fn unkeyed_peers_skip_the_proof() {
        let mut a = Handshake::new(&local(A, 1, false, true), Some(B));
        let mut b = Handshake::new(&local(B, 2, false, true), None);
        run(&mut a, None, &mut b, None).expect("handshake");
        assert!(a.is_complete() && b.is_complete() && a.checksum());
    }

    #[test]
    fn a_wrong_key_fails_with_auth_failed() {
        let mut a = Handshake::new(&local(A, 1, true, false), Some(B));
        let mut b = Handshake::new(&local(B, 2, true, false), None);
        let err = run(&mut a, Some(b"one"), &mut b, Some(b"two")).expect_err("refused");
        assert_eq!(err, HandshakeError::Wire(WireError::BadProof));
        assert_eq!(err.close_reason(), CloseReason::AuthFailed);
        assert!(!a.is_complete() || !b.is_complete());
    }

    #[test]
    fn a_key_on_one_side_only_fails() {
        let mut a = Handshake::new(&local(A, 1, true, false), Some(B));
        let mut b = Handshake::new(&local(B, 2, false, false), None);
        let err = run(&mut a, Some(b"k"), &mut b, None).expect_err("refused");
        assert_eq!(err.close_reason(), CloseReason::AuthFailed);
        // At the first HELLO, without waiting for a proof that cannot come.
        assert_eq!(
            err,
            HandshakeError::Wire(WireError::KeyMismatch {
                local_has_key: false
            })
        );
        assert!(a.peer().is_none() && b.peer().is_none());
    }

    #[test]
    fn a_proof_for_another_link_is_refused() {
        // A HELLO_ACK recorded on one connection does not open another: the
        // proof covers both nonces.
        let key: &[u8] = b"k";
        let mut a = Handshake::new(&local(A, 1, true, false), Some(B));
        let mut b = Handshake::new(&local(B, 2, true, false), None);
        run(&mut a, Some(key), &mut b, Some(key)).expect("first link");
        let recorded = hello_proof(
            key,
            &local(B, 2, true, false).repr(),
            &local(A, 1, true, false).repr(),
        );

        let mut a2 = Handshake::new(&local(A, 3, true, false), Some(B));
        let hello_b = local(B, 2, true, false).repr();
        let _ = a2.poll_send(Some(key));
        a2.on_hello(hello_b).expect("hello");
        let err = a2
            .on_hello_ack(&HelloAckRepr { proof: recorded }, Some(key))
            .expect_err("replay");
        assert_eq!(err, HandshakeError::Wire(WireError::BadProof));
    }

    #[test]
    fn out_of_order_and_wrong_peers_are_refused() {
        let mut a = Handshake::new(&local(A, 1, false, false), Some(B));
        let ack = HelloAckRepr { proof: [0; 32] };
        assert_eq!(a.on_hello_ack(&ack, None), Err(HandshakeError::OutOfOrder));
        let c = ProcName::new(7, 9);
        assert_eq!(
            a.on_hello(local(c, 5, false, false).repr()),
            Err(HandshakeError::UnexpectedPeer {
                expected: B,
                found: c
            })
        );
        assert_eq!(
            a.on_hello(local(A, 5, false, false).repr()),
            Err(HandshakeError::SelfConnection)
        );
        a.on_hello(local(B, 2, false, false).repr()).expect("hello");
        assert_eq!(
            a.on_hello(local(B, 2, false, false).repr()),
            Err(HandshakeError::OutOfOrder)
        );
    }

    #[test]
    fn a_link_opened_by_address_takes_any_name_but_a_reserved_one() {
        let mut a = Handshake::new(&local(A, 1, false, false), None);
        let stand_in = ProcName::unnamed(3);
        assert_eq!(
            a.on_hello(local(stand_in, 5, false, false).repr()),
            Err(HandshakeError::ReservedName)
        );
        let c = ProcName::new(7, 9);
        assert_eq!(a.on_hello(local(c, 5, false, false).repr()), Ok(c));
    }
}
