extern crate std;

use std::collections::HashMap;
use std::string::ToString;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::btl::{
    Access, Btl, BtlError, ErrorEvent, Event, LostReason, MemSlice, RemoteKey, Tag, TagError,
    TagRange,
};
use crate::desc::{DescFlags, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::loopback::Loopback;
use crate::pool::{
    FragmentClass, FragmentPoolConfig, FragmentPools, FragmentPoolsConfig, PoolCell,
};
use crate::time::Instant;

const ME: ProcName = ProcName::new(5, 1);
const TAG: Tag = Tag(0x60);

type Lb<'r, 'm> = Loopback<&'r [PoolCell], &'m mut [u8], 16, 8>;
type Tm = TransferMachine<8, 8, 512>;

/// The states `stop` is allowed in.
const STOPPABLE: &[TmState] = &[TmState::Initialized, TmState::Starting, TmState::Started];

/// The instant `ns` nanoseconds after the start of the clock.
fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn pools_config() -> FragmentPoolsConfig {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 8,
        max: 8,
        inc: 1,
    };
    FragmentPoolsConfig {
        small: pool(64),
        eager: pool(1024),
        max: pool(4096),
    }
}

/// Runs `test` with a loopback, its endpoint to itself, and `sizes.len()`
/// registered regions (all access allowed), one per buffer.
fn with_world<const N: usize>(
    sizes: [usize; N],
    test: impl FnOnce(&mut Lb<'_, '_>, EndpointId, [MemSlice; N]),
) {
    let cfg = pools_config();
    let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let mut mems: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s]).collect();
    let mut btl = Lb::new(ME, FragmentPools::new(&mut region, cfg).expect("pools"));
    let mut eps = [None];
    let mut words = [0u64; 1];
    btl.add_procs(&[ME], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    let ep = eps[0].expect("self is reachable");
    let slices: Vec<MemSlice> = mems
        .iter_mut()
        .map(|m| {
            let len = m.len() as u64;
            let handle = btl.register_mem(m, Access::all()).expect("register");
            MemSlice {
                handle,
                offset: 0,
                len,
            }
        })
        .collect();
    let slices: [MemSlice; N] = slices.try_into().expect("N slices");
    test(&mut btl, ep, slices);
    assert_eq!(in_use(&btl), 0, "every descriptor went back to the pools");
}

fn in_use(btl: &Lb<'_, '_>) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| btl.pools().stats(c).in_use)
        .sum()
}

/// A started machine on `tag`, its state events consumed.
fn started<const B: usize, const E: usize, const M: usize>(
    btl: &mut Lb<'_, '_>,
    tag: Tag,
) -> TransferMachine<B, E, M> {
    let mut tm = TransferMachine::new(ME, tag).expect("tm");
    tm.start().expect("start");
    tm.progress(btl, at(0));
    assert_eq!(tm.state(), TmState::Started);
    assert_eq!(
        drain(&mut tm),
        [state(TmState::Starting), state(TmState::Started)]
    );
    tm
}

fn state(state: TmState) -> XferEvent {
    XferEvent::StateChanged { state, error: None }
}

fn drain<const B: usize, const E: usize, const M: usize>(
    tm: &mut TransferMachine<B, E, M>,
) -> Vec<XferEvent> {
    core::iter::from_fn(|| tm.poll_event()).collect()
}

fn completed(buffer: BufferId, queue: Queue, result: Result<u64, XferError>) -> XferEvent {
    XferEvent::Completed(Completion {
        buffer,
        queue,
        result,
    })
}

fn fill(btl: &mut Lb<'_, '_>, mem: MemSlice, bytes: &[u8]) {
    btl.region_mut(mem.handle).expect("region")[..bytes.len()].copy_from_slice(bytes);
}

fn bytes(btl: &Lb<'_, '_>, mem: MemSlice, offset: u64, len: u64) -> Vec<u8> {
    let region = btl.region(mem.handle).expect("region");
    region[(mem.offset + offset) as usize..(mem.offset + offset + len) as usize].to_vec()
}

#[test]
fn msg_send_and_receive_by_sendi_and_by_descriptor() {
    with_world([1024, 16, 400], |btl, ep, [r, small, large]| {
        let mut tm: Tm = started(btl, TAG);
        let rb = tm.register_buffer(btl, r).expect("r");
        let sb = tm.register_buffer(btl, small).expect("s");
        let lb = tm.register_buffer(btl, large).expect("l");
        fill(btl, small, b"tiny message");
        let big: Vec<u8> = (0..400).map(|i| i as u8).collect();
        fill(btl, large, &big);

        tm.add_msg_recv(rb, 1, 2, None).expect("recv");
        tm.add_msg_send(sb, tm.addr(ep), 12, None).expect("small");
        // 12 + 400 bytes exceed the loopback's sendi slot: a descriptor.
        tm.add_msg_send(lb, tm.addr(ep), 400, None).expect("large");
        tm.progress(btl, at(1));

        let from = TmAddr {
            endpoint: ep,
            tag: TAG,
        };
        assert_eq!(
            drain(&mut tm),
            [
                completed(sb, Queue::MsgSend, Ok(12)),
                XferEvent::Received {
                    buffer: rb,
                    offset: 0,
                    len: 12,
                    from
                },
                XferEvent::Received {
                    buffer: rb,
                    offset: 12,
                    len: 400,
                    from
                },
                completed(rb, Queue::MsgRecv, Ok(412)),
                completed(lb, Queue::MsgSend, Ok(400)),
            ]
        );
        assert_eq!(bytes(btl, r, 0, 12), b"tiny message");
        assert_eq!(bytes(btl, r, 12, 400), big);
        let s = tm.stats();
        assert_eq!(s.queue(Queue::MsgSend).succeeded, 2);
        assert_eq!(s.queue(Queue::MsgRecv).bytes, 412);
        assert_eq!((s.dropped_messages, s.bad_messages, s.stale), (0, 0, 0));
    });
}

