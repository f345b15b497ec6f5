//! The engine in datagram framing over [`DatagramPair`]: heavy loss,
//! duplication and reordering over many seeds, credit probes, keepalives,
//! and datagrams that are not the protocol.

use btl_core::btl::{Access, Btl, BtlError, Event, LostReason, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, Datagram, Source};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::{Duration, Instant};
use btl_core::wire::{
    self, ControlRepr, GetRepr, HEADER_LEN, HeaderRepr, HelloRepr, PacketRepr, VERSION_MAJOR,
};
use btl_std::driver::heap::{Heap, HeapEngine};
use btl_tests::pair::Side;
use btl_tests::pair::datagram::{DatagramPair, Faults};

type E = HeapEngine<Datagram>;
const MTU: usize = 1200;
type Pair = DatagramPair<E, 96, MTU, Box<E>>;

const A: ProcName = ProcName::new(9, 0);
const B: ProcName = ProcName::new(9, 1);
const MS: Duration = Duration::from_millis(1);

fn engine(me: ProcName, credits: u32, keepalive: Duration) -> E {
    engine_of_start(me, credits, keepalive, 1)
}

/// The job key of every engine here.
const KEY: &[u8] = b"datagram key";

/// The seal `from` puts on what it sends `to`, both of the start
/// [`engine`] makes.
fn seal(from: ProcName, to: ProcName) -> wire::Seal {
    let start = |p: ProcName| wire::Start {
        job: p.job,
        rank: p.rank,
        epoch: 1,
    };
    wire::Seal::derive(KEY, start(from), start(to))
}

/// `packet` behind `header` as one datagram, sealed with `seal` if given.
fn datagram(header: HeaderRepr, packet: &PacketRepr<'_>, seal: Option<&wire::Seal>) -> Vec<u8> {
    let header = HeaderRepr {
        flags: header.flags | seal.map_or(wire::Flags::empty(), |_| wire::Flags::SEALED),
        ..header
    };
    let mut frame = vec![0; header.frame_len().expect("a length")];
    wire::emit(&header, packet, &mut frame).expect("a frame");
    if let Some(seal) = seal {
        seal.seal_frame(&mut frame);
    }
    frame
}

/// [`engine`] for the start `epoch` of its process.
fn engine_of_start(me: ProcName, credits: u32, keepalive: Duration, epoch: u64) -> E {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 32,
        max: 32,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(1024),
        max: pool(MTU),
    };
    let mut config = EngineConfig::new(me);
    config.job_key = Some(heapless::Vec::from_slice(KEY).expect("short key"));
    config.checksum = true;
    config.initial_credits = credits;
    config.keepalive = keepalive;
    config.peer_timeout = 10_000 * MS;
    config.epoch = epoch;
    let capacities = Capacities {
        peers: 4,
        links: 4,
        ops: 64,
        events: 256,
        registrations: 4,
    };
    Heap::engine(
        config,
        Datagram { mtu: MTU },
        capacities,
        cfg,
        Instant::ZERO,
    )
    .expect("pools")
}

fn pair(
    seed: u64,
    faults: Faults,
    credits: u32,
    keepalive: Duration,
) -> (Box<Pair>, EndpointId, EndpointId) {
    let mut pair = Box::new(Pair::new(
        Box::new(engine(A, credits, keepalive)),
        Box::new(engine(B, credits, keepalive)),
        [A, B],
        seed,
    ));
    pair.set_tick(MS);
    pair.set_faults(faults);
    let [b_at_a, a_at_b] = pair.introduce().expect("each reaches the other");
    (pair, b_at_a, a_at_b)
}

/// A sends `data` to B (`b_at_a`), tag 0x80, and the pair runs until
/// nothing moves.
fn send_from_a(pair: &mut Pair, b_at_a: EndpointId, data: &[u8]) {
    let d = pair
        .a()
        .prepare_src(b_at_a, data, 0, Order(0), DescFlags::BTL_OWNERSHIP)
        .expect("descriptor");
    let _ = pair.a().send(b_at_a, d, Tag(0x80)).expect("send");
    pair.run_until_idle(1_000).expect("quiet");
}

