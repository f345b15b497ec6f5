//! An in-memory stream driver: two [`Engine`]s joined by fixed byte pipes,
//! with a driver that plays every part a socket loop would.
//!
//! The engine does no I/O, so something has to open its connections, carry
//! its bytes, close its links and tell it the time. [`StreamPair`] does
//! that for two engines, A and B, over [`Pipe`]s (one per direction and
//! connection), one bounded [`round`](StreamPair::round) at a time. It
//! allocates nothing and is deterministic (the nonces come from a generator
//! the caller seeds; the clock is a counter), so a failure replays exactly.
//!
//! Pipes have a fixed capacity `N`: a writer that finds its pipe full keeps
//! the rest of its bytes (a partial write, as on a socket), and a reader
//! that takes fewer bytes than it was handed (waiting for receive
//! fragments) leaves them in the pipe. Both happen in ordinary tests, so
//! the engine's partial-write and partial-read paths run all the time.
//!
//! Faults, for conformance harnesses: a side can be [paused](StreamPair::pause)
//! (not driven at all) or [killed](StreamPair::kill) (its connections reset);
//! a connection can be opened from an [external](StreamPair::connect_external)
//! end that the caller plays (a rogue process), and bytes can be
//! [injected](StreamPair::inject) into any pipe. The steps of a round are
//! public too, for tests that need one particular interleaving.
//!
//! ```
//! use btl_core::btl::{Btl, Event, Tag};
//! use btl_core::desc::{DescFlags, Order};
//! use btl_core::endpoint::ProcName;
//! use btl_core::engine::config::EngineConfig;
//! use btl_core::engine::{Engine, Inline, Stream};
//! use btl_tests::pair::stream::StreamPair;
//! use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
//! use btl_core::time::Instant;
//!
//! let pool = |fragment_size| FragmentPoolConfig { fragment_size, num: 8, max: 8, inc: 8 };
//! let cfg = FragmentPoolsConfig { small: pool(256), eager: pool(1024), max: pool(4096) };
//! let (mut ra, mut rb) = ([0u8; 65536], [0u8; 65536]);
//! assert!(FragmentPools::required_bytes(&cfg) <= ra.len());
//! // Each engine's tables: 2 peers, 2 links, a window of 8 packets, 2
//! // operations, 16 events, 2 registrations of memory held as vectors.
//! type Tables = Inline<2, 2, 8, 2, 16, 2, Vec<u8>>;
//! let (mut ta, mut tb) = (Tables::new(), Tables::new());
//! let names = [ProcName::new(7, 0), ProcName::new(7, 1)];
//! let engine = |me, tables, region| {
//!     let pools = FragmentPools::new(region, cfg).expect("pools");
//!     Engine::new(EngineConfig::new(me), Stream, tables, pools, Instant::ZERO)
//! };
//! let a = engine(names[0], ta.lend(), &mut ra);
//! let b = engine(names[1], tb.lend(), &mut rb);
//! // Engines held by value, 4 KiB pipes, two connection slots.
//! let mut pair: StreamPair<_, 4096, 2> = StreamPair::new(a, b, names, 42);
//! let [b_at_a, _] = pair.introduce().expect("each reaches the other");
//! let d = pair.a()
//!     .prepare_src(b_at_a, b"hello", 0, Order::ANY, DescFlags::BTL_OWNERSHIP)
//!     .expect("descriptor");
//! let _ = pair.a().send(b_at_a, d, Tag(0x80)).expect("queued");
//! pair.run_until_idle(100).expect("the pair goes quiet");
//! match pair.b().poll_event() {
//!     Some(Event::Received(m)) => assert_eq!(m.data, b"hello"),
//!     other => panic!("{other:?}"),
//! }
//! ```

use core::borrow::BorrowMut;
use core::marker::PhantomData;
use core::ops::AddAssign;

use btl_core::btl::BtlError;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::driver::Io;
use btl_core::engine::{
    ConnectFailure, ConnectRequest, Engine, LinkError, LinkId, Source, Storage, Stream,
};
use btl_core::time::{Duration, Instant};
use btl_core::wire::NONCE_LEN;

use super::pipe::{Pipe, read_link, write_link};
use super::{Side, SplitMix64, introduce, introduce_restarted};

/// The source of connections made from outside the pair (a rogue's).
const EXTERNAL: Source = Source(2);

/// Requests (`poll_connect`, `poll_close`) served per side and step: the
/// bound of a loop that must end.
const MAX_POLLS: usize = 1 << 12;
/// Passes of a round unless [`StreamPair::set_passes`] says otherwise.
const DEFAULT_PASSES: u32 = 64;
/// Fake time per round unless [`StreamPair::set_tick`] says
/// otherwise: short, so that many rounds stay far within the engine's
/// timeouts.
const DEFAULT_TICK: Duration = Duration::from_micros(1);

