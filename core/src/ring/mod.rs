//! A single-producer, single-consumer ring of variable-length records in
//! memory two parties share: two processes mapping one shared-memory
//! segment, or two cores of a board without an operating system. It is
//! the queue of the shared-memory BTL, one ring per direction of each
//! peer pair.
//!
//! The ring is words the caller lends (`&[AtomicU32]`, 32-bit atomics so
//! that a Cortex-M core runs it too); everything in it is read and written
//! as atomics, so that a peer scribbling on the memory can garble what it
//! sends but never make this side's code misbehave. Nothing read from the
//! ring is trusted: the consumer checks every record's length and kind
//! before it uses them, and the producer the consumer's position.
//!
//! # Layout
//!
//! In 32-bit words, little-endian bytes within a word:
//!
//! | words | field | written by |
//! |-------|-------|------------|
//! | 0 | magic, [`MAGIC`] | whoever made the ring ([`init`]) |
//! | 1 | capacity of the data area in words, a power of two | [`init`] |
//! | 2..16 | zero | |
//! | 16 | the consumer's position (`tail`), published lazily | consumer |
//! | 17..32 | zero (the rest of the consumer's cache line) | |
//! | 32.. | data area: records, back to back | producer |
//!
//! A record starts at an even word and takes an even number of words:
//!
//! | word | field |
//! |------|-------|
//! | 0 | stamp: the bitwise complement of the record's position, written last |
//! | 1 | bits 0..24: payload length in bytes; bits 24..32: kind (`0xFF`: skip to the end of the area) |
//! | 2.. | payload, padded to an even word |
//!
//! Positions count words from the ring's start and wrap at 2^32 (a
//! multiple of every capacity); a record's offset in the data area is its
//! position modulo the capacity. A record never wraps: one that does not
//! fit before the end goes at the start, behind a skip record.
//!
//! # Protocol
//!
//! The design takes the header written last from Open MPI's vader fast
//! boxes and the lazily published consumer position from UCX's `mm`
//! FIFO; a stamp that is the record's own position, where UCX keeps an
//! owner bit per lap, because a lap bit alone cannot tell a record from
//! payload bytes an earlier lap left at the same offset.
//!
//! - The producer writes a record's payload and length, then a zero one
//!   word past its end (where the next record's stamp goes), then the
//!   stamp, with `Release`. It keeps one spare even word beyond every
//!   record for that zero, within the room the consumer has freed.
//! - The consumer loads the stamp at its position with `Acquire`. The
//!   record is there when the stamp is the complement of that position:
//!   what an earlier lap left there is the zero the producer wrote before
//!   it published the record before, or a stamp of another position (the
//!   complement of an even position is never zero).
//! - The consumer publishes its position with `Release` once a quarter of
//!   the area has been read since it last did, and whenever it finds the
//!   ring empty; the producer reads it with `Acquire` only when the room
//!   it last saw is not enough.

mod bell;

pub use bell::Bell;

use crate::sync::{AtomicU32, Ordering};

/// Word 0 of a ring: "btlR".
pub const MAGIC: u32 = u32::from_le_bytes(*b"btlR");
/// Words before the data area: two 64-byte cache lines, the second the
/// consumer's alone.
pub const CONTROL_WORDS: usize = 32;
/// Words of a record's header.
pub const HEADER_WORDS: usize = 2;
/// The largest payload a record carries (2^24 − 1 bytes), whatever the
/// capacity; a ring's own limit is [`Producer::max_payload`].
pub const MAX_PAYLOAD: usize = (1 << 24) - 1;
/// The smallest data area, in words.
pub const MIN_CAPACITY: usize = 16;
/// The kind of a skip record, which no caller may use.
pub const SKIP: u8 = 0xFF;

const MAGIC_AT: usize = 0;
const CAPACITY_AT: usize = 1;
const TAIL_AT: usize = 16;

const _: () = assert!(TAIL_AT < CONTROL_WORDS && CAPACITY_AT < TAIL_AT);

/// What is wrong with a ring, or with what the other side did to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The words are not a ring: no magic, a capacity that is not a power
    /// of two of at least [`MIN_CAPACITY`] words, or one that does not
    /// match their length.
    NotARing,
    /// The other side broke the protocol: a record whose length or kind
    /// does not fit where it lies, or a consumer position beyond what was
    /// produced. The peer is to be given up; nothing here was harmed.
    Corrupt,
}

