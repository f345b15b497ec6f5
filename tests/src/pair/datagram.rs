//! An in-memory datagram driver: two [`Engine`]s in datagram framing,
//! joined by a network that loses, duplicates and reorders what they send.
//!
//! [`DatagramPair`] plays the part a UDP socket loop would for two engines,
//! A and B: it gives each one link to the other (the association of two
//! addresses), carries each [`Transmit`](btl_core::engine::Transmit) as one datagram,
//! and tells the engines the time. Between them sits a bounded queue per
//! direction and a seeded fault generator ([`Faults`]): a datagram may be
//! dropped, delivered twice, or overtake those queued before it, and one
//! that finds its queue full is dropped, as a congested network would. It
//! allocates nothing and is deterministic (seeded faults and nonces, a
//! counter for a clock), so a failing run replays exactly.
//!
//! ```
//! use btl_core::btl::{Btl, Event, Tag};
//! use btl_core::desc::{DescFlags, Order};
//! use btl_core::endpoint::ProcName;
//! use btl_core::engine::config::EngineConfig;
//! use btl_core::engine::{Datagram, Engine, Inline};
//! use btl_tests::pair::datagram::{DatagramPair, Faults};
//! use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
//! use btl_core::time::{Duration, Instant};
//!
//! let pool = |fragment_size| FragmentPoolConfig { fragment_size, num: 8, max: 8, inc: 8 };
//! let cfg = FragmentPoolsConfig { small: pool(256), eager: pool(1024), max: pool(1500) };
//! let (mut ra, mut rb) = ([0u8; 65536], [0u8; 65536]);
//! // 2 peers, 2 links, a window of 8, 2 operations, 16 events, 2 registrations.
//! type Tables = Inline<2, 2, 8, 2, 16, 2, Vec<u8>>;
//! let (mut ta, mut tb) = (Tables::new(), Tables::new());
//! let names = [ProcName::new(7, 0), ProcName::new(7, 1)];
//! let framing = Datagram { mtu: 1500 };
//! let a = Engine::new(EngineConfig::new(names[0]), framing, ta.lend(), FragmentPools::new(&mut ra, cfg)?, Instant::ZERO);
//! let b = Engine::new(EngineConfig::new(names[1]), framing, tb.lend(), FragmentPools::new(&mut rb, cfg)?, Instant::ZERO);
//! // 64 datagrams in flight per direction, 1500-byte MTU; one in ten lost.
//! let mut pair: DatagramPair<_, 64, 1500> = DatagramPair::new(a, b, names, 42);
//! pair.set_faults(Faults { loss: 100, ..Faults::NONE });
//! pair.set_tick(Duration::from_millis(1)); // 1 ms per round: retransmissions come soon
//! let [b_at_a, _] = pair.introduce()?;
//! let d = pair.a().prepare_src(b_at_a, b"hello", 0, Order::ANY, DescFlags::BTL_OWNERSHIP)?;
//! let _ = pair.a().send(b_at_a, d, Tag(0x80)).map_err(|e| e.error)?;
//! let mut got = None;
//! for _ in 0..10_000 {
//!     pair.round();
//!     if let Some(Event::Received(m)) = pair.b().poll_event() {
//!         got = Some(m.data.to_vec());
//!         break;
//!     }
//! }
//! assert_eq!(got.as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::borrow::BorrowMut;
use core::marker::PhantomData;

use heapless::Vec;

use btl_core::btl::BtlError;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::driver::Io;
use btl_core::engine::{ConnectFailure, ConnectRequest, Datagram, Engine, LinkId, Source, Storage};
use btl_core::time::{Duration, Instant};
use btl_core::wire::NONCE_LEN;

use super::{Side, SplitMix64, introduce, introduce_restarted};

