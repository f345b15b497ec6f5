//! The input of the `handshake` target: one byte of flags, then operations
//! until the input ends, each an opcode byte ([`Op::from_byte`]) followed by
//! the bytes that operation reads.

use btl_core::endpoint::ProcName;
use btl_core::engine::handshake::LocalHello;
use btl_core::wire::NONCE_LEN;

/// The process whose handshake is fuzzed.
pub const ME: ProcName = ProcName::new(7, 0);
/// The honest peer, which a connecting side expects.
pub const PEER: ProcName = ProcName::new(7, 1);
/// The job key this side and the honest peer hold when the input is keyed.
pub const KEY: &[u8] = b"fuzzed job key";
/// The key of a peer from another job, whose proofs must be refused.
pub const OTHER_KEY: &[u8] = b"another job key";

/// Flag (first byte): both sides hold a job key.
pub const KEYED: u8 = 1 << 0;
/// Flag: this side opened the link to [`PEER`]; without it, it accepted a
/// link from anyone.
pub const CONNECTING: u8 = 1 << 1;
/// Flag: this side asks for CRC32C trailers.
pub const CHECKSUM: u8 = 1 << 2;
/// Flag: the honest peer asks for CRC32C trailers.
pub const PEER_CHECKSUM: u8 = 1 << 3;

/// One step of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Calls `poll_send` until it yields nothing.
    Drain,
    /// Delivers the honest peer's HELLO.
    PeerHello,
    /// Delivers the HELLO_ACK the holder of the input's key would send for
    /// the HELLO this side took (the honest peer's, if none yet).
    PeerAck,
    /// Delivers a HELLO_ACK proved with [`OTHER_KEY`].
    WrongKeyAck,
    /// Reads a byte and delivers the honest peer's HELLO with the rank in
    /// its low seven bits (0 is this process) and, if its top bit is set,
    /// the job-key capability flipped.
    HelloVariant,
    /// Reads 64 bytes and delivers them as a HELLO body if they decode.
    HelloBody,
    /// Reads 32 bytes and delivers them as a HELLO_ACK body.
    AckBody,
    /// Delivers a HELLO built by `Arbitrary` from the bytes that follow.
    ArbitraryHello,
    /// Delivers a HELLO_ACK built by `Arbitrary` from the bytes that follow.
    ArbitraryAck,
    /// Reads a length byte and that many bytes, decodes them as a datagram
    /// holding one frame, and delivers it if it is a HELLO or a HELLO_ACK.
    Frame,
    /// Calls `repeat`, as a datagram link does when its HELLO may be lost.
    Repeat,
    /// Calls `repeat_ack`, as a datagram link does when the peer repeats
    /// its HELLO.
    RepeatAck,
}

impl Op {
    /// Every operation, in opcode order.
    pub const ALL: [Op; 12] = [
        Op::Drain,
        Op::PeerHello,
        Op::PeerAck,
        Op::WrongKeyAck,
        Op::HelloVariant,
        Op::HelloBody,
        Op::AckBody,
        Op::ArbitraryHello,
        Op::ArbitraryAck,
        Op::Frame,
        Op::Repeat,
        Op::RepeatAck,
    ];

    /// The operation an opcode byte selects: every byte selects one, so
    /// that no input is wasted.
    pub fn from_byte(byte: u8) -> Op {
        Op::ALL[usize::from(byte) % Op::ALL.len()]
    }

    /// The opcode byte of the operation.
    pub fn byte(self) -> u8 {
        self as u8
    }
}

/// What this side announces, given the input's flags.
pub fn local(flags: u8) -> LocalHello {
    LocalHello {
        me: ME,
        link_index: 0,
        nonce: [0x11; NONCE_LEN],
        checksum: flags & CHECKSUM != 0,
        keyed: flags & KEYED != 0,
        max_body: 1 << 20,
        initial_credits: 8,
        epoch: 1,
    }
}

/// What the honest peer announces, given the input's flags.
pub fn peer(flags: u8) -> LocalHello {
    LocalHello {
        me: PEER,
        link_index: 0,
        nonce: [0x22; NONCE_LEN],
        checksum: flags & PEER_CHECKSUM != 0,
        keyed: flags & KEYED != 0,
        max_body: 1 << 16,
        initial_credits: 4,
        epoch: 2,
    }
}

/// The job key of an input with `flags`.
pub fn key(flags: u8) -> Option<&'static [u8]> {
    (flags & KEYED != 0).then_some(KEY)
}
