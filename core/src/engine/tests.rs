//! Unit tests of the engine's dispatch, through its driver interface at
//! explicit instants: what reaches a link before its handshake, the
//! handshake budget, and handshake timeouts. (Two engines talking are
//! tested over the in-memory pairs of the `btl-tests` crate.)

use std::vec::Vec as StdVec;

use super::testkit::{config, engine};
use super::*;
use crate::time::Duration;
use crate::wire::{AckRepr, Flags, HeaderRepr, PacketRepr, PacketType, emit, parse};
use metrics::Refused;

fn ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Everything the engine has for `link`, written whole.
fn drain<F: Framing>(e: &mut Engine<super::testkit::Boxed, F, 8>, link: LinkId) -> StdVec<u8> {
    let mut out = StdVec::new();
    loop {
        let Some(chunk) = e.poll_transmit(link).map(|t| t.segments.concat()) else {
            return out;
        };
        e.handle_written(link, chunk.len());
        out.extend_from_slice(&chunk);
    }
}

/// The packet types in `bytes`.
fn kinds(mut bytes: &[u8]) -> StdVec<PacketType> {
    let mut out = StdVec::new();
    while !bytes.is_empty() {
        let (header, _, len) = parse(bytes, &Limits::new(1 << 20)).expect("whole frames");
        out.push(header.packet_type);
        bytes = &bytes[len..];
    }
    out
}

/// A well-formed ACK: anything but a HELLO.
fn an_ack() -> StdVec<u8> {
    let packet = PacketRepr::Ack(AckRepr { sack: 0 });
    let header = HeaderRepr {
        flags: Flags::empty(),
        ack: 1,
        ..HeaderRepr::new(&packet)
    };
    let mut buf = [0u8; 64];
    let len = emit(&header, &packet, &mut buf).expect("room");
    buf[..len].to_vec()
}

#[test]
fn a_stranger_whose_first_packet_is_no_hello_loses_its_link() {
    let mut e = engine(config(), Stream);
    let link = e
        .handle_accepted(Source(1), [1; NONCE_LEN], ms(0))
        .expect("a slot");
    assert_eq!(kinds(&drain(&mut e, link)), [PacketType::Hello]);
    let ack = an_ack();
    assert_eq!(e.handle_stream(link, &ack, ms(1)), Ok(ack.len()));
    assert_eq!(kinds(&drain(&mut e, link)), [PacketType::Close]);
    assert_eq!(e.poll_close(), Some(link));
    assert_eq!(e.poll_close(), None, "once");
    let end = e.link_end(link).expect("closing");
    assert_eq!(
        (end.reason, end.by_peer, end.verified),
        (CloseReason::ProtocolError, false, false)
    );
    assert_eq!(e.metrics().refusals.get(Refused::ProtocolError), 1);
    e.handle_closed(link, ms(2));
    assert_eq!(
        e.handle_stream(link, &ack, ms(3)),
        Err(LinkError::UnknownLink),
        "a closed link is not current any more"
    );
}

#[test]
fn over_datagrams_a_packet_before_the_handshake_is_dropped_not_fatal() {
    let mut e = engine(config(), Datagram { mtu: 1500 });
    let link = e
        .handle_accepted(Source(1), [1; NONCE_LEN], ms(0))
        .expect("a slot");
    let _ = drain(&mut e, link);
    assert_eq!(e.handle_datagram(link, &an_ack(), ms(1)), Ok(()));
    assert_eq!(
        drain(&mut e, link),
        [],
        "dropped: it may have overtaken the HELLO"
    );
    assert_eq!(e.poll_close(), None);
    assert_eq!(
        e.handle_datagram(link, b"not a frame", ms(2)),
        Ok(()),
        "garbage in a handshake fails the link"
    );
    assert_eq!(kinds(&drain(&mut e, link)), [PacketType::Close]);
    assert_eq!(e.poll_close(), Some(link));
}