/// Requests and datagrams served per side and step: the bound of loops
/// that must end.
const MAX_POLLS: usize = 1 << 12;
/// Passes of a round over the two directions, at most.
const PASSES: u32 = 16;
/// Fake time per round unless [`DatagramPair::set_tick`] says
/// otherwise.
const DEFAULT_TICK: Duration = Duration::from_micros(1);
/// How far back among the queued datagrams a reordered one may land.
const REORDER_DEPTH: u64 = 8;

/// What the network does to datagrams, each in thousandths (per mille) of
/// those sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Dropped.
    pub loss: u16,
    /// Delivered twice.
    pub duplication: u16,
    /// Queued ahead of up to eight datagrams sent before it.
    pub reordering: u16,
}

impl Faults {
    /// A perfect network.
    pub const NONE: Faults = Faults {
        loss: 0,
        duplication: 0,
        reordering: 0,
    };
}

/// What the network did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams the engines sent.
    pub sent: u64,
    /// Datagrams handed to an engine.
    pub delivered: u64,
    /// Dropped by the fault generator.
    pub lost: u64,
    /// Dropped because the queue towards their receiver was full, or the
    /// receiver is dead.
    pub overflowed: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Queued ahead of earlier ones.
    pub reordered: u64,
    /// Transmits larger than `MTU` (an engine bug): dropped.
    pub oversized: u64,
}

/// What the network does with the next datagram.
#[derive(Clone, Copy)]
enum Fate {
    Lost,
    Arrives { twice: bool },
}

impl Fate {
    fn draw(random: &mut SplitMix64, faults: &Faults, dead: bool) -> Fate {
        if dead || chance(random, faults.loss) {
            return Fate::Lost;
        }
        Fate::Arrives {
            twice: chance(random, faults.duplication),
        }
    }
}

/// Where a transmitted datagram went.
enum Placed {
    Lost,
    Overflowed,
    Oversized(usize),
    In { slot: usize, twice: bool },
}

/// True with probability `per_mille` / 1000.
fn chance(random: &mut SplitMix64, per_mille: u16) -> bool {
    per_mille > 0 && random.next() % 1000 < u64::from(per_mille)
}

/// One datagram in flight.
struct InFlight<const MTU: usize> {
    len: usize,
    bytes: [u8; MTU],
}

impl<const MTU: usize> InFlight<MTU> {
    const EMPTY: Self = InFlight {
        len: 0,
        bytes: [0; MTU],
    };
}

/// The datagrams in flight towards one side: slots, and their delivery
/// order as slot numbers (cheap to reorder).
struct Queue<const N: usize, const MTU: usize> {
    slots: [InFlight<MTU>; N],
    order: Vec<u16, N>,
    free: Vec<u16, N>,
    /// Slots handed out at least once: those from here on are free too.
    fresh: usize,
}