/// Takes every event of `e`: messages as (tag, bytes), the rest as text.
fn drain(e: &mut E, got: &mut Vec<(u8, Vec<u8>)>, other: &mut Vec<String>) {
    while let Some(ev) = e.poll_event() {
        match ev {
            Event::Received(m) => got.push((m.tag.0, m.data.to_vec())),
            Event::SendComplete { result, .. } => other.push(format!("send {result:?}")),
            Event::PutComplete { result, .. } => other.push(format!("put {result:?}")),
            Event::GetComplete { result, .. } => other.push(format!("get {result:?}")),
            Event::PutArrived { imm, .. } => other.push(format!("arrived {imm}")),
            Event::PeerLeft { endpoint } => other.push(format!("left {}", endpoint.0)),
            // The senders try again after a refusal anyway.
            Event::Room { .. } => {}
            Event::Error(err) => other.push(format!("error {:?}", err.error)),
        }
    }
}

fn message(i: u32) -> Vec<u8> {
    let len = (i as usize * 37) % 900;
    (0..len).map(|k| (k as u32 ^ i) as u8).collect()
}

/// Under 20 % loss, 10 % duplication and 20 % reordering, from the first
/// HELLO on, over many seeds: every message arrives once, in order, intact,
/// both ways, while a put and a get cross them; nothing fails.
#[test]
fn heavy_faults_deliver_everything_once_in_order() {
    let faults = Faults {
        loss: 200,
        duplication: 100,
        reordering: 200,
    };
    for seed in 0..12u64 {
        let (mut pair, b_at_a, a_at_b) = pair(seed, faults, 8, Duration::ZERO);
        let mut src = vec![0u8; 40_000];
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i * 7 + seed as usize) as u8;
        }
        let expect = src.to_vec();
        let dst = vec![0u8; 40_000];
        let back = vec![0u8; 40_000];
        let hs = pair
            .a()
            .register_mem(src, Access::REMOTE_READ)
            .expect("reg");
        let hb = pair.a().register_mem(back, Access::empty()).expect("reg");
        let hd = pair
            .b()
            .register_mem(dst, Access::REMOTE_WRITE | Access::REMOTE_READ)
            .expect("reg");
        let key_d = hd.remote_key();
        let whole = |handle| MemSlice {
            handle,
            offset: 0,
            len: 40_000,
        };
        let remote = |key| RemoteSlice {
            key,
            offset: 0,
            len: 40_000,
        };
        pair.a()
            .put(b_at_a, whole(hs), remote(key_d), 1)
            .expect("put");
        let total = 60u32;
        let (mut sent_a, mut sent_b) = (0, 0);
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        let (mut ev_a, mut ev_b) = (Vec::new(), Vec::new());
        let mut got_started = false;
        for _ in 0..20_000 {
            if sent_a < total {
                let d = pair
                    .a()
                    .prepare_src(
                        b_at_a,
                        &message(sent_a),
                        0,
                        Order(0),
                        DescFlags::BTL_OWNERSHIP,
                    )
                    .ok();
                if let Some(d) = d
                    && pair.a().send(b_at_a, d, Tag(0x81)).is_ok()
                {
                    sent_a += 1;
                }
            }
            if sent_b < total
                && pair
                    .b()
                    .sendi(
                        a_at_b,
                        &[],
                        &message(sent_b),
                        Tag(0x82),
                        Order(0),
                        DescFlags::empty(),
                    )
                    .is_ok()
            {
                sent_b += 1;
            }
            pair.round();
            drain(pair.a(), &mut got_a, &mut ev_a);
            drain(pair.b(), &mut got_b, &mut ev_b);
            if !got_started && ev_a.iter().any(|e| e.starts_with("put")) {
                got_started = true;
                // A reads B's copy back (B serves it from the registration
                // the put filled).
                pair.a()
                    .get(b_at_a, whole(hb), remote(key_d), 2)
                    .expect("get");
            }
            if got_a.len() == total as usize
                && got_b.len() == total as usize
                && ev_a.iter().any(|e| e.starts_with("get"))
            {
                break;
            }
        }
        for _ in 0..200 {
            pair.round();
            drain(pair.a(), &mut got_a, &mut ev_a);
            drain(pair.b(), &mut got_b, &mut ev_b);
        }
        let want: Vec<Vec<u8>> = (0..total).map(message).collect();
        let at_b: Vec<Vec<u8>> = got_b.iter().map(|(_, d)| d.clone()).collect();
        let at_a: Vec<Vec<u8>> = got_a.iter().map(|(_, d)| d.clone()).collect();
        for (what, got) in [("A's messages at B", &at_b), ("B's messages at A", &at_a)] {
            let lens: Vec<usize> = got.iter().map(Vec::len).collect();
            let want_lens: Vec<usize> = want.iter().map(Vec::len).collect();
            assert_eq!(lens, want_lens, "seed {seed}: {what} (lengths)");
            assert!(*got == want, "seed {seed}: {what} (bytes)");
        }
        assert_eq!(ev_a, ["put Ok(())", "get Ok(())"], "seed {seed}");
        assert!(ev_b.is_empty(), "seed {seed}: {ev_b:?}");
        assert_eq!(
            pair.a().region(hb).expect("back"),
            &expect[..],
            "seed {seed}"
        );
        let stats = pair.stats();
        assert!(stats.lost > 0 && stats.duplicated > 0 && stats.reordered > 0);
        assert_eq!(stats.oversized, 0);
        // What each side counted of the other: every message and byte
        // once, however often the network lost or repeated it.
        let at_a = pair.a().peer_metrics().next().expect("B").metrics;
        let at_b = pair.b().peer_metrics().next().expect("A").metrics;
        let bytes: u64 = want.iter().map(|m| m.len() as u64).sum::<u64>() + 40_000;
        for (side, m) in [("A", &at_a), ("B", &at_b)] {
            assert_eq!(
                (m.messages_sent, m.messages_received),
                (60, 60),
                "seed {seed}: {side}"
            );
            assert_eq!(
                (m.bytes_sent, m.bytes_received),
                (bytes, bytes),
                "seed {seed}: {side}: its put or the answer to the get, and messages"
            );
            assert!(m.srtt.is_some(), "seed {seed}: {side}");
        }
        assert!(
            at_a.retransmissions + at_b.retransmissions > 0,
            "seed {seed}"
        );
        assert!(at_a.duplicates + at_b.duplicates > 0, "seed {seed}");
    }
}