/// An end of a connection: the one that opened it or the one that
/// accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The end that connected.
    Opener,
    /// The end that accepted.
    Acceptor,
}

impl Role {
    /// Both ends, the opener first (the order of [`Connection::ends`]).
    pub const BOTH: [Role; 2] = [Role::Opener, Role::Acceptor];

    /// The end at the other side of the connection.
    pub const fn other(self) -> Role {
        match self {
            Role::Opener => Role::Acceptor,
            Role::Acceptor => Role::Opener,
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// A connection of a [`StreamPair`], named for its whole life (slots are
/// reused, identifiers are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// What sits at one end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum End {
    /// A link of the engine of that side.
    Link(Side, LinkId),
    /// Opened towards a side that has not accepted it yet (it is paused).
    Accepting(Side),
    /// An end the caller plays ([`StreamPair::connect_external`]): it
    /// writes with [`StreamPair::inject`] and reads the pipe towards it
    /// with [`StreamPair::pipe_mut`].
    External,
}

impl End {
    /// The side whose engine holds (or will hold) this end.
    pub const fn side(&self) -> Option<Side> {
        match self {
            End::Link(side, _) | End::Accepting(side) => Some(*side),
            End::External => None,
        }
    }

    /// The engine's link, once accepted.
    pub const fn link(&self) -> Option<LinkId> {
        match self {
            End::Link(_, link) => Some(*link),
            _ => None,
        }
    }
}

/// How an end of a connection came to be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Closure {
    /// Its own side closed it: the engine asked (`poll_close`), or the
    /// caller closed an external end.
    Closed,
    /// The other end closed and this one has read everything before that.
    EndOfStream,
    /// A side was killed: nothing in flight arrives either way.
    Reset,
    /// The side it was opened towards had no link slot for it.
    Refused,
}

/// The state of one connection, as [`StreamPair::connections`] reports it.
/// A closed connection stays visible until its slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// Its name.
    pub id: ConnId,
    /// The opener's end and the acceptor's, in [`Role`] order.
    pub ends: [End; 2],
    /// How each end was closed, if it was.
    pub closed: [Option<Closure>; 2],
    /// Bytes waiting in the pipe towards each end.
    pub in_flight: [usize; 2],
    /// Whether the writer towards each end last wrote a transmit whole,
    /// so that the pipe ends between two frames (true until anything is
    /// written): where [`StreamPair::inject`] may put a frame of its own.
    pub whole: [bool; 2],
    /// Bytes the engine at each end has taken from the pipe so far.
    pub carried: [u64; 2],
}

impl Connection {
    /// The end of `role`.
    pub const fn end(&self, role: Role) -> End {
        self.ends[role.index()]
    }

    /// How the end of `role` was closed, if it was.
    pub const fn closure(&self, role: Role) -> Option<Closure> {
        self.closed[role.index()]
    }

    /// The role of `side`'s end, if it has one.
    pub fn role_of(&self, side: Side) -> Option<Role> {
        Role::BOTH
            .into_iter()
            .find(|r| self.ends[r.index()].side() == Some(side))
    }

    /// Whether the pipe towards the end of `role` ends between two frames
    /// (see [`whole`](Self::whole)).
    pub const fn between_frames(&self, role: Role) -> bool {
        self.whole[role.index()]
    }

    /// Whether neither end is closed.
    pub const fn is_open(&self) -> bool {
        self.closed[0].is_none() && self.closed[1].is_none()
    }

    /// Whether both ends are closed (its slot may be reused).
    pub const fn is_finished(&self) -> bool {
        self.closed[0].is_some() && self.closed[1].is_some()
    }

    /// Whether both ends are engine links (a connection between A and B).
    pub const fn is_between_engines(&self) -> bool {
        matches!(self.ends, [End::Link(..), End::Link(..)])
    }
}

/// What a step of the driver did; all zero means nothing moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Activity {
    /// Bytes the engines wrote (into pipes, or dropped towards a closed end).
    pub written: usize,
    /// Bytes the engines took from pipes.
    pub read: usize,
    /// Connection ends opened (connects and accepts).
    pub opened: u32,
    /// Connection ends closed, and connect requests failed.
    pub closed: u32,
}

impl Activity {
    /// Whether nothing happened.
    pub const fn is_idle(&self) -> bool {
        self.written == 0 && self.read == 0 && self.opened == 0 && self.closed == 0
    }
}

impl AddAssign for Activity {
    fn add_assign(&mut self, rhs: Self) {
        self.written += rhs.written;
        self.read += rhs.read;
        self.opened += rhs.opened;
        self.closed += rhs.closed;
    }
}

/// Why a [`StreamPair`] call could not be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairError {
    /// Every connection slot holds a connection not yet finished.
    NoConnectionSlot,
    /// No such connection (never opened, or its slot was reused).
    UnknownConnection,
    /// That end of the connection is not the kind the call needs, or is
    /// closed.
    WrongEnd,
    /// The side was killed.
    Dead(Side),
    /// The engine refused the link.
    Link(LinkError),
}

