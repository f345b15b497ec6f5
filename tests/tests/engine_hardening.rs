//! What no peer may do to an engine: send past its credits or past the body
//! limit the engine announced, fill its handshake budget, or keep its peer
//! slots after it left; and how fast and by what name an engine gives a
//! peer up. Each test drives the engines by hand over explicit links, at
//! explicit instants, so that it can alter or drop the bytes on the way.

use btl_core::btl::{Access, Btl, BtlError, Event, LostReason, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::HEADER_RESERVE;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, ConnectFailure, LinkError, LinkId, Source, Stream};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::{Duration, Instant};
use btl_core::wire::{self, CloseReason, ControlRepr, HeaderRepr, Limits, PacketRepr, RejectCode};
use btl_std::driver::heap::{Heap, HeapEngine};

type E = HeapEngine<Stream>;

/// Four peers, sixteen links, four registrations.
const CAPACITIES: Capacities = Capacities {
    peers: 4,
    links: 16,
    ops: 64,
    events: 256,
    registrations: 4,
};

const SERVER: ProcName = ProcName::new(9, 0);
const MS: u64 = 1_000_000;

/// The instant `ns` nanoseconds after the start of the clock.
fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn client(rank: u32) -> ProcName {
    ProcName::new(9, rank)
}

/// An engine for `me` whose largest fragment holds `max` bytes, boxed (it
/// is large for a test thread's stack).
fn engine_sized(config: EngineConfig, max: usize) -> Box<E> {
    engine_pooled(config, max, 32)
}

/// As [`engine_sized`], with `count` fragments of each class.
fn engine_pooled(config: EngineConfig, max: usize, count: u32) -> Box<E> {
    engine_in(config, CAPACITIES, max, count)
}

/// As [`engine_pooled`], with the tables `capacities` say.
fn engine_in(config: EngineConfig, capacities: Capacities, max: usize, count: u32) -> Box<E> {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: count,
        max: count,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096 + HEADER_RESERVE),
        max: pool(max),
    };
    Box::new(Heap::engine(config, Stream, capacities, cfg, Instant::ZERO).expect("pools"))
}

fn engine(me: ProcName) -> Box<E> {
    let mut config = EngineConfig::new(me);
    config.epoch = u64::from(me.rank) + 1;
    engine_sized(config, 65536 + HEADER_RESERVE)
}

/// A client engine whose pools let it hold 48 messages of a class
/// unacknowledged (its share with one peer: half the three quarters of
/// each class kept for sends), for tests that send more than [`engine`]'s
/// pools allow before anything is acknowledged.
fn roomy_client(rank: u32) -> Box<E> {
    let mut config = EngineConfig::new(client(rank));
    config.epoch = u64::from(rank) + 1;
    engine_pooled(config, 65536 + HEADER_RESERVE, 128)
}

/// The bytes `e` has for `link`, all of them, as written.
fn take_bytes(e: &mut E, link: LinkId) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let before = out.len();
        match e.poll_transmit(link) {
            Some(t) => t.segments.iter().for_each(|s| out.extend_from_slice(s)),
            None => return out,
        }
        e.handle_written(link, out.len() - before);
    }
}

/// One stream link between two engines, carried by hand.
struct Link {
    /// The opener's end and the acceptor's end.
    opener: LinkId,
    acceptor: LinkId,
    /// Bytes the acceptor has not taken yet (it waits for fragments).
    to_acceptor: Vec<u8>,
    to_opener: Vec<u8>,
}

/// Connects `from` to `to` as a driver would: the connect `from` asks for
/// (a send to `to` makes it ask), accepted by `to` from `source`.
fn connect(from: &mut E, to: &mut E, source: Source, now: u64) -> Link {
    let req = from.poll_connect().expect("a connect request");
    let opener = from
        .handle_connected(req, [1; 16], at(now))
        .expect("a link");
    let acceptor = to
        .handle_accepted(source, [2; 16], at(now))
        .expect("a link");
    Link {
        opener,
        acceptor,
        to_acceptor: Vec::new(),
        to_opener: Vec::new(),
    }
}

/// Carries bytes both ways until nothing moves, passing what goes from
/// the acceptor to the opener through `alter` first.
fn carry(
    opener: &mut E,
    acceptor: &mut E,
    link: &mut Link,
    now: u64,
    mut alter: impl FnMut(&mut Vec<u8>),
) {
    for _ in 0..100 {
        let out = take_bytes(opener, link.opener);
        let mut back = take_bytes(acceptor, link.acceptor);
        alter(&mut back);
        link.to_acceptor.extend(out);
        link.to_opener.extend(back);
        let mut moved = false;
        if !link.to_acceptor.is_empty() {
            let n = acceptor
                .handle_stream(link.acceptor, &link.to_acceptor, at(now))
                .unwrap_or(link.to_acceptor.len());
            moved |= n > 0;
            link.to_acceptor.drain(..n);
        }
        if !link.to_opener.is_empty() {
            let n = opener
                .handle_stream(link.opener, &link.to_opener, at(now))
                .unwrap_or(link.to_opener.len());
            moved |= n > 0;
            link.to_opener.drain(..n);
        }
        if !moved {
            return;
        }
    }
    panic!("the link never went quiet");
}

/// Adds `proc` to `e`: its endpoint.
fn add(e: &mut E, proc: ProcName) -> EndpointId {
    let mut ep = [None];
    let mut word = [0u64];
    e.add_procs(&[proc], &mut ep, &mut Reachability::new(&mut word))
        .expect("added");
    ep[0].expect("reachable")
}

