//! Drives one side of a link's handshake with arbitrary sequences of HELLO
//! and HELLO_ACK packets: the honest peer's, a peer's with another key,
//! other processes', raw bodies and frames, `Arbitrary` ones, with the
//! datagram repeats in between; keyed or not, connecting or accepting (the
//! input's layout is in `btl_fuzz::handshake`).
//!
//! Nothing may panic, and after every step the handshake must agree with a
//! model of what it was given:
//!
//! - it takes a HELLO only once, never from itself, only from the process a
//!   connecting side expects, and only with a job key exactly when it holds
//!   one;
//! - it verifies a HELLO_ACK only after its own HELLO went out and the
//!   peer's arrived, and with a key only if the proof is the one a holder of
//!   that key computes for these two HELLOs;
//! - it is complete exactly when its HELLO and HELLO_ACK went out (since
//!   the last repeat) and the peer's proof was verified;
//! - `poll_send` yields at most its HELLO and then its HELLO_ACK, with the
//!   right proof, and then nothing until something changes;
//! - a refused packet changes nothing, so the handshake stays where it
//!   failed (the engine drops the link), and the same packet is refused
//!   again with the same error.
#![no_main]

use btl_core::endpoint::ProcName;
use btl_core::engine::handshake::{Handshake, HandshakeError, HandshakePacket};
use btl_core::wire::{
    self, Capabilities, CloseReason, HelloAckRepr, HelloRepr, Limits, PROOF_LEN, PacketRepr,
    WireError, hello_proof,
};
use btl_fuzz::handshake::{self as input, CONNECTING, KEYED, ME, OTHER_KEY, Op, PEER};
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Large enough for a HELLO frame with its trailer, small enough that a
/// length byte can announce any frame the limit allows.
const LIMITS: Limits = Limits::new(255);

/// What the handshake was given and has sent, kept independently of it.
struct Model {
    key: Option<&'static [u8]>,
    local: HelloRepr,
    honest: HelloRepr,
    expected: Option<ProcName>,
    /// The peer's HELLO the handshake took.
    peer: Option<HelloRepr>,
    /// Whether `poll_send` yielded the HELLO since the last repeat.
    hello_out: bool,
    /// Whether `poll_send` yielded the HELLO_ACK since the last repeat.
    ack_out: bool,
    /// Whether a HELLO_ACK was taken.
    verified: bool,
}

/// A handshake packet from the peer.
#[derive(Debug, Clone, Copy)]
enum Incoming {
    Hello(HelloRepr),
    Ack(HelloAckRepr),
}

/// Everything observable about a handshake, including what it would send
/// next (asked of a copy).
#[derive(Debug, PartialEq)]
struct Snapshot {
    peer: Option<HelloRepr>,
    verified: bool,
    complete: bool,
    checksum: bool,
    next: Vec<HandshakePacket>,
}

fn snapshot(hs: &Handshake, key: Option<&[u8]>) -> Snapshot {
    let mut copy = hs.clone();
    Snapshot {
        peer: hs.peer().copied(),
        verified: hs.is_verified(),
        complete: hs.is_complete(),
        checksum: hs.checksum(),
        next: std::iter::from_fn(|| copy.poll_send(key)).take(3).collect(),
    }
}

fn name(hello: &HelloRepr) -> ProcName {
    ProcName::new(hello.job, hello.rank)
}

/// The proof the holder of `key` who sent `sender` answers `receiver` with.
fn proof(key: Option<&[u8]>, sender: &HelloRepr, receiver: &HelloRepr) -> [u8; PROOF_LEN] {
    key.map_or([0; PROOF_LEN], |k| hello_proof(k, sender, receiver))
}

impl Model {
    /// The reasons the handshake has to refuse `packet` now; empty when it
    /// must take it.
    fn reasons(&self, packet: &Incoming) -> Vec<HandshakeError> {
        let mut reasons = Vec::new();
        match packet {
            Incoming::Hello(hello) => {
                let found = name(hello);
                if self.peer.is_some() {
                    reasons.push(HandshakeError::OutOfOrder);
                }
                if found == ME {
                    reasons.push(HandshakeError::SelfConnection);
                }
                if found.is_unnamed() {
                    reasons.push(HandshakeError::ReservedName);
                }
                if let Some(expected) = self.expected
                    && expected != found
                {
                    reasons.push(HandshakeError::UnexpectedPeer { expected, found });
                }
                let local_has_key = self.key.is_some();
                if hello.capabilities.contains(Capabilities::JOB_KEY) != local_has_key {
                    reasons.push(WireError::KeyMismatch { local_has_key }.into());
                }
            }
            Incoming::Ack(ack) => match self.peer {
                Some(peer) if self.hello_out && !self.verified => {
                    if self.key.is_some() && ack.proof != proof(self.key, &peer, &self.local) {
                        reasons.push(WireError::BadProof.into());
                    }
                }
                _ => reasons.push(HandshakeError::OutOfOrder),
            },
        }
        reasons
    }

    /// Hands `packet` to `hs` and checks the answer against the model.
    fn deliver(&mut self, hs: &mut Handshake, packet: Incoming) {
        let reasons = self.reasons(&packet);
        let before = snapshot(hs, self.key);
        let give = |hs: &mut Handshake| match packet {
            Incoming::Hello(hello) => hs.on_hello(hello).map(Some),
            Incoming::Ack(ack) => hs.on_hello_ack(&ack, self.key).map(|()| None),
        };
        match give(hs) {
            Ok(found) => {
                assert!(reasons.is_empty(), "{packet:?} taken despite {reasons:?}");
                match packet {
                    Incoming::Hello(hello) => {
                        assert_eq!(found, Some(name(&hello)));
                        self.peer = Some(hello);
                    }
                    Incoming::Ack(_) => self.verified = true,
                }
            }
            Err(e) => {
                assert!(
                    reasons.contains(&e),
                    "{packet:?} refused with {e:?}, not {reasons:?}"
                );
                assert_eq!(
                    snapshot(hs, self.key),
                    before,
                    "{e:?} changed the handshake"
                );
                assert_eq!(give(hs).err(), Some(e), "{packet:?} taken when given again");
                if matches!(
                    e,
                    HandshakeError::Wire(WireError::BadProof | WireError::KeyMismatch { .. })
                ) {
                    assert_eq!(e.close_reason(), CloseReason::AuthFailed);
                }
            }
        }
    }

