//! The layout of `engine_input`'s inputs: one byte of settings, then the
//! bytes a hostile peer sends on one accepted link; and the engine the
//! target feeds them to, so that a seed can open its link (answer its
//! HELLO, prove the job key, seal what follows).
//!
//! - Settings bit 0: stream (0) or datagram (1) framing; bits 1..7: over a
//!   stream, the bytes of each read less one (1 to 128); over datagrams,
//!   bit 1 says the engine holds the job key [`KEY`] (so that an input
//!   that proves it opens a sealed link), the rest is unused.
//! - Over a stream, the rest is the stream, cut into reads of that size.
//! - Over datagrams, the rest is a list of datagrams, each a big-endian
//!   `u16` length and that many bytes (a short last one is cut off), so
//!   that a whole HELLO (96 bytes) and larger frames fit one datagram.
//!
//! Between two reads or datagrams the engine's clock moves 1 ms, so that
//! handshake, acknowledgement and keepalive timers fire.

use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, Engine, Framing, Inline, Lent, Source};
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use btl_core::time::Instant;
use btl_core::wire::{self, HelloRepr, Limits, PacketRepr};

/// The engine's process.
pub const ME: ProcName = ProcName::new(1, 0);
/// The job key of a keyed engine.
pub const KEY: &[u8] = b"fuzz job key";
/// The nonce of the engine's accepted link.
pub const NONCE: [u8; 16] = [7; 16];

/// Two peers, two links, a window of 8, 8 operations, 32 events, two
/// registrations of memory held as `M` (lent, or owned where a replay
/// makes it: `journal_replay`).
pub type Tables<'a, M = &'a mut [u8]> = Inline<2, 2, 8, 8, 32, 2, M>;
/// The engine the target feeds, its registered memory held as `M`.
pub type E<'a, F, M = &'a mut [u8]> = Engine<Lent<'a, M>, F, 8>;

/// The lengths of [`Tables`], for an engine made as the target's with
/// other storage (one that records its journal, for the seeds of
/// `journal_replay`).
pub const CAPACITIES: Capacities = Capacities {
    peers: 2,
    links: 2,
    ops: 8,
    events: 32,
    registrations: 2,
};

/// The target's fragment pools: four fragments of each class, of 128,
/// 1024 and 2048 bytes.
pub fn pools() -> FragmentPoolsConfig {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 4,
        max: 4,
        inc: 4,
    };
    FragmentPoolsConfig {
        small: pool(128),
        eager: pool(1024),
        max: pool(2048),
    }
}

/// The target's engine configuration, holding [`KEY`] if `keyed`.
pub fn config(keyed: bool) -> EngineConfig {
    EngineConfig {
        initial_credits: 4,
        job_key: keyed.then(|| heapless::Vec::from_slice(KEY).expect("a short key")),
        ..EngineConfig::new(ME)
    }
}

/// The target's engine over `framing`, in `region` and `tables`, holding
/// [`KEY`] if `keyed`.
pub fn engine<'a, F: Framing, M: AsRef<[u8]> + AsMut<[u8]> + 'a>(
    region: &'a mut [u8],
    tables: &'a mut Tables<'a, M>,
    framing: F,
    keyed: bool,
) -> E<'a, F, M> {
    let pools = FragmentPools::new(region, pools()).expect("pools fit the region");
    Engine::new(config(keyed), framing, tables.lend(), pools, Instant::ZERO)
}

/// The HELLO the target's engine sends first on its link, over `framing`,
/// holding the key if `keyed`: what a peer's HELLO_ACK must prove it saw.
pub fn engine_hello<F: Framing>(framing: F, keyed: bool) -> Option<HelloRepr> {
    let mut region = vec![0u8; 64 * 1024];
    let mut tables: Tables = Tables::new();
    let mut e = engine(&mut region, &mut tables, framing, keyed);
    let link = e.handle_accepted(Source(1), NONCE, Instant::ZERO).ok()?;
    let transmit = e.poll_transmit(link)?;
    let bytes: Vec<u8> = transmit.segments.concat();
    match wire::parse(&bytes, &Limits::new(1 << 16)).ok()?.1 {
        PacketRepr::Hello(hello) => Some(hello),
        _ => None,
    }
}

/// How the engine's link carries the peer's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// One stream, read `read` bytes at a time.
    Stream {
        /// Bytes per read, 1 to 128.
        read: usize,
    },
    /// Datagrams, one frame each.
    Datagram {
        /// Whether the engine holds the job key.
        keyed: bool,
    },
}

/// The settings byte for `carried`.
pub fn settings(carried: Carried) -> u8 {
    match carried {
        Carried::Stream { read } => (read.clamp(1, 128) as u8 - 1) << 1,
        Carried::Datagram { keyed } => 1 | u8::from(keyed) << 1,
    }
}

/// The settings an input's first byte says.
pub fn carried(settings: u8) -> Carried {
    if settings & 1 == 1 {
        Carried::Datagram {
            keyed: settings & 2 != 0,
        }
    } else {
        Carried::Stream {
            read: usize::from(settings >> 1) + 1,
        }
    }
}

/// The pieces `rest` is cut into as `carried` says: reads or datagrams.
pub fn pieces(carried: Carried, rest: &[u8]) -> Vec<&[u8]> {
    match carried {
        Carried::Stream { read } => rest.chunks(read).collect(),
        Carried::Datagram { .. } => {
            let mut out = Vec::new();
            let mut rest = rest;
            while let Some((len, tail)) = rest.split_first_chunk::<2>() {
                let n = usize::from(u16::from_be_bytes(*len)).min(tail.len());
                let (datagram, after) = tail.split_at(n);
                out.push(datagram);
                rest = after;
            }
            out
        }
    }
}

/// An input that carries `frames` as `carried` says: the settings byte,
/// then the stream, or each frame as one length-prefixed datagram.
pub fn input(carried: Carried, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![settings(carried)];
    for frame in frames {
        if matches!(carried, Carried::Datagram { .. }) {
            out.extend((frame.len() as u16).to_be_bytes());
        }
        out.extend(frame);
    }
    out
}
