//! Unit tests of the link, at explicit instants: the handshake between two
//! links, its deadlines and repetitions, and how a link ends.

use std::vec::Vec as StdVec;

use super::*;
use crate::engine::framing::{Datagram, Stream};
use crate::engine::peer::Peer;
use crate::engine::shared::Shared;
use crate::engine::testkit::{Boxed, ME, PEER, config, endpoint, shared};
use crate::wire::NONCE_LEN;
use crate::wire::{PacketRepr, parse};

type L = Link<8>;

fn ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn local(me: ProcName, nonce: u8, epoch: u64) -> LocalHello {
    LocalHello {
        me,
        link_index: 0,
        nonce: [nonce; NONCE_LEN],
        checksum: false,
        keyed: false,
        max_body: 1 << 20,
        initial_credits: 4,
        epoch,
    }
}

fn limits() -> Limits {
    Limits::new(1 << 20)
}

/// A link this side opened to `PEER` at `now`.
fn outbound(now: Instant) -> L {
    L::new(
        &local(ME, 1, 7),
        Some(PEER),
        Some(endpoint(0)),
        None,
        limits(),
        now,
        0,
    )
}

/// A link `PEER` opened to this side at `now`.
fn inbound(now: Instant, epoch: u64) -> L {
    L::new(&local(PEER, 2, epoch), None, None, None, limits(), now, 1)
}

/// Everything the link has to write, written whole, frame by frame.
fn written(l: &mut L, sh: &Shared<Boxed>) -> StdVec<StdVec<u8>> {
    let mut bytes = StdVec::new();
    while let Some(chunk) = l
        .outbox()
        .poll_transmit::<Stream, Peer<8>>(None, sh.pools.view(), &sh.regs)
        .map(|s| s.concat())
    {
        bytes.extend_from_slice(&chunk);
        let _ = l.outbox().handle_written::<Stream, Peer<8>>(
            chunk.len(),
            None,
            sh.pools.view(),
            &sh.regs,
        );
    }
    let mut frames = StdVec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (_, _, len) = parse(rest, &limits()).expect("whole frames");
        frames.push(rest[..len].to_vec());
        rest = &rest[len..];
    }
    frames
}

/// Hands `frames` to `to` as its reader would.
fn deliver<F: Framing>(frames: &[StdVec<u8>], to: &mut L) -> StdVec<Handshaken> {
    let mut out = StdVec::new();
    for f in frames {
        match parse(f, &limits()).expect("a frame").1 {
            PacketRepr::Hello(h) => out.push(to.on_hello::<F>(h, None).expect("a good HELLO")),
            PacketRepr::HelloAck(a) => to.on_hello_ack::<F>(&a, None).expect("a good answer"),
            other => panic!("not a handshake packet: {other:?}"),
        }
    }
    out
}

fn kinds(frames: &[StdVec<u8>]) -> StdVec<crate::wire::PacketType> {
    frames
        .iter()
        .map(|f| parse(f, &limits()).expect("a frame").0.packet_type)
        .collect()
}

#[test]
fn two_links_handshake_and_open() {
    use crate::wire::PacketType::{Hello, HelloAck};
    let sh = shared(config());
    let mut a = outbound(ms(0));
    let mut b = inbound(ms(0), 9);
    assert!(a.is_handshaking() && b.is_handshaking());
    a.queue_handshake(None);
    b.queue_handshake(None);
    let from_a = written(&mut a, &sh);
    assert_eq!(kinds(&from_a), [Hello]);
    let from_b = written(&mut b, &sh);
    assert_eq!(kinds(&from_b), [Hello]);
    deliver::<Stream>(&from_a, &mut b);
    deliver::<Stream>(&from_b, &mut a);
    let acks_a = written(&mut a, &sh);
    let acks_b = written(&mut b, &sh);
    assert_eq!(kinds(&acks_a), [HelloAck]);
    assert_eq!(kinds(&acks_b), [HelloAck]);
    deliver::<Stream>(&acks_a, &mut b);
    deliver::<Stream>(&acks_b, &mut a);
    assert!(a.handshake().is_complete() && b.handshake().is_complete());
    assert_eq!(a.handshake().peer().map(|h| h.epoch), Some(9));
    a.open(endpoint(0), 0, None);
    assert!(a.is_open() && !a.is_handshaking());
    assert_eq!((a.peer(), a.index()), (Some(endpoint(0)), 0));
}

