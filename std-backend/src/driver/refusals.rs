//! Refusals of strangers, counted by reason and logged without flooding
//! the log: the first few from a source in an interval are logged one by
//! one, as they happen; the rest are counted, and once the interval is
//! over one line sums them up ("refused 14900 datagrams from
//! 127.0.0.1:43094 in the last 10 s: protocol error"). A source is an IP
//! address for connections (each comes from a new port) and an IP address
//! and port for datagrams.
//!
//! The counts by reason are kept for the module's life, for an operator
//! (`btl serve` prints them when it ends) and for tests.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use btl_core::endpoint::ProcName;
use btl_core::engine::LinkEnd;
use btl_core::time::{self, Instant};
use btl_core::wire::CloseReason;

/// What was refused: a connection or a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refused {
    /// A connection (its handshake, or the connection itself).
    Connection,
    /// A datagram (over UDP, each datagram of a stranger is refused alone).
    Datagram,
}

impl Refused {
    fn plural(self) -> &'static str {
        match self {
            Refused::Connection => "connections",
            Refused::Datagram => "datagrams",
        }
    }
}

/// Refusals logged one by one per source and interval before the rest are
/// summed up.
pub const LOGGED_PER_INTERVAL: u32 = 5;
/// The interval of summaries.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Refusals logged one by one per interval, from all sources together: a
/// flood from many addresses logs no more than this.
pub const LOGGED_PER_INTERVAL_ALL: u32 = 50;
/// Summary lines per interval at most: the sources with the most
/// refusals, the rest summed up in one more line.
pub const SUMMARIES_PER_INTERVAL: usize = 8;
/// Sources followed one by one at most; refusals from more sources in one
/// interval (a flood with forged addresses) are summed up together.
const MAX_SOURCES: usize = 1024;

/// One source's refusals in the current interval.
#[derive(Debug, Clone)]
struct Window {
    started: Instant,
    count: u64,
    logged: u32,
    kind: Refused,
    /// The reason of the latest refusal, for the summary.
    reason: &'static str,
}

/// A line to log that sums up refusals no longer logged one by one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// `None` for the refusals of sources beyond those followed one by one.
    pub source: Option<SocketAddr>,
    /// What was refused.
    pub kind: Refused,
    /// Refusals not logged one by one in the interval.
    pub unlogged: u64,
    /// The interval's length.
    pub interval: Duration,
    /// The latest reason.
    pub reason: &'static str,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refused {} more {} from ",
            self.unlogged,
            self.kind.plural()
        )?;
        match self.source {
            Some(at) if at.port() == 0 => write!(f, "{}", at.ip())?,
            Some(at) => write!(f, "{at}")?,
            None => f.write_str("other sources")?,
        }
        write!(
            f,
            " in the last {} s: {}",
            self.interval.as_secs(),
            self.reason
        )
    }
}

/// Refusals of one module: counts by reason, and what to log.
#[derive(Debug)]
pub struct Refusals {
    interval: time::Duration,
    by_reason: BTreeMap<&'static str, u64>,
    sources: HashMap<SocketAddr, Window>,
    /// Refusals from sources beyond [`MAX_SOURCES`].
    others: Option<Window>,
    /// Refusals logged one by one in the current interval, all sources
    /// together, and when it started.
    logged_all: u32,
    all_started: Instant,
    /// When [`summaries`](Refusals::summaries) looks at the sources next:
    /// it is called on every pass of a module, and looks only now and then.
    next_look: Instant,
}

impl Default for Refusals {
    fn default() -> Self {
        Self::new(INTERVAL)
    }
}

impl Refusals {
    /// No refusals yet; summaries every `interval`.
    pub fn new(interval: Duration) -> Self {
        Refusals {
            interval: time::Duration::from(interval).max(time::Duration::from_nanos(1)),
            by_reason: BTreeMap::new(),
            sources: HashMap::new(),
            others: None,
            logged_all: 0,
            all_started: Instant::ZERO,
            next_look: Instant::ZERO,
        }
    }