impl core::fmt::Display for PairError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PairError::NoConnectionSlot => f.write_str("every connection slot is in use"),
            PairError::UnknownConnection => f.write_str("no such connection"),
            PairError::WrongEnd => f.write_str("that end cannot do this"),
            PairError::Dead(side) => write!(f, "side {side:?} was killed"),
            PairError::Link(e) => write!(f, "the engine refused the link: {e}"),
        }
    }
}

impl core::error::Error for PairError {}

/// A connection's bookkeeping, without its pipes.
#[derive(Debug, Clone, Copy)]
struct Meta {
    id: ConnId,
    ends: [End; 2],
    closed: [Option<Closure>; 2],
    whole: [bool; 2],
    carried: [u64; 2],
}

/// A connection slot: the pipes stay in place when the slot is reused.
struct Slot<const N: usize> {
    meta: Option<Meta>,
    /// Bytes towards each end, in [`Role`] order.
    to: [Pipe<N>; 2],
}

impl<const N: usize> Slot<N> {
    const EMPTY: Self = Slot {
        meta: None,
        to: [Pipe::new(), Pipe::new()],
    };
}

/// Two engines, A and B, joined by in-memory stream connections, and the
/// driver that carries their bytes.
///
/// `E` is the engine type, `S` how the pair holds each engine (`E` itself,
/// `&mut E`, `Box<E>`: anything that borrows as `E`). `N` is each pipe's
/// capacity and `CONNS` the number of connection slots (each has two pipes
/// inline, so the pair takes about `2 * N * CONNS` bytes plus the engines
/// it holds by value).
///
/// One [`round`](Self::round): the clock advances by the tick; sides
/// driven again accept what was opened towards them meanwhile; then, in
/// passes until nothing moves (at most [`set_passes`](Self::set_passes) of
/// them), every end reads what its pipe holds (and learns of the other
/// end's close, `handle_closed`, once it has read everything before it),
/// and each engine runs the loop every driver runs ([`Engine::serve`]):
/// its timers, in the first pass only; the connections it asks for
/// (`handle_connected` on its side, `handle_accepted` on the other, each
/// with a fresh nonce); its bytes, into the pipes towards the other ends
/// as far as they have room; the links it is done with; its queues. A
/// paused or killed side takes no part in any of it. The steps are public
/// too ([`serve_connects`](Self::serve_connects),
/// [`shuttle`](Self::shuttle), [`serve_closes`](Self::serve_closes), ...),
/// for tests that need one particular interleaving.
pub struct StreamPair<E, const N: usize, const CONNS: usize, S = E> {
    engines: [S; 2],
    wires: Wires<N, CONNS>,
    peers: [Option<EndpointId>; 2],
    tick: Duration,
    passes: u32,
    _engine: PhantomData<fn() -> E>,
}

/// Everything of a [`StreamPair`] but its engines: the connections and
/// their pipes, which sides are driven, the clock and the nonces.
struct Wires<const N: usize, const CONNS: usize> {
    names: [ProcName; 2],
    paused: [bool; 2],
    dead: [bool; 2],
    slots: [Slot<N>; CONNS],
    next_conn: u64,
    now: Instant,
    nonces: SplitMix64,
}

/// One side's ends of the connections: what [`Engine::serve`] asks of a
/// driver, for that side's engine. `other` is the other side's engine,
/// which accepts the connections this side opens.
struct Port<'a, E, const N: usize, const CONNS: usize> {
    wires: &'a mut Wires<N, CONNS>,
    side: Side,
    other: &'a mut E,
    activity: Activity,
}

impl<St: Storage, const W: usize, const N: usize, const CONNS: usize, S>
    StreamPair<Engine<St, Stream, W>, N, CONNS, S>