/// One credit and every ACK at risk: grants lost with their ACKs are asked
/// for again (credit probe), so the sender never waits for good.
#[test]
fn lost_credit_grants_are_probed_for() {
    let faults = Faults {
        loss: 300,
        duplication: 0,
        reordering: 0,
    };
    for seed in 0..8u64 {
        let (mut pair, b_at_a, _) = pair(seed, faults, 1, Duration::ZERO);
        let total = 40u32;
        let mut sent = 0;
        let (mut got, mut ev) = (Vec::new(), Vec::new());
        for _ in 0..20_000 {
            // A fragment, or none for now (sends keep some for receiving).
            let d = (sent < total)
                .then(|| {
                    pair.a().prepare_src(
                        b_at_a,
                        &message(sent),
                        0,
                        Order(0),
                        DescFlags::BTL_OWNERSHIP,
                    )
                })
                .transpose();
            if let Some(d) = d.unwrap_or_else(|e| {
                assert_eq!(e, BtlError::OutOfResource);
                None
            }) {
                match pair.a().send(b_at_a, d, Tag(0x90)) {
                    Ok(_) => sent += 1,
                    Err(e) => {
                        assert_eq!(e.error, BtlError::OutOfResource);
                        pair.a().free(e.desc).expect("free");
                    }
                }
            }
            pair.round();
            drain(pair.b(), &mut got, &mut ev);
            if got.len() == total as usize {
                break;
            }
        }
        assert_eq!(got.len(), total as usize, "seed {seed}");
        assert!(ev.is_empty(), "{ev:?}");
    }
}

/// A pair over a faultless network with `keepalive`, connected by one
/// message from A to B, then idle.
fn connected_pair(seed: u64, keepalive: Duration) -> (Box<Pair>, EndpointId, EndpointId) {
    let (mut pair, b_at_a, a_at_b) = pair(seed, Faults::NONE, 8, keepalive);
    let d = pair
        .a()
        .prepare_src(b_at_a, b"hi", 0, Order(0), DescFlags::BTL_OWNERSHIP)
        .expect("descriptor");
    let _ = pair.a().send(b_at_a, d, Tag(0x80)).expect("send");
    for _ in 0..50 {
        pair.round();
    }
    assert!(pair.a().is_connected(b_at_a) && pair.b().is_connected(a_at_b));
    (pair, b_at_a, a_at_b)
}

