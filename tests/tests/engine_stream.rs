//! The engine over an in-memory stream pair: two engines driven by
//! [`StreamPair`](btl_tests::pair::stream::StreamPair), pumped until nothing moves.

use btl_core::engine::Source;
use btl_core::engine::config::EngineConfig;
use btl_tests::pair::Side;
use btl_tests::pair::stream::{Closure, End, Role, StreamPair};

mod common;
use btl_core::btl::{
    Access, Btl, BtlError, Event, LostReason, MemSlice, RejectCode, RemoteSlice, SendStatus, Tag,
};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::pool::FragmentClass;
use btl_core::time::{Duration, Instant};
use btl_std::driver::recorder::Recorder;
use common::{E, drain, drain_all, engine, engine_with, in_use};

const A: ProcName = ProcName::new(5, 0);
const B: ProcName = ProcName::new(5, 1);

/// The pair the tests drive: boxed engines, 4 KiB pipes (smaller than an
/// eager frame, so partial writes and reads happen all the time).
type Pair = StreamPair<E, 4096, 4, Box<E>>;

/// Engines `a` (process A) and `b` (process B), each knowing the other;
/// returns the endpoint of B at A and of A at B.
fn new_pair(a: E, b: E) -> (Pair, EndpointId, EndpointId) {
    let mut pair = Pair::new(Box::new(a), Box::new(b), [A, B], 0x5eed);
    let [ep_b, ep_a] = pair.introduce().expect("each reaches the other");
    (pair, ep_b, ep_a)
}

/// Plays the driver until nothing moves (bounded).
fn pump(pair: &mut Pair) {
    pair.run_until_idle(10_000)
        .expect("the pair never went quiet");
}