where
    S: BorrowMut<Engine<St, Stream, W>>,
{
    /// Engines `a` and `b`, processes `names[0]` and `names[1]` (where a
    /// connect request for that name goes), no connection yet, the clock
    /// at 0; `seed` seeds the nonce generator. A `const fn`: the pipes
    /// come from a constant rather than being built piece by piece.
    pub const fn new(a: S, b: S, names: [ProcName; 2], seed: u64) -> Self {
        StreamPair {
            engines: [a, b],
            wires: Wires {
                names,
                paused: [false; 2],
                dead: [false; 2],
                slots: Wires::<N, CONNS>::EMPTY_SLOTS,
                next_conn: 0,
                now: Instant::ZERO,
                nonces: SplitMix64(seed),
            },
            peers: [None; 2],
            tick: DEFAULT_TICK,
            passes: DEFAULT_PASSES,
            _engine: PhantomData,
        }
    }

    /// Makes each engine know the other (`add_procs`); returns the endpoint
    /// of B at A and of A at B, which [`peer`](Self::peer) also gives.
    pub fn introduce(&mut self) -> Result<[EndpointId; 2], BtlError> {
        let out = introduce(&mut self.engines, self.wires.names)?;
        self.peers = out.map(Some);
        Ok(out)
    }

    /// The endpoint through which `side` reaches the other side, once
    /// [`introduce`](Self::introduce)d.
    pub fn peer(&self, side: Side) -> Option<EndpointId> {
        self.peers[side.index()]
    }

    /// The process name of `side`.
    pub fn name(&self, side: Side) -> ProcName {
        self.wires.names[side.index()]
    }

    /// The engine of `side`.
    pub fn engine(&self, side: Side) -> &Engine<St, Stream, W> {
        self.engines[side.index()].borrow()
    }

    /// The engine of `side`, to call.
    pub fn engine_mut(&mut self, side: Side) -> &mut Engine<St, Stream, W> {
        self.engines[side.index()].borrow_mut()
    }

    /// Engine A, to call.
    pub fn a(&mut self) -> &mut Engine<St, Stream, W> {
        self.engine_mut(Side::A)
    }

    /// Engine B, to call.
    pub fn b(&mut self) -> &mut Engine<St, Stream, W> {
        self.engine_mut(Side::B)
    }

    /// Both engines at once, A first.
    pub fn engines_mut(&mut self) -> (&mut Engine<St, Stream, W>, &mut Engine<St, Stream, W>) {
        let [a, b] = &mut self.engines;
        (a.borrow_mut(), b.borrow_mut())
    }

    /// The engines back, A first.
    pub fn into_engines(self) -> (S, S) {
        let [a, b] = self.engines;
        (a, b)
    }

    /// The fake clock, in nanoseconds.
    pub fn now(&self) -> Instant {
        self.wires.now
    }

    /// Moves the clock on by `ns` without a round (the next round's
    /// timeouts see it).
    pub fn advance(&mut self, by: Duration) {
        self.wires.now += by;
    }

    /// Sets how far each round moves the clock (1 µs unless set).
    pub fn set_tick(&mut self, tick: Duration) {
        self.tick = tick;
    }

    /// Sets the most passes a round makes over the connections (64 unless
    /// set; at least 1). Each pass moves up to `N` bytes per direction.
    pub fn set_passes(&mut self, passes: u32) {
        self.passes = passes.max(1);
    }

    /// 16 fresh nonce bytes from the seeded generator: distinct from every
    /// other nonce this pair hands out.
    pub fn nonce(&mut self) -> [u8; NONCE_LEN] {
        self.wires.nonce()
    }

    /// Stops driving `side`: no bytes in or out, no accepts, closes,
    /// timeouts or progress; what is sent to it waits in its pipes (and,
    /// once they are full, in the senders).
    pub fn pause(&mut self, side: Side) {
        self.wires.paused[side.index()] = true;
    }

    /// Drives `side` again after [`pause`](Self::pause).
    pub fn resume(&mut self, side: Side) {
        self.wires.paused[side.index()] = false;
    }

    /// Whether `side` is paused.
    pub fn is_paused(&self, side: Side) -> bool {
        self.wires.paused[side.index()]
    }

    /// Kills `side` without a goodbye: its connections are reset (what was
    /// in flight either way is lost), each surviving engine end is told
    /// (`handle_closed`) at once, or when it is next driven if paused, and
    /// the dead engine is never driven again. Connections asked for later
    /// towards it fail (`handle_connect_failed`).
    pub fn kill(&mut self, side: Side) {
        self.wires.dead[side.index()] = true;
        for i in 0..CONNS {
            let Some(meta) = self.wires.slots[i].meta else {
                continue;
            };
            let killed = Role::BOTH
                .into_iter()
                .find(|r| meta.ends[r.index()].side() == Some(side));
            if killed.is_some() && !meta.closed.iter().all(Option::is_some) {
                self.reset(i, killed);
            }
        }
    }

    /// Breaks connection `conn` without a goodbye, as a network fault
    /// would: what was in flight either way is lost and each engine end
    /// that is driven is told at once (`handle_closed`); a paused one
    /// learns when it is next driven. Both processes live on.
    pub fn break_connection(&mut self, conn: ConnId) -> Result<(), PairError> {
        let i = self
            .wires
            .slot_of(conn)
            .ok_or(PairError::UnknownConnection)?;
        self.reset(i, None);
        Ok(())
    }

    /// Starts `side` again as a new start of the same process: the old
    /// engine is killed (as by [`kill`](Self::kill)) if it lives, and
    /// `engine`, alive and unpaused, takes its place and is told of the
    /// other side (`add_procs`). Returns the endpoint through which it
    /// reaches the other side. Give the new engine another epoch, as a
    /// driver does on a real restart.
    pub fn restart(&mut self, side: Side, engine: S) -> Result<EndpointId, BtlError> {
        if !self.wires.dead[side.index()] {
            self.kill(side);
        }
        self.engines[side.index()] = engine;
        self.wires.dead[side.index()] = false;
        self.wires.paused[side.index()] = false;
        let (other, now) = (self.wires.names[side.other().index()], self.wires.now);
        let endpoint = introduce_restarted(self.engine_mut(side), other, now)?;
        self.peers[side.index()] = Some(endpoint);
        Ok(endpoint)
    }

    /// Whether `side` was killed.
    pub fn is_dead(&self, side: Side) -> bool {
        self.wires.dead[side.index()]
    }

    // ----- rounds ------------------------------------------------------

    /// One round of the driver (see the type's documentation); returns
    /// what moved.
    pub fn round(&mut self) -> Activity {
        self.wires.now += self.tick;
        let now = self.wires.now;
        let mut activity = self.serve_accepts();
        for pass in 0..self.passes {
            let mut moved = self.serve_reads();
            for side in Side::BOTH {
                if !self.wires.active(side) {
                    continue;
                }
                let (engine, mut port) = self.port(side);
                // Timers once a round; the passes carry what they set off.
                engine.serve(&mut port, now, pass == 0);
                moved += port.activity;
            }
            activity += moved;
            if moved.is_idle() {
                break;
            }
        }
        activity
    }

    /// Runs rounds until one moves nothing; returns how many ran (the idle
    /// one included), or `None` if `max_rounds` all moved something.
    pub fn run_until_idle(&mut self, max_rounds: u32) -> Option<u32> {
        (1..=max_rounds).find(|_| self.round().is_idle())
    }

    /// Calls `handle_timeout` on each driven engine whose timer
    /// (`poll_timeout`) is due; returns how many.
    pub fn serve_timeouts(&mut self) -> u32 {
        let now = self.wires.now;
        let mut n = 0;
        for side in Side::BOTH {
            if !self.wires.active(side) {
                continue;
            }
            let e = self.engine_mut(side);
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
                n += 1;
            }
        }
        n
    }

    /// Accepts the connections opened towards sides that are driven again.
    pub fn serve_accepts(&mut self) -> Activity {
        let mut activity = Activity::default();
        for i in 0..CONNS {
            let Some(meta) = self.wires.slots[i].meta else {
                continue;
            };
            for role in Role::BOTH {
                let r = role.index();
                if let End::Accepting(side) = meta.ends[r]
                    && meta.closed[r].is_none()
                    && self.wires.active(side)
                {
                    let engine = self.engines[side.index()].borrow_mut();
                    let (end, closed) = self.wires.accept(side, engine);
                    if let Some(m) = self.wires.slots[i].meta.as_mut() {
                        m.ends[r] = end;
                        m.closed[r] = closed;
                    }
                    if closed.is_none() {
                        activity.opened += 1;
                    } else {
                        activity.closed += 1;
                    }
                }
            }
        }
        activity
    }

    /// Opens the connections the driven engines ask for (`poll_connect`).
    /// A request for a process other than the other side's, towards a dead
    /// side, or finding no free slot fails (`handle_connect_failed`).
    pub fn serve_connects(&mut self) -> Activity {
        self.each_port(|engine, port, now| {
            for _ in 0..MAX_POLLS {
                let Some(req) = engine.poll_connect() else {
                    break;
                };
                port.connect(engine, req, now);
            }
        })
    }

    /// Moves bytes towards the `to` end of `conn` once: what the other end
    /// has to write goes into the pipe as far as it has room (or is dropped
    /// if `to` is closed), the `to` end reads what the pipe holds, and it
    /// learns of the other end's close once it has read everything.
    pub fn shuttle(&mut self, conn: ConnId, to: Role) -> Result<Activity, PairError> {
        let i = self
            .wires
            .slot_of(conn)
            .ok_or(PairError::UnknownConnection)?;
        let mut activity = Activity::default();
        let meta = self.wires.slots[i]
            .meta
            .ok_or(PairError::UnknownConnection)?;
        let from = to.other();
        if let End::Link(side, link) = meta.ends[from.index()]
            && self.wires.active(side)
        {
            let engine = self.engines[side.index()].borrow_mut();
            activity.written += self.wires.slots[i].write_from(from, engine, link);
        }
        activity += self.read_at(i, to);
        Ok(activity)
    }

    /// Every end reads what its pipe holds, and learns of the other end's
    /// close once it has read everything before it.
    pub fn serve_reads(&mut self) -> Activity {
        let mut activity = Activity::default();
        for i in 0..CONNS {
            for to in Role::BOTH {
                activity += self.read_at(i, to);
            }
        }
        activity
    }

    /// Closes the links the driven engines are done with (`poll_close`):
    /// `handle_closed` on that end at once (unread bytes towards it are
    /// dropped); the other end learns once it has read what came before.
    pub fn serve_closes(&mut self) -> Activity {
        self.each_port(|engine, port, now| {
            for _ in 0..MAX_POLLS {
                let Some(link) = engine.poll_close() else {
                    break;
                };
                port.close(engine, link, now);
            }
        })
    }

    // ----- connections ---------------------------------------------------

    /// Every connection whose slot has not been reused, open or closed.
    pub fn connections(&self) -> impl Iterator<Item = Connection> + '_ {
        self.wires.slots.iter().filter_map(Slot::view)
    }

    /// The connection `id`, if its slot has not been reused.
    pub fn connection(&self, id: ConnId) -> Option<Connection> {
        self.connections().find(|c| c.id == id)
    }

    /// The newest open connection between the two engines.
    pub fn established(&self) -> Option<Connection> {
        self.connections()
            .filter(|c| c.is_open() && c.is_between_engines())
            .max_by_key(|c| c.id)
    }

    /// `side`'s link on the [`established`](Self::established) connection.
    pub fn link(&self, side: Side) -> Option<LinkId> {
        let c = self.established()?;
        c.end(c.role_of(side)?).link()
    }

    /// Opens a connection from an external end, played by the caller,
    /// towards `target`, which accepts it now (or once resumed, if
    /// paused). The caller writes with [`inject`](Self::inject) and reads
    /// the pipe towards the opener with [`pipe_mut`](Self::pipe_mut).
    pub fn connect_external(&mut self, target: Side) -> Result<ConnId, PairError> {
        if self.is_dead(target) {
            return Err(PairError::Dead(target));
        }
        let i = self.wires.free_slot().ok_or(PairError::NoConnectionSlot)?;
        let (end, closed) = if self.wires.active(target) {
            let nonce = self.wires.nonce();
            let now = self.wires.now;
            let link = self.engines[target.index()]
                .borrow_mut()
                .handle_accepted(EXTERNAL, nonce, now)
                .map_err(PairError::Link)?;
            (End::Link(target, link), None)
        } else {
            (End::Accepting(target), None)
        };
        Ok(self.wires.install(i, [End::External, end], [None, closed]))
    }

    /// Appends `bytes` to the pipe towards the `to` end of `conn`, as if
    /// the other end had written them; returns how many fit. They follow
    /// whatever is in flight ([`Connection::whole`] tells whether that ends
    /// between frames).
    pub fn inject(&mut self, conn: ConnId, to: Role, bytes: &[u8]) -> Result<usize, PairError> {
        let i = self
            .wires
            .slot_of(conn)
            .ok_or(PairError::UnknownConnection)?;
        let slot = &mut self.wires.slots[i];
        if slot.meta.is_some_and(|m| {
            m.closed[to.index()].is_some() || m.closed[to.other().index()].is_some()
        }) {
            return Err(PairError::WrongEnd);
        }
        Ok(slot.to[to.index()].write(bytes))
    }

    /// The pipe towards the `to` end of `conn`: for the caller playing an
    /// external end, or a test that tampers with the stream.
    pub fn pipe_mut(&mut self, conn: ConnId, to: Role) -> Result<&mut Pipe<N>, PairError> {
        let i = self
            .wires
            .slot_of(conn)
            .ok_or(PairError::UnknownConnection)?;
        Ok(&mut self.wires.slots[i].to[to.index()])
    }

    /// Closes the external end of `conn`: what waits towards it is dropped,
    /// and the engine's end learns of the close once it has read what came
    /// before.
    pub fn close_external(&mut self, conn: ConnId) -> Result<(), PairError> {
        let i = self
            .wires
            .slot_of(conn)
            .ok_or(PairError::UnknownConnection)?;
        let slot = &mut self.wires.slots[i];
        let meta = slot.meta.as_mut().ok_or(PairError::UnknownConnection)?;
        let r = (0..2)
            .find(|&r| meta.ends[r] == End::External)
            .ok_or(PairError::WrongEnd)?;
        if meta.closed[r].is_none() {
            meta.closed[r] = Some(Closure::Closed);
            slot.to[r].clear();
        }
        Ok(())
    }

    // ----- internals -----------------------------------------------------

    /// `side`'s engine, and its port onto the wires with the other engine.
    fn port(
        &mut self,
        side: Side,
    ) -> (
        &mut Engine<St, Stream, W>,
        Port<'_, Engine<St, Stream, W>, N, CONNS>,
    ) {
        let [a, b] = &mut self.engines;
        let (this, other) = match side {
            Side::A => (a, b),
            Side::B => (b, a),
        };
        let port = Port {
            wires: &mut self.wires,
            side,
            other: other.borrow_mut(),
            activity: Activity::default(),
        };
        (this.borrow_mut(), port)
    }

    /// Runs `serve` with each driven side's engine and port; what moved.
    fn each_port(
        &mut self,
        mut serve: impl FnMut(
            &mut Engine<St, Stream, W>,
            &mut Port<'_, Engine<St, Stream, W>, N, CONNS>,
            Instant,
        ),
    ) -> Activity {
        let now = self.wires.now;
        let mut activity = Activity::default();
        for side in Side::BOTH {
            if self.wires.active(side) {
                let (engine, mut port) = self.port(side);
                serve(engine, &mut port, now);
                activity += port.activity;
            }
        }
        activity
    }

    /// The `to` end of slot `i` reads what its pipe holds, and learns of
    /// the other end's close once it has read everything before it (a
    /// paused engine does neither).
    fn read_at(&mut self, i: usize, to: Role) -> Activity {
        let mut activity = Activity::default();
        let now = self.wires.now;
        let Some(meta) = self.wires.slots[i].meta else {
            return activity;
        };
        let (t, f) = (to.index(), to.other().index());
        if meta.closed[t].is_some() {
            return activity;
        }
        let engine = match meta.ends[t] {
            End::Link(side, link) if self.wires.active(side) => {
                Some((self.engines[side.index()].borrow_mut(), link))
            }
            End::Link(..) => return activity,
            End::Accepting(_) | End::External => None,
        };
        let slot = &mut self.wires.slots[i];
        let Some(meta) = slot.meta.as_mut() else {
            return activity;
        };
        let pipe = &mut slot.to[t];
        if let Some((engine, link)) = engine {
            if !pipe.is_empty() {
                match read_link(&mut *engine, link, pipe, now) {
                    Ok(n) => {
                        activity.read += n;
                        meta.carried[t] += n as u64;
                    }
                    // The engine no longer knows the link.
                    Err(_) => {
                        meta.closed[t] = Some(Closure::Closed);
                        activity.closed += 1;
                        return activity;
                    }
                }
            }
            if meta.closed[f].is_some() && pipe.is_empty() {
                engine.handle_closed(link, now);
            }
        }
        if meta.closed[f].is_some() && pipe.is_empty() {
            meta.closed[t] = Some(Closure::EndOfStream);
            activity.closed += 1;
        }
        activity
    }

    /// Resets slot `i`: what is in flight either way is lost, and each
    /// open end is closed, an engine's end told at once if it is driven.
    /// The end of `killed`, if given, is marked reset without being told.
    fn reset(&mut self, i: usize, killed: Option<Role>) {
        let now = self.wires.now;
        let Self { engines, wires, .. } = self;
        let active = [wires.active(Side::A), wires.active(Side::B)];
        let slot = &mut wires.slots[i];
        slot.to[0].clear();
        slot.to[1].clear();
        let Some(meta) = slot.meta.as_mut() else {
            return;
        };
        if let Some(role) = killed {
            meta.closed[role.index()].get_or_insert(Closure::Reset);
        }
        for r in 0..2 {
            if meta.closed[r].is_some() {
                continue;
            }
            match meta.ends[r] {
                End::Link(s, link) => {
                    if active[s.index()] {
                        engines[s.index()].borrow_mut().handle_closed(link, now);
                        meta.closed[r] = Some(Closure::Reset);
                    }
                }
                End::Accepting(_) | End::External => meta.closed[r] = Some(Closure::Reset),
            }
        }
    }
}

