//! The layout of `journal_replay`'s inputs: one byte of settings, then a
//! journal that `replay` feeds to a fresh engine, `engine_input`'s (see
//! [`engine`](super::engine_input::engine)) with its registered memory
//! held as vectors, as a replay makes it from the bytes the journal holds.
//!
//! - Settings bit 0: stream (0) or datagram (1) framing; bit 1: the engine
//!   holds the job key [`KEY`](super::engine_input::KEY); bit 2: mend
//!   (see [`Settings::mend`]); the rest is unused.
//! - The rest is the journal, entries as
//!   [`Entry::encode_into`](btl_core::engine::journal::Entry::encode_into) writes
//!   them.

use btl_core::engine::journal::Entry;
use btl_core::engine::replay::{FramedInput, ReplayError, Replayed, replay};
use btl_core::engine::{Datagram, Framing, Stream};

use super::engine_input::{E, Tables, engine};

/// The framing of a datagram engine.
pub const DATAGRAM: Datagram = Datagram { mtu: 1500 };

/// What an input's first byte says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Datagram framing ([`DATAGRAM`]) rather than a stream.
    pub datagram: bool,
    /// The engine holds the job key.
    pub keyed: bool,
    /// Where the replay finds a result with another digest than the
    /// journal's, the target writes the replayed digest into the journal
    /// and replays it again, from a fresh engine, up to a bound: so that
    /// an input reaches the entries past one whose digest it cannot
    /// guess. Only the digests change, never the calls.
    pub mend: bool,
}

impl Settings {
    /// The settings `byte` says.
    pub fn from_byte(byte: u8) -> Settings {
        Settings {
            datagram: byte & 1 != 0,
            keyed: byte & 2 != 0,
            mend: byte & 4 != 0,
        }
    }

    /// The byte that says them.
    pub fn byte(self) -> u8 {
        u8::from(self.datagram) | u8::from(self.keyed) << 1 | u8::from(self.mend) << 2
    }
}

/// An input of `settings` and `journal`.
pub fn input(settings: Settings, journal: &[u8]) -> Vec<u8> {
    let mut out = vec![settings.byte()];
    out.extend_from_slice(journal);
    out
}

/// Replays `journal` into a fresh engine made as `settings` say.
pub fn replay_fresh(settings: Settings, journal: &[u8]) -> Result<Replayed, ReplayError> {
    if settings.datagram {
        replay_framed(DATAGRAM, settings.keyed, journal)
    } else {
        replay_framed(Stream, settings.keyed, journal)
    }
}

fn replay_framed<F: Framing>(
    framing: F,
    keyed: bool,
    journal: &[u8],
) -> Result<Replayed, ReplayError>
where
    for<'a> E<'a, F, Vec<u8>>: FramedInput,
{
    let mut region = vec![0u8; 64 * 1024];
    let mut tables: Tables<'_, Vec<u8>> = Tables::new();
    let mut e = engine(&mut region, &mut tables, framing, keyed);
    replay(&mut e, journal, <[u8]>::to_vec)
}

/// Where entry `index` of `journal` lies: its offset and length.
pub fn entry_at(journal: &[u8], index: usize) -> Option<(usize, usize)> {
    let mut offset = 0;
    for _ in 0..index {
        offset += Entry::decode(journal.get(offset..)?).ok()?.1;
    }
    let (_, len) = Entry::decode(journal.get(offset..)?).ok()?;
    Some((offset, len))
}
