//! All to all among the N processes of a job: every pair's one-way latency
//! by ping-pong, and every process streaming to every other, for each
//! message size; then the figures of the whole job.
//!
//! The pairs meet in rounds (the circle method: N - 1 rounds for an even
//! N, N for an odd one, each process in at most one pair a round). In a
//! latency round the lower rank of a pair pings and the higher answers
//! until the lower says it is done; in a bandwidth round both stream a
//! window of messages to each other at once, then put windows of the
//! same size into each other's memory (every process tells every other
//! where at the start). Large messages over a BTL that gets go as a
//! notice the receiver gets from (as `btl bw` does), so messages, puts
//! and gets all cross every pair. Every process answers
//! whoever sends to it at any time, so a process a round ahead of its
//! partner waits for nobody but that partner. A last round of "done" to
//! every other process is the barrier before the processes leave.
//!
//! Each process returns its [`RankResult`]; [`Report::of`] makes the
//! job's figures of all of them: the median and 99th percentile of every
//! pair's one-way latency, and the aggregate bandwidth (the sum over
//! processes of the bytes each sent over the time it took), for messages
//! and for puts.

use std::time::Instant;

use btl_core::endpoint::EndpointId;
use serde::{Deserialize, Serialize};

use super::{BenchError, DONE, Driven, PING, STREAM, Side, Waiting};

/// What every process of the job measures.
#[derive(Debug, Clone)]
pub struct AlltoallPlan {
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Timed round trips per pair and size (fewer for large messages).
    pub iters: u32,
    /// Stream messages per window in the bandwidth rounds.
    pub window: u32,
}

impl AlltoallPlan {
    /// Bytes one pair's round trips or windows move at most per size.
    pub const BUDGET: usize = 32 << 20;

    /// Timed round trips and warm-up ones for `size`.
    fn round_trips(&self, size: usize) -> (u32, u32) {
        let cap = (Self::BUDGET / (2 * size).max(1)).clamp(10, u32::MAX as usize) as u32;
        let iters = self.iters.min(cap).max(1);
        (iters, (iters / 10).clamp(2, 100))
    }

    /// Windows each process streams to each partner for `size`.
    fn windows(&self, size: usize) -> u32 {
        let per_window = size.max(1) * self.window.max(1) as usize;
        (Self::BUDGET / per_window).clamp(2, 64) as u32
    }
}

/// One process's share of the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankResult {
    /// The process's rank.
    pub rank: u32,
    /// The BTL that carried the traffic to each rank (this one's own
    /// included), by rank.
    pub carriers: Vec<String>,
    /// Per size.
    pub sizes: Vec<SizeResult>,
}

/// One process's figures for one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    /// Message size in bytes.
    pub size: usize,
    /// One-way latency of every timed round trip this process led, µs.
    pub latency_us: Vec<f64>,
    /// Payload bytes this process streamed in the bandwidth rounds.
    pub streamed: u64,
    /// When its bandwidth rounds began and ended, seconds since the Unix
    /// epoch (the job's processes share a clock on one host; across
    /// hosts, as well as theirs agree).
    pub stream_span: (f64, f64),
    /// Bytes this process put into its partners' memory.
    pub put: u64,
    /// When its put rounds began and ended, as `stream_span`.
    pub put_span: (f64, f64),
    /// Messages this process got from their senders' memory, where the
    /// BTL moves large messages better by a get.
    pub gets: u64,
}

/// Now, in seconds since the Unix epoch.
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The partner of `rank` in round `round` among `m` (even) places, by the
/// circle method: the last place is fixed, the others turn; every two
/// places meet exactly once in `m - 1` rounds.
pub fn partner(round: u32, rank: u32, m: u32) -> u32 {
    let n = m - 1;
    if rank == n {
        // The one whose double is the round, modulo n (n is odd).
        return (0..n).find(|&j| (2 * j) % n == round % n).unwrap_or(0);
    }
    let p = (round % n + n - rank) % n;
    if p == rank { n } else { p }
}

