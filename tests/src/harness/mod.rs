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

/// A directory removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh job of this process, and its shared directory (`what` in its
/// name), removed when dropped.
pub fn fresh_job(what: &str) -> (u64, TempDir) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static JOBS: AtomicU32 = AtomicU32::new(0);
    let n = JOBS.fetch_add(1, Ordering::Relaxed);
    let job = (u64::from(std::process::id()) << 16) | u64::from(n);
    let dir = std::env::temp_dir().join(format!("btl-{what}-{job:x}"));
    std::fs::create_dir_all(&dir).expect("the job's directory");
    (job, TempDir(dir))
}

/// `a` (process `names[0]`) and `b` (`names[1]`) each made to know the
/// other at once, on two threads, as two processes would (a module that
/// waits for its peer to join back needs the peer to be joining too): the
/// two, and each one's endpoint for the other.
pub fn join_pair<B: Btl + Send>(
    mut a: B,
    mut b: B,
    names: [ProcName; 2],
) -> ([B; 2], [EndpointId; 2]) {
    std::thread::scope(|s| {
        let joining = s.spawn(move || {
            let ep = add_peer(&mut a, names[1]);
            (a, ep)
        });
        let to_a = add_peer(&mut b, names[0]);
        let (a, to_b) = joining.join().expect("A joins B");
        ([a, b], [to_b, to_a])
    })
}

/// Makes `proc` known to `btl` (`add_procs`); its endpoint.
pub fn add_peer<B: Btl + ?Sized>(btl: &mut B, proc: ProcName) -> EndpointId {
    btl_core::btl::add_proc(btl, proc)
        .expect("add_procs")
        .expect("the engine reaches the other process")
}
