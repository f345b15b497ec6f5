//! Randomness for the handshake nonces and the engine's epoch.
//!
//! QEMU `virt` has no RNG device this firmware drives, so [`Seeded`] is a
//! SplitMix64 generator seeded from the `time` CSR at the moment it is made
//! and from the MAC address. That is enough to make two boots (and two
//! links) differ, which is all the protocol needs of a nonce here, but it is
//! predictable to anyone who can guess the boot time: a real board takes its
//! nonces from its hardware RNG (or a DRBG seeded from it) instead, through
//! the same [`Nonces`] trait.

use btl_core::smoltcp::Nonces;
use btl_core::wire::NONCE_LEN;

use crate::clock;

/// A SplitMix64 generator (Steele, Lea and Flood, 2014).
#[derive(Debug, Clone)]
pub struct Seeded {
    state: u64,
}

impl Seeded {
    /// A generator seeded from the time CSR now, `mac` and `stream` (which
    /// keeps two generators made in the same tick apart).
    pub fn new(mac: [u8; 6], stream: u64) -> Self {
        let mut m = [0u8; 8];
        m[..6].copy_from_slice(&mac);
        let mut g = Seeded {
            state: clock::ticks() ^ u64::from_le_bytes(m).rotate_left(17) ^ stream.rotate_left(41),
        };
        // Mix the seed once, so that close seeds give unrelated outputs.
        g.next_u64();
        g
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Nonces for Seeded {
    fn nonce(&mut self) -> [u8; NONCE_LEN] {
        let mut n = [0; NONCE_LEN];
        for chunk in n.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        n
    }
}