/// A message sent after a quiet spell is timed from the driver's last
/// turn, not from the last datagram: it goes once, and is not taken for
/// lost (and sent again) the moment the driver next looks at the timers.
#[test]
fn a_message_after_a_quiet_spell_goes_once() {
    // No keepalive: nothing at all moves while the pair is idle.
    let (mut pair, b_at_a, _) = connected_pair(3, Duration::ZERO);
    let (mut got, mut other) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got, &mut other);
    assert_eq!(got, [(0x80, b"hi".to_vec())]);
    got.clear();
    assert_eq!(pair.run_until_idle(1_000).map(|_| ()), Some(()));
    // A hundred quiet rounds: 100 ms, far beyond the retransmission
    // timeout of a data-centre round trip.
    for _ in 0..100 {
        assert_eq!(pair.round(), 0, "a quiet pair");
    }
    let before = pair.stats();
    let d = pair
        .a()
        .prepare_src(
            b_at_a,
            b"after a quiet spell",
            0,
            Order(0),
            DescFlags::BTL_OWNERSHIP,
        )
        .expect("descriptor");
    let _ = pair.a().send(b_at_a, d, Tag(0x80)).expect("send");
    pair.a().progress();
    let due = pair.a().poll_timeout().expect("its retransmission timer");
    assert!(
        due > pair.now(),
        "due at {due:?}, before the quiet spell ended ({:?})",
        pair.now()
    );
    pair.run_until_idle(1_000).expect("quiet");
    let after = pair.stats();
    assert_eq!(
        after.sent - before.sent,
        2,
        "the message and its acknowledgement, nothing again: {after:?}"
    );
    drain(pair.b(), &mut got, &mut other);
    assert_eq!(got, [(0x80, b"after a quiet spell".to_vec())]);
}

/// Keepalives: an idle peer that dies is found by its silence; an idle
/// peer that lives is kept, its answers to the probes being heard.
#[test]
fn keepalives_find_a_dead_idle_peer_and_keep_a_live_one() {
    let (mut pair, b_at_a, a_at_b) = connected_pair(1, 100 * MS);
    // Idle for three peer timeouts: kept alive by the probes.
    for _ in 0..30_000 {
        pair.round();
    }
    assert!(pair.a().is_connected(b_at_a) && pair.b().is_connected(a_at_b));
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    drain(pair.a(), &mut got, &mut ev);
    assert!(ev.is_empty(), "{ev:?}");
    pair.kill(Side::B);
    for _ in 0..10_500 {
        pair.round();
    }
    drain(pair.a(), &mut got, &mut ev);
    assert_eq!(
        ev,
        [format!(
            "error {:?}",
            BtlError::PeerLost(LostReason::Timeout)
        )]
    );
}

/// A keepalive probe is a datagram and may be lost, and so may its answer:
/// one unanswered goes again after the retransmission timeout, so that an
/// idle peer behind a lossy network is never taken for dead. (The
/// simulation found it: seed 580 of its UDP all-to-all lost an idle pair
/// after four probes in a row had been lost, each a keepalive interval
/// apart.)
#[test]
fn lost_keepalive_probes_go_again_and_a_live_peer_stays() {
    for seed in 1..=3 {
        // 35 % of the datagrams lost: a probe and its answer both arrive
        // four times in ten, and the three probes of a peer timeout are
        // all lost one time in five.
        let faults = Faults {
            loss: 350,
            ..Faults::NONE
        };
        let (mut pair, b_at_a, a_at_b) = connected_pair(seed, 3_000 * MS);
        pair.set_faults(faults);
        // Idle for ten peer timeouts (1 ms a round).
        for _ in 0..100_000 {
            pair.round();
        }
        let (mut got, mut ev) = (Vec::new(), Vec::new());
        drain(pair.a(), &mut got, &mut ev);
        drain(pair.b(), &mut got, &mut ev);
        assert!(ev.is_empty(), "seed {seed}: {ev:?}");
        assert!(pair.a().is_connected(b_at_a) && pair.b().is_connected(a_at_b));
    }
}