#[test]
fn strangers_beyond_the_budget_of_their_source_push_out_the_oldest_silent_one() {
    let mut e = engine(
        EngineConfig {
            handshake_budget_per_source: 2,
            // The handshake budget alone, not a source's share of the
            // slots.
            source_share: 100,
            ..config()
        },
        Stream,
    );
    let first = e
        .handle_accepted(Source(1), [1; NONCE_LEN], ms(0))
        .expect("a slot");
    let second = e
        .handle_accepted(Source(1), [2; NONCE_LEN], ms(1))
        .expect("a slot");
    // The first has said something: the second is the silent one.
    assert_eq!(e.handle_stream(first, &[0x42], ms(2)), Ok(1));
    let other = e
        .handle_accepted(Source(2), [3; NONCE_LEN], ms(3))
        .expect("a slot");
    assert_eq!(e.poll_close(), None, "another source has its own budget");
    // Once the second has had its time to speak (it may just not have
    // been read yet before that).
    let third = e
        .handle_accepted(Source(1), [4; NONCE_LEN], ms(1) + admission::JUDGED_AFTER)
        .expect("a slot");
    let _ = drain(&mut e, second);
    assert_eq!(e.poll_close(), Some(second));
    assert_eq!(
        e.link_end(second).map(|end| end.reason),
        Some(CloseReason::ResourceExhausted)
    );
    for kept in [first, other, third] {
        assert_eq!(e.link_end(kept), None);
    }
    assert_eq!(e.metrics().refusals.get(Refused::ResourceExhausted), 1);
}

#[test]
fn a_handshake_that_does_not_finish_in_time_fails_its_link() {
    let mut e = engine(config(), Stream);
    let link = e
        .handle_accepted(Source(1), [1; NONCE_LEN], ms(10))
        .expect("a slot");
    let _ = drain(&mut e, link);
    let deadline = ms(10) + Duration::from_millis(500);
    assert_eq!(e.poll_timeout(), Some(deadline));
    e.handle_timeout(deadline - Duration::from_nanos(1));
    assert_eq!(e.link_end(link), None, "not yet");
    e.handle_timeout(deadline);
    assert_eq!(kinds(&drain(&mut e, link)), [PacketType::Close]);
    assert_eq!(
        e.link_end(link).map(|end| end.reason),
        Some(CloseReason::Timeout)
    );
    assert_eq!(e.poll_close(), Some(link));
    assert_eq!(e.metrics().refusals.get(Refused::Timeout), 1);
}

#[test]
fn the_driver_is_asked_to_connect_only_when_the_upper_layer_needs_a_peer() {
    use crate::btl::Btl;
    use crate::endpoint::Reachability;
    let mut e = engine(config(), Stream);
    let procs = [super::testkit::PEER];
    let mut eps = [None];
    let mut words = [0u64];
    e.add_procs(&procs, &mut eps, &mut Reachability::new(&mut words))
        .expect("room");
    let endpoint = eps[0].expect("reached");
    assert_eq!(e.poll_connect(), None, "added is not yet talked to");
    e.shared.now = ms(1);
    send_eight_bytes(&mut e, endpoint);
    assert_eq!(
        e.poll_connect(),
        Some(ConnectRequest {
            endpoint,
            proc: super::testkit::PEER,
            listed_as: super::testkit::PEER,
            link_index: 0
        })
    );
    assert_eq!(e.poll_connect(), None, "once");
    // Refused before it ever opened: lost, and the send fails once.
    e.handle_connect_failed(
        ConnectRequest {
            endpoint,
            proc: super::testkit::PEER,
            listed_as: super::testkit::PEER,
            link_index: 0,
        },
        ConnectFailure::Refused,
        ms(2),
    );
    let mut failed = 0;
    while let Some(event) = e.poll_event() {
        if let crate::btl::Event::SendComplete { result, .. } = event {
            assert_eq!(result, Err(BtlError::PeerLost(LostReason::Refused)));
            failed += 1;
        }
    }
    assert_eq!(failed, 1);
}

/// A HELLO frame from process `rank` of job 7.
fn a_hello(rank: u32) -> StdVec<u8> {
    let packet = PacketRepr::Hello(crate::wire::HelloRepr {
        version_minor: crate::wire::VERSION_MINOR,
        link_index: 0,
        job: 7,
        rank,
        capabilities: crate::wire::Capabilities::empty(),
        nonce: [rank as u8; NONCE_LEN],
        max_body: 1 << 16,
        initial_credits: 4,
        epoch: 1,
    });
    let mut buf = [0u8; 128];
    let len = emit(&HeaderRepr::new(&packet), &packet, &mut buf).expect("room");
    buf[..len].to_vec()
}

