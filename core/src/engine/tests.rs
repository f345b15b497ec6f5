//! The engine over an in-memory stream pair: two engines, a byte pipe each
//! way, and a pump that plays the driver.

extern crate std;

use std::boxed::Box;
use std::vec;
use std::vec::Vec;

use super::config::EngineConfig;
use super::{Engine, LinkId};
use crate::btl::{
    Access, Btl, BtlError, Event, LostReason, MemSlice, RejectCode, RemoteSlice, SendStatus, Tag,
};
use crate::desc::{DescFlags, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::pool::{FragmentClass, FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};

type E = Engine<'static, 'static, 4, 4, 4>;

const A: ProcName = ProcName::new(5, 0);
const B: ProcName = ProcName::new(5, 1);

fn engine(me: ProcName, key: Option<&[u8]>, credits: u32) -> E {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 64,
        max: 64,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096 + 40),
        max: pool(65536 + 40),
    };
    let region: &'static mut [u8] =
        Box::leak(vec![0u8; FragmentPools::required_bytes(&cfg)].into_boxed_slice());
    let pools = FragmentPools::new(region, cfg).expect("pools");
    let mut config = EngineConfig::new(me);
    config.job_key = key.map(|k| heapless::Vec::from_slice(k).expect("short key"));
    config.initial_credits = credits;
    config.checksum = true;
    Engine::new(config, pools)
}

struct Pair {
    a: E,
    b: E,
    la: Option<LinkId>,
    lb: Option<LinkId>,
    a_to_b: Vec<u8>,
    b_to_a: Vec<u8>,
    now: u64,
    nonce: u8,
}

impl Pair {
    fn new(a: E, b: E) -> (Self, EndpointId, EndpointId) {
        let mut pair = Pair {
            a,
            b,
            la: None,
            lb: None,
            a_to_b: Vec::new(),
            b_to_a: Vec::new(),
            now: 1,
            nonce: 0,
        };
        let ep_b = add(&mut pair.a, B);
        let ep_a = add(&mut pair.b, A);
        (pair, ep_b, ep_a)
    }

    fn nonce(&mut self) -> [u8; 16] {
        self.nonce += 1;
        [self.nonce; 16]
    }

    /// Plays the driver until nothing moves (bounded).
    fn pump(&mut self) {
        for _ in 0..10_000 {
            self.now += 1000;
            if let Some(req) = self.a.poll_connect() {
                let n = self.nonce();
                self.la = Some(
                    self.a
                        .handle_connected(req.endpoint, n, self.now)
                        .expect("link"),
                );
                let n = self.nonce();
                self.lb = Some(self.b.handle_accepted(n, self.now).expect("link"));
            }
            if let Some(req) = self.b.poll_connect() {
                let n = self.nonce();
                self.lb = Some(
                    self.b
                        .handle_connected(req.endpoint, n, self.now)
                        .expect("link"),
                );
                let n = self.nonce();
                self.la = Some(self.a.handle_accepted(n, self.now).expect("link"));
            }
            let (Some(la), Some(lb)) = (self.la, self.lb) else {
                return;
            };
            let moved_ab = shuttle(&mut self.a, la, &mut self.b, lb, &mut self.a_to_b, self.now);
            let moved_ba = shuttle(&mut self.b, lb, &mut self.a, la, &mut self.b_to_a, self.now);
            self.a.progress();
            self.b.progress();
            if !moved_ab && !moved_ba {
                return;
            }
        }
        panic!("the pair never went quiet");
    }
}

fn add(e: &mut E, peer: ProcName) -> EndpointId {
    let mut eps = [None];
    let mut words = [0u64];
    e.add_procs(&[peer], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    eps[0].expect("reachable")
}

/// Moves what `from` wants to write on `fl` into `to`'s link `tl`.
fn shuttle(from: &mut E, fl: LinkId, to: &mut E, tl: LinkId, pipe: &mut Vec<u8>, now: u64) -> bool {
    let mut moved = false;
    loop {
        let bytes: Vec<u8> = match from.poll_transmit(fl) {
            Some(t) => t.segments.iter().flat_map(|s| s.iter().copied()).collect(),
            None => break,
        };
        from.handle_written(fl, bytes.len());
        pipe.extend_from_slice(&bytes);
        moved = true;
    }
    if !pipe.is_empty() {
        if let Ok(n) = to.handle_stream(tl, pipe, now) {
            if n > 0 {
                moved = true;
            }
            pipe.drain(..n);
        }
    }
    moved
}

fn drain(e: &mut E) -> Vec<String> {
    let mut out = Vec::new();
    let mut returned = Vec::new();
    while let Some(ev) = e.poll_event() {
        out.push(match ev {
            Event::Received(m) => format!("recv {} {}", m.tag.0, m.data.len()),
            Event::SendComplete { desc, result, .. } => {
                returned.extend(desc);
                format!("send {result:?}")
            }
            Event::PutComplete { result, ctx, .. } => format!("put {ctx} {result:?}"),
            Event::GetComplete { result, ctx, .. } => format!("get {ctx} {result:?}"),
            Event::Error(err) => format!("error {:?}", err.error),
        });
    }
    for d in returned {
        e.free(d).expect("a descriptor of this engine");
    }
    out
}

use std::format;
use std::string::String;

fn in_use(e: &E) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| e.pools().stats(c).in_use)
        .sum()
}