#[test]
fn a_receive_buffer_takes_messages_until_max_messages() {
    with_world([100, 20], |btl, ep, [r, s]| {
        let mut tm: Tm = started(btl, TAG);
        let rb = tm.register_buffer(btl, r).expect("r");
        let sb = tm.register_buffer(btl, s).expect("s");
        tm.add_msg_recv(rb, 10, 3, None).expect("recv");
        for round in 0..3u8 {
            fill(btl, s, &[round; 20]);
            tm.add_msg_send(sb, tm.addr(ep), 20, None).expect("send");
            tm.progress(btl, at(0));
            let events = drain(&mut tm);
            assert!(events.contains(&XferEvent::Received {
                buffer: rb,
                offset: u64::from(round) * 20,
                len: 20,
                from: tm.addr(ep),
            }));
            let recv_done = events.contains(&completed(rb, Queue::MsgRecv, Ok(60)));
            assert_eq!(recv_done, round == 2, "completes with the third message");
        }
        assert_eq!(bytes(btl, r, 0, 60), [[0u8; 20], [1; 20], [2; 20]].concat());
    });
}

#[test]
fn a_receive_buffer_completes_when_less_than_min_receive_size_is_left() {
    with_world([100, 50, 40], |btl, ep, [r1, r2, s]| {
        let mut tm: Tm = started(btl, TAG);
        let b1 = tm.register_buffer(btl, r1).expect("r1");
        let b2 = tm.register_buffer(btl, r2).expect("r2");
        let sb = tm.register_buffer(btl, s).expect("s");
        tm.add_msg_recv(b1, 30, 10, None).expect("r1");
        tm.add_msg_recv(b2, 1, 10, None).expect("r2");
        let mut send = |tm: &mut Tm, len| {
            tm.add_msg_send(sb, tm.addr(ep), len, None).expect("send");
            tm.progress(btl, at(0));
            drain(tm)
                .into_iter()
                .filter(|e| !matches!(e, XferEvent::Completed(c) if c.buffer == sb))
                .collect::<Vec<_>>()
        };
        let from = tm.addr(ep);
        let received = |buffer, offset, len| XferEvent::Received {
            buffer,
            offset,
            len,
            from,
        };
        assert_eq!(send(&mut tm, 30), [received(b1, 0, 30)]);
        // 70 left in b1: 40 fit, then 30 left is not below 30.
        assert_eq!(send(&mut tm, 40), [received(b1, 30, 40)]);
        // 30 left: a message of 35 goes to the next buffer with room.
        assert_eq!(send(&mut tm, 35), [received(b2, 0, 35)]);
        // 1 byte in b1 leaves 29 < 30: b1 completes.
        assert_eq!(
            send(&mut tm, 1),
            [received(b1, 70, 1), completed(b1, Queue::MsgRecv, Ok(71))]
        );
        // Nothing has room for 40 any more: dropped, and reported.
        assert_eq!(send(&mut tm, 40), [XferEvent::Dropped { count: 1 }]);
        assert_eq!(tm.stats().dropped_messages, 1);
    });
}

#[test]
fn a_message_without_a_receive_buffer_is_dropped_and_reported() {
    with_world([8, 8], |btl, ep, [s1, s2]| {
        let mut tm: Tm = started(btl, TAG);
        let b1 = tm.register_buffer(btl, s1).expect("s1");
        let b2 = tm.register_buffer(btl, s2).expect("s2");
        tm.add_msg_send(b1, tm.addr(ep), 8, None).expect("send");
        tm.add_msg_send(b2, tm.addr(ep), 8, None).expect("send");
        tm.progress(btl, at(0));
        // Losses not yet reported are counted in one event.
        assert_eq!(
            drain(&mut tm),
            [
                completed(b1, Queue::MsgSend, Ok(8)),
                completed(b2, Queue::MsgSend, Ok(8)),
                XferEvent::Dropped { count: 2 },
            ]
        );
        assert_eq!(tm.stats().dropped_messages, 2);
    });
}

#[test]
fn active_send_puts_into_a_passive_receive_buffer() {
    with_world([64, 32], |btl, ep, [p, a]| {
        let mut tm: Tm = started(btl, TAG);
        let pb = tm.register_buffer(btl, p).expect("p");
        let ab = tm.register_buffer(btl, a).expect("a");
        fill(btl, a, &[7; 32]);
        let desc = tm.add_passive_recv(pb, ep, None).expect("passive");
        assert_eq!(
            (desc.owner, desc.tag, desc.queue, desc.len),
            (ME, TAG, Passive::Recv, 64)
        );
        // Shipped as bytes to the peer, which decodes it.
        let shipped = NetBufDesc::from_bytes(&desc.to_bytes()).expect("decode");
        tm.add_active_send(ab, ep, &shipped, 32, None)
            .expect("active");
        tm.progress(btl, at(0));
        assert_eq!(
            drain(&mut tm),
            [
                completed(ab, Queue::ActiveBulkSend, Ok(32)),
                completed(pb, Queue::PassiveBulkRecv, Ok(32)),
            ]
        );
        assert_eq!(bytes(btl, p, 0, 32), [7; 32]);
    });
}