/// Runs the plan as rank `me` of `peers.len()` processes, `peers[r]`
/// being the endpoint of rank `r` (its own entry is not used); `carriers`
/// name the BTL of each.
pub fn run<B: Driven>(
    btl: &mut B,
    me: u32,
    peers: &[EndpointId],
    carriers: Vec<String>,
    plan: &AlltoallPlan,
    waiting: Waiting,
) -> Result<RankResult, BenchError> {
    let n = peers.len() as u32;
    let places = n + n % 2;
    let max = plan.sizes.iter().copied().max().unwrap_or(0);
    let mut side = Side::new(btl.btl(), max, plan.window)?;
    // Where the others put: every process tells every other first.
    let landing = side.open_landing(btl.btl(), max)?;
    for (r, &to) in peers.iter().enumerate() {
        if r as u32 != me {
            side.send_landing(btl, to, landing, waiting)?;
        }
    }
    let others: Vec<EndpointId> = (0..n)
        .filter(|&r| r != me)
        .map(|r| peers[r as usize])
        .collect();
    side.until_with(btl, waiting, |s| {
        others.iter().all(|ep| s.landings.contains_key(ep))
    })?;
    // DONEs each rank has sent this process, over the whole run: a rank
    // ahead may send the next round's (or the last) while this one still
    // waits for another's.
    let mut dones = vec![0u64; n as usize];
    let mut sizes = Vec::with_capacity(plan.sizes.len());
    let partners: Vec<u32> = (0..places.saturating_sub(1))
        .map(|round| partner(round, me, places))
        .filter(|&p| p < n)
        .collect();
    for &size in &plan.sizes {
        let gets_before = side.gets_done;
        let (iters, warmup) = plan.round_trips(size);
        let mut latency_us = Vec::new();
        for &p in &partners {
            let to = peers[p as usize];
            if me < p {
                let mut t = Instant::now();
                for i in 0..warmup + iters {
                    let want = side.counted[0] + 1;
                    side.send(btl, to, PING, size, waiting)?;
                    side.until(btl, 0, want, waiting)?;
                    let now = Instant::now();
                    if i >= warmup {
                        latency_us.push((now - t).as_secs_f64() * 1e6 / 2.0);
                    }
                    t = now;
                }
                side.send(btl, to, DONE, 0, waiting)?;
            } else {
                dones[p as usize] += 1;
                let want = dones[p as usize];
                side.until_with(btl, waiting, |s| s.dones_from(to) >= want)?;
            }
        }
        let windows = plan.windows(size);
        let stream_from = wall();
        let mut streamed = 0u64;
        for &p in &partners {
            let to = peers[p as usize];
            for _ in 0..windows {
                let want = side.counted[2] + 1;
                for _ in 0..plan.window {
                    side.send(btl, to, STREAM, size, waiting)?;
                }
                streamed += size as u64 * u64::from(plan.window);
                side.until(btl, 2, want, waiting)?;
            }
        }
        let stream_span = (stream_from, wall());
        let put_from = wall();
        let mut put = 0u64;
        for &p in &partners {
            let to = peers[p as usize];
            let at = side.landings[&to];
            for _ in 0..windows {
                let want = side.puts_done + u64::from(plan.window);
                for _ in 0..plan.window {
                    side.put(btl, to, at, size, waiting)?;
                }
                put += size as u64 * u64::from(plan.window);
                side.until_with(btl, waiting, |s| s.puts_done >= want)?;
            }
        }
        sizes.push(SizeResult {
            size,
            latency_us,
            streamed,
            stream_span,
            put,
            put_span: (put_from, wall()),
            gets: side.gets_done - gets_before,
        });
    }
    // The barrier: nobody leaves while another still needs an answer.
    // A process leaves once it has every other's last DONE, so a process
    // still waiting may see it leave, after its own last DONE.
    for (r, &to) in peers.iter().enumerate() {
        if r as u32 != me {
            side.may_leave_after(to, dones[r] + 1);
            side.send(btl, to, DONE, 0, waiting)?;
        }
    }
    for (r, &from) in peers.iter().enumerate() {
        if r as u32 != me {
            let want = dones[r] + 1;
            side.until_with(btl, waiting, |s| s.dones_from(from) >= want)?;
        }
    }
    for _ in 0..100 {
        btl.step(Waiting::Poll);
    }
    Ok(RankResult {
        rank: me,
        carriers,
        sizes,
    })
}

