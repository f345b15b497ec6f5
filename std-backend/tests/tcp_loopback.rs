//! Two TCP modules of one process over loopback: messages both ways, a put
//! and a get of registered memory, found through a shared-directory
//! bootstrap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_std::bootstrap::SharedDir;
use btl_std::interfaces::Selection;
use btl_std::tcp::{TcpModule, TcpSetup};

const DEADLINE: Duration = Duration::from_secs(20);

fn setup(links: u8) -> TcpSetup {
    let mut engine = btl_core::engine::config::EngineConfig::new(ProcName::new(0, 0));
    engine.checksum = true;
    let payload = |p: usize| btl_core::pool::FragmentPoolConfig {
        fragment_size: p + 40,
        num: 32,
        max: 64,
        inc: 16,
    };
    TcpSetup {
        tcp: btl_std::tcp::TcpConfig {
            selection: Selection::new("lo", "").expect("lo"),
            links,
            lookup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        pools: btl_core::pool::FragmentPoolsConfig {
            small: payload(256),
            eager: payload(4096),
            max: payload(64 << 10),
        },
        engine,
    }
}

/// Modules A and B of a fresh job, each knowing the other; returns them
/// with B's endpoint at A and A's at B.
fn pair(job: u64, links: u8) -> (TcpModule, TcpModule, EndpointId, EndpointId) {
    let dir = std::env::temp_dir().join(format!("btl-tcp-test-{}-{job}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let boot = Arc::new(SharedDir::new(&dir));
    let (na, nb) = (ProcName::new(job, 0), ProcName::new(job, 1));
    let s = setup(links);
    let mut a = s.build(na, Some(b"k"), boot.clone()).expect("module A");
    let mut b = s.build(nb, Some(b"k"), boot).expect("module B");
    let add = |m: &mut TcpModule, p: ProcName| {
        let mut ep = [None];
        let mut w = [0u64];
        m.add_procs(&[p], &mut ep, &mut Reachability::new(&mut w))
            .expect("add_procs");
        ep[0].expect("reachable over loopback")
    };
    let b_at_a = add(&mut a, nb);
    let a_at_b = add(&mut b, na);
    let _ = std::fs::remove_dir_all(&dir);
    (a, b, b_at_a, a_at_b)
}

/// Progresses both until `done` says so, within the deadline.
fn run(
    a: &mut TcpModule,
    b: &mut TcpModule,
    mut done: impl FnMut(&mut TcpModule, &mut TcpModule) -> bool,
) {
    let start = Instant::now();
    while !done(a, b) {
        assert!(
            start.elapsed() < DEADLINE,
            "no progress within {DEADLINE:?}"
        );
        a.progress();
        b.progress();
    }
}

fn exchange(links: u8, job: u64) {
    let (mut a, mut b, b_at_a, a_at_b) = pair(job, links);
    for i in 0..50u32 {
        let data: Vec<u8> = (0..(i * 997) % 60_000).map(|x| (x ^ i) as u8).collect();
        let d = a
            .prepare_src(b_at_a, &data, 0, Order(0), DescFlags::BTL_OWNERSHIP)
            .expect("descriptor");
        let _ = a.send(b_at_a, d, Tag(0x81)).expect("send");
    }
    let mut got = Vec::new();
    run(&mut a, &mut b, |_, b| {
        while let Some(ev) = b.poll_event() {
            if let Event::Received(m) = ev {
                got.push(m.data.to_vec());
            }
        }
        got.len() == 50
    });
    for (i, d) in got.iter().enumerate() {
        let i = i as u32;
        assert_eq!(d.len() as u32, (i * 997) % 60_000, "message {i} in order");
        assert!(
            d.iter()
                .enumerate()
                .all(|(x, &v)| v == (x as u32 ^ i) as u8)
        );
    }

    // A put of 3 MiB into B, then a get of it back.
    const LEN: usize = 3 << 20;
    let src: &'static mut [u8] = Box::leak((0..LEN).map(|x| (x % 251) as u8).collect());
    let back: &'static mut [u8] = Box::leak(vec![0u8; LEN].into_boxed_slice());
    let dst: &'static mut [u8] = Box::leak(vec![0u8; LEN].into_boxed_slice());
    let hs = a.register_mem(src, Access::empty()).expect("src");
    let hb = a.register_mem(back, Access::empty()).expect("back");
    let hd = b
        .register_mem(dst, Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("dst");
    let whole = |h| MemSlice {
        handle: h,
        offset: 0,
        len: LEN as u64,
    };
    let remote = RemoteSlice {
        key: hd.remote_key(),
        offset: 0,
        len: LEN as u64,
    };
    a.put(b_at_a, whole(hs), remote, 1).expect("put");
    let mut events = Vec::new();
    let poll = |a: &mut TcpModule, events: &mut Vec<String>| {
        while let Some(ev) = a.poll_event() {
            events.push(format!("{ev:?}"));
        }
    };
    run(&mut a, &mut b, |a, _| {
        poll(a, &mut events);
        !events.is_empty()
    });
    assert!(
        events[0].contains("PutComplete") && events[0].contains("Ok"),
        "{events:?}"
    );
    assert_eq!(b.region(hd).expect("dst"), a.region(hs).expect("src"));
    events.clear();
    a.get(b_at_a, whole(hb), remote, 2).expect("get");
    run(&mut a, &mut b, |a, _| {
        poll(a, &mut events);
        !events.is_empty()
    });
    assert!(
        events[0].contains("GetComplete") && events[0].contains("Ok"),
        "{events:?}"
    );
    assert_eq!(a.region(hb).expect("back"), a.region(hs).expect("src"));
    let _ = a_at_b;
    assert_eq!(a.transport().open_connections(), usize::from(links));
}

#[test]
fn messages_put_and_get_over_one_link() {
    exchange(1, 0x7c01);
}

#[test]
fn messages_put_and_get_over_three_links() {
    exchange(3, 0x7c03);
}
