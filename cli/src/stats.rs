//! `btl stats`: a running process's metrics, read from its metrics
//! endpoint (`btl serve --metrics ADDR`, or a service's
//! [`MetricsServer`](btl_std::metrics::MetricsServer)) and printed as a
//! table of its peers, one block per module.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long reaching the endpoint and reading its answer may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read.
const MAX_ANSWER: u64 = 64 << 20;

/// One sample of the exposition: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series' name, `_total` included for a counter.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// Why the metrics could not be read.
#[derive(Debug)]
pub enum StatsError {
    /// The endpoint could not be reached or read.
    Io(String, std::io::Error),
    /// It answered, but not with metrics.
    Answer(String, String),
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatsError::Io(at, e) => write!(
                f,
                "reading the metrics at {at}: {e} (is the process serving them? `btl serve --metrics {at}`)"
            ),
            StatsError::Answer(at, what) => write!(f, "{at} did not answer with metrics: {what}"),
        }
    }
}

impl std::error::Error for StatsError {}

/// Fetches `GET /metrics` from `addr` (HOST:PORT).
pub fn fetch(addr: &str) -> Result<String, StatsError> {
    let io = |e| StatsError::Io(addr.to_owned(), e);
    let target = addr
        .to_socket_addrs()
        .map_err(io)?
        .next()
        .ok_or_else(|| io(std::io::Error::other("the name has no address")))?;
    let mut conn = TcpStream::connect_timeout(&target, TIMEOUT).map_err(io)?;
    conn.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    conn.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).map_err(io)?;
    let mut answer = Vec::new();
    conn.take(MAX_ANSWER).read_to_end(&mut answer).map_err(io)?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| StatsError::Answer(addr.to_owned(), "no HTTP answer".into()))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(StatsError::Answer(addr.to_owned(), status.to_owned()));
    }
    Ok(body.to_owned())
}

