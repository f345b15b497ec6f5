//! What the socket tests share: small pools, an engine that checks
//! CRCs, TCP and UDP setups on loopback, a job's bootstrap directory.

#![allow(dead_code)] // each test file uses a part

use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::{Btl, MemHandle, MemSlice, RemoteSlice};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::HEADER_RESERVE;
use btl_std::bootstrap::SharedDir;
use btl_std::transports::interfaces::Selection;
use btl_std::transports::tcp::TcpSetup;
use btl_std::transports::udp::UdpSetup;

pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn pools() -> btl_core::pool::FragmentPoolsConfig {
    let payload = |p: usize| btl_core::pool::FragmentPoolConfig {
        fragment_size: p + HEADER_RESERVE,
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
        tcp: btl_std::transports::tcp::TcpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            links,
            lookup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        pools: pools(),
        engine: engine(),
        capacities: btl_core::engine::Capacities::SOCKET_MODULE,
    }
}

pub fn udp() -> UdpSetup {
    UdpSetup {
        udp: btl_std::transports::udp::UdpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            lookup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        pools: pools(),
        engine: engine(),
        capacities: btl_core::engine::Capacities::SOCKET_MODULE,
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
pub fn add<M: Btl>(m: &mut M, p: ProcName) -> EndpointId {
    let mut ep = [None];
    let mut w = [0u64];
    m.add_procs(&[p], &mut ep, &mut Reachability::new(&mut w))
        .expect("add_procs");
    ep[0].expect("reachable over loopback")
}

/// Modules A and B of a fresh job `n`, made by `build` (process, job key,
/// bootstrap), each knowing the other: A, B, B's endpoint at A and A's
/// at B.
pub fn pair<M: Btl>(
    n: u64,
    build: impl Fn(ProcName, Option<&[u8]>, Arc<SharedDir>) -> std::io::Result<M>,
) -> (M, M, EndpointId, EndpointId) {
    let (boot, dir, na, nb) = job(n);
    let mut a = build(na, Some(b"k"), boot.clone()).expect("A");
    let mut b = build(nb, Some(b"k"), boot).expect("B");
    let b_at_a = add(&mut a, nb);
    let a_at_b = add(&mut b, na);
    let _ = std::fs::remove_dir_all(dir);
    (a, b, b_at_a, a_at_b)
}

/// The first `len` bytes of registration `handle`, as its owner names them.
pub fn local(handle: MemHandle, len: usize) -> MemSlice {
    MemSlice {
        handle,
        offset: 0,
        len: len as u64,
    }
}

/// The first `len` bytes of registration `handle`, as a peer names them.
pub fn remote(handle: MemHandle, len: usize) -> RemoteSlice {
    RemoteSlice {
        key: handle.remote_key(),
        offset: 0,
        len: len as u64,
    }
}