#[test]
fn a_strangers_hello_is_answered_with_a_smaller_cookie_and_only_its_echo_admits_it() {
    let mut e = engine(
        EngineConfig {
            cookie_secret: [9; 16],
            ..config()
        },
        Datagram { mtu: 1500 },
    );
    let (here, there) = (&[127, 0, 0, 1, 0, 80][..], &[127, 0, 0, 2, 0, 80][..]);
    let hello = a_hello(3);
    let mut answer = [0u8; COOKIE_FRAME_LEN];
    let Stranger::Answer(n) = e.handle_stranger(here, &hello, ms(10), &mut answer) else {
        panic!("a HELLO is answered");
    };
    assert!(
        2 * n <= hello.len(),
        "{n} bytes for {}: half at most",
        hello.len()
    );
    let cookie = answer[..n].to_vec();
    assert_eq!(kinds(&cookie), [PacketType::Cookie]);
    assert_eq!(e.usage().links, 0, "nothing kept");
    // Its echo, from the address it was made for, within two windows.
    let window = config().handshake_timeout;
    assert_eq!(
        e.handle_stranger(here, &cookie, ms(10) + window, &mut answer),
        Stranger::Admit
    );
    let refused = |r| Stranger::Refuse(r);
    assert_eq!(
        e.handle_stranger(there, &cookie, ms(10), &mut answer),
        refused(Refusal::BadCookie),
        "another address"
    );
    assert_eq!(
        e.handle_stranger(here, &cookie, ms(10) + window + window, &mut answer),
        refused(Refusal::BadCookie),
        "too late"
    );
    assert_eq!(
        e.handle_stranger(here, &an_ack(), ms(10), &mut answer),
        refused(Refusal::NotAHandshake)
    );
    assert!(matches!(
        e.handle_stranger(here, &[0xff; 40], ms(10), &mut answer),
        Stranger::Refuse(Refusal::Garbage(_))
    ));
    let refusals = e.metrics().refusals;
    assert_eq!(refusals.get(Refused::BadCookie), 2);
    assert_eq!(refusals.get(Refused::NotAHandshake), 1);
    assert_eq!(refusals.get(Refused::Garbage), 1);
    assert_eq!(
        refusals.total(),
        4,
        "an admitted or answered one is no refusal"
    );
    let mut other = engine(
        EngineConfig {
            cookie_secret: [8; 16],
            ..config()
        },
        Datagram { mtu: 1500 },
    );
    assert_eq!(
        other.handle_stranger(here, &cookie, ms(10), &mut answer),
        refused(Refusal::BadCookie),
        "another server's secret"
    );
}

#[test]
fn a_client_told_a_cookie_echoes_it_then_says_hello_again() {
    use crate::btl::Btl;
    let mut e = engine(config(), Datagram { mtu: 1500 });
    let mut eps = [None];
    let mut word = [0u64];
    let server = crate::endpoint::ProcName::new(7, 9);
    e.add_procs(
        &[server],
        &mut eps,
        &mut crate::endpoint::Reachability::new(&mut word),
    )
    .expect("added");
    let _ = e.alloc(
        eps[0].expect("reachable"),
        crate::desc::Order(0),
        8,
        crate::desc::DescFlags::empty(),
    );
    let req = e.poll_connect().expect("a connection asked for");
    let link = e
        .handle_connected(req, [1; NONCE_LEN], ms(0))
        .expect("a link");
    let datagrams = |e: &mut Engine<super::testkit::Boxed, Datagram, 8>| {
        let mut out = StdVec::new();
        while let Some(bytes) = e.poll_transmit(link).map(|t| t.segments.concat()) {
            out.push(bytes);
            e.handle_written(link, 0);
        }
        out
    };
    let sent = datagrams(&mut e);
    assert_eq!(sent.len(), 1, "its HELLO");
    let cookie = crate::wire::CookieRepr { cookie: [5; 16] };
    let frame = packet::ControlFrame::cookie(cookie);
    e.handle_datagram(link, frame.as_bytes(), ms(1))
        .expect("its link");
    let after = datagrams(&mut e);
    assert_eq!(after.len(), 2, "the echo, then the HELLO");
    assert_eq!(after[0], frame.as_bytes(), "the cookie as it came");
    assert_eq!(after[1], sent[0], "the same HELLO again");
    // Once the server's HELLO has come, a cookie changes nothing.
    e.handle_datagram(link, &a_hello(9), ms(2))
        .expect("its link");
    while e.poll_transmit(link).is_some() {
        e.handle_written(link, 0);
    }
    e.handle_datagram(link, frame.as_bytes(), ms(3))
        .expect("its link");
    assert!(e.poll_transmit(link).is_none(), "no echo now");
}

