//! The async face (btl-tokio's `Endpoint`) over turmoil: each simulated
//! host runs async code that uses only its endpoint's handle (receivers,
//! sends from several tasks, puts and gets of lent memory, flush, close),
//! and every run is a function of its seed, replayable as the scenarios of
//! `scenarios.rs` are: a failing run prints its seed;
//! `BTL_SIM_SEED=<seed> cargo test -p btl-sim --test async_scenarios`
//! replays it, and `BTL_SIM_SEEDS=<n>` (or `<first>-<last>`) runs more.
//!
//! Every run checks at its end: every send, put and get future ended
//! exactly once, and `Ok` unless its peer was lost (then with
//! `PeerLost`); every message arrived once, byte-identical, in its
//! sender's order; every buffer came back byte-exact; the module's
//! operations, registrations and pools are back to nothing in use.
#![cfg(not(loom))]

mod common;

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::future::poll_fn;
use std::ops::RangeInclusive;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use btl_core::btl::Btl;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, Usage};
use btl_core::pool::FragmentClass;
use btl_sim::SimNet;
use btl_std::bootstrap::{Card, Contact, StaticPeers};
use btl_std::driver::module::{Module, Transport};
use btl_std::transports::tcp::{TcpConfig, TcpSetup};
use btl_std::transports::udp::{UdpConfig, UdpSetup};
use btl_tokio::{
    Access, BtlError, Endpoint, EndpointId, Error, Lent, LostReason, PeerEvent, ProcName,
    RemoteKey, Tag,
};
use common::{Random, for_seeds, pools, seeds};

/// The job of every run's processes.
const JOB: u64 = 0x5151;
/// The port every host listens on.
const PORT: u16 = 7000;
/// turmoil's step, and the pause of a host that polls for what no waker
/// tells it (the partition, the other hosts' progress, a loan in use).
const STEP: Duration = Duration::from_micros(100);
/// The tags of the workload's messages.
const DATA: RangeInclusive<Tag> = Tag(0x80)..=Tag(0x8f);
/// A lent region's key, sent to the peer it is lent to.
const KEY: Tag = Tag(0x70);
/// The longest a host waits for anything, in tokio's time on the host
/// (which turmoil's 100 µs steps move 1 ms each: ten times the simulated
/// clock the engine runs on).
const PATIENCE: Duration = Duration::from_secs(600);

/// Which socket component a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    Tcp,
    Udp,
}

/// `len` bytes that depend on `key` and on their place, so that bytes
/// delivered to the wrong place, out of order or damaged are seen.
fn bytes(key: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (key.wrapping_mul(31).wrapping_add(k as u64 * 7) >> 3) as u8)
        .collect()
}

/// Message `i` of sender task `task` of `from` to `to`: its tag, and its
/// bytes, which begin with the task and `i` (so that the receiver knows
/// which it is) and are mostly small, now and then up to `max`.
fn message(seed: u64, from: u32, to: u32, task: u32, i: u32, max: usize) -> (Tag, Vec<u8>) {
    let key = (u64::from(from) << 48) ^ (u64::from(to) << 32) ^ (u64::from(task) << 24);
    let mut r = Random(seed ^ key ^ u64::from(i));
    let tag = Tag(DATA.start().0 + r.below(16) as u8);
    let len = if r.below(4) == 0 {
        8 + r.below(max as u64 - 7)
    } else {
        8 + r.below(504)
    } as usize;
    let mut data = Vec::with_capacity(len);
    data.extend_from_slice(&task.to_le_bytes());
    data.extend_from_slice(&i.to_le_bytes());
    data.extend(bytes(key ^ u64::from(i), len - 8));
    (tag, data)
}

/// The bytes `from` puts into the region `to` lent it (1 byte to `max`).
fn bulk(seed: u64, from: u32, to: u32, max: usize) -> Vec<u8> {
    let key = seed ^ 0xB0 ^ (u64::from(from) << 40) ^ (u64::from(to) << 24);
    let len = 1 + Random(key).below(max as u64) as usize;
    bytes(key, len)
}

/// Fragments in use in every pool of `module`.
fn in_use<T: Transport>(module: &Module<T>) -> u32 {
    FragmentClass::ALL
        .iter()
        .map(|&c| module.pools().stats(c).in_use)
        .sum()
}

/// A run: who, how much, over what network, and which pair (if any) is
/// cut apart for longer than the peer timeout.
#[derive(Debug, Clone)]
struct Plan {
    component: Component,
    hosts: u32,
    /// Sender tasks per host and peer.
    tasks: u32,
    /// Messages each sender task sends its peer.
    each: u32,
    /// Sends a sender task has under way at once: 1 awaits each before
    /// the next; more pipelines them, first polled in order.
    window: usize,
    /// Delivery latency, at least and at most.
    latency: (Duration, Duration),
    /// turmoil's rates of link failure and repair: datagrams lost in
    /// bursts.
    fail_repair: Option<(f64, f64)>,
    /// Hosts run in random order on each step.
    random_order: bool,
    /// Datagrams sent twice, in thousandths.
    duplication: u16,
    peer_timeout: Duration,
    /// Hosts cut apart, once each holds the key of the other's region,
    /// for twice the peer timeout; their sends, put and get to each other
    /// start only then, so that each is under way when the peer is lost.
    cut: Option<(u32, u32)>,
}

