//! Scenarios over turmoil: btl-std's TCP and UDP modules, unchanged, on
//! simulated hosts, each run a function of its seed. Every run checks the
//! invariants at its end: every operation completed exactly once, every
//! message arrived once, byte-identical and in its sender's order, and
//! every pool is back to nothing in use. A failing run prints its seed;
//! `BTL_SIM_SEED=<seed> cargo test -p btl-sim --test scenarios` replays
//! it, and `BTL_SIM_SEEDS=<n>` runs more seeds (a soak), or
//! `BTL_SIM_SEEDS=<first>-<last>` a range of them (a soak in parts, one
//! process each).
#![cfg(not(loom))]

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::{Btl, BtlError, Event, LostReason, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::config::EngineConfig;
use btl_core::pool::FragmentClass;
use btl_sim::SimNet;
use btl_std::bootstrap::{Card, Contact, StaticPeers};
use btl_std::driver::directory::Directory;
use btl_std::driver::module::Module;
use btl_std::driver::net::Net;
use btl_std::transports::tcp::{Tcp, TcpConfig, TcpSetup};
use btl_std::transports::udp::{Udp, UdpConfig, UdpSetup};
use btl_verbs::cpc::{OobConfig, QpTuning};
use btl_verbs::module::{Verbs, VerbsSetup};
use btl_verbs::provider::AckTimeout;
use btl_verbs::soft::{SoftFabric, SoftHca};
use btl_verbs::transport::VerbsConfig;
use common::{Random, for_seeds, pools, seeds};

/// The job of every scenario's processes.
const JOB: u64 = 0x5151;
/// The port every host listens on.
const PORT: u16 = 7000;
/// The simulated time between two passes of a host.
const PASS: Duration = Duration::from_micros(100);

/// Which of the socket components a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    Tcp,
    Udp,
    /// RC queue pairs of a software HCA all hosts share, their side
    /// channels over turmoil's UDP.
    Verbs,
}

/// The bytes of message `i` from `from` to `to`, `len` long: each byte
/// depends on all four, so a message delivered to the wrong place, out of
/// order or damaged is seen.
fn payload(from: u32, to: u32, i: u32, len: usize) -> Vec<u8> {
    let key = (u64::from(from) << 40) ^ (u64::from(to) << 20) ^ u64::from(i);
    (0..len)
        .map(|k| (key.wrapping_mul(31).wrapping_add(k as u64 * 7) >> 3) as u8)
        .collect()
}

fn engine() -> EngineConfig {
    let mut c = EngineConfig::new(ProcName::new(JOB, 0));
    c.checksum = true;
    c.peer_timeout = btl_core::time::Duration::from_secs(5);
    c.keepalive = btl_core::time::Duration::from_secs(1);
    c.handshake_timeout = btl_core::time::Duration::from_secs(1);
    c
}

/// A module of either component over the simulated network.
enum SimModule {
    Tcp(Module<Tcp<SimNet>>),
    Udp(Module<Udp<SimNet>>),
    Verbs(Module<Verbs<SoftHca, SimNet>>),
}

impl SimModule {
    fn build(
        component: Component,
        net: SimNet,
        me: ProcName,
        boot: Arc<StaticPeers>,
        engine: EngineConfig,
        fabric: &SoftFabric,
    ) -> Self {
        match component {
            Component::Tcp => {
                let setup = TcpSetup {
                    tcp: TcpConfig {
                        connect_timeout: Duration::from_millis(500),
                        lookup_timeout: Duration::ZERO,
                        ..TcpConfig::default()
                    },
                    pools: pools(64 << 10),
                    engine: engine.clone(),
                    capacities: btl_core::engine::Capacities::SOCKET_MODULE,
                };
                SimModule::Tcp(
                    setup
                        .build_on(net, me, Some(b"sim"), boot)
                        .expect("a TCP module"),
                )
            }
            Component::Udp => {
                let setup = UdpSetup {
                    udp: UdpConfig {
                        lookup_timeout: Duration::ZERO,
                        ..UdpConfig::default()
                    },
                    pools: pools(1400),
                    engine,
                    capacities: btl_core::engine::Capacities::SOCKET_MODULE,
                };
                SimModule::Udp(
                    setup
                        .build_on(net, me, Some(b"sim"), boot)
                        .expect("a UDP module"),
                )
            }
            Component::Verbs => {
                let mut config = engine;
                config.me = me;
                config.job_key = Some((&b"sim"[..]).try_into().expect("a short key"));
                let setup = VerbsSetup {
                    config: VerbsConfig {
                        max_peers: 16,
                        recv_buffers: 8,
                        send_buffers: 8,
                        buffer_size: 16 << 10,
                        rdma_depth: 8,
                        tuning: QpTuning {
                            // 67 ms, seven times: a dead peer's queue pair
                            // fails within half a second.
                            ack_timeout: AckTimeout(14),
                            ..QpTuning::default()
                        },
                        ..VerbsConfig::default()
                    },
                    oob: OobConfig {
                        timeout: Duration::from_millis(500).into(),
                        max_peers: 16,
                    },
                    side: (std::net::SocketAddr::from(([0, 0, 0, 0], PORT + 1)), 24),
                    lookup_timeout: Duration::ZERO,
                };
                let hca = fabric.open("soft0").expect("the soft device");
                let [a, b, c, d, e, f, g, h, ..] = net.random();
                // The host's nonces from a seed its network drew, so that a
                // seed replays exactly.
                let mut nonces = Random(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
                let module = Module::open(
                    "verbs",
                    config,
                    pools(64 << 10),
                    btl_core::engine::Capacities::SOCKET_MODULE,
                    Duration::ZERO,
                    net,
                    Directory::new(me, "verbs", boot, setup.lookup_timeout),
                    move |net, registry, directory| {
                        let nonces = Box::new(move || {
                            let mut n = [0u8; 16];
                            n[..8].copy_from_slice(&nonces.next().to_le_bytes());
                            n[8..].copy_from_slice(&nonces.next().to_le_bytes());
                            n
                        });
                        let boot = directory.bootstrap();
                        Verbs::start(me, setup, hca, boot, net, registry, nonces)
                    },
                )
                .expect("a verbs module");
                SimModule::Verbs(module)
            }
        }
    }

    fn btl(&mut self) -> &mut dyn Btl<Memory = Vec<u8>> {
        match self {
            SimModule::Tcp(m) => m,
            SimModule::Udp(m) => m,
            SimModule::Verbs(m) => m,
        }
    }
}

impl Drop for SimModule {
    /// Dropped unfinalized, a host crashed (turmoil dropped its future):
    /// as a killed process, it sends no CLOSE; its sockets just go.
    fn drop(&mut self) {
        match self {
            SimModule::Tcp(m) => m.abort_on_drop(),
            SimModule::Udp(m) => m.abort_on_drop(),
            SimModule::Verbs(m) => m.abort_on_drop(),
        }
    }
}

/// Fragments in use in every pool of `btl`.
fn in_use(btl: &dyn Btl<Memory = Vec<u8>>) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| btl.pools().stats(c).in_use)
        .sum()
}