#[test]
fn active_receive_gets_from_a_passive_send_buffer() {
    with_world([64, 64], |btl, ep, [p, a]| {
        let mut tm: Tm = started(btl, TAG);
        let pb = tm.register_buffer(btl, p).expect("p");
        let ab = tm.register_buffer(btl, a).expect("a");
        fill(btl, p, b"twenty bytes of data");
        let desc = tm.add_passive_send(pb, ep, 20, None).expect("passive");
        assert_eq!((desc.queue, desc.len), (Passive::Send, 20));
        tm.add_active_recv(ab, ep, &desc, None).expect("active");
        tm.progress(btl, at(0));
        assert_eq!(
            drain(&mut tm),
            [
                completed(ab, Queue::ActiveBulkRecv, Ok(20)),
                completed(pb, Queue::PassiveBulkSend, Ok(20)),
            ]
        );
        assert_eq!(bytes(btl, a, 0, 20), b"twenty bytes of data");
    });
}

#[test]
fn a_failed_put_fails_both_sides() {
    with_world([64, 32], |btl, ep, [p, a]| {
        let mut tm: Tm = started(btl, TAG);
        let pb = tm.register_buffer(btl, p).expect("p");
        let ab = tm.register_buffer(btl, a).expect("a");
        let mut desc = tm.add_passive_recv(pb, ep, None).expect("passive");
        desc.key = RemoteKey(0xdead_0001);
        tm.add_active_send(ab, ep, &desc, 8, None).expect("active");
        tm.progress(btl, at(0));
        let events = drain(&mut tm);
        assert!(matches!(
            events[..],
            [
                XferEvent::Completed(Completion {
                    queue: Queue::ActiveBulkSend,
                    result: Err(XferError::Btl(BtlError::Rejected(_))),
                    ..
                }),
                XferEvent::Completed(Completion {
                    queue: Queue::PassiveBulkRecv,
                    result: Err(XferError::RemoteFailed),
                    ..
                }),
            ]
        ));
    });
}

#[test]
fn active_adds_check_the_descriptor() {
    with_world([64, 32, 16], |btl, ep, [p, a, small]| {
        let mut tm: Tm = started(btl, TAG);
        let pb = tm.register_buffer(btl, p).expect("p");
        let ab = tm.register_buffer(btl, a).expect("a");
        let sb = tm.register_buffer(btl, small).expect("small");
        let recv = tm.add_passive_recv(pb, ep, None).expect("passive");
        assert_eq!(
            tm.add_active_recv(ab, ep, &recv, None),
            Err(XferError::WrongDirection)
        );
        assert_eq!(
            tm.add_active_send(ab, ep, &recv, 40, None),
            Err(XferError::TooLong { len: 40, max: 32 })
        );
        let short = NetBufDesc { len: 8, ..recv };
        assert_eq!(
            tm.add_active_send(ab, ep, &short, 16, None),
            Err(XferError::TooLong { len: 16, max: 8 })
        );
        let send = NetBufDesc {
            queue: Passive::Send,
            ..recv
        };
        assert_eq!(
            tm.add_active_recv(sb, ep, &send, None),
            Err(XferError::TooLong { len: 64, max: 16 })
        );
        let foreign = NetBufDesc {
            tag: Tag(0x80),
            ..recv
        };
        assert!(matches!(
            tm.add_active_send(ab, ep, &foreign, 8, None),
            Err(XferError::Tag(TagError::OutsideRange { .. }))
        ));
        assert_eq!(tm.stats().queue(Queue::ActiveBulkSend).adds, 0);
        tm.del(pb).expect("del");
    });
}

#[test]
fn two_machines_share_one_loopback() {
    with_world([64, 32, 64, 8], |btl, ep, [p, a, r, s]| {
        let mut a_tm: Tm = started(btl, Tag(0x60));
        let mut b_tm: Tm = started(btl, Tag(0x61));
        let pb = b_tm.register_buffer(btl, p).expect("p");
        let rb = b_tm.register_buffer(btl, r).expect("r");
        let ab = a_tm.register_buffer(btl, a).expect("a");
        let sb = a_tm.register_buffer(btl, s).expect("s");
        fill(btl, a, &[3; 32]);
        fill(btl, s, b"to b tm!");

        let desc = b_tm.add_passive_recv(pb, ep, None).expect("passive");
        b_tm.add_msg_recv(rb, 1, 1, None).expect("recv");
        a_tm.add_active_send(ab, ep, &desc, 32, None)
            .expect("active");
        a_tm.add_msg_send(sb, b_tm.addr(ep), 8, None).expect("send");

        // The application's loop: every event goes to the machine that
        // takes it; neither sees the other's.
        let mut foreign = 0;
        for _ in 0..4 {
            a_tm.run(btl, at(0));
            b_tm.run(btl, at(0));
            while let Some(event) = btl.poll_event() {
                if let Some(event) = a_tm.offer(event).and_then(|e| b_tm.offer(e)) {
                    foreign += 1;
                    if let Event::SendComplete {
                        desc: Some(desc), ..
                    } = event
                    {
                        btl.free(desc).expect("free");
                    }
                }
                a_tm.run(btl, at(0));
                b_tm.run(btl, at(0));
            }
        }
        assert_eq!(foreign, 0);
        assert_eq!(
            drain(&mut a_tm),
            [
                completed(sb, Queue::MsgSend, Ok(8)),
                completed(ab, Queue::ActiveBulkSend, Ok(32)),
            ]
        );
        assert_eq!(
            drain(&mut b_tm),
            [
                XferEvent::Received {
                    buffer: rb,
                    offset: 0,
                    len: 8,
                    from: a_tm.addr(ep)
                },
                completed(rb, Queue::MsgRecv, Ok(8)),
                completed(pb, Queue::PassiveBulkRecv, Ok(32)),
            ]
        );
        assert_eq!(bytes(btl, p, 0, 32), [3; 32]);
    });
}

