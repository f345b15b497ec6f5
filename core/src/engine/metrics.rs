//! What an engine counts of its traffic, for the people running a job: per
//! peer, messages and bytes each way, retransmissions, duplicates, round
//! trips, time without credits, window stalls, link flaps, reconnections
//! and losses by reason; per module, the sum over every peer it has known
//! and what it refused, by reason.
//!
//! Counting allocates nothing and costs an addition where it happens. A
//! peer's counters live in its record and follow it through a restart of
//! its process; when the record is freed they join the module's sum of
//! departed peers, so a module's totals never go backwards however many
//! peers come and go, and per-peer figures are bounded by the peer table.

use crate::btl::LostReason;
use crate::endpoint::{EndpointId, ProcName};
use crate::time::{Duration, Instant};
use crate::wire::CloseReason;

use super::address::Refusal;
use super::peer::PeerState;
use super::rtt::RttEstimator;

/// One peer's traffic since this engine first knew it (across restarts of
/// its process), as [`Engine::peer_metrics`](super::Engine::peer_metrics)
/// reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerMetrics {
    /// Messages (SENDs) put on a link for the first time.
    pub messages_sent: u64,
    /// Payload bytes sent: messages' payloads and the data of puts and of
    /// the answers to the peer's gets.
    pub bytes_sent: u64,
    /// Messages delivered in order.
    pub messages_received: u64,
    /// Payload bytes received: messages' payloads and data that landed.
    pub bytes_received: u64,
    /// Packets put on a link again: after a link broke, a retransmission
    /// timeout, or a hole a selective acknowledgement showed.
    pub retransmissions: u64,
    /// Numbered packets that arrived again or outside the receive window,
    /// and were dropped.
    pub duplicates: u64,
    /// Time with a message waiting and no credit to send it: the peer was
    /// slower to free what it received than this side to send.
    pub credit_starved: Duration,
    /// Times the send window filled with work still queued: the peer's
    /// acknowledgements, not credits, held sending back.
    pub window_stalls: u64,
    /// Open links to the peer that broke or timed out.
    pub link_flaps: u64,
    /// Times the peer opened again after losing every link.
    pub reconnections: u64,
    /// New starts of the peer's process (another epoch in a HELLO).
    pub restarts: u64,
    /// Times the peer was given up, by reason.
    pub losses: Losses,
    /// Smoothed round-trip time, once measured: the time from a packet
    /// being queued for a link to its acknowledgement (so it includes the
    /// peer's acknowledgement delay). A gauge: `None` in sums.
    pub srtt: Option<Duration>,
    /// Round-trip time variation (RFC 6298's RTTVAR). A gauge: zero in
    /// sums.
    pub rttvar: Duration,
}

impl PeerMetrics {
    /// Adds `other`'s counters to these (gauges are not summed).
    pub fn add(&mut self, other: &PeerMetrics) {
        self.messages_sent += other.messages_sent;
        self.bytes_sent += other.bytes_sent;
        self.messages_received += other.messages_received;
        self.bytes_received += other.bytes_received;
        self.retransmissions += other.retransmissions;
        self.duplicates += other.duplicates;
        self.credit_starved += other.credit_starved;
        self.window_stalls += other.window_stalls;
        self.link_flaps += other.link_flaps;
        self.reconnections += other.reconnections;
        self.restarts += other.restarts;
        for (reason, n) in other.losses.iter() {
            self.losses.0[reason as usize] += n;
        }
    }
}

/// Counts by [`LostReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses([u64; LostReason::ALL.len()]);

impl Losses {
    /// How many times for `reason`.
    pub fn get(&self, reason: LostReason) -> u64 {
        self.0[reason as usize]
    }

    /// Every reason and its count, zeros included, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (LostReason, u64)> + '_ {
        LostReason::ALL.iter().map(|&r| (r, self.0[r as usize]))
    }

    /// All losses together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Why an engine refused a stranger or a connection before it opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A stranger's datagram that did not parse.
    Garbage,
    /// A stranger's datagram that was no handshake.
    NotAHandshake,
    /// A COOKIE echoed wrong or too late (a forged or replayed address).
    BadCookie,
    /// A connection with every link slot in use.
    TooManyLinks,
    /// A connection from a source holding its share of the link slots.
    SourceFull,
    /// A handshake that broke the protocol.
    ProtocolError,
    /// A HELLO of another major protocol version.
    VersionMismatch,
    /// A handshake that did not prove the job key.
    AuthFailed,
    /// A handshake that did not finish in time.
    Timeout,
    /// A handshake given up for room: the handshake budget, or no peer
    /// slot.
    ResourceExhausted,
    /// A handshake that came while this process shut down.
    Shutdown,
    /// A handshake from a start of a process this side gave up.
    GaveUp,
    /// A handshake ended for another reason.
    Other,
}

