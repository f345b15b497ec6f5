//! Unit tests of the peer, at explicit instants: its life from idle to
//! open and lost, credits and acknowledgements, reconnection and the
//! links that carry it, probes, and the receive path.

use std::vec::Vec as StdVec;

use super::*;
use crate::btl::Tag;
use crate::engine::framing::{Datagram, Stream};
use crate::engine::testkit::{
    Boxed, PEER, Seen, config, drain_events, endpoint, hello, link, message, opened, shared,
};
use crate::wire::{DoneRepr, NotifyRepr, PacketType};

type P = Peer<8>;

fn ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A peer open on link 0 at `now`, granted `credits`, reached by this
/// side with `config`.
fn open_peer(shared: &mut Shared<Boxed>, credits: u32, now: Instant) -> P {
    let mut p = P::new(endpoint(0), PEER, shared.config.rtt);
    p.reach(now).expect("reachable");
    assert_eq!(p.poll_connect(), Some(0));
    p.link_connecting(0, link(0));
    p.open_link(opened(0, 0, true, hello(7, credits)), &shared.config, now);
    p
}

/// The packets the peer puts on its links now, stamped: (seq, link).
fn packets(p: &mut P, shared: &mut Shared<Boxed>) -> StdVec<(u64, Option<LinkId>)> {
    let mut out = StdVec::new();
    while let Some((seq, l)) = p.poll_packet(shared) {
        p.stamp(seq, shared);
        out.push((seq, l));
    }
    out
}

fn ack(cumulative: u64) -> Ack {
    Ack {
        cumulative,
        sack: 0,
    }
}

/// A SEND from the peer numbered `seq`, tagged `tag`, acknowledging
/// nothing.
fn incoming_send(shared: &mut Shared<Boxed>, seq: u64, tag: u8) -> (HeaderRepr, Receiving) {
    let frag = shared.take_receive_fragment(8).expect("a fragment");
    let header = HeaderRepr {
        packet_type: PacketType::Send,
        flags: Flags::empty(),
        credits: 0,
        seq,
        ack: 0,
        body_len: 8 + SendRepr::LEN as u64,
    };
    let receiving = Receiving::Send {
        tag: Tag(tag),
        seq,
        frag,
        have: 8,
        len: 8,
    };
    (header, receiving)
}

#[test]
fn reaching_an_idle_peer_asks_for_its_first_link_and_the_handshake_opens_it() {
    let mut sh = shared(EngineConfig {
        links: 2,
        ..config()
    });
    let mut p = P::new(endpoint(0), PEER, sh.config.rtt);
    assert_eq!(p.state(), PeerState::Idle);
    assert_eq!(p.poll_connect(), None, "nobody asked for it yet");
    p.reach(ms(3)).expect("reachable");
    assert_eq!(
        p.state(),
        PeerState::Connecting {
            since: ms(3),
            retry: None
        }
    );
    assert_eq!(p.poll_connect(), Some(0));
    assert_eq!(p.poll_connect(), None, "asked once");
    p.link_connecting(0, link(5));
    assert_eq!(p.link_at(0), Some(link(5)));
    assert!(
        !p.is_open() && p.first_link().is_none(),
        "not before its handshake"
    );
    p.open_link(opened(0, 5, true, hello(7, 4)), &sh.config, ms(9));
    assert!(p.is_open() && p.was_open());
    assert_eq!((p.epoch(), p.first_link()), (Some(7), Some(link(5))));
    assert_eq!(
        p.poll_connect(),
        Some(1),
        "the side that connected asks for the peer's other links"
    );
    // The peer timeout runs only while something is owed (or with
    // keepalives, as here, always), from the last word heard.
    let t = p.timers(&Stream, &sh.config);
    assert!(!t.is_due(PeerTimer::Lost, ms(1008)));
    assert!(t.is_due(PeerTimer::Lost, ms(1009)));
    p.on_timeout(&Stream, {
        sh.now = ms(1009);
        &mut sh
    });
    assert_eq!(p.lost(), Some(LostReason::Timeout));
}

