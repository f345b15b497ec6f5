//! The local bounds a decoder checks untrusted lengths against.

use super::{HEADER_LEN, MAX_TRAILER_LEN};

/// Smallest body limit [`Limits`] accepts: the largest fixed-size body
/// (HELLO and GET, 64 bytes), so that every control packet always fits and
/// the handshake can take place before the peer learns the real limit.
pub const MIN_MAX_BODY: u64 = 64;

/// Largest body limit [`Limits`] accepts: one whose whole frame (header,
/// body, trailers) still has a length that fits in `usize`, so a frame length
/// never overflows on 32-bit targets.
pub const MAX_MAX_BODY: u64 = (usize::MAX - HEADER_LEN - MAX_TRAILER_LEN) as u64;

/// Local limits a decoder enforces on what a peer sends, before it uses any
/// length from the wire.
///
/// The engine sets them from its own buffer sizes (the largest fragment it
/// can receive into) and announces `max_body` to the peer in its HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    max_body: u64,
}

impl Limits {
    /// Limits that accept bodies of up to `max_body` bytes, clamped into
    /// [`MIN_MAX_BODY`]`..=`[`MAX_MAX_BODY`].
    pub const fn new(max_body: u64) -> Self {
        let max_body = if max_body < MIN_MAX_BODY {
            MIN_MAX_BODY
        } else if max_body > MAX_MAX_BODY {
            MAX_MAX_BODY
        } else {
            max_body
        };
        Self { max_body }
    }

    /// Longest body accepted, in bytes (excluding header and trailer); a
    /// header that announces more is refused with
    /// [`WireError::BodyTooLong`](super::WireError::BodyTooLong).
    pub const fn max_body(&self) -> u64 {
        self.max_body
    }
}
