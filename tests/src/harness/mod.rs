//! Harnesses: one [`World`](crate::world::World) per backend.
//!
//! A harness builds two processes' BTLs (or, for the loopback, one),
//! connects them, and carries their bytes when the suite calls `progress`.

pub mod bml;
pub mod datagram_pair;
pub mod loopback;
pub mod remote;
pub mod serial;
pub mod sm;
pub mod smoltcp;
pub mod sockets;
pub mod stream_pair;
pub mod verbs;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::HEADER_RESERVE;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::rtt::RttConfig;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::Duration;

/// Pools of `fragments` fragments a class, all there from the start:
/// 256-byte small ones, and eager and largest ones carrying `eager` and
/// `max` bytes of payload behind the engine's header reserve.
pub fn pools(eager: usize, max: usize, fragments: u32) -> FragmentPoolsConfig {
    let class = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: fragments,
        max: fragments,
        inc: 8,
    };
    FragmentPoolsConfig {
        small: class(256),
        eager: class(eager),
        max: class(max),
    }
}

/// The configuration of a harness's engine: process `me` holding `key`,
/// with CRC32C trailers, and retransmission timeouts in ticks of `tick`
/// (20 at first, 2 at the least, `max_rto_ticks` at the most), so that a
/// simulated clock's rounds bound them.
pub fn engine_config(me: ProcName, key: &[u8], tick: Duration, max_rto_ticks: u64) -> EngineConfig {
    let mut config = EngineConfig::new(me);
    config.job_key = Some(key.try_into().expect("a short job key"));
    config.checksum = true;
    config.rtt = RttConfig {
        initial_rto: 20 * tick,
        min_rto: 2 * tick,
        max_rto: max_rto_ticks * tick,
    };
    config
}

/// Makes `proc` known to `btl` (`add_procs`); its endpoint.
pub fn add_peer<B: Btl + ?Sized>(btl: &mut B, proc: ProcName) -> EndpointId {
    btl_core::btl::add_proc(btl, proc)
        .expect("add_procs")
        .expect("the engine reaches the other process")
}
