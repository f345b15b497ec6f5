//! Whether an open peer still answers: when it was last heard, when it
//! was last asked for an acknowledgement (a keepalive or a probe), and
//! when to ask it next.
//!
//! A peer is asked after the keepalive interval of silence, at most a
//! third of the peer timeout, so that a live peer has answered a probe or
//! two before it would count as lost. Over a lossy transport it is also
//! asked after a retransmission timeout when this side's sends wait for
//! credits with nothing in flight (the ACK that granted them may have been
//! lost), and again when the last probe went unanswered (it may have been
//! lost). Over a stream, a probe unanswered for a whole interval finds the
//! stream silent: its bytes go nowhere, and the peer is connected again.
//!
//! The peer owns one and feeds it the time; this part decides, and the
//! peer acts (an ACK with `ACK_REQUEST`, a backoff, dropped links).

use crate::time::{Duration, Instant};

/// What the next probe is timed by, as the peer sees it now.
#[derive(Debug, Clone, Copy)]
pub struct ProbeRules {
    /// Silence before a keepalive; zero: none.
    pub keepalive: Duration,
    /// Silence before the peer counts as lost.
    pub peer_timeout: Duration,
    /// Whether the transport loses packets (datagrams).
    pub lossy: bool,
    /// Out of credit with nothing in flight: only the peer's next grant
    /// lets sends go on.
    pub starved: bool,
    /// The retransmission timeout.
    pub rto: Duration,
}

/// What a probe that came due does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Nothing is due.
    NotDue,
    /// A probe is to go out; `backoff`: the one before was unanswered, or
    /// the peer grants nothing, and the timeout grows.
    Sent {
        /// Whether the retransmission timeout backs off.
        backoff: bool,
    },
    /// The stream carries nothing any more: its last probe went
    /// unanswered for a whole interval.
    Silent,
}

/// When a peer was last heard and asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Liveness {
    last_heard: Instant,
    last_probe: Instant,
    /// A probe is to go out.
    probe_due: bool,
    /// The peer's streams carry nothing any more.
    silent: bool,
}

impl Liveness {
    /// The peer was heard from at `now` (a packet of its, or a link of its
    /// opening); whether that answers a probe that was unanswered.
    pub fn heard(&mut self, now: Instant) -> bool {
        let answered = self.unanswered();
        self.last_heard = now;
        answered
    }

    /// When it was last heard from.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// Whether the last probe is still unanswered.
    pub fn unanswered(&self) -> bool {
        self.last_probe > self.last_heard
    }

    /// When the peer is next asked for an acknowledgement, if ever.
    pub fn next_probe(&self, rules: &ProbeRules) -> Option<Instant> {
        let quiet_since = self.last_heard.max(self.last_probe);
        let interval = rules
            .keepalive
            .min(rules.peer_timeout / 3)
            .max(Duration::from_nanos(1));
        let keepalive = (!rules.keepalive.is_zero()).then(|| quiet_since + interval);
        let credit = (rules.lossy && rules.starved).then(|| quiet_since + rules.rto);
        let repeat = (rules.lossy && self.unanswered()).then(|| self.last_probe + rules.rto);
        [keepalive, credit, repeat].into_iter().flatten().min()
    }

    /// Time passed to `now`: a probe that came due goes out, or finds a
    /// stream silent.
    pub fn on_timeout(&mut self, now: Instant, rules: &ProbeRules) -> Probe {
        if self.next_probe(rules).is_none_or(|at| now < at) {
            return Probe::NotDue;
        }
        let backoff = rules.lossy && (rules.starved || self.unanswered());
        if !rules.lossy && self.unanswered() {
            self.silent = true;
            return Probe::Silent;
        }
        self.probe_now(now);
        Probe::Sent { backoff }
    }

    /// Asks the peer at once (a HELLO claims its process started again:
    /// is the old start alive?).
    pub fn probe_now(&mut self, now: Instant) {
        self.last_probe = now;
        self.probe_due = true;
    }

    /// Whether a probe is to go out; it goes now.
    pub fn take_probe(&mut self) -> bool {
        core::mem::take(&mut self.probe_due)
    }