    /// Counts one refusal of `kind` from `from` at `now` (on the module's
    /// clock) for `reason`; whether to log it on its own.
    /// Connections are counted by IP address, datagrams by address and
    /// port.
    pub fn record(
        &mut self,
        now: Instant,
        from: Option<SocketAddr>,
        kind: Refused,
        reason: &'static str,
    ) -> bool {
        *self.by_reason.entry(reason).or_insert(0) += 1;
        let key = from.map(|mut at| {
            if kind == Refused::Connection {
                at.set_port(0);
            }
            at
        });
        let fresh = Window {
            started: now,
            count: 0,
            logged: 0,
            kind,
            reason,
        };
        let window = match key {
            Some(at) if self.sources.contains_key(&at) || self.sources.len() < MAX_SOURCES => {
                self.sources.entry(at).or_insert(fresh)
            }
            _ => self.others.get_or_insert(fresh),
        };
        window.count += 1;
        window.reason = reason;
        window.kind = kind;
        if now - self.all_started >= self.interval {
            self.all_started = now;
            self.logged_all = 0;
        }
        if window.logged < LOGGED_PER_INTERVAL && self.logged_all < LOGGED_PER_INTERVAL_ALL {
            window.logged += 1;
            self.logged_all += 1;
            return true;
        }
        false
    }

    /// The summaries of intervals over by `now`, each once; a source's
    /// next refusal starts a new interval (logged one by one again).
    pub fn summaries(&mut self, now: Instant) -> Vec<Summary> {
        let interval = self.interval;
        if now < self.next_look {
            return Vec::new();
        }
        self.next_look = now + interval / 10;
        let over = |w: &Window| now - w.started >= interval;
        let mut out = Vec::new();
        let summary = |source, w: &Window| {
            let unlogged = w.count - u64::from(w.logged);
            (unlogged > 0).then(|| Summary {
                source,
                kind: w.kind,
                unlogged,
                interval: interval.into(),
                reason: w.reason,
            })
        };
        self.sources.retain(|&at, w| {
            if !over(w) {
                return true;
            }
            out.extend(summary(Some(at), w));
            false
        });
        let mut rest = self
            .others
            .take_if(|w| over(w))
            .and_then(|w| summary(None, &w));
        // The sources with the most refusals by name; the others together.
        out.sort_by(|a, b| b.unlogged.cmp(&a.unlogged).then(a.source.cmp(&b.source)));
        for extra in out.split_off(out.len().min(SUMMARIES_PER_INTERVAL)) {
            let r = rest.get_or_insert(Summary {
                source: None,
                unlogged: 0,
                ..extra
            });
            r.unlogged += extra.unlogged;
        }
        out.extend(rest);
        out
    }

    /// Logs why the engine closes a link, once, as its connection with
    /// `remote` goes, from module `component` of process `me`: a refused
    /// handshake (an unknown process, a wrong job key, another protocol
    /// version, garbage, no room) or an abnormal close as a warning with
    /// the reason, counted and held to the per-source limit of lines; an
    /// orderly close only at debug level.
    pub fn link_end(
        &mut self,
        now: Instant,
        (component, me): (&str, ProcName),
        remote: Option<SocketAddr>,
        end: Option<LinkEnd>,
        kind: Refused,
    ) {
        let Some(end) = end else {
            return;
        };
        let at = match remote {
            Some(at) => format!("{at}"),
            None => "a peer whose address is gone".to_owned(),
        };
        let reason = end.reason;
        let by = if end.by_peer { "the peer" } else { "this side" };
        // Goodbyes and redundant links are no refusal; nor is a peer given
        // up, whose loss is told on its own.
        if matches!(
            reason,
            CloseReason::Normal | CloseReason::Shutdown | CloseReason::GaveUp
        ) {
            tracing::debug!("{component} {me}: link with {at} closed by {by}: {reason}");
            return;
        }
        if let Some(lost) = end.lost {
            // A verified peer this side gave up for its own doing: what
            // it did, in the engine's words.
            let why = lost.description();
            if self.record(now, remote, kind, why) {
                tracing::warn!("{component} {me}: gave up the peer at {at}: {why}");
            }
            return;
        }
        if !self.record(now, remote, kind, reason.description()) {
            return;
        }
        if !end.verified && !end.by_peer {
            tracing::warn!("{component} {me}: refused a connection with {at}: {reason}");
        } else if !end.verified {
            tracing::warn!("{component} {me}: {at} refused the connection: {reason}");
        } else {
            tracing::warn!("{component} {me}: link with {at} closed by {by}: {reason}");
        }
    }