/// Without keepalives an idle peer's silence is no fault: nothing is
/// outstanding to it.
#[test]
fn without_keepalives_an_idle_peer_stays() {
    let (mut pair, b_at_a, _) = pair(2, Faults::NONE, 8, Duration::ZERO);
    let d = pair
        .a()
        .prepare_src(b_at_a, b"hi", 0, Order(0), DescFlags::BTL_OWNERSHIP)
        .expect("descriptor");
    let _ = pair.a().send(b_at_a, d, Tag(0x80)).expect("send");
    for _ in 0..50 {
        pair.round();
    }
    pair.kill(Side::B);
    for _ in 0..25_000 {
        pair.round();
    }
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    drain(pair.a(), &mut got, &mut ev);
    assert!(ev.is_empty(), "{ev:?}");
    assert!(pair.a().is_connected(b_at_a));
}

/// Datagrams that are not the protocol (garbage, a frame cut short, one
/// with a damaged checksum) are dropped on an open link, which carries on;
/// a HELLO of another major version on a new link is refused.
#[test]
fn bad_datagrams_are_dropped_and_bad_hellos_refused() {
    let (mut pair, b_at_a, _) = pair(3, Faults::NONE, 8, Duration::ZERO);
    let send = |pair: &mut Pair, data: &[u8]| send_from_a(pair, b_at_a, data);
    send(&mut pair, b"first");
    let mut frame = [0u8; 64];
    let packet = PacketRepr::Ack(wire::AckRepr { sack: 0 });
    let n = wire::emit(&HeaderRepr::new(&packet), &packet, &mut frame).expect("ack");
    let mut flagged = frame;
    flagged[1] = wire::Flags::CHECKSUM.bits();
    for bad in [&[0xFFu8; 40][..], &frame[..n - 1], &flagged[..n + 4]] {
        pair.inject(Side::B, bad).expect("delivered");
    }
    send(&mut pair, b"second");
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got, &mut ev);
    let got: Vec<&[u8]> = got.iter().map(|(_, d)| d.as_slice()).collect();
    assert_eq!(got, [&b"first"[..], b"second"]);
    assert!(ev.is_empty(), "{ev:?}");

    // A stranger's HELLO of another major version, on a link of its own.
    let mut e = engine(ProcName::new(9, 7), 8, Duration::ZERO);
    let hello = HelloRepr {
        version_minor: 0,
        link_index: 0,
        job: 9,
        rank: 7,
        capabilities: wire::Capabilities::JOB_KEY,
        nonce: [7; 16],
        max_body: 1 << 20,
        initial_credits: 8,
        epoch: 1,
    };
    let packet = PacketRepr::Hello(hello);
    let mut frame = [0u8; HEADER_LEN + HelloRepr::LEN];
    wire::emit(&HeaderRepr::new(&packet), &packet, &mut frame).expect("hello");
    frame[HEADER_LEN + 4] = VERSION_MAJOR + 1;
    let link = e
        .handle_accepted(Source(0), [1; 16], Instant::ZERO)
        .expect("link");
    e.handle_datagram(link, &frame, Instant::ZERO)
        .expect("known link");
    let mut closed = false;
    while let Some(bytes) = e.poll_transmit(link).map(|t| t.segments.concat()) {
        if let Ok((_, PacketRepr::Close(c))) =
            wire::parse_datagram(&bytes, &wire::Limits::new(1 << 20))
        {
            assert_eq!(c.reason, wire::CloseReason::VersionMismatch);
            closed = true;
        }
        e.handle_written(link, bytes.len());
    }
    assert!(closed, "the stranger is told why");
    assert_eq!(e.poll_close(), Some(link));
}

