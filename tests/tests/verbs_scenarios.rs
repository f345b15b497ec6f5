//! Scenarios of the engine over RC queue pairs of the software HCA, each
//! over several seeds: a receiver that stalls, a peer that dies, a peer
//! that restarts under its name. The seed chooses the message sizes and
//! the moments of the faults; every run is deterministic, and a failing
//! one names its seed.
//!
//! Both sides send numbered messages to each other as fast as they are
//! allowed, each payload saying which start of its sender sent it and its
//! number. At the end the checks are those of the socket scenarios: every
//! message arrived at most once, in its sender's order; what had to go
//! through did; and a peer is lost exactly once, for the right reason.

use btl_core::btl::{BtlError, Event, LostReason, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_tests::harness::verbs::{PEER_TIMEOUT, TICK, VerbsWorld};
use btl_tests::world::{Side, World};

/// Seeds per scenario.
const SEEDS: u64 = 6;
/// Messages each side sends.
const TOTAL: u32 = 150;
/// Rounds a scenario may take.
const ROUNDS: u32 = 6_000;

/// A seed's numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Message `i` of start `start` of its sender: a header (start, number)
/// and a pattern of them, 8 to 9,000 bytes as the seed says.
fn message(start: u8, i: u32, rng: &mut Rng) -> Vec<u8> {
    let len = 8 + rng.below(9_000) as usize;
    let mut m = vec![start];
    m.extend(i.to_le_bytes());
    m.extend((5..len).map(|x| (x as u32 ^ i) as u8 ^ start));
    m
}

/// What one side saw of the other.
#[derive(Debug, Default)]
struct Log {
    /// Messages sent to the peer, by this side's current start.
    sent: u32,
    /// Messages received: (sender's start, number), in arrival order.
    got: Vec<(u8, u32)>,
    /// Peer losses reported, with how many messages had been sent then.
    lost: Vec<(LostReason, u32)>,
}

/// Drives both sides for a round: each sends its next message if it may,
/// the world moves, and each polls its events.
fn round(
    world: &mut VerbsWorld,
    logs: &mut [Log; 2],
    starts: [u8; 2],
    alive: [bool; 2],
    rng: &mut Rng,
) {
    for side in Side::BOTH {
        let i = side.index();
        if !alive[i] || logs[i].sent >= TOTAL {
            continue;
        }
        let data = message(starts[i], logs[i].sent, rng);
        let peer = world.peer(side);
        let btl = world.btl(side);
        // No credit or fragment now, or the peer is lost: the message is
        // not sent, and goes at a later round.
        if let Ok(d) = btl.prepare_src(peer, &data, 0, Order(0), DescFlags::BTL_OWNERSHIP) {
            match btl.send(peer, d, Tag(0x81)) {
                Ok(_) => logs[i].sent += 1,
                Err(e) => btl.free(e.desc).expect("free"),
            }
        }
    }
    world.progress();
    for side in Side::BOTH {
        let i = side.index();
        if !alive[i] {
            continue;
        }
        while let Some(ev) = world.btl(side).poll_event() {
            match ev {
                Event::Received(m) => {
                    let (start, n) = (
                        m.data[0],
                        u32::from_le_bytes(m.data[1..5].try_into().expect("a header")),
                    );
                    let intact = m.data[5..]
                        .iter()
                        .enumerate()
                        .all(|(x, &b)| b == ((x as u32 + 5) ^ n) as u8 ^ start);
                    assert!(intact, "message {n} of start {start} intact");
                    logs[i].got.push((start, n));
                }
                Event::PeerLeft { .. } => logs[i].lost.push((LostReason::Left, logs[i].sent)),
                // The senders try again after a refusal anyway.
                Event::Room { .. } => {}
                Event::Error(e) => match e.error {
                    BtlError::PeerLost(reason) => logs[i].lost.push((reason, logs[i].sent)),
                    other => panic!("side {side:?}: {other}"),
                },
                other => panic!("side {side:?}: {other:?}"),
            }
        }
    }
}

/// Checks that `got` holds each message of each start at most once and in
/// order, and returns the numbers of start `start`.
fn in_order(got: &[(u8, u32)], start: u8) -> Vec<u32> {
    let of: Vec<u32> = got
        .iter()
        .filter(|(s, _)| *s == start)
        .map(|&(_, n)| n)
        .collect();
    assert!(
        of.windows(2).all(|w| w[0] < w[1]),
        "start {start}: once each, in order: {of:?}"
    );
    of
}

#[test]
fn a_receiver_that_stalls_again_and_again_loses_nothing() {
    for seed in 1..=SEEDS {
        let mut rng = Rng(seed * 0x9E37_79B9 + 1);
        let mut world = VerbsWorld::new();
        let mut logs = [Log::default(), Log::default()];
        // Three stalls of B or A while messages flow, at seeded moments,
        // each 30 to 230 rounds long: long enough for the stalled side's
        // posted receives to fill.
        let mut stalls: Vec<(u32, u32, Side)> = (0..3)
            .map(|k| {
                let at = 10 + k * 60 + rng.below(40) as u32;
                let side = if rng.below(2) == 0 { Side::B } else { Side::A };
                (at, at + 30 + rng.below(200) as u32, side)
            })
            .collect();
        let mut r = 0;
        while r < ROUNDS {
            for (from, to, side) in &stalls {
                if r == *from {
                    world.pause(*side);
                }
                if r == *to {
                    world.resume(*side);
                }
            }
            let alive = [true, true];
            round(&mut world, &mut logs, [0, 0], alive, &mut rng);
            r += 1;
            let done = logs
                .iter()
                .all(|l| l.got.len() == TOTAL as usize && l.sent == TOTAL);
            if done && stalls.iter().all(|(_, to, _)| r > *to) {
                break;
            }
        }
        stalls.clear();
        for (i, log) in logs.iter().enumerate() {
            assert!(log.lost.is_empty(), "seed {seed}: side {i} lost nobody");
            let got = in_order(&log.got, 0);
            assert_eq!(
                got,
                (0..TOTAL).collect::<Vec<_>>(),
                "seed {seed}: side {i} got everything"
            );
        }
        assert!(
            world.fabric().counters().rnr_naks > 0,
            "seed {seed}: receives ran out"
        );
    }
}

#[test]
fn a_peer_that_dies_is_lost_once_and_nothing_arrives_twice() {
    for seed in 1..=SEEDS {
        let mut rng = Rng(seed * 0x51ED + 3);
        let mut world = VerbsWorld::new();
        let mut logs = [Log::default(), Log::default()];
        let die_at = 10 + rng.below(120) as u32;
        let mut alive = [true, true];
        let rounds = die_at + (2 * PEER_TIMEOUT.as_millis() / TICK.as_millis()) as u32 + 200;
        for r in 0..rounds {
            if r == die_at {
                world.kill(Side::B);
                alive[1] = false;
            }
            round(&mut world, &mut logs, [0, 0], alive, &mut rng);
        }
        let a = &logs[0];
        assert_eq!(a.lost.len(), 1, "seed {seed}: B lost once: {:?}", a.lost);
        let (reason, _) = a.lost[0];
        assert!(
            matches!(reason, LostReason::Timeout | LostReason::Unreachable),
            "seed {seed}: lost as gone, not {reason:?}"
        );
        in_order(&a.got, 0);
        in_order(&logs[1].got, 0);
        // A's sends to the lost peer are refused from then on.
        let peer = world.peer(Side::A);
        let refused =
            world
                .btl(Side::A)
                .sendi(peer, &[], b"late", Tag(0x81), Order(0), DescFlags::empty());
        assert!(
            matches!(refused, Err(BtlError::PeerLost(_))),
            "seed {seed}: {refused:?}"
        );
    }
}

#[test]
fn a_restarted_peer_is_lost_as_restarted_then_reached_again() {
    for seed in 1..=SEEDS {
        let mut rng = Rng(seed * 0xC0FFEE + 5);
        let mut world = VerbsWorld::new();
        let mut logs = [Log::default(), Log::default()];
        let restart_at = 10 + rng.below(120) as u32;
        let mut starts = [0u8, 0];
        let mut r = 0;
        while r < ROUNDS {
            if r == restart_at {
                world.restart(Side::B);
                starts[1] = 1;
                // The new start of B sends from its first message again,
                // and has received nothing.
                logs[1] = Log::default();
            }
            round(&mut world, &mut logs, starts, [true, true], &mut rng);
            r += 1;
            let a_done = logs[0].sent == TOTAL;
            let new_b_got = logs[1].got.iter().filter(|(s, _)| *s == 0).count();
            let b_done = logs[1].sent == TOTAL && in_order(&logs[0].got, 1).len() == TOTAL as usize;
            if r > restart_at && a_done && b_done && !logs[0].lost.is_empty() {
                let after = logs[0].lost[0].1;
                if new_b_got >= (TOTAL - after) as usize {
                    break;
                }
            }
        }
        let a = &logs[0];
        assert_eq!(
            a.lost.iter().map(|l| l.0).collect::<Vec<_>>(),
            [LostReason::Restarted],
            "seed {seed}: the old start of B lost once, as restarted"
        );
        // Everything A sent once it knew of the restart reached the new B,
        // once and in order.
        let known_at = a.lost[0].1;
        let new_b = in_order(&logs[1].got, 0);
        assert!(
            (known_at..TOTAL).all(|n| new_b.contains(&n)),
            "seed {seed}: from message {known_at} on, all reached the new B: {new_b:?}"
        );
        // From each start of B, A got messages once and in order; from the
        // new one, all of them.
        in_order(&a.got, 0);
        assert_eq!(
            in_order(&a.got, 1),
            (0..TOTAL).collect::<Vec<_>>(),
            "seed {seed}"
        );
    }
}