/// Every event of `e`, as text; descriptors handed back are freed.
fn drain(e: &mut E) -> Vec<std::string::String> {
    let mut out = Vec::new();
    let mut returned = Vec::new();
    while let Some(ev) = e.poll_event() {
        out.push(match ev {
            Event::Received(m) => std::format!("recv {}", m.data.len()),
            Event::SendComplete { desc, result, .. } => {
                returned.extend(desc);
                std::format!("send {result:?}")
            }
            Event::Error(err) => std::format!("error {:?}", err.error),
            other => std::format!("{other:?}"),
        });
    }
    for d in returned {
        e.free(d).expect("ours");
    }
    out
}

/// A client that reaches the server and opens a link to it: the client's
/// endpoint of the server and the link. Asking for a descriptor asks for
/// the connection, and queues nothing.
fn open(client_e: &mut E, server: &mut E, source: Source, now: u64) -> (EndpointId, Link) {
    let ep = add(client_e, SERVER);
    let d = client_e
        .alloc(ep, Order(0), 8, DescFlags::empty())
        .expect("a descriptor");
    client_e.free(d).expect("ours");
    let mut link = connect(client_e, server, source, now);
    carry(client_e, server, &mut link, now, |_| {});
    assert!(client_e.is_connected(ep), "the handshake completed");
    (ep, link)
}

#[test]
fn a_message_taken_before_the_handshake_goes_once_it_completes() {
    let mut server = engine(SERVER);
    let mut c = engine(client(1));
    let ep = add(&mut c, SERVER);
    c.sendi(ep, &[], b"hello", Tag(1), Order(0), DescFlags::empty())
        .expect("not open yet: sendi asks for the link and the message waits for it");
    assert!(!c.is_connected(ep));
    let mut link = connect(&mut c, &mut server, Source(1), 0);
    carry(&mut c, &mut server, &mut link, 0, |_| {});
    assert!(c.is_connected(ep), "the handshake completed");
    assert_eq!(
        drain(&mut server),
        ["recv 5"],
        "the first message followed it"
    );
    assert_eq!(drain(&mut c), Vec::<String>::new(), "sendi owes no event");
}

/// The HELLO at the start of `bytes`, changed by `f` and encoded again.
fn alter_hello(bytes: &mut Vec<u8>, f: impl Fn(&mut wire::HelloRepr)) {
    let Ok((_, PacketRepr::Hello(mut hello), used)) = wire::parse(bytes, &Limits::new(4096)) else {
        return;
    };
    f(&mut hello);
    let packet = PacketRepr::Hello(hello);
    let mut frame = [0u8; 128];
    let len = wire::emit(&HeaderRepr::new(&packet), &packet, &mut frame).expect("a HELLO");
    bytes.splice(..used, frame[..len].iter().copied());
}

#[test]
fn a_peer_that_sends_past_its_credits_is_lost_for_breaking_the_protocol() {
    let mut server = engine(SERVER);
    let mut c = roomy_client(1);
    let ep = add(&mut c, SERVER);
    c.sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty())
        .expect("not open yet: the first send asks for a connection and waits for it");
    let mut link = connect(&mut c, &mut server, Source(1), 0);
    // The client is told it has 1,000 credits; the server granted 16.
    let mut first = true;
    carry(&mut c, &mut server, &mut link, 0, |bytes| {
        if first && !bytes.is_empty() {
            alter_hello(bytes, |h| h.initial_credits = 1000);
            first = false;
        }
    });
    assert!(c.is_connected(ep));
    for i in 0..17u8 {
        c.sendi(ep, &[], &[i; 8], Tag(1), Order(0), DescFlags::empty())
            .expect("the client believes it has credit");
    }
    carry(&mut c, &mut server, &mut link, MS, |_| {});
    // 16 SENDs were within the grant; the 17th broke the protocol.
    let events = drain(&mut server);
    assert_eq!(
        events.iter().filter(|e| e.starts_with("recv")).count(),
        16,
        "{events:?}"
    );
    assert!(
        events
            .last()
            .is_some_and(|e| e.contains("PeerLost(ProtocolViolation)")),
        "{events:?}"
    );
    assert_eq!(server.usage().peers, 0, "its slot is back");
    assert!(
        drain(&mut c)
            .iter()
            .any(|e| e.contains("PeerLost(ProtocolViolation)")),
        "the client is told why"
    );
}

#[test]
fn a_sender_within_its_credits_is_never_refused() {
    let mut server = engine(SERVER);
    let mut c = roomy_client(1);
    let (ep, mut link) = open(&mut c, &mut server, Source(1), 0);
    let mut received = 0;
    for round in 0..20u64 {
        for i in 0..40u8 {
            let _ = c.sendi(ep, &[], &[i; 8], Tag(1), Order(0), DescFlags::empty());
        }
        carry(&mut c, &mut server, &mut link, round * MS, |_| {});
        received += drain(&mut server)
            .iter()
            .filter(|e| e.starts_with("recv"))
            .count();
        // Polling gave the credits back; the acknowledgement carries them.
        carry(&mut c, &mut server, &mut link, round * MS + MS / 2, |_| {});
        server.handle_timeout(at(round * MS + MS / 2));
        carry(&mut c, &mut server, &mut link, round * MS + MS / 2, |_| {});
    }
    assert!(received >= 20 * 16, "received {received}");
    assert!(c.is_connected(ep));
    assert_eq!(server.usage().peers, 1);
}