/// A peer that asks and asks (GETs of a region that does not exist) but
/// never acknowledges the answers outgrows the answers a receiver keeps
/// for it: it is lost for breaking the protocol, and nothing leaks.
#[test]
fn a_peer_that_never_takes_its_answers_is_cut_off() {
    let (mut pair, b_at_a, _) = pair(4, Faults::NONE, 8, Duration::ZERO);
    send_from_a(&mut pair, b_at_a, b"hello");
    pair.pause(Side::A);
    let (mut got, mut events) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got, &mut events);
    // A's next packets, made (and sealed) as A would: each GET is
    // refused, and A acknowledges none of the REJECTs.
    let a_seal = seal(A, B);
    for seq in 2..230u64 {
        let get = PacketRepr::Control(ControlRepr::Get(GetRepr {
            xfer_id: seq,
            src_handle: 0xdead,
            src_offset: 0,
            len: 1,
            target_job: A.job,
            target_rank: A.rank,
            dst_handle: 0,
            dst_offset: 0,
        }));
        let header = HeaderRepr {
            flags: wire::Flags::CHECKSUM,
            seq,
            ..HeaderRepr::new(&get)
        };
        let frame = datagram(header, &get, Some(&a_seal));
        pair.inject(Side::B, &frame).expect("delivered");
    }
    drain(pair.b(), &mut got, &mut events);
    assert_eq!(
        events,
        [format!(
            "error {:?}",
            BtlError::PeerLost(LostReason::ProtocolViolation)
        )]
    );
    assert_eq!(
        btl_core::pool::FragmentClass::ALL
            .iter()
            .map(|&c| pair.b().pools().stats(c).in_use)
            .sum::<u32>(),
        0
    );
}

/// A new start of B's process from the same address, within A's peer
/// timeout: A fails what was outstanding to the old start, once, with
/// `Restarted`, and then talks to the new start under the same endpoint,
/// over a lossy network.
#[test]
fn a_restart_from_the_same_address_is_told_apart_from_a_reconnection() {
    let faults = Faults {
        loss: 100,
        reordering: 100,
        ..Faults::NONE
    };
    let (mut pair, b_at_a, _) = pair(7, faults, 8, 100 * MS);
    // Every send reports its end, so that a failed one shows.
    let send = |pair: &mut Pair, side: Side, data: &[u8], tag: u8| {
        let to = pair.peer(side).expect("introduced");
        let e = pair.engine_mut(side);
        let flags = DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK;
        let d = e
            .prepare_src(to, data, 0, Order(0), flags)
            .expect("descriptor");
        let _ = e.send(to, d, Tag(tag)).expect("send");
    };
    send(&mut pair, Side::A, b"first", 0x80);
    for _ in 0..200 {
        pair.round();
    }
    let (mut got_b, mut ev_b) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got_b, &mut ev_b);
    assert_eq!(got_b, [(0x80, b"first".to_vec())]);
    let (mut got_a, mut ev_a) = (Vec::new(), Vec::new());
    drain(pair.a(), &mut got_a, &mut ev_a);
    assert_eq!(ev_a, ["send Ok(())"]);
    // B dies with a message of A's still unacknowledged, and starts again.
    send(&mut pair, Side::A, b"lost with the old start", 0x81);
    pair.kill(Side::B);
    pair.round();
    let again = engine_of_start(B, 8, 100 * MS, 2);
    pair.restart(Side::B, Box::new(again)).expect("B again");
    send(&mut pair, Side::B, b"hello again", 0x82);
    for _ in 0..2_000 {
        pair.round();
    }
    let (mut got_a, mut ev_a) = (Vec::new(), Vec::new());
    drain(pair.a(), &mut got_a, &mut ev_a);
    let restarted = BtlError::PeerLost(LostReason::Restarted);
    assert_eq!(
        ev_a,
        [
            format!("send {:?}", Err::<(), _>(restarted)),
            format!("error {restarted:?}"),
        ]
    );
    assert_eq!(got_a, [(0x82, b"hello again".to_vec())]);
    send(&mut pair, Side::A, b"welcome", 0x83);
    for _ in 0..2_000 {
        pair.round();
    }
    let (mut got_b, mut ev_b) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got_b, &mut ev_b);
    assert_eq!(got_b, [(0x83, b"welcome".to_vec())], "{ev_b:?}");
    assert_eq!(ev_b, ["send Ok(())"], "B's own send ended once");
    assert_eq!(pair.peer(Side::A), Some(b_at_a));
}

