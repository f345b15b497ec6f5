//! What the scenario files share: the seeds a run takes from the
//! environment (one to replay, a count or a range to soak), the
//! generator of their workloads, and the hosts' fragment pools.
#![allow(dead_code)] // each test file uses a part

use btl_core::engine::HEADER_RESERVE;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};

/// Seeds to run: `BTL_SIM_SEED` alone, or `count` seeds from 1, or what
/// `BTL_SIM_SEEDS` says: a count from 1, or a range `first-last`.
pub fn seeds(count: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("BTL_SIM_SEED") {
        return vec![seed.parse().expect("BTL_SIM_SEED is a number")];
    }
    let Ok(soak) = std::env::var("BTL_SIM_SEEDS") else {
        return (1..=count).collect();
    };
    let number = |s: &str| -> u64 {
        s.trim()
            .parse()
            .expect("BTL_SIM_SEEDS is a count or a range first-last")
    };
    match soak.split_once('-') {
        Some((first, last)) => (number(first)..=number(last)).collect(),
        None => (1..=number(&soak)).collect(),
    }
}

/// Runs `scenario` for each seed, saying which seed failed.
pub fn for_seeds(count: u64, scenario: impl Fn(u64)) {
    for seed in seeds(count) {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(seed)));
        if let Err(panic) = run {
            eprintln!("failed with seed {seed}: replay with BTL_SIM_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

/// SplitMix64, for the workload's sizes and tags.
pub struct Random(pub u64);

impl Random {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The hosts' fragment pools, for messages of up to `max_send` bytes.
pub fn pools(max_send: usize) -> FragmentPoolsConfig {
    let class = |payload: usize, num: u32| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num,
        max: num,
        inc: num,
    };
    FragmentPoolsConfig {
        small: class(256, 64),
        eager: class(4096.min(max_send), 64),
        max: class(max_send, 32),
    }
}
