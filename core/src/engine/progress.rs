//! Progress: whether a peer that keeps answering also keeps moving.
//!
//! Silence is not the only way a peer can hold what this side lends it.
//! One that answers every keepalive but never acknowledges the packets it
//! was sent keeps them (and their fragments) in this side's send window;
//! one that numbers its packets with a gap it never fills keeps the
//! packets behind the gap (and their fragments and event places) in this
//! side's receive window. Either is as good as gone, and is lost after the
//! peer timeout as a silent one is.
//!
//! [`Progress`] notes since when each direction has waited without
//! moving; the peer turns that into its `Stalled` deadline.

use crate::time::{Duration, Instant};

/// Since when each direction of one peer has waited without moving.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Since when packets this side sent have waited for an
    /// acknowledgement with none of them acknowledged: from the first one
    /// sent into an empty window, then from each acknowledgement that
    /// left some outstanding.
    unacked_since: Option<Instant>,
    /// Since when packets the peer sent past a gap have waited for it to
    /// close with nothing delivered in order.
    gap_since: Option<Instant>,
}

impl Progress {
    /// A packet went into the send window at `now`.
    pub fn on_sent(&mut self, now: Instant) {
        self.unacked_since.get_or_insert(now);
    }

    /// An acknowledgement at `now` released `released` packets, leaving
    /// `outstanding` unacknowledged. One that releases nothing changes
    /// nothing: repeating an old acknowledgement is not progress.
    pub fn on_acked(&mut self, now: Instant, released: usize, outstanding: usize) {
        if released > 0 {
            self.unacked_since = (outstanding > 0).then_some(now);
        }
    }

    /// The peer's packets were taken at `now`: `delivered` of them in order,
    /// `held` waiting past a gap.
    pub fn on_received(&mut self, now: Instant, delivered: usize, held: usize) {
        if held == 0 {
            self.gap_since = None;
        } else if delivered > 0 || self.gap_since.is_none() {
            self.gap_since = Some(now);
        }
    }

    /// A link opened at `now` (a first one, or one after a reconnection):
    /// what waits is measured from here, as the time without a link was the
    /// network's, not the peer's.
    pub fn restart(&mut self, now: Instant, unacked: usize, held: usize) {
        self.unacked_since = (unacked > 0).then_some(now);
        self.gap_since = (held > 0).then_some(now);
    }

    /// When the peer counts as stalled if nothing moves: `timeout` after
    /// the longer wait began.
    pub fn stalled_by(&self, timeout: Duration) -> Option<Instant> {
        let since = match (self.unacked_since, self.gap_since) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(since + timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(2);

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    #[test]
    fn nothing_outstanding_never_stalls() {
        let mut p = Progress::default();
        assert_eq!(p.stalled_by(TIMEOUT), None);
        p.on_sent(ms(1));
        p.on_acked(ms(2), 1, 0);
        p.on_received(ms(3), 4, 0);
        assert_eq!(p.stalled_by(TIMEOUT), None, "all acknowledged, no gap");
    }

    #[test]
    fn acknowledgements_that_release_nothing_are_no_progress() {
        let mut p = Progress::default();
        p.on_sent(ms(10));
        p.on_sent(ms(20));
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(2010)), "from the first");
        // A peer that acknowledges 0 again and again.
        for t in [100, 500, 1500] {
            p.on_acked(ms(t), 0, 2);
        }
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(2010)));
        p.on_acked(ms(1800), 1, 1);
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(3800)), "one released");
        p.on_sent(ms(1900));
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(3800)), "still from the ack");
    }

    #[test]
    fn a_gap_that_never_closes_stalls_even_as_packets_keep_coming() {
        let mut p = Progress::default();
        p.on_received(ms(5), 0, 1);
        for t in [50, 400, 1900] {
            p.on_received(ms(t), 0, 3);
        }
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(2005)));
        p.on_received(ms(1950), 2, 1);
        assert_eq!(
            p.stalled_by(TIMEOUT),
            Some(ms(3950)),
            "delivered in order: a new gap is measured from now"
        );
        p.on_received(ms(2000), 1, 0);
        assert_eq!(p.stalled_by(TIMEOUT), None, "closed");
    }

    #[test]
    fn the_earlier_of_both_directions_counts() {
        let mut p = Progress::default();
        p.on_received(ms(100), 0, 2);
        p.on_sent(ms(300));
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(2100)));
    }

    #[test]
    fn a_new_link_measures_from_its_opening() {
        let mut p = Progress::default();
        p.on_sent(ms(1));
        p.on_received(ms(1), 0, 1);
        p.restart(ms(5000), 3, 0);
        assert_eq!(p.stalled_by(TIMEOUT), Some(ms(7000)));
        p.restart(ms(6000), 0, 0);
        assert_eq!(p.stalled_by(TIMEOUT), None);
    }
}
