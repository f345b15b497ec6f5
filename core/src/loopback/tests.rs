extern crate std;

use std::vec;
use std::vec::Vec;

use super::*;
use crate::btl::{LostReason, MemError, RejectCode, RemoteKey, TagRange, TagTable};
use crate::pool::{FragmentClass, FragmentPoolConfig, FragmentPoolsConfig, PoolCell};

const ME_PROC: ProcName = ProcName::new(9, 3);

fn pools_config() -> FragmentPoolsConfig {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 4,
        max: 4,
        inc: 1,
    };
    FragmentPoolsConfig {
        small: pool(64),
        eager: pool(1024),
        max: pool(8192),
    }
}

type Small<'r, 'm> = Loopback<&'r [PoolCell], &'m mut [u8], 4, 4>;

fn with_loopback<'m>(test: impl FnOnce(&mut Small<'_, 'm>, EndpointId)) {
    let cfg = pools_config();
    let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let pools = FragmentPools::new(&mut region, cfg).expect("pools");
    let mut btl = Small::new(ME_PROC, pools);
    let mut eps = [None];
    let mut words = [0u64; 1];
    let mut reach = Reachability::new(&mut words);
    btl.add_procs(&[ME_PROC], &mut eps, &mut reach)
        .expect("add");
    let ep = eps[0].expect("self is reachable");
    test(&mut btl, ep);
}

fn in_use(btl: &Small<'_, '_>) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| btl.pools().stats(c).in_use)
        .sum()
}

#[test]
fn reaches_only_itself() {
    let cfg = pools_config();
    let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let mut btl = Small::new(
        ME_PROC,
        FragmentPools::new(&mut region, cfg).expect("pools"),
    );
    let procs = [ProcName::new(9, 0), ME_PROC, ProcName::new(1, 3)];
    let mut eps = [None; 3];
    let mut words = [0u64; 1];
    let mut reach = Reachability::new(&mut words);
    btl.add_procs(&procs, &mut eps, &mut reach).expect("add");
    assert_eq!(eps, [None, Some(ME), None]);
    assert_eq!(
        (reach.get(0), reach.get(1), reach.get(2)),
        (false, true, false)
    );
    assert_eq!(btl.attributes().exclusivity, Exclusivity::HIGH);
    assert_eq!(
        btl.sendi(
            EndpointId(1),
            &[],
            b"x",
            Tag(0x80),
            Order::ANY,
            DescFlags::empty()
        ),
        Err(BtlError::Unreachable)
    );
    btl.del_procs(&[ME]).expect("del");
    assert_eq!(btl.del_procs(&[ME]), Err(BtlError::Unreachable));
    assert_eq!(
        btl.sendi(ME, &[], b"x", Tag(0x80), Order::ANY, DescFlags::empty()),
        Err(BtlError::Unreachable)
    );
}

#[test]
fn send_delivers_in_place_then_returns_the_descriptor() {
    with_loopback(|btl, ep| {
        let mut d = btl
            .prepare_src(ep, b"payload", 4, Order::ANY, DescFlags::empty())
            .expect("d");
        d.header_mut(btl.pools())
            .expect("header")
            .copy_from_slice(b"HDR:");
        assert!(matches!(btl.send(ep, d, Tag(0x81)), Ok(SendStatus::Queued)));
        match btl.poll_event() {
            Some(Event::Received(m)) => {
                assert_eq!(
                    (m.from, m.tag, m.data),
                    (ep, Tag(0x81), &b"HDR:payload"[..])
                );
            }
            other => panic!("expected the message, got {other:?}"),
        }
        let desc = match btl.poll_event() {
            Some(Event::SendComplete {
                desc: Some(desc),
                result: Ok(()),
                tag,
                ..
            }) => {
                assert_eq!(tag, Tag(0x81));
                desc
            }
            other => panic!("expected the completion, got {other:?}"),
        };
        assert!(btl.poll_event().is_none());
        btl.free(desc).expect("free");
        assert_eq!(in_use(btl), 0);
    });
}