impl Plan {
    fn new(component: Component, hosts: u32) -> Self {
        Plan {
            component,
            hosts,
            tasks: 3,
            each: 8,
            window: 1,
            latency: (Duration::from_micros(50), Duration::from_micros(500)),
            fail_repair: None,
            random_order: false,
            duplication: 0,
            peer_timeout: Duration::from_secs(2),
            cut: None,
        }
    }

    fn max_message(&self) -> usize {
        match self.component {
            Component::Tcp => 64 << 10,
            Component::Udp => 1200,
        }
    }

    fn max_put(&self) -> usize {
        match self.component {
            Component::Tcp => 1 << 20,
            Component::Udp => 128 << 10,
        }
    }

    /// Whether `a` and `b` are the pair cut apart.
    fn is_cut(&self, a: u32, b: u32) -> bool {
        self.cut
            .is_some_and(|(x, y)| (x, y) == (a, b) || (y, x) == (a, b))
    }
}

/// How a send ended, and when (simulated) it was posted and ended; and
/// where its first poll came among the host's doings ([`Host::next`]).
#[derive(Debug, Clone)]
struct Sent {
    result: Result<(), Error>,
    posted: Duration,
    ended: Duration,
    order: u64,
}

/// How a put or get ended: its result, whether the buffer that came back
/// was byte-exact, and when (simulated) it was posted and ended.
#[derive(Debug, Clone)]
struct Bulk {
    result: Result<(), Error>,
    intact: bool,
    posted: Duration,
    ended: Duration,
}

/// What one host saw, for the checks at the end and the digest.
#[derive(Debug, Default)]
struct HostLog {
    /// Everything in the order seen, with the simulated time.
    trace: Vec<String>,
    /// How each send ended, by (peer, task, i), with when it was posted
    /// and ended.
    sends: BTreeMap<(u32, u32, u32), Vec<Sent>>,
    /// Messages by (sender, its task): `i` and whether tag and bytes were
    /// those sent, in arrival order.
    received: BTreeMap<(u32, u32), Vec<(u32, bool)>>,
    /// The put to each peer and the get of the same bytes back.
    puts: BTreeMap<u32, Vec<Bulk>>,
    gets: BTreeMap<u32, Vec<Bulk>>,
    /// Notices of each peer's put into this host, and whether its bytes
    /// were in the region.
    arrived: BTreeMap<u32, Vec<bool>>,
    /// Keys of the regions peers lent this host, and how the send of the
    /// key of the region lent to each peer ended.
    keys: BTreeMap<u32, RemoteKey>,
    key_sends: BTreeMap<u32, Sent>,
    /// Peers lost, and why, in order.
    lost: Vec<(u32, BtlError)>,
    /// Regions taken back, by peer: whether they held what it put.
    reclaimed: BTreeMap<u32, Result<bool, Error>>,
    /// The module's usage and outstanding packets before its close.
    usage: Option<(Usage, usize)>,
    /// How the flush under way with the first sends ended, where its call
    /// came among the host's doings, and when it ended.
    flushed: Option<(Result<(), Error>, u64, Duration)>,
    /// The host's doings so far that order matters for ([`Host::next`]).
    doings: u64,
    closed: Option<Result<(), Error>>,
    /// Fragments in use once closed.
    left_in_use: Option<u32>,
    /// Through with every peer: waiting for the others to be, to close.
    through: bool,
    finished: bool,
    /// Tasks of the host waiting for a change of this log.
    waiting: Vec<Waker>,
}

impl HostLog {
    fn lost(&self, peer: u32) -> bool {
        self.lost.iter().any(|&(p, _)| p == peer)
    }

    /// Whether everything host `rank` had to do with `peer` is over: its
    /// sends, put and get ended (no get follows a put that failed, unless
    /// both went at once to a peer being cut off), and unless the peer
    /// was lost, all of the peer's messages and its put arrived.
    fn through_with(&self, plan: &Plan, rank: u32, peer: u32) -> bool {
        let sent = (0..plan.tasks)
            .flat_map(|t| (0..plan.each).map(move |i| (peer, t, i)))
            .all(|k| self.sends.contains_key(&k));
        let put_failed = self
            .puts
            .get(&peer)
            .and_then(|p| p.first())
            .is_some_and(|p| p.result.is_err());
        let bulk = self.puts.contains_key(&peer)
            && (self.gets.contains_key(&peer) || (put_failed && !plan.is_cut(rank, peer)));
        let got = (0..plan.tasks)
            .all(|t| self.received.get(&(peer, t)).map_or(0, Vec::len) == plan.each as usize)
            && self.arrived.contains_key(&peer);
        sent && bulk && (got || self.lost(peer))
    }
}

/// What every host saw, and the partition, once made.
#[derive(Debug, Default)]
struct World {
    hosts: Vec<HostLog>,
    /// When the plan's pair was cut apart.
    cut_at: Option<Duration>,
}

/// A host's view of the world: its rank, the plan, and its log.
#[derive(Clone)]
struct Host {
    rank: u32,
    seed: u64,
    plan: Rc<Plan>,
    world: Rc<RefCell<World>>,
}

