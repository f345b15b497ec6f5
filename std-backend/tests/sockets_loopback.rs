//! Two modules of one process over loopback, TCP and UDP: messages, a put
//! and a get of registered memory, the peers found through a
//! shared-directory bootstrap.

use std::time::Instant;

use btl_core::btl::{Access, Btl, BtlError, Event, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::EndpointId;
use btl_std::transports::tcp::TcpModule;

mod common;
use common::{DEADLINE, local, pair, remote, tcp, udp};

/// Progresses both until `done` says so, within the deadline.
fn run<M: Btl<Memory = Vec<u8>>>(
    a: &mut M,
    b: &mut M,
    mut done: impl FnMut(&mut M, &mut M) -> bool,
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

/// Messages from A to B, then a put of 3 MiB and a get of it back.
fn exchange<M: Btl<Memory = Vec<u8>>>(mut a: M, mut b: M, b_at_a: EndpointId) -> (M, M) {
    let max = a.attributes().max_send_size as u32;
    // Sent as fast as A takes them: past its share of a fragment class (a
    // peer may hold no more), A refuses until what B acknowledged frees
    // some.
    let mut got = Vec::new();
    let mut sent = 0u32;
    run(&mut a, &mut b, |a, b| {
        while sent < 50 {
            let i = sent;
            let data: Vec<u8> = (0..(i * 997) % max).map(|x| (x ^ i) as u8).collect();
            match a.prepare_src(b_at_a, &data, 0, Order(0), DescFlags::BTL_OWNERSHIP) {
                Ok(d) => {
                    let _ = a.send(b_at_a, d, Tag(0x81)).expect("send");
                    sent += 1;
                }
                Err(BtlError::OutOfResource) => break,
                Err(e) => panic!("descriptor: {e}"),
            }
        }
        while let Some(ev) = b.poll_event() {
            if let Event::Received(m) = ev {
                got.push(m.data.to_vec());
            }
        }
        got.len() == 50
    });
    for (i, d) in got.iter().enumerate() {
        let i = i as u32;
        assert_eq!(d.len() as u32, (i * 997) % max, "message {i} in order");
        assert!(
            d.iter()
                .enumerate()
                .all(|(x, &v)| v == (x as u32 ^ i) as u8)
        );
    }

    // A put of 3 MiB into B, then a get of it back.
    const LEN: usize = 3 << 20;
    let src: Vec<u8> = (0..LEN).map(|x| (x % 251) as u8).collect();
    let back: Vec<u8> = vec![0u8; LEN];
    let dst: Vec<u8> = vec![0u8; LEN];
    let hs = a.register_mem(src, Access::empty()).expect("src");
    let hb = a.register_mem(back, Access::empty()).expect("back");
    let hd = b
        .register_mem(dst, Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("dst");
    let whole = |h| local(h, LEN);
    let remote = remote(hd, LEN);
    a.put(b_at_a, whole(hs), remote, 1).expect("put");
    let mut events = Vec::new();
    let poll = |a: &mut M, events: &mut Vec<String>| {
        while let Some(ev) = a.poll_event() {
            // Room follows the refused sends above, which tried again.
            if !matches!(ev, Event::Room { .. }) {
                events.push(format!("{ev:?}"));
            }
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
    (a, b)
}

fn tcp_pair(links: u8, n: u64) -> (TcpModule, TcpModule, EndpointId) {
    let (a, b, b_at_a, _) = pair(n, |me, key, boot| tcp(links).build(me, key, boot));
    (a, b, b_at_a)
}

#[test]
fn tcp_messages_put_and_get_over_one_link() {
    let (a, b, b_at_a) = tcp_pair(1, 0x7c01);
    let (a, _) = exchange(a, b, b_at_a);
    assert_eq!(a.transport().open_connections(), 1);
}

#[test]
fn tcp_messages_put_and_get_over_three_links() {
    let (a, b, b_at_a) = tcp_pair(3, 0x7c03);
    let (mut a, mut b) = exchange(a, b, b_at_a);
    // The first link carries the peer at once; the others follow.
    run(&mut a, &mut b, |a, _| a.transport().open_connections() == 3);
}

#[test]
fn udp_messages_put_and_get() {
    let (a, b, b_at_a, _) = pair(0x7d01, |me, key, boot| udp().build(me, key, boot));
    let (a, _) = exchange(a, b, b_at_a);
    assert_eq!(a.transport().links(), 1);
}

/// Messages of 64 KiB one after the other: past the first, each payload
/// is read in place, straight into its receive fragment (the read buffer
/// takes only the header and a little of it), and arrives intact, its
/// checksum verified.
#[test]
fn tcp_reads_a_run_of_large_payloads_in_place() {
    let (mut a, mut b, b_at_a) = tcp_pair(1, 0x7c04);
    const LEN: usize = 60 << 10;
    const COUNT: usize = 24;
    let data: Vec<u8> = (0..LEN * COUNT).map(|x| (x % 251) as u8).collect();
    let source = a
        .register_mem(data.clone(), Access::empty())
        .expect("registered");
    let mut sent = 0;
    let mut got = 0;
    run(&mut a, &mut b, |a, b| {
        if sent < COUNT {
            let piece = local(source, LEN);
            let piece = btl_core::btl::MemSlice {
                offset: (sent * LEN) as u64,
                ..piece
            };
            if let Ok(d) =
                a.prepare_src_registered(b_at_a, piece, 0, Order(0), DescFlags::BTL_OWNERSHIP)
            {
                let _ = a.send(b_at_a, d, Tag(0x84)).expect("send");
                sent += 1;
            }
        }
        while let Some(event) = b.poll_event() {
            if let Event::Received(m) = event {
                assert_eq!(
                    m.data,
                    &data[got * LEN..(got + 1) * LEN],
                    "message {got} intact"
                );
                got += 1;
            }
        }
        while a.poll_event().is_some() {}
        got == COUNT
    });
    let read = b.transport().bytes_read();
    assert!(read.total >= (LEN * COUNT) as u64, "{read:?}");
    assert!(
        read.in_place * 2 > read.total,
        "most of the payloads read in place: {read:?}"
    );
}
