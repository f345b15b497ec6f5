//! The modules' data paths allocate nothing: after a warm-up, sendi,
//! send, put, events and progress over TCP, UDP and shared memory never
//! touch the global allocator.

use std::sync::Arc;
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::HEADER_RESERVE;
use btl_core::engine::config::EngineConfig;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_std::ModuleBuilder;
use btl_std::bootstrap::SharedDir;
use btl_std::transports::interfaces::Selection;
use btl_std::transports::tcp::{TcpConfig, TcpSetup};
use btl_std::transports::udp::{UdpConfig, UdpSetup};
use btl_tests::alloc_count::{Counting, allocations};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn pools() -> FragmentPoolsConfig {
    let class = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: 32,
        max: 32,
        inc: 32,
    };
    FragmentPoolsConfig {
        small: class(256),
        eager: class(4096),
        max: class(16 << 10),
    }
}

fn boot(tag: &str) -> (Arc<SharedDir>, std::path::PathBuf, u64) {
    let job = u64::from(std::process::id()) << 8 | u64::from(tag.len() as u8);
    let dir = std::env::temp_dir().join(format!("btl-no-alloc-{tag}-{job}"));
    let _ = std::fs::remove_dir_all(&dir);
    (Arc::new(SharedDir::new(&dir)), dir, job)
}

fn reach<B: Btl<Memory = Vec<u8>>>(m: &mut B, p: ProcName) -> EndpointId {
    let mut ep = [None];
    let mut w = [0u64];
    m.add_procs(&[p], &mut ep, &mut Reachability::new(&mut w))
        .expect("add_procs");
    ep[0].expect("reachable")
}

/// One round of traffic: a sendi and a send each way, a put, every event
/// taken, progress until all of it is done.
fn round<B: Btl<Memory = Vec<u8>>>(
    a: &mut B,
    b: &mut B,
    b_at_a: EndpointId,
    a_at_b: EndpointId,
    put: (MemSlice, RemoteSlice),
) {
    let payload = [7u8; 100];
    let flags = DescFlags::BTL_OWNERSHIP;
    // sendi goes only when the link is up and credits allow: until then
    // the caller progresses (or falls back to send).
    let start = Instant::now();
    while let Err(e) = a.sendi(b_at_a, &[1; 8], &payload, Tag(0x90), Order(0), flags) {
        assert!(start.elapsed() < Duration::from_secs(20), "sendi A: {e:?}");
        a.progress();
        b.progress();
    }
    while let Err(e) = b.sendi(a_at_b, &[2; 8], &payload, Tag(0x90), Order(0), flags) {
        assert!(start.elapsed() < Duration::from_secs(20), "sendi B: {e:?}");
        a.progress();
        b.progress();
    }
    let d = a
        .prepare_src(b_at_a, &[3u8; 3000], 0, Order(0), flags)
        .expect("descriptor");
    let _ = a.send(b_at_a, d, Tag(0x91)).expect("send");
    let _ = a.put(b_at_a, put.0, put.1, 9).expect("put");
    let (mut got_b, mut got_a, mut put_done) = (0, 0, false);
    let start = Instant::now();
    while got_b < 2 || got_a < 1 || !put_done {
        assert!(start.elapsed() < Duration::from_secs(20), "stuck");
        a.progress();
        b.progress();
        while let Some(ev) = a.poll_event() {
            match ev {
                Event::Received(_) => got_a += 1,
                Event::PutComplete { result, .. } => {
                    result.expect("put");
                    put_done = true;
                }
                other => panic!("{other:?}"),
            }
        }
        while let Some(ev) = b.poll_event() {
            match ev {
                Event::Received(_) => got_b += 1,
                other => panic!("{other:?}"),
            }
        }
    }
}

/// Joins `a` and `b`, warms them up, then counts the allocations of many
/// rounds.
fn count<B: Btl<Memory = Vec<u8>>>(mut a: B, mut b: B, na: ProcName, nb: ProcName) -> usize {
    let b_at_a = reach(&mut a, nb);
    let a_at_b = reach(&mut b, na);
    count_joined(a, b, b_at_a, a_at_b)
}

/// Warms `a` and `b`, joined, up, then counts the allocations of many
/// rounds.
fn count_joined<B: Btl<Memory = Vec<u8>>>(
    mut a: B,
    mut b: B,
    b_at_a: EndpointId,
    a_at_b: EndpointId,
) -> usize {
    let src = a
        .register_mem(vec![5u8; 32 << 10], Access::empty())
        .expect("src");
    let dst = b
        .register_mem(vec![0u8; 32 << 10], Access::REMOTE_WRITE)
        .expect("dst");
    let put = (
        MemSlice {
            handle: src,
            offset: 0,
            len: 32 << 10,
        },
        RemoteSlice {
            key: dst.remote_key(),
            offset: 0,
            len: 32 << 10,
        },
    );
    for _ in 0..20 {
        round(&mut a, &mut b, b_at_a, a_at_b, put);
    }
    let before = allocations();
    for _ in 0..300 {
        round(&mut a, &mut b, b_at_a, a_at_b, put);
    }
    allocations() - before
}

fn engine() -> EngineConfig {
    EngineConfig::new(ProcName::new(0, 0))
}

#[test]
fn tcp_data_path_does_not_allocate() {
    let (boot, dir, job) = boot("tcp");
    let setup = TcpSetup {
        tcp: TcpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            ..TcpConfig::default()
        },
        pools: pools(),
        engine: engine(),
        capacities: btl_core::engine::Capacities::SOCKET_MODULE,
    };
    let (na, nb) = (ProcName::new(job, 0), ProcName::new(job, 1));
    let a = setup.build(na, None, boot.clone()).expect("A");
    let b = setup.build(nb, None, boot).expect("B");
    let n = count(a, b, na, nb);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(n, 0, "allocations in 300 rounds over TCP");
}

#[test]
fn udp_data_path_does_not_allocate() {
    let (boot, dir, job) = boot("udp-");
    let setup = UdpSetup {
        udp: UdpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            mtu: Some(9000),
            ..UdpConfig::default()
        },
        pools: pools(),
        engine: engine(),
        capacities: btl_core::engine::Capacities::SOCKET_MODULE,
    };
    let (na, nb) = (ProcName::new(job, 0), ProcName::new(job, 1));
    let a = setup.build(na, None, boot.clone()).expect("A");
    let b = setup.build(nb, None, boot).expect("B");
    let n = count(a, b, na, nb);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(n, 0, "allocations in 300 rounds over UDP");
}

#[test]
fn sm_data_path_does_not_allocate() {
    let (_, dir, job) = boot("sm");
    let (na, nb) = (ProcName::new(job, 0), ProcName::new(job, 1));
    let open = |me| {
        ModuleBuilder::new(me)
            .ignore_environment()
            .shared_dir(&dir)
            .sm()
            .expect("an sm module")
    };
    let (mut a, mut b) = (open(na), open(nb));
    // Each waits for the other's claim as it joins: on two threads at once.
    let (a, b_at_a, b, a_at_b) = std::thread::scope(|s| {
        let joining = s.spawn(move || {
            let ep = reach(&mut b, na);
            (b, ep)
        });
        let b_at_a = reach(&mut a, nb);
        let (b, a_at_b) = joining.join().expect("B joins");
        (a, b_at_a, b, a_at_b)
    });
    let n = count_joined(a, b, b_at_a, a_at_b);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(n, 0, "allocations in 300 rounds over shared memory");
}
