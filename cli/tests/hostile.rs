//! `btl serve` under attack, as an operator runs it: the real binary on
//! loopback, a legit `btl connect` client measuring it while hostile peers
//! (garbage, forged handshakes, protocol violations, idle and short-lived
//! connections, non-readers, datagram floods) do their worst, and a long
//! series of ordinary clients one after another.
//!
//! Each test starts its own server, warms it up with a full-range legit
//! run, measures an undisturbed baseline, then runs its attack with legit
//! runs alongside, and checks that:
//!
//! - the server is still running;
//! - every legit run completed, with a median latency within
//!   [`SLOWDOWN_BOUND`] times the baseline ([`FAIR_SLOWDOWN_BOUND`] for the
//!   attacks of the second pass, which play the protocol just well enough:
//!   see [`Terms`]); where it is not, within that bound of undisturbed runs
//!   taken again after the attack (the machine may have turned slower),
//!   and those within [`SLOWDOWN_BOUND`] times the baseline;
//! - once the attack is over (after a bounded settle time) the server holds
//!   the descriptors it held before and its resident memory is within
//!   [`RSS_MARGIN_KIB`] of what it was;
//! - its log grew by at most [`LOG_LINES_PER_PHASE`] lines (an attack from
//!   many addresses: [`LOG_LINES_MANY_SOURCES`]), however many refusals the
//!   attack caused, and, where the terms say so, by at least one that names
//!   the attacker and why it was refused or lost;
//! - on SIGTERM it exits with status 0 and prints one
//!   `served: {"runs":..,"peers":0,"links":0,"registrations":1,..}` line:
//!   no peer, link or registration left but its one send buffer.
//!
//! A test reports every failed check, not only the first (see
//! [`Verdict`]). The tests pin processes to CPUs when they can and must run
//! alone (`.config/nextest.toml` gives them the whole machine; under
//! `cargo test` a lock serialises them): latencies are compared.

#[path = "common/hostile_peer.rs"]
mod peer;
#[path = "common/hostile_server.rs"]
mod server;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use btl_core::endpoint::ProcName;
use btl_core::wire::{
    AckRepr, CloseReason, ControlRepr, GetRepr, HEADER_LEN, HeaderRepr, PacketRepr, PutRepr,
    SendRepr,
};

use peer::{
    Acking, BENCH_HEADER, DatagramPeer, FakePeer, Forger, NOTHING_RECEIVED, PING_TAG, Pacer, Rng,
    ack_frame, bench_send, checksummed_put, close_frame, dial, drain_until_closed,
    first_registration_key, get_frame, hello, hello_ack_frame, hello_frame, is_probe, pass_cookie,
    ping, ping_acking, server_name, udp_socket, unknown_type_frame,
};
use server::{Btl, Cpus, Footprint, LegitRun, Plan, Server, Verdict, median};

// ----- what is measured, and the bounds ----------------------------------

/// What the legit client runs, undisturbed and under attack: ping-pong of
/// small messages (8 B to 1 KiB, 8 sizes), 1000 timed iterations each.
/// One number per run is the median of the 8 sizes' medians: 8,000 round
/// trips stand behind it, a slow first size (the run's own warm-up) does
/// not move it, and it is what an application of small messages sees.
const LEGIT: Plan = Plan {
    min: "8",
    max: "1k",
    iters: 1000,
};
/// The warm-up before the baseline: `btl connect`'s default range, 1 B to
/// 4 MiB. The server's fragment pools and send buffer grow to what a legit
/// client of large messages makes them, so that the memory baseline is
/// that of a server which has served one (a large PING of an attacker may
/// then grow nothing a legit client would not).
const WARM_UP: Plan = Plan {
    min: "1",
    max: "4M",
    iters: 10,
};
/// Undisturbed runs; the baseline is the median of their numbers.
const BASELINE_RUNS: usize = 3;
/// Legit runs under attack: at least this many (their median is compared,
/// so one run unlucky with the machine's other tenants does not decide),
/// and runs go on while the attack does its work.
const MIN_RUNS_UNDER_ATTACK: usize = 3;
/// At most this many legit runs per attack.
const MAX_RUNS_UNDER_ATTACK: usize = 40;
/// How much slower the legit client may be under attack than undisturbed.
/// The attacker shares a CPU with the server and none with the client
/// (when pinning is possible), and is paced (see [`ATTACK_SPAN`]), so a
/// server that keeps serving its legit client stays well within it:
/// undisturbed numbers here are about 10 µs, 3 runs within ±10 % of each
/// other, and the attacks this server survives today cost it 1.1x to
/// 1.7x. A server that stalls behind an attacker for milliseconds at a
/// time, or drops its client, does not.
const SLOWDOWN_BOUND: f64 = 3.0;
/// How much slower the legit client may be under the attacks of the
/// second pass (issue #23: a handful of peers that play the protocol just
/// well enough) than undisturbed: what the issue calls done. Most cost the
/// attacker a few connections, idle once in place (the churn, paced, a
/// fifth of a CPU); a server that holds each peer to its share of what all
/// share serves its legit client as before.
const FAIR_SLOWDOWN_BOUND: f64 = 2.0;
/// Resident memory the server may keep after an attack beyond its
/// baseline, in KiB. Phases that leak nothing move it by -0.1 to +2.2 MiB
/// here (the allocator keeps some of what it handed out, and touched, for
/// connections that came and went). 4 MiB still catches a leak of a few
/// MiB per client in every attack, the two non-readers included (over
/// 2 MiB each), and of much less where the clients are many: 41 KiB each
/// over the 100 short-lived peers, 5 KiB over the 1,000 sequential ones.
/// Memory kept for good after an attack, bounded or not, counts: a server
/// that ends 17 MiB larger after 500 idle connections fails here.
const RSS_MARGIN_KIB: u64 = 4 << 10;
/// How long the server may take, after an attack, to drop what it held:
/// the peer timeout the tests set (2 s) twice over, and slack.
const SETTLE: Duration = Duration::from_secs(10);
/// Log lines an attack may add. A server that logs the first refusals of
/// a source and then one summary per interval and source writes a
/// handful per attack here (each attack comes from one address); one line
/// per refusal is thousands.
const LOG_LINES_PER_PHASE: usize = 30;
/// Log lines an attack from [`CHURN_SOURCES`] addresses may add: per
/// interval of 10 s, the refusals the server logs one by one, of all
/// sources together (`LOGGED_PER_INTERVAL_ALL` of btl-std's refusals, 50),
/// and its summaries (the 8 sources with the most, and the rest in one
/// line); three intervals, as many as a phase of up to 20 s overlaps (the
/// server counts its intervals from its start, not from the attack's).
/// [`LOG_LINES_PER_PHASE`] is for an attack from one address.
const LOG_LINES_MANY_SOURCES: usize = 3 * (50 + 8 + 1);
/// How long a SIGTERMed server may take to exit.
const TERM_TIMEOUT: Duration = Duration::from_secs(5);
/// How long after the last phase the server is ended: its peer and
/// handshake timeouts (2 s) and a second more, so that whatever a departed
/// attacker left (a peer that vanished without a word, a handshake never
/// finished) has been given up and the `served:` line can be exact.
const QUIET: Duration = Duration::from_secs(3);

// ----- the attacks' sizes -------------------------------------------------

/// Where every attacker connects from: another loopback address than the
/// legit client's 127.0.0.1 (all of 127/8 is loopback), so a server can
/// tell them apart as it would two hosts.
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// The time over which an attack of a fixed size spreads its steps: about
/// as long as a dozen legit runs, so that they overlap it throughout, and
/// gentle enough that the attacker does not simply take the CPU.
const ATTACK_SPAN: Duration = Duration::from_secs(3);
/// How long before the first legit run the attack starts.
const RAMP: Duration = Duration::from_millis(200);
/// An attack that cannot finish its steps by then (a server that stopped
/// accepting) is abandoned, and that is a failure.
const ATTACK_DEADLINE: Duration = Duration::from_secs(30);
/// Garbage connections.
const GARBAGE_CONNECTIONS: u64 = 2000;
/// Rounds of the forged HELLOs, each every kind once.
const FORGERY_ROUNDS: u64 = 40;
/// Fake clients that ping and break the protocol in the same write.
const VIOLATORS: u64 = 24;
/// Idle connections held at once.
const IDLE_CONNECTIONS: usize = 500;
/// Short-lived peers, each under a rank of its own.
const SHORT_LIVED_PEERS: u64 = 100;
/// Connect/disconnect cycles.
const CYCLES: u64 = 5000;
/// The large ping of a peer that never reads.
const LARGE_PING: u64 = 4 << 20;
/// What the other non-reader claims its ping is.
const CLAIMED_PING: u64 = 256 << 20;
/// How long the non-readers hold their connections once their pings are
/// sent: twice the server's peer timeout.
const NON_READER_HOLD: Duration = Duration::from_secs(4);
/// Junk datagrams.
const JUNK_DATAGRAMS: u64 = 100_000;
/// Ranks of the fake processes start here, far above `btl connect`'s
/// (1 + its process id), so no fake process is mistaken for a legit one.
const FAKE_RANKS: u32 = 0x4000_0000;
/// Where the legit client's connections come from: `btl connect` dials
/// the server's 127.0.0.1 and the kernel gives it that source.
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// SENDs each peer may have in the server's fragments at once: the
/// engine's default `initial_credits`, which `btl serve` keeps.
const CREDITS: u64 = 16;
/// Fake peers that each send SENDs numbered 2 to 17 (their whole grant of
/// [`CREDITS`]) and never 1, so that the server holds all of them waiting
/// for the first: 12 × 16 = 192, the three quarters of the server's 256
/// event places that received SENDs may claim (a quarter is kept for lost
/// peers' errors).
const GAP_PEERS: u32 = 12;
/// Fake peers per fragment class that read every reply and never
/// acknowledge one: the server keeps each unacknowledged reply's fragment
/// for a resend, up to its window of 64 per peer, and sends from at most
/// three quarters of a class's 256 fragments (the rest are kept for
/// receiving): 3 × 64 = 192.
const NON_ACKERS_PER_CLASS: u32 = 3;
/// What those peers ping with, one size per class the legit client's
/// pongs come from: 8 B (its pong goes in a small fragment, 256 B) and
/// 1 KiB (an eager one, 64 KiB).
const NON_ACKER_PINGS: [usize; 2] = [8, 1 << 10];
/// Pings each of those peers sends: the server's window of 64 and some
/// more owed behind it, fewer than the 64 replies the server's benchmark
/// owes one peer before it drops it as a non-reader.
const PINGS_PER_NON_ACKER: u64 = 80;
/// The running total of credits the non-acknowledging peers grant the
/// server in every header: no reply of the server's waits for a credit,
/// only for its acknowledgement.
const UNBOUNDED_GRANT: u32 = 1 << 20;
/// The data of the PUT one connection streams again and again with the
/// CHECKSUM flag (which its HELLO did not announce): the server's largest
/// fragment, if its HELLO accepts a body that large.
const CHECKSUMMED_PUT: u64 = 256 << 10;
/// Source addresses of the handshake churn: 127.0.0.2 to 127.0.0.31.
const CHURN_SOURCES: u8 = 30;
/// Handshakes held from each of them: the server's budget per source.
const CHURN_PER_SOURCE: usize = 8;
/// The churn's handshakes go in bursts of [`CHURN_BURST`] every
/// [`CHURN_TICK`]: 4,000 a second at most, which the server takes here
/// (a fifth of a CPU for the attacker, less than half for the server), in
/// bursts small enough for its listen backlog (128; beyond it a connection
/// waits a second for its SYN to go again). A legit connection that comes
/// among a burst is accepted with strangers behind it.
///
/// The tick lengthens as the machine slows ([`churn_tick`]): this host at
/// times runs everything four to eight times slower, and a server that
/// then takes 2,000 handshakes a second at most falls behind a flood
/// paced for the fast state, its listen backlog full and every pass
/// holding eight handshakes, which no ordering of its work undoes.
const CHURN_TICK: Duration = Duration::from_millis(2);
/// The undisturbed latency, µs, at which [`CHURN_TICK`] was set.
const CHURN_TICK_AT_US: f64 = 15.0;
/// Handshakes of one burst of the churn.
const CHURN_BURST: usize = 8;
/// How long the churn goes on at least: legit runs take seconds under it,
/// and a few are needed for one to meet an eviction.
const CHURN_SPAN: Duration = Duration::from_secs(10);
/// How long a handshake of the churn waits in a read before it looks
/// whether the attack is over.
const CHURN_READ_WAIT: Duration = Duration::from_millis(100);
/// The stack of each of the churn's threads (one per handshake held, each
/// blocked in a read but when its turn comes).
const CHURN_STACK: usize = 64 << 10;
/// Fake peers, each under a rank of its own, that hold a peer slot from
/// one address: as many as the server has slots.
const SQUATTERS: u32 = 64;
/// GETs one fake peer sends and never acknowledges the answers of: as many
/// as the server has operation slots.
const UNACKED_GETS: u64 = 64;
/// Bytes of the server's send buffer each GET asks for, the attacker's and
/// the legit ones: one PUT each.
const GET_LEN: u64 = 4 << 10;
/// How long a legit GET may take to be answered (it takes well under a
/// millisecond undisturbed).
const GET_WAIT: Duration = Duration::from_secs(2);
/// How often the fake peers that hold what they took read the server and
/// answer its keepalives (every 667 ms with the tests' 2 s peer timeout).
const KEEPALIVE_POLL: Duration = Duration::from_millis(20);