impl<St: Storage, const W: usize, const N: usize, const CONNS: usize> Io<Engine<St, Stream, W>>
    for Port<'_, Engine<St, Stream, W>, N, CONNS>
{
    /// A connection to the other side, accepted there now (or once it is
    /// driven again); one for any other process, towards a dead side, or
    /// finding no free slot fails.
    fn connect(&mut self, engine: &mut Engine<St, Stream, W>, req: ConnectRequest, now: Instant) {
        let wires = &mut *self.wires;
        let target = self.side.other();
        let reachable = req.proc == wires.names[target.index()] && !wires.dead[target.index()];
        let slot = wires.free_slot().filter(|_| reachable);
        let opened = slot.map(|i| (i, engine.handle_connected(req, wires.nonce(), now)));
        let Some((i, Ok(link))) = opened else {
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            self.activity.closed += 1;
            return;
        };
        self.activity.opened += 1;
        let (end, closed) = wires.accept(target, self.other);
        if closed.is_none() && matches!(end, End::Link(..)) {
            self.activity.opened += 1;
        }
        wires.install(i, [End::Link(self.side, link), end], [None, closed]);
    }

    /// Each of the side's open ends writes into the pipe towards the other
    /// end as far as it has room (or drops its bytes if that end closed).
    fn write(&mut self, engine: &mut Engine<St, Stream, W>, _now: Instant) {
        for slot in &mut self.wires.slots {
            let Some(meta) = slot.meta else {
                continue;
            };
            for from in Role::BOTH {
                if let End::Link(side, link) = meta.ends[from.index()]
                    && side == self.side
                {
                    self.activity.written += slot.write_from(from, engine, link);
                }
            }
        }
    }

    /// The side's end closes at once (unread bytes towards it are
    /// dropped); the other end learns once it has read what came before.
    fn close(&mut self, engine: &mut Engine<St, Stream, W>, link: LinkId, now: Instant) {
        let end = End::Link(self.side, link);
        let found = self.wires.slots.iter_mut().find_map(|s| {
            let meta = s.meta.as_mut()?;
            let r = (0..2).find(|&r| meta.ends[r] == end && meta.closed[r].is_none())?;
            meta.closed[r] = Some(Closure::Closed);
            s.to[r].clear();
            Some(())
        });
        // Asked again for a link already closed: nothing to do.
        if found.is_some() {
            engine.handle_closed(link, now);
            self.activity.closed += 1;
        }
    }
}