#[test]
fn a_send_to_another_machines_tag_completes_at_the_sender() {
    // 400 bytes exceed the loopback's sendi slot: each message goes as a
    // descriptor, whose completion carries the destination's tag.
    with_world([400, 400, 512, 512], |btl, ep, [sa, sb, ra, rb]| {
        let mut a_tm: Tm = started(btl, Tag(0x60));
        let mut b_tm: Tm = started(btl, Tag(0x61));
        // The send buffers sit in different slots, so that a completion
        // taken by the wrong machine cannot pass for one of its own.
        let a_recv = a_tm.register_buffer(btl, ra).expect("ra");
        let a_send = a_tm.register_buffer(btl, sa).expect("sa");
        let b_send = b_tm.register_buffer(btl, sb).expect("sb");
        let b_recv = b_tm.register_buffer(btl, rb).expect("rb");
        a_tm.add_msg_recv(a_recv, 1, 1, None).expect("a recv");
        b_tm.add_msg_recv(b_recv, 1, 1, None).expect("b recv");
        a_tm.add_msg_send(a_send, b_tm.addr(ep), 400, None)
            .expect("a send");
        b_tm.add_msg_send(b_send, a_tm.addr(ep), 400, None)
            .expect("b send");
        let mut foreign = 0;
        for _ in 0..4 {
            a_tm.run(btl, at(0));
            b_tm.run(btl, at(0));
            while let Some(event) = btl.poll_event() {
                if let Some(event) = a_tm.offer(event).and_then(|e| b_tm.offer(e)) {
                    foreign += 1;
                    if let Event::SendComplete {
                        desc: Some(desc), ..
                    } = event
                    {
                        btl.free(desc).expect("free");
                    }
                }
                a_tm.run(btl, at(0));
                b_tm.run(btl, at(0));
            }
        }
        assert_eq!(foreign, 0);
        for (tm, send, recv, from) in [
            (&mut a_tm, a_send, a_recv, Tag(0x61)),
            (&mut b_tm, b_send, b_recv, Tag(0x60)),
        ] {
            let events = drain(tm);
            assert!(events.contains(&completed(send, Queue::MsgSend, Ok(400))));
            assert!(events.contains(&XferEvent::Received {
                buffer: recv,
                offset: 0,
                len: 400,
                from: TmAddr {
                    endpoint: ep,
                    tag: from
                },
            }));
            assert_eq!((tm.stats().stale, tm.stats().foreign_events), (0, 0));
            tm.deregister_buffer(send)
                .expect("the BTL gave the send back");
        }
    });
}

#[test]
fn timeouts_complete_buffers_once_and_expired_deadlines_are_refused() {
    with_world([64], |btl, _ep, [r]| {
        let mut tm: Tm = started(btl, TAG);
        let rb = tm.register_buffer(btl, r).expect("r");
        tm.add_msg_recv(rb, 1, 1, Some(at(100))).expect("recv");
        tm.progress(btl, at(50));
        assert_eq!(drain(&mut tm), []);
        tm.progress(btl, at(100));
        tm.progress(btl, at(200));
        assert_eq!(
            drain(&mut tm),
            [completed(rb, Queue::MsgRecv, Err(XferError::Timeout))]
        );
        assert_eq!(
            tm.add_msg_recv(rb, 1, 1, Some(at(200))),
            Err(XferError::Expired)
        );
        // Time never goes back.
        tm.progress(btl, at(10));
        assert_eq!(
            tm.add_msg_recv(rb, 1, 1, Some(at(150))),
            Err(XferError::Expired)
        );
        tm.add_msg_recv(rb, 1, 1, Some(at(201))).expect("future");
        tm.del(rb).expect("del");
    });
}

#[test]
fn a_put_completing_after_its_timeout_is_ignored() {
    with_world([64, 32], |btl, ep, [p, a]| {
        let mut tm: Tm = started(btl, TAG);
        let pb = tm.register_buffer(btl, p).expect("p");
        let ab = tm.register_buffer(btl, a).expect("a");
        let desc = tm.add_passive_recv(pb, ep, None).expect("passive");
        tm.add_active_send(ab, ep, &desc, 32, Some(at(5)))
            .expect("active");
        tm.run(btl, at(0)); // issues the put; its completion waits in the BTL
        tm.run(btl, at(5));
        assert_eq!(
            drain(&mut tm),
            [completed(
                ab,
                Queue::ActiveBulkSend,
                Err(XferError::Timeout)
            )]
        );
        // The BTL still holds the put: the buffer is not reusable yet.
        assert_eq!(
            tm.add_active_send(ab, ep, &desc, 32, None),
            Err(XferError::InFlight)
        );
        assert_eq!(tm.deregister_buffer(ab), Err(XferError::InFlight));
        tm.progress(btl, at(6));
        assert_eq!(drain(&mut tm), [], "no second completion");
        assert_eq!(tm.stats().stale, 1);
        // No BULK_DONE was sent: the passive buffer waits until cancelled.
        tm.del(pb).expect("del");
        assert_eq!(
            drain(&mut tm),
            [completed(
                pb,
                Queue::PassiveBulkRecv,
                Err(XferError::Cancelled)
            )]
        );
        tm.deregister_buffer(ab).expect("free now");
    });
}