/// What one start of a host saw of one peer.
#[derive(Debug, Default)]
struct PeerLog {
    /// Messages posted to it, and how their sends ended.
    posted: u32,
    ok: u32,
    failed: Vec<BtlError>,
    /// Messages from it: (tag, bytes) in arrival order.
    received: Vec<(u8, Vec<u8>)>,
    /// Why it was lost, if it was (and not since taken back).
    lost: Option<LostReason>,
    /// The put into it and the get of the same bytes back: `None` until
    /// posted, then how each ended.
    put: Option<Option<Result<(), BtlError>>>,
    get: Option<Option<Result<(), BtlError>>>,
    /// The bytes the get brought back were the bytes put.
    round_trip_intact: Option<bool>,
    /// Notices of the peer's put into this host.
    arrived: u32,
}

/// A bulk operation: not posted, posted, or ended how.
type Bulk = Option<Option<Result<(), BtlError>>>;

impl PeerLog {
    /// The put and get to this peer ended, or will not be posted (the peer
    /// is lost).
    fn bulk_done(&self) -> bool {
        let ended = |op: &Bulk| matches!(op, Some(Some(_)));
        let pending = |op: &Bulk| matches!(op, Some(None));
        let put_failed = matches!(self.put, Some(Some(Err(_))));
        (ended(&self.put) && (put_failed || ended(&self.get)))
            || (self.lost.is_some() && !pending(&self.put) && !pending(&self.get))
    }
}

/// What one start of a host saw, for the checks at the end.
#[derive(Debug, Default)]
struct Seen {
    /// Which start of the host this is (0, then 1 after a bounce, ...).
    start: u32,
    /// By peer rank: the log of the peer's current start.
    peers: BTreeMap<u32, PeerLog>,
    /// Logs of peers' earlier starts, by peer rank, oldest first.
    earlier: BTreeMap<u32, Vec<PeerLog>>,
    /// Error events: (peer rank, error).
    errors: Vec<(Option<u32>, BtlError)>,
    /// Fragments in use once the host finalized, if it did.
    left_in_use: Option<u32>,
    settled: bool,
}

/// A fault a scenario injects, at a time of the simulation.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Cuts hosts `a` and `b` apart for `for_`.
    Partition { a: u32, b: u32, for_: Duration },
    /// Crashes `host` and starts it again after `down`.
    Bounce { host: u32, down: Duration },
    /// `host` stops progressing for `for_` (its peers' sends pile up).
    Stall { host: u32, for_: Duration },
}

/// A scenario: who, how much, over what network, with which faults.
#[derive(Debug, Clone)]
struct Plan {
    component: Component,
    hosts: u32,
    /// Messages each host sends each other host.
    each: u32,
    /// Delivery latency, at least and at most.
    latency: (Duration, Duration),
    /// turmoil's rates of link failure and repair: datagram loss in
    /// bursts (streams break instead).
    fail_repair: Option<(f64, f64)>,
    /// Hosts run in random order on each step.
    random_order: bool,
    /// Datagrams sent twice, in thousandths.
    duplication: u16,
    faults: Vec<(Duration, Fault)>,
    /// The peer timeout.
    peer_timeout: Duration,
    /// A hostile host knocks on every host: garbage, a HELLO without the
    /// job key, and a host's own HELLO played back to it.
    hostile: bool,
}