/// The sequential test's client runs by default: 1000 take about 35 s here
/// (each a new `btl connect` process: start, handshake, 14 sizes of 7
/// ping-pongs, close), which leaves the file within 3 minutes.
/// `BTL_HOSTILE_RUNS` sets another number.
const SEQUENTIAL_RUNS: usize = 1000;
/// What each of those clients runs: 8 B to 64 KiB, so that the server's
/// send buffer grows in every run (and a buffer or registration kept per
/// client adds up).
const SEQUENTIAL: Plan = Plan {
    min: "8",
    max: "64k",
    iters: 5,
};

// ----- the harness ------------------------------------------------------------

/// What a phase is held to beyond what every phase is (see the module).
#[derive(Debug, Clone, Copy)]
struct Terms {
    /// How much slower the legit client may be under attack than
    /// undisturbed.
    slowdown: f64,
    /// Log lines the phase may add.
    log_lines: usize,
    /// Whether the phase must leave at least one log line that names the
    /// attacker ([`ATTACKER`]) and why it was refused or lost, as every
    /// refusal the server logs today does (`refused a connection with
    /// 127.0.0.2:41234: timeout`, `link with 127.0.0.2:41234 closed by this
    /// side: protocol error`, `refused 14 more connections from 127.0.0.2
    /// in the last 10 s: timeout`): an attack answered in silence leaves an
    /// operator nothing to go on.
    logged: bool,
    /// A legit GET after each legit run, from the legit client's address,
    /// by a fresh process of this server's job ([`legit_get`]): `btl
    /// connect` does no GET, so an attack on gets needs one.
    gets_of: Option<ProcName>,
}

/// The terms of the first pass's attacks.
const FIRST_PASS: Terms = Terms {
    slowdown: SLOWDOWN_BOUND,
    log_lines: LOG_LINES_PER_PHASE,
    logged: false,
    gets_of: None,
};

/// The terms of the second pass's attacks (issue #23): the legit client
/// within [`FAIR_SLOWDOWN_BOUND`].
const FAIR_SHARES: Terms = Terms {
    slowdown: FAIR_SLOWDOWN_BOUND,
    ..FIRST_PASS
};

/// As [`FAIR_SHARES`], and the attack logged.
const FAIR_SHARES_LOGGED: Terms = Terms {
    logged: true,
    ..FAIR_SHARES
};

/// Serialises the tests of this file when they share a process (`cargo
/// test`): they compare latencies, and each needs the machine alone.
static ALONE: Mutex<()> = Mutex::new(());

/// One test's server, what it was like undisturbed, and the failures found.
struct Bench {
    server: Server,
    verdict: Verdict,
    /// The median of the undisturbed runs' numbers, µs.
    baseline_us: f64,
    /// The server's descriptors and memory after the baseline runs.
    footprint: Footprint,
    /// Legit runs made so far (warm-up and baseline included).
    runs: u64,
    /// Legit GETs made so far ([`Terms::gets_of`]).
    gets: u32,
    /// When the last phase ended (see [`QUIET`]).
    calm_from: Instant,
    _alone: std::sync::MutexGuard<'static, ()>,
}

impl Bench {
    /// Starts a `btl` server over `btl` without a job key, warms it up and
    /// takes its baseline.
    fn prepare(btl: Btl) -> Self {
        Self::prepare_as(btl, Server::start)
    }

    /// As [`prepare`](Self::prepare), the server and its legit clients
    /// holding the job key the server made.
    fn prepare_keyed(btl: Btl) -> Self {
        Self::prepare_as(btl, Server::start_keyed)
    }

    fn prepare_as(btl: Btl, start: fn(Btl, Option<Cpus>) -> Server) -> Self {
        let alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
        let cpus = Cpus::detect();
        if let Some(c) = cpus {
            c.pin_this_process();
        }
        let mut server = start(btl, cpus);
        let started = Instant::now();
        if let Err(e) = server.legit_run(WARM_UP) {
            panic!("the warm-up run failed: {e}");
        }
        let baseline: Vec<LegitRun> = (0..BASELINE_RUNS)
            .map(|i| {
                server
                    .legit_run(LEGIT)
                    .unwrap_or_else(|e| panic!("undisturbed run {i} failed: {e}"))
            })
            .collect();
        if let Err(e) = server.alive() {
            panic!("the server did not survive its warm-up: {e}");
        }
        let baseline_us = median(baseline.iter().map(|r| r.typical_us).collect());
        let footprint = quiet_footprint(&server);
        eprintln!(
            "baseline over {btl:?}: {baseline_us:.2} µs (runs: {:?}), {footprint}; warm-up and baseline took {:.1?}",
            baseline
                .iter()
                .map(|r| round2(r.typical_us))
                .collect::<Vec<_>>(),
            started.elapsed()
        );
        Bench {
            server,
            verdict: Verdict::default(),
            baseline_us,
            footprint,
            runs: 1 + BASELINE_RUNS as u64,
            gets: 0,
            calm_from: Instant::now(),
            _alone: alone,
        }
    }

    /// Runs `attack` against the server, with legit runs alongside, then
    /// checks the server as the module says.
    fn attack(&mut self, name: &str, attack: impl FnOnce(&Ctl) -> String + Send + 'static) {
        self.attack_under(name, FIRST_PASS, attack);
    }

    /// As [`attack`](Self::attack), held to `terms`.
    fn attack_under(
        &mut self,
        name: &str,
        terms: Terms,
        attack: impl FnOnce(&Ctl) -> String + Send + 'static,
    ) {
        let log_before = self.server.stderr.len();
        let started = Instant::now();
        let ctl = Ctl {
            target: self.server.addr,
            stop: Arc::default(),
            worked: Arc::default(),
            started,
        };
        let (tx, rx) = mpsc::channel();
        let theirs = ctl.clone();
        std::thread::spawn(move || {
            let _ = tx.send(attack(&theirs));
        });
        std::thread::sleep(RAMP);

        // Legit runs while the attack works, and a few at least; the first
        // failure ends them (the next would most likely fail the same way,
        // and each failure costs seconds).
        let mut runs: Vec<LegitRun> = Vec::new();
        while self.server.alive().is_ok() {
            match self.server.legit_run(LEGIT) {
                Ok(run) => runs.push(run),
                Err(e) => {
                    let n = runs.len() + 1;
                    self.verdict
                        .check(false, || format!("{name}: legit run {n} failed: {e}"));
                    break;
                }
            }
            self.runs += 1;
            if let Some(server) = terms.gets_of {
                self.gets += 1;
                if let Err(e) = legit_get(self.server.addr, server, self.gets) {
                    let n = self.gets;
                    self.verdict
                        .check(false, || format!("{name}: legit get {n} failed: {e}"));
                    break;
                }
            }
            let enough = runs.len() >= MIN_RUNS_UNDER_ATTACK
                && ctl.has_worked()
                && started.elapsed() >= ATTACK_SPAN;
            if enough || runs.len() >= MAX_RUNS_UNDER_ATTACK || ctl.late() {
                break;
            }
        }
        let legit_done = started.elapsed();
        // Let a fixed-size attack finish its steps (it has a deadline of
        // its own), then end what it holds.
        while !ctl.has_worked() && !ctl.late() {
            std::thread::sleep(Duration::from_millis(20));
        }
        ctl.stop.store(true, Ordering::SeqCst);
        let report = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| "abandoned: the attack did not stop within 10 s".to_owned());
        let attack_done = started.elapsed();
        self.calm_from = Instant::now();
        self.verdict.check(!report.starts_with("abandoned"), || {
            format!("{name}: the attack could not do its work: {report}")
        });

