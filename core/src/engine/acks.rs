//! The acknowledgement a peer is owed: since when, for how many packets,
//! and whether it may wait for a packet going back to carry it.

use crate::time::{Duration, Instant};

/// Received packets and grants after which an acknowledgement goes at
/// once, without waiting for its delay: the sender keeps going.
pub const ACK_BATCH: u32 = 8;

/// What this side owes its peer in acknowledgements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckOwed {
    since: Option<Instant>,
    pending: u32,
    urgent: bool,
}

impl AckOwed {
    /// Notes an acknowledgement owed at `now` (a packet received, credits
    /// given back); `urgent` when it must not wait (a probe, a duplicate,
    /// a reconnection).
    pub fn owe(&mut self, now: Instant, urgent: bool) {
        self.since.get_or_insert(now);
        self.pending = self.pending.saturating_add(1);
        self.urgent |= urgent;
    }

    /// Whether an acknowledgement is owed at all.
    pub fn is_owed(&self) -> bool {
        self.since.is_some()
    }

    /// The acknowledgement went (with a packet, or alone).
    pub fn sent(&mut self) {
        *self = AckOwed::default();
    }

    /// Whether the acknowledgement owed must go now: it may wait `delay`
    /// (`None`: never) for a packet going back to carry it, unless it is
    /// urgent or a run of [`ACK_BATCH`] built up.
    pub fn is_due(&self, now: Instant, delay: Option<Duration>) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        let waits = delay
            .is_some_and(|delay| !self.urgent && self.pending < ACK_BATCH && now - since < delay);
        !waits
    }

    /// When the acknowledgement owed stops waiting (with a `delay`).
    pub fn deadline(&self, delay: Option<Duration>) -> Option<Instant> {
        Some(self.since? + delay?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAY: Option<Duration> = Some(Duration::from_micros(50));

    fn at(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn an_acknowledgement_waits_its_delay_then_is_due() {
        let mut a = AckOwed::default();
        assert!(!a.is_due(at(0), DELAY), "nothing owed");
        a.owe(at(10), false);
        assert!(!a.is_due(at(59), DELAY));
        assert_eq!(a.deadline(DELAY), Some(at(60)));
        assert!(a.is_due(at(60), DELAY));
        a.sent();
        assert!(!a.is_due(at(100), DELAY), "nothing owed any more");
        assert_eq!(a.deadline(DELAY), None);
    }

    #[test]
    fn urgent_runs_and_undelayed_acknowledgements_go_at_once() {
        let mut a = AckOwed::default();
        a.owe(at(0), true);
        assert!(a.is_due(at(0), DELAY), "urgent");
        let mut b = AckOwed::default();
        for _ in 0..ACK_BATCH {
            b.owe(at(0), false);
        }
        assert!(b.is_due(at(0), DELAY), "a run");
        let mut c = AckOwed::default();
        c.owe(at(0), false);
        assert!(c.is_due(at(0), None), "no delay");
        assert_eq!(c.deadline(None), None);
    }
}