#[test]
fn sends_go_as_credits_allow_and_complete_once_acknowledged() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 2, ms(0));
    for tag in 1..=3 {
        let desc = message(&mut sh, 10, tag);
        p.queue_send(desc).expect("room in the queue");
    }
    assert!(!p.takes_sendi(), "messages wait ahead");
    let sent = packets(&mut p, &mut sh);
    assert_eq!(
        sent,
        [(1, Some(link(0))), (2, Some(link(0)))],
        "two credits: two messages"
    );
    assert_eq!(p.outstanding(), 3, "two in flight, one queued");
    // The peer acknowledges both and gives one credit back.
    sh.now = ms(5);
    p.on_ack(ack(3), 1, &Stream, &mut sh).expect("a valid ack");
    assert_eq!(
        drain_events(&mut sh),
        [Seen::Sent(1, Ok(())), Seen::Sent(2, Ok(()))]
    );
    assert_eq!(packets(&mut p, &mut sh), [(3, Some(link(0)))]);
    assert!(
        p.on_ack(ack(9), 1, &Stream, &mut sh).is_err(),
        "an ack of what never went breaks the protocol"
    );
}

#[test]
fn a_lost_peer_fails_everything_to_it_once() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 1, ms(0));
    for tag in 1..=2 {
        let desc = message(&mut sh, 10, tag);
        p.queue_send(desc).expect("room");
    }
    assert_eq!(packets(&mut p, &mut sh).len(), 1);
    p.lose(LostReason::Timeout, &mut sh);
    let lost = Err(BtlError::PeerLost(LostReason::Timeout));
    assert_eq!(
        drain_events(&mut sh),
        [
            Seen::Sent(1, lost),
            Seen::Sent(2, lost),
            Seen::Error(BtlError::PeerLost(LostReason::Timeout))
        ],
        "the retained and the queued send, then the lost peer"
    );
    p.lose(LostReason::Closed, &mut sh);
    assert_eq!(drain_events(&mut sh), [], "once");
    assert_eq!(
        p.lost(),
        Some(LostReason::Timeout),
        "the first reason stays"
    );
    assert_eq!(p.reach(ms(1)), Err(BtlError::PeerLost(LostReason::Timeout)));
    assert_eq!(p.take_links().collect::<StdVec<_>>(), [link(0)]);
    assert_eq!(p.outstanding(), 0);
}

#[test]
fn a_broken_link_is_reconnected_and_what_was_unacknowledged_goes_again() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    for tag in 1..=2 {
        let desc = message(&mut sh, 10, tag);
        p.queue_send(desc).expect("room");
    }
    assert_eq!(packets(&mut p, &mut sh).len(), 2);
    sh.now = ms(20);
    assert_eq!(p.forget_link(link(0)), Some(0));
    p.link_gone(0, &mut sh);
    assert_eq!(
        p.state(),
        PeerState::Connecting {
            since: ms(0),
            retry: None
        },
        "the peer timeout runs from the last word heard"
    );
    assert_eq!(packets(&mut p, &mut sh), [], "no link carries them now");
    assert_eq!(p.poll_connect(), Some(0));
    sh.now = ms(30);
    p.open_link(opened(0, 1, true, hello(7, 4)), &sh.config, ms(30));
    assert!(
        p.poll_ack(&Stream, &sh.config, true, ms(30)).is_some(),
        "a reconnection tells the peer at once what arrived"
    );
    assert_eq!(
        packets(&mut p, &mut sh),
        [(1, Some(link(1))), (2, Some(link(1)))],
        "both go again on the new link"
    );
}

