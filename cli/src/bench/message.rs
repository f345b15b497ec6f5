//! The benchmark's messages on the wire, and their reassembly.
//!
//! A message larger than the BTL's largest send goes as several sends (its
//! pieces), each under the message's tag and each starting with the same
//! 16-byte header:
//!
//! ```text
//!  0  u64  total     bytes of the whole message, headers excluded
//!  8  u32  window    the sender's window (a server acknowledges by it)
//! 12  u32  reserved  0
//! ```
//!
//! then its share of the payload. Everything here comes from a peer and is
//! checked: a message may not claim more than the receiver takes
//! ([`Assembly::new`]'s bound), nor its pieces bring more than it claimed,
//! nor a piece of another message start before the current one is whole.

use btl_core::btl::Tag;

/// Bytes of the header in front of every piece.
pub const HEADER: usize = 16;

/// The header of one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the whole message.
    pub total: u64,
    /// The sender's window of stream messages.
    pub window: u32,
}

impl Header {
    /// The header's bytes.
    pub fn emit(&self) -> [u8; HEADER] {
        let mut out = [0u8; HEADER];
        out[..8].copy_from_slice(&self.total.to_be_bytes());
        out[8..12].copy_from_slice(&self.window.to_be_bytes());
        out
    }

    /// The header at the start of `piece`.
    pub fn parse(piece: &[u8]) -> Result<Header, MessageError> {
        let bytes: &[u8; HEADER] = piece
            .first_chunk()
            .ok_or(MessageError::Short { len: piece.len() })?;
        let (total, rest) = bytes.split_at(8);
        let (window, reserved) = rest.split_at(4);
        if reserved != [0; 4] {
            return Err(MessageError::Reserved);
        }
        Ok(Header {
            total: u64::from_be_bytes(total.try_into().unwrap_or_default()),
            window: u32::from_be_bytes(window.try_into().unwrap_or_default()),
        })
    }
}

/// Why a peer's piece was refused: the peer breaks the benchmark's
/// protocol, and a server stops serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Shorter than a header.
    #[error("a piece of {len} bytes, shorter than the header")]
    Short {
        /// Its length.
        len: usize,
    },
    /// The reserved bytes are not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// The message claims more than this side takes.
    #[error("a message of {total} bytes, more than the {max} taken")]
    TooLarge {
        /// What it claims.
        total: u64,
        /// This side's bound.
        max: u64,
    },
    /// A piece of another message (tag or length) before the current one
    /// is whole.
    #[error("a piece of another message before the current one was whole")]
    Interleaved,
    /// The peer asks for replies faster than it reads them: more than
    /// its share is owed to it.
    #[error("{replies} replies of {owed} bytes owed to a peer that asks for more")]
    Unread {
        /// Replies owed.
        replies: usize,
        /// Their bytes not yet sent.
        owed: u64,
    },
    /// The pieces bring more than the message claimed.
    #[error("pieces of {have} bytes for a message of {total}")]
    Overrun {
        /// Bytes brought.
        have: u64,
        /// Bytes claimed.
        total: u64,
    },
}

/// A message made whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole {
    /// Its tag.
    pub tag: Tag,
    /// Its bytes, as received (what a reply to it may be as long as).
    pub len: u64,
    /// The sender's window.
    pub window: u32,
}

/// The message being received from one peer.
#[derive(Debug, Clone)]
pub struct Assembly {
    max: u64,
    /// The current message's tag and claimed length, and the bytes so far.
    current: Option<(Tag, u64, u64)>,
}

impl Assembly {
    /// Nothing received yet; messages of more than `max` bytes are refused.
    pub fn new(max: u64) -> Self {
        Assembly { max, current: None }
    }

    /// Takes one piece received with `tag`; the message it completes, if
    /// it does.
    pub fn piece(&mut self, tag: Tag, piece: &[u8]) -> Result<Option<Whole>, MessageError> {
        let header = Header::parse(piece)?;
        if header.total > self.max {
            return Err(MessageError::TooLarge {
                total: header.total,
                max: self.max,
            });
        }
        let (current_tag, total, have) = *self.current.get_or_insert((tag, header.total, 0));
        if (current_tag, total) != (tag, header.total) {
            return Err(MessageError::Interleaved);
        }
        let have = have.saturating_add((piece.len() - HEADER) as u64);
        if have > total {
            return Err(MessageError::Overrun { have, total });
        }
        if have < total {
            self.current = Some((tag, total, have));
            return Ok(None);
        }
        self.current = None;
        Ok(Some(Whole {
            tag,
            len: have,
            window: header.window,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(total: u64, payload: usize) -> Vec<u8> {
        let mut p = Header { total, window: 7 }.emit().to_vec();
        p.resize(HEADER + payload, 0xAB);
        p
    }

    #[test]
    fn pieces_make_a_message_whole_with_the_length_received() {
        let mut a = Assembly::new(1 << 20);
        assert_eq!(a.piece(Tag(1), &piece(10, 4)), Ok(None));
        assert_eq!(
            a.piece(Tag(1), &piece(10, 6)),
            Ok(Some(Whole {
                tag: Tag(1),
                len: 10,
                window: 7
            }))
        );
        // An empty message is one piece, the header alone.
        assert_eq!(
            a.piece(Tag(2), &piece(0, 0)).map(|w| w.map(|w| w.len)),
            Ok(Some(0))
        );
    }

    #[test]
    fn what_a_peer_claims_is_checked() {
        let mut a = Assembly::new(1 << 20);
        assert_eq!(
            a.piece(Tag(1), &[0; 15]),
            Err(MessageError::Short { len: 15 })
        );
        let mut reserved = piece(1, 1);
        reserved[15] = 1;
        assert_eq!(a.piece(Tag(1), &reserved), Err(MessageError::Reserved));
        assert_eq!(
            a.piece(Tag(1), &piece(256 << 20, 1)),
            Err(MessageError::TooLarge {
                total: 256 << 20,
                max: 1 << 20
            })
        );
        assert_eq!(
            a.piece(Tag(1), &piece(4, 5)),
            Err(MessageError::Overrun { have: 5, total: 4 })
        );
        let mut a = Assembly::new(1 << 20);
        assert_eq!(a.piece(Tag(1), &piece(8, 4)), Ok(None));
        assert_eq!(
            a.piece(Tag(2), &piece(8, 4)),
            Err(MessageError::Interleaved)
        );
        assert_eq!(
            a.piece(Tag(1), &piece(9, 4)),
            Err(MessageError::Interleaved)
        );
    }
}