#[test]
fn cancel_completes_once_and_a_later_send_completion_is_ignored() {
    with_world([400, 64], |btl, ep, [s, r]| {
        let mut tm: Tm = started(btl, TAG);
        let sb = tm.register_buffer(btl, s).expect("s");
        let rb = tm.register_buffer(btl, r).expect("r");
        tm.add_msg_recv(rb, 1, 1, None).expect("recv");
        tm.del(rb).expect("del");
        assert_eq!(tm.del(rb), Err(XferError::NotQueued));
        assert_eq!(
            tm.add_msg_recv(rb, 1, 1, None),
            Err(XferError::Busy),
            "completion not polled yet"
        );
        assert_eq!(
            drain(&mut tm),
            [completed(rb, Queue::MsgRecv, Err(XferError::Cancelled))]
        );

        tm.add_msg_send(sb, tm.addr(ep), 400, None).expect("send");
        tm.run(btl, at(0)); // the descriptor is in the BTL
        tm.del(sb).expect("del");
        assert_eq!(
            drain(&mut tm),
            [completed(sb, Queue::MsgSend, Err(XferError::Cancelled))]
        );
        assert_eq!(
            tm.add_msg_send(sb, tm.addr(ep), 400, None),
            Err(XferError::InFlight)
        );
        tm.progress(btl, at(0));
        // The message was already on its way and arrived; no second completion.
        assert_eq!(drain(&mut tm), [XferEvent::Dropped { count: 1 }]);
        assert_eq!(tm.stats().stale, 1);
        assert_eq!(tm.stats().queue(Queue::MsgSend).deletes, 1);
        tm.add_msg_send(sb, tm.addr(ep), 1, None).expect("reusable");
        tm.progress(btl, at(0));
        drain(&mut tm);
    });
}

#[test]
fn stop_cancels_every_queued_buffer() {
    with_world([64, 64, 64, 400, 32], |btl, ep, [r, p, q, s, a]| {
        let mut tm: Tm = started(btl, TAG);
        let ids: Vec<BufferId> = [r, p, q, s, a]
            .iter()
            .map(|&m| tm.register_buffer(btl, m).expect("register"))
            .collect();
        let [rb, pb, qb, sb, ab] = ids[..] else {
            unreachable!()
        };
        tm.add_msg_recv(rb, 1, 4, None).expect("r");
        let desc = tm.add_passive_recv(pb, ep, None).expect("p");
        tm.add_passive_send(qb, ep, 8, None).expect("q");
        tm.add_msg_send(sb, tm.addr(ep), 400, None).expect("s");
        tm.run(btl, at(0)); // the send is in the BTL
        tm.add_active_send(ab, ep, &desc, 8, None).expect("a");
        tm.stop().expect("stop");
        assert_eq!(tm.state(), TmState::Stopping);
        let events = drain(&mut tm);
        assert_eq!(events[0], state(TmState::Stopping));
        let mut cancelled: Vec<BufferId> = events[1..]
            .iter()
            .map(|e| match e {
                XferEvent::Completed(Completion {
                    buffer,
                    result: Err(XferError::Cancelled),
                    ..
                }) => *buffer,
                other => panic!("expected a cancel, got {other:?}"),
            })
            .collect();
        cancelled.sort_by_key(|b| b.index);
        assert_eq!(cancelled, ids);
        assert_eq!(
            tm.add_msg_recv(rb, 1, 1, None),
            Err(XferError::State {
                call: "add_msg_recv",
                state: TmState::Stopping,
                needs: &[TmState::Started],
            })
        );
        assert_eq!(
            tm.stop(),
            Err(XferError::State {
                call: "stop",
                state: TmState::Stopping,
                needs: STOPPABLE,
            })
        );
        // Stopped once the BTL gave the send back.
        tm.progress(btl, at(0));
        assert_eq!(tm.state(), TmState::Stopped);
        assert_eq!(
            drain(&mut tm),
            [XferEvent::Dropped { count: 1 }, state(TmState::Stopped)]
        );
        for id in ids {
            tm.deregister_buffer(id).expect("idle");
        }
    });
}

#[test]
fn a_fatal_error_fails_the_machine_and_a_peer_error_its_buffers() {
    with_world([64, 64, 64], |btl, ep, [r, p, q]| {
        let mut tm: Tm = started(btl, TAG);
        let rb = tm.register_buffer(btl, r).expect("r");
        let pb = tm.register_buffer(btl, p).expect("p");
        let qb = tm.register_buffer(btl, q).expect("q");
        tm.add_msg_recv(rb, 1, 1, None).expect("r");
        tm.add_passive_recv(pb, ep, None).expect("p");
        tm.add_passive_recv(qb, EndpointId(7), None).expect("q");
        let lost = BtlError::PeerLost(LostReason::Closed);
        let peer_error = Event::Error(ErrorEvent {
            fatal: false,
            endpoint: Some(ep),
            error: lost,
        });
        assert!(
            matches!(tm.offer(peer_error), Some(Event::Error(_))),
            "errors are given back"
        );
        assert_eq!(
            drain(&mut tm),
            [completed(
                pb,
                Queue::PassiveBulkRecv,
                Err(XferError::Btl(lost))
            )]
        );
        let fatal = Event::Error(ErrorEvent {
            fatal: true,
            endpoint: None,
            error: BtlError::Finalized,
        });
        assert!(tm.offer(fatal).is_some());
        let failed = Err(XferError::Btl(BtlError::Finalized));
        assert_eq!(
            drain(&mut tm),
            [
                completed(rb, Queue::MsgRecv, failed),
                completed(qb, Queue::PassiveBulkRecv, failed),
                XferEvent::StateChanged {
                    state: TmState::Failed,
                    error: Some(BtlError::Finalized)
                },
            ]
        );
        assert_eq!(tm.failure(), Some(BtlError::Finalized));
        assert_eq!(
            tm.stop(),
            Err(XferError::State {
                call: "stop",
                state: TmState::Failed,
                needs: STOPPABLE,
            })
        );
    });
}