/// The server of the tests of peers reached by address alone.
const SERVER: ProcName = ProcName::new(7, 9);

type StreamEngine = Engine<super::testkit::Boxed, Stream, 8>;

/// A client engine (the tests' `ME`) and a server engine (`SERVER`) that
/// gives one source all its slots.
fn client_and_server() -> (StreamEngine, StreamEngine) {
    let server = EngineConfig {
        me: SERVER,
        source_share: 100,
        ..config()
    };
    (engine(config(), Stream), engine(server, Stream))
}

/// Moves what each side of the stream `(a, la)`–`(b, lb)` has written to
/// the other until neither has more, at `now`.
fn pump(a: &mut StreamEngine, la: LinkId, b: &mut StreamEngine, lb: LinkId, now: Instant) {
    loop {
        let (ab, ba) = (drain(a, la), drain(b, lb));
        if ab.is_empty() && ba.is_empty() {
            return;
        }
        let _ = b.handle_stream(lb, &ab, now);
        let _ = a.handle_stream(la, &ba, now);
    }
}

/// Adds `proc` to `e` and queues an 8-byte message to it: the engine then
/// asks for a connection.
fn reach(e: &mut StreamEngine, proc: ProcName, now: Instant) -> EndpointId {
    e.shared.now = now;
    let endpoint = crate::btl::add_proc(e, proc)
        .expect("room")
        .expect("reached");
    send_eight_bytes(e, endpoint);
    endpoint
}

/// Queues an 8-byte message tagged 1 to `endpoint`.
fn send_eight_bytes<F: Framing>(e: &mut Engine<super::testkit::Boxed, F, 8>, endpoint: EndpointId) {
    use crate::btl::Btl;
    let mut desc = e
        .alloc(
            endpoint,
            crate::desc::Order::ANY,
            8,
            crate::desc::DescFlags::empty(),
        )
        .expect("a descriptor");
    desc.set_tag(crate::btl::Tag(1));
    let _ = e.send(endpoint, desc, crate::btl::Tag(1)).expect("queued");
}

/// Connects `client`'s request `req` to `server` and pumps the
/// handshake: the two links.
fn connect(
    client: &mut StreamEngine,
    server: &mut StreamEngine,
    req: ConnectRequest,
    now: Instant,
) -> (LinkId, LinkId) {
    let la = client
        .handle_connected(req, [1; NONCE_LEN], now)
        .expect("a link");
    let lb = server
        .handle_accepted(Source(1), [2; NONCE_LEN], now)
        .expect("a link");
    pump(client, la, server, lb, now);
    (la, lb)
}

/// The events `e` holds, as the upper layer takes them: the messages
/// that came, and every failure (of a send, of a peer).
fn events(e: &mut StreamEngine) -> (usize, StdVec<BtlError>) {
    use crate::btl::{Btl, Event};
    let (mut came, mut failed) = (0, StdVec::new());
    while let Some(event) = e.poll_event() {
        match event {
            Event::SendComplete { result: Err(e), .. } => failed.push(e),
            Event::Received { .. } => came += 1,
            Event::Error(e) => failed.push(e.error),
            _ => {}
        }
    }
    (came, failed)
}

#[test]
fn a_peer_reached_by_address_takes_the_name_its_handshake_tells() {
    let (mut client, mut server) = client_and_server();
    let stand_in = ProcName::unnamed(0);
    let endpoint = reach(&mut client, stand_in, ms(1));
    assert_eq!(
        client.poll_connect().map(|r| (r.proc, r.listed_as)),
        Some((stand_in, stand_in)),
        "its address is looked up under the stand-in"
    );
    let req = ConnectRequest {
        endpoint,
        proc: stand_in,
        listed_as: stand_in,
        link_index: 0,
    };
    let (la, lb) = connect(&mut client, &mut server, req, ms(2));
    assert!(client.is_connected(endpoint));
    assert_eq!(client.proc_of(endpoint), Some(SERVER), "named by its HELLO");
    assert_eq!(events(&mut server), (1, std::vec![]), "the message came");
    // Its link breaks: the reconnection is to the address it was reached
    // by, and is for the process it now is.
    client.handle_closed(la, ms(3));
    server.handle_closed(lb, ms(3));
    client.handle_timeout(ms(200));
    let req = client.poll_connect().expect("reconnects");
    assert_eq!((req.proc, req.listed_as), (SERVER, stand_in));
}

