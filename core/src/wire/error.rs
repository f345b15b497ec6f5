//! Why a packet could not be decoded or encoded.

use core::fmt;

use super::close::CloseReason;
use super::header::PacketType;

/// Why bytes from a peer are not a valid packet, why a packet could not be
/// encoded, or why a handshake proof was refused.
///
/// [`Truncated`](Self::Truncated) on a stream only means "read more";
/// [`BufferTooSmall`](Self::BufferTooSmall) and
/// [`HeaderMismatch`](Self::HeaderMismatch) are the local caller's mistakes.
/// Every other variant is the peer breaking the protocol: the engine answers
/// it with a CLOSE whose reason [`close_reason`](Self::close_reason) gives,
/// and drops the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The buffer ends before the packet does: `needed` bytes are required
    /// to go on, only `have` are there. On a stream, read more and retry.
    Truncated {
        /// Bytes the packet (or the part being decoded) takes.
        needed: usize,
        /// Bytes the buffer holds.
        have: usize,
    },
    /// An encoder was given an output buffer too small for the packet.
    BufferTooSmall {
        /// Bytes the encoding takes.
        needed: usize,
        /// Bytes the output buffer holds.
        have: usize,
    },
    /// A datagram holds more bytes than the frame at its start: one
    /// datagram carries exactly one frame.
    TrailingBytes {
        /// Length of the frame.
        frame: usize,
        /// Length of the datagram.
        have: usize,
    },
    /// The header's type byte names no packet type of this protocol version.
    UnknownType(u8),
    /// The header's flags byte has bits set that this version gives no
    /// meaning to.
    UnknownFlags(u8),
    /// A field reserved for later use is not zero.
    ReservedNonZero {
        /// The field, as the protocol specification names it.
        field: &'static str,
    },
    /// The header announces a body longer than the local limit
    /// ([`Limits::max_body`](super::Limits::max_body)): refused before any
    /// of it is read.
    BodyTooLong {
        /// The announced body length.
        len: u64,
        /// The local limit.
        max: u64,
    },
    /// The body length does not suit the packet type: a fixed-size body of
    /// another size, or a SEND or PUT body shorter than its fixed fields.
    BadLength {
        /// The packet's type.
        packet_type: PacketType,
        /// The announced body length.
        len: u64,
    },
    /// The CRC32C trailer does not match the header and body: the packet
    /// was damaged on the way.
    ChecksumMismatch {
        /// The checksum the receiver computed.
        computed: u32,
        /// The checksum the trailer carries.
        received: u32,
    },
    /// A HELLO does not start with the magic bytes `BTL\0`: the peer does
    /// not speak this protocol at all.
    BadMagic {
        /// The four bytes found instead.
        found: [u8; 4],
    },
    /// A HELLO carries a major protocol version other than this one's, so
    /// nothing after it can be trusted to mean the same thing.
    UnsupportedVersion {
        /// The peer's major version.
        major: u8,
        /// The peer's minor version.
        minor: u8,
    },
    /// A PUT's packet index is not below its packet count (or the count is
    /// zero).
    BadIndex {
        /// The packet's index within the transfer.
        index: u32,
        /// Packets in the transfer.
        count: u32,
    },
    /// A PUT carries more data than the whole transfer is long.
    DataExceedsTotal {
        /// Bytes of data in the packet.
        len: u64,
        /// Length of the whole transfer.
        total: u64,
    },
    /// An offset plus a length does not fit in 64 bits.
    OffsetOverflow {
        /// The offset.
        offset: u64,
        /// The length added to it.
        len: u64,
    },
    /// An encoder was given a header whose type or body length disagrees
    /// with the packet it goes with.
    HeaderMismatch,
    /// A HELLO_ACK's proof is not the HMAC of the handshake under the local
    /// job key: the peer belongs to another job, or is an impostor.
    BadProof,
    /// Only one side of a handshake has a job key configured, so the peer
    /// cannot be authenticated either way.
    KeyMismatch {
        /// Whether the local side is the one that has a key.
        local_has_key: bool,
    },
    /// A datagram from a keyed peer is not sealed, or its seal is not the
    /// one the peer's key makes ([`Seal::check`](super::Seal::check)):
    /// someone else sent it from the peer's address, or it was damaged.
    /// The engine drops it as lost; it ends nothing.
    BadSeal,
}

impl WireError {
    /// The reason a CLOSE sent in answer to this error carries.
    pub fn close_reason(&self) -> CloseReason {
        match self {
            Self::UnsupportedVersion { .. } => CloseReason::VersionMismatch,
            Self::BadProof | Self::KeyMismatch { .. } => CloseReason::AuthFailed,
            _ => CloseReason::ProtocolError,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { needed, have } => write!(
                f,
                "packet truncated: {needed} bytes needed, only {have} available"
            ),
            Self::BufferTooSmall { needed, have } => write!(
                f,
                "output buffer too small: the packet takes {needed} bytes, the buffer holds {have}"
            ),
            Self::TrailingBytes { frame, have } => write!(
                f,
                "datagram of {have} bytes holds a frame of {frame} and trailing bytes"
            ),
            Self::UnknownType(t) => write!(f, "unknown packet type {t}"),
            Self::UnknownFlags(bits) => write!(f, "unknown header flags {bits:#04x}"),
            Self::ReservedNonZero { field } => {
                write!(f, "reserved field `{field}` is not zero")
            }
            Self::BodyTooLong { len, max } => write!(
                f,
                "packet body of {len} bytes is longer than the limit of {max}"
            ),
            Self::BadLength { packet_type, len } => match packet_type.fixed_body_len() {
                fixed if packet_type.has_payload() => write!(
                    f,
                    "{packet_type} body of {len} bytes is shorter than its {fixed} fixed bytes"
                ),
                fixed => write!(
                    f,
                    "{packet_type} body of {len} bytes, expected exactly {fixed}"
                ),
            },
            Self::ChecksumMismatch { computed, received } => write!(
                f,
                "CRC32C mismatch: packet carries {received:#010x}, computed {computed:#010x}"
            ),
            Self::BadMagic { found } => write!(
                f,
                "HELLO magic is {found:02x?}, not `BTL\\0`: the peer does not speak the btl protocol"
            ),
            Self::UnsupportedVersion { major, minor } => write!(
                f,
                "peer speaks btl protocol {major}.{minor}, this side speaks {}.{}",
                super::hello::VERSION_MAJOR,
                super::hello::VERSION_MINOR
            ),
            Self::BadIndex { index, count } => write!(
                f,
                "PUT packet index {index} is not below the packet count {count}"
            ),
            Self::DataExceedsTotal { len, total } => write!(
                f,
                "PUT carries {len} bytes of data, more than the transfer's total of {total}"
            ),
            Self::OffsetOverflow { offset, len } => {
                write!(f, "offset {offset} plus length {len} overflows 64 bits")
            }
            Self::HeaderMismatch => f.write_str(
                "header type or body length disagrees with the packet it is emitted with",
            ),
            Self::BadProof => f.write_str(
                "handshake proof does not match the job key: the peer belongs to another job",
            ),
            Self::KeyMismatch {
                local_has_key: true,
            } => f.write_str(
                "this side has a job key but the peer has none: cannot authenticate the peer",
            ),
            Self::KeyMismatch {
                local_has_key: false,
            } => f.write_str(
                "the peer has a job key but this side has none: cannot authenticate to the peer",
            ),
            Self::BadSeal => f.write_str(
                "datagram not sealed with the peer's key: sent by someone else from its address, or damaged",
            ),
        }
    }
}

impl core::error::Error for WireError {}