/// Bytes moved by several processes, and the span from the first one's
/// start to the last one's end.
#[derive(Debug, Default)]
struct Throughput {
    bytes: u64,
    span: Option<(f64, f64)>,
}

impl Throughput {
    fn add(&mut self, bytes: u64, (from, to): (f64, f64)) {
        self.bytes += bytes;
        let (a, b) = self.span.unwrap_or((from, to));
        self.span = Some((a.min(from), b.max(to)));
    }

    fn mb_s(&self) -> f64 {
        match self.span {
            Some((from, to)) if to > from => self.bytes as f64 / (to - from) / 1e6,
            _ => 0.0,
        }
    }
}

/// The job's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Processes in the job.
    pub ranks: u32,
    /// Every pair (lower rank first, each process with itself too) and the
    /// BTL that carried it.
    pub pairs: Vec<Pair>,
    /// Per size.
    pub sizes: Vec<SizeReport>,
}

/// A pair of processes and its BTL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// The lower rank.
    pub a: u32,
    /// The higher rank (or the same, for a process with itself).
    pub b: u32,
    /// The BTL that carried it, as the lower rank chose it.
    pub btl: String,
}

/// The job's figures for one size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeReport {
    /// Message size in bytes.
    pub size: usize,
    /// Round trips measured, over all pairs.
    pub samples: usize,
    /// Median one-way latency over every pair's round trips, µs.
    pub median_us: f64,
    /// 99th percentile of the same, µs.
    pub p99_us: f64,
    /// What all processes streamed over the time from the first one's
    /// start to the last one's end, MB/s (10^6).
    pub aggregate_mb_s: f64,
    /// The same for puts, MB/s.
    pub put_mb_s: f64,
    /// Messages got from their senders' memory, over all processes.
    pub gets: u64,
}

impl Report {
    /// The figures of the job whose processes returned `results`, one
    /// each, any order; an error names a rank that is missing or twice.
    pub fn of(mut results: Vec<RankResult>) -> Result<Report, String> {
        results.sort_by_key(|r| r.rank);
        let ranks = results.len() as u32;
        for (i, r) in results.iter().enumerate() {
            if r.rank != i as u32 {
                return Err(format!(
                    "the results of {ranks} processes do not name ranks 0..{ranks}: rank {} where {i} was expected",
                    r.rank
                ));
            }
        }
        let mut pairs = Vec::new();
        for r in &results {
            for (b, btl) in r.carriers.iter().enumerate().skip(r.rank as usize) {
                pairs.push(Pair {
                    a: r.rank,
                    b: b as u32,
                    btl: btl.clone(),
                });
            }
        }
        let mut sizes = Vec::new();
        let Some(first) = results.first() else {
            return Ok(Report {
                ranks,
                pairs,
                sizes,
            });
        };
        for (k, s) in first.sizes.iter().enumerate() {
            let mut samples: Vec<f64> = Vec::new();
            let mut streamed = Throughput::default();
            let mut put = Throughput::default();
            let mut gets = 0;
            for r in &results {
                let Some(mine) = r.sizes.get(k).filter(|m| m.size == s.size) else {
                    return Err(format!("rank {} did not measure size {}", r.rank, s.size));
                };
                samples.extend_from_slice(&mine.latency_us);
                streamed.add(mine.streamed, mine.stream_span);
                put.add(mine.put, mine.put_span);
                gets += mine.gets;
            }
            samples.sort_by(f64::total_cmp);
            let pick = |q: f64| {
                if samples.is_empty() {
                    return 0.0;
                }
                samples[((samples.len() - 1) as f64 * q).round() as usize]
            };
            sizes.push(SizeReport {
                size: s.size,
                samples: samples.len(),
                median_us: pick(0.5),
                p99_us: pick(0.99),
                aggregate_mb_s: streamed.mb_s(),
                put_mb_s: put.mb_s(),
                gets,
            });
        }
        Ok(Report {
            ranks,
            pairs,
            sizes,
        })
    }