        // As fast as undisturbed, within the bound?
        let typical = median(runs.iter().map(|r| r.typical_us).collect());
        let bound = terms.slowdown * self.baseline_us;
        let slow = !runs.is_empty() && typical > bound;

        let after = self.aftermath(name, log_before, terms);

        if slow {
            // The machine flips between a fast and a slow state (undisturbed
            // runs here have been 13.6 and 34 µs within a second). So a slow
            // median is judged again against undisturbed runs taken now,
            // after the attack, the bound unchanged; and those runs must be
            // within the first pass's bound of the baseline, or the attack
            // left the server slow for good.
            let again = self.undisturbed_again();
            let verdict = match &again {
                Ok(now_us) => {
                    let reference = self.baseline_us.max(*now_us);
                    let lasting = *now_us > SLOWDOWN_BOUND * self.baseline_us;
                    if lasting {
                        Some(format!(
                            "{name}: the server stayed slow after the attack: undisturbed runs after it take {now_us:.2} µs, over {SLOWDOWN_BOUND}x the baseline {:.2} µs",
                            self.baseline_us
                        ))
                    } else if typical > terms.slowdown * reference {
                        Some(format!(
                            "{name}: the legit client's median latency under attack is {typical:.2} µs, over {}x the undisturbed {reference:.2} µs (baseline {:.2} µs, undisturbed runs after the attack {now_us:.2} µs; runs under attack: {:?})",
                            terms.slowdown,
                            self.baseline_us,
                            runs.iter()
                                .map(|r| round2(r.typical_us))
                                .collect::<Vec<_>>(),
                        ))
                    } else {
                        eprintln!(
                            "{name}: {typical:.2} µs under attack is over {}x the baseline {:.2} µs but not the undisturbed {now_us:.2} µs after it: the machine was slower, not the server",
                            terms.slowdown, self.baseline_us
                        );
                        None
                    }
                }
                Err(e) => Some(format!(
                    "{name}: the legit client's median latency under attack is {typical:.2} µs, over {}x the undisturbed {:.2} µs, and an undisturbed run after the attack failed: {e}",
                    terms.slowdown, self.baseline_us
                )),
            };
            if let Some(failure) = verdict {
                self.verdict.check(false, || failure);
            }
        }

        let each = runs.iter().map(|r| r.took).sum::<Duration>() / runs.len().max(1) as u32;
        eprintln!(
            "{name}: {report}; {} legit runs of {each:.1?} in {legit_done:.1?} (median {typical:.2} µs, baseline {:.2} µs: {:?}); attack done after {attack_done:.1?}; then {after}; {:.1?} in all",
            runs.len(),
            self.baseline_us,
            runs.iter()
                .map(|r| round2(r.typical_us))
                .collect::<Vec<_>>(),
            started.elapsed(),
        );
    }

    /// The median of [`BASELINE_RUNS`] undisturbed runs made now, µs.
    fn undisturbed_again(&mut self) -> Result<f64, String> {
        self.server.alive()?;
        let mut us = Vec::with_capacity(BASELINE_RUNS);
        for _ in 0..BASELINE_RUNS {
            us.push(self.server.legit_run(LEGIT)?.typical_us);
            self.runs += 1;
        }
        Ok(median(us))
    }

    /// Checks the server after a phase whose log began at line
    /// `log_before`: still running, back to its baseline footprint within
    /// [`SETTLE`], and its log grown as `terms` allow; what it came to, in
    /// words.
    fn aftermath(&mut self, name: &str, log_before: usize, terms: Terms) -> String {
        let alive = self.server.alive();
        let alive = self.verdict.check(alive.is_ok(), || {
            format!(
                "{name}: the server did not survive: {}",
                alive.err().unwrap_or_default()
            )
        });
        let mut footprint = "server gone".to_owned();
        if alive {
            let base = self.footprint;
            let settled = Instant::now();
            if let Some(now) = self
                .verdict
                .ok(name, self.server.settle(base, RSS_MARGIN_KIB, SETTLE))
            {
                footprint = format!("{now} after {:.1?} (baseline {base})", settled.elapsed());
                self.verdict.check(now.fds == base.fds, || {
                    format!(
                        "{name}: the server holds {} descriptors {SETTLE:?} after, {} before",
                        now.fds, base.fds
                    )
                });
                self.verdict
                    .check(now.rss_kib <= base.rss_kib + RSS_MARGIN_KIB, || {
                        format!(
                            "{name}: the server's resident memory is {} KiB {SETTLE:?} after, {} KiB before (margin {RSS_MARGIN_KIB} KiB)",
                            now.rss_kib, base.rss_kib
                        )
                    });
            }
        }
        let logged = self.server.stderr.since(log_before);
        self.verdict.check(logged.len() <= terms.log_lines, || {
            format!(
                "{name}: the server logged {} lines (at most {}), by kind:\n{}",
                logged.len(),
                terms.log_lines,
                line_kinds(&logged)
            )
        });
        if terms.logged {
            let attacker = ATTACKER.to_string();
            self.verdict
                .check(logged.iter().any(|l| names_why(l, &attacker)), || {
                    let what = if logged.is_empty() {
                        "it logged nothing".to_owned()
                    } else {
                        format!("{} lines, by kind:\n{}", logged.len(), line_kinds(&logged))
                    };
                    format!(
                        "{name}: the server logged no line naming the attacker ({attacker}) and why it was refused or lost ({what})"
                    )
                });
        }
        format!("{footprint}, {} log lines", logged.len())
    }

    /// Ends the server with SIGTERM and checks its `served:` line: no peer,
    /// link or registration left but its one send buffer (and, if given,
    /// the runs it served); then fails the test with every failure found.
    fn finish(mut self, runs: Option<u64>) {
        std::thread::sleep(QUIET.saturating_sub(self.calm_from.elapsed()));
        if self.server.alive().is_ok() {
            let started = Instant::now();
            let served = self.server.terminate(TERM_TIMEOUT);
            eprintln!(
                "SIGTERM: {:?} after {:.1?}",
                served.as_ref().map(|s| &s.0),
                started.elapsed()
            );
            if let Some(served) = self.verdict.ok("on SIGTERM", served) {
                let line = served.0.to_string();
                for (key, want) in [("peers", 0), ("links", 0), ("registrations", 1)] {
                    self.verdict.check(served.count(key) == Some(want), || {
                        format!("on SIGTERM: the served line should say {key}: {want}: {line}")
                    });
                }
                if let Some(runs) = runs {
                    self.verdict.check(served.count("runs") == Some(runs), || {
                        format!("on SIGTERM: the served line should count {runs} runs: {line}")
                    });
                }
                self.verdict.check(
                    served.0.get("refused").is_some_and(|r| r.is_object()),
                    || {
                        format!(
                            "on SIGTERM: the served line should hold the refusals by reason: {line}"
                        )
                    },
                );
            }
        }
        self.verdict.conclude();
    }
}

/// The server's footprint once its descriptors have been steady for a
/// while: the client of the last run may still be leaving.
fn quiet_footprint(server: &Server) -> Footprint {
    let mut last = server.footprint().expect("the server's footprint");
    let mut steady = 0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = server.footprint().expect("the server's footprint");
        steady = if now.fds == last.fds { steady + 1 } else { 0 };
        last = now;
        if steady >= 3 {
            break;
        }
    }
    last
}

/// Whether log line `line` names `who` and, after it, why: a reason
/// behind a `: ` (see [`Terms::logged`]).
fn names_why(line: &str, who: &str) -> bool {
    line.find(who).is_some_and(|at| {
        line[at + who.len()..]
            .split_once(": ")
            .is_some_and(|(_, why)| !why.trim().is_empty())
    })
}