impl Refused {
    /// Every reason, in the order counts are kept.
    pub const ALL: [Refused; 13] = [
        Refused::Garbage,
        Refused::NotAHandshake,
        Refused::BadCookie,
        Refused::TooManyLinks,
        Refused::SourceFull,
        Refused::ProtocolError,
        Refused::VersionMismatch,
        Refused::AuthFailed,
        Refused::Timeout,
        Refused::ResourceExhausted,
        Refused::Shutdown,
        Refused::GaveUp,
        Refused::Other,
    ];

    /// The refusal of a link that ends for `reason` before it opened;
    /// `None` for a redundant link closed in order (`Normal`).
    pub const fn of_close(reason: CloseReason) -> Option<Refused> {
        Some(match reason {
            CloseReason::Normal => return None,
            CloseReason::ProtocolError => Refused::ProtocolError,
            CloseReason::VersionMismatch => Refused::VersionMismatch,
            CloseReason::AuthFailed => Refused::AuthFailed,
            CloseReason::Timeout => Refused::Timeout,
            CloseReason::ResourceExhausted => Refused::ResourceExhausted,
            CloseReason::Shutdown => Refused::Shutdown,
            CloseReason::GaveUp => Refused::GaveUp,
            CloseReason::Other(_) => Refused::Other,
        })
    }

    /// A stranger's datagram refused for `refusal`.
    pub const fn of_stranger(refusal: &Refusal) -> Refused {
        match refusal {
            Refusal::Garbage(_) => Refused::Garbage,
            Refusal::NotAHandshake => Refused::NotAHandshake,
            Refusal::BadCookie => Refused::BadCookie,
        }
    }

    /// A short name in snake case, for a metric's label.
    pub const fn label(self) -> &'static str {
        match self {
            Refused::Garbage => "garbage",
            Refused::NotAHandshake => "not_a_handshake",
            Refused::BadCookie => "bad_cookie",
            Refused::TooManyLinks => "too_many_links",
            Refused::SourceFull => "source_full",
            Refused::ProtocolError => "protocol_error",
            Refused::VersionMismatch => "version_mismatch",
            Refused::AuthFailed => "auth_failed",
            Refused::Timeout => "timeout",
            Refused::ResourceExhausted => "resource_exhausted",
            Refused::Shutdown => "shutdown",
            Refused::GaveUp => "gave_up",
            Refused::Other => "other",
        }
    }
}

/// Counts by [`Refused`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals([u64; Refused::ALL.len()]);

impl Refusals {
    /// How many times for `why`.
    pub fn get(&self, why: Refused) -> u64 {
        self.0[why as usize]
    }

    /// Every reason and its count, zeros included, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (Refused, u64)> + '_ {
        Refused::ALL.iter().map(|&r| (r, self.0[r as usize]))
    }

    /// All refusals together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub(crate) fn count(&mut self, why: Refused) {
        self.0[why as usize] += 1;
    }
}

/// A module's traffic, as [`Engine::metrics`](super::Engine::metrics)
/// reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModuleMetrics {
    /// Every peer's counters summed, those of peers since forgotten
    /// included (the gauges are left out).
    pub peers: PeerMetrics,
    /// What was refused before a link opened, by reason.
    pub refusals: Refusals,
}

/// One peer on record and its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerReport {
    /// Its endpoint in this engine.
    pub endpoint: EndpointId,
    /// Its process (a stand-in [`ProcName::unnamed`] until the handshake
    /// of a peer reached by address names it).
    pub proc: ProcName,
    /// Where it is in its life.
    pub state: PeerState,
    /// Its traffic.
    pub metrics: PeerMetrics,
}

/// A peer's counters as the engine keeps them: the figures, and when the
/// peer ran out of credit or filled its window, to time and count those.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerCounters {
    counts: PeerMetrics,
    /// Since when a message has waited for credit.
    starved_since: Option<Instant>,
    /// The window is full with work queued, counted once until it moves.
    stalled: bool,
}

impl PeerCounters {
    pub(crate) fn sent_message(&mut self, bytes: usize) {
        self.counts.messages_sent += 1;
        self.counts.bytes_sent += bytes as u64;
    }