/// Attack 7 of the second hardening pass, keyed: whatever is forged from
/// A's address without A's seal (a CLOSE of every reason, an ACK of
/// packets never sent or with a credit total far ahead, a HELLO of
/// another process, the SEND A would send next, a datagram sealed for
/// another start or with another key) is dropped: B loses nothing, takes
/// nothing, and the link carries on. A CLOSE that A sealed ends it.
#[test]
fn nothing_forged_from_a_keyed_peers_address_changes_its_link() {
    let (mut pair, b_at_a, a_at_b) = pair(12, Faults::NONE, 8, Duration::ZERO);
    let send = |pair: &mut Pair, data: &[u8]| send_from_a(pair, b_at_a, data);
    send(&mut pair, b"first");
    let (mut got, mut events) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got, &mut events);
    assert_eq!(got.len(), 1);

    let close = |reason| PacketRepr::Close(wire::CloseRepr { reason });
    let ack = PacketRepr::Ack(wire::AckRepr { sack: 0 });
    let injected = PacketRepr::Send {
        send: wire::SendRepr { tag: 0x80 },
        payload: b"injected",
    };
    let stranger = PacketRepr::Hello(HelloRepr {
        version_minor: wire::VERSION_MINOR,
        link_index: 0,
        job: 77,
        rank: 1,
        capabilities: wire::Capabilities::JOB_KEY,
        nonce: [0x77; 16],
        max_body: 1 << 16,
        initial_credits: 8,
        epoch: 1,
    });
    let other_start = wire::Seal::derive(
        KEY,
        wire::Start {
            job: A.job,
            rank: A.rank,
            epoch: 2,
        },
        wire::Start {
            job: B.job,
            rank: B.rank,
            epoch: 1,
        },
    );
    let other_key = wire::Seal::derive(
        b"another job",
        wire::Start {
            job: A.job,
            rank: A.rank,
            epoch: 1,
        },
        wire::Start {
            job: B.job,
            rank: B.rank,
            epoch: 1,
        },
    );
    let mut forged = Vec::new();
    for reason in [
        wire::CloseReason::Normal,
        wire::CloseReason::ProtocolError,
        wire::CloseReason::AuthFailed,
        wire::CloseReason::Shutdown,
    ] {
        let c = close(reason);
        forged.push(datagram(HeaderRepr::new(&c), &c, None));
        forged.push(datagram(HeaderRepr::new(&c), &c, Some(&other_start)));
        forged.push(datagram(HeaderRepr::new(&c), &c, Some(&other_key)));
    }
    let beyond = HeaderRepr {
        ack: u64::MAX / 2,
        ..HeaderRepr::new(&ack)
    };
    let credits_ahead = HeaderRepr {
        credits: 1 << 30,
        ..HeaderRepr::new(&ack)
    };
    forged.push(datagram(beyond, &ack, None));
    forged.push(datagram(credits_ahead, &ack, None));
    forged.push(datagram(
        HeaderRepr {
            flags: wire::Flags::CHECKSUM,
            ..credits_ahead
        },
        &ack,
        None,
    ));
    for seq in 2..6 {
        let header = HeaderRepr {
            seq,
            ..HeaderRepr::new(&injected)
        };
        forged.push(datagram(header, &injected, None));
        forged.push(datagram(header, &injected, Some(&other_key)));
    }
    forged.push(datagram(HeaderRepr::new(&stranger), &stranger, None));
    let mut sealed_by_a = datagram(HeaderRepr::new(&ack), &ack, Some(&seal(A, B)));
    let last = sealed_by_a.len() - 1;
    sealed_by_a[last] ^= 1;
    forged.push(sealed_by_a);
    for frame in &forged {
        pair.inject(Side::B, frame).expect("delivered");
        pair.round();
    }
    for _ in 0..200 {
        pair.round();
    }
    drain(pair.b(), &mut got, &mut events);
    assert!(events.is_empty(), "nothing lost: {events:?}");
    assert_eq!(got.len(), 1, "nothing injected was taken: {got:?}");
    assert!(pair.b().is_connected(a_at_b), "the link stays");
    send(&mut pair, b"second");
    drain(pair.b(), &mut got, &mut events);
    assert_eq!(
        got.iter().map(|(_, d)| d.as_slice()).collect::<Vec<_>>(),
        [&b"first"[..], b"second"],
        "and carries on"
    );

    // A CLOSE that A sealed is A's: it ends the link, and B loses A.
    let c = close(wire::CloseReason::ProtocolError);
    let real = datagram(HeaderRepr::new(&c), &c, Some(&seal(A, B)));
    pair.inject(Side::B, &real).expect("delivered");
    drain(pair.b(), &mut got, &mut events);
    assert_eq!(
        events,
        [format!(
            "error {:?}",
            BtlError::PeerLost(LostReason::ProtocolViolation)
        )]
    );
}