impl Plan {
    fn new(component: Component, hosts: u32, each: u32) -> Self {
        Plan {
            component,
            hosts,
            each,
            latency: (Duration::from_micros(50), Duration::from_micros(500)),
            fail_repair: None,
            random_order: false,
            duplication: 0,
            faults: Vec::new(),
            peer_timeout: Duration::from_secs(2),
            hostile: false,
        }
    }

    /// The largest put.
    fn max_put(&self) -> usize {
        match self.component {
            Component::Tcp | Component::Verbs => 4 << 20,
            Component::Udp => 512 << 10,
        }
    }

    fn max_message(&self) -> usize {
        match self.component {
            Component::Tcp | Component::Verbs => 64 << 10,
            Component::Udp => 1200,
        }
    }
}

/// The shared state of a run: what every host saw, and when each stalls.
struct Shared {
    seen: Vec<Seen>,
    /// The key of the region each host (first) lends each peer (second) for
    /// its put, as a runtime's own exchange would carry it.
    keys: BTreeMap<(u32, u32), btl_core::btl::RemoteKey>,
    stalled_until: Vec<Duration>,
    finished: bool,
}

/// Runs `plan` with `seed` and checks its invariants; returns what every
/// host saw.
/// What a run came to: what every host saw, and how many steps it took
/// to settle.
struct Run {
    seen: Vec<Seen>,
    steps: u64,
    /// What the soft HCA did, over verbs.
    hca: btl_verbs::soft::Counters,
}

