//! Plays hostile peers on the verbs side channel: arbitrary messages, from
//! four fake processes, to a verbs transport on the software HCA with the
//! `oob` CPC and an engine above it. Nothing may panic; whatever parses
//! must encode back to the same bytes; the transport never holds more queue
//! pairs than its peers' bound; and after finalize it holds none.
#![no_main]

use btl_core::engine::{Capacities, HEADER_RESERVE, Stream};
use btl_core::mca::Registry;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::{Duration, Instant};
use btl_fuzz::cpc_message::{ME, PEERS, records};
use btl_std::driver::heap::Heap;
use btl_verbs::cpc::{Cpc, MessageRepr, Oob, OobConfig};
use btl_verbs::soft::SoftFabric;
use btl_verbs::transport::{Host, MemoryHub, SideChannel, Transport, VerbsConfig};
use libfuzzer_sys::fuzz_target;

/// Queue pairs (and CPC attempts) the transport may hold.
const MAX_PEERS: usize = 3;

fuzz_target!(|data: &[u8]| {
    let fabric = SoftFabric::with_device("soft0");
    let hub = MemoryHub::new();
    let mut peers: Vec<_> = PEERS.iter().map(|&p| hub.join(p)).collect();
    let mut cpc = Oob::new(OobConfig {
        timeout: Duration::from_millis(20),
        max_peers: MAX_PEERS,
    });
    let params = Registry::<4>::new();
    <Oob as Cpc<Host<btl_verbs::soft::SoftHca>>>::init(&mut cpc, &params, ME, 1).expect("init");
    let config = VerbsConfig {
        max_peers: MAX_PEERS,
        recv_buffers: 2,
        send_buffers: 2,
        buffer_size: 1024,
        ..VerbsConfig::default()
    };
    let mut nonce = 0u8;
    let nonces = move || {
        nonce = nonce.wrapping_add(1);
        [nonce; 16]
    };
    let mut transport = Transport::new(
        fabric.open("soft0").expect("device"),
        config,
        Box::new(cpc),
        Box::new(hub.join(ME)),
        Box::new(nonces),
    )
    .expect("transport");
    let engine_config = btl_core::engine::config::EngineConfig::new(ME);
    let class = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: 8,
        max: 8,
        inc: 8,
    };
    let pools = FragmentPoolsConfig {
        small: class(256),
        eager: class(1024),
        max: class(4096),
    };
    let Ok(mut engine) = Heap::<Vec<u8>>::engine::<Stream, 64>(
        engine_config,
        Stream,
        Capacities {
            peers: 4,
            links: 4,
            ops: 8,
            events: 16,
            registrations: 2,
        },
        pools,
        Instant::ZERO,
    ) else {
        return;
    };
    let mut now = Instant::ZERO;
    for r in records(data) {
        if let Ok(m) = MessageRepr::parse(r.bytes) {
            assert_eq!(m.emit().as_slice(), r.bytes, "what parses encodes the same");
        }
        if r.tick {
            now += Duration::from_millis(5);
            fabric.set_now(now);
        }
        peers[r.from].send(ME, r.bytes);
        transport.progress(&mut engine, now);
        assert!(
            transport.queue_pairs() <= MAX_PEERS,
            "queue pairs within the bound"
        );
        // What the transport sent back is read and dropped.
        for p in &mut peers {
            while p.recv().is_some() {}
        }
    }
    transport.finalize();
    assert_eq!(transport.queue_pairs(), 0, "finalize leaves no queue pair");
});