/// `v` to two decimals, for messages.
fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Log lines counted by kind (timestamp dropped, numbers as `#`), most
/// frequent first, at most 8 kinds: what flooded the log, in a few lines.
fn line_kinds(lines: &[String]) -> String {
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for line in lines {
        // `2026-11-25T06:24:19.704706Z  WARN tcp ...`: the time goes.
        let text = match line.split_once('Z') {
            Some((time, rest)) if time.starts_with(|c: char| c.is_ascii_digit()) => rest,
            _ => line.as_str(),
        };
        let mut kind = String::new();
        for c in text.trim().chars() {
            if c.is_ascii_digit() {
                if !kind.ends_with('#') {
                    kind.push('#');
                }
            } else {
                kind.push(c);
            }
        }
        *kinds.entry(kind).or_default() += 1;
    }
    let mut kinds: Vec<(String, usize)> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    kinds
        .iter()
        .take(8)
        .map(|(k, n)| format!("    {n:>6} x {k}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What an attack is told and tells: the server, when to stop holding what
/// it holds, and whether it has done its fixed work.
#[derive(Clone)]
struct Ctl {
    target: SocketAddr,
    stop: Arc<AtomicBool>,
    worked: Arc<AtomicBool>,
    started: Instant,
}

impl Ctl {
    /// The attack has done its work (it may hold things until stopped).
    fn worked(&self) {
        self.worked.store(true, Ordering::SeqCst);
    }

    /// Whether the attack has done its work.
    fn has_worked(&self) -> bool {
        self.worked.load(Ordering::SeqCst)
    }

    /// Whether the attack is to end.
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether the attack has run out of time for its work.
    fn late(&self) -> bool {
        self.started.elapsed() > ATTACK_DEADLINE
    }

    /// Holds until told to stop.
    fn hold(&self) {
        while !self.stopped() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The report of an attack abandoned after `done` of `total` steps.
    fn abandoned(&self, done: u64, total: u64) -> String {
        self.worked();
        format!("abandoned after {done} of {total} steps in {ATTACK_DEADLINE:?}")
    }
}

/// A fake process name of the server's job with rank `FAKE_RANKS + n`.
fn fake(server: ProcName, n: u32) -> ProcName {
    ProcName::new(server.job, FAKE_RANKS + n)
}

// ----- 1. garbage connections --------------------------------------------

#[test]
fn garbage_connections() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("garbage connections", |ctl| {
        let mut rng = Rng::new(1);
        let pacer = Pacer::new(GARBAGE_CONNECTIONS, ATTACK_SPAN);
        let mut refused = 0;
        for i in 0..GARBAGE_CONNECTIONS {
            if ctl.late() {
                return ctl.abandoned(i, GARBAGE_CONNECTIONS);
            }
            pacer.turn(i);
            let Ok(mut stream) = dial(ctl.target, ATTACKER, None) else {
                refused += 1;
                continue;
            };
            let len = rng.below(1..513);
            let mut junk = rng.bytes(len);
            // A quarter start as a frame would (a known type, no flags),
            // so that the garbage gets past the first byte.
            if i % 4 == 0 && junk.len() > 1 {
                junk[0] = rng.below(1..10) as u8;
                junk[1] = 0;
            }
            let _ = stream.write_all(&junk);
            // Half end their stream and wait for the server to close; half
            // just go.
            if i % 2 == 0 {
                let _ = stream.shutdown(Shutdown::Write);
                drain_until_closed(&mut stream, Duration::from_millis(50));
            }
        }
        ctl.worked();
        format!("{GARBAGE_CONNECTIONS} garbage connections ({refused} not accepted)")
    });
    bench.finish(None);
}

// ----- 2. malformed and forged HELLOs -------------------------------------

/// The HELLOs of the forgery attack.
#[derive(Debug, Clone, Copy)]
enum Forgery {
    /// A valid HELLO cut short, then the end of the stream.
    Truncated,
    /// Protocol version 2.
    WrongVersion,
    /// Not "BTL\0".
    WrongMagic,
    /// A HELLO whose header says its body is 63 bytes.
    ShortBody,
    /// A HELLO whose header says its body is 2^62 bytes.
    HugeBody,
    /// Reserved header bits set.
    Reserved,
    /// Link index 65535.
    LinkIndex,
    /// Two HELLOs in a row.
    TwoHellos,
    /// A HELLO naming the server's own process, and a HELLO_ACK.
    OwnName,
    /// A live peer's HELLO, replayed byte for byte on a second connection.
    Replay,
}

const FORGERIES: [Forgery; 10] = [
    Forgery::Truncated,
    Forgery::WrongVersion,
    Forgery::WrongMagic,
    Forgery::ShortBody,
    Forgery::HugeBody,
    Forgery::Reserved,
    Forgery::LinkIndex,
    Forgery::TwoHellos,
    Forgery::OwnName,
    Forgery::Replay,
];

/// Plays `forgery` once against the server `name` at `target`, as fake
/// process number `n`.
fn forge(target: SocketAddr, name: ProcName, forgery: Forgery, n: u32, rng: &mut Rng) {
    let me = fake(name, n);
    let valid = hello_frame(hello(me, 0, rng));
    let (bytes, then_ack) = match forgery {
        Forgery::Truncated => (valid[..rng.below(1..valid.len())].to_vec(), false),
        Forgery::WrongVersion => (patched(&valid, HEADER_LEN + 4, &[2]), true),
        Forgery::WrongMagic => (patched(&valid, HEADER_LEN, b"XTL\0"), true),
        Forgery::ShortBody => (patched(&valid, 24, &63u64.to_be_bytes()), false),
        Forgery::HugeBody => (patched(&valid, 24, &(1u64 << 62).to_be_bytes()), false),
        Forgery::Reserved => (patched(&valid, 2, &[0xFF, 0xFF]), true),
        Forgery::LinkIndex => (hello_frame(hello(me, u16::MAX, rng)), true),
        Forgery::TwoHellos => ([valid.clone(), valid].concat(), true),
        Forgery::OwnName => (hello_frame(hello(name, 0, rng)), true),
        Forgery::Replay => {
            // A real peer, alive, and its HELLO played again elsewhere.
            let Ok(live) = FakePeer::join(target, ATTACKER, me, None, rng) else {
                return;
            };
            let replayed = live.hello_frame.clone();
            send_and_linger(target, &replayed, true);
            live.close_cleanly();
            return;
        }
    };
    send_and_linger(target, &bytes, then_ack);
}

/// `bytes` with `with` written at `at`.
fn patched(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v[at..at + with.len()].copy_from_slice(with);
    v
}

/// A connection that sends `bytes`, then (if `ack`) a HELLO_ACK once the
/// server's HELLO is in, ends its stream and waits briefly for the
/// server's end.
fn send_and_linger(target: SocketAddr, bytes: &[u8], ack: bool) {
    let Ok(mut stream) = dial(target, ATTACKER, None) else {
        return;
    };
    if stream.write_all(bytes).is_err() {
        return;
    }
    if ack {
        let mut first = [0u8; 1];
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .ok();
        if matches!(stream.read(&mut first), Ok(1)) {
            let _ = stream.write_all(&hello_ack_frame());
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    drain_until_closed(&mut stream, Duration::from_millis(100));
}

#[test]
fn malformed_and_forged_hellos() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("forged HELLOs", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(2);
        let total = FORGERY_ROUNDS * FORGERIES.len() as u64;
        let pacer = Pacer::new(total, ATTACK_SPAN);
        let mut step = 0;
        for round in 0..FORGERY_ROUNDS {
            for forgery in FORGERIES {
                if ctl.late() {
                    return ctl.abandoned(step, total);
                }
                pacer.turn(step);
                forge(ctl.target, name, forgery, (round * 16) as u32, &mut rng);
                step += 1;
            }
        }
        ctl.worked();
        format!("{total} forged HELLOs ({FORGERY_ROUNDS} rounds of {FORGERIES:?})")
    });
    bench.finish(None);
}

// ----- 3. a valid exchange, then a violation in the same write ------------

/// What follows the fake client's PING in the same write.
const VIOLATIONS: [&str; 4] = [
    "unknown type",
    "CLOSE Shutdown",
    "CLOSE ProtocolError",
    "garbage",
];

/// The bytes of violation `v` after a PING numbered 1.
fn violation(v: usize, rng: &mut Rng) -> Vec<u8> {
    match v {
        0 => unknown_type_frame(),
        1 => close_frame(2, CloseReason::Shutdown),
        2 => close_frame(2, CloseReason::ProtocolError),
        _ => {
            let mut junk = rng.bytes(64);
            junk[0] |= 0x80;
            junk
        }
    }
}

#[test]
fn a_ping_and_a_protocol_violation_in_one_write() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("ping then violation (tcp)", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(3);
        let pacer = Pacer::new(VIOLATORS, ATTACK_SPAN);
        let mut joined = 0;
        for i in 0..VIOLATORS {
            if ctl.late() {
                return ctl.abandoned(i, VIOLATORS);
            }
            pacer.turn(i);
            let me = fake(name, 0x1000 + i as u32);
            let Ok(mut peer) = FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) else {
                continue;
            };
            joined += 1;
            let seq = peer.seq();
            let v = i as usize % VIOLATIONS.len();
            let write = [ping(seq, 8), violation(v, &mut rng)].concat();
            let _ = peer.stream.write_all(&write);
            drain_until_closed(&mut peer.stream, Duration::from_millis(500));
        }
        ctl.worked();
        format!(
            "{VIOLATORS} fake clients ({joined} completed the handshake) pinged and broke the protocol in the same write ({VIOLATIONS:?} in turn)"
        )
    });
    bench.finish(None);
}

#[test]
fn a_ping_and_a_close_in_four_datagrams() {
    let mut bench = Bench::prepare(Btl::Udp);
    bench.attack("ping then close (udp)", |ctl| {
        let mut rng = Rng::new(4);
        let pacer = Pacer::new(VIOLATORS, ATTACK_SPAN);
        let mut failed = 0;
        // The server's name: its HELLO answers ours. Its job is needed for
        // a HELLO it takes; ask with a first fake process.
        let probe = udp_socket(ATTACKER).expect("a UDP socket");
        let name = server_name_udp(&probe, ctl.target, &mut rng);
        drop(probe);
        let Some(name) = name else {
            ctl.worked();
            return "abandoned: no HELLO from the server".to_owned();
        };
        for i in 0..VIOLATORS {
            if ctl.late() {
                return ctl.abandoned(i, VIOLATORS);
            }
            pacer.turn(i);
            let Ok(socket) = udp_socket(ATTACKER) else {
                failed += 1;
                continue;
            };
            let me = fake(name, 0x2000 + i as u32);
            // Past the server's cookie, HELLO, an all-zero HELLO_ACK, PING,
            // CLOSE: sent at once, replies never read.
            let first = hello_frame(hello(me, 0, &mut rng));
            if pass_cookie(&socket, ctl.target, &first).is_err() {
                failed += 1;
                continue;
            }
            for datagram in [
                first,
                hello_ack_frame(),
                ping(1, 8),
                close_frame(2, CloseReason::Shutdown),
            ] {
                if socket.send_to(&datagram, ctl.target).is_err() {
                    failed += 1;
                }
            }
        }
        ctl.worked();
        format!(
            "{VIOLATORS} fake clients sent HELLO, HELLO_ACK, PING, CLOSE ({failed} sends failed)"
        )
    });
    bench.finish(None);
}

/// The name the UDP server at `target` gives in the HELLO it answers a
/// HELLO with (ours from a process of no particular job, whose handshake
/// is then left to time out).
fn server_name_udp(
    socket: &std::net::UdpSocket,
    target: SocketAddr,
    rng: &mut Rng,
) -> Option<ProcName> {
    let me = ProcName::new(0, FAKE_RANKS - 1);
    let first = hello_frame(hello(me, 0, rng));
    pass_cookie(socket, target, &first).ok()?;
    socket.send_to(&first, target).ok()?;
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let Ok((n, _)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if let Ok((_, btl_core::wire::PacketRepr::Hello(h))) =
            btl_core::wire::parse_datagram(&buf[..n], &btl_core::wire::Limits::new(1 << 20))
        {
            return Some(ProcName::new(h.job, h.rank));
        }
    }
    None
}

// ----- 4. idle connections ----------------------------------------------------

