//! A process's transport metrics for Prometheus: each module's counters
//! and each peer's ([`btl_core::engine::metrics`]), taken as a
//! [`Snapshot`] by the thread that serves the module and rendered in the
//! text format Prometheus scrapes (OpenMetrics 1.0, which Prometheus reads
//! natively) by the `prometheus-client` crate.
//!
//! The counting costs the data path an addition per event, in the engine;
//! nothing here runs on it. A [`MetricsServer`] answers `GET /metrics` on
//! a thread of its own from the latest snapshot the serving thread
//! [offered](MetricsServer::offer): a scrape asks for a fresh one and
//! waits a moment for it (a quarter of a second), so a module whose
//! thread turns is read as it is; one whose thread sleeps longer is read
//! as it was last offered (unasked, a snapshot is taken at most once a
//! second, looked for every 64 turns).
//!
//! Series are bounded: at most [`MetricsServer::peer_series`] peers of a
//! module get series of their own, the busiest first; the rest are summed
//! under `peer="other"`. The module totals count every peer the module has
//! known, those since gone included, so they never go backwards.

mod http;

use std::borrow::Cow;

use btl_core::btl::LostReason;
use btl_core::engine::Usage;
use btl_core::engine::metrics::{ModuleMetrics, PeerMetrics, PeerReport, Refused};
use btl_core::engine::peer::PeerState;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

pub use http::{CONTENT_TYPE, MetricsServer};

/// One module's metrics at one instant, as its serving thread took them.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its component (`tcp`, `udp`): the `component` label.
    pub component: &'static str,
    /// Its totals.
    pub module: ModuleMetrics,
    /// Its storage in use.
    pub usage: Usage,
    /// Each peer on record.
    pub peers: Vec<PeerReport>,
}

/// What can be observed: a module, or the modules of a `Bml`.
pub trait Observed {
    /// Appends a snapshot of each module with an engine (`self` and `sm`
    /// have none).
    fn snapshots(&self, out: &mut Vec<Snapshot>);
}

/// The peer label of a peer's series.
fn peer_label(report: &PeerReport) -> String {
    if report.proc.is_unnamed() {
        format!("unnamed-{}", report.endpoint.0)
    } else {
        report.proc.to_string()
    }
}

/// The state label of a peer's `btl_peer_state` series.
fn state_label(state: PeerState) -> &'static str {
    match state {
        PeerState::Idle => "idle",
        PeerState::Connecting { .. } => "connecting",
        PeerState::Open => "open",
        PeerState::Lost(_) => "lost",
    }
}

/// A module's peers as they get series: at most `most` of their own (the
/// most bytes moved first), the rest summed as one.
fn bounded(peers: &[PeerReport], most: usize) -> (Vec<&PeerReport>, Option<(usize, PeerMetrics)>) {
    let mut order: Vec<&PeerReport> = peers.iter().collect();
    order.sort_by_key(|p| std::cmp::Reverse(p.metrics.bytes_sent + p.metrics.bytes_received));
    if order.len() <= most {
        return (order, None);
    }
    let rest = order.split_off(most);
    let mut sum = PeerMetrics::default();
    for p in &rest {
        sum.add(&p.metrics);
    }
    (order, Some((rest.len(), sum)))
}

/// Renders `snapshots` in the OpenMetrics text format, at most
/// `peer_series` peers per module with series of their own.
pub fn render(snapshots: &[Snapshot], peer_series: usize) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Render {
        snapshots: snapshots.to_vec(),
        peer_series,
    }));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The collector a scrape renders: the snapshots it was given.
#[derive(Debug)]
struct Render {
    snapshots: Vec<Snapshot>,
    peer_series: usize,
}

/// Labels of one series.
type Labels = Vec<(Cow<'static, str>, Cow<'static, str>)>;

/// One series' value.
#[derive(Debug, Clone, Copy)]
enum Value {
    Count(u64),
    Seconds(f64),
    Gauge(i64),
    GaugeSeconds(f64),
}

