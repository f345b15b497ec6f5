use std::vec;
use std::vec::Vec;

use super::*;
use crate::pool::{FragmentPoolConfig, FragmentPoolsConfig, PoolCell};
use crate::ring;

const A: ProcName = ProcName::new(3, 0);
const B: ProcName = ProcName::new(3, 1);

type Sm<'a> = SharedMemory<'a, &'static [PoolCell], Vec<u8>, 4, 8, 16, 64>;

fn ring_words(capacity: usize) -> Vec<AtomicU32> {
    let words: Vec<AtomicU32> = (0..ring::words_for(capacity))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    words
}

fn module<'a>() -> Sm<'a> {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 16,
        max: 16,
        inc: 4,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096),
        max: pool(16384),
    };
    // Leaked: a test's pools live as long as the test process.
    let region =
        std::boxed::Box::leak(vec![0u8; FragmentPools::required_bytes(&cfg)].into_boxed_slice());
    SharedMemory::new(FragmentPools::new(region, cfg).expect("pools"))
}

/// Two modules over two rings of `capacity` words, each knowing the
/// other: their endpoints of each other.
fn pair<'a>(ab: &'a [AtomicU32], ba: &'a [AtomicU32]) -> (Sm<'a>, Sm<'a>, EndpointId, EndpointId) {
    let (mut a, mut b) = (module(), module());
    a.attach(B, ab, ba).expect("attach");
    b.attach(A, ba, ab).expect("attach");
    let reach = |m: &mut Sm<'a>, who| {
        let mut eps = [None];
        let mut words = [0u64; 1];
        m.add_procs(&[who], &mut eps, &mut Reachability::new(&mut words))
            .expect("add");
        eps[0].expect("reachable")
    };
    let b_at_a = reach(&mut a, B);
    let a_at_b = reach(&mut b, A);
    (a, b, b_at_a, a_at_b)
}

/// Every event of `m`, as text.
/// 200 rounds of both: what each side polled.
fn rounds(a: &mut Sm<'_>, b: &mut Sm<'_>) -> (Vec<std::string::String>, Vec<std::string::String>) {
    let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        at_a.extend(drain(a));
        at_b.extend(drain(b));
    }
    (at_a, at_b)
}

fn drain(m: &mut Sm<'_>) -> Vec<std::string::String> {
    m.progress();
    let mut out = Vec::new();
    while let Some(e) = m.poll_event() {
        out.push(match e {
            Event::Received(r) => std::format!("recv {} {:?}", r.tag.0, r.data),
            Event::PutComplete { ctx, result, .. } => std::format!("put {ctx} {result:?}"),
            Event::GetComplete { ctx, result, .. } => std::format!("get {ctx} {result:?}"),
            Event::PutArrived { imm, slice, .. } => std::format!("arrived {imm} {}", slice.len),
            Event::SendComplete { result, .. } => std::format!("sent {result:?}"),
            Event::PeerLeft { .. } => "left".into(),
            Event::Room { .. } => "room".into(),
            Event::Error(e) => std::format!("error {:?}", e.error),
        });
    }
    out
}

#[test]
fn messages_cross_in_order_every_way_they_are_sent() {
    let (ab, ba) = (ring_words(1024), ring_words(1024));
    let (mut a, mut b, b_at_a, a_at_b) = pair(&ab, &ba);
    a.sendi(
        b_at_a,
        b"he",
        b"llo",
        Tag(0x80),
        Order::ANY,
        DescFlags::empty(),
    )
    .expect("sendi");
    a.send_copy(b_at_a, Tag(0x81), &[7; 1500])
        .expect("send_copy");
    let desc = a
        .prepare_src(b_at_a, b"owned", 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
        .expect("desc");
    assert!(matches!(
        a.send(b_at_a, desc, Tag(0x82)),
        Ok(SendStatus::Completed(None))
    ));
    let got = drain(&mut b);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0], std::format!("recv 128 {:?}", b"hello"));
    assert!(got[1].starts_with("recv 129"));
    assert_eq!(got[2], std::format!("recv 130 {:?}", b"owned"));
    b.sendi(
        a_at_b,
        &[],
        b"back",
        Tag(0x80),
        Order::ANY,
        DescFlags::empty(),
    )
    .expect("sendi");
    assert_eq!(drain(&mut a), [std::format!("recv 128 {:?}", b"back")]);
}

