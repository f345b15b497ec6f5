//! Scenarios over turmoil: btl-std's TCP and UDP modules, unchanged, on
//! simulated hosts, each run a function of its seed. Every run checks the
//! invariants at its end: every operation completed exactly once, every
//! message arrived once, byte-identical and in its sender's order, and
//! every pool is back to nothing in use. A failing run prints its seed;
//! `BTL_SIM_SEED=<seed> cargo test -p btl-sim --test scenarios` replays
//! it, and `BTL_SIM_SEEDS=<n>` runs more seeds (a soak).
#![cfg(not(loom))]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::{Btl, Event, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::config::EngineConfig;
use btl_core::pool::{FragmentClass, FragmentPoolConfig, FragmentPoolsConfig};
use btl_sim::SimNet;
use btl_std::bootstrap::{Card, Contact, StaticPeers};
use btl_std::module::Module;
use btl_std::tcp::{Tcp, TcpConfig, TcpSetup};
use btl_std::udp::{Udp, UdpConfig, UdpSetup};

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
}

/// Seeds to run: `BTL_SIM_SEED` alone, or `count` seeds from 1 (more with
/// `BTL_SIM_SEEDS`).
fn seeds(count: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("BTL_SIM_SEED") {
        return vec![seed.parse().expect("BTL_SIM_SEED is a number")];
    }
    let count = std::env::var("BTL_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(count);
    (1..=count).collect()
}

/// Runs `scenario` for each seed, saying which seed failed.
fn for_seeds(count: u64, scenario: impl Fn(u64)) {
    for seed in seeds(count) {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(seed)));
        if let Err(panic) = run {
            eprintln!("failed with seed {seed}: replay with BTL_SIM_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

/// SplitMix64, for the workload's sizes and tags.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
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

fn pools(max_send: usize) -> FragmentPoolsConfig {
    let class = |payload: usize, num: u32| FragmentPoolConfig {
        fragment_size: payload + 40,
        num,
        max: num,
        inc: num,
    };
    FragmentPoolsConfig {
        small: class(256, 64),
        eager: class(4096.min(max_send), 64),
        max: class(max_send, 32),
    }
}

fn engine() -> EngineConfig {
    let mut c = EngineConfig::new(ProcName::new(JOB, 0));
    c.checksum = true;
    c.peer_timeout = 5_000_000_000;
    c.keepalive = 1_000_000_000;
    c.handshake_timeout = 1_000_000_000;
    c
}

/// A module of either component over the simulated network.
enum SimModule {
    Tcp(Module<Tcp<SimNet>>),
    Udp(Module<Udp<SimNet>>),
}

impl SimModule {
    fn build(component: Component, net: SimNet, me: ProcName, boot: Arc<StaticPeers>) -> Self {
        match component {
            Component::Tcp => {
                let setup = TcpSetup {
                    tcp: TcpConfig {
                        connect_timeout: Duration::from_millis(500),
                        lookup_timeout: Duration::ZERO,
                        ..TcpConfig::default()
                    },
                    pools: pools(64 << 10),
                    engine: engine(),
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
                    engine: engine(),
                };
                SimModule::Udp(
                    setup
                        .build_on(net, me, Some(b"sim"), boot)
                        .expect("a UDP module"),
                )
            }
        }
    }

    fn btl(&mut self) -> &mut dyn Btl<'static> {
        match self {
            SimModule::Tcp(m) => m,
            SimModule::Udp(m) => m,
        }
    }
}

/// Fragments in use in every pool of `btl`.
fn in_use(btl: &dyn Btl<'static>) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| btl.pools().stats(c).in_use)
        .sum()
}

/// What one host saw, for the checks at the end.
#[derive(Debug, Default)]
struct Seen {
    /// Messages received, by sender rank: (tag, bytes) in arrival order.
    received: BTreeMap<u32, Vec<(u8, Vec<u8>)>>,
    /// Send completions: successes and failures.
    sends_ok: u32,
    sends_failed: Vec<String>,
    /// Error events.
    errors: Vec<String>,
    /// Fragments in use once the host finalized.
    left_in_use: u32,
    done: bool,
}

/// The shared state of a run: what every host saw, and how many are done.
type Shared = Rc<RefCell<Vec<Seen>>>;

/// An all-to-all exchange between `hosts` processes: each sends `each`
/// messages of random size (0 B to the largest the component takes) and
/// tag to every other one, then waits until it has everything it expects
/// and every host is done.
fn all_to_all(component: Component, seed: u64, hosts: u32, each: u32) {
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(120))
        .tick_duration(Duration::from_micros(100))
        .min_message_latency(Duration::from_micros(50))
        .max_message_latency(Duration::from_micros(500))
        .build();
    let names: Vec<String> = (0..hosts).map(|h| format!("host{h}")).collect();
    let shared: Shared = Rc::new(RefCell::new((0..hosts).map(|_| Seen::default()).collect()));
    let peers: Rc<RefCell<Option<Arc<StaticPeers>>>> = Rc::new(RefCell::new(None));
    let max = match component {
        Component::Tcp => 64 << 10,
        Component::Udp => 1200,
    };
    for rank in 0..hosts {
        let (shared, peers) = (shared.clone(), peers.clone());
        sim.host(names[rank as usize].as_str(), move || {
            let (shared, peers) = (shared.clone(), peers.clone());
            async move {
                let boot = peers.borrow().clone().expect("cards before the hosts run");
                let net = SimNet::new(seed ^ (u64::from(rank) << 32));
                let mut module = SimModule::build(component, net, ProcName::new(JOB, rank), boot);
                run_host(module.btl(), rank, hosts, each, max, seed, &shared).await;
                Ok(())
            }
        });
    }
    // Cards: every host listens on PORT of its simulated address.
    let cards: Vec<Card> = (0..hosts)
        .map(|rank| {
            let ip = sim.lookup(names[rank as usize].as_str());
            let mut card = Card::new(ProcName::new(JOB, rank));
            for name in ["tcp", "udp"] {
                card.contacts.push(Contact {
                    component: name.to_owned(),
                    addr: std::net::SocketAddr::new(ip, PORT),
                    prefix: 24,
                });
            }
            card
        })
        .collect();
    *peers.borrow_mut() = Some(Arc::new(StaticPeers::new(cards, "the simulation")));
    let mut steps = 0u64;
    while !shared.borrow().iter().all(|s| s.done) {
        sim.step().expect("the simulation runs");
        steps += 1;
        assert!(steps < 1_000_000, "seed {seed}: not done within the steps");
    }
    eprintln!(
        "seed {seed}: {hosts} hosts, {steps} steps, {:?} simulated",
        sim.elapsed()
    );
    check(&shared.borrow(), hosts, each, max, seed);
}

/// Message `i` from `from` to `to`: its tag and length.
fn plan(seed: u64, from: u32, to: u32, i: u32, max: usize) -> (u8, usize) {
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

/// A host's life: add the others, send to each, take what comes until it
/// has all it expects and every host is done, then finalize.
async fn run_host(
    btl: &mut dyn Btl<'static>,
    rank: u32,
    hosts: u32,
    each: u32,
    max: usize,
    seed: u64,
    shared: &Shared,
) {
    let others: Vec<u32> = (0..hosts).filter(|&r| r != rank).collect();
    let names: Vec<ProcName> = others.iter().map(|&r| ProcName::new(JOB, r)).collect();
    let mut eps = vec![None; names.len()];
    let mut words = [0u64; 1];
    btl.add_procs(&names, &mut eps, &mut Reachability::new(&mut words))
        .expect("add_procs");
    let eps: Vec<EndpointId> = eps
        .into_iter()
        .map(|e| e.expect("every host reaches every other"))
        .collect();
    let mut next = vec![0u32; others.len()];
    let expected = each * (hosts - 1);
    loop {
        // Post what the credits allow, in order per peer.
        for (k, &to) in others.iter().enumerate() {
            while next[k] < each {
                let (tag, len) = plan(seed, rank, to, next[k], max);
                let data = payload(rank, to, next[k], len);
                let flags = DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK;
                let desc = match btl.prepare_src(eps[k], &data, 0, Order(0), flags) {
                    Ok(d) => d,
                    Err(btl_core::btl::BtlError::OutOfResource) => break,
                    Err(e) => panic!("seed {seed}: host {rank} to {to}: {e}"),
                };
                match btl.send(eps[k], desc, Tag(tag)) {
                    Ok(_) => next[k] += 1,
                    Err(e) if e.error == btl_core::btl::BtlError::OutOfResource => {
                        let _ = btl.free(e.desc);
                        break;
                    }
                    Err(e) => panic!("seed {seed}: host {rank} to {to}: {}", e.error),
                }
            }
        }
        btl.progress();
        {
            let mut all = shared.borrow_mut();
            let seen = &mut all[rank as usize];
            while let Some(event) = btl.poll_event() {
                match event {
                    Event::Received(m) => {
                        let k = eps.iter().position(|&e| e == m.from).expect("a known peer");
                        let from = others[k];
                        seen.received
                            .entry(from)
                            .or_default()
                            .push((m.tag.0, m.data.to_vec()));
                    }
                    Event::SendComplete { result, .. } => match result {
                        Ok(()) => seen.sends_ok += 1,
                        Err(e) => seen.sends_failed.push(e.to_string()),
                    },
                    Event::Error(e) => seen.errors.push(format!("{e:?}")),
                    other => panic!("seed {seed}: host {rank}: unexpected {other:?}"),
                }
            }
            let got: u32 = seen.received.values().map(|v| v.len() as u32).sum();
            if got == expected && seen.sends_ok == expected {
                seen.done = true;
            }
            if all.iter().all(|s| s.done) {
                break;
            }
        }
        tokio::time::sleep(PASS).await;
    }
    // Everyone has everything: a last pass for acknowledgements, then out.
    for _ in 0..50 {
        btl.progress();
        while btl.poll_event().is_some() {}
        tokio::time::sleep(PASS).await;
    }
    btl.finalize();
    while btl.poll_event().is_some() {}
    shared.borrow_mut()[rank as usize].left_in_use = in_use(btl);
}

/// The invariants of an all-to-all run.
fn check(seen: &[Seen], hosts: u32, each: u32, max: usize, seed: u64) {
    for (rank, s) in seen.iter().enumerate() {
        let rank = rank as u32;
        assert!(
            s.errors.is_empty(),
            "seed {seed}: host {rank}: {:?}",
            s.errors
        );
        assert!(
            s.sends_failed.is_empty(),
            "seed {seed}: host {rank}: {:?}",
            s.sends_failed
        );
        assert_eq!(
            s.sends_ok,
            each * (hosts - 1),
            "seed {seed}: host {rank}: each send completed once"
        );
        for from in (0..hosts).filter(|&f| f != rank) {
            let got = s.received.get(&from).map(Vec::as_slice).unwrap_or_default();
            assert_eq!(
                got.len(),
                each as usize,
                "seed {seed}: {from} -> {rank}: count"
            );
            for (i, (tag, data)) in got.iter().enumerate() {
                let (want_tag, len) = plan(seed, from, rank, i as u32, max);
                assert_eq!(*tag, want_tag, "seed {seed}: {from} -> {rank} #{i}: tag");
                assert!(
                    *data == payload(from, rank, i as u32, len),
                    "seed {seed}: {from} -> {rank} #{i}: bytes (in order, intact)"
                );
            }
        }
        assert_eq!(
            s.left_in_use, 0,
            "seed {seed}: host {rank}: pools back to nothing in use"
        );
    }
}

#[test]
fn all_to_all_over_tcp() {
    for_seeds(3, |seed| {
        all_to_all(Component::Tcp, seed, 3 + (seed % 3) as u32, 20)
    });
}

#[test]
fn all_to_all_over_udp() {
    for_seeds(3, |seed| {
        all_to_all(Component::Udp, seed, 3 + (seed % 3) as u32, 20)
    });
}