#[test]
fn a_server_reached_by_address_is_waited_for_until_the_peer_timeout() {
    let (mut client, _) = client_and_server();
    let endpoint = reach(&mut client, ProcName::unnamed(0), ms(0));
    let mut at = ms(0);
    let mut tries = 0;
    while let Some(req) = client.poll_connect() {
        tries += 1;
        client.handle_connect_failed(req, ConnectFailure::Refused, at);
        assert_eq!(
            events(&mut client),
            (0, std::vec![]),
            "still waited for at {at:?}"
        );
        let next = client.poll_timeout().expect("a retry");
        assert!(next > at, "after a backoff");
        at = next;
        client.handle_timeout(at);
    }
    assert!(tries >= 5, "tried {tries} times within the peer timeout");
    assert!(
        at >= ms(1000),
        "given up at {at:?}, not before the peer timeout"
    );
    let refused = BtlError::PeerLost(LostReason::Refused);
    assert_eq!(
        events(&mut client),
        (0, std::vec![refused]),
        "then the send fails: nothing listens there; the unnamed peer's loss is no event"
    );
    assert!(!client.is_connected(endpoint));
    assert_eq!(
        client.lost(endpoint),
        Some(LostReason::Refused),
        "but it is on record"
    );
}

#[test]
fn a_process_that_acknowledges_before_it_finalizes_completes_its_peers_last_send() {
    use crate::btl::{Btl, Event};
    for acknowledged in [false, true] {
        let (mut client, mut server) = client_and_server();
        let _ = reach(&mut client, SERVER, ms(1));
        let req = client.poll_connect().expect("a connection asked for");
        let (la, lb) = connect(&mut client, &mut server, req, ms(1));
        assert_eq!(events(&mut server), (1, std::vec![]), "the message came");
        if acknowledged {
            server.acknowledge_now();
            pump(&mut client, la, &mut server, lb, ms(1));
        }
        let _ = server.finalize();
        pump(&mut client, la, &mut server, lb, ms(1));
        let mut sent = StdVec::new();
        while let Some(event) = client.poll_event() {
            if let Event::SendComplete { desc, result, .. } = event {
                sent.push(result);
                if let Some(desc) = desc {
                    let _ = client.free(desc);
                }
            }
        }
        let expected = if acknowledged {
            Ok(())
        } else {
            // Its acknowledgement still waited out its delay: the CLOSE
            // took the message with the peer.
            Err(BtlError::PeerLost(LostReason::Left))
        };
        assert_eq!(
            sent,
            std::vec![expected],
            "acknowledged first: {acknowledged}"
        );
    }
}

#[test]
fn each_side_counts_a_peers_messages_link_flaps_reconnections_and_loss() {
    use crate::btl::Btl;
    let (mut client, mut server) = client_and_server();
    let to_server = reach(&mut client, SERVER, ms(1));
    let req = client.poll_connect().expect("a connection asked for");
    let (la, lb) = connect(&mut client, &mut server, req, ms(1));
    assert_eq!(events(&mut server), (1, std::vec![]));
    let sent = client.peer_metrics().next().expect("the server");
    assert_eq!((sent.endpoint, sent.proc), (to_server, SERVER));
    assert_eq!(sent.state, peer::PeerState::Open);
    let m = sent.metrics;
    assert_eq!((m.messages_sent, m.bytes_sent), (1, 8));
    assert_eq!(
        (m.messages_received, m.link_flaps, m.reconnections),
        (0, 0, 0)
    );
    let got = server.peer_metrics().next().expect("the client").metrics;
    assert_eq!((got.messages_received, got.bytes_received), (1, 8));
    // The server's acknowledgement gives the client a round trip.
    server.acknowledge_now();
    pump(&mut client, la, &mut server, lb, ms(3));
    let m = client.peer_metrics().next().expect("the server").metrics;
    assert_eq!(m.srtt, Some(Duration::from_millis(2)));

    // The connection breaks under both; the client connects again.
    client.handle_closed(la, ms(4));
    server.handle_closed(lb, ms(4));
    let req = client.poll_connect().expect("asked again");
    let _ = connect(&mut client, &mut server, req, ms(5));
    let m = client.peer_metrics().next().expect("the server").metrics;
    assert_eq!((m.link_flaps, m.reconnections), (1, 1));

    // Removed: its counters stay in the module's sums.
    let before = client.metrics().peers;
    let _ = client.del_procs(&[to_server]);
    assert_eq!(client.peer_metrics().count(), 0, "no record is kept");
    let after = client.metrics().peers;
    assert_eq!(after.losses.get(LostReason::Removed), 1);
    assert_eq!(
        (after.messages_sent, after.bytes_sent, after.link_flaps),
        (before.messages_sent, before.bytes_sent, before.link_flaps)
    );
}

