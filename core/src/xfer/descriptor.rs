//! Network buffer descriptors, after Motr's `m0_net_buf_desc`: what a
//! passive buffer's owner ships to the peer so that the peer can move the
//! data with `put` or `get` and then tell the owner it is done.
//!
//! A descriptor is 48 bytes on the wire, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0 | version (1) |
//! | 1 | passive queue: 1 = PASSIVE_BULK_RECV, 2 = PASSIVE_BULK_SEND |
//! | 2 | tag of the owning transfer machine |
//! | 3 | reserved, 0 |
//! | 4..8 | owner rank |
//! | 8..16 | owner job |
//! | 16..24 | remote key of the registration |
//! | 24..32 | offset in the registration |
//! | 32..40 | length |
//! | 40..48 | cookie of the buffer in the owning machine |

use core::fmt;

use super::Passive;
use crate::btl::{RemoteKey, Tag, TagRange};
use crate::endpoint::ProcName;

const VERSION: u8 = 1;
const RECV: u8 = 1;
const SEND: u8 = 2;

/// Names a passive buffer to the peer that will move its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetBufDesc {
    /// The process that owns the buffer.
    pub owner: ProcName,
    /// The owning transfer machine's tag, where the "bulk done" goes.
    pub tag: Tag,
    /// Whether the peer is to write (`Recv`) or read (`Send`) the buffer.
    pub queue: Passive,
    /// The registration holding the buffer.
    pub key: RemoteKey,
    /// First byte of the buffer in the registration.
    pub offset: u64,
    /// Bytes the peer may write (`Recv`) or must read (`Send`).
    pub len: u64,
    /// Identifies this add of the buffer in the owning machine.
    pub cookie: u64,
}

/// Why bytes are not a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetBufDescError {
    /// Not [`NetBufDesc::SIZE`] bytes.
    Length(usize),
    /// A version this code does not know.
    Version(u8),
    /// Neither PASSIVE_BULK_RECV nor PASSIVE_BULK_SEND.
    Queue(u8),
    /// The tag is not an XFER tag.
    Tag(u8),
    /// The reserved byte is not 0.
    Reserved(u8),
    /// Offset plus length overflows.
    Range {
        /// The offset.
        offset: u64,
        /// The length.
        len: u64,
    },
}

impl fmt::Display for NetBufDescError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetBufDescError::Length(n) => {
                write!(f, "a descriptor is {} bytes, not {n}", NetBufDesc::SIZE)
            }
            NetBufDescError::Version(v) => write!(f, "unknown descriptor version {v}"),
            NetBufDescError::Queue(q) => write!(f, "unknown passive queue {q}"),
            NetBufDescError::Tag(t) => write!(f, "tag {t:#04x} is not an xfer tag"),
            NetBufDescError::Reserved(b) => write!(f, "reserved byte is {b:#04x}, not 0"),
            NetBufDescError::Range { offset, len } => {
                write!(f, "offset {offset} plus length {len} overflows")
            }
        }
    }
}

impl core::error::Error for NetBufDescError {}

impl NetBufDesc {
    /// Bytes of an encoded descriptor.
    pub const SIZE: usize = 48;

    /// The descriptor's wire form, to ship to the peer in a message.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0] = VERSION;
        b[1] = match self.queue {
            Passive::Recv => RECV,
            Passive::Send => SEND,
        };
        b[2] = self.tag.0;
        b[4..8].copy_from_slice(&self.owner.rank.to_le_bytes());
        b[8..16].copy_from_slice(&self.owner.job.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.0.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b[40..48].copy_from_slice(&self.cookie.to_le_bytes());
        b
    }

    /// Decodes a descriptor received from a peer: untrusted bytes, every
    /// field checked. The key, offset and length are checked again by the
    /// BTL against the registration when the data moves.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NetBufDescError> {
        let b: &[u8; Self::SIZE] = bytes
            .try_into()
            .map_err(|_| NetBufDescError::Length(bytes.len()))?;
        if b[0] != VERSION {
            return Err(NetBufDescError::Version(b[0]));
        }
        let queue = match b[1] {
            RECV => Passive::Recv,
            SEND => Passive::Send,
            q => return Err(NetBufDescError::Queue(q)),
        };
        if !TagRange::XFER.contains(Tag(b[2])) {
            return Err(NetBufDescError::Tag(b[2]));
        }
        if b[3] != 0 {
            return Err(NetBufDescError::Reserved(b[3]));
        }
        let offset = le64(b, 24);
        let len = le64(b, 32);
        if offset.checked_add(len).is_none() {
            return Err(NetBufDescError::Range { offset, len });
        }
        Ok(NetBufDesc {
            owner: ProcName::new(le64(b, 8), u32::from_le_bytes([b[4], b[5], b[6], b[7]])),
            tag: Tag(b[2]),
            queue,
            key: RemoteKey(le64(b, 16)),
            offset,
            len,
            cookie: le64(b, 40),
        })
    }
}

/// The little-endian u64 at `at` (a constant offset inside the descriptor).
fn le64(b: &[u8; NetBufDesc::SIZE], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}