#[test]
fn the_body_limit_announced_is_what_the_pools_hold_and_is_accepted_exactly() {
    // Configured for 1 MiB bodies, but its largest fragment holds 64 KiB
    // and 40 bytes: it announces what it can take, no more.
    let mut config = EngineConfig::new(SERVER);
    config.max_body = 1 << 20;
    let mut server = engine_sized(config, 65536 + HEADER_RESERVE);
    let limit = server.max_body();
    assert_eq!(
        limit,
        (65536 + HEADER_RESERVE + 8) as u64,
        "a SEND's fixed fields and a fragment"
    );
    // A client with larger fragments sends a message of exactly the limit,
    // then one byte more.
    let mut cc = EngineConfig::new(client(1));
    cc.max_body = 1 << 20;
    let mut c = engine_sized(cc, 256 << 10);
    let (ep, mut link) = open(&mut c, &mut server, Source(1), 0);
    let exact = (limit - 8) as usize;
    let desc = c
        .prepare_src(ep, &vec![7u8; exact], 0, Order(0), DescFlags::BTL_OWNERSHIP)
        .expect("a descriptor");
    let _ = c.send(ep, desc, Tag(1)).expect("exactly the limit is sent");
    carry(&mut c, &mut server, &mut link, MS, |_| {});
    let events = drain(&mut server);
    assert_eq!(events, ["recv 65576"], "accepted, not a protocol error");
    let desc = c
        .prepare_src(ep, &vec![7u8; exact + 1], 0, Order(0), DescFlags::empty())
        .expect("a descriptor");
    let refused = c
        .send(ep, desc, Tag(1))
        .expect_err("beyond the peer's limit");
    assert_eq!(
        refused.error,
        BtlError::TooLarge {
            len: exact as u64 + 1,
            max: exact as u64,
            whose: btl_core::btl::Limit::Peer,
        }
    );
    c.free(refused.desc).expect("ours");
    assert!(c.is_connected(ep), "refused here, not by the peer");
}

/// Accepts a connection from `source` at `now`.
fn stranger(e: &mut E, source: u64, now: u64) -> LinkId {
    e.handle_accepted(Source(source), [3; 16], at(now))
        .expect("a link")
}

/// The links `e` closes, with why, once their last bytes are written.
fn closed(e: &mut E, links: &[LinkId]) -> Vec<(LinkId, CloseReason)> {
    for &l in links {
        take_bytes(e, l);
    }
    let mut out = Vec::new();
    while let Some(l) = e.poll_close() {
        out.push((l, e.link_end(l).expect("closing").reason));
        e.handle_closed(l, Instant::ZERO);
    }
    out
}

#[test]
fn strangers_are_held_to_the_handshake_budget_the_silent_and_oldest_first() {
    let mut config = EngineConfig::new(SERVER);
    config.handshake_budget = 4;
    config.handshake_budget_per_source = 2;
    // The handshake budgets alone: no bound on one source's share of the
    // slots (see the test of that).
    config.source_share = 100;
    let mut server = engine_sized(config, 65536 + HEADER_RESERVE);
    // A verified client first: its link is never a stranger's to take.
    let mut c = engine(client(1));
    let (ep, _link) = open(&mut c, &mut server, Source(7), 0);

    // One source past its share: its oldest goes.
    let a1 = stranger(&mut server, 1, MS);
    let a2 = stranger(&mut server, 1, 2 * MS);
    let a3 = stranger(&mut server, 1, 3 * MS);
    assert_eq!(
        closed(&mut server, &[a1, a2, a3]),
        [(a1, CloseReason::ResourceExhausted)]
    );
    // The whole budget: the silent one goes before older ones that spoke.
    server
        .handle_stream(a2, &[1], at(4 * MS))
        .expect("one byte of a frame");
    server
        .handle_stream(a3, &[1], at(4 * MS))
        .expect("one byte of a frame");
    // Of sources holding as many, the one with a silent link gives way,
    // and of its links the silent one, once it has had its time to speak
    // (the budget's first concern is how many each source holds: see
    // `admission`).
    let b1 = stranger(&mut server, 2, 5 * MS);
    let b2 = stranger(&mut server, 2, 6 * MS);
    server
        .handle_stream(b2, &[1], at(6 * MS))
        .expect("one byte of a frame");
    let d1 = stranger(&mut server, 4, 60 * MS);
    assert_eq!(
        closed(&mut server, &[a2, a3, b1, b2, d1]),
        [(b1, CloseReason::ResourceExhausted)],
        "the silent stranger went, not the older ones that spoke"
    );
    assert_eq!(server.usage().handshaking, 4);
    assert!(c.is_connected(ep), "the verified peer is untouched");
    assert_eq!(server.usage().peers, 1);
}

#[test]
fn a_full_server_tells_a_new_client_it_has_no_room() {
    let mut server = engine(SERVER);
    let mut clients: Vec<Box<E>> = (1..=4).map(|r| engine(client(r))).collect();
    let mut links = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        links.push(open(c, &mut server, Source(i as u64), 0));
    }
    assert_eq!(server.usage().peers, 4, "every peer slot taken");
    let mut late = engine(client(5));
    let ep = add(&mut late, SERVER);
    late.sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty())
        .expect("not open yet: it waits for the connection");
    let mut link = connect(&mut late, &mut server, Source(9), MS);
    carry(&mut late, &mut server, &mut link, MS, |_| {});
    assert_eq!(
        closed(&mut server, &[link.acceptor]),
        [(link.acceptor, CloseReason::ResourceExhausted)]
    );
    assert_eq!(
        drain(&mut late),
        ["error PeerLost(NoRoom)"],
        "the client learns the server had no room"
    );
    for (c, (ep, _)) in clients.iter_mut().zip(&links) {
        assert!(c.is_connected(*ep), "the others are served on");
    }
}