/// An idle connection: open, sending nothing, reads not blocking.
fn idle(target: SocketAddr) -> Option<TcpStream> {
    let stream = dial(target, ATTACKER, None).ok()?;
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

#[test]
fn five_hundred_idle_connections() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("idle connections", |ctl| {
        let mut conns: Vec<Option<TcpStream>> = Vec::with_capacity(IDLE_CONNECTIONS);
        for i in 0..IDLE_CONNECTIONS {
            if ctl.late() {
                return ctl.abandoned(i as u64, IDLE_CONNECTIONS as u64);
            }
            conns.push(idle(ctl.target));
        }
        let opened = conns.iter().flatten().count();
        ctl.worked();
        // Each one the server drops is opened again at once, for as long
        // as the legit runs go.
        let (mut reopened, mut sink) = (0u64, [0u8; 4096]);
        while !ctl.stopped() {
            for slot in conns.iter_mut() {
                let dropped = match slot {
                    None => true,
                    Some(s) => match s.read(&mut sink) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != ErrorKind::WouldBlock,
                    },
                };
                if dropped && !ctl.stopped() {
                    *slot = idle(ctl.target);
                    reopened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        format!("{opened} of {IDLE_CONNECTIONS} idle connections opened at first, {reopened} reopened after the server dropped them")
    });
    bench.finish(None);
}

// ----- 5. short-lived peers -----------------------------------------------------

#[test]
fn a_hundred_short_lived_peers() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("short-lived peers", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(5);
        let pacer = Pacer::new(SHORT_LIVED_PEERS, ATTACK_SPAN);
        let mut joined = 0;
        for i in 0..SHORT_LIVED_PEERS {
            if ctl.late() {
                return ctl.abandoned(i, SHORT_LIVED_PEERS);
            }
            pacer.turn(i);
            let me = fake(name, 0x3000 + i as u32);
            let Ok(peer) = FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) else {
                continue;
            };
            joined += 1;
            // Half leave as a finishing process does, half vanish.
            if i % 2 == 0 {
                peer.close_cleanly();
            } else {
                drop(peer);
            }
        }
        ctl.worked();
        format!("{SHORT_LIVED_PEERS} short-lived peers ({joined} completed the handshake), half closed cleanly, half dropped")
    });
    bench.finish(None);
}

// ----- 6. connect/disconnect cycles --------------------------------------------

#[test]
fn five_thousand_connect_disconnect_cycles() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("connect/disconnect cycles", |ctl| {
        let pacer = Pacer::new(CYCLES, ATTACK_SPAN);
        let mut refused = 0;
        for i in 0..CYCLES {
            if ctl.late() {
                return ctl.abandoned(i, CYCLES);
            }
            pacer.turn(i);
            match dial(ctl.target, ATTACKER, None) {
                Ok(stream) => drop(stream),
                Err(_) => refused += 1,
            }
        }
        ctl.worked();
        format!("{CYCLES} connect/disconnect cycles ({refused} not accepted)")
    });
    bench.finish(None);
}

// ----- 7. a large ping from a peer that never reads -----------------------------

/// Payload of each SEND of a large ping: the server's largest fragment
/// (256 KiB) takes it with room to spare.
const PING_CHUNK: usize = 128 << 10;

/// Sends the SENDs of a ping whose header says `total` bytes, `data` of
/// them in all, from `peer`.
fn send_large_ping(peer: &mut FakePeer, total: u64, data: u64) -> std::io::Result<()> {
    let chunk = vec![0xa5u8; PING_CHUNK - BENCH_HEADER];
    let mut sent = 0u64;
    while sent < data {
        let n = (data - sent).min(chunk.len() as u64) as usize;
        let seq = peer.seq();
        peer.stream
            .write_all(&bench_send(seq, PING_TAG, total, &chunk[..n]))?;
        sent += n as u64;
    }
    Ok(())
}

#[test]
fn a_large_ping_from_a_peer_that_never_reads() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack("large pings, never read", |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(7);
        let mut notes = Vec::new();
        // A receive buffer of 4 KiB (fixed before the connect, so not
        // autotuned): the server's pong soon has nowhere to go.
        let reader = FakePeer::join(
            ctl.target,
            ATTACKER,
            fake(name, 0x4000),
            Some(4096),
            &mut rng,
        );
        let claimer = FakePeer::join(
            ctl.target,
            ATTACKER,
            fake(name, 0x4001),
            Some(4096),
            &mut rng,
        );
        let mut held = Vec::new();
        match reader {
            Ok(mut p) => {
                match send_large_ping(&mut p, LARGE_PING, LARGE_PING) {
                    Ok(()) => notes.push("a 4 MiB ping sent".to_owned()),
                    Err(e) => notes.push(format!("the 4 MiB ping stopped: {e}")),
                }
                held.push(p);
            }
            Err(e) => notes.push(format!("the first non-reader could not join: {e}")),
        }
        match claimer {
            Ok(mut p) => {
                // 1 MiB of a ping said to be 256 MiB.
                match send_large_ping(&mut p, CLAIMED_PING, 1 << 20) {
                    Ok(()) => notes.push("1 MiB of a ping claiming 256 MiB sent".to_owned()),
                    Err(e) => notes.push(format!("the 256 MiB claim stopped: {e}")),
                }
                held.push(p);
            }
            Err(e) => notes.push(format!("the second non-reader could not join: {e}")),
        }
        // Held past the server's peer timeout, legit runs going on: a
        // server that gives up on a peer that does not read drops them
        // meanwhile.
        let since = Instant::now();
        while since.elapsed() < NON_READER_HOLD && !ctl.stopped() {
            std::thread::sleep(Duration::from_millis(10));
        }
        ctl.worked();
        ctl.hold();
        drop(held);
        notes.join(", ")
    });
    bench.finish(None);
}

// ----- 8. junk datagrams ----------------------------------------------------------

#[test]
fn a_hundred_thousand_junk_datagrams() {
    let mut bench = Bench::prepare(Btl::Udp);
    bench.attack("junk datagrams", |ctl| {
        let Ok(socket) = udp_socket(ATTACKER) else {
            ctl.worked();
            return "abandoned: no UDP socket".to_owned();
        };
        let mut rng = Rng::new(8);
        // Paced in batches of 100: a sleep per datagram would cost more
        // than the datagram.
        let pacer = Pacer::new(JUNK_DATAGRAMS / 100, ATTACK_SPAN);
        let (mut failed, mut buf) = (0u64, vec![0u8; 1472]);
        for i in 0..JUNK_DATAGRAMS {
            if i % 100 == 0 {
                if ctl.late() {
                    return ctl.abandoned(i, JUNK_DATAGRAMS);
                }
                pacer.turn(i / 100);
            }
            let len = rng.below(1..1473);
            rng.fill(&mut buf[..len]);
            // A quarter start as a frame would.
            if i % 4 == 0 && len > 1 {
                buf[0] = rng.below(1..10) as u8;
                buf[1] = 0;
            }
            if socket.send_to(&buf[..len], ctl.target).is_err() {
                failed += 1;
            }
        }
        ctl.worked();
        format!("{JUNK_DATAGRAMS} junk datagrams from one socket ({failed} sends failed)")
    });
    bench.finish(None);
}

// ----- the second pass (#23): peers that play the protocol just well enough
//
// Numbered as the issue numbers them after the colon; the phases that must
// leave a line naming the attacker (#23: 10) are 1, 2 and 5.

/// Holds `peers` until told to stop, reading what the server sends them
/// and answering its keepalives with what `acking` says; how many the
/// server ended meanwhile.
fn hold_answering(ctl: &Ctl, peers: &mut Vec<FakePeer>, acking: Acking) -> usize {
    let before = peers.len();
    while !ctl.stopped() {
        peers.retain_mut(|p| p.answer_probes(acking).is_ok());
        std::thread::sleep(KEEPALIVE_POLL);
    }
    before - peers.len()
}

/// The SENDs a peer of the gap attack sends: numbered 2 to 17 (its whole
/// grant), never 1, each a complete 8-byte ping.
fn sends_after_a_gap() -> impl Iterator<Item = Vec<u8>> {
    (2..2 + CREDITS).map(|seq| ping(seq, 8))
}

// ----- 9. SENDs held behind a gap that never closes (#23: 1) ---------------

/// [`GAP_PEERS`] fake peers complete real handshakes and send SENDs
/// numbered 2 to 17 but never 1, then answer every keepalive. Before the
/// second pass the server kept each of those SENDs, with its fragment and
/// the event place it claimed, waiting for the first: 192 places, all
/// there were, so no SEND from anyone else was taken, legit clients timed
/// out, and nothing was logged. The server must hold what a peer has out
/// of order against that peer's share only, lose a peer whose gap never
/// closes (keepalive answers are no progress), log it, and serve its legit
/// client as before.
#[test]
fn sends_held_behind_a_gap_that_never_closes() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack_under("sends behind a gap (tcp)", FAIR_SHARES_LOGGED, |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(9);
        let mut peers = Vec::new();
        for i in 0..GAP_PEERS {
            if ctl.late() {
                return ctl.abandoned(u64::from(i), u64::from(GAP_PEERS));
            }
            let me = fake(name, 0x5000 + i);
            let Ok(mut peer) = FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) else {
                continue;
            };
            if sends_after_a_gap().all(|f| peer.stream.write_all(&f).is_ok()) {
                peers.push(peer);
            }
        }
        let joined = peers.len();
        ctl.worked();
        let ended = hold_answering(ctl, &mut peers, NOTHING_RECEIVED);
        format!(
            "{GAP_PEERS} fake peers ({joined} joined) sent SENDs 2 to {} and never 1, answering keepalives ({ended} ended by the server)",
            CREDITS + 1
        )
    });
    bench.finish(None);
}

/// As [`sends_held_behind_a_gap_that_never_closes`], over UDP: each fake
/// peer from a socket of its own, its SENDs one datagram each.
#[test]
fn sends_held_behind_a_gap_that_never_closes_udp() {
    let mut bench = Bench::prepare(Btl::Udp);
    bench.attack_under("sends behind a gap (udp)", FAIR_SHARES_LOGGED, |ctl| {
        let mut rng = Rng::new(10);
        let Some(name) = server_name_udp_quietly(ctl.target, &mut rng) else {
            ctl.worked();
            return "abandoned: no HELLO from the server".to_owned();
        };
        let mut peers = Vec::new();
        for i in 0..GAP_PEERS {
            if ctl.late() {
                return ctl.abandoned(u64::from(i), u64::from(GAP_PEERS));
            }
            let me = fake(name, 0x5100 + i);
            let Ok(peer) = DatagramPeer::join(ctl.target, ATTACKER, me, &mut rng) else {
                continue;
            };
            if sends_after_a_gap().all(|f| peer.send(&f).is_ok()) {
                peers.push(peer);
            }
        }
        let joined = peers.len();
        ctl.worked();
        let mut failed = 0;
        while !ctl.stopped() {
            for p in peers.iter_mut() {
                failed += usize::from(p.answer_probes(NOTHING_RECEIVED).is_err());
            }
            std::thread::sleep(KEEPALIVE_POLL);
        }
        format!(
            "{GAP_PEERS} fake peers ({joined} joined) sent SENDs 2 to {} and never 1, answering keepalives ({failed} reads failed)",
            CREDITS + 1
        )
    });
    bench.finish(None);
}