#[test]
fn foreign_events_are_given_back_by_offer_and_freed_by_progress() {
    with_world([8], |btl, ep, [_m]| {
        let mut tm: Tm = started(btl, TAG);
        btl.sendi(ep, &[], b"user", Tag(0x80), Order::ANY, DescFlags::empty())
            .expect("sendi");
        let event = btl.poll_event().expect("event");
        assert!(matches!(tm.offer(event), Some(Event::Received(m)) if m.data == b"user"));

        // Another machine's tag is foreign too.
        btl.sendi(ep, &[], b"x", Tag(0x61), Order::ANY, DescFlags::empty())
            .expect("sendi");
        let d = btl
            .prepare_src(ep, b"kept", 0, Order::ANY, DescFlags::empty())
            .expect("desc");
        assert!(btl.send(ep, d, Tag(0x81)).is_ok());
        tm.progress(btl, at(0));
        // Two messages and one send completion, whose descriptor was freed.
        assert_eq!(tm.stats().foreign_events, 3);
        assert_eq!(drain(&mut tm), []);
    });
}

#[test]
fn garbage_on_the_machines_tag_is_counted_and_ignored() {
    with_world([64], |btl, ep, [r]| {
        let mut tm: Tm = started(btl, TAG);
        let rb = tm.register_buffer(btl, r).expect("r");
        tm.add_msg_recv(rb, 1, 1, None).expect("recv");
        let send = |btl: &mut Lb<'_, '_>, bytes: &[u8]| {
            btl.sendi(ep, bytes, &[], TAG, Order::ANY, DescFlags::empty())
                .expect("sendi");
        };
        send(btl, b"");
        send(btl, &[9; 12]);
        // A message header naming a non-XFER sender tag.
        let mut bad_sender = wire::msg_header(TAG, 0);
        bad_sender[2] = 0x90;
        send(btl, &bad_sender);
        tm.progress(btl, at(0));
        // A BULK_DONE for a cookie that is not queued.
        send(btl, &wire::done(true, 0xFFFF_FFFF_0007, 1));
        tm.progress(btl, at(0));
        assert_eq!((tm.stats().bad_messages, tm.stats().stale), (3, 1));
        assert_eq!(drain(&mut tm), []);
        tm.del(rb).expect("still queued");
        drain(&mut tm);
    });
}

#[test]
fn a_full_event_queue_holds_messages_back_instead_of_dropping_them() {
    with_world([256, 8], |btl, ep, [r, s]| {
        let mut tm: TransferMachine<4, 2, 64> = started(btl, TAG);
        let rb = tm.register_buffer(btl, r).expect("r");
        let sb = tm.register_buffer(btl, s).expect("s");
        tm.add_msg_recv(rb, 1, 10, None).expect("recv");
        // Three messages from the application's own sends on the tag.
        for i in 0..3u8 {
            let header = wire::msg_header(TAG, 0);
            btl.sendi(ep, &header, &[i; 8], TAG, Order::ANY, DescFlags::empty())
                .expect("sendi");
        }
        tm.progress(btl, at(0));
        assert_eq!(tm.pending_events(), 2);
        let first: Vec<_> = drain(&mut tm);
        assert_eq!(first.len(), 2);
        tm.progress(btl, at(0));
        assert!(matches!(
            drain(&mut tm)[..],
            [XferEvent::Received { offset: 16, .. }]
        ));
        assert_eq!(tm.stats().dropped_messages, 0);
        tm.add_msg_send(sb, tm.addr(ep), 8, None).expect("send");
        tm.del(rb).expect("del");
        tm.progress(btl, at(0));
        drain(&mut tm);
    });
}

#[test]
fn registration_is_checked_and_ids_go_stale() {
    with_world([64], |btl, _ep, [m]| {
        let mut tm: TransferMachine<2, 2, 16> = TransferMachine::new(ME, TAG).expect("tm");
        assert!(matches!(
            TransferMachine::<2, 2, 16>::new(ME, Tag(0x40)),
            Err(XferError::Tag(TagError::OutsideRange {
                range: TagRange::XFER,
                ..
            }))
        ));
        let too_long = MemSlice { len: 65, ..m };
        assert!(matches!(
            tm.register_buffer(btl, too_long),
            Err(XferError::Btl(BtlError::Memory(_)))
        ));
        let a = tm.register_buffer(btl, m).expect("a");
        let half = MemSlice {
            offset: 32,
            len: 32,
            ..m
        };
        let b = tm.register_buffer(btl, half).expect("b");
        assert_eq!(tm.register_buffer(btl, m), Err(XferError::Full));
        assert_eq!(tm.memory(b), Ok(half));
        assert_eq!(
            tm.add_msg_recv(a, 1, 1, None),
            Err(XferError::State {
                call: "add_msg_recv",
                state: TmState::Initialized,
                needs: &[TmState::Started],
            })
        );
        assert_eq!(tm.deregister_buffer(a), Ok(m));
        assert_eq!(tm.memory(a), Err(XferError::UnknownBuffer));
        let c = tm.register_buffer(btl, m).expect("c reuses a's slot");
        assert_ne!(a, c);
        assert_eq!(tm.deregister_buffer(a), Err(XferError::UnknownBuffer));
        tm.start().expect("start");
        assert_eq!(
            tm.start(),
            Err(XferError::State {
                call: "start",
                state: TmState::Starting,
                needs: &[TmState::Initialized],
            })
        );
        tm.progress(btl, at(0));
        assert_eq!(
            tm.add_msg_recv(c, 0, 1, None),
            Err(XferError::ZeroReceiveLimit)
        );
        tm.add_msg_recv(c, 1, 1, None).expect("c");
        assert_eq!(tm.deregister_buffer(c), Err(XferError::Busy));
    });
}

