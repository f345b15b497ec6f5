//! Feeds arbitrary bytes to the reader of a flight recorder's record file,
//! as `btl replay` reads one: nothing may panic; a record that reads
//! writes bytes that read back to the same record; and the replay of a
//! small one (see `small`) into the engine it describes ends, matched or
//! not, without a panic.
#![no_main]

use btl_core::pool::FragmentPoolConfig;
use btl_std::driver::recorder::{Record, Setup};
use libfuzzer_sys::fuzz_target;

/// Bytes of fragments a replayed engine may have in any one pool.
const POOL_BYTES: usize = 4 << 20;

/// Whether the engine `setup` describes is small enough to make for each
/// input: its tables and its pools' region are as large as the bytes say,
/// which a record of a real module's makes megabytes, and a forged one
/// gigabytes. The region is allocated before the pools' configuration is
/// checked, so its size is bounded here, not only each pool's fragments
/// (fragments of no bytes still take their links).
fn small(setup: &Setup) -> bool {
    let c = &setup.capacities;
    let pool = |p: &FragmentPoolConfig| {
        p.fragment_size
            .checked_mul(p.max as usize)
            .is_some_and(|n| n <= POOL_BYTES)
    };
    c.peers <= 64
        && c.links <= 128
        && c.ops <= 1024
        && c.events <= 1024
        && c.registrations <= 1024
        && [&setup.pools.small, &setup.pools.eager, &setup.pools.max]
            .into_iter()
            .all(pool)
        && setup.pools.required_bytes() <= 4 * POOL_BYTES
}

fuzz_target!(|data: &[u8]| {
    let Ok(record) = Record::read(data) else {
        return;
    };
    let bytes = record.to_bytes();
    let again = Record::read(&bytes).expect("a written record reads back");
    assert_eq!(again.to_bytes(), bytes, "{record:?}");
    assert_eq!(again.journal, record.journal);
    if small(&record.setup) {
        let _ = record.replay();
    }
});