#[test]
fn reconnections_refused_for_the_refusal_timeout_give_the_peer_up() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    p.forget_link(link(0));
    p.link_gone(0, &mut sh);
    assert_eq!(p.poll_connect(), Some(0));
    sh.now = ms(10);
    p.connect_failed(0, ConnectFailure::Refused, &mut sh);
    let PeerState::Connecting {
        retry: Some(retry), ..
    } = p.state()
    else {
        panic!("waits to try again: {:?}", p.state());
    };
    assert!(retry > ms(10), "after a backoff");
    assert_eq!(p.poll_connect(), None, "not before it");
    sh.now = retry;
    p.on_timeout(&Stream, &mut sh);
    assert_eq!(p.poll_connect(), Some(0), "asked again");
    sh.now = ms(259);
    p.connect_failed(0, ConnectFailure::Refused, &mut sh);
    assert!(p.lost().is_none(), "refused for 249 ms only");
    p.on_timeout(&Stream, &mut sh);
    assert_eq!(p.poll_connect(), None);
    sh.now = ms(260);
    p.connect_failed(0, ConnectFailure::Refused, &mut sh);
    assert_eq!(p.lost(), Some(LostReason::Refused));
    // A peer never open is given up at its first failure.
    let mut q = P::new(endpoint(1), PEER, sh.config.rtt);
    q.reach(ms(0)).expect("reachable");
    q.connect_failed(0, ConnectFailure::Unreachable, &mut sh);
    assert_eq!(q.lost(), Some(LostReason::Unreachable));
}

#[test]
fn when_one_of_two_links_goes_the_other_carries_the_peer_and_the_first_is_asked_again() {
    let mut sh = shared(EngineConfig {
        links: 2,
        ..config()
    });
    let mut p = open_peer(&mut sh, 4, ms(0));
    assert_eq!(p.poll_connect(), Some(1));
    p.link_connecting(1, link(1));
    p.open_link(opened(1, 1, true, hello(7, 4)), &sh.config, ms(1));
    let desc = message(&mut sh, 10, 1);
    p.queue_send(desc).expect("room");
    assert_eq!(
        packets(&mut p, &mut sh),
        [(1, Some(link(0)))],
        "messages go on the first"
    );
    sh.now = ms(5);
    p.forget_link(link(0));
    p.link_gone(0, &mut sh);
    assert!(p.is_open(), "link 1 carries the peer");
    assert_eq!(
        packets(&mut p, &mut sh),
        [(1, Some(link(1)))],
        "sent again there"
    );
    let t = p.timers(&Stream, &sh.config);
    let retry = (5..200)
        .map(ms)
        .find(|&at| t.is_due(PeerTimer::LinkRetry(0), at))
        .expect("link 0 is asked for again");
    assert!(retry > ms(5), "after a backoff");
    assert_eq!(p.poll_connect(), None);
    sh.now = retry;
    p.on_timeout(&Stream, &mut sh);
    assert_eq!(p.poll_connect(), Some(0));
}

#[test]
fn a_stream_whose_probe_goes_unanswered_for_an_interval_is_found_silent() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    let t = p.timers(&Stream, &sh.config);
    assert!(!t.is_due(PeerTimer::Probe, ms(99)));
    assert!(
        t.is_due(PeerTimer::Probe, ms(100)),
        "the keepalive interval"
    );
    sh.now = ms(100);
    p.on_timeout(&Stream, &mut sh);
    let (on, probe) = p.poll_probe().expect("a probe");
    assert_eq!(on, link(0));
    let (header, _, _) =
        crate::wire::parse(probe.as_bytes(), &crate::wire::Limits::new(1024)).expect("a frame");
    assert!(header.flags.contains(Flags::ACK_REQUEST));
    assert!(p.take_silent_links().is_none());
    sh.now = ms(200);
    p.on_timeout(&Stream, &mut sh);
    assert!(p.poll_probe().is_none(), "no second probe on a stream");
    let silent: StdVec<LinkId> = p.take_silent_links().expect("silent").collect();
    assert_eq!(silent, [link(0)], "dropped, to connect again");
}