impl Host {
    /// Changes the host's log, and wakes its tasks that wait on it.
    fn note<R>(&self, f: impl FnOnce(&mut HostLog) -> R) -> R {
        let mut world = self.world.borrow_mut();
        let log = &mut world.hosts[self.rank as usize];
        let r = f(log);
        for w in log.waiting.drain(..) {
            w.wake();
        }
        r
    }

    /// A number for what the host is about to do, greater than those of
    /// all it did before: finer than the simulated time, which several
    /// doings of a step share.
    fn next(&self) -> u64 {
        self.note(|log| {
            log.doings += 1;
            log.doings
        })
    }

    /// Adds `what` to the host's trace, at the simulated time.
    fn trace(&self, what: String) {
        let at = turmoil::elapsed().as_micros();
        self.note(|log| log.trace.push(format!("{at:>9}us {what}")));
    }

    /// Waits until `done` holds of the host's log, at most [`PATIENCE`].
    async fn until(&self, what: &str, done: impl Fn(&HostLog) -> bool) {
        let wait = poll_fn(|cx| {
            let mut world = self.world.borrow_mut();
            let log = &mut world.hosts[self.rank as usize];
            if done(log) {
                return Poll::Ready(());
            }
            log.waiting.push(cx.waker().clone());
            Poll::Pending
        });
        bounded(&format!("host {}: {what}", self.rank), wait).await;
    }

    /// Waits until every host is through with every peer.
    async fn until_all_through(&self) {
        for _ in 0..PATIENCE.as_millis() {
            if self.world.borrow().hosts.iter().all(|h| h.through) {
                return;
            }
            tokio::time::sleep(STEP).await;
        }
        panic!("host {}: the others were never through", self.rank);
    }

    /// Waits until the harness has cut the plan's pair apart.
    async fn until_cut(&self) {
        for _ in 0..PATIENCE.as_millis() {
            if self.world.borrow().cut_at.is_some() {
                return;
            }
            tokio::time::sleep(STEP).await;
        }
        panic!("host {}: the pair was never cut apart", self.rank);
    }
}

/// Awaits `f`, at most [`PATIENCE`].
async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?} of the host's clock"))
}

/// The engine of process `me`: checksums on, keepalives at a quarter of
/// the peer timeout.
fn engine(me: ProcName, peer_timeout: Duration) -> EngineConfig {
    let mut c = EngineConfig::new(me);
    c.checksum = true;
    c.peer_timeout = peer_timeout.into();
    c.keepalive = c.peer_timeout / 4;
    c.handshake_timeout = btl_core::time::Duration::from_secs(1);
    c
}

/// The software of host `rank`: its module over the simulated network,
/// then [`serve`] through an endpoint.
async fn host(host: Host, boot: Arc<StaticPeers>) -> turmoil::Result {
    let (rank, plan) = (host.rank, host.plan.clone());
    let net = SimNet::new(host.seed ^ (u64::from(rank) << 32)).with_duplication(plan.duplication);
    let me = ProcName::new(JOB, rank);
    let engine = engine(me, plan.peer_timeout);
    match plan.component {
        Component::Tcp => {
            let setup = TcpSetup {
                tcp: TcpConfig {
                    connect_timeout: Duration::from_millis(500),
                    lookup_timeout: Duration::ZERO,
                    ..TcpConfig::default()
                },
                pools: pools(plan.max_message()),
                engine,
                capacities: Capacities::SOCKET_MODULE,
            };
            let mut module = setup
                .build_on(net, me, Some(b"sim"), boot)
                .expect("a TCP module");
            // A crashed host's module goes without a word, as a killed
            // process's does; `close` finalizes it otherwise.
            module.abort_on_drop();
            serve(host, Endpoint::spawn_local(module)).await
        }
        Component::Udp => {
            let setup = UdpSetup {
                udp: UdpConfig {
                    lookup_timeout: Duration::ZERO,
                    ..UdpConfig::default()
                },
                pools: pools(1400),
                engine,
                capacities: Capacities::SOCKET_MODULE,
            };
            let mut module = setup
                .build_on(net, me, Some(b"sim"), boot)
                .expect("a UDP module");
            module.abort_on_drop();
            serve(host, Endpoint::spawn_local(module)).await
        }
    }
}