fn run(plan: &Plan, seed: u64) -> Run {
    // `BTL_SIM_LOG=debug` shows the transports' log of a replayed seed.
    if let Ok(filter) = std::env::var("BTL_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(600))
        .tick_duration(Duration::from_micros(100))
        .min_message_latency(plan.latency.0)
        .max_message_latency(plan.latency.1);
    if let Some((fail, repair)) = plan.fail_repair {
        builder.fail_rate(fail).repair_rate(repair);
    }
    if plan.random_order {
        builder.enable_random_order();
    }
    let mut sim = builder.build();
    let names: Vec<String> = (0..plan.hosts).map(|h| format!("host{h}")).collect();
    let shared = Rc::new(RefCell::new(Shared {
        seen: (0..plan.hosts).map(|_| Seen::default()).collect(),
        stalled_until: vec![Duration::ZERO; plan.hosts as usize],
        keys: BTreeMap::new(),
        finished: false,
    }));
    let peers: Rc<RefCell<Option<Arc<StaticPeers>>>> = Rc::new(RefCell::new(None));
    let fabric = SoftFabric::with_device("soft0");
    for rank in 0..plan.hosts {
        let (shared, peers, plan) = (shared.clone(), peers.clone(), plan.clone());
        let fabric = fabric.clone();
        let starts = Rc::new(std::cell::Cell::new(0u32));
        sim.host(names[rank as usize].as_str(), move || {
            let (shared, peers, plan) = (shared.clone(), peers.clone(), plan.clone());
            let fabric = fabric.clone();
            let start = starts.get();
            starts.set(start + 1);
            async move {
                let boot = peers.borrow().clone().expect("cards before the hosts run");
                let net = SimNet::new(seed ^ (u64::from(rank) << 32) ^ (u64::from(start) << 48))
                    .with_duplication(plan.duplication);
                let mut config = engine();
                config.peer_timeout = plan.peer_timeout.into();
                config.keepalive = config.peer_timeout / 4;
                let me = ProcName::new(JOB, rank);
                let mut module = SimModule::build(plan.component, net, me, boot, config, &fabric);
                shared.borrow_mut().seen[rank as usize] = Seen {
                    start,
                    ..Seen::default()
                };
                run_host(module.btl(), rank, start, &plan, seed, &shared).await;
                Ok(())
            }
        });
    }
    let cards: Vec<Card> = (0..plan.hosts)
        .map(|rank| {
            let ip = sim.lookup(names[rank as usize].as_str());
            let mut card = Card::new(ProcName::new(JOB, rank));
            for (name, port) in [("tcp", PORT), ("udp", PORT), ("verbs", PORT + 1)] {
                card.contacts.push(Contact {
                    component: name.to_owned(),
                    addr: std::net::SocketAddr::new(ip, port),
                    prefix: 24,
                });
            }
            card
        })
        .collect();
    if plan.hostile {
        let victims: Vec<std::net::SocketAddr> = cards.iter().map(|c| c.contacts[0].addr).collect();
        sim.client("hostile", hostile(plan.component, victims));
    }
    *peers.borrow_mut() = Some(Arc::new(StaticPeers::new(cards, "the simulation")));
    // Faults as timed actions: (when, what).
    let mut actions: Vec<(Duration, Action)> = Vec::new();
    for &(at, fault) in &plan.faults {
        match fault {
            Fault::Partition { a, b, for_ } => {
                actions.push((at, Action::Partition(a, b)));
                actions.push((at + for_, Action::Repair(a, b)));
            }
            Fault::Bounce { host, down } => {
                actions.push((at, Action::Crash(host)));
                actions.push((at + down, Action::Start(host)));
            }
            Fault::Stall { host, for_ } => actions.push((at, Action::Stall(host, for_))),
        }
    }
    actions.sort_by_key(|&(at, _)| at);
    let mut actions = std::collections::VecDeque::from(actions);
    let mut steps = 0u64;
    loop {
        while actions.front().is_some_and(|&(at, _)| sim.elapsed() >= at) {
            let Some((_, action)) = actions.pop_front() else {
                break;
            };
            let name = |h: u32| names[h as usize].as_str();
            match action {
                Action::Partition(a, b) => sim.partition(name(a), name(b)),
                Action::Repair(a, b) => sim.repair(name(a), name(b)),
                Action::Crash(h) => sim.crash(name(h)),
                Action::Start(h) => sim.bounce(name(h)),
                Action::Stall(h, for_) => {
                    shared.borrow_mut().stalled_until[h as usize] = sim.elapsed() + for_
                }
            }
        }
        if actions.is_empty() && shared.borrow().seen.iter().all(|s| s.settled) {
            break;
        }
        sim.step()
            .unwrap_or_else(|e| panic!("seed {seed}: the simulation failed: {e}"));
        steps += 1;
        assert!(
            steps < 2_000_000,
            "seed {seed}: not settled within {:?} simulated",
            sim.elapsed()
        );
    }
    // Everyone finalizes: pools are counted then.
    shared.borrow_mut().finished = true;
    for _ in 0..100 {
        sim.step()
            .unwrap_or_else(|e| panic!("seed {seed}: the simulation failed: {e}"));
        if shared.borrow().seen.iter().all(|s| s.left_in_use.is_some()) {
            break;
        }
    }
    Run {
        seen: std::mem::take(&mut shared.borrow_mut().seen),
        steps,
        hca: fabric.counters(),
    }
}

/// A run's outcome in brief: per host and peer, what was posted, how it
/// ended and what arrived in which order (tags and lengths), and how the
/// bulk operations ended. Two runs of one seed must give the same.
fn digest(seen: &[Seen]) -> String {
    let mut out = String::new();
    for (rank, s) in seen.iter().enumerate() {
        out += &format!("host {rank} start {} errors {:?}\n", s.start, s.errors);
        for (peer, log) in &s.peers {
            let arrived: Vec<(u8, usize)> =
                log.received.iter().map(|(t, d)| (*t, d.len())).collect();
            out += &format!(
                "  {peer}: posted {} ok {} failed {:?} lost {:?} put {:?} get {:?} arrived {arrived:?}\n",
                log.posted, log.ok, log.failed, log.lost, log.put, log.get
            );
        }
    }
    out
}

/// The hostile host: on every victim, garbage, a HELLO that cannot prove
/// the job key, and the victim's own HELLO played back to it, each on a
/// connection (or from a socket) of its own; over TCP also that HELLO
/// played to the next victim, as if from the first.
async fn hostile(component: Component, victims: Vec<std::net::SocketAddr>) -> turmoil::Result {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rogue = ProcName::new(JOB, 99);
    let keyless = btl_tests::rogue::hello(rogue, [9; 16], btl_core::wire::Capabilities::empty());
    let garbage = btl_tests::rogue::garbage(0x6057);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let socket = match component {
        Component::Udp => Some(turmoil::net::UdpSocket::bind("0.0.0.0:9000").await?),
        // Verbs' side channel has a fuzz target of its own (`cpc_message`).
        Component::Tcp | Component::Verbs => None,
    };
    for (k, &at) in victims.iter().enumerate() {
        match component {
            Component::Verbs => {}
            Component::Tcp => {
                for bytes in [&garbage, &keyless] {
                    if let Ok(mut s) = turmoil::net::TcpStream::connect(at).await {
                        let _ = s.write_all(bytes).await;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                // Its own HELLO back (the victim sends one as soon as it
                // takes the connection), and the same HELLO to the next
                // victim: an impersonation that cannot prove the key, of a
                // process that victim talks to.
                if let Ok(mut s) = turmoil::net::TcpStream::connect(at).await {
                    let mut hello = [0u8; 96];
                    if let Ok(n) = s.read(&mut hello).await {
                        let _ = s.write_all(&hello[..n]).await;
                        let next = victims[(k + 1) % victims.len()];
                        if let Ok(mut t) = turmoil::net::TcpStream::connect(next).await {
                            let _ = t.write_all(&hello[..n]).await;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Component::Udp => {
                let socket = socket.as_ref().expect("bound above");
                socket.send_to(&garbage, at).await?;
                socket.send_to(&keyless, at).await?;
                let mut answer = [0u8; 2048];
                let got =
                    tokio::time::timeout(Duration::from_millis(50), socket.recv_from(&mut answer))
                        .await;
                if let Ok(Ok((n, _))) = got {
                    socket.send_to(&answer[..n], at).await?;
                }
            }
        }
    }
    Ok(())
}

/// A timed step of a run's faults.
#[derive(Debug, Clone, Copy)]
enum Action {
    Partition(u32, u32),
    Repair(u32, u32),
    Crash(u32),
    Start(u32),
    Stall(u32, Duration),
}

/// The length of the put from `from` to `to`.
fn put_len(seed: u64, from: u32, to: u32, max: usize) -> usize {
    let mut r = Random(seed ^ 0xB0_u64 ^ (u64::from(from) << 40) ^ (u64::from(to) << 24));
    r.below(max as u64 + 1) as usize
}

/// Message `i` from `from` to `to`: its tag and length.
fn plan_message(seed: u64, from: u32, to: u32, i: u32, max: usize) -> (u8, usize) {
    let mut r = Random(seed ^ (u64::from(from) << 48) ^ (u64::from(to) << 32) ^ u64::from(i));
    let tag = 0x80 + r.below(16) as u8;
    // Mostly small, now and then up to the largest.
    let len = if r.below(4) == 0 {
        r.below(max as u64 + 1)
    } else {
        r.below(512)
    } as usize;
    (tag, len)
}

/// A host's life: add the others, send each its messages as credits
/// allow, take what comes, and settle once every peer is done with or
/// lost; then, when every host has settled, finalize.
async fn run_host(
    btl: &mut dyn Btl<Memory = Vec<u8>>,
    rank: u32,
    start: u32,
    plan: &Plan,
    seed: u64,
    shared: &Rc<RefCell<Shared>>,
) {
    let max = plan.max_message();
    let others: Vec<u32> = (0..plan.hosts).filter(|&r| r != rank).collect();
    let names: Vec<ProcName> = others.iter().map(|&r| ProcName::new(JOB, r)).collect();
    let mut eps = vec![None; names.len()];
    let mut words = [0u64; 1];
    btl.add_procs(&names, &mut eps, &mut Reachability::new(&mut words))
        .expect("add_procs");
    let eps: Vec<EndpointId> = eps
        .into_iter()
        .map(|e| e.expect("every host reaches every other"))
        .collect();
    let rank_of = |ep: EndpointId| others[eps.iter().position(|&e| e == ep).expect("a peer")];
    // Bulk: a region lent to each peer for its put, the bytes this host
    // puts (the same for every peer, each taking its own length), and a
    // region per peer for the get back.
    let max_put = plan.max_put();
    let src = payload(rank, u32::MAX, 0, max_put);
    let src = btl
        .register_mem(src, btl_core::btl::Access::empty())
        .expect("register the source");
    let mut lent = Vec::new();
    let mut back = Vec::new();
    for &to in &others {
        let region = btl
            .register_mem(
                vec![0u8; max_put],
                btl_core::btl::Access::REMOTE_WRITE | btl_core::btl::Access::REMOTE_READ,
            )
            .expect("register a region to lend");
        shared
            .borrow_mut()
            .keys
            .insert((rank, to), region.remote_key());
        lent.push(region);
        back.push(
            btl.register_mem(vec![0u8; max_put], btl_core::btl::Access::empty())
                .expect("register a region for the get"),
        );
    }
    loop {
        let stalled = shared.borrow().stalled_until[rank as usize]
            > turmoil::sim_elapsed().unwrap_or_default();
        if shared.borrow().finished {
            break;
        }
        if !stalled {
            post_all(btl, rank, &others, &eps, plan, seed, max, shared);
            post_bulk(btl, rank, &others, &eps, src, &back, seed, max_put, shared);
            btl.progress();
            let mut all = shared.borrow_mut();
            let seen = &mut all.seen[rank as usize];
            debug_assert_eq!(seen.start, start);
            while let Some(event) = btl.poll_event() {
                take(event, seen, &rank_of, &others);
            }
            // A get that ended well: are the bytes those put?
            for (k, &to) in others.iter().enumerate() {
                let log = seen.peers.entry(to).or_default();
                if matches!(log.get, Some(Some(Ok(())))) && log.round_trip_intact.is_none() {
                    let len = put_len(seed, rank, to, max_put);
                    let got = btl.region(back[k]).map(|b| &b[..len]);
                    let put = btl.region(src).map(|b| &b[..len]);
                    log.round_trip_intact = Some(got.is_ok() && got == put);
                }
            }
            seen.settled = others.iter().all(|r| {
                let log = seen.peers.entry(*r).or_default();
                let ended = log.ok + log.failed.len() as u32 == log.posted;
                let messages = log.lost.is_some()
                    || (log.posted == plan.each && log.received.len() == plan.each as usize);
                let told = log.lost.is_some() || log.arrived > 0;
                ended && messages && log.bulk_done() && told
            });
        }
        tokio::time::sleep(PASS).await;
    }
    btl.finalize();
    while btl.poll_event().is_some() {}
    shared.borrow_mut().seen[rank as usize].left_in_use = Some(in_use(btl));
    for handle in lent.into_iter().chain(back).chain([src]) {
        // Handed back, and freed with the module's other memory.
        let _ = btl.deregister_mem(handle);
    }
}

/// Posts to each live peer its put, once its region's key is known, and
/// after the put its get of the same bytes back.
#[allow(clippy::too_many_arguments)]
fn post_bulk(
    btl: &mut dyn Btl<Memory = Vec<u8>>,
    rank: u32,
    others: &[u32],
    eps: &[EndpointId],
    src: btl_core::btl::MemHandle,
    back: &[btl_core::btl::MemHandle],
    seed: u64,
    max_put: usize,
    shared: &Rc<RefCell<Shared>>,
) {
    let mut all = shared.borrow_mut();
    let Shared { seen, keys, .. } = &mut *all;
    let seen = &mut seen[rank as usize];
    for (k, &to) in others.iter().enumerate() {
        let log = seen.peers.entry(to).or_default();
        if log.lost.is_some() {
            continue;
        }
        let Some(&key) = keys.get(&(to, rank)) else {
            continue;
        };
        let len = put_len(seed, rank, to, max_put) as u64;
        let remote = key.slice(0, len);
        let ctx = u64::from(to);
        if log.put.is_none() {
            // The target is told, with this host's rank.
            let imm = u64::from(rank);
            match btl.put_notify(eps[k], src.slice(0, len), remote, imm, ctx) {
                Ok(_) => log.put = Some(None),
                Err(BtlError::OutOfResource | BtlError::PeerLost(_)) => {}
                Err(e) => panic!("seed {seed}: host {rank}: put to {to}: {e}"),
            }
        } else if matches!(log.put, Some(Some(Ok(())))) && log.get.is_none() {
            match btl.get(eps[k], back[k].slice(0, len), remote, ctx) {
                Ok(_) => log.get = Some(None),
                Err(BtlError::OutOfResource | BtlError::PeerLost(_)) => {}
                Err(e) => panic!("seed {seed}: host {rank}: get from {to}: {e}"),
            }
        }
    }
}

/// Posts to each live peer what the credits allow, in order.
#[allow(clippy::too_many_arguments)]
fn post_all(
    btl: &mut dyn Btl<Memory = Vec<u8>>,
    rank: u32,
    others: &[u32],
    eps: &[EndpointId],
    plan: &Plan,
    seed: u64,
    max: usize,
    shared: &Rc<RefCell<Shared>>,
) {
    let mut all = shared.borrow_mut();
    let seen = &mut all.seen[rank as usize];
    for (k, &to) in others.iter().enumerate() {
        let log = seen.peers.entry(to).or_default();
        while log.posted < plan.each && log.lost.is_none() {
            let (tag, len) = plan_message(seed, rank, to, log.posted, max);
            let data = payload(rank, to, log.posted, len);
            let flags = DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK;
            let desc = match btl.prepare_src(eps[k], &data, 0, Order(0), flags) {
                Ok(d) => d,
                Err(BtlError::OutOfResource) => break,
                // Lost: the error event says so.
                Err(BtlError::PeerLost(_)) => break,
                Err(e) => panic!("seed {seed}: host {rank} to {to}: {e}"),
            };
            match btl.send(eps[k], desc, Tag(tag)) {
                Ok(_) => log.posted += 1,
                Err(e) => {
                    let _ = btl.free(e.desc);
                    match e.error {
                        BtlError::OutOfResource | BtlError::PeerLost(_) => break,
                        other => panic!("seed {seed}: host {rank} to {to}: {other}"),
                    }
                }
            }
        }
    }
}

/// Records one event in `seen`.
fn take(event: Event<'_>, seen: &mut Seen, rank_of: &impl Fn(EndpointId) -> u32, others: &[u32]) {
    // A put's or get's context is the peer's rank.
    let peer_of = |ctx: u64| {
        let peer = u32::try_from(ctx).expect("a rank");
        assert!(others.contains(&peer), "a context this host gave");
        peer
    };
    match event {
        Event::Received(m) => {
            let from = rank_of(m.from);
            seen.peers
                .entry(from)
                .or_default()
                .received
                .push((m.tag.0, m.data.to_vec()));
        }
        Event::SendComplete {
            endpoint, result, ..
        } => {
            let log = seen.peers.entry(rank_of(endpoint)).or_default();
            match result {
                Ok(()) => log.ok += 1,
                Err(e) => log.failed.push(e),
            }
        }
        Event::PutComplete { ctx, result, .. } => {
            let log = seen.peers.entry(peer_of(ctx)).or_default();
            assert!(
                matches!(log.put, Some(None)),
                "a put ends once: {:?}",
                log.put
            );
            log.put = Some(Some(result));
        }
        Event::GetComplete { ctx, result, .. } => {
            let log = seen.peers.entry(peer_of(ctx)).or_default();
            assert!(
                matches!(log.get, Some(None)),
                "a get ends once: {:?}",
                log.get
            );
            log.get = Some(Some(result));
        }
        Event::PutArrived { from, imm, .. } => {
            let from = rank_of(from);
            assert_eq!(imm, u64::from(from), "a notice carries its sender's value");
            seen.peers.entry(from).or_default().arrived += 1;
        }
        // A goodbye is no error, but the peer is gone all the same.
        Event::PeerLeft { endpoint } => {
            seen.peers.entry(rank_of(endpoint)).or_default().lost = Some(LostReason::Left);
        }
        // The scenarios send again on their own after progress.
        Event::Room { .. } => {}
        Event::Error(e) => {
            let peer = e.endpoint.map(rank_of);
            seen.errors.push((peer, e.error));
            if let (Some(peer), BtlError::PeerLost(reason)) = (peer, e.error) {
                if reason == LostReason::Restarted {
                    // A new start of the peer: what is known of the old
                    // one is kept for the checks, and all starts over.
                    let old = seen.peers.remove(&peer).unwrap_or_default();
                    seen.earlier.entry(peer).or_default().push(old);
                } else {
                    seen.peers.entry(peer).or_default().lost = Some(reason);
                }
            }
        }
    }
}

/// The invariants of a run. `may_lose(a, b)` says whether `a` may lose
/// `b` (and with which reasons); everything else must have gone through.
fn check(
    plan: &Plan,
    seed: u64,
    seen: &[Seen],
    may_lose: impl Fn(u32, u32) -> &'static [LostReason],
) {
    let max = plan.max_message();
    if std::env::var("BTL_SIM_LOG").is_ok() {
        for (rank, s) in seen.iter().enumerate() {
            for (peer, log) in &s.peers {
                eprintln!(
                    "host {rank} / {peer}: posted {} ok {} failed {} received {} lost {:?}",
                    log.posted,
                    log.ok,
                    log.failed.len(),
                    log.received.len(),
                    log.lost
                );
            }
        }
    }
    for (rank, s) in seen.iter().enumerate() {
        let rank = rank as u32;
        assert_eq!(
            s.left_in_use,
            Some(0),
            "seed {seed}: host {rank}: pools back to nothing in use"
        );
        for &(peer, error) in &s.errors {
            let peer =
                peer.unwrap_or_else(|| panic!("seed {seed}: host {rank}: {error} with no peer"));
            let BtlError::PeerLost(reason) = error else {
                panic!("seed {seed}: host {rank}: {error} for {peer}");
            };
            assert!(
                may_lose(rank, peer).contains(&reason),
                "seed {seed}: host {rank} lost {peer} ({reason}), which it may not"
            );
        }
        for (&peer, log) in s
            .earlier
            .iter()
            .flat_map(|(p, logs)| logs.iter().map(move |l| (p, l)))
            .chain(s.peers.iter())
        {
            let from_start = log.received.len();
            // Exactly once: every posted send ended once.
            assert_eq!(
                log.ok + log.failed.len() as u32,
                log.posted,
                "seed {seed}: host {rank} to {peer}: every send ended once"
            );
            for e in &log.failed {
                let BtlError::PeerLost(reason) = e else {
                    panic!("seed {seed}: host {rank} to {peer}: a send failed with {e}");
                };
                assert!(
                    may_lose(rank, peer).contains(reason),
                    "seed {seed}: host {rank} to {peer}: a send failed with {e}"
                );
            }
            // At most once, intact, in order: a prefix of the sender's plan.
            for (i, (tag, data)) in log.received.iter().enumerate() {
                let (want, len) = plan_message(seed, peer, rank, i as u32, max);
                assert_eq!(*tag, want, "seed {seed}: {peer} -> {rank} #{i}: tag");
                assert!(
                    *data == payload(peer, rank, i as u32, len),
                    "seed {seed}: {peer} -> {rank} #{i}: bytes (in order, intact)"
                );
            }
            assert!(
                from_start <= plan.each as usize,
                "seed {seed}: {peer} -> {rank}: at most once"
            );
            assert!(
                log.arrived <= 1,
                "seed {seed}: {peer} -> {rank}: the put's notice at most once"
            );
        }
        // A peer not lost delivered everything, and got everything.
        for (&peer, log) in &s.peers {
            for op in [&log.put, &log.get] {
                if let Some(Some(Err(e))) = op {
                    let BtlError::PeerLost(reason) = e else {
                        panic!(
                            "seed {seed}: host {rank} with {peer}: a put or get failed with {e}"
                        );
                    };
                    assert!(
                        may_lose(rank, peer).contains(reason),
                        "seed {seed}: {rank} with {peer}: {e}"
                    );
                }
            }
            if log.round_trip_intact.is_some() {
                assert_eq!(
                    log.round_trip_intact,
                    Some(true),
                    "seed {seed}: {rank} with {peer}: the get brought back what was put"
                );
            }
            if log.lost.is_none() {
                assert!(
                    matches!(log.put, Some(Some(Ok(())))),
                    "seed {seed}: {rank} -> {peer}: the put"
                );
                assert!(
                    matches!(log.get, Some(Some(Ok(())))),
                    "seed {seed}: {rank} -> {peer}: the get"
                );
                assert_eq!(
                    log.received.len(),
                    plan.each as usize,
                    "seed {seed}: {peer} -> {rank}: all of it"
                );
                assert_eq!(log.ok, plan.each, "seed {seed}: {rank} -> {peer}: all sent");
                assert_eq!(
                    log.arrived, 1,
                    "seed {seed}: {peer} -> {rank}: the put's notice"
                );
            }
        }
    }
}

/// No pair may lose the other.
fn none(_: u32, _: u32) -> &'static [LostReason] {
    &[]
}

#[test]
fn all_to_all_over_tcp() {
    for_seeds(4, |seed| {
        let plan = Plan::new(Component::Tcp, 3 + (seed % 6) as u32, 30);
        check(&plan, seed, &run(&plan, seed).seen, none);
    });
}

#[test]
fn all_to_all_over_udp_with_loss_duplication_and_reordering() {
    for_seeds(4, |seed| {
        let mut plan = Plan::new(Component::Udp, 3 + (seed % 6) as u32, 30);
        plan.fail_repair = Some((0.05, 0.5));
        plan.random_order = true;
        plan.duplication = 30;
        check(&plan, seed, &run(&plan, seed).seen, none);
    });
}

#[test]
fn all_to_all_over_verbs() {
    for_seeds(3, |seed| {
        let plan = Plan::new(Component::Verbs, 3 + (seed % 3) as u32, 30);
        let run = run(&plan, seed);
        check(&plan, seed, &run.seen, none);
        // The puts and gets went as RDMA writes and reads.
        assert!(
            run.hca.rdma_writes > 0 && run.hca.rdma_reads > 0,
            "seed {seed}: {:?}",
            run.hca
        );
    });
}

#[test]
fn a_partition_shorter_than_the_peer_timeout_costs_nothing() {
    for component in [Component::Tcp, Component::Udp] {
        for_seeds(3, |seed| {
            let mut plan = Plan::new(component, 3, 40);
            let for_ = Duration::from_millis(500);
            plan.faults.push((
                Duration::from_millis(2),
                Fault::Partition { a: 0, b: 1, for_ },
            ));
            check(&plan, seed, &run(&plan, seed).seen, none);
        });
    }
}

#[test]
fn a_partition_longer_than_the_peer_timeout_loses_exactly_that_pair() {
    for component in [Component::Tcp, Component::Udp] {
        for_seeds(3, |seed| {
            let mut plan = Plan::new(component, 3, 40);
            let for_ = plan.peer_timeout * 2;
            plan.faults.push((
                Duration::from_millis(2),
                Fault::Partition { a: 0, b: 1, for_ },
            ));
            let seen = run(&plan, seed).seen;
            check(&plan, seed, &seen, |a, b| {
                if (a.min(b), a.max(b)) == (0, 1) {
                    &[LostReason::Timeout]
                } else {
                    &[]
                }
            });
            for (a, b) in [(0, 1), (1, 0)] {
                assert_eq!(
                    seen[a as usize].peers[&b].lost,
                    Some(LostReason::Timeout),
                    "seed {seed}: {a} lost {b}"
                );
            }
        });
    }
}

#[test]
fn a_stalled_receiver_holds_its_senders_back_without_loss() {
    for component in [Component::Tcp, Component::Udp, Component::Verbs] {
        for_seeds(3, |seed| {
            let mut plan = Plan::new(component, 3, 60);
            let for_ = Duration::from_millis(800);
            plan.faults
                .push((Duration::from_millis(1), Fault::Stall { host: 2, for_ }));
            check(&plan, seed, &run(&plan, seed).seen, none);
        });
    }
}

#[test]
fn a_bounced_host_rejoins_under_its_name() {
    for component in [Component::Tcp, Component::Udp, Component::Verbs] {
        for_seeds(3, |seed| {
            let mut plan = Plan::new(component, 3, 40);
            // Down for less than the peer timeout: its peers learn of the
            // restart from its new HELLO.
            let down = Duration::from_millis(300);
            plan.faults
                .push((Duration::from_millis(2), Fault::Bounce { host: 2, down }));
            let seen = run(&plan, seed).seen;
            check(&plan, seed, &seen, |_, b| {
                if b == 2 {
                    &[LostReason::Restarted]
                } else {
                    &[]
                }
            });
            assert_eq!(seen[2].start, 1, "seed {seed}: host 2 started again");
        });
    }
}

#[test]
fn a_hostile_host_disturbs_nobody() {
    for component in [Component::Tcp, Component::Udp] {
        for_seeds(3, |seed| {
            let mut plan = Plan::new(component, 3, 30);
            plan.hostile = true;
            check(&plan, seed, &run(&plan, seed).seen, none);
        });
    }
}

#[test]
fn a_seed_replays_exactly() {
    for component in [Component::Tcp, Component::Udp] {
        let mut plan = Plan::new(component, 4, 20);
        plan.random_order = true;
        if component == Component::Udp {
            plan.fail_repair = Some((0.05, 0.5));
            plan.duplication = 30;
        }
        let for_ = Duration::from_millis(300);
        plan.faults.push((
            Duration::from_millis(2),
            Fault::Partition { a: 0, b: 1, for_ },
        ));
        let seed = seeds(1)[0];
        let (first, second) = (run(&plan, seed), run(&plan, seed));
        assert_eq!(
            first.steps, second.steps,
            "seed {seed}: {component:?}: the same steps"
        );
        assert_eq!(
            digest(&first.seen),
            digest(&second.seen),
            "seed {seed}: {component:?}: the same outcome, event for event"
        );
    }
}