#[test]
fn clients_that_leave_give_their_slots_back_and_their_handles_go_stale() {
    let mut server = engine(SERVER);
    let mut seen = Vec::new();
    // Three rounds of four clients, each leaving cleanly.
    for round in 0..3u32 {
        for r in 0..4u32 {
            let mut c = engine(client(1 + round * 4 + r));
            let (ep, mut link) = open(&mut c, &mut server, Source(1), 0);
            c.sendi(ep, &[], b"hi", Tag(1), Order(0), DescFlags::empty())
                .expect("sent");
            carry(&mut c, &mut server, &mut link, MS, |_| {});
            let from = match server.poll_event() {
                Some(Event::Received(m)) => m.from,
                other => panic!("{other:?}"),
            };
            seen.push(from);
            c.finalize();
            carry(&mut c, &mut server, &mut link, 2 * MS, |_| {});
            drain(&mut server);
        }
        assert_eq!(server.usage().peers, 0, "round {round}: every slot back");
    }
    // Twelve clients, four slots: slots were reused, handles never.
    let mut distinct = seen.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 12);
    // A handle of a client that left is refused, although its slot serves
    // another client now.
    let mut c = engine(client(99));
    let (_ep, _link) = open(&mut c, &mut server, Source(1), 3 * MS);
    let now = server.endpoints().next().expect("the new client");
    assert!(seen.iter().any(|&old| old.0 & 0xffff == now.0 & 0xffff));
    for old in seen {
        assert_eq!(
            server.sendi(old, &[], b"x", Tag(1), Order(0), DescFlags::empty()),
            Err(BtlError::Unreachable)
        );
    }
}

#[test]
fn a_forgotten_clients_same_start_is_refused_as_a_lost_peer_is() {
    let mut server = engine(SERVER);
    let mut c = engine(client(1));
    let (ep, link) = open(&mut c, &mut server, Source(1), 0);
    // The server gives the client up (a protocol violation, say) while
    // the client does not hear of it: the link goes without a CLOSE.
    server.handle_closed(link.acceptor, at(MS));
    server.handle_timeout(at(40_000 * MS));
    drain(&mut server);
    assert_eq!(server.usage().peers, 0, "lost, and forgotten");
    c.handle_closed(link.opener, at(40_000 * MS));
    // The same start connects again, as if nothing happened: refused.
    let mut again = connect(&mut c, &mut server, Source(1), 40_001 * MS);
    carry(&mut c, &mut server, &mut again, 40_001 * MS, |_| {});
    // Told it was given up, which is no goodbye: an error, not a
    // `PeerLeft`.
    assert_eq!(
        closed(&mut server, &[again.acceptor]),
        [(again.acceptor, CloseReason::GaveUp)]
    );
    assert!(!c.is_connected(ep));
    assert_eq!(drain(&mut c), ["error PeerLost(Closed)"]);
}

#[test]
fn disconnected_clients_make_room_when_every_slot_is_taken() {
    let mut server = engine(SERVER);
    let mut clients: Vec<Box<E>> = (1..=4).map(|r| engine(client(r))).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let (_, link) = open(c, &mut server, Source(i as u64), i as u64 * MS);
        // Its connection breaks; it may come back within the peer timeout.
        server.handle_closed(link.acceptor, at(10 * MS + i as u64 * MS));
    }
    // The server has no address for them: its reconnects fail.
    while let Some(req) = server.poll_connect() {
        server.handle_connect_failed(req, ConnectFailure::Unreachable, at(20 * MS));
    }
    assert_eq!(server.usage().peers, 4, "waiting for all four");
    let mut late = engine(client(5));
    let (ep, _link) = open(&mut late, &mut server, Source(9), 30 * MS);
    assert!(late.is_connected(ep), "room was made");
    let events = drain(&mut server);
    assert_eq!(events, ["error PeerLost(Closed)"], "one was given up");
    assert_eq!(server.usage().peers, 4);
}

#[test]
fn refused_reconnections_lose_a_peer_by_name_after_the_refusal_timeout() {
    let mut server = engine(SERVER);
    let mut c = engine(client(1));
    let (ep, link) = open(&mut c, &mut server, Source(1), 0);
    // The server dies: the client's connection breaks, and reconnections
    // fail: refused, then once for another reason (no route: not a
    // refusal, so the count starts again), then refused every time.
    let mut now = at(10 * MS);
    c.handle_closed(link.opener, now);
    let mut attempts = 0;
    let mut refused_from = Instant::ZERO;
    loop {
        if let Some(req) = c.poll_connect() {
            attempts += 1;
            let why = if attempts == 2 {
                ConnectFailure::Unreachable
            } else {
                ConnectFailure::Refused
            };
            if attempts == 3 {
                refused_from = now;
            }
            c.handle_connect_failed(req, why, now);
            let events = drain(&mut c);
            if !events.is_empty() {
                assert_eq!(events, ["error PeerLost(Refused)"]);
                break;
            }
        }
        now = c.poll_timeout().expect("a retry, or the loss");
        assert!(now < at(30_000 * MS), "refused, not timed out");
        c.handle_timeout(now);
    }
    assert!(attempts > 3, "retried while refused: {attempts}");
    assert!(
        now >= refused_from + Duration::from_nanos(250 * MS),
        "not before the refusal timeout"
    );
    assert!(
        now < refused_from + Duration::from_nanos(2_250 * MS),
        "within the refusal timeout and one backoff"
    );
    assert_eq!(
        c.sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty()),
        Err(BtlError::PeerLost(LostReason::Refused))
    );
}