/// A host's life through its endpoint: reach every other host, lend each
/// a region and send it its key; from several tasks, send each peer its
/// messages; put into the region each peer lent, and get the bytes back;
/// take every message, notice and peer event that comes; once through
/// with every peer, and every host is, take the regions back and close.
async fn serve<T>(host: Host, ep: Endpoint<T>) -> turmoil::Result
where
    T: Transport + 'static,
{
    let (rank, plan) = (host.rank, host.plan.clone());
    let mut data = ep.receiver(DATA, 16).expect("a receiver of the data");
    let mut keys = ep.receiver(KEY..=KEY, 16).expect("a receiver of keys");
    let mut arrivals = ep.arrivals(16);
    let mut peer_events = ep.peer_events(16);
    let others: Vec<u32> = (0..plan.hosts).filter(|&r| r != rank).collect();
    let mut eps = Vec::new();
    for &r in &others {
        let reached = ep.reach(ProcName::new(JOB, r), Duration::from_secs(1));
        let reached = bounded("reach", reached).await;
        eps.push(reached.expect("every host reaches every other"));
    }
    let peers = Rc::new(
        others
            .iter()
            .copied()
            .zip(eps.iter().copied())
            .collect::<Vec<_>>(),
    );
    let rank_of = {
        let peers = peers.clone();
        move |e: EndpointId| {
            peers
                .iter()
                .find(|&&(_, p)| p == e)
                .map(|&(r, _)| r)
                .expect("an endpoint of a peer")
        }
    };
    host.trace(format!("reached {others:?}"));

    // A region for each peer to put into and get from, its key sent.
    let access = Access::REMOTE_WRITE | Access::REMOTE_READ;
    let lent: Rc<RefCell<BTreeMap<u32, Lent>>> = Rc::default();
    let mut tasks = Vec::new();
    for &(r, peer) in peers.iter() {
        let region = ep
            .lend(vec![0u8; plan.max_put()], access)
            .map_err(|e| e.error)
            .expect("a region lent");
        let key = region.remote_key().to_bytes();
        lent.borrow_mut().insert(r, region);
        let (ep, host) = (ep.clone(), host.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (posted, order) = (turmoil::elapsed(), host.next());
            let sent = bounded("a key's send", ep.send(peer, KEY, key)).await;
            let ended = turmoil::elapsed();
            host.trace(format!("key to {r}: {sent:?}"));
            host.note(|log| {
                let sent = Sent {
                    result: sent,
                    posted,
                    ended,
                    order,
                };
                log.key_sends.insert(r, sent)
            });
        }));
    }

    // What comes in.
    let take_data = {
        let (host, rank_of) = (host.clone(), rank_of.clone());
        tokio::task::spawn_local(async move {
            let max = host.plan.max_message();
            while let Some(m) = data.recv().await {
                let from = rank_of(m.from);
                let word = |at: usize| {
                    let b = m.data.get(at..at + 4).expect("a header");
                    u32::from_le_bytes(b.try_into().expect("four bytes"))
                };
                let (task, i) = (word(0), word(4));
                let (tag, want) = message(host.seed, from, host.rank, task, i, max);
                let intact = m.tag == tag && m.data == want;
                host.trace(format!(
                    "from {from} task {task} #{i} tag {:#x} {} B intact {intact}",
                    m.tag.0,
                    m.data.len()
                ));
                host.note(|log| {
                    log.received
                        .entry((from, task))
                        .or_default()
                        .push((i, intact))
                });
            }
        })
    };
    let take_keys = {
        let (host, rank_of) = (host.clone(), rank_of.clone());
        tokio::task::spawn_local(async move {
            while let Some(m) = keys.recv().await {
                let from = rank_of(m.from);
                let key = RemoteKey::from_bytes(&m.data).expect("a key's bytes");
                host.trace(format!("key from {from}"));
                host.note(|log| log.keys.insert(from, key));
            }
        })
    };
    let take_arrivals = {
        let (host, rank_of, ep, lent) = (host.clone(), rank_of.clone(), ep.clone(), lent.clone());
        tokio::task::spawn_local(async move {
            while let Some(a) = arrivals.recv().await {
                let from = rank_of(a.from);
                let want = bulk(host.seed, from, host.rank, host.plan.max_put());
                let lent = lent.borrow();
                let region = lent.get(&from).expect("a region lent to the peer");
                let (at, len) = (a.slice.offset as usize, a.slice.len as usize);
                let there = ep
                    .with_lent(region, |b| b.get(at..at + len) == Some(&want[..]))
                    .expect("the lent region");
                let intact = there && a.imm == u64::from(from) && at == 0;
                host.trace(format!("put from {from} landed, {len} B, intact {intact}"));
                host.note(|log| log.arrived.entry(from).or_default().push(intact));
            }
        })
    };
    let take_peer_events = {
        let (host, rank_of) = (host.clone(), rank_of.clone());
        tokio::task::spawn_local(async move {
            while let Some(e) = peer_events.recv().await {
                host.trace(format!("{e:?}"));
                // A peer that left closed: no error.
                if let PeerEvent::Lost(p, why) = e {
                    host.note(|log| log.lost.push((rank_of(p), why)));
                }
            }
        })
    };

    // What goes out: the messages, from several tasks per peer; and the
    // put and get with each peer.
    for &(to, peer) in peers.iter() {
        for task in 0..plan.tasks {
            let (ep, host) = (ep.clone(), host.clone());
            tasks.push(tokio::task::spawn_local(async move {
                if host.plan.is_cut(host.rank, to) {
                    host.until_cut().await;
                }
                send_all(&host, &ep, to, peer, task).await;
            }));
        }
        let (ep, host) = (ep.clone(), host.clone());
        tasks.push(tokio::task::spawn_local(async move {
            put_and_get(&host, &ep, to, peer).await;
        }));
    }

    // A flush while the keys (each the first send to its peer, which no
    // lack of room can hold back) and the first messages are under way:
    // it ends once what was sent before it is acknowledged.
    tokio::task::yield_now().await;
    let called = host.next();
    let flushed = bounded("a flush", ep.flush()).await;
    host.trace(format!("flushed: {flushed:?}"));
    host.note(|log| log.flushed = Some((flushed, called, turmoil::elapsed())));

    // Through with every peer; then, once every host is (the harness
    // knows, as a job's launcher would), nothing is under way anywhere.
    host.until("through with every peer", |log| {
        others.iter().all(|&r| log.through_with(&plan, rank, r))
    })
    .await;
    for t in tasks {
        bounded("a task", t).await.expect("a task of the host ends");
    }
    host.trace("through".to_owned());
    host.note(|log| log.through = true);
    host.until_all_through().await;

    // Back to nothing: the regions taken back, nothing under way.
    let regions = std::mem::take(&mut *lent.borrow_mut());
    for (r, region) in regions {
        let intact_if = |b: &[u8]| {
            let want = bulk(host.seed, r, rank, plan.max_put());
            b.get(..want.len()) == Some(&want[..])
        };
        let back = take_back(&ep, region).await.map(|b| intact_if(&b));
        host.trace(format!("region of {r} back: {back:?}"));
        host.note(|log| log.reclaimed.insert(r, back));
    }
    let usage = ep.with(|m| (m.usage(), m.outstanding()));
    host.trace(format!("usage {usage:?}"));
    let closed = bounded("the close", ep.close()).await;
    host.trace(format!("closed: {closed:?}"));
    let left_in_use = ep.with(|m| in_use(m));
    for t in [take_data, take_keys, take_arrivals, take_peer_events] {
        let ended = bounded("an inbox's end, once closed", t).await;
        ended.expect("an inbox task ends");
    }
    host.note(|log| {
        log.usage = Some(usage);
        log.closed = Some(closed);
        log.left_in_use = Some(left_in_use);
        log.finished = true;
    });
    Ok(())
}

