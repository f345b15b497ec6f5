//! The in-memory drivers: two engines joined by byte pipes
//! ([`stream::StreamPair`]) or by a datagram network with faults
//! ([`datagram::DatagramPair`]), each playing every part a socket loop
//! would. They allocate nothing, and their clocks and nonces are
//! deterministic, so a failure replays exactly. [`ethernet::Wire`] is the
//! cable between two smoltcp interfaces, for the engine over smoltcp.

pub mod datagram;
pub mod ethernet;
pub mod pipe;
pub mod stream;

use core::borrow::BorrowMut;

use btl_core::btl::{Btl, BtlError};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::{Engine, Framing, Storage};
use btl_core::time::Instant;

pub use crate::world::Side;

/// Makes each of two engines know the other's process (`add_procs`);
/// returns the endpoint of B at A and of A at B. Both pair drivers start so.
pub(crate) fn introduce<St: Storage, F: Framing, const W: usize, S>(
    engines: &mut [S; 2],
    names: [ProcName; 2],
) -> Result<[EndpointId; 2], BtlError>
where
    S: BorrowMut<Engine<St, F, W>>,
{
    let mut out = [EndpointId(0); 2];
    for side in Side::BOTH {
        let mut endpoint = [None];
        let mut words = [0u64];
        engines[side.index()].borrow_mut().add_procs(
            &[names[side.other().index()]],
            &mut endpoint,
            &mut Reachability::new(&mut words),
        )?;
        out[side.index()] = endpoint[0].ok_or(BtlError::Unreachable)?;
    }
    Ok(out)
}

/// Makes `engine`, a new start of one side, know the other side's process
/// `other` (`add_procs`), after telling it the time `now`; its endpoint.
pub(crate) fn introduce_restarted<St: Storage, F: Framing, const W: usize>(
    engine: &mut Engine<St, F, W>,
    other: ProcName,
    now: Instant,
) -> Result<EndpointId, BtlError> {
    // The new engine learns the time before anything is asked of it.
    engine.handle_timeout(now);
    let mut endpoint = [None];
    let mut words = [0u64];
    engine.add_procs(&[other], &mut endpoint, &mut Reachability::new(&mut words))?;
    endpoint[0].ok_or(BtlError::Unreachable)
}

/// SplitMix64: a bijection of a counter, so that its outputs never repeat
/// within 2^64 draws, and deterministic from its seed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