#[test]
fn a_full_ring_refuses_then_says_room() {
    let (ab, ba) = (ring_words(64), ring_words(64));
    let (mut a, mut b, b_at_a, _) = pair(&ab, &ba);
    let mut sent = 0;
    while a
        .sendi(
            b_at_a,
            &[],
            &[1; 20],
            Tag(0x80),
            Order::ANY,
            DescFlags::empty(),
        )
        .is_ok()
    {
        sent += 1;
    }
    assert_eq!(
        a.send_copy(b_at_a, Tag(0x80), &[1; 20]),
        Err(BtlError::OutOfResource)
    );
    let got = drain(&mut b);
    assert_eq!(got.len(), sent);
    assert_eq!(drain(&mut a), ["room"]);
    a.send_copy(b_at_a, Tag(0x80), &[1; 20]).expect("room");
}

#[test]
fn puts_and_gets_move_registered_memory_in_pieces() {
    let (ab, ba) = (ring_words(256), ring_words(256));
    let (mut a, mut b, b_at_a, _) = pair(&ab, &ba);
    let data: Vec<u8> = (0..10_000u32).map(|x| (x % 251) as u8).collect();
    let src = a.register_mem(data.clone(), Access::empty()).expect("src");
    let dst = b
        .register_mem(vec![0; 10_000], Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("dst");
    let whole = MemSlice {
        handle: src,
        offset: 0,
        len: 10_000,
    };
    let remote = RemoteSlice {
        key: dst.remote_key(),
        offset: 0,
        len: 10_000,
    };
    a.put_notify(b_at_a, whole, remote, 42, 1).expect("put");
    let (at_a, at_b) = rounds(&mut a, &mut b);
    assert_eq!(at_a, ["put 1 Ok(())"]);
    assert_eq!(at_b.len(), 1, "{at_b:?}");
    assert!(at_b[0].starts_with("arrived 42"), "{at_b:?}");
    assert_eq!(b.region(dst).expect("dst"), &data[..]);

    // And back with a get, into a fresh buffer.
    let back = a
        .register_mem(vec![0; 10_000], Access::empty())
        .expect("back");
    a.get(
        b_at_a,
        MemSlice {
            handle: back,
            offset: 0,
            len: 10_000,
        },
        remote,
        2,
    )
    .expect("get");
    let (at_a, _) = rounds(&mut a, &mut b);
    assert_eq!(at_a, ["get 2 Ok(())"]);
    assert_eq!(a.region(back).expect("back"), &data[..]);
}

#[test]
fn refused_puts_and_gets_end_rejected_and_leave_memory_alone() {
    let (ab, ba) = (ring_words(256), ring_words(256));
    let (mut a, mut b, b_at_a, _) = pair(&ab, &ba);
    let src = a.register_mem(vec![9; 5000], Access::empty()).expect("src");
    let ro = b
        .register_mem(vec![0; 5000], Access::REMOTE_READ)
        .expect("ro");
    let local = MemSlice {
        handle: src,
        offset: 0,
        len: 5000,
    };
    let remote = RemoteSlice {
        key: ro.remote_key(),
        offset: 0,
        len: 5000,
    };
    a.put(b_at_a, local, remote, 1).expect("put");
    let beyond = RemoteSlice {
        offset: 4000,
        ..remote
    };
    a.get(b_at_a, local, beyond, 2).expect("get");
    let mut at_a = Vec::new();
    for _ in 0..100 {
        at_a.extend(drain(&mut a));
        drain(&mut b);
    }
    at_a.sort();
    assert_eq!(
        at_a,
        [
            "get 2 Err(Rejected(OutOfBounds))",
            "put 1 Err(Rejected(AccessDenied))"
        ]
    );
    assert!(b.region(ro).expect("ro").iter().all(|&x| x == 0));
}

#[test]
fn a_goodbye_and_a_loss_end_what_was_under_way_once() {
    let (ab, ba) = (ring_words(256), ring_words(256));
    let (mut a, mut b, b_at_a, a_at_b) = pair(&ab, &ba);
    let _ = b.finalize();
    assert_eq!(drain(&mut a), ["left"]);
    assert_eq!(
        a.send_copy(b_at_a, Tag(0x80), b"late"),
        Err(BtlError::PeerLost(LostReason::Left))
    );
    let _ = a_at_b;

    // A ring scribbled on: the peer is lost, the process is not.
    let (ab, ba) = (ring_words(256), ring_words(256));
    let (mut a, _b, b_at_a, _) = pair(&ab, &ba);
    let buf = a.register_mem(vec![0; 64], Access::empty()).expect("buf");
    a.get(
        b_at_a,
        MemSlice {
            handle: buf,
            offset: 0,
            len: 64,
        },
        RemoteSlice {
            key: crate::btl::RemoteKey(1),
            offset: 0,
            len: 64,
        },
        5,
    )
    .expect("get");
    ba[ring::CONTROL_WORDS].store(!0, core::sync::atomic::Ordering::Relaxed);
    ba[ring::CONTROL_WORDS + 1].store(u32::MAX, core::sync::atomic::Ordering::Relaxed);
    let got = drain(&mut a);
    assert_eq!(
        got,
        [
            "get 5 Err(PeerLost(ProtocolViolation))",
            "error PeerLost(ProtocolViolation)"
        ]
    );
}

#[test]
fn room_comes_only_once_the_ring_has_room() {
    let (ab, ba) = (ring_words(64), ring_words(64));
    let (mut a, mut b, b_at_a, _) = pair(&ab, &ba);
    while a.send_copy(b_at_a, Tag(0x80), &[1; 20]).is_ok() {}
    // B reads nothing yet: no Room, and polling ends.
    assert_eq!(drain(&mut a), Vec::<std::string::String>::new());
    assert_eq!(
        a.send_copy(b_at_a, Tag(0x80), &[1; 20]),
        Err(BtlError::OutOfResource)
    );
    assert_eq!(a.progress(), 0, "no room counted while B reads nothing");
    assert!(!drain(&mut b).is_empty());
    assert_eq!(a.progress(), 1, "Room counts among the events ready");
    assert_eq!(drain(&mut a), ["room"], "once B has read");
    a.send_copy(b_at_a, Tag(0x80), &[1; 20]).expect("room");
}

#[test]
fn answers_a_peer_is_owed_wait_with_its_requests_never_lose_it() {
    // B's ring to A is full and A reads nothing: B owes A more answers
    // than it keeps. A's puts wait in A's ring to B instead.
    let (ab, ba) = (ring_words(1024), ring_words(1024));
    let (mut a, mut b, b_at_a, a_at_b) = pair(&ab, &ba);
    while b.send_copy(a_at_b, Tag(0x80), &[1; 100]).is_ok() {}
    let src = a.register_mem(vec![5; 16], Access::empty()).expect("src");
    let dst = b
        .register_mem(vec![0; 16 * 12], Access::REMOTE_WRITE)
        .expect("dst");
    // Twelve answers: more than the eight B keeps.
    for i in 0..12u64 {
        let local = MemSlice {
            handle: src,
            offset: 0,
            len: 16,
        };
        let remote = RemoteSlice {
            key: dst.remote_key(),
            offset: i * 16,
            len: 16,
        };
        a.put(b_at_a, local, remote, i).expect("put");
    }
    for _ in 0..5 {
        b.progress();
    }
    let at_b: Vec<_> = drain(&mut b);
    assert!(!at_b.iter().any(|e| e.starts_with("error")), "{at_b:?}");
    // A reads again: every put completes.
    let mut puts = 0;
    for _ in 0..50 {
        puts += drain(&mut a)
            .iter()
            .filter(|e| e.starts_with("put"))
            .count();
        drain(&mut b);
    }
    assert_eq!(puts, 12);
    assert!(b.region(dst).expect("dst").iter().all(|&x| x == 5));
}

#[test]
fn a_send_with_a_callback_hands_the_descriptor_back_in_its_event() {
    let (ab, ba) = (ring_words(256), ring_words(256));
    let (mut a, mut b, b_at_a, _) = pair(&ab, &ba);
    let desc = a
        .prepare_src(b_at_a, b"ping", 0, Order::ANY, DescFlags::ALWAYS_CALLBACK)
        .expect("desc");
    assert!(matches!(
        a.send(b_at_a, desc, Tag(0x80)),
        Ok(SendStatus::Queued)
    ));
    a.progress();
    match a.poll_event() {
        Some(Event::SendComplete {
            desc: Some(d),
            result: Ok(()),
            ..
        }) => {
            a.free(d).expect("ours again");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(drain(&mut b), [std::format!("recv 128 {:?}", b"ping")]);
}

#[test]
fn a_forgotten_peer_fails_what_was_under_way_and_a_goodbye_waits_for_room() {
    let (ab, ba) = (ring_words(64), ring_words(64));
    let (mut a, mut b, b_at_a, _) = pair(&ab, &ba);
    let buf = a.register_mem(vec![0; 8], Access::empty()).expect("buf");
    let local = MemSlice {
        handle: buf,
        offset: 0,
        len: 8,
    };
    let remote = RemoteSlice {
        key: crate::btl::RemoteKey(1),
        offset: 0,
        len: 8,
    };
    a.get(b_at_a, local, remote, 3).expect("get");
    a.del_procs(&[b_at_a]).expect("known");
    let got = drain(&mut a);
    assert_eq!(
        got,
        ["get 3 Err(PeerLost(Removed))", "error PeerLost(Removed)"]
    );

    // A full ring: the goodbye waits, and goes once the peer reads.
    let (ab, ba) = (ring_words(64), ring_words(64));
    let (mut a, mut b2, b_at_a, _) = pair(&ab, &ba);
    while a.send_copy(b_at_a, Tag(0x80), &[1; 20]).is_ok() {}
    let _ = a.finalize();
    let mut seen = Vec::new();
    for _ in 0..10 {
        seen.extend(drain(&mut b2));
        a.progress();
    }
    assert_eq!(
        seen.last().map(std::string::String::as_str),
        Some("left"),
        "{seen:?}"
    );
    let _ = drain(&mut b);
}

#[test]
fn rings_too_small_for_a_put_are_refused_at_attach() {
    let (tiny, other) = (ring_words(16), ring_words(16));
    let mut a = module();
    assert_eq!(a.attach(B, &tiny, &other), Err(AttachError::RingTooSmall));
}

#[test]
fn puts_and_gets_a_peer_cannot_copy_in_one_go_move_through_the_rings() {
    fn refuse_read(_: u32, _: u64, _: &mut [u8]) -> bool {
        false
    }
    fn refuse_write(_: u32, _: u64, _: &[u8]) -> bool {
        false
    }
    // B copies for A as far as A knows, but B's copies fail (first
    // round), or B has no way to copy at all (second).
    for cross in [
        Some(CrossCopy {
            process: 1,
            read: refuse_read,
            write: refuse_write,
        }),
        None,
    ] {
        let (ab, ba) = (ring_words(256), ring_words(256));
        let (mut a, mut b, b_at_a, a_at_b) = pair(&ab, &ba);
        a.set_one_copy_min(1000);
        a.set_cross_copy(b_at_a, None, true);
        b.set_cross_copy(a_at_b, cross, false);
        let data: Vec<u8> = (0..10_000u32).map(|x| (x % 249) as u8).collect();
        let src = a.register_mem(data.clone(), Access::empty()).expect("src");
        let dst = b
            .register_mem(vec![0; 10_000], Access::REMOTE_WRITE | Access::REMOTE_READ)
            .expect("dst");
        let remote = RemoteSlice {
            key: dst.remote_key(),
            offset: 0,
            len: 10_000,
        };
        let whole = |handle| MemSlice {
            handle,
            offset: 0,
            len: 10_000,
        };
        a.put_notify(b_at_a, whole(src), remote, 7, 1).expect("put");
        let (at_a, at_b) = rounds(&mut a, &mut b);
        assert_eq!(at_a, ["put 1 Ok(())"], "{cross:?}");
        assert_eq!(at_b, ["arrived 7 10000"], "told once, after the pieces");
        assert_eq!(b.region(dst).expect("dst"), &data[..]);
        assert_eq!(
            a.transfers(),
            Transfers {
                rings: 1,
                one_copy: 1,
                fell_back: 1
            }
        );
        // The peer is known not to copy now: the get goes in pieces at once.
        let back = a
            .register_mem(vec![0; 10_000], Access::empty())
            .expect("back");
        a.get(b_at_a, whole(back), remote, 2).expect("get");
        let (at_a, _) = rounds(&mut a, &mut b);
        assert_eq!(at_a, ["get 2 Ok(())"]);
        assert_eq!(a.region(back).expect("back"), &data[..]);
        assert_eq!(a.transfers().rings, 2);
        assert_eq!(a.transfers().fell_back, 1);
    }
}

#[test]
fn a_get_answered_done_without_being_asked_in_one_copy_breaks_the_protocol() {
    let (ab, ba) = (ring_words(256), ring_words(256));
    let (mut a, _b, b_at_a, _) = pair(&ab, &ba);
    let back = a.register_mem(vec![0; 100], Access::empty()).expect("back");
    let remote = RemoteSlice {
        key: crate::btl::RemoteKey(1),
        offset: 0,
        len: 100,
    };
    let local = MemSlice {
        handle: back,
        offset: 0,
        len: 100,
    };
    let op = a.get(b_at_a, local, remote, 3).expect("get");
    // B's side of the ring, written by hand: "done" for a get in pieces.
    let mut forged = Producer::attach(&ba).expect("ring");
    forged
        .push(record::GET_FAIL, &[&record::answer(op.0, 0)])
        .expect("room");
    let events = drain(&mut a);
    assert!(
        events.contains(&"get 3 Err(PeerLost(ProtocolViolation))".into()),
        "{events:?}"
    );
}

#[test]
fn shared_memory_ranks_below_self_and_above_every_network() {
    let sm = module();
    let loopback = crate::loopback::Loopback::<&'static [PoolCell], Vec<u8>, 4, 16>::new(
        A,
        FragmentPools::new(
            std::boxed::Box::leak(vec![0u8; 1 << 20].into_boxed_slice()),
            FragmentPoolsConfig {
                small: FragmentPoolConfig {
                    fragment_size: 256,
                    num: 4,
                    max: 4,
                    inc: 1,
                },
                eager: FragmentPoolConfig {
                    fragment_size: 1024,
                    num: 4,
                    max: 4,
                    inc: 1,
                },
                max: FragmentPoolConfig {
                    fragment_size: 4096,
                    num: 4,
                    max: 4,
                    inc: 1,
                },
            },
        )
        .expect("pools"),
    );
    let ours = sm.attributes().exclusivity;
    assert!(ours < loopback.attributes().exclusivity);
    assert!(ours > Exclusivity::DEFAULT, "above verbs");
    assert!(ours > Exclusivity::LOW.plus(100), "above tcp and udp");
}
