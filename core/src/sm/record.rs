//! What the shared-memory BTL's records carry, each a [`ring`](crate::ring)
//! record of its own kind: a message, the pieces of a put and its answer,
//! a get, its data and its refusal, and a goodbye. Every field is
//! little-endian; a record read from a peer is checked before it is used,
//! and one that does not parse breaks the protocol.
//!
//! | kind | record | fields, then bytes |
//! |------|--------|--------------------|
//! | 1 | message | tag (1) |
//! | 2 | put piece | op (8), key (8), offset (8), imm (8), flags (1: bit 0 last, bit 1 notify) |
//! | 3 | put answer | op (8), code (1: 0 done, else a `RejectCode`) |
//! | 4 | get | op (8), key (8), offset (8), len (8) |
//! | 5 | get data | op (8), at (8), last (1) |
//! | 6 | get refusal | op (8), code (1) |
//! | 7 | goodbye | (none) |
//! | 8 | put in one copy | op (8), key (8), offset (8), len (8), address (8), imm (8), flags (1: bit 1 notify) |
//! | 9 | get in one copy | op (8), key (8), offset (8), len (8), address (8) |
//!
//! A put or get in one copy asks the target to copy the bytes itself,
//! straight from or into the asker's memory at `address` (Linux's
//! cross-memory attach), and is answered as a put (3) or a get refused
//! (6, code 0 when done). The answer [`ONE_COPY_REFUSED`] says the target
//! could not copy across, and the asker moves it in pieces instead.

use crate::btl::{RejectCode, RemoteKey, Tag};

/// A message: a tag, then its bytes.
pub const MESSAGE: u8 = 1;
/// A piece of a put.
pub const PUT: u8 = 2;
/// The answer to a put's last piece.
pub const PUT_DONE: u8 = 3;
/// A get.
pub const GET: u8 = 4;
/// A piece of a get's data.
pub const GET_DATA: u8 = 5;
/// A get refused.
pub const GET_FAIL: u8 = 6;
/// The peer leaves.
pub const BYE: u8 = 7;
/// A put the target copies in one go from the putter's memory.
pub const PUT_ONE: u8 = 8;
/// A get the target copies in one go into the getter's memory.
pub const GET_ONE: u8 = 9;

/// The answer to a put or get in one copy that the target could not copy
/// across: the asker moves it through the rings.
pub const ONE_COPY_REFUSED: u8 = 0xFF;
/// Bytes of a put in one copy.
pub const PUT_ONE_LEN: usize = 49;
/// Bytes of a get in one copy.
pub const GET_ONE_LEN: usize = 40;

/// Bytes before a message's own.
pub const MESSAGE_HEAD: usize = 1;
/// Bytes before a put piece's data.
pub const PUT_HEAD: usize = 33;
/// Bytes before a get piece's data.
pub const GET_DATA_HEAD: usize = 17;

/// A put piece's flags: the last piece.
pub const LAST: u8 = 1;
/// A put piece's flags: the target is told (`put_notify`).
pub const NOTIFY: u8 = 2;

/// A record that does not parse: the peer broke the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// A record as read, its data a slice of the record's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A message.
    Message {
        /// Its tag.
        tag: Tag,
        /// Its bytes.
        data: &'a [u8],
    },
    /// A piece of a put into this side's memory.
    Put {
        /// The putter's operation.
        op: u64,
        /// Where it goes.
        key: RemoteKey,
        /// Where in the region this piece goes.
        offset: u64,
        /// The value a notified put carries.
        imm: u64,
        /// [`LAST`], [`NOTIFY`].
        flags: u8,
        /// The piece.
        data: &'a [u8],
    },
    /// A put of this side's ended at the peer.
    PutDone {
        /// The operation.
        op: u64,
        /// 0: done; else why it was refused.
        code: u8,
    },
    /// A get from this side's memory.
    Get {
        /// The getter's operation.
        op: u64,
        /// What it reads.
        key: RemoteKey,
        /// From where in the region.
        offset: u64,
        /// How much.
        len: u64,
    },
    /// A piece of a get of this side's.
    GetData {
        /// The operation.
        op: u64,
        /// Where in the get's buffer it goes.
        at: u64,
        /// The last piece.
        last: bool,
        /// The piece.
        data: &'a [u8],
    },
    /// A get of this side's refused.
    GetFail {
        /// The operation.
        op: u64,
        /// Why.
        code: u8,
    },
    /// The peer leaves.
    Bye,
    /// A put into this side's memory, to copy from the putter's.
    PutOne {
        /// The putter's operation.
        op: u64,
        /// Where it goes.
        key: RemoteKey,
        /// Where in the region.
        offset: u64,
        /// How much.
        len: u64,
        /// Where the bytes are in the putter's memory.
        address: u64,
        /// The value a notified put carries.
        imm: u64,
        /// [`NOTIFY`].
        flags: u8,
    },
    /// A get from this side's memory, to copy into the getter's.
    GetOne {
        /// The getter's operation.
        op: u64,
        /// What it reads.
        key: RemoteKey,
        /// From where in the region.
        offset: u64,
        /// How much.
        len: u64,
        /// Where the bytes go in the getter's memory.
        address: u64,
    },
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, Malformed> {
    let b = bytes.get(at..at + 8).ok_or(Malformed)?;
    Ok(u64::from_le_bytes(b.try_into().map_err(|_| Malformed)?))
}

