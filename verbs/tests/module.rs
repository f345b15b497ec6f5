//! Two verbs modules in one process, as `btl-std` runs them: each a
//! context on one soft device, their side channels UDP sockets on the
//! loopback found through a shared-directory bootstrap, their engines'
//! bytes in SENDs through RC queue pairs.

use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::config::EngineConfig;
use btl_std::bootstrap::{Bootstrap, SharedDir};
use btl_std::driver::module::Module;
use btl_std::driver::net::Os;
use btl_verbs::module::Verbs;
use btl_verbs::soft::{SoftFabric, SoftHca};

type VerbsModule = Module<Verbs<SoftHca, Os>>;

mod common;

const JOB: u64 = 0x7E4C;

fn open(fabric: &SoftFabric, bootstrap: &Arc<dyn Bootstrap>, rank: u32) -> VerbsModule {
    let config = EngineConfig::new(ProcName::new(JOB, rank));
    common::soft_module(fabric, config, Arc::clone(bootstrap)).expect("a verbs module")
}

/// Progresses both until `done` says so, at most 20 s.
fn until(
    a: &mut VerbsModule,
    b: &mut VerbsModule,
    mut done: impl FnMut(&mut VerbsModule, &mut VerbsModule) -> bool,
) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        a.progress();
        b.progress();
        if done(a, b) {
            return;
        }
    }
    panic!("not done within 20 s");
}

fn received(m: &mut VerbsModule, got: &mut Vec<Vec<u8>>) {
    while let Some(ev) = m.poll_event() {
        match ev {
            Event::Received(r) => got.push(r.data.to_vec()),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn two_modules_talk_over_rc_queue_pairs() {
    let dir = std::env::temp_dir().join(format!("btl-verbs-module-{}", std::process::id()));
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(SharedDir::new(&dir));
    let fabric = SoftFabric::with_device("soft0");
    let mut a = open(&fabric, &bootstrap, 0);
    let mut b = open(&fabric, &bootstrap, 1);
    let to_b: EndpointId = a
        .reach(ProcName::new(JOB, 1), Duration::from_secs(5))
        .expect("B");
    let to_a: EndpointId = b
        .reach(ProcName::new(JOB, 0), Duration::from_secs(5))
        .expect("A");

    // Messages of every class both ways, each once and in order.
    let sizes = [1usize, 200, 4000, 30_000, 60_000];
    for (i, &len) in sizes.iter().enumerate() {
        let data = vec![i as u8; len];
        let d = a
            .prepare_src(to_b, &data, 0, Order(0), DescFlags::BTL_OWNERSHIP)
            .expect("descriptor");
        let _ = a.send(to_b, d, Tag(0x81)).expect("send");
    }
    let mut got = Vec::new();
    until(&mut a, &mut b, |_, b| {
        received(b, &mut got);
        got.len() == sizes.len()
    });
    for (i, (m, &len)) in got.iter().zip(&sizes).enumerate() {
        assert_eq!(
            (m.len(), m.iter().all(|&x| x == i as u8)),
            (len, true),
            "message {i}"
        );
    }
    b.sendi(to_a, &[], b"pong", Tag(0x82), Order(0), DescFlags::empty())
        .expect("sendi");
    let mut back = Vec::new();
    until(&mut a, &mut b, |a, _| {
        received(a, &mut back);
        !back.is_empty()
    });
    assert_eq!(back, [b"pong".to_vec()]);
    assert_eq!(
        a.transport().links().queue_pairs(),
        1,
        "one queue pair each way"
    );

    // A put of 300,000 bytes from A into B's registered memory.
    let src: Vec<u8> = (0..300_000).map(|i| (i % 251) as u8).collect();
    let hs = a.register_mem(src, Access::empty()).expect("src");
    let hd = b
        .register_mem(vec![0; 300_000], Access::REMOTE_WRITE)
        .expect("dst");
    let len = 300_000;
    a.put(
        to_b,
        MemSlice {
            handle: hs,
            offset: 0,
            len,
        },
        RemoteSlice {
            key: hd.remote_key(),
            offset: 0,
            len,
        },
        9,
    )
    .expect("put");
    let mut done = None;
    until(&mut a, &mut b, |a, _| {
        while let Some(ev) = a.poll_event() {
            if let Event::PutComplete { result, ctx: 9, .. } = ev {
                done = Some(result);
            }
        }
        done.is_some()
    });
    assert_eq!(done, Some(Ok(())));
    let region = b.region(hd).expect("dst");
    assert!(
        region
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i % 251) as u8)
    );
    assert_eq!(fabric.counters().rdma_writes, 1, "one RDMA write");
    // Deregistered, the regions leave the device first, and come back.
    assert_eq!(a.transport().links().registrations(), 1);
    let back = a.deregister_mem(hs).expect("deregistered");
    assert_eq!(back.len(), 300_000);
    assert_eq!(a.transport().links().registrations(), 0);
    a.finalize();
    b.finalize();
    let _ = std::fs::remove_dir_all(&dir);
}