#[test]
fn every_add_refused_before_start_names_itself() {
    with_world([8], |btl, ep, [m]| {
        let mut tm: Tm = TransferMachine::new(ME, TAG).expect("tm");
        let id = tm.register_buffer(btl, m).expect("register");
        let recv_desc = NetBufDesc {
            queue: Passive::Recv,
            ..sample_desc()
        };
        let to = tm.addr(ep);
        let refusals = [
            ("add_msg_recv", tm.add_msg_recv(id, 1, 1, None)),
            ("add_msg_send", tm.add_msg_send(id, to, 1, None)),
            (
                "add_passive_recv",
                tm.add_passive_recv(id, ep, None).map(drop),
            ),
            (
                "add_passive_send",
                tm.add_passive_send(id, ep, 1, None).map(drop),
            ),
            (
                "add_active_recv",
                tm.add_active_recv(id, ep, &sample_desc(), None),
            ),
            (
                "add_active_send",
                tm.add_active_send(id, ep, &recv_desc, 1, None),
            ),
        ];
        for (call, result) in refusals {
            assert_eq!(
                result,
                Err(XferError::State {
                    call,
                    state: TmState::Initialized,
                    needs: &[TmState::Started],
                })
            );
        }
    });
}

#[test]
fn state_errors_say_the_call_the_state_and_what_it_needs() {
    let start = XferError::State {
        call: "start",
        state: TmState::Starting,
        needs: &[TmState::Initialized],
    };
    assert_eq!(
        start.to_string(),
        "start: the transfer machine is starting; it must be initialized"
    );
    let stop = XferError::State {
        call: "stop",
        state: TmState::Failed,
        needs: STOPPABLE,
    };
    assert_eq!(
        stop.to_string(),
        "stop: the transfer machine is failed; it must be initialized, starting or started"
    );
    let two = XferError::State {
        call: "f",
        state: TmState::Stopped,
        needs: &[TmState::Starting, TmState::Started],
    };
    assert_eq!(
        two.to_string(),
        "f: the transfer machine is stopped; it must be starting or started"
    );
}

#[test]
fn message_golden_bytes() {
    assert_eq!(
        wire::msg_header(Tag(0x61), 0x0102_0304_0506_0708),
        [1, 1, 0x61, 0, 8, 7, 6, 5, 4, 3, 2, 1]
    );
    assert_eq!(
        wire::done(false, 0x0A0B, 300),
        [
            1, 2, 1, 0, 0x0B, 0x0A, 0, 0, 0, 0, 0, 0, 44, 1, 0, 0, 0, 0, 0, 0
        ]
    );
    assert_eq!(
        wire::parse(&wire::done(true, 5, 6)),
        Some(wire::Message::Done {
            ok: true,
            cookie: 5,
            len: 6
        })
    );
}

fn sample_desc() -> NetBufDesc {
    NetBufDesc {
        owner: ProcName::new(0x1122, 3),
        tag: Tag(0x62),
        queue: Passive::Send,
        key: RemoteKey(0x0001_0002),
        offset: 16,
        len: 0x100,
        cookie: 0x0005_0004,
    }
}

#[test]
fn descriptor_golden_bytes_and_rejections() {
    let bytes = sample_desc().to_bytes();
    #[rustfmt::skip]
    let golden: [u8; NetBufDesc::SIZE] = [
        1, 2, 0x62, 0, 3, 0, 0, 0,
        0x22, 0x11, 0, 0, 0, 0, 0, 0,
        2, 0, 1, 0, 0, 0, 0, 0,
        16, 0, 0, 0, 0, 0, 0, 0,
        0, 1, 0, 0, 0, 0, 0, 0,
        4, 0, 5, 0, 0, 0, 0, 0,
    ];
    assert_eq!(bytes, golden);
    assert_eq!(NetBufDesc::from_bytes(&bytes), Ok(sample_desc()));
    let with = |at: usize, v: u8| {
        let mut b = bytes;
        b[at] = v;
        NetBufDesc::from_bytes(&b)
    };
    assert_eq!(with(0, 2), Err(NetBufDescError::Version(2)));
    assert_eq!(with(1, 3), Err(NetBufDescError::Queue(3)));
    assert_eq!(with(2, 0x80), Err(NetBufDescError::Tag(0x80)));
    assert_eq!(with(3, 1), Err(NetBufDescError::Reserved(1)));
    let overflowing = NetBufDesc {
        offset: u64::MAX - 1,
        ..sample_desc()
    };
    assert_eq!(
        NetBufDesc::from_bytes(&overflowing.to_bytes()),
        Err(NetBufDescError::Range {
            offset: u64::MAX - 1,
            len: 0x100
        })
    );
    assert_eq!(
        NetBufDesc::from_bytes(&bytes[..47]),
        Err(NetBufDescError::Length(47))
    );
}

fn any_desc() -> impl Strategy<Value = NetBufDesc> {
    (
        any::<(u64, u32, u64, u64, u64)>(),
        TagRange::XFER.first..=TagRange::XFER.last,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |((job, rank, key, offset, cookie), tag, recv, len)| NetBufDesc {
                owner: ProcName::new(job, rank),
                tag: Tag(tag),
                queue: if recv { Passive::Recv } else { Passive::Send },
                key: RemoteKey(key),
                offset: offset / 2,
                len: len / 2,
                cookie,
            },
        )
}

proptest! {
    #[test]
    fn descriptors_round_trip(desc in any_desc()) {
        prop_assert_eq!(NetBufDesc::from_bytes(&desc.to_bytes()), Ok(desc));
    }

    #[test]
    fn garbage_descriptors_are_refused_or_exact(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(desc) = NetBufDesc::from_bytes(&bytes) {
            prop_assert_eq!(&desc.to_bytes()[..], &bytes[..]);
        }
    }

    #[test]
    fn garbage_messages_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Some(wire::Message::Done { ok, cookie, len }) = wire::parse(&bytes) {
            prop_assert_eq!(&wire::done(ok, cookie, len)[..], &bytes[..]);
        }
    }
}