/// Attack 7 of the second hardening pass, without a key: a HELLO of A's
/// name with another epoch, forged from A's address, no longer ends the
/// link at once. B asks A first; A answers, so its old start is alive and
/// the claim false: the link stays, nothing fails, and messages go on.
#[test]
fn a_forged_hello_of_another_start_ends_nothing_while_the_peer_answers() {
    let (mut pair, b_at_a, a_at_b) = pair(11, Faults::NONE, 8, Duration::ZERO);
    send_from_a(&mut pair, b_at_a, b"first");
    let (mut got, mut events) = (Vec::new(), Vec::new());
    drain(pair.b(), &mut got, &mut events);
    assert_eq!(got.len(), 1);
    // The forgery: A's name, a new epoch, from A's address.
    let forged = PacketRepr::Hello(HelloRepr {
        version_minor: wire::VERSION_MINOR,
        link_index: 0,
        job: A.job,
        rank: A.rank,
        capabilities: wire::Capabilities::empty(),
        nonce: [0x66; 16],
        max_body: 1 << 16,
        initial_credits: 8,
        epoch: 0xbad,
    });
    let mut frame = [0u8; HEADER_LEN + HelloRepr::LEN];
    wire::emit(&HeaderRepr::new(&forged), &forged, &mut frame).expect("a HELLO");
    pair.inject(Side::B, &frame).expect("delivered");
    for _ in 0..500 {
        pair.round();
    }
    drain(pair.b(), &mut got, &mut events);
    assert!(events.is_empty(), "no loss, no restart: {events:?}");
    assert!(pair.b().is_connected(a_at_b), "the link stays");
    send_from_a(&mut pair, b_at_a, b"second");
    drain(pair.b(), &mut got, &mut events);
    assert_eq!(got.last().map(|(_, d)| d.as_slice()), Some(&b"second"[..]));
}

/// A put into memory the target no longer has (here: a key it never
/// gave) is refused, and over a lossy network the refusal still wins:
/// the acknowledgements of the refused packets never overtake a REJECT
/// that was lost, so no such put ever completes `Ok`. Many puts, several
/// seeds, 20 % loss and reordering.
#[test]
fn a_put_into_memory_that_is_gone_never_succeeds() {
    let faults = Faults {
        loss: 200,
        duplication: 0,
        reordering: 200,
    };
    let mut refused = 0;
    for seed in 0..6u64 {
        let (mut pair, b_at_a, _) = pair(100 + seed, faults, 8, Duration::ZERO);
        let src = pair
            .a()
            .register_mem(vec![0x5au8; 4096], Access::empty())
            .expect("reg");
        let gone = pair
            .b()
            .register_mem(vec![0u8; 4096], Access::REMOTE_WRITE)
            .expect("reg");
        let key = gone.remote_key();
        pair.b().deregister_mem(gone).expect("deregistered");
        let mut events = Vec::new();
        for ctx in 0..10u64 {
            pair.a()
                .put(
                    b_at_a,
                    MemSlice {
                        handle: src,
                        offset: 0,
                        len: 4096,
                    },
                    RemoteSlice {
                        key,
                        offset: 0,
                        len: 4096,
                    },
                    ctx,
                )
                .expect("put");
            let mut done = None;
            for _ in 0..20_000 {
                pair.round();
                let (mut got, mut ev) = (Vec::new(), Vec::new());
                drain(pair.a(), &mut got, &mut ev);
                drain(pair.b(), &mut got, &mut Vec::new());
                if let Some(e) = ev.into_iter().find(|e| e.starts_with("put")) {
                    done = Some(e);
                    break;
                }
            }
            let done = done.expect("the put ends");
            assert!(
                done.contains("Rejected"),
                "seed {seed}, put {ctx}: {done} (events so far: {events:?})"
            );
            events.push(done);
            refused += 1;
        }
    }
    assert_eq!(refused, 60);
}
