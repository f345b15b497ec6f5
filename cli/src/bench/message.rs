//! The benchmark's messages on the wire, and their reassembly.
//!
//! A message larger than the BTL's largest send goes as several sends (its
//! pieces), each under the message's tag and each starting with the same
//! 16-byte header:
//!
//! ```text
//!  0  u64  total     bytes of the whole message, headers excluded
//!  8  u32  window    the sender's window (a server acknowledges by it)
//! 12  u8   kind      0: a piece; 1: a fetch notice
//! 13  [u8; 3]        reserved, 0
//! ```
//!
//! then its share of the payload. Where the BTL moves large messages
//! better by get than by sends (its `rdma_pipeline_send_length`), the
//! message goes instead as one send, a fetch notice: the header, then
//! where the receiver gets the whole message from (Open MPI's RGET
//! protocol), with one copy where the BTL has one:
//!
//! ```text
//! 16  u64  key       the sender's registration (RemoteKey::to_bytes)
//! 24  u64  offset    where in it the message starts
//! ```
//!
//! Everything here comes from a peer and is checked: a message may not
//! claim more than the receiver takes ([`Assembly::new`]'s bound), nor its
//! pieces bring more than it claimed, nor a piece of another message, or
//! a notice, start before the current one is whole.

use btl_core::btl::{RemoteKey, RemoteSlice, Tag};

/// Bytes of the header in front of every piece.
pub const HEADER: usize = 16;

/// Bytes of a fetch notice after its header.
pub const NOTICE: usize = 16;

/// The header of one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the whole message.
    pub total: u64,
    /// The sender's window of stream messages.
    pub window: u32,
    /// A fetch notice follows, not a piece of the payload.
    pub fetch: bool,
}

impl Header {
    /// The header's bytes.
    pub fn emit(&self) -> [u8; HEADER] {
        let mut out = [0u8; HEADER];
        out[..8].copy_from_slice(&self.total.to_be_bytes());
        out[8..12].copy_from_slice(&self.window.to_be_bytes());
        out[12] = u8::from(self.fetch);
        out
    }

    /// A fetch notice: this header, then where the whole message lies.
    pub fn notice(&self, from: RemoteSlice) -> [u8; HEADER + NOTICE] {
        let mut out = [0u8; HEADER + NOTICE];
        let header = Header {
            fetch: true,
            ..*self
        };
        out[..HEADER].copy_from_slice(&header.emit());
        out[HEADER..HEADER + 8].copy_from_slice(&from.key.to_bytes());
        out[HEADER + 8..].copy_from_slice(&from.offset.to_be_bytes());
        out
    }

    /// The header at the start of `piece`.
    pub fn parse(piece: &[u8]) -> Result<Header, MessageError> {
        let bytes: &[u8; HEADER] = piece
            .first_chunk()
            .ok_or(MessageError::Short { len: piece.len() })?;
        let (total, rest) = bytes.split_at(8);
        let (window, rest) = rest.split_at(4);
        let (kind, reserved) = rest.split_at(1);
        if kind[0] > 1 || reserved != [0; 3] {
            return Err(MessageError::Reserved);
        }
        Ok(Header {
            total: u64::from_be_bytes(total.try_into().unwrap_or_default()),
            window: u32::from_be_bytes(window.try_into().unwrap_or_default()),
            fetch: kind[0] == 1,
        })
    }
}

/// A message to get from its sender: what a fetch notice says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetch {
    /// Its tag.
    pub tag: Tag,
    /// Its bytes.
    pub len: u64,
    /// The sender's window.
    pub window: u32,
    /// Where it lies, in the sender's memory.
    pub from: RemoteSlice,
}

