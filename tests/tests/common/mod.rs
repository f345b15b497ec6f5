//! What the engine's pair-level tests share: an engine with pools for
//! messages up to 64 KiB, and how to read its events and pools.

#![allow(dead_code)] // each test file uses a part

use btl_core::btl::{Btl, Event};
use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, HEADER_RESERVE, Stream};
use btl_core::pool::{FragmentClass, FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::Instant;
use btl_std::driver::heap::{Heap, HeapEngine};

pub type E = HeapEngine<Stream>;

/// What the tests' engines hold: a few peers, links and registrations,
/// the default operations and events.
pub const CAPACITIES: Capacities = Capacities {
    peers: 4,
    links: 4,
    ops: 64,
    events: 256,
    registrations: 4,
};

pub fn engine(me: ProcName, key: Option<&[u8]>, credits: u32) -> E {
    let mut config = EngineConfig::new(me);
    config.job_key = key.map(|k| heapless::Vec::from_slice(k).expect("short key"));
    config.initial_credits = credits;
    config.checksum = true;
    engine_with(config)
}

/// An engine with `config` and pools for messages up to 64 KiB.
pub fn engine_with(config: EngineConfig) -> E {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 64,
        max: 64,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096 + HEADER_RESERVE),
        max: pool(65536 + HEADER_RESERVE),
    };
    Heap::engine(config, Stream, CAPACITIES, cfg, Instant::ZERO).expect("pools")
}

/// Every event of `e` as text, but `Room` (which follows any refusal of
/// a caller that tries again anyway): [`drain_all`] keeps those.
pub fn drain(e: &mut E) -> Vec<String> {
    let mut out = drain_all(e);
    out.retain(|e| !e.starts_with("room"));
    out
}

/// Every event of `e` as text.
pub fn drain_all(e: &mut E) -> Vec<String> {
    let mut out = Vec::new();
    let mut returned = Vec::new();
    while let Some(ev) = e.poll_event() {
        out.push(match ev {
            Event::Received(m) => format!("recv {} {}", m.tag.0, m.data.len()),
            Event::SendComplete { desc, result, .. } => {
                returned.extend(desc);
                format!("send {result:?}")
            }
            Event::PutComplete { result, ctx, .. } => format!("put {ctx} {result:?}"),
            Event::GetComplete { result, ctx, .. } => format!("get {ctx} {result:?}"),
            Event::PutArrived { slice, imm, .. } => format!("arrived {imm} {}", slice.len),
            Event::PeerLeft { endpoint } => format!("left {}", endpoint.0),
            Event::Room { endpoint } => format!("room {}", endpoint.0),
            Event::Error(err) => format!("error {:?}", err.error),
        });
    }
    for d in returned {
        e.free(d).expect("a descriptor of this engine");
    }
    out
}

use std::format;
use std::string::String;

pub fn in_use(e: &E) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| e.pools().stats(c).in_use)
        .sum()
}