/// The samples of an exposition in the Prometheus or OpenMetrics text
/// format; lines it cannot read are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        None => (series, BTreeMap::new()),
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"`, with `\"`, `\\` and `\n` escapes in values.
fn parse_labels(mut text: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    while !text.is_empty() {
        let (key, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim_start_matches(',').to_owned(), value);
        text = rest[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

/// What the table shows of one peer.
#[derive(Debug, Default, Clone)]
struct PeerRow {
    state: String,
    sent: f64,
    sent_bytes: f64,
    received: f64,
    received_bytes: f64,
    retransmissions: f64,
    duplicates: f64,
    rtt: Option<f64>,
    flaps: f64,
    losses: f64,
}

/// What the table shows of one module.
#[derive(Debug, Default, Clone)]
struct ModuleBlock {
    peers: BTreeMap<String, PeerRow>,
    refusals: BTreeMap<String, f64>,
    losses: BTreeMap<String, f64>,
    on_record: f64,
    summed: f64,
}

/// The samples as tables: per module, its peers (one line each) and what
/// it refused and lost.
pub fn table(samples: &[Sample]) -> String {
    let mut modules: BTreeMap<String, ModuleBlock> = BTreeMap::new();
    for s in samples {
        let Some(component) = s.labels.get("component") else {
            continue;
        };
        let m = modules.entry(component.clone()).or_default();
        let reason = s.labels.get("reason").cloned().unwrap_or_default();
        if let Some(peer) = s.labels.get("peer") {
            let row = m.peers.entry(peer.clone()).or_default();
            match s.name.as_str() {
                "btl_peer_messages_sent_total" => row.sent = s.value,
                "btl_peer_sent_bytes_total" => row.sent_bytes = s.value,
                "btl_peer_messages_received_total" => row.received = s.value,
                "btl_peer_received_bytes_total" => row.received_bytes = s.value,
                "btl_peer_retransmissions_total" => row.retransmissions = s.value,
                "btl_peer_duplicates_total" => row.duplicates = s.value,
                "btl_peer_link_flaps_total" => row.flaps = s.value,
                "btl_peer_losses_total" => row.losses += s.value,
                "btl_peer_rtt_seconds" => row.rtt = Some(s.value),
                "btl_peer_state" if s.value > 0.0 => {
                    row.state = s.labels.get("state").cloned().unwrap_or_default();
                }
                _ => {}
            }
            continue;
        }
        match s.name.as_str() {
            "btl_refusals_total" if s.value > 0.0 => _ = m.refusals.insert(reason, s.value),
            "btl_losses_total" if s.value > 0.0 => _ = m.losses.insert(reason, s.value),
            "btl_peers" => m.on_record = s.value,
            "btl_peers_summed" => m.summed = s.value,
            _ => {}
        }
    }
    let mut out = String::new();
    if modules.is_empty() {
        out.push_str("no module with an engine (tcp, udp) reported metrics\n");
    }
    for (component, m) in &modules {
        let by_reason = |what: &BTreeMap<String, f64>| {
            let total: f64 = what.values().sum();
            let each: Vec<String> = what.iter().map(|(r, n)| format!("{r} {n}")).collect();
            if each.is_empty() {
                "0".to_owned()
            } else {
                format!("{total} ({})", each.join(", "))
            }
        };
        out.push_str(&format!(
            "{component}: {} peers on record{}; refused {}; gone {}\n",
            m.on_record,
            if m.summed > 0.0 {
                format!(", {} of them summed as `other`", m.summed)
            } else {
                String::new()
            },
            by_reason(&m.refusals),
            by_reason(&m.losses),
        ));
        let w = m.peers.keys().map(String::len).max().unwrap_or(0).max(14);
        out.push_str(&format!(
            "  {:<w$} {:<10} {:>9} {:>11} {:>9} {:>11} {:>7} {:>6} {:>10} {:>5} {:>6}\n",
            "peer",
            "state",
            "sent",
            "sent B",
            "received",
            "received B",
            "resent",
            "dups",
            "rtt",
            "flaps",
            "gone"
        ));
        for (peer, r) in &m.peers {
            let rtt = r
                .rtt
                .map_or("-".to_owned(), |s| format!("{:.1} us", s * 1e6));
            out.push_str(&format!(
                "  {:<w$} {:<10} {:>9} {:>11} {:>9} {:>11} {:>7} {:>6} {:>10} {:>5} {:>6}\n",
                peer,
                if r.state.is_empty() { "-" } else { &r.state },
                r.sent,
                r.sent_bytes,
                r.received,
                r.received_bytes,
                r.retransmissions,
                r.duplicates,
                rtt,
                r.flaps,
                r.losses
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_with_escapes_and_plain_series_are_read() {
        let text = "# HELP x y\nbtl_peers{component=\"tcp\"} 2\nbtl_up 1\nbtl_peer_state{component=\"tcp\",peer=\"a \\\"b\\\"\",state=\"open\"} 1\n# EOF\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].labels["component"], "tcp");
        assert_eq!(samples[1].name, "btl_up");
        assert_eq!(samples[2].labels["peer"], "a \"b\"");
        assert_eq!(samples[2].labels["state"], "open");
    }

    #[test]
    fn a_module_s_peers_are_one_line_each() {
        let text = "\
btl_peers{component=\"tcp\"} 1
btl_refusals_total{component=\"tcp\",reason=\"bad_cookie\"} 3
btl_refusals_total{component=\"tcp\",reason=\"garbage\"} 0
btl_peer_messages_sent_total{component=\"tcp\",peer=\"7.1\"} 10
btl_peer_sent_bytes_total{component=\"tcp\",peer=\"7.1\"} 80
btl_peer_rtt_seconds{component=\"tcp\",peer=\"7.1\"} 0.000025
btl_peer_state{component=\"tcp\",peer=\"7.1\",state=\"open\"} 1
";
        let t = table(&parse(text));
        assert!(
            t.starts_with("tcp: 1 peers on record; refused 3 (bad_cookie 3); gone 0\n"),
            "{t}"
        );
        let line = t.lines().nth(2).expect("the peer's line");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&words[..5], ["7.1", "open", "10", "80", "0"], "{t}");
        assert!(line.contains("25.0 us"), "{t}");
    }
}