impl<const N: usize, const CONNS: usize> Wires<N, CONNS> {
    /// Every slot empty, as a constant: built in place, not on the stack
    /// of `new` (the pipes are large).
    const EMPTY_SLOTS: [Slot<N>; CONNS] = [const { Slot::EMPTY }; CONNS];

    fn active(&self, side: Side) -> bool {
        !self.paused[side.index()] && !self.dead[side.index()]
    }

    fn nonce(&mut self) -> [u8; NONCE_LEN] {
        let mut n = [0; NONCE_LEN];
        // Two draws: the first halves alone never repeat (within 2^63
        // nonces), since the generator's outputs do not.
        n[..8].copy_from_slice(&self.nonces.next().to_le_bytes());
        n[8..].copy_from_slice(&self.nonces.next().to_le_bytes());
        n
    }

    fn slot_of(&self, id: ConnId) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.meta.is_some_and(|m| m.id == id))
    }

    /// A slot never used, else the oldest finished connection's (so that a
    /// closed connection stays visible as long as possible).
    fn free_slot(&self) -> Option<usize> {
        if let Some(i) = self.slots.iter().position(|s| s.meta.is_none()) {
            return Some(i);
        }
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let m = s.meta?;
                (m.closed[0].is_some() && m.closed[1].is_some()).then_some((m.id, i))
            })
            .min()
            .map(|(_, i)| i)
    }

    fn install(&mut self, i: usize, ends: [End; 2], closed: [Option<Closure>; 2]) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        let slot = &mut self.slots[i];
        slot.to[0].clear();
        slot.to[1].clear();
        slot.meta = Some(Meta {
            id,
            ends,
            closed,
            whole: [true; 2],
            carried: [0; 2],
        });
        id
    }

    /// The accepting end of a new connection towards `side`, whose engine
    /// is `engine`: accepted now if `side` is driven, else when it is
    /// again.
    fn accept<St: Storage, const W: usize>(
        &mut self,
        side: Side,
        engine: &mut Engine<St, Stream, W>,
    ) -> (End, Option<Closure>) {
        if !self.active(side) {
            return (End::Accepting(side), None);
        }
        let nonce = self.nonce();
        let from = Source(side.other().index() as u64);
        match engine.handle_accepted(from, nonce, self.now) {
            Ok(link) => (End::Link(side, link), None),
            Err(_) => (End::Accepting(side), Some(Closure::Refused)),
        }
    }
}