/// Takes `lent` back once no operation of a peer reads or writes it: a
/// peer's get ends on the peer's side when the bytes arrive, on this side
/// only when their acknowledgement does, which `reclaim` waits for.
async fn take_back<T: Transport>(ep: &Endpoint<T>, lent: Lent) -> Result<Vec<u8>, Error> {
    match tokio::time::timeout(PATIENCE, ep.reclaim(lent)).await {
        Ok(taken) => taken,
        Err(_) => panic!("a lent region still in use after {PATIENCE:?}"),
    }
}

/// Sends peer `to` the messages of sender task `task`, in order: each
/// awaited before the next, or with a window of them under way at once
/// (each in a task of its own, spawned, and so first polled, in order).
async fn send_all<T>(host: &Host, ep: &Endpoint<T>, to: u32, peer: EndpointId, task: u32)
where
    T: Transport + 'static,
{
    let (max, window_len) = (host.plan.max_message(), host.plan.window);
    let mut window = VecDeque::new();
    for i in 0..host.plan.each {
        let (tag, data) = message(host.seed, host.rank, to, task, i, max);
        let send = ep.send(peer, tag, data);
        let host = host.clone();
        let sent = async move {
            let (posted, order) = (turmoil::elapsed(), host.next());
            let sent = bounded("a send", send).await;
            let ended = turmoil::elapsed();
            host.trace(format!("sent to {to} task {task} #{i}: {sent:?}"));
            host.note(|log| {
                let ends = log.sends.entry((to, task, i)).or_default();
                ends.push(Sent {
                    result: sent,
                    posted,
                    ended,
                    order,
                });
            });
        };
        if window_len <= 1 {
            sent.await;
            continue;
        }
        window.push_back(tokio::task::spawn_local(sent));
        if window.len() >= window_len
            && let Some(oldest) = window.pop_front()
        {
            bounded("a send", oldest).await.expect("a send task ends");
        }
    }
    for t in window {
        bounded("a send", t).await.expect("a send task ends");
    }
}

/// Puts this host's bytes into the region `to` lent it, then gets them
/// back; with a peer to be cut off, both at once once it is.
async fn put_and_get<T>(host: &Host, ep: &Endpoint<T>, to: u32, peer: EndpointId)
where
    T: Transport + 'static,
{
    host.until("the key of the peer's region", |log| {
        log.keys.contains_key(&to)
    })
    .await;
    let key = host.world.borrow().hosts[host.rank as usize].keys[&to];
    let data = bulk(host.seed, host.rank, to, host.plan.max_put());
    let remote = key.slice(0, data.len() as u64);
    let put = |data: Vec<u8>| {
        let (host, ep) = (host.clone(), ep.clone());
        async move {
            let posted = turmoil::elapsed();
            let put = ep.put_notify(peer, data.clone(), remote, u64::from(host.rank));
            let (result, intact) = match bounded("a put", put).await {
                Ok(back) => (Ok(()), back == data),
                Err(e) => (Err(e.error), e.buffer == data),
            };
            let ended = turmoil::elapsed();
            host.trace(format!("put to {to}: {result:?} intact {intact}"));
            let ok = result.is_ok();
            host.note(|log| {
                let b = Bulk {
                    result,
                    intact,
                    posted,
                    ended,
                };
                log.puts.entry(to).or_default().push(b);
            });
            ok
        }
    };
    let get = |want: Vec<u8>| {
        let (host, ep) = (host.clone(), ep.clone());
        async move {
            let posted = turmoil::elapsed();
            let get = ep.get(peer, vec![0u8; want.len()], remote);
            let (result, intact) = match bounded("a get", get).await {
                Ok(back) => (Ok(()), back == want),
                Err(e) => (Err(e.error), e.buffer.len() == want.len()),
            };
            let ended = turmoil::elapsed();
            host.trace(format!("get from {to}: {result:?} intact {intact}"));
            host.note(|log| {
                let b = Bulk {
                    result,
                    intact,
                    posted,
                    ended,
                };
                log.gets.entry(to).or_default().push(b);
            });
        }
    };
    if host.plan.is_cut(host.rank, to) {
        // Both under way when the peer is lost.
        host.until_cut().await;
        let put = tokio::task::spawn_local(put(data.clone()));
        let get = tokio::task::spawn_local(get(data));
        bounded("a put", put).await.expect("a put task ends");
        bounded("a get", get).await.expect("a get task ends");
    } else if put(data.clone()).await {
        get(data).await;
    }
}