#[test]
fn handshake_then_messages_in_order_with_content() {
    let (mut pair, ep_b, _) = new_pair(engine(A, Some(b"key"), 16), engine(B, Some(b"key"), 16));
    let mut got = Vec::new();
    let take = |b: &mut E, got: &mut Vec<usize>| {
        while let Some(ev) = b.poll_event() {
            if let Event::Received(m) = ev {
                let n = got.len() as u32;
                assert_eq!(m.tag, Tag(0x80 + (n % 4) as u8));
                assert!(
                    m.data.iter().enumerate().all(|(x, &b)| b == x as u8),
                    "message {n} intact"
                );
                got.push(m.data.len());
            }
        }
    };
    for i in 0..40u32 {
        let data: Vec<u8> = (0..i * 97).map(|x| x as u8).collect();
        let d = pair
            .a()
            .prepare_src(ep_b, &data, 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("desc");
        let _ = pair
            .a()
            .send(ep_b, d, Tag(0x80 + (i % 4) as u8))
            .expect("send");
        pump(&mut pair);
        take(pair.b(), &mut got);
    }
    for _ in 0..5 {
        pump(&mut pair);
        take(pair.b(), &mut got);
    }
    assert_eq!(
        got,
        (0..40u32).map(|i| (i * 97) as usize).collect::<Vec<_>>()
    );
    pump(&mut pair);
    assert!(pair.a().is_connected(ep_b));
    assert_eq!(
        drain(pair.a()),
        Vec::<String>::new(),
        "owned sends complete silently"
    );
    pump(&mut pair);
    assert_eq!(
        in_use(pair.engine(Side::A)),
        0,
        "every acknowledged send was freed"
    );
    assert_eq!(in_use(pair.engine(Side::B)), 0);
}

#[test]
fn credits_hold_a_sender_back_until_the_receiver_polls() {
    let (mut pair, ep_b, _) = new_pair(engine(A, None, 4), engine(B, None, 4));
    for _ in 0..20 {
        let d = pair
            .a()
            .prepare_src(ep_b, &[1; 100], 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("desc");
        let _ = pair.a().send(ep_b, d, Tag(0x81)).expect("send");
    }
    pump(&mut pair);
    assert_eq!(pair.b().progress(), 4, "no more than the credits arrived");
    pair.advance(Duration::from_millis(5));
    let mut received = 0;
    for _ in 0..20 {
        while let Some(ev) = pair.b().poll_event() {
            if matches!(ev, Event::Received(_)) {
                received += 1;
            }
        }
        pump(&mut pair);
    }
    assert_eq!(received, 20);
    let waited = pair.a().peer_metrics().next().expect("B").metrics;
    assert!(
        waited.credit_starved >= Duration::from_millis(5),
        "A waited for credit while B polled nothing: {:?}",
        waited.credit_starved
    );
    assert_eq!(waited.messages_sent, 20);
}

#[test]
fn put_and_get_move_registered_memory_and_refusals_leave_it_alone() {
    // A records what it takes in: its puts and gets replay at the end.
    let mut a = engine(A, None, 16);
    *a.journal_mut() = Recorder::with_limit(64 << 20).expect("memory");
    let (mut pair, ep_b, _) = new_pair(a, engine(B, None, 16));
    let src = (0..300_000u32).map(|x| (x % 251) as u8).collect::<Vec<_>>();
    let dst = vec![0u8; 300_000];
    let ro = vec![9u8; 1000];
    let hs = pair.a().register_mem(src, Access::empty()).expect("src");
    let hd = pair
        .b()
        .register_mem(dst, Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("dst");
    let hr = pair.b().register_mem(ro, Access::REMOTE_READ).expect("ro");
    let local = MemSlice {
        handle: hs,
        offset: 0,
        len: 300_000,
    };
    let remote = RemoteSlice {
        key: hd.remote_key(),
        offset: 0,
        len: 300_000,
    };
    // The first operation also opens the connection.
    let _ = pair.a().put(ep_b, local, remote, 7).expect("put");
    // The source cannot be taken away while the put reads it.
    assert_eq!(
        pair.a().deregister_mem(hs).err(),
        Some(BtlError::Memory(btl_core::btl::MemError::InUse))
    );
    for _ in 0..50 {
        pump(&mut pair);
    }
    assert_eq!(drain(pair.a()), ["put 7 Ok(())"]);
    assert_eq!(
        pair.engine(Side::B).region(hd).expect("dst"),
        pair.engine(Side::A).region(hs).expect("src")
    );

    // Refused: beyond the region, and into read-only memory.
    let small = MemSlice {
        handle: hs,
        offset: 0,
        len: 100,
    };
    let _ = pair
        .a()
        .put(
            ep_b,
            small,
            RemoteSlice {
                key: hd.remote_key(),
                offset: 299_950,
                len: 100,
            },
            8,
        )
        .expect("put");
    let _ = pair
        .a()
        .put(
            ep_b,
            small,
            RemoteSlice {
                key: hr.remote_key(),
                offset: 0,
                len: 100,
            },
            9,
        )
        .expect("put");
    for _ in 0..10 {
        pump(&mut pair);
    }
    let events = drain(pair.a());
    assert_eq!(
        events,
        [
            format!(
                "put 8 {:?}",
                Err::<(), _>(BtlError::Rejected(RejectCode::OutOfBounds))
            ),
            format!(
                "put 9 {:?}",
                Err::<(), _>(BtlError::Rejected(RejectCode::AccessDenied))
            ),
        ]
    );
    assert_eq!(pair.b().region(hr).expect("ro"), &[9u8; 1000][..]);

    // Get back from the peer into a fresh local region.
    let back = vec![0u8; 1000];
    let hb = pair.a().register_mem(back, Access::empty()).expect("back");
    let _ = pair
        .a()
        .get(
            ep_b,
            MemSlice {
                handle: hb,
                offset: 0,
                len: 1000,
            },
            RemoteSlice {
                key: hr.remote_key(),
                offset: 0,
                len: 1000,
            },
            10,
        )
        .expect("get");
    for _ in 0..10 {
        pump(&mut pair);
    }
    assert_eq!(drain(pair.a()), ["get 10 Ok(())"]);
    assert_eq!(pair.a().region(hb).expect("back"), &[9u8; 1000][..]);

    let journal = pair.a().journal().bytes().to_vec();
    assert!(!pair.a().journal().is_full());
    let mut fresh = engine(A, None, 16);
    let replayed = btl_core::engine::replay::replay(&mut fresh, &journal, <[u8]>::to_vec)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        replayed.transmits > 10 && replayed.events >= 3,
        "{replayed:?}"
    );
    assert_eq!(
        fresh.region(hb).expect("back"),
        &[9u8; 1000][..],
        "the get again"
    );
}

#[test]
fn a_wrong_job_key_is_refused_and_the_send_fails_once() {
    let (mut pair, ep_b, _) = new_pair(engine(A, Some(b"one"), 16), engine(B, Some(b"two"), 16));
    // ALWAYS_CALLBACK: an owned send without it owes no event (it counts as
    // complete when made), so its failure shows only in the error event.
    let flags = DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK;
    let d = pair
        .a()
        .prepare_src(ep_b, b"x", 0, Order::ANY, flags)
        .expect("desc");
    let status = pair.a().send(ep_b, d, Tag(0x80)).expect("queued");
    assert!(matches!(status, SendStatus::Queued), "{status:?}");
    for _ in 0..5 {
        pump(&mut pair);
    }
    let events = drain(pair.a());
    let lost = format!(
        "{:?}",
        Err::<(), _>(BtlError::PeerLost(LostReason::AuthFailed))
    );
    assert!(events.contains(&format!("send {lost}")), "{events:?}");
    assert!(events.contains(&format!(
        "error {:?}",
        BtlError::PeerLost(LostReason::AuthFailed)
    )));
    assert_eq!(events.iter().filter(|e| e.starts_with("send")).count(), 1);
    assert_eq!(in_use(pair.engine(Side::A)), 0);
    assert!(drain(pair.b()).iter().all(|e| !e.starts_with("recv")));
}

#[test]
fn garbage_on_an_accepted_link_closes_only_that_link() {
    let mut b = engine(B, None, 16);
    let link = b
        .handle_accepted(Source(0), [1; 16], Instant::from_nanos(1))
        .expect("link");
    let taken = b
        .handle_stream(link, &[0xAB; 100], Instant::from_nanos(2))
        .expect("known link");
    assert_eq!(taken, 100);
    // The engine answers with a CLOSE and asks the driver to drop the link.
    loop {
        let n: usize = match b.poll_transmit(link) {
            Some(t) => t.segments.iter().map(|s| s.len()).sum(),
            None => break,
        };
        b.handle_written(link, n);
    }
    assert_eq!(b.poll_close(), Some(link));
    // The driver learns why, to log it as it drops the connection.
    assert_eq!(
        b.link_end(link),
        Some(btl_core::engine::LinkEnd {
            reason: btl_core::wire::CloseReason::ProtocolError,
            by_peer: false,
            verified: false,
            lost: None,
        })
    );
    b.handle_closed(link, Instant::from_nanos(3));
    assert_eq!(b.link_end(link), None, "a closed link has no end to tell");
    assert_eq!(
        b.handle_stream(link, &[0], Instant::from_nanos(4)),
        Err(btl_core::engine::LinkError::UnknownLink)
    );
    assert_eq!(in_use(&b), 0);
}

#[test]
fn simultaneous_connects_keep_the_lower_names_link_and_lose_nothing() {
    simultaneous_connects(false);
}

#[test]
fn the_close_of_a_dropped_duplicate_before_the_kept_link_opens_loses_no_peer() {
    // Over TCP this lost both connections: B took the CLOSE of its current
    // link for A leaving, and A lost B in turn.
    simultaneous_connects(true);
}

/// A is the lower name: A's connection survives. B's own opens first at
/// B, which writes its sends there; A drops that connection, and once A's
/// opens at B, B sends them again on it. With `close_first`, A's CLOSE of
/// B's connection reaches B before A's connection opens there.
fn simultaneous_connects(close_first: bool) {
    let (mut pair, ep_b, ep_a) = new_pair(engine(A, Some(b"key"), 16), engine(B, Some(b"key"), 16));
    for i in 0..3u8 {
        for (side, ep) in [(Side::A, ep_b), (Side::B, ep_a)] {
            let e = pair.engine_mut(side);
            let d = e
                .prepare_src(ep, &[i; 10], 0, Order(0), DescFlags::empty())
                .expect("desc");
            let status = e.send(ep, d, Tag(0x80 + i)).expect("send");
            assert!(matches!(status, SendStatus::Queued), "{status:?}");
        }
    }
    pair.advance(Duration::from_nanos(10));
    // Both ask at once: A's connection (A opens, B accepts) and B's.
    let opened = pair.serve_connects();
    assert_eq!(opened.opened, 4, "two connections, each end opened");
    let by = |side| {
        pair.connections()
            .find(|c| c.end(Role::Opener).side() == Some(side))
            .expect("a connection")
            .id
    };
    let (ca, cb) = (by(Side::A), by(Side::B));
    let shuttle = |pair: &mut Pair, conn, to| {
        pair.shuttle(conn, to).expect("a connection of the pair");
    };
    // B's connection: HELLOs, A's HELLO_ACK; B opens it and writes its
    // sends, which A (whose own connection is pending) drops with it.
    shuttle(&mut pair, cb, Role::Acceptor);
    shuttle(&mut pair, cb, Role::Opener);
    assert!(
        pair.engine(Side::B).is_connected(ep_a),
        "B's own connection opened first"
    );
    shuttle(&mut pair, cb, Role::Acceptor);
    assert!(
        !pair.engine(Side::A).is_connected(ep_b),
        "A dropped B's connection"
    );
    let mut early_b = Vec::new();
    if close_first {
        shuttle(&mut pair, cb, Role::Opener);
        early_b = drain(pair.b());
        assert!(
            !early_b.iter().any(|e| e.starts_with("error")),
            "{early_b:?}"
        );
    }
    // A's connection opens on both sides; B switches to it.
    for _ in 0..4 {
        shuttle(&mut pair, ca, Role::Acceptor);
        shuttle(&mut pair, ca, Role::Opener);
    }
    // The dropped connection closes; the other carries on.
    for _ in 0..4 {
        shuttle(&mut pair, cb, Role::Opener);
        shuttle(&mut pair, cb, Role::Acceptor);
    }
    let closes = pair.serve_closes();
    assert_eq!(closes.closed, 2, "one close at each end");
    let dropped = pair.connection(cb).expect("B's connection");
    assert_eq!(
        dropped.closed,
        [Some(Closure::Closed); 2],
        "B's connection is dropped, by both ends"
    );
    assert!(pair.connection(ca).expect("A's connection").is_open());
    let (mut got_a, mut got_b) = (Vec::new(), early_b);
    for _ in 0..10 {
        // Time passes: delayed acknowledgements go out.
        pair.advance(Duration::from_nanos(60_000));
        pair.serve_timeouts();
        shuttle(&mut pair, ca, Role::Acceptor);
        shuttle(&mut pair, ca, Role::Opener);
        got_a.extend(drain(pair.a()));
        got_b.extend(drain(pair.b()));
    }
    for got in [&got_a, &got_b] {
        let recv: Vec<_> = got.iter().filter(|e| e.starts_with("recv")).collect();
        assert_eq!(
            recv,
            ["recv 128 10", "recv 129 10", "recv 130 10"],
            "{got:?}"
        );
        assert!(!got.iter().any(|e| e.starts_with("error")), "{got:?}");
        assert_eq!(got.iter().filter(|e| *e == "send Ok(())").count(), 3);
    }
    assert!(pair.engine(Side::A).is_connected(ep_b) && pair.engine(Side::B).is_connected(ep_a));
}

#[test]
fn owned_sends_complete_at_once_and_sendi_takes_eager_sizes() {
    let (mut pair, ep_b, _) = new_pair(engine(A, None, 16), engine(B, None, 16));
    let d = pair
        .a()
        .prepare_src(ep_b, b"x", 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
        .expect("desc");
    let status = pair.a().send(ep_b, d, Tag(0x80)).expect("send");
    assert!(matches!(status, SendStatus::Completed(None)), "{status:?}");
    pump(&mut pair);
    let eager = pair.a().attributes().eager_limit;
    assert_eq!(
        pair.a().sendi(
            ep_b,
            &[1],
            &vec![2; eager],
            Tag(0x81),
            Order::ANY,
            DescFlags::empty()
        ),
        Err(BtlError::TooLarge {
            len: eager as u64 + 1,
            max: eager as u64,
            whose: btl_core::btl::Limit::Here,
        })
    );
    pair.a()
        .sendi(
            ep_b,
            &[1],
            &vec![2; eager - 1],
            Tag(0x81),
            Order::ANY,
            DescFlags::empty(),
        )
        .expect("sendi of eager_limit bytes");
    pump(&mut pair);
    assert_eq!(
        drain(pair.b()),
        ["recv 128 1", format!("recv 129 {eager}").as_str()]
    );
    assert_eq!(drain(pair.a()), Vec::<String>::new());
}

#[test]
fn pipes_smaller_than_a_header_carry_everything_intact() {
    // 61-byte pipes: every frame, header included, is written and read in
    // pieces that end anywhere, and the ring wraps all the time.
    type Tiny = StreamPair<E, 61, 2, Box<E>>;
    let mut pair = Tiny::new(
        Box::new(engine(A, Some(b"key"), 4)),
        Box::new(engine(B, Some(b"key"), 4)),
        [A, B],
        61,
    );
    let [ep_b, _] = pair.introduce().expect("each reaches the other");
    let dst = vec![0u8; 70_000];
    let src = (0..70_000u32).map(|x| (x % 253) as u8).collect::<Vec<_>>();
    let hs = pair.a().register_mem(src, Access::empty()).expect("src");
    let hd = pair
        .b()
        .register_mem(dst, Access::REMOTE_WRITE)
        .expect("dst");
    let sizes = [0usize, 1, 57, 61, 4000, 20_000, 65_000];
    for (i, &n) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..n).map(|x| (x * 7 + i) as u8).collect();
        let d = pair
            .a()
            .prepare_src(ep_b, &data, 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("desc");
        let _ = pair.a().send(ep_b, d, Tag(0x80 + i as u8)).expect("send");
    }
    let len = 70_000;
    let local = MemSlice {
        handle: hs,
        offset: 0,
        len,
    };
    let remote = RemoteSlice {
        key: hd.remote_key(),
        offset: 0,
        len,
    };
    let _ = pair.a().put(ep_b, local, remote, 3).expect("put");
    let mut got = Vec::new();
    for _ in 0..20_000 {
        let idle = pair.round().is_idle();
        while let Some(ev) = pair.b().poll_event() {
            if let Event::Received(m) = ev {
                let i = usize::from(m.tag.0 - 0x80);
                assert!(
                    m.data
                        .iter()
                        .enumerate()
                        .all(|(x, &b)| b == (x * 7 + i) as u8),
                    "message {i} intact"
                );
                got.push(m.data.len());
            }
        }
        if idle && got.len() == sizes.len() {
            break;
        }
    }
    assert_eq!(got, sizes);
    assert_eq!(drain(pair.a()), ["put 3 Ok(())"]);
    assert_eq!(
        pair.engine(Side::B).region(hd).expect("dst"),
        pair.engine(Side::A).region(hs).expect("src")
    );
}

/// Connections broken again and again mid-traffic (what was in flight
/// lost both ways): the engines reconnect and resend, and every message
/// arrives once, in order, both ways; a put across the breaks completes;
/// nobody reports a lost peer.
#[test]
fn broken_connections_are_reconnected_and_nothing_is_lost_or_repeated() {
    exchange_through_breaks(1);
}

/// With two links per peer, one of them broken again and again: the other
/// carries what it had not delivered, the broken one comes back, and the
/// put is striped over both.
#[test]
fn with_two_links_the_other_carries_a_broken_ones_traffic() {
    let pair = exchange_through_breaks(2);
    let open: Vec<_> = pair
        .connections()
        .filter(|c| c.is_open() && c.is_between_engines())
        .collect();
    assert_eq!(open.len(), 2, "the broken link came back: {open:?}");
    assert!(
        open.iter().all(|c| c.carried.iter().sum::<u64>() > 0),
        "both links carried bytes: {open:?}"
    );
}

/// Messages both ways and a 200 000-byte put over `links` links per peer,
/// one engine connection broken every few rounds; checks that everything
/// arrived once, in order, intact, and that nobody lost the other.
fn exchange_through_breaks(links: u8) -> Pair {
    let config = |me| {
        let mut c = EngineConfig::new(me);
        c.job_key = Some(heapless::Vec::from_slice(b"key").expect("short key"));
        c.checksum = true;
        c.links = links;
        c
    };
    let (mut pair, ep_b, ep_a) = new_pair(engine_with(config(A)), engine_with(config(B)));
    pair.set_tick(Duration::from_millis(1));
    // One pass per round: frames are still in the pipes when it breaks.
    pair.set_passes(1);
    let mut src = vec![0u8; 200_000];
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let dst = vec![0u8; 200_000];
    let hs = pair.a().register_mem(src, Access::empty()).expect("reg");
    let hd = pair
        .b()
        .register_mem(dst, Access::REMOTE_WRITE)
        .expect("reg");
    let total = 120u32;
    let (mut sent, mut breaks, mut put_started) = ([0u32; 2], 0, false);
    let mut got: [Vec<(u8, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
    let mut events: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    for round in 0..5_000u32 {
        for (i, (side, ep)) in [(Side::A, ep_b), (Side::B, ep_a)].into_iter().enumerate() {
            if sent[i] < total {
                let data: Vec<u8> = (0..(sent[i] * 331) % 9000)
                    .map(|x| (x ^ sent[i]) as u8)
                    .collect();
                let e = pair.engine_mut(side);
                if let Ok(d) = e.prepare_src(ep, &data, 0, Order(0), DescFlags::BTL_OWNERSHIP) {
                    match e.send(ep, d, Tag(0x80)) {
                        Ok(_) => sent[i] += 1,
                        Err(err) => e.free(err.desc).expect("free"),
                    }
                }
            }
        }
        if !put_started && pair.a().is_connected(ep_b) {
            let len = 200_000;
            pair.a()
                .put(
                    ep_b,
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
                    7,
                )
                .expect("put");
            put_started = true;
        }
        pair.round();
        let engine_conns: Vec<_> = pair
            .connections()
            .filter(|c| c.is_open() && c.is_between_engines())
            .collect();
        if round % 9 == 4
            && breaks < 12
            && let Some(conn) = engine_conns.get(breaks % engine_conns.len().max(1))
        {
            pair.break_connection(conn.id).expect("a known connection");
            breaks += 1;
        }
        for (i, side) in [Side::A, Side::B].into_iter().enumerate() {
            let e = pair.engine_mut(side);
            while let Some(ev) = e.poll_event() {
                match ev {
                    Event::Received(m) => got[i].push((m.tag.0, m.data.to_vec())),
                    Event::PutComplete { result, ctx, .. } => {
                        events[i].push(format!("put {ctx} {result:?}"))
                    }
                    // The senders above try again after a refusal anyway.
                    Event::Room { .. } => {}
                    other => events[i].push(format!("{other:?}")),
                }
            }
        }
        if got.iter().all(|g| g.len() == total as usize) && !events[0].is_empty() && breaks == 12 {
            break;
        }
    }
    assert_eq!(
        breaks,
        12,
        "the connection was broken again and again: {:?} {events:?}",
        pair.connections().collect::<Vec<_>>()
    );
    for (i, g) in got.iter().enumerate() {
        let lens: Vec<usize> = g.iter().map(|(_, d)| d.len()).collect();
        let want: Vec<usize> = (0..total).map(|n| ((n * 331) % 9000) as usize).collect();
        assert_eq!(lens, want, "side {i}: every message once, in order");
        for (n, (_, d)) in g.iter().enumerate() {
            assert!(
                d.iter()
                    .enumerate()
                    .all(|(x, &b)| b == (x as u32 ^ n as u32) as u8),
                "side {i}: message {n} intact"
            );
        }
    }
    assert_eq!(events[0], ["put 7 Ok(())"]);
    assert!(events[1].is_empty(), "{:?}", events[1]);
    let copied = pair.b().region(hd).expect("dst");
    assert!(
        copied
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8)
    );
    // Time for every broken link to come back.
    for _ in 0..2_000 {
        pair.round();
    }
    pair
}

/// A put refused by its target ends at the REJECT, while packets of it are
/// still unacknowledged; a put started at once takes its slot, and the
/// late acknowledgements must not count towards the new one: it completes
/// only when its own data is there.
#[test]
fn a_refused_puts_late_acks_do_not_complete_the_next_put() {
    let (mut pair, ep_b, _) = new_pair(engine(A, None, 16), engine(B, None, 16));
    pair.set_passes(1);
    let src = vec![5u8; 300_000];
    let hs = pair.a().register_mem(src, Access::empty()).expect("src");
    let ro = vec![0u8; 300_000];
    let hr = pair.b().register_mem(ro, Access::REMOTE_READ).expect("ro");
    let dst = vec![0u8; 300_000];
    let hd = pair
        .b()
        .register_mem(dst, Access::REMOTE_WRITE)
        .expect("dst");
    let all = |h: btl_core::btl::MemHandle| RemoteSlice {
        key: h.remote_key(),
        offset: 0,
        len: 300_000,
    };
    let local = MemSlice {
        handle: hs,
        offset: 0,
        len: 300_000,
    };
    let _ = pair.a().put(ep_b, local, all(hr), 1).expect("put");
    let mut second = false;
    for _ in 0..2_000 {
        pair.round();
        for ev in drain(pair.a()) {
            if ev.starts_with("put 1") {
                assert!(ev.contains("AccessDenied"), "{ev}");
                let _ = pair.a().put(ep_b, local, all(hd), 2).expect("put");
            } else {
                assert_eq!(ev, "put 2 Ok(())");
                assert!(
                    pair.b().region(hd).expect("dst").iter().all(|&b| b == 5),
                    "put 2 completed before its data arrived"
                );
                second = true;
            }
        }
    }
    assert!(second, "put 2 never completed");
}

/// A link id outlives its connection in a driver's tables; once closed it
/// names nothing, also after a new link takes its slot.
#[test]
fn a_closed_links_id_is_refused_after_its_slot_is_reused() {
    let mut e = engine(A, None, 16);
    let old = e
        .handle_accepted(Source(0), [1; 16], Instant::from_nanos(0))
        .expect("link");
    e.handle_closed(old, Instant::from_nanos(0));
    let new = e
        .handle_accepted(Source(0), [2; 16], Instant::from_nanos(0))
        .expect("link");
    assert_ne!(old, new);
    assert_eq!(
        e.handle_stream(old, b"stale bytes", Instant::from_nanos(0)),
        Err(btl_core::engine::LinkError::UnknownLink)
    );
    assert!(e.poll_transmit(old).is_none());
    e.handle_written(old, 1);
    e.handle_closed(old, Instant::from_nanos(0));
    // The new link is untouched: its HELLO is still there, whole.
    let hello = e.poll_transmit(new).expect("the new link's HELLO");
    let len: usize = hello.segments.iter().map(|s| s.len()).sum();
    assert_eq!(
        len,
        btl_core::wire::HEADER_LEN + btl_core::wire::HelloRepr::LEN
    );
}

/// An engine of `me` for its start number `epoch`.
fn started(me: ProcName, epoch: u64) -> E {
    let mut config = EngineConfig::new(me);
    config.job_key = Some(heapless::Vec::from_slice(b"key").expect("short key"));
    config.checksum = true;
    config.epoch = epoch;
    engine_with(config)
}

/// Sends `data` from `side` under `tag`, a descriptor the engine frees.
fn post(pair: &mut Pair, side: Side, data: &[u8], tag: u8) {
    let to = pair.peer(side).expect("introduced");
    let e = pair.engine_mut(side);
    let d = e
        .prepare_src(to, data, 0, Order(0), DescFlags::BTL_OWNERSHIP)
        .expect("desc");
    let _ = e.send(to, d, Tag(tag)).expect("send");
}

#[test]
fn a_restarted_peer_fails_the_old_starts_operations_once_and_talks_under_the_same_endpoint() {
    let (mut pair, ep_b, _) = new_pair(started(A, 1), started(B, 1));
    post(&mut pair, Side::A, b"first", 0x80);
    pump(&mut pair);
    assert_eq!(drain(pair.b()), ["recv 128 5"]);
    // A put to B, then B dies before it could answer, and starts again.
    let src = vec![7u8; 10_000];
    let dst = vec![0u8; 10_000];
    let hs = pair.a().register_mem(src, Access::empty()).expect("src");
    let hd = pair
        .b()
        .register_mem(dst, Access::REMOTE_WRITE)
        .expect("dst");
    let local = MemSlice {
        handle: hs,
        offset: 0,
        len: 10_000,
    };
    let remote = RemoteSlice {
        key: hd.remote_key(),
        offset: 0,
        len: 10_000,
    };
    pair.a().put(ep_b, local, remote, 1).expect("put");
    pair.restart(Side::B, Box::new(started(B, 2)))
        .expect("B again");
    // A's reconnection reaches the new start: the put fails, once, and A
    // hears why; then messages go both ways under the same endpoint.
    post(&mut pair, Side::B, b"hello again", 0x81);
    pump(&mut pair);
    let restarted = BtlError::PeerLost(LostReason::Restarted);
    let got = drain(pair.a());
    assert_eq!(
        got,
        [
            format!("put 1 {:?}", Err::<(), _>(restarted)),
            format!("error {restarted:?}"),
            String::from("recv 129 11"),
        ],
    );
    assert_eq!(pair.peer(Side::A), Some(ep_b));
    post(&mut pair, Side::A, b"welcome", 0x82);
    pump(&mut pair);
    assert_eq!(drain(pair.b()), ["recv 130 7"]);
    // B's delayed acknowledgement releases A's last send.
    pair.advance(Duration::from_nanos(1_000_000));
    pump(&mut pair);
    assert!(drain(pair.a()).is_empty(), "nothing more at A");
    assert_eq!(in_use(pair.engine(Side::A)), 0);
}

/// An engine of `me`'s start `epoch` that loses a silent peer after 50 ms.
fn quick_to_lose(me: ProcName, epoch: u64) -> E {
    let mut c = EngineConfig::new(me);
    c.epoch = epoch;
    c.peer_timeout = Duration::from_millis(50);
    c.keepalive = Duration::from_millis(10);
    engine_with(c)
}

/// A and B exchange a message; then B falls silent (`silence`: paused or
/// killed) until A loses it for the timeout.
fn lose_b(silence: impl FnOnce(&mut Pair)) -> (Pair, EndpointId) {
    let (mut pair, ep_b, _) = new_pair(quick_to_lose(A, 1), quick_to_lose(B, 1));
    post(&mut pair, Side::A, b"x", 0x80);
    pump(&mut pair);
    drain(pair.b());
    silence(&mut pair);
    for _ in 0..200 {
        pair.advance(Duration::from_nanos(1_000_000));
        pump(&mut pair);
    }
    let lost = BtlError::PeerLost(LostReason::Timeout);
    assert_eq!(drain(pair.a()), [format!("error {lost:?}")]);
    (pair, ep_b)
}

#[test]
fn the_same_start_of_a_lost_peer_stays_lost() {
    // B stops answering for longer than A's peer timeout: A loses it.
    let (mut pair, ep_b) = lose_b(|pair| pair.pause(Side::B));
    let lost = BtlError::PeerLost(LostReason::Timeout);
    // B comes back, the same start, and sends: A refuses it and B loses A.
    pair.resume(Side::B);
    post(&mut pair, Side::B, b"back", 0x81);
    for _ in 0..20 {
        pair.advance(Duration::from_nanos(1_000_000));
        pump(&mut pair);
    }
    assert!(drain(pair.a()).is_empty(), "A does not take B back");
    let b_events = drain(pair.b());
    assert!(
        b_events.iter().any(|e| e.starts_with("error PeerLost")),
        "B is told: {b_events:?}"
    );
    let refused = pair
        .a()
        .sendi(ep_b, &[], b"y", Tag(0x82), Order(0), DescFlags::empty());
    assert_eq!(refused, Err(lost), "the endpoint stays lost");
}

#[test]
fn a_lost_peer_that_starts_again_is_taken_back_and_said_so() {
    let (mut pair, ep_b) = lose_b(|pair| pair.kill(Side::B));
    // B, dead for longer than the peer timeout, starts again (another
    // epoch) and sends: A takes the new start back
    // under the same endpoint, and says so.
    pair.restart(Side::B, Box::new(quick_to_lose(B, 2)))
        .expect("B again");
    post(&mut pair, Side::B, b"back", 0x81);
    for _ in 0..20 {
        pair.advance(Duration::from_nanos(1_000_000));
        pump(&mut pair);
    }
    let restarted = BtlError::PeerLost(LostReason::Restarted);
    assert_eq!(
        drain(pair.a()),
        [format!("error {restarted:?}"), String::from("recv 129 4")]
    );
    post(&mut pair, Side::A, b"welcome", 0x82);
    pump(&mut pair);
    assert_eq!(drain(pair.b()), ["recv 130 7"]);
    assert_eq!(pair.peer(Side::A), Some(ep_b));
}

#[test]
fn sends_leave_fragments_for_receiving() {
    // Both sides post large messages until the engine says no more, before
    // any byte moves: every fragment they get is held until acknowledged,
    // and the acknowledgements ride behind the other side's messages.
    let (mut pair, ep_b, ep_a) = new_pair(engine(A, None, 16), engine(B, None, 16));
    let big = vec![5u8; 60_000];
    let mut posted = [0usize; 2];
    for (side, ep) in [(Side::A, ep_b), (Side::B, ep_a)] {
        let e = pair.engine_mut(side);
        loop {
            let d = match e.prepare_src(ep, &big, 0, Order(0), DescFlags::BTL_OWNERSHIP) {
                Ok(d) => d,
                Err(BtlError::OutOfResource) => break,
                Err(err) => panic!("{err}"),
            };
            let _ = e.send(ep, d, Tag(0x80)).expect("queued");
            posted[side as usize] += 1;
        }
        let stats = e.pools().stats(FragmentClass::Max);
        assert!(
            stats.capacity - stats.in_use >= stats.capacity / 4,
            "a quarter stays for receiving: {stats:?}"
        );
    }
    let mut got = [0usize; 2];
    for _ in 0..50 {
        pair.advance(Duration::from_nanos(100_000));
        pump(&mut pair);
        got[0] += drain(pair.a())
            .iter()
            .filter(|e| e.starts_with("recv"))
            .count();
        got[1] += drain(pair.b())
            .iter()
            .filter(|e| e.starts_with("recv"))
            .count();
    }
    assert_eq!(got, [posted[1], posted[0]], "everything arrived, both ways");
    assert_eq!(in_use(pair.engine(Side::A)), 0);
    assert_eq!(in_use(pair.engine(Side::B)), 0);
}

/// What a socket driver does with a large payload: the header through
/// `handle_stream`, the payload read in pieces straight into its receive
/// fragment (`payload_buffer`, `handle_payload_read`), the checksum
/// trailer through `handle_stream` again. The message arrives intact; a
/// byte damaged in the fragment fails the checksum, and the link with it.
#[test]
fn a_payload_read_in_place_arrives_whole_and_is_checksummed() {
    for damage in [false, true] {
        let (mut pair, ep_b, _) = new_pair(engine(A, None, 4), engine(B, None, 4));
        // A first message opens the connection.
        post(&mut pair, Side::A, b"hello", 0x91);
        pump(&mut pair);
        assert!(matches!(pair.b().poll_event(), Some(Event::Received(_))));
        let conn = pair.established().expect("a connection");
        let (to_b, _) = Role::BOTH
            .into_iter()
            .zip(conn.ends)
            .find(|(_, end)| matches!(end, End::Link(Side::B, _)))
            .expect("B's end");
        let link = pair.link(Side::B).expect("B's link");
        pair.pause(Side::B);
        let data: Vec<u8> = (0..20_000u32).map(|x| (x % 251) as u8).collect();
        let d = pair
            .a()
            .prepare_src(ep_b, &data, 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("desc");
        let _ = pair.a().send(ep_b, d, Tag(0x90)).expect("send");
        // The frame, taken out of the (4 KiB) pipe as A writes it.
        let mut frame = Vec::new();
        for _ in 0..100 {
            let _ = pair.round();
            let pipe = pair.pipe_mut(conn.id, to_b).expect("pipe");
            while !pipe.readable().0.is_empty() {
                let n = pipe.readable().0.len();
                frame.extend_from_slice(pipe.readable().0);
                pipe.consume(n);
            }
        }
        assert!(frame.len() > data.len(), "the whole frame: {}", frame.len());
        let now = pair.now();
        let b = pair.b();
        assert!(
            b.payload_buffer(link).is_none(),
            "no payload before its header"
        );
        let head = b.handle_stream(link, &frame[..64], now).expect("header");
        assert_eq!(head, 64);
        let mut at = head;
        let mut pieces = 0;
        while let Some(target) = b.payload_buffer(link) {
            assert!(at + target.len() <= frame.len(), "only the payload's rest");
            let n = target.len().min(3_000);
            target[..n].copy_from_slice(&frame[at..at + n]);
            if damage && pieces == 2 {
                target[7] ^= 1;
            }
            at += n;
            pieces += 1;
            b.handle_payload_read(link, n, now).expect("link");
        }
        assert!(pieces >= 6, "the payload went in place, in {pieces} pieces");
        let rest = b.handle_stream(link, &frame[at..], now);
        if damage {
            assert!(
                rest.is_err() || b.link_end(link).is_some(),
                "a damaged payload fails its link: {rest:?}"
            );
            while let Some(e) = b.poll_event() {
                assert!(
                    !matches!(e, Event::Received(_)),
                    "nothing damaged is delivered"
                );
            }
        } else {
            assert_eq!(rest.expect("trailer"), frame.len() - at);
            match b.poll_event() {
                Some(Event::Received(m)) => {
                    assert_eq!(m.tag, Tag(0x90));
                    assert_eq!(m.data, &data[..]);
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

/// Sends copies of `len` bytes from A to B until A refuses one; how many
/// it took.
fn send_until_refused(pair: &mut Pair, ep_b: EndpointId, len: usize) -> usize {
    let data = vec![7u8; len];
    for taken in 0..10_000 {
        match pair.a().send_copy(ep_b, Tag(0x80), &data) {
            Ok(()) => {}
            Err(BtlError::OutOfResource) => return taken,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("10,000 sends taken without a refusal");
}

#[test]
fn a_refused_send_is_followed_by_room_once() {
    // B grants 4 credits and polls nothing at first: A's queue to it fills
    // and a send is refused. A handler has nothing to try again on but an
    // event: Room comes once B has taken enough, and only once.
    let (mut pair, ep_b, _) = new_pair(engine(A, None, 4), engine(B, None, 4));
    let taken = send_until_refused(&mut pair, ep_b, 100);
    assert!(taken >= 4, "the credits and the queue take some: {taken}");
    let room = format!("room {}", ep_b.0);
    pump(&mut pair);
    assert!(
        !drain_all(pair.a()).contains(&room),
        "no room while B takes nothing"
    );
    assert_eq!(pair.a().progress(), 0, "nor any counted");
    let mut rooms = 0;
    for _ in 0..40 {
        pair.b().poll_event().map(|_| ()).unwrap_or_default();
        let _ = drain(pair.b());
        pump(&mut pair);
        // Counted before it is made, so that a wait after the refusal
        // ends for it.
        let ready = pair.a().progress();
        let events = drain_all(pair.a());
        assert_eq!(ready, events.len(), "every event counted: {events:?}");
        rooms += events.iter().filter(|e| **e == room).count();
    }
    assert_eq!(rooms, 1, "one Room for one run of refusals");
    pair.a()
        .send_copy(ep_b, Tag(0x80), &[7; 100])
        .expect("what Room said there is room for");

    // Refused again, and the peer lost before there is room: its loss is
    // told, no Room.
    send_until_refused(&mut pair, ep_b, 100);
    pair.a().del_procs(&[ep_b]).expect("a known peer");
    let events = drain_all(pair.a());
    assert!(
        !events.contains(&room),
        "no Room for a lost peer: {events:?}"
    );
}

#[test]
fn a_refused_put_is_followed_by_room() {
    // Operation slots run out: CAPACITIES has 64.
    let (mut pair, ep_b, _) = new_pair(engine(A, None, 16), engine(B, None, 16));
    let target = pair
        .b()
        .register_mem(vec![0u8; 64], Access::REMOTE_WRITE)
        .expect("registered");
    let key = target.remote_key();
    let source = pair
        .a()
        .register_mem(vec![1u8; 64], Access::empty())
        .expect("registered");
    let mut started = 0;
    let refused = loop {
        match pair.a().put(
            ep_b,
            MemSlice {
                handle: source,
                offset: 0,
                len: 64,
            },
            RemoteSlice {
                key,
                offset: 0,
                len: 64,
            },
            started,
        ) {
            Ok(_) => started += 1,
            Err(e) => break e,
        }
        assert!(started < 1000, "1000 puts taken without a refusal");
    };
    assert_eq!(refused, BtlError::OutOfResource);
    let room = format!("room {}", ep_b.0);
    let mut events = Vec::new();
    for _ in 0..40 {
        pair.advance(Duration::from_millis(1));
        pump(&mut pair);
        let _ = drain(pair.b());
        events.extend(drain_all(pair.a()));
    }
    let puts = events.iter().filter(|e| e.starts_with("put")).count();
    assert_eq!(
        puts as u64, started,
        "every put taken completes ({started}): {events:?}"
    );
    assert_eq!(
        events.iter().filter(|e| **e == room).count(),
        1,
        "and the refused one is told it may go: {events:?}"
    );
}