impl<const N: usize> Slot<N> {
    fn view(&self) -> Option<Connection> {
        let meta = self.meta?;
        Some(Connection {
            id: meta.id,
            ends: meta.ends,
            closed: meta.closed,
            in_flight: [self.to[0].len(), self.to[1].len()],
            whole: meta.whole,
            carried: meta.carried,
        })
    }

    /// `engine`'s end `from` (its `link`) writes into the pipe towards the
    /// other end as far as it has room, or drops its bytes if that end is
    /// closed; the bytes it wrote. Nothing if `from` is closed.
    fn write_from<St: Storage, const W: usize>(
        &mut self,
        from: Role,
        engine: &mut Engine<St, Stream, W>,
        link: LinkId,
    ) -> usize {
        let Some(meta) = self.meta.as_mut() else {
            return 0;
        };
        let (f, t) = (from.index(), from.other().index());
        if meta.closed[f].is_some() {
            return 0;
        }
        let keep = meta.closed[t].is_none();
        let w = write_link(engine, link, keep.then_some(&mut self.to[t]));
        if w.bytes > 0 && keep {
            meta.whole[t] = w.whole;
        }
        w.bytes
    }
}

impl<E, const N: usize, const CONNS: usize, S> core::fmt::Debug for StreamPair<E, N, CONNS, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StreamPair")
            .field("names", &self.wires.names)
            .field("now", &self.wires.now)
            .field("paused", &self.wires.paused)
            .field("dead", &self.wires.dead)
            .field(
                "connections",
                &self.wires.slots.iter().filter(|s| s.meta.is_some()).count(),
            )
            .finish_non_exhaustive()
    }
}