    /// Calls `poll_send` until it yields nothing, checking what it yields.
    fn drain(&mut self, hs: &mut Handshake) {
        let mut yielded = 0;
        while let Some(packet) = hs.poll_send(self.key) {
            yielded += 1;
            assert!(yielded <= 2, "poll_send goes on after {packet:?}");
            match packet {
                HandshakePacket::Hello(hello) => {
                    assert!(!self.hello_out, "a second HELLO without a repeat");
                    assert_eq!(hello, self.local);
                    self.hello_out = true;
                }
                HandshakePacket::HelloAck(ack) => {
                    assert!(self.hello_out, "a HELLO_ACK before the HELLO");
                    assert!(!self.ack_out, "a second HELLO_ACK without a repeat");
                    let peer = self.peer.expect("a HELLO_ACK answers the peer's HELLO");
                    assert_eq!(ack.proof, proof(self.key, &self.local, &peer));
                    self.ack_out = true;
                }
            }
        }
        assert_eq!(hs.poll_send(self.key), None, "poll_send stays quiet");
    }

    /// Checks everything the handshake reports against the model.
    fn check(&self, hs: &Handshake) {
        assert_eq!(hs.peer(), self.peer.as_ref());
        assert_eq!(hs.peer_name(), self.peer.as_ref().map(name));
        assert_eq!(hs.is_verified(), self.verified);
        assert_eq!(
            hs.is_complete(),
            self.hello_out && self.ack_out && self.verified,
            "complete exactly when both sides' HELLO_ACKs are through"
        );
        let crc = |h: &HelloRepr| h.capabilities.contains(Capabilities::CRC32C);
        assert_eq!(
            hs.checksum(),
            crc(&self.local) && self.peer.is_some_and(|p| crc(&p))
        );
    }
}

/// Runs the input's operations; stops when the input runs out.
fn run(model: &mut Model, hs: &mut Handshake, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    while !u.is_empty() {
        let packet = match Op::from_byte(u.arbitrary()?) {
            Op::Drain => {
                model.drain(hs);
                None
            }
            Op::PeerHello => Some(Incoming::Hello(model.honest)),
            Op::PeerAck => {
                let sender = model.peer.unwrap_or(model.honest);
                let proof = proof(model.key, &sender, &model.local);
                Some(Incoming::Ack(HelloAckRepr { proof }))
            }
            Op::WrongKeyAck => {
                let sender = model.peer.unwrap_or(model.honest);
                let proof = hello_proof(OTHER_KEY, &sender, &model.local);
                Some(Incoming::Ack(HelloAckRepr { proof }))
            }
            Op::HelloVariant => {
                let byte: u8 = u.arbitrary()?;
                let mut hello = HelloRepr {
                    rank: u32::from(byte & 0x7f),
                    ..model.honest
                };
                if byte & 0x80 != 0 {
                    hello.capabilities.toggle(Capabilities::JOB_KEY);
                }
                Some(Incoming::Hello(hello))
            }
            Op::HelloBody => {
                let body = u.bytes(HelloRepr::LEN)?.try_into().ok();
                body.and_then(|b| HelloRepr::parse(b).ok())
                    .map(Incoming::Hello)
            }
            Op::AckBody => {
                let body = u.bytes(HelloAckRepr::LEN)?.try_into().ok();
                body.map(|b| Incoming::Ack(HelloAckRepr::parse(b)))
            }
            Op::ArbitraryHello => Some(Incoming::Hello(HelloRepr::arbitrary(u)?)),
            Op::ArbitraryAck => Some(Incoming::Ack(HelloAckRepr::arbitrary(u)?)),
            Op::Frame => {
                let len: u8 = u.arbitrary()?;
                match wire::parse_datagram(u.bytes(usize::from(len))?, &LIMITS) {
                    Ok((_, PacketRepr::Hello(hello))) => Some(Incoming::Hello(hello)),
                    Ok((_, PacketRepr::HelloAck(ack))) => Some(Incoming::Ack(ack)),
                    // Anything else is for the engine, which refuses data
                    // before the handshake ends.
                    _ => None,
                }
            }
            Op::Repeat => {
                hs.repeat();
                (model.hello_out, model.ack_out) = (false, false);
                None
            }
            Op::RepeatAck => {
                hs.repeat_ack();
                model.ack_out = false;
                None
            }
        };
        if let Some(packet) = packet {
            model.deliver(hs, packet);
        }
        model.check(hs);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(flags) = u.arbitrary::<u8>() else {
        return;
    };
    let local = input::local(flags);
    let expected = (flags & CONNECTING != 0).then_some(PEER);
    let mut hs = Handshake::new(&local, expected);
    let mut model = Model {
        key: input::key(flags),
        local: local.repr(),
        honest: input::peer(flags).repr(),
        expected,
        peer: None,
        hello_out: false,
        ack_out: false,
        verified: false,
    };
    assert_eq!(model.key.is_some(), flags & KEYED != 0);
    model.check(&hs);
    // Running out of input ends the run like any other point would.
    let _ = run(&mut model, &mut hs, &mut u);
    model.drain(&mut hs);
    model.check(&hs);
});