/// As [`server_name_udp`], the probe's handshake then ended with a CLOSE
/// (Shutdown), as a process that changed its mind ends it: the server
/// logs nothing of it (where a handshake left to time out is logged), so
/// that what the server logs during the attack is the attack's.
fn server_name_udp_quietly(target: SocketAddr, rng: &mut Rng) -> Option<ProcName> {
    let probe = udp_socket(ATTACKER).ok()?;
    let name = server_name_udp(&probe, target, rng);
    let _ = probe.send_to(&close_frame(1, CloseReason::Shutdown), target);
    name
}

// ----- 10. peers that never acknowledge (#23: 2) ----------------------------

/// One peer that reads every reply and never acknowledges one.
struct NonAcker {
    /// Its connection.
    peer: FakePeer,
    /// The size of its pings.
    size: usize,
    /// Pings sent.
    sent: u64,
    /// The server's running total of credits given back to it.
    granted: u32,
    /// Pongs read.
    pongs: u64,
}

/// What a non-acknowledging peer's headers say: `ack` 0 (nothing of the
/// server's received, ever), and credits without bound.
const NEVER_ACKED: Acking = Acking {
    ack: 0,
    credits: UNBOUNDED_GRANT,
};

impl NonAcker {
    /// Reads what the server sent, answers its keepalives, and pings as
    /// far as its credits let; an error once the server has ended it.
    fn turn(&mut self) -> std::io::Result<()> {
        let (mut granted, mut pongs, mut probed) = (self.granted, 0, false);
        self.peer.read_available(|header, packet| {
            granted = granted.max(header.credits);
            probed |= is_probe(header);
            pongs += u64::from(matches!(packet, PacketRepr::Send { .. }));
        })?;
        (self.granted, self.pongs) = (granted, self.pongs + pongs);
        let allowed = (CREDITS + u64::from(self.granted)).min(PINGS_PER_NON_ACKER);
        while self.sent < allowed {
            let seq = self.peer.seq();
            self.peer
                .stream
                .write_all(&ping_acking(seq, NEVER_ACKED, self.size))?;
            self.sent += 1;
        }
        if probed {
            self.peer.stream.write_all(&ack_frame(NEVER_ACKED))?;
        }
        Ok(())
    }
}

/// [`NON_ACKERS_PER_CLASS`] fake peers per fragment class the legit
/// client's pongs use ping the server, read every pong, grant it credits
/// and answer every keepalive, but acknowledge nothing (the ack field of
/// every header they send is 0). Before the second pass the server kept
/// each pong's fragment for a resend that never came, until three
/// quarters of the class were held and every reply (the legit client's
/// too) waited for a fragment; the attackers were never lost, since only
/// silence counted, and nothing was logged. The server must hold a peer's
/// unacknowledged packets against its own share, lose a peer whose
/// acknowledgements do not advance while it holds the server's buffers,
/// log it, and serve its legit client as before.
#[test]
fn peers_that_read_every_reply_and_never_acknowledge() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack_under("never acknowledged", FAIR_SHARES_LOGGED, |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(11);
        let mut peers = Vec::new();
        for (c, &size) in NON_ACKER_PINGS.iter().enumerate() {
            for i in 0..NON_ACKERS_PER_CLASS {
                let me = fake(name, 0x5200 + 0x10 * c as u32 + i);
                if let Ok(peer) = FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) {
                    peers.push(NonAcker {
                        peer,
                        size,
                        sent: 0,
                        granted: 0,
                        pongs: 0,
                    });
                }
            }
        }
        let joined = peers.len();
        let (mut ended, mut pongs) = (0, 0);
        while !ctl.stopped() {
            peers.retain_mut(|p| {
                let on = p.turn().is_ok();
                if !on {
                    ended += 1;
                    pongs += p.pongs;
                }
                on
            });
            // Done once every ping has gone (or the server, granting no
            // more credits, took what it would by the deadline).
            if peers.iter().all(|p| p.sent >= PINGS_PER_NON_ACKER) || ctl.late() {
                ctl.worked();
            }
            std::thread::sleep(KEEPALIVE_POLL / 4);
        }
        pongs += peers.iter().map(|p| p.pongs).sum::<u64>();
        format!(
            "{} fake peers ({joined} joined) pinged with {NON_ACKER_PINGS:?} B, {PINGS_PER_NON_ACKER} each, read {pongs} pongs and acknowledged none ({ended} ended by the server)",
            NON_ACKERS_PER_CLASS as usize * NON_ACKER_PINGS.len()
        )
    });
    bench.finish(None);
}

// ----- 11. one connection streaming checksummed PUTs (#23: 3) ---------------

/// One fake peer that announced no checksums streams the same PUT of
/// [`CHECKSUMMED_PUT`] bytes again and again with the CHECKSUM flag set
/// (the first is refused, the rest are duplicates). Before the second
/// pass the server checked every flagged frame's checksum and kept
/// reading that one connection while its reads came back full: no other
/// connection's HELLO was read, and legit clients gave the server up after
/// their 5 s peer timeout (`btl connect` then said the server did not
/// answer). A CHECKSUM flag the HELLOs did not agree on must be a protocol
/// error, and a pass must read each ready connection up to a budget and go
/// round.
#[test]
fn one_connection_streaming_checksummed_puts() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack_under("checksummed puts", FAIR_SHARES, |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(12);
        let mut peer =
            match FakePeer::join(ctl.target, ATTACKER, fake(name, 0x5300), None, &mut rng) {
                Ok(p) => p,
                Err(e) => {
                    ctl.worked();
                    return format!("abandoned: the fake peer could not join: {e}");
                }
            };
        let len = CHECKSUMMED_PUT.min(peer.server.max_body - PutRepr::LEN as u64);
        let put = PutRepr {
            xfer_id: 1,
            handle: 0,
            offset: 0,
            total_len: len,
            index: 0,
            count: 1,
        };
        let frame = checksummed_put(peer.seq(), put, &vec![0xc5; len as usize]);
        // What the server answers is read, and dropped, as it comes.
        let drained = peer
            .stream
            .try_clone()
            .map(|mut s| std::thread::spawn(move || drain_until_closed(&mut s, ATTACK_DEADLINE)));
        let (mut sent, mut stopped_by) = (0u64, None);
        while !ctl.stopped() {
            if let Err(e) = peer.stream.write_all(&frame) {
                stopped_by = Some(e);
                break;
            }
            sent += 1;
            ctl.worked();
        }
        ctl.worked();
        let _ = peer.stream.shutdown(Shutdown::Both);
        if let Ok(reader) = drained {
            let _ = reader.join();
        }
        format!(
            "one connection streamed {sent} PUTs of {len} B with the CHECKSUM flag{}",
            stopped_by
                .map(|e| format!(" (writes failed: {e})"))
                .unwrap_or_default()
        )
    });
    bench.finish(None);
}

// ----- 12. handshakes from thirty addresses (#23: 4) ------------------------

/// When the churn's handshakes may be opened: in bursts of
/// [`CHURN_BURST`] every tick ([`churn_tick`]); a turn not taken in its tick is
/// lost, not saved up, so that no burst overflows the server's listen
/// backlog.
#[derive(Debug)]
struct Turns {
    /// The pause between bursts ([`churn_tick`]).
    tick: Duration,
    /// When the current burst goes.
    burst_at: Instant,
    /// Turns of it taken.
    taken: usize,
}

impl Turns {
    /// The time of the next turn, taken.
    fn take(&mut self) -> Instant {
        let now = Instant::now();
        if self.taken >= CHURN_BURST {
            self.burst_at += self.tick;
            self.taken = 0;
        }
        if self.burst_at + self.tick < now {
            self.burst_at = now;
            self.taken = 0;
        }
        self.taken += 1;
        self.burst_at
    }
}

