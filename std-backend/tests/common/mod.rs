//! What the socket tests share: small pools, an engine that checks
//! CRCs, TCP and UDP setups on loopback, a job's bootstrap directory.

#![allow(dead_code)] // each test file uses a part

use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_std::bootstrap::SharedDir;
use btl_std::interfaces::Selection;
use btl_std::tcp::TcpSetup;
use btl_std::udp::UdpSetup;

pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn pools() -> btl_core::pool::FragmentPoolsConfig {
    let payload = |p: usize| btl_core::pool::FragmentPoolConfig {
        fragment_size: p + 40,
        num: 32,
        max: 64,
        inc: 16,
    };
    btl_core::pool::FragmentPoolsConfig {
        small: payload(256),
        eager: payload(4096),
        max: payload(64 << 10),
    }
}

pub fn engine() -> btl_core::engine::config::EngineConfig {
    let mut engine = btl_core::engine::config::EngineConfig::new(ProcName::new(0, 0));
    engine.checksum = true;
    engine
}

pub fn tcp(links: u8) -> TcpSetup {
    TcpSetup {
        tcp: btl_std::tcp::TcpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            links,
            lookup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        pools: pools(),
        engine: engine(),
    }
}

pub fn udp() -> UdpSetup {
    UdpSetup {
        udp: btl_std::udp::UdpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            lookup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        pools: pools(),
        engine: engine(),
    }
}

/// A fresh job's bootstrap directory and process names A and B.
pub fn job(job: u64) -> (Arc<SharedDir>, std::path::PathBuf, ProcName, ProcName) {
    let dir = std::env::temp_dir().join(format!("btl-sockets-test-{}-{job}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    (
        Arc::new(SharedDir::new(&dir)),
        dir,
        ProcName::new(job, 0),
        ProcName::new(job, 1),
    )
}

/// Makes `p` known to `m`; returns its endpoint.
pub fn add<M: Btl<'static>>(m: &mut M, p: ProcName) -> EndpointId {
    let mut ep = [None];
    let mut w = [0u64];
    m.add_procs(&[p], &mut ep, &mut Reachability::new(&mut w))
        .expect("add_procs");
    ep[0].expect("reachable over loopback")
}