#[test]
fn a_first_connection_refused_or_unreachable_loses_the_peer_at_once_by_name() {
    for (why, reason) in [
        (ConnectFailure::Refused, LostReason::Refused),
        (ConnectFailure::Unreachable, LostReason::Unreachable),
    ] {
        let mut c = engine(client(1));
        let ep = add(&mut c, SERVER);
        c.sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty())
            .expect("not open: it waits for the connection");
        let req = c.poll_connect().expect("a connect");
        c.handle_connect_failed(req, why, at(MS));
        assert_eq!(drain(&mut c), [std::format!("error PeerLost({reason:?})")]);
    }
}

#[test]
fn outstanding_counts_what_peers_have_not_acknowledged() {
    let mut server = engine(SERVER);
    let mut c = engine(client(1));
    let (ep, mut link) = open(&mut c, &mut server, Source(1), 0);
    assert_eq!(c.outstanding(), 0);
    c.sendi(ep, &[], b"one", Tag(1), Order(0), DescFlags::empty())
        .expect("sent");
    assert_eq!(c.outstanding(), 1, "sent, not acknowledged");
    carry(&mut c, &mut server, &mut link, MS, |_| {});
    // The acknowledgement waits for its delay, or a packet going back.
    server.handle_timeout(at(2 * MS));
    carry(&mut c, &mut server, &mut link, 2 * MS, |_| {});
    assert_eq!(c.outstanding(), 0, "acknowledged");
}

#[test]
fn every_link_slot_taken_is_refused_to_the_driver() {
    let mut config = EngineConfig::new(SERVER);
    config.handshake_budget = 64;
    config.handshake_budget_per_source = 64;
    let mut server = engine_sized(config, 8192);
    for i in 0..16 {
        stranger(&mut server, i, 0);
    }
    assert_eq!(
        server.handle_accepted(Source(99), [0; 16], Instant::ZERO),
        Err(LinkError::TooManyLinks)
    );
}

#[test]
fn messages_wait_for_room_in_the_event_queue_and_none_is_lost() {
    // Four clients may each have 100 messages at the server at once: more
    // than its event queue holds while the server does not poll.
    let mut config = EngineConfig::new(SERVER);
    config.initial_credits = 100;
    let mut server = engine_pooled(config, 65536 + HEADER_RESERVE, 512);
    let mut clients: Vec<(Box<E>, EndpointId, Link, u32)> = (1..=4)
        .map(|r| {
            let mut config = EngineConfig::new(client(r));
            config.epoch = u64::from(r);
            let mut c = engine_pooled(config, 65536 + HEADER_RESERVE, 512);
            let (ep, link) = open(&mut c, &mut server, Source(u64::from(r)), 0);
            (c, ep, link, 0)
        })
        .collect();
    let mut got: Vec<Vec<u32>> = vec![Vec::new(); 4];
    let mut most = 0;
    for round in 0..200u64 {
        for (c, ep, link, sent) in clients.iter_mut() {
            while *sent < 100
                && c.sendi(
                    *ep,
                    &[],
                    &sent.to_be_bytes(),
                    Tag(1),
                    Order(0),
                    DescFlags::empty(),
                )
                .is_ok()
            {
                *sent += 1;
            }
            carry(c, &mut server, link, MS + round, |_| {});
        }
        most = most.max(server.usage().events);
        // The server polls only now and then.
        if round % 20 == 19 {
            while let Some(ev) = server.poll_event() {
                if let Event::Received(m) = ev {
                    let from = (m.from.0 & 0xffff) as usize;
                    got[from].push(u32::from_be_bytes(m.data.try_into().expect("4 bytes")));
                }
            }
        }
    }
    assert!(most >= 150, "the queue filled up: {most}");
    assert!(most < 256, "room was kept for errors: {most}");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(
            *g,
            (0..100).collect::<Vec<_>>(),
            "client {i}: all, once, in order"
        );
    }
}

/// A SEND frame numbered `seq`, tagged 1, carrying `data`, acknowledging
/// nothing: what a peer that skips numbers writes.
fn send_frame(seq: u64, data: &[u8]) -> Vec<u8> {
    let packet = PacketRepr::Send {
        send: wire::SendRepr { tag: 1 },
        payload: data,
    };
    let header = HeaderRepr {
        seq,
        ..HeaderRepr::new(&packet)
    };
    let mut buf = vec![0; wire::HEADER_LEN + packet.buffer_len() + wire::CHECKSUM_LEN];
    let len = wire::emit(&header, &packet, &mut buf).expect("a SEND");
    buf.truncate(len);
    buf
}

