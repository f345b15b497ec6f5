//! What one message costs beside many idle peers: round trips of 8 bytes
//! between two TCP modules on loopback (one thread, busy-polling) while
//! the answering module also holds 0, 64 and then 1,024 connected peers
//! that send nothing. The engine settles, times and writes only the peers
//! and links a call touched, so the three should cost about the same; a
//! walk over every peer on every call made the 1,024-peer round trip 28
//! times slower.
//!
//! The idle peers are modules of their own (the smallest: two peer slots,
//! two fragments of each size), each connected to the answering module by
//! its address; they are moved between the measurements so that they
//! answer its keepalives.

use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::{Btl, Event, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::Capacities;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_std::TcpModule;
use btl_std::bootstrap::StaticPeers;
use criterion::{Criterion, criterion_group, criterion_main};

#[path = "../tests/common/mod.rs"]
mod common;

const PING: Tag = Tag(0x81);
const PONG: Tag = Tag(0x82);
const KEY: &[u8] = b"idle peers";
/// The counts of idle peers measured, in order.
const IDLE: [usize; 3] = [0, 64, 1024];

/// A module that knows no one, with `peers` peer slots and pools of
/// `fragments` fragments of each size.
fn module(me: ProcName, peers: usize, fragments: u32) -> TcpModule {
    let mut setup = common::tcp(1);
    setup.capacities = Capacities::for_peers(peers);
    let pool = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + btl_core::engine::HEADER_RESERVE,
        num: fragments,
        max: fragments,
        inc: fragments,
    };
    setup.pools = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096),
        max: pool(64 << 10),
    };
    let alone = Arc::new(StaticPeers::new(Vec::new(), "no list"));
    setup.build(me, Some(KEY), alone).expect("a TCP module")
}

/// Sends 8 bytes from `from` to `to` as `tag` and moves both until `to`
/// has them.
fn hop(from: &mut TcpModule, to: &mut TcpModule, at: EndpointId, tag: Tag) -> EndpointId {
    while from
        .sendi(at, &[], &[7u8; 8], tag, Order(0), DescFlags::BTL_OWNERSHIP)
        .is_err()
    {
        from.progress();
        to.progress();
    }
    loop {
        from.progress();
        to.progress();
        while let Some(event) = to.poll_event() {
            if let Event::Received(m) = event
                && m.tag == tag
            {
                return m.from;
            }
        }
        while from.poll_event().is_some() {}
    }
}

/// `client` reaches `server` at `address` while a thread moves the
/// server; the server's endpoint at the client.
fn reach(server: &mut TcpModule, client: &mut TcpModule, address: &str) -> EndpointId {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let serving = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                server.progress();
                while server.poll_event().is_some() {}
            }
        });
        let reached = client.connect_to(address, Duration::from_secs(10));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        serving.join().expect("the server's thread");
        reached.expect("the client reaches the server").0
    })
}

fn idle_peers(c: &mut Criterion) {
    let server_name = ProcName::new(0x1d1e, 0);
    let mut server = module(server_name, IDLE[2] + 8, 16);
    let address = server.directory().card().contacts[0].addr.to_string();
    let mut client = module(ProcName::new(0x1d1e, 1), 2, 16);
    let at_server = reach(&mut server, &mut client, &address);
    let at_client = hop(&mut client, &mut server, at_server, PING);
    let mut idle: Vec<TcpModule> = Vec::new();
    let mut group = c.benchmark_group("round trip 8 B over tcp beside idle peers");
    for count in IDLE {
        while idle.len() < count {
            let me = ProcName::new(0x1d1e, 2 + idle.len() as u32);
            let mut m = module(me, 2, 2);
            reach(&mut server, &mut m, &address);
            idle.push(m);
        }
        // Keepalives answered before the measurement.
        for m in &mut idle {
            m.progress();
        }
        group.bench_function(format!("{count} idle peers"), |b| {
            b.iter(|| {
                hop(&mut client, &mut server, at_server, PING);
                hop(&mut server, &mut client, at_client, PONG);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, idle_peers);
criterion_main!(benches);