/// A metric family: its name, help, unit, and its series.
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    series: Vec<(Labels, Value)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, unit: Option<Unit>) -> Self {
        Family {
            name,
            help,
            unit,
            series: Vec::new(),
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some((_, first)) = self.series.first() else {
            return Ok(());
        };
        let kind = match first {
            Value::Count(_) => ConstCounter::new(0u64).metric_type(),
            Value::Seconds(_) => ConstCounter::new(0f64).metric_type(),
            Value::Gauge(_) => ConstGauge::new(0i64).metric_type(),
            Value::GaugeSeconds(_) => ConstGauge::new(0f64).metric_type(),
        };
        let mut family =
            encoder.encode_descriptor(self.name, self.help, self.unit.as_ref(), kind)?;
        for (labels, value) in &self.series {
            let series = family.encode_family(labels)?;
            match *value {
                Value::Count(n) => ConstCounter::new(n).encode(series)?,
                Value::Seconds(s) => ConstCounter::new(s).encode(series)?,
                Value::Gauge(n) => ConstGauge::new(n).encode(series)?,
                Value::GaugeSeconds(s) => ConstGauge::new(s).encode(series)?,
            }
        }
        Ok(())
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (Cow::Borrowed(*k), Cow::Owned((*v).to_owned())))
        .collect()
}

fn seconds(d: btl_core::time::Duration) -> f64 {
    d.as_nanos() as f64 / 1e9
}

/// A counter every peer and every module total has: the name of the
/// peer's series, the module's, its help, and how to read it.
struct Counter {
    peer: &'static str,
    module: &'static str,
    help: &'static str,
    read: fn(&PeerMetrics) -> u64,
}

const COUNTERS: [Counter; 10] = [
    Counter {
        peer: "btl_peer_messages_sent",
        module: "btl_messages_sent",
        help: "Messages (SENDs) put on a link for the first time.",
        read: |m| m.messages_sent,
    },
    Counter {
        peer: "btl_peer_messages_received",
        module: "btl_messages_received",
        help: "Messages delivered in order.",
        read: |m| m.messages_received,
    },
    Counter {
        peer: "btl_peer_sent_bytes",
        module: "btl_sent_bytes",
        help: "Payload bytes sent: messages, puts and answers to gets.",
        read: |m| m.bytes_sent,
    },
    Counter {
        peer: "btl_peer_received_bytes",
        module: "btl_received_bytes",
        help: "Payload bytes received: messages and data that landed.",
        read: |m| m.bytes_received,
    },
    Counter {
        peer: "btl_peer_retransmissions",
        module: "btl_retransmissions",
        help: "Packets put on a link again.",
        read: |m| m.retransmissions,
    },
    Counter {
        peer: "btl_peer_duplicates",
        module: "btl_duplicates",
        help: "Numbered packets that came again or outside the window, dropped.",
        read: |m| m.duplicates,
    },
    Counter {
        peer: "btl_peer_window_stalls",
        module: "btl_window_stalls",
        help: "Times the send window filled with messages waiting.",
        read: |m| m.window_stalls,
    },
    Counter {
        peer: "btl_peer_link_flaps",
        module: "btl_link_flaps",
        help: "Open links that broke or timed out.",
        read: |m| m.link_flaps,
    },
    Counter {
        peer: "btl_peer_reconnections",
        module: "btl_reconnections",
        help: "Times a peer opened again after losing every link.",
        read: |m| m.reconnections,
    },
    Counter {
        peer: "btl_peer_restarts",
        module: "btl_restarts",
        help: "New starts of a peer's process.",
        read: |m| m.restarts,
    },
];