/// Attack 1 of the second hardening pass: peers that number their SENDs
/// from 2 and never send 1 hold every packet behind the gap, each with a
/// receive fragment and an event place. Held to a share of the places,
/// they cannot take them all, and an honest peer's messages still arrive.
#[test]
fn peers_that_never_fill_a_gap_hold_only_their_share_of_the_event_places() {
    // 64 events: 48 places claimable, which three peers' 16 credits each
    // would fill.
    let capacities = Capacities {
        peers: 8,
        events: 64,
        ..CAPACITIES
    };
    let mut config = EngineConfig::new(SERVER);
    config.epoch = 1;
    let mut server = engine_in(config, capacities, 65536 + HEADER_RESERVE, 128);
    let mut attackers = Vec::new();
    for rank in 1..=3 {
        let mut c = engine(client(rank));
        let (_, link) = open(&mut c, &mut server, Source(u64::from(rank)), 0);
        let mut bytes = Vec::new();
        for seq in 2..=17 {
            bytes.extend(send_frame(seq, &[7; 8]));
        }
        let taken = server
            .handle_stream(link.acceptor, &bytes, at(MS))
            .expect("its link");
        attackers.push((c, link, bytes.len() - taken));
    }
    // Shares of 48 places among the peers on record and one more: 24,
    // 16, 12. The first two hold all 16 of theirs, the third 12: the 13th
    // SEND's header is read, and its payload waits with the rest.
    let left: Vec<usize> = attackers.iter().map(|(_, _, left)| *left).collect();
    let frame = send_frame(2, &[7; 8]).len();
    assert_eq!(
        left,
        [0, 0, 3 * frame + 8],
        "the third attacker's stream waits once it holds its share"
    );
    assert!(
        drain(&mut server).is_empty(),
        "nothing delivered past a gap"
    );

    let mut honest = engine(client(4));
    let (ep, mut link) = open(&mut honest, &mut server, Source(4), 2 * MS);
    // The places the attackers left carry the honest peer's messages as
    // fast as its user polls them.
    let (mut sent, mut received) = (0u8, 0);
    for round in 0..16 {
        while sent < 16
            && honest
                .sendi(ep, &[], &[sent; 8], Tag(1), Order(0), DescFlags::empty())
                .is_ok()
        {
            sent += 1;
        }
        let now = (3 + round) * MS;
        carry(&mut honest, &mut server, &mut link, now, |_| {});
        server.handle_timeout(at(now + MS / 2));
        carry(&mut honest, &mut server, &mut link, now + MS / 2, |_| {});
        let events = drain(&mut server);
        assert!(events.iter().all(|e| e.starts_with("recv")), "{events:?}");
        received += events.len();
    }
    assert_eq!(received, 16, "every honest message arrived");
}

/// Attack 2 of the second hardening pass: peers that take every message
/// but acknowledge none keep the fragments of this side's sends. Held to
/// a share of each class, they leave the rest to the others: sends to
/// them are refused, sends to an honest peer go.
#[test]
fn peers_that_acknowledge_nothing_hold_only_their_share_of_the_fragments() {
    // 32 fragments a class: 8 kept for receiving, 24 for sends.
    let mut server = engine(SERVER);
    let mut attackers = Vec::new();
    for rank in 1..=3 {
        let mut c = engine(client(rank));
        let (_, link) = open(&mut c, &mut server, Source(u64::from(rank)), 0);
        attackers.push((c, link));
    }
    let mut honest = engine(client(4));
    let (_, mut link) = open(&mut honest, &mut server, Source(4), MS);
    let honest_ep = server.endpoints().last().expect("the honest client");
    let attacker_eps: Vec<EndpointId> = server.endpoints().take(3).collect();

    // The attackers' bytes are never read: nothing of theirs acknowledges.
    let mut held = Vec::new();
    for &ep in &attacker_eps {
        let mut n = 0;
        while server
            .sendi(ep, &[], &[1; 100], Tag(1), Order(0), DescFlags::empty())
            .is_ok()
        {
            n += 1;
            assert!(n <= 64, "refused at last");
        }
        held.push(n);
    }
    // A share of 24 among 4 peers and one more.
    assert_eq!(held, [4, 4, 4], "each attacker holds its share");

    for i in 0..4u8 {
        server
            .sendi(
                honest_ep,
                &[],
                &[i; 100],
                Tag(1),
                Order(0),
                DescFlags::empty(),
            )
            .expect("the honest peer's share is free");
    }
    carry(&mut honest, &mut server, &mut link, 2 * MS, |_| {});
    let events = drain(&mut honest);
    assert_eq!(
        events.iter().filter(|e| e.starts_with("recv")).count(),
        4,
        "{events:?}"
    );
    // Acknowledged, they go back: the honest peer goes on.
    honest.handle_timeout(at(3 * MS));
    carry(&mut honest, &mut server, &mut link, 3 * MS, |_| {});
    server
        .sendi(
            honest_ep,
            &[],
            &[9; 100],
            Tag(1),
            Order(0),
            DescFlags::empty(),
        )
        .expect("its share came back");
}