#[test]
fn handshake_then_messages_in_order_with_content() {
    let (mut pair, ep_b, _) = Pair::new(engine(A, Some(b"key"), 16), engine(B, Some(b"key"), 16));
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
            .a
            .prepare_src(ep_b, &data, 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("desc");
        let _ = pair
            .a
            .send(ep_b, d, Tag(0x80 + (i % 4) as u8))
            .expect("send");
        pair.pump();
        take(&mut pair.b, &mut got);
    }
    for _ in 0..5 {
        pair.pump();
        take(&mut pair.b, &mut got);
    }
    assert_eq!(
        got,
        (0..40u32).map(|i| (i * 97) as usize).collect::<Vec<_>>()
    );
    pair.pump();
    assert!(pair.a.is_connected(ep_b));
    assert_eq!(
        drain(&mut pair.a),
        Vec::<String>::new(),
        "owned sends complete silently"
    );
    pair.pump();
    assert_eq!(in_use(&pair.a), 0, "every acknowledged send was freed");
    assert_eq!(in_use(&pair.b), 0);
}

#[test]
fn credits_hold_a_sender_back_until_the_receiver_polls() {
    let (mut pair, ep_b, _) = Pair::new(engine(A, None, 4), engine(B, None, 4));
    for _ in 0..20 {
        let d = pair
            .a
            .prepare_src(ep_b, &[1; 100], 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("desc");
        let _ = pair.a.send(ep_b, d, Tag(0x81)).expect("send");
    }
    pair.pump();
    assert_eq!(pair.b.progress(), 4, "no more than the credits arrived");
    let mut received = 0;
    for _ in 0..20 {
        while let Some(ev) = pair.b.poll_event() {
            if matches!(ev, Event::Received(_)) {
                received += 1;
            }
        }
        pair.pump();
    }
    assert_eq!(received, 20);
}

#[test]
fn put_and_get_move_registered_memory_and_refusals_leave_it_alone() {
    let (mut pair, ep_b, _) = Pair::new(engine(A, None, 16), engine(B, None, 16));
    let src: &'static mut [u8] = Box::leak(
        (0..300_000u32)
            .map(|x| (x % 251) as u8)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let dst: &'static mut [u8] = Box::leak(vec![0u8; 300_000].into_boxed_slice());
    let ro: &'static mut [u8] = Box::leak(vec![9u8; 1000].into_boxed_slice());
    let hs = pair.a.register_mem(src, Access::empty()).expect("src");
    let hd = pair
        .b
        .register_mem(dst, Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("dst");
    let hr = pair.b.register_mem(ro, Access::REMOTE_READ).expect("ro");
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
    let _ = pair.a.put(ep_b, local, remote, 7).expect("put");
    for _ in 0..50 {
        pair.pump();
    }
    assert_eq!(drain(&mut pair.a), ["put 7 Ok(())"]);
    assert_eq!(
        pair.b.region(hd).expect("dst"),
        pair.a.region(hs).expect("src")
    );

    // Refused: beyond the region, and into read-only memory.
    let small = MemSlice {
        handle: hs,
        offset: 0,
        len: 100,
    };
    let _ = pair
        .a
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
        .a
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
        pair.pump();
    }
    let events = drain(&mut pair.a);
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
    assert_eq!(pair.b.region(hr).expect("ro"), &[9u8; 1000][..]);

    // Get back from the peer into a fresh local region.
    let back: &'static mut [u8] = Box::leak(vec![0u8; 1000].into_boxed_slice());
    let hb = pair.a.register_mem(back, Access::empty()).expect("back");
    let _ = pair
        .a
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
        pair.pump();
    }
    assert_eq!(drain(&mut pair.a), ["get 10 Ok(())"]);
    assert_eq!(pair.a.region(hb).expect("back"), &[9u8; 1000][..]);
}

#[test]
fn a_wrong_job_key_is_refused_and_the_send_fails_once() {
    let (mut pair, ep_b, _) = Pair::new(engine(A, Some(b"one"), 16), engine(B, Some(b"two"), 16));
    // ALWAYS_CALLBACK: an owned send without it owes no event (it counts as
    // complete when made), so its failure shows only in the error event.
    let flags = DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK;
    let d = pair
        .a
        .prepare_src(ep_b, b"x", 0, Order::ANY, flags)
        .expect("desc");
    let status = pair.a.send(ep_b, d, Tag(0x80)).expect("queued");
    assert!(matches!(status, SendStatus::Queued), "{status:?}");
    for _ in 0..5 {
        pair.pump();
    }
    let events = drain(&mut pair.a);
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
    assert_eq!(in_use(&pair.a), 0);
    assert!(drain(&mut pair.b).iter().all(|e| !e.starts_with("recv")));
}