#[test]
fn a_handshake_times_out_and_over_datagrams_its_packets_go_again() {
    let sh = shared(config());
    let cfg = &sh.config;
    let mut a = outbound(ms(10));
    let t = a.timers(&Stream, cfg);
    assert!(!t.is_due(LinkTimer::Handshake, ms(509)));
    assert!(
        t.is_due(LinkTimer::Handshake, ms(510)),
        "the handshake timeout"
    );
    assert_eq!(t.due(Instant::NEVER).count(), 1, "a stream repeats nothing");
    let repeat_at = ms(10) + cfg.rtt.normalized().initial_rto;
    let t = a.timers(&Datagram { mtu: 1500 }, cfg);
    assert!(t.is_due(LinkTimer::HelloRepeat, repeat_at));
    assert!(!t.is_due(LinkTimer::HelloRepeat, ms(10)));
    a.queue_handshake(None);
    let first = written(&mut a, &sh);
    a.repeat_hello(repeat_at, None);
    assert_eq!(written(&mut a, &sh), first, "the same HELLO again");
    let t = a.timers(&Datagram { mtu: 1500 }, cfg);
    assert!(
        !t.is_due(LinkTimer::HelloRepeat, repeat_at),
        "the next repetition waits again"
    );
    // Twice as long each time, up to the largest retransmission timeout:
    // the wait before each repetition, in initial timeouts.
    let first = cfg.rtt.normalized().initial_rto;
    let dg = Datagram { mtu: 1500 };
    let mut at = repeat_at;
    let mut waits = std::vec::Vec::new();
    for _ in 0..8 {
        let timers = a.timers(&dg, cfg);
        let n = (1..=64u64)
            .find(|&n| timers.is_due(LinkTimer::HelloRepeat, at + first.saturating_mul(n)))
            .expect("a repetition to come");
        waits.push(n);
        at += first.saturating_mul(n);
        a.repeat_hello(at, None);
    }
    let cap = cfg.rtt.normalized().max_rto.as_millis() / first.as_millis();
    let doubling = [2u64, 4, 8, 16, 32, 64, 128, 256].map(|w| w.min(cap));
    assert_eq!(waits, doubling);
    a.open(endpoint(0), 0, None);
    assert_eq!(
        a.timers(&Datagram { mtu: 1500 }, cfg).earliest(),
        None,
        "an open link has no deadline"
    );
}

#[test]
fn over_datagrams_a_repeated_hello_is_answered_again_and_another_start_is_noticed() {
    let sh = shared(config());
    let mut a = outbound(ms(0));
    let mut b = inbound(ms(0), 9);
    b.queue_handshake(None);
    let hello_b = written(&mut b, &sh);
    a.queue_handshake(None);
    let _ = written(&mut a, &sh);
    assert_eq!(
        deliver::<Datagram>(&hello_b, &mut a),
        [Handshaken::Continue]
    );
    let answer = written(&mut a, &sh);
    assert_eq!(
        deliver::<Datagram>(&hello_b, &mut a),
        [Handshaken::Continue]
    );
    assert_eq!(
        written(&mut a, &sh),
        answer,
        "answered again: the first was lost"
    );
    let mut restarted = inbound(ms(0), 10);
    restarted.queue_handshake(None);
    let hello_new = written(&mut restarted, &sh);
    assert_eq!(
        deliver::<Datagram>(&hello_new, &mut a),
        [Handshaken::PeerRestarted]
    );
}

#[test]
fn a_failed_link_says_why_and_closes_once_written() {
    let sh = shared(config());
    let mut a = outbound(ms(0));
    a.queue_handshake(None);
    let _ = written(&mut a, &sh);
    assert!(a.fail(CloseReason::ProtocolError).is_some());
    assert!(a.fail(CloseReason::Timeout).is_none(), "once");
    assert_eq!(a.state(), LinkState::Closing);
    assert!(a.is_closing());
    assert!(!a.poll_close(), "its CLOSE is still to go");
    let close = written(&mut a, &sh);
    assert_eq!(
        parse(&close[0], &limits()).expect("a frame").1,
        PacketRepr::Close(CloseRepr {
            reason: CloseReason::ProtocolError
        })
    );
    assert!(a.poll_close());
    assert!(!a.poll_close() && !a.is_closing(), "asked once");
    let end = a.link_end().expect("ended");
    assert_eq!(
        (end.reason, end.by_peer, end.verified),
        (CloseReason::ProtocolError, false, false)
    );
}

#[test]
fn a_link_failed_mid_frame_closes_without_a_close() {
    let sh = shared(config());
    let mut a = outbound(ms(0));
    a.queue_handshake(None);
    let part = a
        .outbox()
        .poll_transmit::<Stream, Peer<8>>(None, sh.pools.view(), &sh.regs)
        .expect("the HELLO")
        .concat();
    let _ = a
        .outbox()
        .handle_written::<Stream, Peer<8>>(3, None, sh.pools.view(), &sh.regs);
    assert!(part.len() > 3 && a.outbox().is_mid_frame());
    // A CLOSE now would be read as the rest of the HELLO.
    assert!(a.fail(CloseReason::Shutdown).is_some());
    assert!(written(&mut a, &sh).is_empty());
    assert!(a.poll_close(), "closed at once");
}

#[test]
fn an_ended_link_hands_back_the_fragment_it_was_filling() {
    let mut sh = shared(config());
    let mut a = outbound(ms(0));
    let frag = sh.take_receive_fragment(100).expect("a fragment");
    let (_, receiving) = a.reader_mut();
    *receiving = Receiving::Send {
        tag: Tag(1),
        seq: 1,
        frag,
        have: 10,
        len: 100,
    };
    let dropped = a.end(CloseReason::Normal, true);
    let frag = dropped.fragment.expect("the fragment comes back");
    sh.drop_received(frag);
    assert_eq!((dropped.unpinned, dropped.event_place), (None, false));
    let end = a.link_end().expect("ended");
    assert!(end.by_peer);
    assert!(a.poll_close(), "nothing to write: closed at once");
}