#[test]
fn over_datagrams_an_unanswered_probe_goes_again_ever_more_slowly() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    let dg = Datagram { mtu: 1500 };
    let mut probes = StdVec::new();
    for now in 0..400 {
        sh.now = ms(now);
        if p.timers(&dg, &sh.config)
            .earliest()
            .is_some_and(|t| t <= sh.now)
        {
            p.on_timeout(&dg, &mut sh);
        }
        if p.poll_probe().is_some() {
            probes.push(now);
        }
        assert!(
            p.take_silent_links().is_none(),
            "datagrams are never silent links"
        );
    }
    assert_eq!(probes[0], 100, "the keepalive interval");
    let gaps: StdVec<u64> = probes.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 2, "probed again: {probes:?}");
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0]),
        "backing off: {probes:?}"
    );
    // An answer ends the backoff.
    let header = HeaderRepr {
        packet_type: PacketType::Ack,
        flags: Flags::empty(),
        credits: 0,
        seq: 0,
        ack: 0,
        body_len: crate::wire::AckRepr::LEN as u64,
    };
    let answer = Receiving::Ack(crate::wire::AckRepr { sack: 0 });
    p.on_packet(&header, answer, &dg, &mut sh).expect("an ack");
    assert!(!p.liveness.unanswered());
}

#[test]
fn messages_are_delivered_in_order_and_a_duplicate_is_answered_at_once() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    let dg = Datagram { mtu: 1500 };
    sh.now = ms(1);
    let (h, r) = incoming_send(&mut sh, 2, 20);
    p.on_packet(&h, r, &dg, &mut sh).expect("in the window");
    assert_eq!(drain_events(&mut sh), [], "held until 1 comes");
    let (h, r) = incoming_send(&mut sh, 1, 10);
    p.on_packet(&h, r, &dg, &mut sh).expect("in the window");
    assert_eq!(
        drain_events(&mut sh),
        [Seen::Received(10), Seen::Received(20)]
    );
    assert!(p.is_duplicate(1) && !p.is_duplicate(3));
    let header = HeaderRepr {
        packet_type: PacketType::Send,
        flags: Flags::empty(),
        credits: 0,
        seq: 1,
        ack: 0,
        body_len: 8 + SendRepr::LEN as u64,
    };
    let _ = p.poll_ack(&Stream, &sh.config, true, ms(1));
    p.on_packet(&header, Receiving::Duplicate, &dg, &mut sh)
        .expect("a duplicate is no violation");
    let ack = p
        .poll_ack(&Stream, &sh.config, true, ms(1))
        .expect("answered at once, even over a stream");
    let (h, _, _) =
        crate::wire::parse(ack.as_bytes(), &crate::wire::Limits::new(1024)).expect("a frame");
    assert_eq!(h.ack, 3, "both arrived");
}

#[test]
fn a_send_past_the_credits_granted_breaks_the_protocol() {
    let mut sh = shared(EngineConfig {
        initial_credits: 2,
        ..config()
    });
    let mut p = open_peer(&mut sh, 4, ms(0));
    for seq in 1..=2 {
        let (h, r) = incoming_send(&mut sh, seq, 1);
        p.on_packet(&h, r, &Stream, &mut sh).expect("granted");
    }
    let (h, r) = incoming_send(&mut sh, 3, 1);
    assert_eq!(
        p.on_packet(&h, r, &Stream, &mut sh),
        Err(CloseReason::ProtocolError)
    );
    // Freeing a message gives its credit back: the next one is granted.
    let mut q = open_peer(&mut sh, 4, ms(0));
    for seq in 1..=2 {
        let (h, r) = incoming_send(&mut sh, seq, 1);
        q.on_packet(&h, r, &Stream, &mut sh).expect("granted");
    }
    q.give_back_credit(ms(1));
    let (h, r) = incoming_send(&mut sh, 3, 1);
    q.on_packet(&h, r, &Stream, &mut sh)
        .expect("one credit came back");
}