impl Collector for Render {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut families = Vec::new();
        let mut peer_counters: Vec<Family> = COUNTERS
            .iter()
            .map(|c| Family::new(c.peer, c.help, None))
            .collect();
        let mut module_counters: Vec<Family> = COUNTERS
            .iter()
            .map(|c| Family::new(c.module, c.help, None))
            .collect();
        let mut starved = Family::new(
            "btl_peer_credit_starved",
            "Time with a message waiting and no credit to send it.",
            Some(Unit::Seconds),
        );
        let mut module_starved = Family::new(
            "btl_credit_starved",
            "Time peers waited for credit, summed.",
            Some(Unit::Seconds),
        );
        let mut peer_losses = Family::new(
            "btl_peer_losses",
            "Times a peer was given up, by reason.",
            None,
        );
        let mut module_losses = Family::new("btl_losses", "Peers given up, by reason.", None);
        let mut refusals = Family::new(
            "btl_refusals",
            "Strangers and connections refused before a link opened, by reason.",
            None,
        );
        let mut rtt = Family::new(
            "btl_peer_rtt",
            "Smoothed round-trip time, queueing and the peer's acknowledgement delay included.",
            Some(Unit::Seconds),
        );
        let mut rttvar = Family::new(
            "btl_peer_rttvar",
            "Round-trip time variation (RFC 6298's RTTVAR).",
            Some(Unit::Seconds),
        );
        let mut state = Family::new("btl_peer_state", "1 for the state a peer is in.", None);
        let mut peers = Family::new("btl_peers", "Peers on record.", None);
        let mut links = Family::new("btl_links", "Links open or opening.", None);
        let mut unlisted = Family::new(
            "btl_peers_summed",
            "Peers on record whose series are summed under peer=\"other\" (beyond the series limit).",
            None,
        );
        for s in &self.snapshots {
            let c = s.component;
            let (listed, rest) = bounded(&s.peers, self.peer_series);
            let mut each = |peer: &str, m: &PeerMetrics, st: Option<PeerState>| {
                let l = labels(&[("component", c), ("peer", peer)]);
                for (family, c) in peer_counters.iter_mut().zip(&COUNTERS) {
                    family.series.push((l.clone(), Value::Count((c.read)(m))));
                }
                starved
                    .series
                    .push((l.clone(), Value::Seconds(seconds(m.credit_starved))));
                for (reason, n) in m.losses.iter().filter(|(_, n)| *n > 0) {
                    let l = labels(&[("component", c), ("peer", peer), ("reason", reason.label())]);
                    peer_losses.series.push((l, Value::Count(n)));
                }
                if let Some(st) = st {
                    if let Some(srtt) = m.srtt {
                        rtt.series
                            .push((l.clone(), Value::GaugeSeconds(seconds(srtt))));
                        rttvar
                            .series
                            .push((l.clone(), Value::GaugeSeconds(seconds(m.rttvar))));
                    }
                    let l = labels(&[("component", c), ("peer", peer), ("state", state_label(st))]);
                    state.series.push((l, Value::Gauge(1)));
                }
            };
            for p in &listed {
                each(&peer_label(p), &p.metrics, Some(p.state));
            }
            let summed = rest.map_or(0, |(n, _)| n);
            if let Some((_, sum)) = &rest {
                each("other", sum, None);
            }
            let l = labels(&[("component", c)]);
            let total = &s.module.peers;
            for (family, c) in module_counters.iter_mut().zip(&COUNTERS) {
                family
                    .series
                    .push((l.clone(), Value::Count((c.read)(total))));
            }
            module_starved
                .series
                .push((l.clone(), Value::Seconds(seconds(total.credit_starved))));
            for reason in LostReason::ALL {
                let l = labels(&[("component", c), ("reason", reason.label())]);
                module_losses
                    .series
                    .push((l, Value::Count(total.losses.get(reason))));
            }
            for why in Refused::ALL {
                let l = labels(&[("component", c), ("reason", why.label())]);
                refusals
                    .series
                    .push((l, Value::Count(s.module.refusals.get(why))));
            }
            peers
                .series
                .push((l.clone(), Value::Gauge(s.usage.peers as i64)));
            links
                .series
                .push((l.clone(), Value::Gauge(s.usage.links as i64)));
            unlisted.series.push((l, Value::Gauge(summed as i64)));
        }
        families.extend(module_counters);
        families.extend([
            module_starved,
            module_losses,
            refusals,
            peers,
            links,
            unlisted,
        ]);
        families.extend(peer_counters);
        families.extend([starved, peer_losses, rtt, rttvar, state]);
        for f in &families {
            f.encode(&mut encoder)?;
        }
        Ok(())
    }
}