/// Why a record was not pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// No room until the consumer reads: try again later.
    Full,
    /// Longer than a record of this ring carries
    /// ([`Producer::max_payload`]).
    TooLarge,
    /// The kind is [`SKIP`], which the ring keeps for itself.
    ReservedKind,
    /// The consumer's position is beyond what was produced: it broke the
    /// protocol.
    Corrupt,
}

/// Words a ring whose data area holds `capacity` words takes.
pub const fn words_for(capacity: usize) -> usize {
    CONTROL_WORDS + capacity
}

/// Makes `words` an empty ring: zeroes them, then writes the magic and
/// the capacity (all but [`CONTROL_WORDS`]), which must be a power of two
/// of at least [`MIN_CAPACITY`] words and below 2^31. Done once, by
/// whoever owns the memory, before either side attaches.
pub fn init(words: &[AtomicU32]) -> Result<(), RingError> {
    new_capacity(words)?;
    for w in words {
        w.store(0, Ordering::Relaxed);
    }
    init_zeroed(words)
}

/// [`init`] for words known to be zero (a fresh mapping of a new file,
/// pages just given back to the system): writes only the capacity and
/// the magic, so that the pages of the data area stay untouched until
/// records reach them.
pub fn init_zeroed(words: &[AtomicU32]) -> Result<(), RingError> {
    let capacity = new_capacity(words)?;
    words[CAPACITY_AT].store(capacity as u32, Ordering::Relaxed);
    words[MAGIC_AT].store(MAGIC, Ordering::Release);
    Ok(())
}

/// The capacity a ring made in `words` has, if it can be one.
fn new_capacity(words: &[AtomicU32]) -> Result<usize, RingError> {
    words
        .len()
        .checked_sub(CONTROL_WORDS)
        .filter(|&c| valid_capacity(c))
        .ok_or(RingError::NotARing)
}

fn valid_capacity(capacity: usize) -> bool {
    capacity.is_power_of_two() && (MIN_CAPACITY..1 << 31).contains(&capacity)
}

/// The data area of `words` and its capacity, checked.
fn attach(words: &[AtomicU32]) -> Result<(&[AtomicU32], u32), RingError> {
    if words.len() < CONTROL_WORDS || words[MAGIC_AT].load(Ordering::Acquire) != MAGIC {
        return Err(RingError::NotARing);
    }
    let capacity = words[CAPACITY_AT].load(Ordering::Relaxed) as usize;
    if !valid_capacity(capacity) || words.len() != words_for(capacity) {
        return Err(RingError::NotARing);
    }
    Ok((&words[CONTROL_WORDS..], capacity as u32))
}

/// Words a record of `len` payload bytes takes: header and payload,
/// rounded up to an even count.
const fn record_words(len: usize) -> usize {
    (HEADER_WORDS + len.div_ceil(4)).next_multiple_of(2)
}

/// The side that writes records.
#[derive(Debug)]
pub struct Producer<'a> {
    words: &'a [AtomicU32],
    data: &'a [AtomicU32],
    capacity: u32,
    /// Where the next record goes.
    head: u32,
    /// The consumer's position as last read: room up to it is free.
    tail: u32,
}

impl<'a> Producer<'a> {
    /// The producer of the ring in `words`, which [`init`] made and
    /// nothing has been pushed to yet.
    pub fn attach(words: &'a [AtomicU32]) -> Result<Self, RingError> {
        let (data, capacity) = attach(words)?;
        Ok(Producer {
            words,
            data,
            capacity,
            head: 0,
            tail: 0,
        })
    }

    /// The largest payload one record of this ring carries: half the data
    /// area less a header and the spare word pair, so that a record that
    /// must go at the start behind a skip still fits once the consumer has
    /// read everything.
    pub fn max_payload(&self) -> usize {
        let words = self.capacity as usize / 2 - HEADER_WORDS - 2;
        (words * 4).min(MAX_PAYLOAD)
    }