fn u8_at(bytes: &[u8], at: usize) -> Result<u8, Malformed> {
    bytes.get(at).copied().ok_or(Malformed)
}

impl<'a> Record<'a> {
    /// Reads a record of `kind` whose payload is `bytes`.
    pub fn parse(kind: u8, bytes: &'a [u8]) -> Result<Self, Malformed> {
        Ok(match kind {
            MESSAGE => Record::Message {
                tag: Tag(u8_at(bytes, 0)?),
                data: &bytes[MESSAGE_HEAD..],
            },
            PUT => Record::Put {
                op: u64_at(bytes, 0)?,
                key: RemoteKey(u64_at(bytes, 8)?),
                offset: u64_at(bytes, 16)?,
                imm: u64_at(bytes, 24)?,
                flags: u8_at(bytes, 32)?,
                data: &bytes[PUT_HEAD..],
            },
            PUT_DONE => Record::PutDone {
                op: u64_at(bytes, 0)?,
                code: u8_at(bytes, 8)?,
            },
            GET => Record::Get {
                op: u64_at(bytes, 0)?,
                key: RemoteKey(u64_at(bytes, 8)?),
                offset: u64_at(bytes, 16)?,
                len: u64_at(bytes, 24)?,
            },
            GET_DATA => Record::GetData {
                op: u64_at(bytes, 0)?,
                at: u64_at(bytes, 8)?,
                last: u8_at(bytes, 16)? != 0,
                data: &bytes[GET_DATA_HEAD..],
            },
            GET_FAIL => Record::GetFail {
                op: u64_at(bytes, 0)?,
                code: u8_at(bytes, 8)?,
            },
            BYE => Record::Bye,
            PUT_ONE if bytes.len() == PUT_ONE_LEN => Record::PutOne {
                op: u64_at(bytes, 0)?,
                key: RemoteKey(u64_at(bytes, 8)?),
                offset: u64_at(bytes, 16)?,
                len: u64_at(bytes, 24)?,
                address: u64_at(bytes, 32)?,
                imm: u64_at(bytes, 40)?,
                flags: u8_at(bytes, 48)?,
            },
            GET_ONE if bytes.len() == GET_ONE_LEN => Record::GetOne {
                op: u64_at(bytes, 0)?,
                key: RemoteKey(u64_at(bytes, 8)?),
                offset: u64_at(bytes, 16)?,
                len: u64_at(bytes, 24)?,
                address: u64_at(bytes, 32)?,
            },
            _ => return Err(Malformed),
        })
    }
}

/// The head of a put piece.
pub fn put_head(op: u64, key: RemoteKey, offset: u64, imm: u64, flags: u8) -> [u8; PUT_HEAD] {
    let mut h = [0u8; PUT_HEAD];
    h[0..8].copy_from_slice(&op.to_le_bytes());
    h[8..16].copy_from_slice(&key.0.to_le_bytes());
    h[16..24].copy_from_slice(&offset.to_le_bytes());
    h[24..32].copy_from_slice(&imm.to_le_bytes());
    h[32] = flags;
    h
}

/// A put's or get's answer: the operation and a code.
pub fn answer(op: u64, code: u8) -> [u8; 9] {
    let mut h = [0u8; 9];
    h[0..8].copy_from_slice(&op.to_le_bytes());
    h[8] = code;
    h
}