#[test]
fn garbage_on_an_accepted_link_closes_only_that_link() {
    let mut b = engine(B, None, 16);
    let link = b.handle_accepted([1; 16], 1).expect("link");
    let taken = b.handle_stream(link, &[0xAB; 100], 2).expect("known link");
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
    b.handle_closed(link, 3);
    assert_eq!(
        b.handle_stream(link, &[0], 4),
        Err(super::LinkError::UnknownLink)
    );
    assert_eq!(in_use(&b), 0);
}

#[test]
fn simultaneous_connects_keep_the_lower_names_link_and_lose_nothing() {
    // A is the lower name: A's connection survives. B's own opens first at
    // B, which writes its sends there; A drops that connection, and once
    // A's opens at B, B sends them again on it.
    let mut a = engine(A, Some(b"key"), 16);
    let mut b = engine(B, Some(b"key"), 16);
    let ep_b = add(&mut a, B);
    let ep_a = add(&mut b, A);
    for i in 0..3u8 {
        for (e, ep) in [(&mut a, ep_b), (&mut b, ep_a)] {
            let d = e
                .prepare_src(ep, &[i; 10], 0, Order(0), DescFlags::empty())
                .expect("desc");
            let status = e.send(ep, d, Tag(0x80 + i)).expect("send");
            assert!(matches!(status, SendStatus::Queued), "{status:?}");
        }
    }
    let now = 10;
    let ra = a.poll_connect().expect("A connects");
    let rb = b.poll_connect().expect("B connects");
    // B's connection (bh at B, ah at A) and A's (al at A, bl at B).
    let bh = b.handle_connected(rb.endpoint, [1; 16], now).expect("link");
    let ah = a.handle_accepted([2; 16], now).expect("link");
    let al = a.handle_connected(ra.endpoint, [3; 16], now).expect("link");
    let bl = b.handle_accepted([4; 16], now).expect("link");
    let mut pipes: [Vec<u8>; 4] = Default::default();
    let [ah_in, bh_in, al_in, bl_in] = &mut pipes;
    // B's connection: HELLOs, A's HELLO_ACK; B opens it and writes its
    // sends, which A (whose own connection is pending) drops with it.
    shuttle(&mut b, bh, &mut a, ah, ah_in, now);
    shuttle(&mut a, ah, &mut b, bh, bh_in, now);
    assert!(b.is_connected(ep_a), "B's own connection opened first");
    shuttle(&mut b, bh, &mut a, ah, ah_in, now);
    assert!(!a.is_connected(ep_b), "A dropped B's connection");
    // A's connection opens on both sides; B switches to it.
    for _ in 0..4 {
        shuttle(&mut a, al, &mut b, bl, bl_in, now);
        shuttle(&mut b, bl, &mut a, al, al_in, now);
    }
    // The dropped connection closes; the other carries on.
    for _ in 0..4 {
        shuttle(&mut a, ah, &mut b, bh, bh_in, now);
        shuttle(&mut b, bh, &mut a, ah, ah_in, now);
    }
    let mut closed = Vec::new();
    while let Some(l) = a.poll_close() {
        closed.push(("a", l));
    }
    while let Some(l) = b.poll_close() {
        closed.push(("b", l));
    }
    closed.sort_by_key(|&(side, l)| (side, l.0));
    closed.dedup();
    assert_eq!(closed, [("a", ah), ("b", bh)], "B's connection is dropped");
    a.handle_closed(ah, now);
    b.handle_closed(bh, now);
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        shuttle(&mut a, al, &mut b, bl, bl_in, now);
        shuttle(&mut b, bl, &mut a, al, al_in, now);
        got_a.extend(drain(&mut a));
        got_b.extend(drain(&mut b));
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
    assert!(a.is_connected(ep_b) && b.is_connected(ep_a));
}

#[test]
fn owned_sends_complete_at_once_and_sendi_takes_eager_sizes() {
    let (mut pair, ep_b, _) = Pair::new(engine(A, None, 16), engine(B, None, 16));
    let d = pair
        .a
        .prepare_src(ep_b, b"x", 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
        .expect("desc");
    let status = pair.a.send(ep_b, d, Tag(0x80)).expect("send");
    assert!(matches!(status, SendStatus::Completed(None)), "{status:?}");
    pair.pump();
    let eager = pair.a.attributes().eager_limit;
    assert_eq!(
        pair.a.sendi(
            ep_b,
            &[1],
            &vec![2; eager],
            Tag(0x81),
            Order::ANY,
            DescFlags::empty()
        ),
        Err(BtlError::TooLarge {
            len: eager as u64 + 1,
            max: eager as u64
        })
    );
    pair.a
        .sendi(
            ep_b,
            &[1],
            &vec![2; eager - 1],
            Tag(0x81),
            Order::ANY,
            DescFlags::empty(),
        )
        .expect("sendi of eager_limit bytes");
    pair.pump();
    assert_eq!(
        drain(&mut pair.b),
        ["recv 128 1", format!("recv 129 {eager}").as_str()]
    );
    assert_eq!(drain(&mut pair.a), Vec::<String>::new());
}