    /// Logs the summaries due at `now` (see [`summaries`](Self::summaries)).
    #[inline]
    pub fn log_summaries(&mut self, now: Instant, who: (&str, ProcName)) {
        // Asked on every pass: at once unless it is time to look.
        if now >= self.next_look {
            self.log_due_summaries(now, who);
        }
    }

    fn log_due_summaries(&mut self, now: Instant, (component, me): (&str, ProcName)) {
        for summary in self.summaries(now) {
            tracing::warn!("{component} {me}: {summary}");
        }
    }

    /// Refusals since the module started, by reason.
    pub fn by_reason(&self) -> &BTreeMap<&'static str, u64> {
        &self.by_reason
    }

    /// Refusals since the module started.
    pub fn total(&self) -> u64 {
        self.by_reason.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// The instant `ns` nanoseconds after the start of the clock.
    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    fn at(s: &str) -> Option<SocketAddr> {
        Some(s.parse().expect("address"))
    }

    #[test]
    fn the_first_refusals_are_logged_then_one_summary_per_interval() {
        let mut r = Refusals::new(Duration::from_secs(10));
        let logged = (0..14_900)
            .filter(|&i| {
                r.record(
                    t(i),
                    at("127.0.0.1:43094"),
                    Refused::Datagram,
                    "protocol error",
                )
            })
            .count();
        assert_eq!(logged, LOGGED_PER_INTERVAL as usize);
        assert!(r.summaries(t(9 * S)).is_empty(), "the interval is not over");
        let sums = r.summaries(t(11 * S));
        assert_eq!(sums.len(), 1);
        assert_eq!(
            sums[0].to_string(),
            "refused 14895 more datagrams from 127.0.0.1:43094 in the last 10 s: protocol error"
        );
        assert!(r.summaries(t(30 * S)).is_empty(), "each summary once");
        // A new interval logs its first refusals again.
        assert!(r.record(
            t(21 * S),
            at("127.0.0.1:43094"),
            Refused::Datagram,
            "timeout"
        ));
        assert_eq!(r.by_reason()["protocol error"], 14_900);
        assert_eq!(r.by_reason()["timeout"], 1);
        assert_eq!(r.total(), 14_901);
    }

    #[test]
    fn connections_are_counted_by_address_and_datagrams_by_port_too() {
        let mut r = Refusals::new(Duration::from_secs(1));
        for port in 1000..1010 {
            r.record(
                t(0),
                at(&format!("10.0.0.1:{port}")),
                Refused::Connection,
                "timeout",
            );
            r.record(
                t(0),
                at(&format!("10.0.0.2:{port}")),
                Refused::Datagram,
                "timeout",
            );
        }
        let sums = r.summaries(t(S));
        // One address for the connections; each datagram port logged alone.
        assert_eq!(sums.len(), 1);
        assert_eq!(
            sums[0].to_string(),
            "refused 5 more connections from 10.0.0.1 in the last 1 s: timeout"
        );
    }

    #[test]
    fn a_flood_of_sources_is_summed_up_together() {
        let mut r = Refusals::new(Duration::from_secs(1));
        let mut logged = 0;
        for i in 0..(MAX_SOURCES as u32 + 100) {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            let from = SocketAddr::new(ip.into(), 9);
            logged += usize::from(r.record(t(0), Some(from), Refused::Datagram, "protocol error"));
        }
        assert_eq!(logged, LOGGED_PER_INTERVAL_ALL as usize);
        let sums = r.summaries(t(S));
        assert_eq!(sums.len(), SUMMARIES_PER_INTERVAL + 1);
        let unlogged: u64 = sums.iter().map(|s| s.unlogged).sum();
        assert_eq!(
            unlogged,
            u64::from(MAX_SOURCES as u32 + 100 - LOGGED_PER_INTERVAL_ALL)
        );
        assert_eq!(sums.last().and_then(|s| s.source), None);
    }
}