impl<const N: usize, const MTU: usize> Queue<N, MTU> {
    const fn new() -> Self {
        Queue {
            slots: [const { InFlight::EMPTY }; N],
            order: Vec::new(),
            free: Vec::new(),
            fresh: 0,
        }
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    fn clear(&mut self) {
        while let Some(slot) = self.order.pop() {
            let _ = self.free.push(slot);
        }
    }

    /// A free slot, taken; `None` when all `N` hold datagrams.
    fn take_slot(&mut self) -> Option<usize> {
        if let Some(slot) = self.free.pop() {
            return Some(usize::from(slot));
        }
        (self.fresh < N).then(|| {
            self.fresh += 1;
            self.fresh - 1
        })
    }
}

/// Two engines, A and B, in datagram framing, joined by an in-memory
/// network of `N` datagrams per direction of at most `MTU` bytes.
///
/// `E` is the engine type and `S` how the pair holds each engine (`E`,
/// `&mut E`, `Box<E>`). The pair takes about `2 * N * MTU` bytes plus the
/// engines it holds by value.
///
/// One [`round`](Self::round): the clock advances by the tick; then, in
/// passes until nothing moves, each side takes what its queue holds
/// (`handle_accepted` first if it has no link) and its engine runs the
/// driver loop every driver runs ([`Engine::serve`]: timers, in the first
/// pass only; connect requests, which get the side's link, made by
/// `handle_connected` if it has none yet, since over datagrams both
/// directions share one association; its datagrams, each through the
/// fault generator into the queue towards the other side; the links it is
/// done with; its queues). A paused or killed side takes no part; what is
/// sent to a paused side waits in its queue, what is sent to a dead one
/// is lost.
pub struct DatagramPair<E, const N: usize, const MTU: usize, S = E> {
    engines: [S; 2],
    net: Network<N, MTU>,
    peers: [Option<EndpointId>; 2],
    paused: [bool; 2],
    tick: Duration,
    _engine: PhantomData<fn() -> E>,
}

/// Everything of a [`DatagramPair`] but its engines: the two addresses'
/// association, the queues between them and their faults, and the clock.
struct Network<const N: usize, const MTU: usize> {
    names: [ProcName; 2],
    links: [Option<LinkId>; 2],
    dead: [bool; 2],
    /// Datagrams towards each side.
    queues: [Queue<N, MTU>; 2],
    faults: Faults,
    stats: NetStats,
    now: Instant,
    random: SplitMix64,
}

/// One side's end of the network: what [`Engine::serve`] asks of a
/// driver, for that side's engine.
struct Port<'a, const N: usize, const MTU: usize> {
    net: &'a mut Network<N, MTU>,
    side: Side,
}

impl<St: Storage, const W: usize, const N: usize, const MTU: usize, S>
    DatagramPair<Engine<St, Datagram, W>, N, MTU, S>