/// Attack 9 of the second hardening pass: a peer whose gets are served
/// but which never acknowledges their data keeps an operation slot per
/// get. Held to its share of the slots, it is answered `Busy` beyond it,
/// and another peer's get is still served.
#[test]
fn a_peer_that_never_takes_what_it_gets_holds_only_its_share_of_the_operation_slots() {
    let mut server = engine(SERVER);
    let served = server
        .register_mem(vec![5u8; 64 << 10], Access::REMOTE_READ)
        .expect("a region to get");
    let remote = |i: u64| RemoteSlice {
        key: served.remote_key(),
        offset: i * 1024,
        len: 1024,
    };
    let into = |handle, i: u64| MemSlice {
        handle,
        offset: i * 1024,
        len: 1024,
    };
    // A client the server serves already.
    let mut honest = roomy_client(2);
    let (hep, mut hlink) = open(&mut honest, &mut server, Source(2), 0);

    let mut attacker = roomy_client(1);
    let (ep, link) = open(&mut attacker, &mut server, Source(1), MS);
    let buf = attacker
        .register_mem(vec![0u8; 64 << 10], Access::empty())
        .expect("its buffer");
    for i in 0..64 {
        attacker
            .get(ep, into(buf, i), remote(i), i)
            .expect("the attacker's get");
    }
    // Its GETs reach the server; nothing the server sends reaches it.
    let gets = take_bytes(&mut attacker, link.opener);
    let taken = server
        .handle_stream(link.acceptor, &gets, at(MS))
        .expect("its link");
    assert_eq!(taken, gets.len());
    let answers = take_bytes(&mut server, link.acceptor);
    assert_eq!(
        count_rejects(&answers, RejectCode::Busy),
        64 - 21,
        "served up to its share (64 slots among 2 peers and one more), Busy beyond"
    );
    // The client told Busy does not fail its gets: it asks again after a
    // retransmission timeout.
    attacker
        .handle_stream(link.opener, &answers, at(MS))
        .expect("the server's answers");
    assert!(
        drain(&mut attacker).iter().all(|e| !e.contains("Busy")),
        "no get failed"
    );
    attacker.handle_timeout(at(MS + 500 * MS));
    let again = take_bytes(&mut attacker, link.opener);
    assert_eq!(count_packets(&again, wire::PacketType::Get), 64 - 21);

    let hbuf = honest
        .register_mem(vec![0u8; 1024], Access::empty())
        .expect("its buffer");
    honest
        .get(hep, into(hbuf, 0), remote(0), 99)
        .expect("the honest get");
    for round in 0..4 {
        let now = (3 + round) * MS;
        carry(&mut honest, &mut server, &mut hlink, now, |_| {});
        server.handle_timeout(at(now + MS / 2));
        honest.handle_timeout(at(now + MS / 2));
    }
    assert_eq!(
        drain(&mut honest),
        ["GetComplete { op: OpId(1), ctx: 99, result: Ok(()) }"]
    );
    assert_eq!(honest.region(hbuf).expect("its buffer"), &[5u8; 1024][..]);
}

/// How many packets of `kind` the frames in `bytes` hold.
fn count_packets(mut bytes: &[u8], kind: wire::PacketType) -> usize {
    let mut n = 0;
    while let Ok((header, _, used)) = wire::parse(bytes, &Limits::new(1 << 20)) {
        n += usize::from(header.packet_type == kind);
        bytes = &bytes[used..];
    }
    n
}

/// How many REJECTs with `code` the frames in `bytes` hold.
fn count_rejects(mut bytes: &[u8], code: RejectCode) -> usize {
    let mut n = 0;
    while let Ok((_, packet, used)) = wire::parse(bytes, &Limits::new(1 << 20)) {
        if let PacketRepr::Control(ControlRepr::Reject(r)) = packet
            && r.code == code
        {
            n += 1;
        }
        bytes = &bytes[used..];
    }
    n
}

/// Attack 3 of the second hardening pass, as the engine sees it: a peer
/// that sets the CHECKSUM flag the handshake did not agree on would have
/// this side sum every byte it streams. It breaks the protocol, and is
/// lost at its first such frame.
#[test]
fn a_trailer_the_handshake_did_not_agree_on_loses_the_peer() {
    let mut server = engine(SERVER);
    let mut c = engine(client(1));
    let (_, link) = open(&mut c, &mut server, Source(1), 0);
    let payload = [3u8; 4096];
    let packet = PacketRepr::Send {
        send: wire::SendRepr { tag: 1 },
        payload: &payload,
    };
    let header = HeaderRepr {
        seq: 1,
        flags: wire::Flags::CHECKSUM,
        ..HeaderRepr::new(&packet)
    };
    let mut frame = vec![0; wire::HEADER_LEN + packet.buffer_len() + wire::CHECKSUM_LEN];
    let len = wire::emit(&header, &packet, &mut frame).expect("a SEND");
    frame.truncate(len);
    server
        .handle_stream(link.acceptor, &frame, at(MS))
        .expect("its link");
    let events = drain(&mut server);
    assert_eq!(events, ["error PeerLost(ProtocolViolation)"], "{events:?}");
    assert_eq!(
        closed(&mut server, &[link.acceptor]),
        [(link.acceptor, CloseReason::ProtocolError)]
    );
}