/// One handshake of the churn, until told to stop: dialled from `source`
/// in its turn, a HELLO of `me` sent (announcing a job key if `keyed`, so
/// that a keyed server answers it and waits for its proof) and nothing
/// more, the server's answers read only to see it end, then opened again;
/// how many times it was opened.
fn churn_one(
    ctl: &Ctl,
    source: IpAddr,
    me: ProcName,
    keyed: bool,
    turns: &Mutex<Turns>,
    mut rng: Rng,
) -> u64 {
    let (mut opened, mut sink) = (0, [0u8; 4096]);
    while !ctl.stopped() {
        let due = turns.lock().unwrap_or_else(|e| e.into_inner()).take();
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let Ok(mut stream) = dial(ctl.target, source, None) else {
            continue;
        };
        let mut ours = hello(me, 0, &mut rng);
        ours.capabilities
            .set(btl_core::wire::Capabilities::JOB_KEY, keyed);
        if stream.write_all(&hello_frame(ours)).is_err()
            || stream.set_read_timeout(Some(CHURN_READ_WAIT)).is_err()
        {
            continue;
        }
        opened += 1;
        while !ctl.stopped() {
            match stream.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }
    opened
}

/// Handshakes are opened from [`CHURN_SOURCES`] addresses,
/// [`CHURN_PER_SOURCE`] at a time from each (each a HELLO, never
/// finished), and each one the server drops is opened again as soon as
/// its turn comes (4,000 a second at most). Before the second pass every
/// stranger beyond the handshake budget evicted the oldest silent
/// handshake, and a legit link just accepted and not read yet counted as
/// silent: a stranger accepted after it evicted it, and the legit client
/// was refused ("no room for another client"; a third to half of the runs
/// here). Now the source holding the most handshakes gives way, a link is
/// judged silent only once it had time to speak, and a listener accepts a
/// few connections per pass: every legit run must be served.
///
/// Its latency is held to the first pass's bound, not the second's 2x:
/// the server pays the kernel for each of the flood's 4,000 connections a
/// second (accept, the HELLO it answers, the close), on the CPU the
/// attacker shares with it, and the legit client's median comes out at
/// 2.0 to 2.2 times its undisturbed one here (debug build), however the
/// server orders its work.
#[test]
fn handshakes_from_thirty_addresses_reopened_as_dropped() {
    churn(Bench::prepare(Btl::Tcp), false);
}

/// As [`handshakes_from_thirty_addresses_reopened_as_dropped`], the server
/// and its legit clients holding a job key, and the churn's HELLOs
/// announcing one: the server answers each and waits for a proof that
/// never comes. Before the second pass 77 % of the legit runs were served
/// so; now every one must be.
#[test]
fn keyed_handshakes_from_thirty_addresses_reopened_as_dropped() {
    churn(Bench::prepare_keyed(Btl::Tcp), true);
}

/// The pause between the churn's bursts on a machine whose undisturbed
/// latency is `baseline_us`: [`CHURN_TICK`], lengthened in proportion
/// where the machine is slower than when it was set.
fn churn_tick(baseline_us: f64) -> Duration {
    CHURN_TICK.mul_f64((baseline_us / CHURN_TICK_AT_US).max(1.0))
}

/// The handshake churn against `bench`'s server, its HELLOs announcing a
/// job key if `keyed`.
fn churn(mut bench: Bench, keyed: bool) {
    let terms = Terms {
        log_lines: LOG_LINES_MANY_SOURCES,
        slowdown: SLOWDOWN_BOUND,
        ..FAIR_SHARES
    };
    let name = if keyed {
        "handshake churn (keyed)"
    } else {
        "handshake churn"
    };
    let tick = churn_tick(bench.baseline_us);
    bench.attack_under(name, terms, move |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let started = Instant::now();
        let turns = Arc::new(Mutex::new(Turns {
            tick,
            burst_at: started,
            taken: 0,
        }));
        let slots = usize::from(CHURN_SOURCES) * CHURN_PER_SOURCE;
        let threads: Vec<_> = (0..slots)
            .filter_map(|i| {
                let (ctl, turns) = (ctl.clone(), Arc::clone(&turns));
                let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i / CHURN_PER_SOURCE) as u8));
                let me = fake(name, 0x6000 + i as u32);
                let rng = Rng::new(13 + i as u64);
                std::thread::Builder::new()
                    .stack_size(CHURN_STACK)
                    .spawn(move || churn_one(&ctl, source, me, keyed, &turns, rng))
                    .ok()
            })
            .collect();
        while !ctl.stopped() {
            if started.elapsed() >= CHURN_SPAN {
                ctl.worked();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let holders = threads.len();
        let opened: u64 = threads.into_iter().filter_map(|t| t.join().ok()).sum();
        let rate = opened as f64 / started.elapsed().as_secs_f64();
        format!(
            "{opened} handshakes from {CHURN_SOURCES} addresses, {holders} at a time, opened as the server dropped them ({rate:.0}/s, in bursts of {CHURN_BURST} every {tick:.1?})"
        )
    });
    bench.finish(None);
}

// ----- 13. every peer slot taken from one address (#23: 5) ------------------

/// [`SQUATTERS`] fake peers complete real handshakes from one address,
/// each under a rank of its own, and stay, answering every keepalive.
/// Before the second pass they took every peer slot, every legit client
/// was refused at once for as long as they stayed, and nothing was logged.
/// One source (and the strangers with no job key) must hold no more than
/// its share of the peer slots; a refused handshake is logged.
#[test]
fn every_peer_slot_taken_from_one_address() {
    let mut bench = Bench::prepare(Btl::Tcp);
    bench.attack_under("peer slots taken", FAIR_SHARES_LOGGED, |ctl| {
        let name = match server_name(ctl.target, ATTACKER) {
            Ok(n) => n,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: no HELLO from the server: {e}");
            }
        };
        let mut rng = Rng::new(14);
        let mut peers = Vec::new();
        let mut refused = Vec::new();
        for i in 0..SQUATTERS {
            if ctl.late() {
                return ctl.abandoned(u64::from(i), u64::from(SQUATTERS));
            }
            match FakePeer::join(ctl.target, ATTACKER, fake(name, 0x5400 + i), None, &mut rng) {
                Ok(p) => peers.push(p),
                Err(e) => refused.push(e.to_string()),
            }
            // The keepalives of those in already.
            peers.retain_mut(|p| p.answer_probes(NOTHING_RECEIVED).is_ok());
        }
        let joined = peers.len();
        ctl.worked();
        let ended = hold_answering(ctl, &mut peers, NOTHING_RECEIVED);
        format!(
            "{SQUATTERS} fake peers from one address ({joined} joined{}), answering keepalives ({ended} ended by the server)",
            refused
                .first()
                .map(|e| format!(", {} refused: {e}", refused.len()))
                .unwrap_or_default()
        )
    });
    bench.finish(None);
}

// ----- 14. unacknowledged GETs (#23: 9) -------------------------------------

/// A GET of [`GET_LEN`] bytes of the server's send buffer (its first
/// registration), as transfer `xfer_id`, into fake registration 1 of
/// process `me`.
fn get_of_send_buffer(xfer_id: u64, me: ProcName) -> GetRepr {
    GetRepr {
        xfer_id,
        src_handle: first_registration_key(),
        src_offset: 0,
        len: GET_LEN,
        target_job: me.job,
        target_rank: me.rank,
        dst_handle: 1,
        dst_offset: 0,
    }
}

