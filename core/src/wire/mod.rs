//! The wire format, protocol version 1: packet layouts as checked views and
//! `Repr` structs, after smoltcp's `wire` module.
//!
//! Every packet is a 32-byte [`Header`] followed by a body and, with
//! [`Flags::CHECKSUM`], a 4-byte CRC32C trailer; a datagram between two
//! keyed processes ends with a 16-byte [`Seal`] ([`Flags::SEALED`]). All integers are
//! big-endian and all lengths and offsets 64 bits wide. The body is one of
//! twelve types ([`PacketType`]): the handshake ([`HelloRepr`],
//! [`HelloAckRepr`] with its [`hello_proof`]), active messages
//! ([`SendRepr`]), bulk transfers ([`PutRepr`], [`GetRepr`],
//! [`RejectRepr`], [`DoneRepr`], [`NotifyRepr`]), registration keys for
//! devices that move bytes themselves ([`KeyRepr`], [`KeyInfoRepr`]),
//! acknowledgements ([`AckRepr`]) and [`CloseRepr`]. The six reliable
//! packets without payload decode into one [`ControlRepr`]. The
//! book's protocol chapter specifies each byte, with golden vectors that
//! the tests check against this code.
//!
//! # Decoding untrusted bytes
//!
//! Everything from the wire is untrusted. Decoders return `Result` and
//! never panic; every length is checked against the buffer *and* against
//! the caller's [`Limits`] before it is used, reserved fields and flags
//! must be zero, and offsets plus lengths must not overflow. Whether a
//! registration handle exists or a range fits in it is for the engine,
//! which knows the registrations.
//!
//! - [`parse`] decodes the complete frame at the start of a stream buffer
//!   and says how many bytes it took; [`parse_datagram`] decodes a datagram,
//!   which must hold exactly one frame.
//! - A stream reader that wants the payload to land straight in its target
//!   reads [`HEADER_LEN`] bytes into scratch space, asks
//!   [`Header::frame_len`] for the frame's length, reads the body's fixed
//!   fields ([`PacketType::fixed_body_len`]) into scratch space too, decodes
//!   them ([`SendRepr::parse`], [`PutRepr::parse`]) to learn the target, and
//!   reads the payload there; [`Crc32c`] checks the pieces.
//!
//! # Encoding
//!
//! [`emit`] writes a whole frame. [`emit_prefix`] writes only the header and
//! the body's fixed fields (at most [`MAX_PREFIX_LEN`] bytes, e.g. into a
//! fragment's header reserve), so the payload can follow with vectored I/O.
//!
//! ```
//! use btl_core::wire::{self, Flags, HeaderRepr, Limits, PacketRepr, SendRepr};
//!
//! let packet = PacketRepr::Send { send: SendRepr { tag: 7 }, payload: b"hi" };
//! let header = HeaderRepr { flags: Flags::CHECKSUM, seq: 1, ..HeaderRepr::new(&packet) };
//! let mut frame = [0; 64];
//! let len = wire::emit(&header, &packet, &mut frame)?;
//! assert_eq!(len, 32 + 8 + 2 + 4);
//!
//! let (h, p, used) = wire::parse(&frame[..len], &Limits::new(4096))?;
//! assert_eq!((h, p, used), (header, packet, len));
//! # Ok::<(), wire::WireError>(())
//! ```

mod ack;
mod checksum;
mod close;
mod control;
mod cookie;
mod done;
mod error;
pub mod field;
mod get;
mod header;
mod hello;
mod hello_ack;
mod key;
mod limits;
mod notify;
mod packet;
mod proof;
mod put;
mod reject;
mod seal;
mod send;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;

pub use ack::AckRepr;
pub use checksum::{Crc32c, check_trailer, crc32c};
pub use close::{CloseReason, CloseRepr};
pub use control::ControlRepr;
pub use cookie::{COOKIE_CONTEXT, COOKIE_LEN, CookieRepr};
pub use done::DoneRepr;
pub use error::WireError;
pub use get::GetRepr;
pub use header::{Flags, Header, HeaderRepr, PacketType};
pub use hello::{Capabilities, HelloRepr, MAGIC, NONCE_LEN, VERSION_MAJOR, VERSION_MINOR};
pub use hello_ack::HelloAckRepr;
pub use key::{DeviceKey, KeyInfoRepr, KeyRegion, KeyRepr};
pub use limits::{Limits, MAX_MAX_BODY, MIN_MAX_BODY};
pub use notify::NotifyRepr;
pub use packet::{
    CLOSE_FRAME_LEN, PacketRepr, close_frame, emit, emit_prefix, parse, parse_datagram,
};
pub use proof::{PROOF_CONTEXT, PROOF_LEN, hello_proof, verify_proof};
pub use put::PutRepr;
pub use reject::{RejectCode, RejectRepr};
pub use seal::{SEAL_KEY_CONTEXT, SEAL_LEN, Seal, Start};
pub use send::SendRepr;

/// Bytes of the common header.
pub const HEADER_LEN: usize = 32;

/// Bytes of the CRC32C trailer, present with [`Flags::CHECKSUM`].
pub const CHECKSUM_LEN: usize = 4;

/// Most bytes that follow a body: the CRC32C trailer and the seal.
pub const MAX_TRAILER_LEN: usize = CHECKSUM_LEN + SEAL_LEN;

/// Longest prefix [`emit_prefix`] writes: the header and the largest fixed
/// body (HELLO and GET).
pub const MAX_PREFIX_LEN: usize = HEADER_LEN + HelloRepr::LEN;
