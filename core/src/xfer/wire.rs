//! The two messages transfer machines exchange on their tag, little-endian:
//!
//! - MSG (12-byte header, then the payload): version 1, kind 1, the
//!   sender's tag, 0, and the sending buffer's cookie (the sender reads it
//!   back from the descriptor to know which buffer a send completion is for).
//! - BULK_DONE (20 bytes): version 1, kind 2, status (0 done, 1 failed), 0,
//!   the passive buffer's cookie and the bytes moved.
//!
//! Both come from peers: [`parse`] checks every field and returns `None` for
//! anything else. [`msg_header`] and [`done`] write them.
//!
//! The transfer machine is the only user inside btl; the module is public
//! because the format is part of the protocol (the book's transfer machine
//! chapter specifies it), so that other implementations, capture tools and
//! fuzzers can decode and write these messages with the machine's own code.

use crate::btl::{Tag, TagRange};

const VERSION: u8 = 1;
const KIND_MSG: u8 = 1;
const KIND_DONE: u8 = 2;

/// Bytes of a MSG header, the reserve in front of the payload.
pub const MSG_HEADER_LEN: usize = 12;
/// Bytes of a BULK_DONE message.
pub const DONE_LEN: usize = 20;

/// A parsed message, borrowing the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// A user message for a MSG_RECV buffer.
    Msg {
        /// The sending machine's tag, to reply to.
        sender: Tag,
        /// The sending buffer's cookie (meaningful to the sender only).
        cookie: u64,
        /// The user's bytes.
        payload: &'a [u8],
    },
    /// The active side finished (or failed) moving a passive buffer's data.
    Done {
        /// Whether the data moved.
        ok: bool,
        /// The passive buffer's cookie.
        cookie: u64,
        /// Bytes moved.
        len: u64,
    },
}

/// The header of a MSG from `sender`'s buffer `cookie`; the payload follows
/// it.
pub fn msg_header(sender: Tag, cookie: u64) -> [u8; MSG_HEADER_LEN] {
    let mut h = [0u8; MSG_HEADER_LEN];
    h[0] = VERSION;
    h[1] = KIND_MSG;
    h[2] = sender.0;
    h[4..12].copy_from_slice(&cookie.to_le_bytes());
    h
}

/// A BULK_DONE for the passive buffer `cookie`.
pub fn done(ok: bool, cookie: u64, len: u64) -> [u8; DONE_LEN] {
    let mut m = [0u8; DONE_LEN];
    m[0] = VERSION;
    m[1] = KIND_DONE;
    m[2] = u8::from(!ok);
    m[4..12].copy_from_slice(&cookie.to_le_bytes());
    m[12..20].copy_from_slice(&len.to_le_bytes());
    m
}

/// Parses a received message; `None` when it is not a valid one (another
/// version or kind, a reserved byte set, a sender tag outside the XFER
/// range, a bad status, or the wrong length). What parses is exactly what
/// [`msg_header`] (followed by the payload) or [`done`] writes.
pub fn parse(data: &[u8]) -> Option<Message<'_>> {
    let (&[version, kind, arg, reserved], rest) = data.split_first_chunk::<4>()?;
    if version != VERSION || reserved != 0 {
        return None;
    }
    let (cookie, rest) = rest.split_first_chunk::<8>()?;
    let cookie = u64::from_le_bytes(*cookie);
    match kind {
        KIND_MSG => {
            let sender = Tag(arg);
            TagRange::XFER.contains(sender).then_some(Message::Msg {
                sender,
                cookie,
                payload: rest,
            })
        }
        KIND_DONE => {
            let ok = match arg {
                0 => true,
                1 => false,
                _ => return None,
            };
            let len: &[u8; 8] = rest.try_into().ok()?;
            Some(Message::Done {
                ok,
                cookie,
                len: u64::from_le_bytes(*len),
            })
        }
        _ => None,
    }
}

/// The cookie in front of a sent MSG's bytes.
pub(crate) fn msg_cookie(bytes: &[u8]) -> Option<u64> {
    match parse(bytes)? {
        Message::Msg { cookie, .. } => Some(cookie),
        Message::Done { .. } => None,
    }
}
