//! Feeds arbitrary bytes as a journal to `replay`, into a fresh engine
//! (`engine_input`'s, over a stream or datagrams, keyed or not: see
//! `btl_fuzz::journal_replay`), as `btl replay` feeds it a damaged or
//! forged record: nothing may panic, whatever the calls, their order and
//! their arguments; a bad journal is an error.
//!
//! With the input's mend bit, a replay that finds another result than the
//! journal's is run again from a fresh engine with the journal's digest
//! made the replayed one, so that the entries after it are reached too;
//! the engine is deterministic, so the mended replay must get past that
//! entry.
#![no_main]

use btl_core::engine::replay::ReplayError;
use btl_fuzz::journal_replay::{Settings, entry_at, replay_fresh};
use libfuzzer_sys::fuzz_target;

/// Replays of one input, the first included, when it mends: each makes a
/// fresh engine and its three pools, which take ids a process has only
/// 2^32 of.
const REPLAYS: usize = 8;

/// The entry a replay stopped at, or `None` where the journal's bytes
/// could not be read.
fn stopped_at(error: &ReplayError) -> Option<usize> {
    match error {
        ReplayError::Diverged { entry, .. }
        | ReplayError::Unreplayable { entry, .. }
        | ReplayError::Mismatch { entry, .. } => Some(*entry),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&settings, journal)) = data.split_first() else {
        return;
    };
    let settings = Settings::from_byte(settings);
    let mut result = replay_fresh(settings, journal);
    if !settings.mend {
        return;
    }
    let mut journal = journal.to_vec();
    for _ in 1..REPLAYS {
        let Err(ReplayError::Diverged {
            entry, replayed, ..
        }) = result
        else {
            return;
        };
        let (offset, len) = entry_at(&journal, entry).expect("a diverged entry decodes");
        journal[offset + len - 8..offset + len].copy_from_slice(&replayed.to_le_bytes());
        result = replay_fresh(settings, &journal);
        if let Err(e) = &result
            && let Some(at) = stopped_at(e)
        {
            assert!(
                at > entry,
                "a replay mended at entry {entry} stopped at entry {at}: {e}"
            );
        }
    }
});