    /// Whether the peer's streams were found silent; its links go now.
    pub fn take_silent(&mut self) -> bool {
        core::mem::take(&mut self.silent)
    }

    /// The peer is given up: no probe goes.
    pub fn stop(&mut self) {
        self.probe_due = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn rules(lossy: bool) -> ProbeRules {
        ProbeRules {
            keepalive: Duration::from_millis(100),
            peer_timeout: Duration::from_millis(3_000),
            lossy,
            starved: false,
            rto: Duration::from_millis(20),
        }
    }

    #[test]
    fn a_keepalive_goes_after_the_interval_of_silence() {
        let mut l = Liveness::default();
        l.heard(ms(50));
        let r = rules(false);
        assert_eq!(l.next_probe(&r), Some(ms(150)));
        assert_eq!(l.on_timeout(ms(149), &r), Probe::NotDue);
        assert_eq!(l.on_timeout(ms(150), &r), Probe::Sent { backoff: false });
        assert!(l.take_probe());
        assert!(!l.take_probe(), "one probe per time it came due");
        // The next waits an interval from the probe.
        assert_eq!(l.next_probe(&r), Some(ms(250)));
    }

    #[test]
    fn the_interval_is_at_most_a_third_of_the_peer_timeout() {
        let l = Liveness::default();
        let r = ProbeRules {
            keepalive: Duration::from_millis(5_000),
            ..rules(false)
        };
        assert_eq!(l.next_probe(&r), Some(ms(1_000)));
        let off = ProbeRules {
            keepalive: Duration::ZERO,
            ..rules(false)
        };
        assert_eq!(l.next_probe(&off), None, "no keepalive, no probe");
    }

    #[test]
    fn a_stream_whose_probe_goes_unanswered_for_an_interval_is_silent() {
        let mut l = Liveness::default();
        let r = rules(false);
        assert_eq!(l.on_timeout(ms(100), &r), Probe::Sent { backoff: false });
        assert!(l.take_probe());
        assert!(l.unanswered());
        assert_eq!(l.on_timeout(ms(200), &r), Probe::Silent);
        assert!(l.take_silent());
        assert!(!l.take_silent());
        assert!(!l.take_probe(), "a silent stream is not asked again");
    }

    #[test]
    fn an_answer_ends_the_wait_and_says_it_answered() {
        let mut l = Liveness::default();
        let r = rules(false);
        l.on_timeout(ms(100), &r);
        assert!(
            l.heard(ms(101)),
            "the first packet after a probe answers it"
        );
        assert!(!l.unanswered());
        assert!(!l.heard(ms(102)));
        assert_eq!(l.on_timeout(ms(200), &r), Probe::NotDue);
        assert_eq!(l.next_probe(&r), Some(ms(202)));
    }

    #[test]
    fn over_datagrams_an_unanswered_probe_is_repeated_after_a_timeout_with_backoff() {
        let mut l = Liveness::default();
        let r = rules(true);
        assert_eq!(l.on_timeout(ms(100), &r), Probe::Sent { backoff: false });
        assert_eq!(l.next_probe(&r), Some(ms(120)), "repeated after the rto");
        assert_eq!(l.on_timeout(ms(120), &r), Probe::Sent { backoff: true });
        assert!(!l.take_silent(), "a datagram peer is never silent");
    }

    #[test]
    fn over_datagrams_a_sender_out_of_credit_asks_after_a_timeout() {
        let mut l = Liveness::default();
        l.heard(ms(10));
        let r = ProbeRules {
            starved: true,
            ..rules(true)
        };
        assert_eq!(l.next_probe(&r), Some(ms(30)));
        assert_eq!(l.on_timeout(ms(30), &r), Probe::Sent { backoff: true });
        let stream = ProbeRules {
            starved: true,
            ..rules(false)
        };
        l.heard(ms(31));
        assert_eq!(
            l.next_probe(&stream),
            Some(ms(131)),
            "a stream loses no ACK"
        );
    }

    #[test]
    fn a_probe_asked_for_goes_at_once_and_a_lost_peer_sends_none() {
        let mut l = Liveness::default();
        l.probe_now(ms(5));
        assert!(l.unanswered());
        l.stop();
        assert!(!l.take_probe());
    }
}
