//! A rogue third process opens a connection with a bad handshake (another
//! protocol version, no proof of the job key, garbage): the target refuses
//! it, never reports a good peer lost, never fails as a whole, and the
//! traffic between A and B carries on. Needs [`World::inject_handshake`].

use btl_core::btl::Tag;

use crate::data::pattern;
use crate::suite::{seq_header, seq_of};
use crate::track::{Message, Tracker, assert_pools_idle, deliver, round, send};
use crate::world::{BadHandshake, HandshakeOutcome, Side, World};

/// Messages each way while the rogue knocks.
const EACH_WAY: u64 = 20;

fn refused(world: &mut dyn World, kind: BadHandshake) {
    let caps = world.capabilities();
    assert!(caps.handshake, "needs the inject_handshake hook");
    let mut tracker = Tracker::new(world);
    world.inject_handshake(Side::B, kind);
    for i in 0..EACH_WAY {
        for from in Side::BOTH {
            let tag = Tag(0xD0 + from as u8);
            let data = [seq_header(i).as_slice(), &pattern(i, 100)].concat();
            send(world, &mut tracker, from, &Message::new(tag, &data));
        }
    }
    let mut rounds = 0;
    while world.handshake_outcome() == HandshakeOutcome::Pending {
        rounds += 1;
        assert!(
            rounds <= caps.max_rounds,
            "{kind:?}: no decision on the rogue"
        );
        round(world, &mut tracker);
    }
    assert_eq!(
        world.handshake_outcome(),
        HandshakeOutcome::Refused,
        "{kind:?}"
    );
    deliver(world, &mut tracker, 2 * EACH_WAY as usize);
    for from in Side::BOTH {
        let tag = Tag(0xD0 + from as u8);
        let seqs: Vec<u64> = tracker
            .received()
            .filter(|(t, _)| *t == tag)
            .map(|(_, d)| seq_of(d))
            .collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..EACH_WAY).collect::<Vec<_>>(),
            "{kind:?}: from {from:?}"
        );
    }
    for (at, e) in tracker.errors() {
        assert!(
            !e.fatal,
            "{kind:?}: a bad handshake failed the BTL at {at:?}: {e:?}"
        );
        let good = world.peer(at);
        assert_ne!(
            e.endpoint,
            Some(good),
            "{kind:?}: the good peer was dropped: {e:?}"
        );
        if let btl_core::btl::BtlError::PeerLost(reason) = e.error {
            assert_eq!(reason, kind.reason(), "{kind:?}: reason reported");
        }
    }
    assert_pools_idle(world, &tracker);
}

/// A handshake with another major protocol version is refused.
pub fn wrong_version_is_refused(world: &mut dyn World) {
    refused(world, BadHandshake::WrongVersion);
}

/// A handshake that cannot prove the job key is refused.
pub fn wrong_job_key_is_refused(world: &mut dyn World) {
    refused(world, BadHandshake::WrongJobKey);
}

/// Garbage instead of a handshake is refused.
pub fn garbage_handshake_is_refused(world: &mut dyn World) {
    refused(world, BadHandshake::Garbage);
}