where
    S: BorrowMut<Engine<St, Datagram, W>>,
{
    /// Engines `a` and `b`, processes `names[0]` and `names[1]`, a perfect
    /// network, the clock at 0; `seed` seeds faults and nonces.
    pub const fn new(a: S, b: S, names: [ProcName; 2], seed: u64) -> Self {
        const { assert!(N <= u16::MAX as usize, "slot numbers are u16") };
        DatagramPair {
            engines: [a, b],
            net: Network {
                names,
                links: [None; 2],
                dead: [false; 2],
                queues: Network::EMPTY_QUEUES,
                faults: Faults::NONE,
                stats: NetStats {
                    sent: 0,
                    delivered: 0,
                    lost: 0,
                    overflowed: 0,
                    duplicated: 0,
                    reordered: 0,
                    oversized: 0,
                },
                now: Instant::ZERO,
                random: SplitMix64(seed),
            },
            peers: [None; 2],
            paused: [false; 2],
            tick: DEFAULT_TICK,
            _engine: PhantomData,
        }
    }

    /// Makes each engine know the other (`add_procs`); returns the endpoint
    /// of B at A and of A at B.
    pub fn introduce(&mut self) -> Result<[EndpointId; 2], BtlError> {
        let out = introduce(&mut self.engines, self.net.names)?;
        self.peers = out.map(Some);
        Ok(out)
    }

    /// The endpoint through which `side` reaches the other side.
    pub fn peer(&self, side: Side) -> Option<EndpointId> {
        self.peers[side.index()]
    }

    /// The engine of `side`.
    pub fn engine(&self, side: Side) -> &Engine<St, Datagram, W> {
        self.engines[side.index()].borrow()
    }

    /// The engine of `side`, to call.
    pub fn engine_mut(&mut self, side: Side) -> &mut Engine<St, Datagram, W> {
        self.engines[side.index()].borrow_mut()
    }

    /// Engine A, to call.
    pub fn a(&mut self) -> &mut Engine<St, Datagram, W> {
        self.engine_mut(Side::A)
    }

    /// Engine B, to call.
    pub fn b(&mut self) -> &mut Engine<St, Datagram, W> {
        self.engine_mut(Side::B)
    }

    /// `side`'s link to the other side, if it has one.
    pub fn link(&self, side: Side) -> Option<LinkId> {
        self.net.links[side.index()]
    }

    /// What the network does from now on.
    pub fn set_faults(&mut self, faults: Faults) {
        self.net.faults = faults;
    }

    /// What the network did so far.
    pub fn stats(&self) -> NetStats {
        self.net.stats
    }

    /// Datagrams waiting for `side`.
    pub fn in_flight(&self, side: Side) -> usize {
        self.net.queues[side.index()].len()
    }

    /// The fake clock, in nanoseconds.
    pub fn now(&self) -> Instant {
        self.net.now
    }

    /// Sets how far each round moves the clock (1 µs unless set).
    pub fn set_tick(&mut self, tick: Duration) {
        self.tick = tick;
    }

    /// 16 fresh nonce bytes from the seeded generator.
    pub fn nonce(&mut self) -> [u8; NONCE_LEN] {
        self.net.nonce()
    }

    /// Stops driving `side`; what is sent to it waits in its queue (and is
    /// dropped once the queue is full).
    pub fn pause(&mut self, side: Side) {
        self.paused[side.index()] = true;
    }

    /// Drives `side` again after [`pause`](Self::pause).
    pub fn resume(&mut self, side: Side) {
        self.paused[side.index()] = false;
    }

    /// Kills `side` without a goodbye: it is never driven again, what was
    /// in flight to it is lost, and so is everything sent to it later. The
    /// other side is not told: it finds out by its timeouts.
    pub fn kill(&mut self, side: Side) {
        self.net.dead[side.index()] = true;
        self.net.queues[side.index()].clear();
    }

    /// Starts `side` again, from the same address, as a new start of the
    /// same process: the old engine is killed (as by [`kill`](Self::kill))
    /// if it lives, and `engine`, alive and unpaused, takes its place and
    /// is told of the other side (`add_procs`). The other side is not told:
    /// it finds out from the new start's HELLO. Returns the endpoint
    /// through which the new engine reaches the other side.
    pub fn restart(&mut self, side: Side, engine: S) -> Result<EndpointId, BtlError> {
        if !self.net.dead[side.index()] {
            self.kill(side);
        }
        self.engines[side.index()] = engine;
        self.net.links[side.index()] = None;
        self.net.dead[side.index()] = false;
        self.paused[side.index()] = false;
        let (other, now) = (self.net.names[side.other().index()], self.net.now);
        let endpoint = introduce_restarted(self.engine_mut(side), other, now)?;
        self.peers[side.index()] = Some(endpoint);
        Ok(endpoint)
    }

    /// Whether `side` was killed.
    pub fn is_dead(&self, side: Side) -> bool {
        self.net.dead[side.index()]
    }

    fn active(&self, side: Side) -> bool {
        !self.paused[side.index()] && !self.net.dead[side.index()]
    }

    /// Hands `bytes` to `to` as a datagram from the other side's address
    /// (bypassing faults and queue), as a forger on the path would.
    pub fn inject(&mut self, to: Side, bytes: &[u8]) -> Result<(), BtlError> {
        let engine = self.engines[to.index()].borrow_mut();
        let now = self.net.now;
        let link = self
            .net
            .link_or_accept(to, engine)
            .ok_or(BtlError::OutOfResource)?;
        engine
            .handle_datagram(link, bytes, now)
            .map_err(|_| BtlError::Unreachable)
    }

    /// One round of the driver (see the type's documentation); returns
    /// how many datagrams moved.
    pub fn round(&mut self) -> u64 {
        self.net.now += self.tick;
        let now = self.net.now;
        let mut moved = 0;
        for pass in 0..PASSES {
            let before = self.net.stats.sent + self.net.stats.delivered;
            for side in Side::BOTH {
                if !self.active(side) {
                    continue;
                }
                let engine = self.engines[side.index()].borrow_mut();
                self.net.receive(side, engine);
                let mut port = Port {
                    net: &mut self.net,
                    side,
                };
                // Timers once a round; the passes carry what they set off.
                engine.serve(&mut port, now, pass == 0);
            }
            let pass = self.net.stats.sent + self.net.stats.delivered - before;
            moved += pass;
            if pass == 0 {
                break;
            }
        }
        moved
    }

    /// Runs rounds until one moves nothing and no datagram is in flight;
    /// returns how many ran, or `None` if `max_rounds` were not enough.
    pub fn run_until_idle(&mut self, max_rounds: u32) -> Option<u32> {
        (1..=max_rounds).find(|_| self.round() == 0 && self.net.queues.iter().all(|q| q.len() == 0))
    }
}