#[test]
fn over_a_stream_an_acknowledgement_waits_for_a_packet_to_carry_it_but_not_long() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    sh.now = ms(10);
    let (h, r) = incoming_send(&mut sh, 1, 1);
    p.on_packet(&h, r, &Stream, &mut sh).expect("granted");
    assert!(
        p.poll_ack(&Stream, &sh.config, true, ms(10)).is_none(),
        "it may wait the ack delay"
    );
    let due = ms(10) + sh.config.ack_delay;
    assert!(p.timers(&Stream, &sh.config).is_due(PeerTimer::Ack, due));
    assert!(
        p.poll_ack(&Stream, &sh.config, false, due).is_none(),
        "a busy link will carry it"
    );
    assert!(p.poll_ack(&Stream, &sh.config, true, due).is_some());
    assert!(
        p.poll_ack(&Stream, &sh.config, true, due).is_none(),
        "sent: owed no more"
    );
    // A packet going back carries it instead.
    let (h, r) = incoming_send(&mut sh, 2, 1);
    p.on_packet(&h, r, &Stream, &mut sh).expect("granted");
    let desc = message(&mut sh, 10, 9);
    p.queue_send(desc).expect("room");
    assert_eq!(packets(&mut p, &mut sh).len(), 1);
    assert!(
        p.poll_ack(&Stream, &sh.config, true, ms(100)).is_none(),
        "stamped on the SEND"
    );
}

#[test]
fn a_peer_that_outgrows_the_answers_it_is_owed_is_lost() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 0, ms(0));
    // Nothing is put on a link meanwhile: the answers pile up.
    for id in 0..8 {
        p.answer(Answer::Done(DoneRepr { xfer_id: id }), &mut sh);
        assert!(p.lost().is_none());
    }
    p.answer(Answer::Done(DoneRepr { xfer_id: 3 }), &mut sh);
    assert!(
        p.lost().is_none(),
        "a transfer answered already gets no second"
    );
    p.answer(Answer::Done(DoneRepr { xfer_id: 99 }), &mut sh);
    assert_eq!(p.lost(), Some(LostReason::ProtocolViolation));
}

#[test]
fn a_notice_follows_the_put_data_once_a_credit_allows() {
    use crate::engine::ops::Op;
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 0, ms(0));
    let src = sh
        .regs
        .register(std::vec![7u8; 10], Access::empty())
        .expect("room");
    let (i, id) = (sh.ops.free_slot().expect("room"), sh.ops.new_id());
    assert!(sh.events.owe(), "the put's event place");
    let remote = RemoteKey(42).slice(0, 10);
    let op = Op::new(
        OpKind::Put,
        endpoint(0),
        3,
        id,
        Some(src.slice(0, 10)),
        remote,
        10,
        4,
    );
    sh.ops.start(i, op.noticed(Some(0x1234)));
    assert_eq!(
        packets(&mut p, &mut sh),
        [(1, Some(link(0)))],
        "the data goes without credit, the notice waits for one"
    );
    p.on_ack(ack(2), 0, &Stream, &mut sh).expect("a valid ack");
    assert_eq!(drain_events(&mut sh), [], "not done before its notice");
    assert_eq!(packets(&mut p, &mut sh), [], "still no credit");
    p.on_ack(ack(2), 1, &Stream, &mut sh).expect("a grant");
    assert_eq!(packets(&mut p, &mut sh), [(2, Some(link(0)))], "the notice");
    p.on_ack(ack(3), 1, &Stream, &mut sh).expect("a valid ack");
    assert_eq!(drain_events(&mut sh), [Seen::Op(Ok(()))]);
}

