//! Test data: byte patterns that reveal a misplaced or lost byte, checksums
//! to prove memory untouched, and `'static` regions to register.

/// Fills `buf` with the pattern of `seed`: every 8-byte word differs from
/// its neighbours and from other seeds, so a shifted, truncated, duplicated
/// or foreign byte range does not compare equal.
pub fn fill_pattern(buf: &mut [u8], seed: u64) {
    let mut words = buf.chunks_exact_mut(8);
    let mut i = 0u64;
    for word in &mut words {
        word.copy_from_slice(&pattern_word(seed, i).to_le_bytes());
        i += 1;
    }
    let tail = words.into_remainder();
    let last = pattern_word(seed, i).to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
}

/// `len` bytes of the pattern of `seed` (see [`fill_pattern`]).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill_pattern(&mut v, seed);
    v
}

fn pattern_word(seed: u64, i: u64) -> u64 {
    // splitmix64 of (seed, index): cheap enough for 64 MiB in a debug build.
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of `bytes`, to show a region unchanged without keeping a copy.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_position() {
        let a = pattern(1, 64);
        assert_ne!(a, pattern(2, 64));
        assert_ne!(a[..56], a[8..]);
        assert_eq!(pattern(1, 13)[..], a[..13]);
        assert_ne!(checksum(&a), checksum(&pattern(2, 64)));
    }
}