#[test]
fn a_process_reached_again_by_address_is_no_second_peer() {
    let (mut client, mut server) = client_and_server();
    let named = reach(&mut client, SERVER, ms(1));
    let req = client.poll_connect().expect("a connection asked for");
    let (la, lb) = connect(&mut client, &mut server, req, ms(1));
    assert_eq!(events(&mut server), (1, std::vec![]));
    let again = reach(&mut client, ProcName::unnamed(0), ms(2));
    let req = client.poll_connect().expect("a connection asked for");
    let (la2, lb2) = connect(&mut client, &mut server, req, ms(2));
    let duplicate = BtlError::PeerLost(LostReason::Duplicate);
    assert_eq!(
        events(&mut client),
        (0, std::vec![duplicate]),
        "the second endpoint's send fails, and says why"
    );
    assert_eq!(client.lost(again), Some(LostReason::Duplicate));
    assert!(!client.is_connected(again));
    assert_eq!(
        client.link_end(la2).map(|e| e.reason),
        Some(CloseReason::Normal)
    );
    // The first endpoint, and the server's peer, carry on.
    client.handle_closed(la2, ms(3));
    server.handle_closed(lb2, ms(3));
    assert!(client.is_connected(named));
    assert_eq!(server.usage().peers, 1);
    let _ = reach(&mut client, SERVER, ms(4));
    pump(&mut client, la, &mut server, lb, ms(4));
    assert_eq!(
        events(&mut server),
        (1, std::vec![]),
        "a message on the first link"
    );
}

#[test]
fn a_connection_closed_as_the_loser_of_a_crossing_waits_for_the_peers_own() {
    // A (the lower name) and B connect to each other at once. B's
    // connection reaches A first and loses the crossing there: A closes
    // it (`Normal`) before B has even accepted A's. B is not to lose A.
    let (mut a, mut b) = client_and_server();
    let a_to_b = reach(&mut a, SERVER, ms(1));
    let b_to_a = reach(&mut b, super::testkit::ME, ms(1));
    let (a_req, b_req) = (a.poll_connect(), b.poll_connect());
    let a_out = a
        .handle_connected(a_req.expect("A connects"), [1; NONCE_LEN], ms(1))
        .expect("a link");
    let b_out = b
        .handle_connected(b_req.expect("B connects"), [2; NONCE_LEN], ms(1))
        .expect("a link");
    let a_in = a
        .handle_accepted(Source(2), [3; NONCE_LEN], ms(1))
        .expect("a link");
    // B's HELLO, then its HELLO_ACK once A's HELLO came: A takes both in
    // one read, so its own HELLO_ACK is still unsent when the crossing
    // ends the link.
    let b_hello = drain(&mut b, b_out);
    let a_hello = drain(&mut a, a_in);
    let _ = b.handle_stream(b_out, &a_hello, ms(2));
    let mut from_b = b_hello;
    from_b.extend(drain(&mut b, b_out));
    let _ = a.handle_stream(a_in, &from_b, ms(2));
    let to_b = drain(&mut a, a_in);
    assert_eq!(kinds(&to_b), [PacketType::Close], "A closes B's connection");
    let _ = b.handle_stream(b_out, &to_b, ms(2));
    assert_eq!(b.lost(b_to_a), None, "B waits for A's own connection");
    // A's connection reaches B: both open, and both messages come.
    let b_in = b
        .handle_accepted(Source(1), [4; NONCE_LEN], ms(3))
        .expect("a link");
    pump(&mut a, a_out, &mut b, b_in, ms(3));
    assert!(a.is_connected(a_to_b) && b.is_connected(b_to_a));
    assert_eq!(events(&mut a), (1, std::vec![]));
    assert_eq!(events(&mut b), (1, std::vec![]));
}