#[test]
fn a_notice_raises_one_event_unless_its_put_could_not_land() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    let writable = sh
        .regs
        .register(std::vec![0u8; 64], Access::REMOTE_WRITE)
        .expect("room");
    let readonly = sh
        .regs
        .register(std::vec![0u8; 64], Access::REMOTE_READ)
        .expect("room");
    let notice = |seq: u64, handle: crate::btl::MemHandle, imm: u64| {
        let notify = NotifyRepr {
            xfer_id: seq,
            handle: handle.remote_key().0,
            offset: 8,
            len: 16,
            imm,
        };
        let header = HeaderRepr {
            packet_type: PacketType::Notify,
            flags: Flags::empty(),
            credits: 0,
            seq,
            ack: 0,
            body_len: NotifyRepr::LEN as u64,
        };
        (
            header,
            Receiving::Control {
                seq,
                packet: ControlRepr::Notify(notify),
            },
        )
    };
    for (seq, handle, imm) in [(1, writable, 11), (2, readonly, 22)] {
        // The read path keeps the event's place before the frame is whole.
        assert!(sh.events.owe());
        let (h, r) = notice(seq, handle, imm);
        p.on_packet(&h, r, &Stream, &mut sh).expect("in the window");
    }
    assert_eq!(sh.events.owed(), 0, "both places filled or given back");
    assert_eq!(
        drain_events(&mut sh),
        [Seen::Arrived(11)],
        "memory it may not write raises nothing"
    );
    // A duplicate gives its place back.
    assert!(sh.events.owe());
    let (h, r) = notice(1, writable, 11);
    p.on_packet(&h, r, &Stream, &mut sh).expect("a duplicate");
    assert_eq!((sh.events.owed(), sh.events.len()), (0, 0));
}

#[test]
fn a_key_is_answered_with_what_it_names_and_an_unasked_answer_changes_nothing() {
    use crate::wire::{DeviceKey, KeyInfoRepr, KeyRegion, KeyRepr};
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    let h = sh
        .regs
        .register(std::vec![0u8; 64], Access::REMOTE_WRITE)
        .expect("room");
    let device = DeviceKey { key: 77, base: 5 };
    sh.regs.set_device(h, Some(device)).expect("registered");
    let control = |seq: u64, packet: ControlRepr| {
        let packet_type = packet.packet_type();
        let body_len = packet_type.fixed_body_len();
        let header = HeaderRepr {
            packet_type,
            flags: Flags::empty(),
            credits: 0,
            seq,
            ack: 0,
            body_len: body_len as u64,
        };
        (header, Receiving::Control { seq, packet })
    };
    for (seq, key) in [(1, h.remote_key().0), (2, 0xdead_0001)] {
        let (hd, r) = control(seq, ControlRepr::Key(KeyRepr { key }));
        p.on_packet(&hd, r, &Stream, &mut sh)
            .expect("in the window");
    }
    let answers: StdVec<KeyInfoRepr> = packets(&mut p, &mut sh)
        .into_iter()
        .filter_map(|(seq, _)| match p.out.window.get(seq) {
            Some(Outgoing::Control {
                packet: ControlRepr::KeyInfo(info),
                ..
            }) => Some(*info),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        [
            KeyInfoRepr {
                key: h.remote_key().0,
                region: Ok(KeyRegion {
                    len: 64,
                    access: Access::REMOTE_WRITE.bits(),
                    device: Some(device),
                }),
            },
            KeyInfoRepr {
                key: 0xdead_0001,
                region: Err(RejectCode::BadHandle),
            },
        ]
    );
    // What the peer says of a key nobody asked about is not kept.
    let forged = KeyInfoRepr {
        key: 9,
        region: Ok(KeyRegion {
            len: u64::MAX,
            access: 3,
            device: Some(device),
        }),
    };
    let (hd, r) = control(3, ControlRepr::KeyInfo(forged));
    p.on_packet(&hd, r, &Stream, &mut sh)
        .expect("in the window");
    assert_eq!(p.keys.known(9), None);
    assert!(p.lost().is_none());
}

/// A bare ACK from the peer acknowledging `cumulative`, answering a probe.
fn incoming_ack(cumulative: u64) -> (HeaderRepr, Receiving) {
    let header = HeaderRepr {
        packet_type: PacketType::Ack,
        flags: Flags::empty(),
        credits: 0,
        seq: 0,
        ack: cumulative,
        body_len: crate::wire::AckRepr::LEN as u64,
    };
    let receiving = Receiving::Ack(crate::wire::AckRepr { sack: 0 });
    (header, receiving)
}

/// Runs the peer's timers every 10 ms from `from` to `to`, the peer
/// answering each probe with `answer`; when it was lost, if it was.
fn run_answering(
    p: &mut P,
    sh: &mut Shared<Boxed>,
    from: u64,
    to: u64,
    answer: impl Fn() -> (HeaderRepr, Receiving),
) -> Option<(u64, LostReason)> {
    for now in (from..=to).step_by(10) {
        sh.now = ms(now);
        p.on_timeout(&Stream, sh);
        if let Some(reason) = p.lost() {
            return Some((now, reason));
        }
        if p.poll_probe().is_some() {
            let (header, receiving) = answer();
            p.on_packet(&header, receiving, &Stream, sh)
                .expect("an answer in order");
        }
    }
    None
}

#[test]
fn a_peer_that_answers_probes_but_acknowledges_nothing_is_lost_as_stalled() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    sh.now = ms(5);
    p.queue_send(message(&mut sh, 10, 1)).expect("room");
    assert_eq!(packets(&mut p, &mut sh).len(), 1);
    // Keepalive answers keep it from being silent, not from stalling.
    let lost = run_answering(&mut p, &mut sh, 10, 3000, || incoming_ack(0));
    assert_eq!(
        lost,
        Some((1010, LostReason::Stalled)),
        "the peer timeout (1 s) after the send"
    );
    let seen = drain_events(&mut sh);
    assert!(
        seen.contains(&Seen::Error(BtlError::PeerLost(LostReason::Stalled))),
        "{seen:?}"
    );
}