/// One step of a random session on one machine over the loopback.
#[derive(Debug, Clone)]
enum Step {
    Recv(usize, u64, u32, Option<u64>),
    Send(usize, u64, Option<u64>),
    PassiveRecv(usize, Option<u64>),
    PassiveSend(usize, u64, Option<u64>),
    /// Active with the last descriptor of the buffer in the second field.
    Active(usize, usize, u64, Option<u64>),
    Del(usize),
    Run,
    OfferOne,
    Progress,
    Poll,
    Tick(u64),
}

fn any_step() -> impl Strategy<Value = Step> {
    let b = 0..BUFFER_SIZES.len();
    let deadline = proptest::option::weighted(0.3, 1u64..40);
    prop_oneof![
        (b.clone(), 1u64..64, 1u32..4, deadline.clone())
            .prop_map(|(i, m, n, d)| Step::Recv(i, m, n, d)),
        (b.clone(), 0u64..300, deadline.clone()).prop_map(|(i, l, d)| Step::Send(i, l, d)),
        (b.clone(), deadline.clone()).prop_map(|(i, d)| Step::PassiveRecv(i, d)),
        (b.clone(), 0u64..128, deadline.clone()).prop_map(|(i, l, d)| Step::PassiveSend(i, l, d)),
        (b.clone(), b.clone(), 0u64..128, deadline)
            .prop_map(|(i, j, l, d)| Step::Active(i, j, l, d)),
        b.prop_map(Step::Del),
        Just(Step::Run),
        Just(Step::OfferOne),
        Just(Step::Progress),
        Just(Step::Poll),
        (1u64..20).prop_map(Step::Tick),
    ]
}

const BUFFER_SIZES: [usize; 6] = [64, 64, 128, 300, 32, 200];

/// Accounting of a session: adds that succeeded and completions seen.
#[derive(Default)]
struct Ledger {
    adds: HashMap<BufferId, u32>,
    completions: HashMap<BufferId, u32>,
}

impl Ledger {
    fn added(&mut self, id: BufferId) {
        let adds = self.adds.entry(id).or_default();
        let done = self.completions.get(&id).copied().unwrap_or(0);
        assert_eq!(*adds, done, "an add only after the previous completion");
        *adds += 1;
    }

    fn poll(&mut self, tm: &mut Tm) {
        while let Some(event) = tm.poll_event() {
            if let XferEvent::Completed(c) = event {
                let done = self.completions.entry(c.buffer).or_default();
                *done += 1;
                assert!(*done <= self.adds.get(&c.buffer).copied().unwrap_or(0));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn every_add_completes_exactly_once(steps in proptest::collection::vec(any_step(), 1..60)) {
        with_world(BUFFER_SIZES, |btl, ep, mems| {
            let mut tm: Tm = started(btl, TAG);
            let ids: Vec<BufferId> = mems.iter().map(|&m| tm.register_buffer(btl, m).expect("register")).collect();
            let mut descs: Vec<Option<NetBufDesc>> = vec![None; ids.len()];
            let mut ledger = Ledger::default();
            let mut now = 0u64;
            let due = |d: Option<u64>, now: u64| d.map(|d| at(now + d));
            for step in steps {
                let added = match step {
                    Step::Recv(i, min, max, d) => tm.add_msg_recv(ids[i], min, max, due(d, now)).map(|()| i),
                    Step::Send(i, len, d) => tm.add_msg_send(ids[i], tm.addr(ep), len, due(d, now)).map(|()| i),
                    Step::PassiveRecv(i, d) => tm.add_passive_recv(ids[i], ep, due(d, now)).map(|desc| { descs[i] = Some(desc); i }),
                    Step::PassiveSend(i, len, d) => tm.add_passive_send(ids[i], ep, len, due(d, now)).map(|desc| { descs[i] = Some(desc); i }),
                    Step::Active(i, j, len, d) => match descs[j] {
                        Some(desc) if desc.queue == Passive::Recv => tm.add_active_send(ids[i], ep, &desc, len.min(desc.len), due(d, now)).map(|()| i),
                        Some(desc) => tm.add_active_recv(ids[i], ep, &desc, due(d, now)).map(|()| i),
                        None => Err(XferError::NotQueued),
                    },
                    Step::Del(i) => { let _ = tm.del(ids[i]); Err(XferError::NotQueued) }
                    Step::Run => { tm.run(btl, at(now)); Err(XferError::NotQueued) }
                    Step::OfferOne => {
                        let orphan = match btl.poll_event().map(|e| tm.offer(e)) {
                            Some(Some(Event::SendComplete { desc, .. })) => desc,
                            Some(Some(other)) => panic!("foreign event {other:?}"),
                            _ => None,
                        };
                        if let Some(desc) = orphan { btl.free(desc).expect("free"); }
                        tm.run(btl, at(now));
                        Err(XferError::NotQueued)
                    }
                    Step::Progress => { tm.progress(btl, at(now)); Err(XferError::NotQueued) }
                    Step::Poll => { ledger.poll(&mut tm); Err(XferError::NotQueued) }
                    Step::Tick(dt) => { now += dt; Err(XferError::NotQueued) }
                };
                if let Ok(i) = added {
                    ledger.added(ids[i]);
                }
            }
            tm.stop().expect("stop");
            for _ in 0..20 {
                tm.progress(btl, at(now));
                ledger.poll(&mut tm);
                if tm.state() == TmState::Stopped {
                    break;
                }
            }
            assert_eq!(tm.state(), TmState::Stopped);
            for id in &ids {
                assert_eq!(ledger.adds.get(id), ledger.completions.get(id), "buffer {id:?}");
                tm.deregister_buffer(*id).expect("idle after stop");
            }
        });
    }
}