    /// Whether a record of `len` payload bytes would be taken now,
    /// wherever it falls (behind a skip at the wrap or not); reads the
    /// consumer's position again when the room last seen is not enough.
    /// `Corrupt` as [`push`](Self::push) says it.
    pub fn has_room(&mut self, len: usize) -> Result<bool, PushError> {
        if len > self.max_payload() {
            return Ok(false);
        }
        let words = record_words(len) as u32;
        let offset = self.head & (self.capacity - 1);
        let skip = if offset + words > self.capacity {
            self.capacity - offset
        } else {
            0
        };
        match self.make_room(skip + words + 2) {
            Ok(()) => Ok(true),
            Err(PushError::Full) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes one record of `kind` whose payload is `parts`, one after the
    /// other; `Full` leaves the ring as it was.
    pub fn push(&mut self, kind: u8, parts: &[&[u8]]) -> Result<(), PushError> {
        if kind == SKIP {
            return Err(PushError::ReservedKind);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_payload() {
            return Err(PushError::TooLarge);
        }
        let words = record_words(len) as u32;
        let offset = self.head & (self.capacity - 1);
        // A record that would cross the end goes at the start, behind a
        // skip record over what is left.
        let skip = if offset + words > self.capacity {
            self.capacity - offset
        } else {
            0
        };
        // And a spare even word pair past it, for the zero.
        self.make_room(skip + words + 2)?;
        let at = self.head.wrapping_add(skip);
        let start = (at & (self.capacity - 1)) as usize;
        let end = at.wrapping_add(words);
        self.data[(end & (self.capacity - 1)) as usize].store(0, Ordering::Relaxed);
        self.data[start + 1].store(meta(kind, len), Ordering::Relaxed);
        write_payload(&self.data[start + HEADER_WORDS..], parts);
        self.data[start].store(!at, Ordering::Release);
        if skip > 0 {
            let o = offset as usize;
            let skipped = (skip as usize - HEADER_WORDS) * 4;
            self.data[o + 1].store(meta(SKIP, skipped), Ordering::Relaxed);
            self.data[o].store(!self.head, Ordering::Release);
        }
        self.head = end;
        Ok(())
    }

    /// Makes sure `words` are free beyond the head, reading the consumer's
    /// position again if the last one read does not leave them.
    fn make_room(&mut self, words: u32) -> Result<(), PushError> {
        if self.free() >= words {
            return Ok(());
        }
        let tail = self.words[TAIL_AT].load(Ordering::Acquire);
        // The consumer can be no further than the producer, nor behind
        // where it was: anything else is a peer scribbling on the ring.
        let used = self.head.wrapping_sub(tail);
        if used > self.capacity || tail.wrapping_sub(self.tail) > self.head.wrapping_sub(self.tail)
        {
            return Err(PushError::Corrupt);
        }
        self.tail = tail;
        if self.free() >= words {
            Ok(())
        } else {
            Err(PushError::Full)
        }
    }

    fn free(&self) -> u32 {
        self.capacity - self.head.wrapping_sub(self.tail)
    }
}

/// The length and kind word of a record.
fn meta(kind: u8, len: usize) -> u32 {
    (u32::from(kind) << 24) | len as u32
}

/// Writes the bytes of `parts`, one after the other, into `words`, four
/// to a word, the last word padded with zeros. A word that straddles two
/// parts is gathered in a register, not in memory: bytes stored one by one
/// and read back as a word would stall the store.
fn write_payload(words: &[AtomicU32], parts: &[&[u8]]) {
    let mut at = 0;
    let mut partial: u32 = 0;
    let mut filled: u32 = 0;
    for part in parts {
        let mut bytes = *part;
        // Complete a word begun by the part before.
        while filled > 0 && !bytes.is_empty() {
            partial |= u32::from(bytes[0]) << (8 * filled);
            bytes = &bytes[1..];
            filled += 1;
            if filled == 4 {
                words[at].store(partial, Ordering::Relaxed);
                at += 1;
                (partial, filled) = (0, 0);
            }
        }
        let mut chunks = bytes.chunks_exact(4);
        for chunk in &mut chunks {
            let word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            words[at].store(word, Ordering::Relaxed);
            at += 1;
        }
        for &b in chunks.remainder() {
            partial |= u32::from(b) << (8 * filled);
            filled += 1;
        }
    }
    if filled > 0 {
        words[at].store(partial, Ordering::Relaxed);
    }
}

/// A record the consumer took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// What the producer said it is.
    pub kind: u8,
    /// Its payload's length in bytes.
    pub len: usize,
}

/// Why [`Consumer::pop`] took nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopError {
    /// The record is longer than the buffer given (`len` bytes): it stays
    /// in the ring for a larger one.
    BufferTooSmall {
        /// Its payload's length.
        len: usize,
    },
    /// The producer broke the protocol.
    Corrupt,
}

/// The side that reads records.
#[derive(Debug)]
pub struct Consumer<'a> {
    words: &'a [AtomicU32],
    data: &'a [AtomicU32],
    capacity: u32,
    /// Where the next record starts.
    tail: u32,
    /// The position last published to the producer.
    published: u32,
}

