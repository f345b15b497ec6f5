//! Fair shares: how much of a resource every peer draws on one peer may
//! hold.
//!
//! An engine's event places, fragments and operation slots are shared by
//! all its peers. What a peer holds because of the peer itself, not
//! because this side's user has not got round to it yet (packets it
//! numbered past a gap it does not fill, messages it does not
//! acknowledge, gets whose data it does not take), is held to a share of
//! each, so that a handful of peers cannot take the whole of one and lock
//! every other peer out: the others find the rest, and the peer that
//! wants more waits (its stream is not read, its datagram is dropped and
//! comes again, its user's send is refused with `OutOfResource` and tried
//! again later) without holding anyone else up.
//!
//! A share is the resource divided among the peers on record and one
//! more, so that a newcomer finds room while the others hold their
//! shares. Shares shrink as peers come, and nobody gives back what it
//! took when its share was larger, so peers that each held the share of
//! their moment can still fill a resource between them: what ends that is
//! the progress rule (a peer that holds without moving is lost after the
//! peer timeout, see [`progress`](super::progress)) and the bound on the
//! peers one source may hold.

/// What one of `peers` peers may hold of `capacity` units: an equal part
/// with room for one more peer, and at least one unit, so that no peer is
/// shut out entirely.
pub fn fair_share(capacity: usize, peers: usize) -> usize {
    (capacity / peers.saturating_add(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_leaves_room_for_one_more_peer() {
        assert_eq!(fair_share(192, 0), 192);
        assert_eq!(fair_share(192, 1), 96, "one peer leaves half");
        assert_eq!(fair_share(192, 3), 48, "three peers leave a quarter");
        assert_eq!(fair_share(192, 12), 14, "12 attackers leave 24 places");
        let left = 192 - 12 * fair_share(192, 12);
        assert!(
            left >= fair_share(192, 12),
            "what 12 leave holds a 13th's share"
        );
    }

    #[test]
    fn every_peer_gets_one_unit_however_many_there_are() {
        assert_eq!(fair_share(192, 1000), 1);
        assert_eq!(fair_share(0, 3), 1);
        assert_eq!(fair_share(8, usize::MAX), 1);
    }
}