/// Attack 5 of the second hardening pass: without a job key, handshakes
/// under one name after another from one address would take every peer
/// slot, and connections every link slot. One source holds at most its
/// share of each (half, here): a client from elsewhere still finds room. With a key, peers proved they belong to the job, and none is
/// held to it.
#[test]
fn one_address_holds_only_its_share_of_the_peer_and_link_slots_without_a_key() {
    assert_eq!(
        EngineConfig::new(SERVER).source_share,
        10,
        "a tenth by default"
    );
    let mut config = EngineConfig::new(SERVER);
    config.epoch = 1;
    config.source_share = 50;
    let mut server = engine_sized(config, 65536 + HEADER_RESERVE);
    let mut crowd: Vec<(Box<E>, EndpointId, Link)> = Vec::new();
    for rank in 1..=2 {
        let mut c = engine(client(rank));
        let (ep, link) = open(&mut c, &mut server, Source(1), 0);
        crowd.push((c, ep, link));
    }
    // A third process from the same address: half of 4 peer slots are its.
    let mut third = engine(client(3));
    let ep = add(&mut third, SERVER);
    third
        .sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty())
        .expect("not open yet");
    let mut link = connect(&mut third, &mut server, Source(1), MS);
    carry(&mut third, &mut server, &mut link, MS, |_| {});
    assert_eq!(
        closed(&mut server, &[link.acceptor]),
        [(link.acceptor, CloseReason::ResourceExhausted)]
    );
    assert_eq!(drain(&mut third), ["error PeerLost(NoRoom)"]);
    server.handle_closed(link.acceptor, at(MS));

    // A client from another address is served.
    let mut other = engine(client(4));
    let (oep, _) = open(&mut other, &mut server, Source(2), 2 * MS);
    assert!(other.is_connected(oep));
    assert_eq!(server.usage().peers, 3);

    // Links: half of 16 from one address, in any state.
    let mut held = 0;
    while server
        .handle_accepted(Source(1), [7; 16], at(3 * MS))
        .is_ok()
    {
        held += 1;
        assert!(held <= 16, "refused at last");
    }
    assert_eq!(held, 8 - 2, "its two open peers' links count");
    assert_eq!(
        server.handle_accepted(Source(1), [7; 16], at(3 * MS)),
        Err(LinkError::SourceFull)
    );
    assert!(
        server
            .handle_accepted(Source(3), [7; 16], at(3 * MS))
            .is_ok(),
        "another address still finds a slot"
    );

    // With a job key, no share: three peers from one address.
    let keyed = |me: ProcName| {
        let mut config = EngineConfig::new(me);
        config.epoch = u64::from(me.rank) + 1;
        config.job_key = Some(heapless::Vec::from_slice(b"job").expect("short"));
        engine_sized(config, 65536 + HEADER_RESERVE)
    };
    let mut server = keyed(SERVER);
    for rank in 1..=3 {
        let mut c = keyed(client(rank));
        let (ep, _) = open(&mut c, &mut server, Source(1), 0);
        assert!(c.is_connected(ep), "rank {rank}");
    }
    assert_eq!(server.usage().peers, 3);
}

/// Attack 10 of the second hardening pass: a peer that asks faster than it
/// takes the answers (a flood of GETs, or KEYs, whose answers it never
/// acknowledges) breaks the protocol, and is told so: its link closes
/// with `ProtocolError`, not as a shutdown, and the log says why.
#[test]
fn a_peer_that_never_takes_its_answers_is_told_it_broke_the_protocol() {
    let mut server = engine(SERVER);
    let mut c = roomy_client(1);
    let (_, link) = open(&mut c, &mut server, Source(1), 0);
    let mut frames = Vec::new();
    for seq in 1..=200u64 {
        let get = PacketRepr::Control(ControlRepr::Get(wire::GetRepr {
            xfer_id: seq,
            src_handle: 0xdead,
            src_offset: 0,
            len: 1,
            target_job: SERVER.job,
            target_rank: 1,
            dst_handle: 0,
            dst_offset: 0,
        }));
        let header = HeaderRepr {
            seq,
            ..HeaderRepr::new(&get)
        };
        let mut frame = [0u8; wire::HEADER_LEN + wire::GetRepr::LEN];
        let len = wire::emit(&header, &get, &mut frame).expect("a GET");
        frames.extend_from_slice(&frame[..len]);
    }
    server
        .handle_stream(link.acceptor, &frames, at(MS))
        .expect("its link");
    assert_eq!(drain(&mut server), ["error PeerLost(ProtocolViolation)"]);
    let end = server.link_end(link.acceptor).expect("closing");
    assert_eq!(
        (end.reason, end.lost),
        (
            CloseReason::ProtocolError,
            Some(LostReason::ProtocolViolation)
        )
    );
}

/// Attack 8 of the second hardening pass, without a key: a stranger
/// connects under a live client's name with another epoch, as if the
/// client had started again. The server asks the client first; it
/// answers, so the claim is false: the stranger is refused
/// (`AuthFailed`), and the client is served on as if nothing happened.
#[test]
fn a_stranger_under_a_live_clients_name_displaces_nobody() {
    let mut server = engine(SERVER);
    let mut c = engine(client(1));
    let (ep, mut link) = open(&mut c, &mut server, Source(1), 0);
    let mut config = EngineConfig::new(client(1));
    config.epoch = 0xbad;
    let mut impostor = engine_sized(config, 65536 + HEADER_RESERVE);
    let server_at_impostor = add(&mut impostor, SERVER);
    let d = impostor
        .alloc(server_at_impostor, Order(0), 8, DescFlags::empty())
        .expect("a descriptor");
    impostor.free(d).expect("ours");
    let mut fake = connect(&mut impostor, &mut server, Source(2), MS);
    carry(&mut impostor, &mut server, &mut fake, MS, |_| {});
    // The server asked the real client; it answers.
    carry(&mut c, &mut server, &mut link, 2 * MS, |_| {});
    server.handle_timeout(at(MS + 500 * MS));
    carry(&mut impostor, &mut server, &mut fake, 501 * MS, |_| {});
    assert_eq!(
        closed(&mut server, &[fake.acceptor]),
        [(fake.acceptor, CloseReason::AuthFailed)]
    );
    assert!(
        drain(&mut server).is_empty(),
        "the client was not lost, nor restarted"
    );
    c.sendi(ep, &[], b"still here", Tag(1), Order(0), DescFlags::empty())
        .expect("sent");
    carry(&mut c, &mut server, &mut link, 600 * MS, |_| {});
    assert_eq!(drain(&mut server), ["recv 10"]);
    assert!(c.is_connected(ep));
}