/// A legit GET, the `n`th: a fresh process of the server `server`'s job
/// joins from the legit client's address ([`CLIENT`]), GETs [`GET_LEN`]
/// bytes of the server's send buffer, acknowledges the PUT that brings
/// them and leaves as a finishing process does; how long the answer
/// took, or why there was none.
fn legit_get(target: SocketAddr, server: ProcName, n: u32) -> Result<Duration, String> {
    let mut rng = Rng::new(0x6e7 + u64::from(n));
    let me = fake(server, 0x7000 + n);
    let mut peer = FakePeer::join(target, CLIENT, me, None, &mut rng)
        .map_err(|e| format!("could not join: {e}"))?;
    let started = Instant::now();
    let seq = peer.seq();
    peer.stream
        .write_all(&get_frame(seq, get_of_send_buffer(1, me)))
        .map_err(|e| format!("the GET could not go: {e}"))?;
    let (mut got, mut last_seq, mut refused) = (0u64, 0u64, None);
    while got < GET_LEN && refused.is_none() {
        if started.elapsed() > GET_WAIT {
            return Err(format!("no answer within {GET_WAIT:?} ({got} B came)"));
        }
        peer.read_available(|header, packet| match packet {
            PacketRepr::Put { put, data } if put.xfer_id & (u64::MAX >> 1) == 1 => {
                got += data.len() as u64;
                last_seq = last_seq.max(header.seq);
            }
            PacketRepr::Control(ControlRepr::Reject(r)) if r.xfer_id == 1 => {
                refused = Some(format!("REJECT {:?} ({})", r.code, r.code.description()));
            }
            _ => {}
        })
        .map_err(|e| format!("the server ended the connection: {e}"))?;
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = started.elapsed();
    if let Some(why) = refused {
        peer.close_cleanly();
        return Err(format!("the server refused it: {why}"));
    }
    let _ = peer.stream.write_all(&ack_frame(Acking {
        ack: last_seq + 1,
        credits: 0,
    }));
    peer.close_cleanly();
    Ok(took)
}

/// One fake peer GETs [`UNACKED_GETS`] slices of the server's send buffer,
/// reads the PUTs that answer them and never acknowledges one, answering
/// every keepalive. Before the second pass each of those GETs held one of
/// the server's operation slots until its PUT was acknowledged, so every
/// other peer's GET was refused (TooLarge) for as long as the attacker
/// stayed, and its peer timeout after. `btl connect` does no GET: after
/// each legit run a fresh process from the legit client's address GETs
/// from the server too ([`legit_get`]), and must be answered. A peer's
/// operations must count against its own share of the slots.
#[test]
fn sixty_four_unacknowledged_gets() {
    let mut bench = Bench::prepare(Btl::Tcp);
    let server = server_name(bench.server.addr, CLIENT).expect("the server's name");
    if let Err(e) = legit_get(bench.server.addr, server, 0) {
        panic!("an undisturbed legit get failed: {e}");
    }
    let terms = Terms {
        gets_of: Some(server),
        ..FAIR_SHARES
    };
    bench.attack_under("unacknowledged gets", terms, move |ctl| {
        let mut rng = Rng::new(15);
        let me = fake(server, 0x5500);
        let mut peer = match FakePeer::join(ctl.target, ATTACKER, me, None, &mut rng) {
            Ok(p) => p,
            Err(e) => {
                ctl.worked();
                return format!("abandoned: the fake peer could not join: {e}");
            }
        };
        let gets: Vec<u8> = (1..=UNACKED_GETS)
            .flat_map(|xfer| {
                let seq = peer.seq();
                get_frame(seq, get_of_send_buffer(xfer, me))
            })
            .collect();
        if let Err(e) = peer.stream.write_all(&gets) {
            ctl.worked();
            return format!("abandoned: the GETs could not go: {e}");
        }
        ctl.worked();
        let (mut puts, mut rejects, mut ended) = (0u64, 0u64, None);
        while !ctl.stopped() {
            let mut probed = false;
            let read = peer.read_available(|header, packet| {
                probed |= is_probe(header);
                match packet {
                    PacketRepr::Put { .. } => puts += 1,
                    PacketRepr::Control(ControlRepr::Reject(_)) => rejects += 1,
                    _ => {}
                }
            });
            if let Err(e) = read.and_then(|()| {
                if probed {
                    peer.stream.write_all(&ack_frame(NOTHING_RECEIVED))
                } else {
                    Ok(())
                }
            }) {
                ended = Some(e);
                break;
            }
            std::thread::sleep(KEEPALIVE_POLL);
        }
        format!(
            "one fake peer sent {UNACKED_GETS} GETs of {GET_LEN} B, read {puts} PUTs and {rejects} REJECTs and acknowledged none{}",
            ended
                .map(|e| format!(" (ended by the server: {e})"))
                .unwrap_or_default()
        )
    });
    bench.finish(None);
}

// ----- one client after another ---------------------------------------------------

#[test]
fn one_client_after_another() {
    let runs: usize = std::env::var("BTL_HOSTILE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEQUENTIAL_RUNS);
    let mut bench = Bench::prepare(Btl::Tcp);
    let log_before = bench.server.stderr.len();
    let started = Instant::now();
    let mut done = 0;
    for i in 1..=runs {
        let run = bench.server.legit_run(SEQUENTIAL);
        if let Err(e) = run {
            bench
                .verdict
                .check(false, || format!("client {i} of {runs} failed: {e}"));
            break;
        }
        done += 1;
        bench.runs += 1;
    }
    let took = started.elapsed();
    bench.calm_from = Instant::now();
    let after = bench.aftermath("one client after another", log_before, FIRST_PASS);
    eprintln!(
        "{done} of {runs} clients one after another in {took:.1?} ({:.1?} each); {after}",
        took / done.max(1) as u32,
    );
    let served = bench.runs;
    bench.finish(Some(served));
}

// ----- 15. amplification through a UDP server (#23: 6) ----------------------

/// Sockets the amplification attack sends from, each an address that
/// never shows it receives there (as a forged source would not).
const UNVALIDATED: u32 = 20;
/// How many bytes a server may send an address that has not shown it
/// receives there, per byte received from it: QUIC's bound.
const AMPLIFICATION_BOUND: u64 = 3;
/// How long the attack's sockets go on counting what comes once they
/// stop sending: past the server's handshake timeout (2 s), so that
/// whatever it would repeat to them has come.
const AMPLIFICATION_TAIL: Duration = Duration::from_millis(2500);

/// A UDP server is sent, from addresses that never answer, what would make
/// it send the most: HELLOs, and HELLO, an all-zero HELLO_ACK and a GET of
/// its 4 MiB send buffer (its registration key is the first a table
/// gives), as a forger naming a victim's address would. Before the second
/// pass it answered each HELLO with HELLO and HELLO_ACK, repeated every
/// 50 ms for 5 s (165 times what came), and served the GET (325,000
/// times). Now it answers a stranger's HELLO with a COOKIE and nothing
/// else until the address echoes it: every address is sent at most
/// [`AMPLIFICATION_BOUND`] times what it sent, and nothing is kept.
#[test]
fn amplification_through_a_udp_server() {
    let mut bench = Bench::prepare(Btl::Udp);
    let counts = Arc::new(Mutex::new((0u64, 0u64)));
    let theirs = Arc::clone(&counts);
    // Twenty sources (address and port), each refused by name at first.
    let terms = Terms {
        log_lines: LOG_LINES_MANY_SOURCES,
        ..FAIR_SHARES
    };
    bench.attack_under("amplification", terms, move |ctl| {
        let mut rng = Rng::new(15);
        let sockets: Vec<_> = (0..UNVALIDATED)
            .filter_map(|_| udp_socket(ATTACKER).ok())
            .collect();
        for s in &sockets {
            let _ = s.set_nonblocking(true);
        }
        let key = first_registration_key();
        let get = GetRepr {
            xfer_id: 1,
            src_handle: key,
            src_offset: 0,
            len: 4 << 20,
            target_job: 0,
            target_rank: 0,
            dst_handle: 0,
            dst_offset: 0,
        };
        let (mut sent, mut received) = (0u64, 0u64);
        let mut buf = vec![0u8; 1 << 16];
        let mut drain = |sockets: &[std::net::UdpSocket], received: &mut u64| {
            for s in sockets {
                while let Ok((n, _)) = s.recv_from(&mut buf) {
                    *received += n as u64;
                }
            }
        };
        let started = Instant::now();
        let mut round = 0u32;
        while started.elapsed() < ATTACK_SPAN && !ctl.late() {
            for (i, s) in sockets.iter().enumerate() {
                let me = fake(ProcName::new(0, 0), 0x7000 + i as u32 + round * UNVALIDATED);
                let hello = hello_frame(hello(me, 0, &mut rng));
                let burst: Vec<Vec<u8>> = if i % 2 == 0 {
                    vec![hello]
                } else {
                    vec![hello, hello_ack_frame(), get_frame(1, get)]
                };
                for d in burst {
                    if s.send_to(&d, ctl.target).is_ok() {
                        sent += d.len() as u64;
                    }
                }
            }
            round += 1;
            drain(&sockets, &mut received);
            std::thread::sleep(Duration::from_millis(20));
        }
        ctl.worked();
        let tail = Instant::now();
        while tail.elapsed() < AMPLIFICATION_TAIL {
            drain(&sockets, &mut received);
            std::thread::sleep(Duration::from_millis(20));
        }
        *theirs.lock().unwrap_or_else(|e| e.into_inner()) = (sent, received);
        format!(
            "{} addresses sent {sent} B of HELLOs (and HELLO_ACK and GET) and never echoed a cookie; the server sent them {received} B",
            sockets.len()
        )
    });
    let (sent, received) = *counts.lock().unwrap_or_else(|e| e.into_inner());
    bench
        .verdict
        .check(sent > 0, || "amplification: nothing was sent".to_owned());
    bench.verdict.check(received <= AMPLIFICATION_BOUND * sent, || {
        format!(
            "amplification: the server sent {received} B to addresses that sent it {sent} B and never showed they receive there ({:.1}x, at most {AMPLIFICATION_BOUND}x)",
            received as f64 / sent.max(1) as f64
        )
    });
    bench.finish(None);
}

// ----- 16. forged control on keyed UDP links (#23: 7) ------------------------

/// How often the forger sends its forgeries at every legit client it
/// knows, both ways.
const FORGERY_TICK: Duration = Duration::from_millis(2);
/// How often it looks for new legit clients (new `btl connect`
/// processes).
const CLIENT_SCAN: Duration = Duration::from_millis(10);
/// How long after it first sees a client the forger starts on it: the
/// client's handshake (one round trip here) is over by then. Before the
/// keys are derived nothing can be sealed, and a CLOSE forged into a
/// handshake still fails that attempt (see the note on this test).
const HANDSHAKE_GRACE: Duration = Duration::from_millis(50);

/// What the forger sends in each direction of a legit link, none of it
/// sealed: a CLOSE of three reasons, an ACK of packets never sent, one
/// granting credits far ahead, the HELLO of another process, and SENDs
/// numbered as the next ones would be (a ping, from the client's
/// address).
fn forgeries(rng: &mut Rng) -> Vec<Vec<u8>> {
    let ack = PacketRepr::Ack(AckRepr { sack: 0 });
    let mut frames: Vec<Vec<u8>> = [
        CloseReason::ProtocolError,
        CloseReason::Shutdown,
        CloseReason::Normal,
    ]
    .into_iter()
    .map(|reason| close_frame(0, reason))
    .collect();
    frames.push(peer::frame(
        HeaderRepr {
            ack: u64::MAX / 2,
            ..HeaderRepr::new(&ack)
        },
        &ack,
    ));
    frames.push(peer::frame(
        HeaderRepr {
            credits: 1 << 30,
            ack: 1,
            ..HeaderRepr::new(&ack)
        },
        &ack,
    ));
    frames.push(hello_frame(hello(
        fake(ProcName::new(0, 0), 0x7700),
        0,
        rng,
    )));
    for seq in 1..4 {
        let send = PacketRepr::Send {
            send: SendRepr { tag: PING_TAG },
            payload: &[0; 8],
        };
        frames.push(peer::frame(
            HeaderRepr {
                seq,
                ..HeaderRepr::new(&send)
            },
            &send,
        ));
    }
    frames
}

/// The local UDP ports of the `btl connect` processes running against
/// `server` now: their sockets' inodes (`/proc/PID/fd`), found in
/// `/proc/net/udp`.
fn legit_client_ports(server: SocketAddr) -> Vec<u16> {
    let target = server.to_string();
    let mut inodes = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in procs.flatten() {
        let pid = entry.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let ours = args.contains(&&b"connect"[..]) && args.contains(&target.as_bytes());
        if !ours {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path())
                && let Some(inode) = link
                    .to_string_lossy()
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
            {
                inodes.push(inode.to_owned());
            }
        }
    }
    let Ok(table) = std::fs::read_to_string("/proc/net/udp") else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port = cols.get(1)?.split(':').nth(1)?;
            inodes
                .contains(&(*cols.get(9)?).to_owned())
                .then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect()
}

/// Attack 7 of the second pass: over UDP, between a keyed server and its
/// keyed legit clients, a forger off the path sends from each end's
/// address to the other what would end or corrupt their link: CLOSEs, an
/// ACK of what was never sent, a credit total far ahead, another
/// process's HELLO, SENDs numbered as the next would be
/// ([`forgeries`]). Before the seal, one forged CLOSE ended a session in
/// 0.1–0.2 s; now each end takes only what the other sealed, and every
/// legit run is served.
///
/// The forger starts on a client once its handshake is over
/// ([`HANDSHAKE_GRACE`]): what comes before the handshake derived the
/// keys cannot be sealed, and a CLOSE forged into that one round trip
/// fails the attempt, as an alert forged into a DTLS 1.2 handshake does.
#[test]
fn forged_control_on_keyed_udp_links() {
    let mut bench = Bench::prepare_keyed(Btl::Udp);
    bench.attack_under("forged control (keyed udp)", FAIR_SHARES, |ctl| {
        let forger = match Forger::new() {
            Ok(f) => f,
            Err(e) => {
                ctl.worked();
                return format!(
                    "abandoned: no raw socket to forge sources with ({e}): the test needs root or CAP_NET_RAW"
                );
            }
        };
        let SocketAddr::V4(server) = ctl.target else {
            ctl.worked();
            return "abandoned: the server has no IPv4 address".to_owned();
        };
        let frames = forgeries(&mut Rng::new(16));
        let (mut ports, mut scanned) = (Vec::new(), Instant::now() - CLIENT_SCAN);
        let mut first_seen = std::collections::HashMap::new();
        let mut clients = std::collections::HashSet::new();
        let (mut sent, mut failed) = (0u64, 0u64);
        while !ctl.stopped() && !ctl.late() {
            if scanned.elapsed() >= CLIENT_SCAN {
                ports = legit_client_ports(ctl.target);
                scanned = Instant::now();
            }
            for &port in &ports {
                let seen = *first_seen.entry(port).or_insert_with(Instant::now);
                if seen.elapsed() < HANDSHAKE_GRACE {
                    continue;
                }
                clients.insert(port);
                let client = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
                for f in &frames {
                    for (from, to) in [(client, server), (server, client)] {
                        match forger.send(from, to, f) {
                            Ok(()) => sent += 1,
                            Err(_) => failed += 1,
                        }
                    }
                }
            }
            if clients.len() >= MIN_RUNS_UNDER_ATTACK {
                ctl.worked();
            }
            std::thread::sleep(FORGERY_TICK);
        }
        format!(
            "{sent} forged datagrams ({failed} not sent) both ways between the server and {} legit clients",
            clients.len()
        )
    });
    bench.finish(None);
}