#[test]
fn acknowledgements_that_move_keep_a_busy_peer() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 64, ms(0));
    // A send every 400 ms, each acknowledged 300 ms later: something is
    // always outstanding for longer than the peer timeout, but moves.
    let mut acked = 0;
    for round in 0..8u64 {
        sh.now = ms(round * 400);
        p.queue_send(message(&mut sh, 10, 1)).expect("room");
        p.queue_send(message(&mut sh, 10, 2)).expect("room");
        packets(&mut p, &mut sh);
        sh.now = ms(round * 400 + 300);
        p.on_timeout(&Stream, &mut sh);
        acked += 1;
        let (header, receiving) = incoming_ack(acked);
        p.on_packet(&header, receiving, &Stream, &mut sh)
            .expect("an ack");
        assert_eq!(p.lost(), None, "round {round}");
    }
}

#[test]
fn a_gap_the_peer_never_fills_is_lost_as_stalled_and_lets_go_of_what_it_held() {
    let mut sh = shared(config());
    let mut p = open_peer(&mut sh, 4, ms(0));
    sh.now = ms(20);
    for seq in 2..=4 {
        let (header, receiving) = incoming_send(&mut sh, seq, 9);
        p.on_packet(&header, receiving, &Stream, &mut sh)
            .expect("within the window");
    }
    assert_eq!(sh.events.owed(), 3, "held behind the gap, places kept");
    let lost = run_answering(&mut p, &mut sh, 30, 3000, || incoming_ack(0));
    assert_eq!(lost, Some((1020, LostReason::Stalled)));
    assert_eq!(sh.events.owed(), 0, "the places went back");
    let seen = drain_events(&mut sh);
    assert!(
        !seen.iter().any(|s| matches!(s, Seen::Received(_))),
        "nothing delivered out of order: {seen:?}"
    );
}