/// What a send brought, once it makes something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrived {
    /// The last piece of a message.
    Whole(Whole),
    /// A notice of a message to get.
    Fetch(Fetch),
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
    /// The reserved bytes are not zero, or the kind is unknown.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// A fetch notice of another length than a notice has.
    #[error("a fetch notice of {len} bytes, not {}", HEADER + NOTICE)]
    Notice {
        /// Its length.
        len: usize,
    },
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
    /// A fetch notice where this side takes none: its BTL has no get.
    #[error("a fetch notice, over a BTL this side does not get with")]
    NoFetch,
    /// More fetch notices queued than a window of messages.
    #[error("{queued} messages to get already queued from a peer that sends more")]
    Fetches {
        /// Notices queued.
        queued: usize,
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

    /// Takes one send received with `tag`: the message it completes, or
    /// the one it says to get, if it does.
    pub fn piece(&mut self, tag: Tag, piece: &[u8]) -> Result<Option<Arrived>, MessageError> {
        let header = Header::parse(piece)?;
        if header.total > self.max {
            return Err(MessageError::TooLarge {
                total: header.total,
                max: self.max,
            });
        }
        if header.fetch {
            if self.current.is_some() {
                return Err(MessageError::Interleaved);
            }
            let notice: &[u8; NOTICE] = piece[HEADER..]
                .try_into()
                .map_err(|_| MessageError::Notice { len: piece.len() })?;
            let (key, offset) = notice.split_at(8);
            return Ok(Some(Arrived::Fetch(Fetch {
                tag,
                len: header.total,
                window: header.window,
                from: RemoteKey::from_bytes(key).unwrap_or(RemoteKey(0)).slice(
                    u64::from_be_bytes(offset.try_into().unwrap_or_default()),
                    header.total,
                ),
            })));
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
        Ok(Some(Arrived::Whole(Whole {
            tag,
            len: have,
            window: header.window,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(total: u64, payload: usize) -> Vec<u8> {
        let mut p = Header {
            total,
            window: 7,
            fetch: false,
        }
        .emit()
        .to_vec();
        p.resize(HEADER + payload, 0xAB);
        p
    }

    #[test]
    fn pieces_make_a_message_whole_with_the_length_received() {
        let mut a = Assembly::new(1 << 20);
        assert_eq!(a.piece(Tag(1), &piece(10, 4)), Ok(None));
        assert_eq!(
            a.piece(Tag(1), &piece(10, 6)),
            Ok(Some(Arrived::Whole(Whole {
                tag: Tag(1),
                len: 10,
                window: 7
            })))
        );
        // An empty message is one piece, the header alone.
        assert!(matches!(
            a.piece(Tag(2), &piece(0, 0)),
            Ok(Some(Arrived::Whole(Whole { len: 0, .. })))
        ));
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

    fn notice(total: u64) -> Vec<u8> {
        let header = Header {
            total,
            window: 3,
            fetch: false,
        };
        header.notice(RemoteKey(0x1234).slice(64, total)).to_vec()
    }

    #[test]
    fn a_fetch_notice_says_what_to_get() {
        let mut a = Assembly::new(1 << 20);
        assert_eq!(
            a.piece(Tag(4), &notice(1 << 20)),
            Ok(Some(Arrived::Fetch(Fetch {
                tag: Tag(4),
                len: 1 << 20,
                window: 3,
                from: RemoteKey(0x1234).slice(64, 1 << 20),
            })))
        );
        // Nothing stays half-received: pieces start again after it.
        assert!(matches!(
            a.piece(Tag(1), &piece(4, 4)),
            Ok(Some(Arrived::Whole(_)))
        ));
    }

    #[test]
    fn what_a_fetch_notice_claims_is_checked() {
        let mut a = Assembly::new(1 << 20);
        assert_eq!(
            a.piece(Tag(4), &notice((1 << 20) + 1)),
            Err(MessageError::TooLarge {
                total: (1 << 20) + 1,
                max: 1 << 20
            })
        );
        let mut long = notice(8);
        long.push(0);
        assert_eq!(
            a.piece(Tag(4), &long),
            Err(MessageError::Notice { len: 33 })
        );
        assert_eq!(
            a.piece(Tag(4), &notice(8)[..20]),
            Err(MessageError::Notice { len: 20 })
        );
        let mut kind = notice(8);
        kind[12] = 2;
        assert_eq!(a.piece(Tag(4), &kind), Err(MessageError::Reserved));
        // Not in the middle of a message.
        assert_eq!(a.piece(Tag(1), &piece(8, 4)), Ok(None));
        assert_eq!(a.piece(Tag(4), &notice(8)), Err(MessageError::Interleaved));
    }
}