/// A get.
pub fn get(op: u64, key: RemoteKey, offset: u64, len: u64) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[0..8].copy_from_slice(&op.to_le_bytes());
    h[8..16].copy_from_slice(&key.0.to_le_bytes());
    h[16..24].copy_from_slice(&offset.to_le_bytes());
    h[24..32].copy_from_slice(&len.to_le_bytes());
    h
}

/// A put in one copy of `len` bytes at `address`.
pub fn put_one(
    op: u64,
    key: RemoteKey,
    offset: u64,
    len: u64,
    address: u64,
    imm: u64,
    flags: u8,
) -> [u8; PUT_ONE_LEN] {
    let mut h = [0u8; PUT_ONE_LEN];
    for (i, v) in [op, key.0, offset, len, address, imm]
        .into_iter()
        .enumerate()
    {
        h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    h[48] = flags;
    h
}

/// A get in one copy of `len` bytes into `address`.
pub fn get_one(op: u64, key: RemoteKey, offset: u64, len: u64, address: u64) -> [u8; GET_ONE_LEN] {
    let mut h = [0u8; GET_ONE_LEN];
    for (i, v) in [op, key.0, offset, len, address].into_iter().enumerate() {
        h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    h
}

/// The head of a get piece.
pub fn get_data_head(op: u64, at: u64, last: bool) -> [u8; GET_DATA_HEAD] {
    let mut h = [0u8; GET_DATA_HEAD];
    h[0..8].copy_from_slice(&op.to_le_bytes());
    h[8..16].copy_from_slice(&at.to_le_bytes());
    h[16] = u8::from(last);
    h
}

/// The code of a refusal, as a put's or get's answer carries it.
pub fn code(reject: RejectCode) -> u8 {
    u8::from(reject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_reads_back_as_written() {
        let key = RemoteKey(0x1234_5678_9abc_def0);
        let mut put = put_head(7, key, 40, 99, LAST | NOTIFY).to_vec();
        put.extend_from_slice(b"data");
        assert_eq!(
            Record::parse(PUT, &put),
            Ok(Record::Put {
                op: 7,
                key,
                offset: 40,
                imm: 99,
                flags: LAST | NOTIFY,
                data: b"data"
            })
        );
        assert_eq!(
            Record::parse(PUT_DONE, &answer(7, 3)),
            Ok(Record::PutDone { op: 7, code: 3 })
        );
        assert_eq!(
            Record::parse(GET, &get(8, key, 1, 2)),
            Ok(Record::Get {
                op: 8,
                key,
                offset: 1,
                len: 2
            })
        );
        let mut data = get_data_head(8, 16, true).to_vec();
        data.push(5);
        assert_eq!(
            Record::parse(GET_DATA, &data),
            Ok(Record::GetData {
                op: 8,
                at: 16,
                last: true,
                data: &[5]
            })
        );
        assert_eq!(
            Record::parse(
                PUT_ONE,
                &put_one(9, key, 4, 1 << 20, 0xdead_0000, 5, NOTIFY)
            ),
            Ok(Record::PutOne {
                op: 9,
                key,
                offset: 4,
                len: 1 << 20,
                address: 0xdead_0000,
                imm: 5,
                flags: NOTIFY
            })
        );
        assert_eq!(
            Record::parse(GET_ONE, &get_one(10, key, 8, 64, 0xbeef_0000)),
            Ok(Record::GetOne {
                op: 10,
                key,
                offset: 8,
                len: 64,
                address: 0xbeef_0000
            })
        );
        assert_eq!(
            Record::parse(MESSAGE, &[0x80, 1, 2]),
            Ok(Record::Message {
                tag: Tag(0x80),
                data: &[1, 2]
            })
        );
    }

    #[test]
    fn short_records_and_unknown_kinds_are_malformed() {
        assert_eq!(Record::parse(PUT, &[0; PUT_HEAD - 1]), Err(Malformed));
        assert_eq!(Record::parse(MESSAGE, &[]), Err(Malformed));
        assert_eq!(Record::parse(GET, &[0; 31]), Err(Malformed));
        assert_eq!(Record::parse(99, &[]), Err(Malformed));
        assert_eq!(
            Record::parse(PUT_ONE, &[0; PUT_ONE_LEN + 1]),
            Err(Malformed)
        );
        assert_eq!(
            Record::parse(GET_ONE, &[0; GET_ONE_LEN - 1]),
            Err(Malformed)
        );
    }
}