impl<'a> Consumer<'a> {
    /// The consumer of the ring in `words`, which [`init`] made and
    /// nothing has been read from yet.
    pub fn attach(words: &'a [AtomicU32]) -> Result<Self, RingError> {
        let (data, capacity) = attach(words)?;
        Ok(Consumer {
            words,
            data,
            capacity,
            tail: 0,
            published: 0,
        })
    }

    /// The next record's kind and length without taking it (skip records
    /// before it are stepped past); `None` when the producer has
    /// published none. A caller that wants a buffer of the right size
    /// looks first.
    pub fn peek(&mut self) -> Result<Option<Record>, PopError> {
        Ok(self.next()?.map(|(_, record)| record))
    }

    /// Takes the next record, its payload copied to the start of `out`;
    /// `None` when the producer has published none. A record longer than
    /// `out` stays where it is.
    pub fn pop(&mut self, out: &mut [u8]) -> Result<Option<Record>, PopError> {
        let Some((offset, record)) = self.next()? else {
            return Ok(None);
        };
        let Some(out) = out.get_mut(..record.len) else {
            return Err(PopError::BufferTooSmall { len: record.len });
        };
        read_payload(&self.data[offset + HEADER_WORDS..], out);
        self.advance(record_words(record.len) as u32);
        Ok(Some(record))
    }

    /// The next record and its offset, checked, skip records stepped past.
    fn next(&mut self) -> Result<Option<(usize, Record)>, PopError> {
        // At most one skip record stands before a record.
        for _ in 0..2 {
            let offset = (self.tail & (self.capacity - 1)) as usize;
            if self.data[offset].load(Ordering::Acquire) != !self.tail {
                self.publish();
                return Ok(None);
            }
            let meta = self.data[offset + 1].load(Ordering::Relaxed);
            let (kind, len) = ((meta >> 24) as u8, (meta & 0xFF_FFFF) as usize);
            let words = record_words(len);
            if offset + words > self.capacity as usize {
                return Err(PopError::Corrupt);
            }
            if kind != SKIP {
                return Ok(Some((offset, Record { kind, len })));
            }
            // A skip runs to the end of the area, and only there.
            if offset + words != self.capacity as usize || offset == 0 {
                return Err(PopError::Corrupt);
            }
            self.advance(words as u32);
        }
        Err(PopError::Corrupt)
    }

    /// Steps past a record read, and publishes the position once a
    /// quarter of the area has been read since the last time.
    fn advance(&mut self, words: u32) {
        self.tail = self.tail.wrapping_add(words);
        if self.tail.wrapping_sub(self.published) >= self.capacity / 4 {
            self.publish();
        }
    }

    fn publish(&mut self) {
        if self.published != self.tail {
            self.words[TAIL_AT].store(self.tail, Ordering::Release);
            self.published = self.tail;
        }
    }
}

/// Reads `out.len()` bytes from `words`, four to a word.
fn read_payload(words: &[AtomicU32], out: &mut [u8]) {
    let mut chunks = out.chunks_exact_mut(4);
    let mut at = 0;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&words[at].load(Ordering::Relaxed).to_le_bytes());
        at += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let word = words[at].load(Ordering::Relaxed).to_le_bytes();
        rest.copy_from_slice(&word[..rest.len()]);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