impl<St: Storage, const W: usize, const N: usize, const MTU: usize> Io<Engine<St, Datagram, W>>
    for Port<'_, N, MTU>
{
    /// Over datagrams both directions share one association: a connect
    /// request gets the side's link, made now if it has none yet (one
    /// accepted from the peer carries the handshake already).
    fn connect(&mut self, engine: &mut Engine<St, Datagram, W>, req: ConnectRequest, now: Instant) {
        let net = &mut *self.net;
        let i = self.side.index();
        if req.proc != net.names[self.side.other().index()] {
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        }
        if net.links[i].is_some() {
            return;
        }
        match engine.handle_connected(req, net.nonce(), now) {
            Ok(link) => net.links[i] = Some(link),
            Err(_) => engine.handle_connect_failed(req, ConnectFailure::Unreachable, now),
        }
    }

    fn write(&mut self, engine: &mut Engine<St, Datagram, W>, _now: Instant) {
        self.net.transmit(self.side, engine);
    }

    fn close(&mut self, engine: &mut Engine<St, Datagram, W>, link: LinkId, now: Instant) {
        engine.handle_closed(link, now);
        let links = &mut self.net.links[self.side.index()];
        if *links == Some(link) {
            *links = None;
        }
    }
}

impl<const N: usize, const MTU: usize> Network<N, MTU> {
    /// Both queues empty, as a constant: built in place, not on the stack
    /// of `new` (they are large).
    const EMPTY_QUEUES: [Queue<N, MTU>; 2] = [Queue::new(), Queue::new()];

    /// 16 fresh nonce bytes from the seeded generator.
    fn nonce(&mut self) -> [u8; NONCE_LEN] {
        let mut n = [0; NONCE_LEN];
        n[..8].copy_from_slice(&self.random.next().to_le_bytes());
        n[8..].copy_from_slice(&self.random.next().to_le_bytes());
        n
    }

    /// `side`'s datagrams from `engine` into the network.
    fn transmit<St: Storage, const W: usize>(
        &mut self,
        side: Side,
        engine: &mut Engine<St, Datagram, W>,
    ) {
        let Some(link) = self.links[side.index()] else {
            return;
        };
        let to = side.other();
        for _ in 0..MAX_POLLS {
            let Self {
                queues,
                random,
                faults,
                stats,
                dead,
                ..
            } = self;
            let queue = &mut queues[to.index()];
            let (len, fate) = {
                let Some(t) = engine.poll_transmit(link) else {
                    break;
                };
                let fate = Fate::draw(random, faults, dead[to.index()]);
                let slot = match fate {
                    Fate::Lost => None,
                    Fate::Arrives { .. } => queue.take_slot(),
                };
                let mut scratch = [0u8; 0];
                let buf = match slot {
                    Some(slot) => &mut queue.slots[slot].bytes[..],
                    None => &mut scratch[..],
                };
                let (mut len, mut fits) = (0, true);
                for segment in &t.segments {
                    let end = len + segment.len();
                    match buf.get_mut(len..end) {
                        Some(dst) => dst.copy_from_slice(segment),
                        None => fits = false,
                    }
                    len = end;
                }
                let fate = match (fate, slot) {
                    (Fate::Lost, _) => Placed::Lost,
                    (Fate::Arrives { .. }, None) => Placed::Overflowed,
                    (Fate::Arrives { .. }, Some(slot)) if !fits => Placed::Oversized(slot),
                    (Fate::Arrives { twice }, Some(slot)) => Placed::In { slot, twice },
                };
                (len, fate)
            };
            engine.handle_written(link, len);
            stats.sent += 1;
            match fate {
                Placed::Lost => stats.lost += 1,
                Placed::Overflowed => stats.overflowed += 1,
                Placed::Oversized(slot) => {
                    stats.oversized += 1;
                    let _ = queue.free.push(slot as u16);
                }
                Placed::In { slot, twice } => {
                    queue.slots[slot].len = len;
                    self.enqueue(to, slot);
                    if twice {
                        self.stats.duplicated += 1;
                        self.duplicate(to, slot);
                    }
                }
            }
        }
    }