/// Plays a short life of a client: it reaches the server, sends, takes
/// the server's answer, loses its connection, reconnects, and finalizes.
fn a_clients_life(client: &mut StreamEngine, server: &mut StreamEngine) {
    use crate::btl::Btl;
    let to_server = reach(client, SERVER, ms(1));
    let req = client.poll_connect().expect("a connection asked for");
    let (la, lb) = connect(client, server, req, ms(1));
    let _ = events(server);
    let to_client = server.peer_metrics().next().expect("the client").endpoint;
    send_eight_bytes(server, to_client);
    server.acknowledge_now();
    pump(client, la, server, lb, ms(3));
    let _ = events(client);
    client.handle_closed(la, ms(4));
    server.handle_closed(lb, ms(4));
    send_eight_bytes(client, to_server);
    client.handle_timeout(ms(200));
    if let Some(req) = client.poll_connect() {
        let (la, lb) = connect(client, server, req, ms(300));
        pump(client, la, server, lb, ms(301));
        let _ = events(client);
        let _ = client.finalize();
        pump(client, la, server, lb, ms(302));
    }
}

#[test]
fn a_recorded_engine_replays_to_the_same_bytes_and_events() {
    let (mut client, mut server) = client_and_server();
    client.journal.0 = Some(StdVec::new());
    a_clients_life(&mut client, &mut server);
    let tape = client.journal.0.take().expect("recorded");
    let (mut fresh, _) = client_and_server();
    let replayed = replay::replay(&mut fresh, &tape, <[u8]>::to_vec).expect("the same results");
    assert!(replayed.entries > 20, "{replayed:?}");
    assert!(
        replayed.transmits > 3 && replayed.events > 1,
        "{replayed:?}"
    );
    assert_eq!(fresh.metrics(), client.metrics(), "the same counts");

    // One byte of what came in changed: the replay says where it went
    // another way.
    let mut offset = 0;
    let mut bent = tape.clone();
    while offset < tape.len() {
        let (entry, len) = journal::Entry::decode(&tape[offset..]).expect("entries");
        if let journal::Call::Stream { data, .. } = entry.call
            && data.len() > 40
        {
            // A byte of the first frame's header: its type.
            bent[offset + len - 8 - 8 - data.len()] ^= 0xff;
            break;
        }
        offset += len;
    }
    let (mut fresh, _) = client_and_server();
    let err = replay::replay(&mut fresh, &bent, <[u8]>::to_vec).expect_err("another result");
    assert!(matches!(err, replay::ReplayError::Diverged { .. }), "{err}");
}

#[test]
fn an_idle_engine_records_nothing_however_often_it_is_served() {
    use crate::btl::Btl;
    let (mut client, _) = client_and_server();
    client.journal.0 = Some(StdVec::new());
    for t in 1..1000 {
        client.shared.now = ms(t);
        let _ = client.progress();
        let _ = client.poll_event();
        let _ = client.poll_connect();
        let _ = client.poll_close();
        let _ = client.poll_ready_link();
    }
    assert_eq!(client.journal.0.as_ref().map(StdVec::len), Some(0));
}

#[test]
fn a_send_completed_out_of_order_replays_with_its_descriptor() {
    use crate::btl::Btl;
    let (mut client, _) = client_and_server();
    client.journal.0 = Some(StdVec::new());
    let to_server = reach(&mut client, SERVER, ms(1));
    let mut desc = client
        .alloc(
            to_server,
            crate::desc::Order::ANY,
            8,
            crate::desc::DescFlags::empty(),
        )
        .expect("a descriptor");
    desc.set_tag(crate::btl::Tag(2));
    let _ = client
        .send(to_server, desc, crate::btl::Tag(2))
        .expect("queued");
    let _ = client.finalize();
    let Some(crate::btl::Completion::Send {
        desc: Some(desc), ..
    }) = client.poll_completion()
    else {
        panic!("the send failed with its descriptor back");
    };
    let _ = client.free(desc);
    let tape = client.journal.0.take().expect("recorded");
    let (mut fresh, _) = client_and_server();
    let replayed = replay::replay(&mut fresh, &tape, <[u8]>::to_vec).expect("the same");
    assert!(replayed.entries >= 6, "{replayed:?}");
}