/// `BTL_SIM_LOG=debug` shows the transports' log of a replayed seed (and
/// the trace of every host once it has run).
fn log_if_asked() {
    if let Ok(filter) = std::env::var("BTL_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// What a run came to: what every host saw, and how many steps it took.
struct Run {
    world: World,
    steps: u64,
}

/// Runs `plan` with `seed` until every host has closed.
fn run(plan: &Plan, seed: u64) -> Run {
    log_if_asked();
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(600))
        .tick_duration(STEP)
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
    let world = Rc::new(RefCell::new(World {
        hosts: (0..plan.hosts).map(|_| HostLog::default()).collect(),
        cut_at: None,
    }));
    let peers: Rc<RefCell<Option<Arc<StaticPeers>>>> = Rc::default();
    let shared_plan = Rc::new(plan.clone());
    for rank in 0..plan.hosts {
        let (world, peers, plan) = (world.clone(), peers.clone(), shared_plan.clone());
        sim.host(names[rank as usize].as_str(), move || {
            let host = Host {
                rank,
                seed,
                plan: plan.clone(),
                world: world.clone(),
            };
            let peers = peers.clone();
            async move {
                let boot = peers.borrow().clone().expect("cards before the hosts run");
                self::host(host, boot).await
            }
        });
    }
    let cards: Vec<Card> = (0..plan.hosts)
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
    let mut repair_at = None;
    let mut steps = 0u64;
    loop {
        if let Some((a, b)) = plan.cut {
            let (na, nb) = (names[a as usize].as_str(), names[b as usize].as_str());
            let mut w = world.borrow_mut();
            // Each has the other's key, its send acknowledged.
            let keyed = |x: u32, y: u32| {
                let sent = w.hosts[x as usize].key_sends.get(&y);
                sent.is_some_and(|s| s.result.is_ok()) && w.hosts[y as usize].keys.contains_key(&x)
            };
            if w.cut_at.is_none() && keyed(a, b) && keyed(b, a) {
                sim.partition(na, nb);
                w.cut_at = Some(sim.elapsed());
                repair_at = Some(sim.elapsed() + plan.peer_timeout * 2);
            }
            if repair_at.is_some_and(|at| sim.elapsed() >= at) {
                sim.repair(na, nb);
                repair_at = None;
            }
        }
        if world.borrow().hosts.iter().all(|h| h.finished) {
            break;
        }
        sim.step()
            .unwrap_or_else(|e| panic!("seed {seed}: the simulation failed: {e}"));
        steps += 1;
        // Past a host's patience (a host times out first, saying what it
        // waited for).
        assert!(
            steps < 700_000,
            "seed {seed}: not done within {:?} simulated",
            sim.elapsed()
        );
    }
    let world = std::mem::take(&mut *world.borrow_mut());
    Run { world, steps }
}

/// A run's outcome in full: every host's trace, in order, with its
/// simulated times. Two runs of one seed must give the same.
fn digest(run: &Run) -> String {
    let mut out = format!("steps {}\n", run.steps);
    for (rank, log) in run.world.hosts.iter().enumerate() {
        out += &format!("host {rank}\n");
        for line in &log.trace {
            out += line;
            out.push('\n');
        }
    }
    out
}

/// The invariants of a run: what the plan's cut pair may lose (each
/// other, by timeout) and nothing else.
fn check(plan: &Plan, seed: u64, run: &Run) {
    let loss = BtlError::PeerLost(LostReason::Timeout);
    if std::env::var("BTL_SIM_LOG").is_ok() {
        eprint!("{}", digest(run));
    }
    for (rank, log) in run.world.hosts.iter().enumerate() {
        let rank = rank as u32;
        let at = |what: &str| format!("seed {seed}: host {rank}: {what}");
        let (flushed, called, returned) = log.flushed.clone().expect("a flush");
        assert_eq!(flushed, Ok(()), "{}", at("flushed"));
        // No sooner than the sends of the keys, polled before it, were
        // acknowledged. (Not every send polled before it: one waiting for
        // room then is not yet sent.)
        for (&peer, sent) in &log.key_sends {
            assert_eq!(sent.result, Ok(()), "{}", at(&format!("the key to {peer}")));
            assert!(
                sent.order < called && sent.ended <= returned,
                "{}",
                at(&format!(
                    "flushed before the key to {peer} was acknowledged"
                ))
            );
        }
        assert_eq!(
            log.key_sends.len() as u32,
            plan.hosts - 1,
            "{}",
            at("keys sent")
        );
        assert_eq!(log.closed, Some(Ok(())), "{}", at("closed"));
        let (usage, outstanding) = log.usage.expect("the usage before the close");
        assert_eq!(
            (
                usage.registrations,
                usage.operations,
                usage.events,
                outstanding
            ),
            (0, 0, 0, 0),
            "{}: {usage:?}",
            at("registrations, operations, events, packets: none left")
        );
        assert_eq!(
            log.left_in_use,
            Some(0),
            "{}",
            at("pools back to nothing in use")
        );
        for peer in (0..plan.hosts).filter(|&p| p != rank) {
            let at = |what: &str| format!("seed {seed}: host {rank} with {peer}: {what}");
            let cut = plan.is_cut(rank, peer);
            let want: Result<(), Error> = if cut { Err(Error::Btl(loss)) } else { Ok(()) };
            // Every send ended exactly once, and as the pair allows.
            for task in 0..plan.tasks {
                for i in 0..plan.each {
                    let ends = log
                        .sends
                        .get(&(peer, task, i))
                        .map_or(&[][..], Vec::as_slice);
                    assert_eq!(
                        ends.len(),
                        1,
                        "{}",
                        at(&format!("send {task}#{i} ended once"))
                    );
                    assert_eq!(ends[0].result, want, "{}", at(&format!("send {task}#{i}")));
                }
                // Once, intact, in the sender's order.
                let got = log
                    .received
                    .get(&(peer, task))
                    .map_or(&[][..], Vec::as_slice);
                for (k, &(i, intact)) in got.iter().enumerate() {
                    assert_eq!(
                        i,
                        k as u32,
                        "{}",
                        at(&format!("task {task}: in order, once"))
                    );
                    assert!(
                        intact,
                        "{}",
                        at(&format!("task {task} #{i}: byte-identical"))
                    );
                }
                let all = if cut { 0 } else { plan.each as usize };
                assert_eq!(got.len(), all, "{}", at(&format!("task {task}: all of it")));
            }
            // The put and the get, once each, their buffers back intact.
            for (what, ops) in [("put", &log.puts), ("get", &log.gets)] {
                let ops = ops.get(&peer).map_or(&[][..], Vec::as_slice);
                assert_eq!(ops.len(), 1, "{}", at(&format!("the {what} ended once")));
                assert_eq!(ops[0].result, want, "{}", at(&format!("the {what}")));
                assert!(
                    ops[0].intact,
                    "{}",
                    at(&format!("the {what}'s buffer back intact"))
                );
            }
            let arrived = log.arrived.get(&peer).map_or(&[][..], Vec::as_slice);
            assert_eq!(
                arrived,
                if cut { &[][..] } else { &[true][..] },
                "{}",
                at("the put's notice")
            );
            let lost: Vec<_> = log.lost.iter().filter(|&&(p, _)| p == peer).collect();
            if cut {
                assert_eq!(lost, [&(peer, loss)], "{}", at("lost once, by timeout"));
                assert_eq!(
                    log.reclaimed.get(&peer),
                    Some(&Ok(false)),
                    "{}",
                    at("region back untouched")
                );
            } else {
                assert!(lost.is_empty(), "{}: {lost:?}", at("not lost"));
                assert_eq!(
                    log.reclaimed.get(&peer),
                    Some(&Ok(true)),
                    "{}",
                    at("region back with the put")
                );
            }
        }
    }
}

#[test]
fn all_to_all_over_tcp() {
    for_seeds(3, |seed| {
        let plan = Plan::new(Component::Tcp, 3 + (seed % 3) as u32);
        check(&plan, seed, &run(&plan, seed));
    });
}

/// UDP over links that fail at random (5 % per datagram sent, repaired
/// at 50 %: a failure drops every datagram in flight on the link), 3 % of
/// datagrams sent twice, hosts run in random order.
fn lossy_udp(hosts: u32) -> Plan {
    let mut plan = Plan::new(Component::Udp, hosts);
    plan.fail_repair = Some((0.05, 0.5));
    plan.random_order = true;
    plan.duplication = 30;
    plan
}

#[test]
fn all_to_all_over_udp_with_loss_duplication_and_reordering() {
    for_seeds(3, |seed| {
        let plan = lossy_udp(3 + (seed % 3) as u32);
        check(&plan, seed, &run(&plan, seed));
    });
}

#[test]
fn a_lost_peer_fails_what_is_under_way_to_it_once() {
    for component in [Component::Tcp, Component::Udp] {
        for_seeds(2, |seed| {
            let mut plan = Plan::new(component, 3);
            plan.peer_timeout = Duration::from_secs(1);
            plan.cut = Some((0, 1));
            let run = run(&plan, seed);
            check(&plan, seed, &run);
            // Each was under way when the peer was lost: posted once the
            // pair was cut apart, and ended only with the loss.
            let cut_at = run.world.cut_at.expect("the pair was cut apart");
            let lost_by = cut_at + plan.peer_timeout / 2;
            for (a, b) in [(0, 1), (1, 0)] {
                let log = &run.world.hosts[a as usize];
                let at = format!("seed {seed}: {component:?}: host {a} with {b}");
                for (what, op) in [("put", &log.puts[&b][0]), ("get", &log.gets[&b][0])] {
                    assert!(
                        op.posted >= cut_at && op.ended >= lost_by,
                        "{at}: the {what} was under way at the loss: {op:?}"
                    );
                }
                for task in 0..plan.tasks {
                    let sent = &log.sends[&(b, task, 0)][0];
                    assert!(
                        sent.posted >= cut_at && sent.ended >= lost_by,
                        "{at}: task {task}'s first send was under way at the loss"
                    );
                }
            }
        });
    }
}

#[test]
fn a_seed_replays_exactly() {
    // Over TCP a pair lost to a partition, hosts in random order; over
    // UDP loss, duplication and reordering.
    let mut tcp = Plan::new(Component::Tcp, 3);
    tcp.random_order = true;
    tcp.peer_timeout = Duration::from_secs(1);
    tcp.cut = Some((0, 1));
    for plan in [tcp, lossy_udp(3)] {
        let component = plan.component;
        let seed = seeds(1)[0];
        let (first, second) = (run(&plan, seed), run(&plan, seed));
        check(&plan, seed, &first);
        let (first, second) = (digest(&first), digest(&second));
        let differ = first.lines().zip(second.lines()).position(|(a, b)| a != b);
        assert!(
            first == second,
            "seed {seed}: {component:?}: the same outcome, event for event; first difference at line {differ:?}"
        );
    }
}

/// Sends a task pipelines to one peer, a window of three under way (and
/// now and then waiting for room), arrive in the order `send` was called.
#[test]
fn pipelined_sends_arrive_in_order() {
    for_seeds(3, |seed| {
        let mut plan = Plan::new(Component::Tcp, 5);
        plan.tasks = 2;
        plan.window = 3;
        check(&plan, seed, &run(&plan, seed));
    });
}

/// The book's example of an async service under the simulation (the
/// "Simulation" chapter): a client sends a request and awaits the reply;
/// the server answers it, and closes once the client has left. Every wait
/// of the hosts is bounded by the steps the loop below makes.
#[test]
fn a_client_and_a_server() {
    for_seeds(2, |seed| {
        log_if_asked();
        // A latency of at least a step: with none, a connect made on the
        // first step could reach the server before its software ran and
        // listened, and a peer never reached is lost at once.
        let mut sim = turmoil::Builder::new()
            .rng_seed(seed)
            .tick_duration(STEP)
            .min_message_latency(Duration::from_micros(100))
            .max_message_latency(Duration::from_micros(500))
            .build();
        let cards: Rc<RefCell<Option<Arc<StaticPeers>>>> = Rc::default();
        // What each host received, once it has closed.
        let seen: Rc<RefCell<BTreeMap<u32, Vec<u8>>>> = Rc::default();
        for rank in 0..2u32 {
            let (cards, seen) = (cards.clone(), seen.clone());
            sim.host(format!("host{rank}"), move || {
                let (cards, seen) = (cards.clone(), seen.clone());
                async move {
                    let boot = cards.borrow().clone().expect("cards before the hosts run");
                    let me = ProcName::new(JOB, rank);
                    let setup = TcpSetup {
                        tcp: TcpConfig::default(),
                        pools: pools(64 << 10),
                        engine: EngineConfig::new(me),
                        capacities: Capacities::SOCKET_MODULE,
                    };
                    let net = SimNet::new(seed ^ u64::from(rank));
                    let mut module = setup.build_on(net, me, Some(b"sim"), boot)?;
                    module.abort_on_drop();
                    let ep = Endpoint::spawn_local(module);
                    let mut inbox = ep.receiver(Tag(0x80)..=Tag(0x81), 16)?;
                    let mut peers = ep.peer_events(4);
                    let got = if rank == 0 {
                        let server = ProcName::new(JOB, 1);
                        let server = ep.reach(server, Duration::from_secs(1)).await?;
                        ep.send(server, Tag(0x80), b"ping".to_vec()).await?;
                        inbox.recv().await.ok_or("no reply")?
                    } else {
                        let ping = inbox.recv().await.ok_or("no request")?;
                        ep.send(ping.from, Tag(0x81), b"pong".to_vec()).await?;
                        let left = peers.recv().await;
                        assert_eq!(left, Some(PeerEvent::Left(ping.from)), "the client left");
                        ping
                    };
                    ep.close().await?;
                    seen.borrow_mut().insert(rank, got.data.to_vec());
                    Ok(())
                }
            });
        }
        let card = |rank: u32, sim: &turmoil::Sim<'_>| {
            let mut card = Card::new(ProcName::new(JOB, rank));
            card.contacts.push(Contact {
                component: "tcp".to_owned(),
                addr: std::net::SocketAddr::new(sim.lookup(format!("host{rank}")), PORT),
                prefix: 24,
            });
            card
        };
        let list = vec![card(0, &sim), card(1, &sim)];
        *cards.borrow_mut() = Some(Arc::new(StaticPeers::new(list, "the simulation")));
        for _ in 0..100_000 {
            if seen.borrow().len() == 2 {
                break;
            }
            sim.step()
                .unwrap_or_else(|e| panic!("seed {seed}: the simulation failed: {e}"));
        }
        let seen = seen.borrow();
        assert_eq!(
            seen.get(&0).map(Vec::as_slice),
            Some(&b"pong"[..]),
            "seed {seed}"
        );
        assert_eq!(
            seen.get(&1).map(Vec::as_slice),
            Some(&b"ping"[..]),
            "seed {seed}"
        );
    });
}