    pub(crate) fn sent_data(&mut self, bytes: u64) {
        self.counts.bytes_sent += bytes;
    }

    pub(crate) fn received_message(&mut self, bytes: usize) {
        self.counts.messages_received += 1;
        self.counts.bytes_received += bytes as u64;
    }

    pub(crate) fn received_data(&mut self, bytes: u64) {
        self.counts.bytes_received += bytes;
    }

    pub(crate) fn retransmitted(&mut self) {
        self.counts.retransmissions += 1;
    }

    pub(crate) fn duplicate(&mut self) {
        self.counts.duplicates += 1;
    }

    pub(crate) fn link_flapped(&mut self) {
        self.counts.link_flaps += 1;
    }

    pub(crate) fn reconnected(&mut self) {
        self.counts.reconnections += 1;
    }

    pub(crate) fn restarted(&mut self) {
        self.counts.restarts += 1;
    }

    pub(crate) fn lost(&mut self, reason: LostReason) {
        self.counts.losses.0[reason as usize] += 1;
    }

    /// A message waits at `now` with no credit to send it.
    pub(crate) fn out_of_credit(&mut self, now: Instant) {
        self.starved_since.get_or_insert(now);
    }

    /// Credit came (or the wait ended otherwise) at `now`.
    pub(crate) fn credit_back(&mut self, now: Instant) {
        if let Some(since) = self.starved_since.take() {
            self.counts.credit_starved += now.since(since);
        }
    }

    /// The window is full and work waits.
    pub(crate) fn window_full(&mut self) {
        if !self.stalled {
            self.stalled = true;
            self.counts.window_stalls += 1;
        }
    }

    /// The window moved: acknowledgements freed places.
    pub(crate) fn window_moved(&mut self) {
        self.stalled = false;
    }

    /// The figures as of `now`, a wait for credit still under way
    /// included, with the round trips `rtt` measures.
    pub(crate) fn read(&self, now: Instant, rtt: &RttEstimator) -> PeerMetrics {
        let mut m = self.counts;
        if let Some(since) = self.starved_since {
            m.credit_starved += now.since(since);
        }
        m.srtt = rtt.srtt();
        m.rttvar = rtt.rttvar();
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rtt::RttConfig;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn time_without_credit_counts_each_wait_once_and_one_under_way() {
        let rtt = RttEstimator::with_bounds(RttConfig::RFC6298);
        let mut c = PeerCounters::default();
        c.out_of_credit(at(10));
        c.out_of_credit(at(12));
        c.credit_back(at(15));
        c.credit_back(at(20));
        assert_eq!(
            c.read(at(30), &rtt).credit_starved,
            Duration::from_millis(5)
        );
        c.out_of_credit(at(40));
        assert_eq!(
            c.read(at(42), &rtt).credit_starved,
            Duration::from_millis(7)
        );
    }

    #[test]
    fn a_full_window_counts_once_until_it_moves() {
        let mut c = PeerCounters::default();
        c.window_full();
        c.window_full();
        c.window_moved();
        c.window_full();
        assert_eq!(c.counts.window_stalls, 2);
    }

    #[test]
    fn sums_add_counters_and_leave_gauges_out() {
        let mut a = PeerMetrics {
            messages_sent: 1,
            bytes_sent: 8,
            srtt: Some(Duration::from_micros(5)),
            ..PeerMetrics::default()
        };
        a.losses.0[LostReason::Timeout as usize] = 2;
        let mut sum = PeerMetrics::default();
        sum.add(&a);
        sum.add(&a);
        assert_eq!(sum.messages_sent, 2);
        assert_eq!(sum.bytes_sent, 16);
        assert_eq!(sum.losses.get(LostReason::Timeout), 4);
        assert_eq!(sum.losses.total(), 4);
        assert_eq!(sum.srtt, None);
    }

    #[test]
    fn every_reason_has_its_own_count_and_label() {
        for (i, r) in Refused::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert!(Refused::ALL[..i].iter().all(|o| o.label() != r.label()));
        }
        for (i, r) in LostReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert!(LostReason::ALL[..i].iter().all(|o| o.label() != r.label()));
        }
        assert_eq!(Refused::of_close(CloseReason::Normal), None);
        assert_eq!(
            Refused::of_close(CloseReason::AuthFailed),
            Some(Refused::AuthFailed)
        );
    }
}