    /// Queues the datagram in `slot` towards `to`, maybe ahead of some.
    fn enqueue(&mut self, to: Side, slot: usize) {
        let queued = self.queues[to.index()].len();
        let at = if queued > 0 && chance(&mut self.random, self.faults.reordering) {
            self.stats.reordered += 1;
            let back = 1 + self.random.next() % REORDER_DEPTH.min(queued as u64);
            queued - back as usize
        } else {
            queued
        };
        let queue = &mut self.queues[to.index()];
        if queue.order.insert(at, slot as u16).is_err() {
            let _ = queue.free.push(slot as u16);
            self.stats.overflowed += 1;
        }
    }

    /// A second copy of the datagram in `slot` towards `to`.
    fn duplicate(&mut self, to: Side, slot: usize) {
        let queue = &mut self.queues[to.index()];
        let Some(copy) = queue.take_slot() else {
            self.stats.overflowed += 1;
            return;
        };
        let len = queue.slots[slot].len;
        let (src, dst) = if slot < copy {
            let (lo, hi) = queue.slots.split_at_mut(copy);
            (&lo[slot], &mut hi[0])
        } else {
            let (lo, hi) = queue.slots.split_at_mut(slot);
            (&hi[0], &mut lo[copy])
        };
        dst.bytes[..len].copy_from_slice(&src.bytes[..len]);
        dst.len = len;
        self.enqueue(to, copy);
    }

    /// `side`'s `engine` takes what its queue holds.
    fn receive<St: Storage, const W: usize>(
        &mut self,
        side: Side,
        engine: &mut Engine<St, Datagram, W>,
    ) {
        let now = self.now;
        while self.queues[side.index()].len() > 0 {
            let link = self.link_or_accept(side, engine);
            let queue = &mut self.queues[side.index()];
            let slot = queue.order.remove(0);
            let _ = queue.free.push(slot);
            let Some(link) = link else {
                self.stats.overflowed += 1;
                continue;
            };
            let datagram = &queue.slots[usize::from(slot)];
            let _ = engine.handle_datagram(link, &datagram.bytes[..datagram.len], now);
            self.stats.delivered += 1;
        }
    }

    /// `side`'s link, accepted now (a datagram from a new address) if it
    /// has none.
    fn link_or_accept<St: Storage, const W: usize>(
        &mut self,
        side: Side,
        engine: &mut Engine<St, Datagram, W>,
    ) -> Option<LinkId> {
        if let Some(link) = self.links[side.index()] {
            return Some(link);
        }
        let from = Source(side.other().index() as u64);
        let nonce = self.nonce();
        let link = engine.handle_accepted(from, nonce, self.now).ok()?;
        self.links[side.index()] = Some(link);
        Some(link)
    }
}

impl<E, const N: usize, const MTU: usize, S> core::fmt::Debug for DatagramPair<E, N, MTU, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DatagramPair")
            .field("names", &self.net.names)
            .field("links", &self.net.links)
            .field(
                "in_flight",
                &[
                    self.net.queues[0].order.len(),
                    self.net.queues[1].order.len(),
                ],
            )
            .field("faults", &self.net.faults)
            .field("stats", &self.net.stats)
            .field("now", &self.net.now)
            .finish_non_exhaustive()
    }
}