#[test]
fn btl_owned_sends_complete_at_once_and_are_freed_after_delivery() {
    with_loopback(|btl, ep| {
        let d = btl
            .prepare_src(ep, &[1; 100], 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("d");
        assert!(matches!(
            btl.send(ep, d, Tag(0x82)),
            Ok(SendStatus::Completed(None))
        ));
        assert!(matches!(btl.poll_event(), Some(Event::Received(_))));
        assert!(
            btl.poll_event().is_none(),
            "no completion without ALWAYS_CALLBACK"
        );
        assert_eq!(in_use(btl), 0);

        let flags = DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK;
        let d = btl
            .prepare_src(ep, &[2; 10], 0, Order::ANY, flags)
            .expect("d");
        assert!(matches!(btl.send(ep, d, Tag(0x83)), Ok(SendStatus::Queued)));
        assert!(matches!(btl.poll_event(), Some(Event::Received(_))));
        assert!(matches!(
            btl.poll_event(),
            Some(Event::SendComplete {
                desc: None,
                result: Ok(()),
                ..
            })
        ));
        assert_eq!(in_use(btl), 0);
    });
}

#[test]
fn sendi_takes_no_fragment_and_is_bounded() {
    with_loopback(|btl, ep| {
        for i in 0..4u8 {
            btl.sendi(ep, &[i], &[7; 8], Tag(0x84), Order::ANY, DescFlags::empty())
                .expect("sendi");
        }
        assert_eq!(in_use(btl), 0, "sendi uses the loopback's own slots");
        assert_eq!(
            btl.sendi(ep, &[], &[0; 8], Tag(0x84), Order::ANY, DescFlags::empty()),
            Err(BtlError::OutOfResource)
        );
        assert_eq!(
            btl.sendi(
                ep,
                &[0; 200],
                &[0; 100],
                Tag(0x84),
                Order::ANY,
                DescFlags::empty()
            ),
            Err(BtlError::TooLarge {
                len: 300,
                max: SENDI_MAX as u64,
                whose: crate::btl::Limit::Here,
            })
        );
        for i in 0..4u8 {
            match btl.poll_event() {
                Some(Event::Received(m)) => assert_eq!(m.data, &[i, 7, 7, 7, 7, 7, 7, 7, 7]),
                other => panic!("expected message {i}, got {other:?}"),
            }
        }
        assert!(btl.poll_event().is_none());
        btl.sendi(ep, &[], &[], Tag(0x84), Order::ANY, DescFlags::empty())
            .expect("room again");
    });
}

#[test]
fn a_full_queue_refuses_a_send_and_returns_the_descriptor() {
    with_loopback(|btl, ep| {
        for _ in 0..4 {
            btl.sendi(ep, &[], &[1], Tag(0x80), Order::ANY, DescFlags::empty())
                .expect("fill");
        }
        let d = btl
            .prepare_src(ep, b"late", 0, Order::ANY, DescFlags::empty())
            .expect("d");
        let err = btl.send(ep, d, Tag(0x80)).expect_err("full");
        assert_eq!(err.error, BtlError::OutOfResource);
        btl.free(err.desc).expect("the caller still owns it");
        assert_eq!(in_use(btl), 0);
    });
}

#[test]
fn a_send_between_polls_cannot_take_the_place_of_a_completion() {
    with_loopback(|btl, ep| {
        let d = btl
            .prepare_src(ep, b"first", 0, Order::ANY, DescFlags::empty())
            .expect("d");
        assert!(matches!(btl.send(ep, d, Tag(0x80)), Ok(SendStatus::Queued)));
        for _ in 0..3 {
            btl.sendi(ep, &[], b"x", Tag(0x80), Order::ANY, DescFlags::empty())
                .expect("fill");
        }
        assert!(matches!(btl.poll_event(), Some(Event::Received(_))));
        // Three entries queued and "first" lent out: the last place is
        // kept for its completion, as a reply from the event loop finds.
        assert_eq!(
            btl.sendi(ep, &[], b"reply", Tag(0x80), Order::ANY, DescFlags::empty()),
            Err(BtlError::OutOfResource)
        );
        let d = btl
            .prepare_src(ep, b"reply", 0, Order::ANY, DescFlags::empty())
            .expect("d");
        let refused = btl.send(ep, d, Tag(0x80)).expect_err("no room");
        btl.free(refused.desc).expect("free");
        let mut completions = 0;
        while let Some(ev) = btl.poll_event() {
            if let Event::SendComplete {
                desc: Some(desc), ..
            } = ev
            {
                completions += 1;
                btl.free(desc).expect("free");
            }
        }
        assert_eq!(completions, 1);
        assert_eq!(in_use(btl), 0);
    });
}

#[test]
fn put_and_get_copy_between_registrations_with_checks() {
    let mut local = *b"0123456789abcdef";
    let mut target = [0u8; 16];
    let mut readonly = [5u8; 16];
    with_loopback(|btl, ep| {
        let l = btl
            .register_mem(&mut local, Access::empty())
            .expect("local");
        let t = btl
            .register_mem(&mut target, Access::REMOTE_WRITE | Access::REMOTE_READ)
            .expect("t");
        let r = btl
            .register_mem(&mut readonly, Access::REMOTE_READ)
            .expect("ro");
        let src = MemSlice {
            handle: l,
            offset: 4,
            len: 8,
        };
        let dst = RemoteSlice {
            key: t.remote_key(),
            offset: 8,
            len: 8,
        };
        let op = btl.put(ep, src, dst, 11).expect("put");
        assert!(matches!(
            btl.poll_event(),
            Some(Event::PutComplete { op: o, ctx: 11, result: Ok(()) }) if o == op
        ));
        assert_eq!(&btl.region(t).expect("t")[8..], b"456789ab");

        // Bounds, access and stale keys are refused and leave memory alone.
        let cases = [
            (
                RemoteSlice {
                    key: t.remote_key(),
                    offset: 12,
                    len: 8,
                },
                RejectCode::OutOfBounds,
            ),
            (
                RemoteSlice {
                    key: r.remote_key(),
                    offset: 0,
                    len: 8,
                },
                RejectCode::AccessDenied,
            ),
            (
                RemoteSlice {
                    key: RemoteKey(0xdead_0001),
                    offset: 0,
                    len: 8,
                },
                RejectCode::BadHandle,
            ),
        ];
        for (remote, code) in cases {
            btl.put(ep, src, remote, 0).expect("queued");
            match btl.poll_event() {
                Some(Event::PutComplete {
                    result: Err(BtlError::Rejected(c)),
                    ..
                }) => assert_eq!(c, code),
                other => panic!("expected a rejection, got {other:?}"),
            }
        }
        assert_eq!(btl.region(r).expect("ro"), &[5; 16]);

        let back = MemSlice {
            handle: l,
            offset: 0,
            len: 8,
        };
        btl.get(
            ep,
            back,
            RemoteSlice {
                key: r.remote_key(),
                offset: 0,
                len: 8,
            },
            12,
        )
        .expect("get");
        assert!(matches!(
            btl.poll_event(),
            Some(Event::GetComplete {
                ctx: 12,
                result: Ok(()),
                ..
            })
        ));
        assert_eq!(&btl.region(l).expect("l")[..8], &[5; 8]);
        assert_eq!(
            btl.put(
                ep,
                MemSlice {
                    handle: l,
                    offset: 10,
                    len: 8
                },
                dst,
                0
            ),
            Err(BtlError::Memory(MemError::OutOfBounds {
                offset: 10,
                len: 8,
                size: 16
            }))
        );
    });
}

#[test]
fn finalize_fails_undelivered_sends_exactly_once() {
    with_loopback(|btl, ep| {
        let d = btl
            .prepare_src(ep, b"never read", 0, Order::ANY, DescFlags::empty())
            .expect("d");
        assert!(matches!(btl.send(ep, d, Tag(0x90)), Ok(SendStatus::Queued)));
        btl.sendi(ep, &[], b"x", Tag(0x90), Order::ANY, DescFlags::empty())
            .expect("sendi");
        btl.finalize();
        let mut completions = 0;
        while let Some(ev) = btl.poll_event() {
            match ev {
                Event::SendComplete {
                    desc: Some(desc),
                    result: Err(BtlError::Finalized),
                    ..
                } => {
                    completions += 1;
                    btl.free(desc).expect("free");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(completions, 1);
        assert_eq!(in_use(btl), 0);
        assert_eq!(
            btl.sendi(ep, &[], b"x", Tag(0x90), Order::ANY, DescFlags::empty()),
            Err(BtlError::Finalized)
        );
    });
}

#[test]
fn the_tag_table_dispatches_polled_messages() {
    fn count(log: &mut Vec<usize>, m: &Incoming<'_>) {
        log.push(m.data.len());
    }
    let table = TagTable::<Vec<usize>>::new();
    table
        .register(TagRange::USER, Tag(0xA0), count)
        .expect("register");
    with_loopback(|btl, ep| {
        btl.sendi(ep, &[], &[0; 3], Tag(0xA0), Order::ANY, DescFlags::empty())
            .expect("a");
        btl.sendi(ep, &[], &[0; 5], Tag(0xA1), Order::ANY, DescFlags::empty())
            .expect("b");
        let mut log = Vec::new();
        let mut unhandled = 0;
        while let Some(ev) = btl.poll_event() {
            if let Event::Received(m) = ev
                && !table.dispatch(&mut log, &m)
            {
                unhandled += 1;
            }
        }
        assert_eq!((log, unhandled), (vec![3], 1));
    });
}

#[test]
fn deleting_the_last_reference_fails_undelivered_sends_once() {
    with_loopback(|btl, ep| {
        let d = btl
            .prepare_src(ep, b"orphan", 0, Order::ANY, DescFlags::empty())
            .expect("d");
        assert!(matches!(btl.send(ep, d, Tag(0x90)), Ok(SendStatus::Queued)));
        btl.sendi(ep, &[], b"x", Tag(0x90), Order::ANY, DescFlags::empty())
            .expect("sendi");
        btl.del_procs(&[ep]).expect("del");
        let mut failed = 0;
        while let Some(ev) = btl.poll_event() {
            match ev {
                Event::SendComplete {
                    desc: Some(desc),
                    result: Err(BtlError::PeerLost(LostReason::Removed)),
                    ..
                } => {
                    failed += 1;
                    btl.free(desc).expect("free");
                }
                other => panic!("nothing else may be delivered: {other:?}"),
            }
        }
        assert_eq!(failed, 1);
        assert_eq!(in_use(btl), 0);
    });
}

#[test]
fn a_refused_send_is_followed_by_room_once_the_queue_is_polled() {
    with_loopback(|btl, ep| {
        let mut taken = 0;
        let refused = loop {
            match btl.send_copy(ep, Tag(0x80), &[1; 500]) {
                Ok(()) => taken += 1,
                Err(e) => break e,
            }
            assert!(taken < 100, "a queue of 4 took 100 messages");
        };
        assert_eq!(refused, BtlError::OutOfResource);
        assert_eq!(btl.progress(), taken + 1, "Room counts among the events");
        let mut seen = Vec::new();
        while let Some(event) = btl.poll_event() {
            seen.push(match event {
                Event::Received(_) => "received",
                Event::Room { endpoint } => {
                    assert_eq!(endpoint, ep);
                    "room"
                }
                _ => "other",
            });
        }
        let mut want = vec!["received"; taken];
        want.push("room");
        assert_eq!(seen, want, "the messages taken, then Room once");
        assert!(btl.poll_event().is_none());
        btl.send_copy(ep, Tag(0x80), &[1; 500])
            .expect("what Room said there is room for");
    });
}