    /// How many pairs each BTL carried, busiest first.
    pub fn carried(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for p in &self.pairs {
            match counts.iter_mut().find(|(b, _)| *b == p.btl) {
                Some((_, n)) => *n += 1,
                None => counts.push((p.btl.clone(), 1)),
            }
        }
        counts.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        counts
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let carried: Vec<String> = self
            .carried()
            .iter()
            .map(|(btl, n)| format!("{btl} {n}"))
            .collect();
        writeln!(
            f,
            "{} processes, pairs by BTL (each process with itself included): {}",
            self.ranks,
            carried.join(", ")
        )?;
        writeln!(
            f,
            "{:>10} {:>8} {:>12} {:>12} {:>16} {:>12}",
            "size", "samples", "median µs", "p99 µs", "aggregate MB/s", "put MB/s"
        )?;
        for s in &self.sizes {
            writeln!(
                f,
                "{:>10} {:>8} {:>12.3} {:>12.3} {:>16.1} {:>12.1}",
                s.size, s.samples, s.median_us, s.p99_us, s.aggregate_mb_s, s.put_mb_s
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_two_places_meet_once_and_nobody_twice_a_round() {
        for m in [2u32, 4, 6, 8, 16] {
            let mut met = vec![vec![0u32; m as usize]; m as usize];
            for round in 0..m - 1 {
                for rank in 0..m {
                    let p = partner(round, rank, m);
                    assert_ne!(p, rank, "m {m} round {round}");
                    assert_eq!(partner(round, p, m), rank, "symmetric");
                    met[rank as usize][p as usize] += 1;
                }
            }
            for (a, row) in met.iter().enumerate() {
                for (b, &times) in row.iter().enumerate() {
                    assert_eq!(times, u32::from(a != b), "m {m}: {a} and {b}");
                }
            }
        }
    }

    fn result(rank: u32, carriers: &[&str], latency: &[f64]) -> RankResult {
        RankResult {
            rank,
            carriers: carriers.iter().map(|s| s.to_string()).collect(),
            sizes: vec![SizeResult {
                size: 8,
                latency_us: latency.to_vec(),
                streamed: 2_000_000,
                stream_span: (10.0 + f64::from(rank), 11.0 + f64::from(rank)),
                put: 1_500_000,
                put_span: (20.0, 20.5),
                gets: 2,
            }],
        }
    }

    #[test]
    fn the_report_pools_every_pairs_samples_and_sums_the_bandwidth() {
        let report = Report::of(vec![
            result(1, &["sm", "self", "tcp"], &[3.0]),
            result(0, &["self", "sm", "tcp"], &[1.0, 2.0]),
            result(2, &["tcp", "tcp", "self"], &[]),
        ])
        .expect("report");
        assert_eq!(report.ranks, 3);
        let pairs: Vec<(u32, u32, &str)> = report
            .pairs
            .iter()
            .map(|p| (p.a, p.b, p.btl.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                (0, 0, "self"),
                (0, 1, "sm"),
                (0, 2, "tcp"),
                (1, 1, "self"),
                (1, 2, "tcp"),
                (2, 2, "self"),
            ]
        );
        let s = &report.sizes[0];
        assert_eq!((s.samples, s.median_us, s.p99_us), (3, 2.0, 3.0));
        // 6 MB from the first start (10 s) to the last end (13 s).
        assert!((s.aggregate_mb_s - 2.0).abs() < 1e-9);
        assert!((s.put_mb_s - 9.0).abs() < 1e-9);
        assert_eq!(s.gets, 6);
        assert_eq!(
            report.carried(),
            [("self".into(), 3), ("tcp".into(), 2), ("sm".into(), 1)]
        );
    }

    #[test]
    fn a_missing_rank_is_an_error_naming_it() {
        let err = Report::of(vec![result(0, &["self"], &[]), result(2, &["self"], &[])])
            .expect_err("rank 1 missing");
        assert!(err.contains("rank 2"), "{err}");
    }
}
