//! A BTL module over sockets: the engine, a poller, a [`Transport`] (TCP,
//! UDP, or verbs' queue pairs) that turns the engine's requests into
//! socket calls and socket events into engine input, and the
//! [`Directory`] of what the module publishes, looks up and refuses.
//!
//! Three progress modes, as callers need them:
//! - the caller drives [`Btl::progress`]: it polls the sockets without
//!   waiting (lowest latency; what MPI-like callers do);
//! - or it calls [`Module::wait`] when it has nothing else to do: that
//!   spins for a bounded time (`spin`), then blocks in the poller until a
//!   socket or a timer needs it. Spinning keeps latency close to
//!   busy-polling when a core is free; blocking keeps two processes that
//!   share a core from starving each other;
//! - or a [`ProgressThread`](super::progress_thread::ProgressThread) takes
//!   the poller and serves the sockets itself, calling a handler back with
//!   each event.
//!
//! Sends, puts and gets are queued in the engine and leave at the next
//! progress, so that messages posted together go out in one write.
//!
//! Nothing here takes a lock: a module belongs to one thread at a time,
//! and events are handed out by [`Btl::poll_event`], never called back.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use btl_core::btl::{
    Access, Btl, BtlError, Event, LostReason, MemHandle, RegisterError, Undelivered,
};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::driver::Io;
use btl_core::engine::framing::Framing;
use btl_core::engine::journal::Journal;
use btl_core::engine::metrics::{ModuleMetrics, PeerReport};
use btl_core::engine::{Capacities, ConnectRequest, LinkId, Source, Usage};
use btl_core::time;

use crate::bootstrap::{Contact, LookupError};
use crate::driver::directory::Directory;
use crate::driver::heap::{Buffer, Heap, HeapEngine};
use crate::driver::net::{Net, Poller, Readiness, RegistryOf, WAKE};
use crate::driver::recorder::{AsFramed, Record, RecordError, Recorder, Setup};
use crate::driver::refusals::Refusals;
use crate::metrics::{Observed, Snapshot};
/// How often a busy-polling module asks the engine for its next timer:
/// finding it scans every peer and link, and the finest timer (the
/// acknowledgement delay) is coarser than this.
const TIMER_CHECK: time::Duration = time::Duration::from_micros(20);
/// A busy-polling module with few sockets asks the poller only every this
/// many passes (for new connections); in between it reads them directly.
const POLLER_EVERY: u32 = 32;
/// A busy-polling pass reads the clock only every this many passes.
const CLOCK_EVERY: u32 = 8;

/// A readiness event of network `N`'s poller.
pub type EventOf<N> = <<N as Net>::Poller as Poller>::Event;

/// The engine of a module over transport `T`: its tables on the heap,
/// registered memory owned buffers of type `M`.
pub type StdEngine<T, M = Vec<u8>> = HeapEngine<<T as Transport>::Framing, M>;

/// What a module asks of its sockets; implemented by TCP and UDP, over
/// any [`Net`].
pub trait Transport: Sized {
    /// The network its sockets are of.
    type Net: Net;

    /// How its links carry frames: a stream over TCP, datagrams over UDP.
    type Framing: Framing + AsFramed;

    /// The framing of its engine.
    fn framing(&self) -> Self::Framing;

    /// The network, for its clock and randomness.
    fn net(&self) -> &Self::Net;

    /// The contacts it listens on, for this process's card.
    fn contacts(&self) -> Vec<Contact>;

    /// Whether it reaches the peer whose contacts `directory` lists under
    /// `name` (one of them pairs with a local address); why not if it
    /// does not. Called before the engine learns of the peer.
    fn pairs_with(&mut self, directory: &Directory, name: ProcName) -> Result<(), LookupError>;

    /// A readiness event of the poller for one of this transport's tokens.
    /// A socket with bytes to read is only queued here, and read by
    /// [`read_ready`](Self::read_ready) once the pass has seen every event.
    fn on_event<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        cx: &mut Context<'_, Self::Net>,
        event: &EventOf<Self::Net>,
        now: time::Instant,
    );

    /// Opens the connection the engine asks for (reporting success or
    /// failure to the engine, now or once the socket says).
    fn connect<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        cx: &mut Context<'_, Self::Net>,
        req: ConnectRequest,
        now: time::Instant,
    );

    /// Closes a link the engine is done with and tells the engine.
    fn close<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        cx: &mut Context<'_, Self::Net>,
        link: LinkId,
        now: time::Instant,
    );

    /// Moves bytes both ways as far as the sockets and the engine allow
    /// without waiting: what the engine has to send, and input held back
    /// earlier because the engine had no receive fragment for it.
    fn flush<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        cx: &mut Context<'_, Self::Net>,
        now: time::Instant,
    );

    /// Sockets a busy-polling module reads directly, without asking the
    /// poller first (one system call instead of two), or `false` when
    /// there are too many for that to pay.
    fn few_sockets(&self) -> bool;

    /// The upper layer registered `handle` with the engine, for peers to
    /// reach with `access`: a transport whose device moves put and get
    /// data itself (RDMA) registers it there too. Nothing by default.
    fn registered<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        handle: MemHandle,
        access: Access,
    ) {
        let _ = (engine, handle, access);
    }

    /// Deregisters `handle` from the engine and gives its memory back; a
    /// transport whose device holds the region takes it from the device
    /// first, so that no peer reaches memory the user owns again.
    fn deregister<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        handle: MemHandle,
    ) -> Result<M, BtlError> {
        engine.deregister_mem(handle)
    }

    /// Reads the sockets that are ready on this pass, each once and each
    /// up to the transport's budget, so that no peer that keeps its socket
    /// full holds the pass on its own ([`read_queue`](super::read_queue)):
    /// those the poller reported, and those the last pass left with bytes
    /// unread. Whether anything came.
    fn read_ready<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        cx: &mut Context<'_, Self::Net>,
        now: time::Instant,
    ) -> bool;

    /// Whether a socket was left with bytes unread, its budget spent: the
    /// poller, edge-triggered, will not report it again, so the next pass
    /// is not to wait in the poller.
    fn left_unread(&self) -> bool;

    /// Reads every socket directly, without the poller (see
    /// [`few_sockets`](Self::few_sockets)), each up to its budget as
    /// [`read_ready`](Self::read_ready) does; whether anything came.
    fn read_directly<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        cx: &mut Context<'_, Self::Net>,
        now: time::Instant,
    ) -> bool;
}

/// What a transport's calls use that its module owns: the poller's
/// registry for its sockets, and the directory that pairs addresses and
/// counts refused strangers.
pub struct Context<'a, N: Net> {
    /// The registry of the module's poller.
    pub registry: &'a RegistryOf<N>,
    /// The module's directory.
    pub directory: &'a mut Directory,
}

/// A transport and what it is lent, as the engine's driver loop sees them
/// ([`Engine::serve`](btl_core::engine::Engine::serve)).
struct Sockets<'a, T: Transport> {
    transport: &'a mut T,
    cx: Context<'a, T::Net>,
}

impl<T: Transport, M: Buffer> Io<StdEngine<T, M>> for Sockets<'_, T> {
    fn connect(&mut self, engine: &mut StdEngine<T, M>, req: ConnectRequest, now: time::Instant) {
        self.transport.connect(engine, &mut self.cx, req, now);
    }

    fn write(&mut self, engine: &mut StdEngine<T, M>, now: time::Instant) {
        self.transport.flush(engine, &mut self.cx, now);
    }

    fn close(&mut self, engine: &mut StdEngine<T, M>, link: LinkId, now: time::Instant) {
        self.transport.close(engine, &mut self.cx, link, now);
    }
}

/// The engine's name for where a connection or datagram comes from: its IP
/// address (an IPv6 address by its /64, which one host can fill), so that
/// the handshake budget per source holds one host to its share.
pub fn source_of(at: std::net::SocketAddr) -> Source {
    match at.ip() {
        std::net::IpAddr::V4(ip) => Source::ipv4(ip.octets()),
        std::net::IpAddr::V6(ip) => Source::ipv6(ip.octets()),
    }
}

/// A BTL module: the engine over transport `T`, holding registered memory
/// as buffers of type `M` (`Vec<u8>`, which a service hands over and gets
/// back).
pub struct Module<T: Transport, M: Buffer = Vec<u8>> {
    // The transport drops first: a device it holds may reach the engine's
    // registered memory until then (RDMA), never after the memory goes.
    transport: T,
    engine: StdEngine<T, M>,
    /// The poller, unless a progress thread has it.
    poller: Option<<T::Net as Net>::Poller>,
    /// The poller's registry, for the transport's sockets wherever the
    /// poller is.
    registry: RegistryOf<T::Net>,
    /// Its card, its peers' contacts and its refusals of strangers.
    directory: Directory,
    spin: Duration,
    /// When to look at the engine's timers next.
    timer_check_at: time::Instant,
    /// The engine's next timer as the last wait in the poller was bounded
    /// by it ([`time::Instant::NEVER`]: none): a wake before it came from a
    /// socket, and need not look at the timers. `None` when unknown.
    waited_for_timer: Option<time::Instant>,
    /// Passes made, to ask the poller only every [`POLLER_EVERY`].
    passes: u32,
    /// The engine's clock as last read.
    clock: time::Instant,
    /// What waiting has cost, spinning first and blocking at once.
    waits: WaitCosts,
    /// Why processes that `add_procs` did not reach could not be reached,
    /// until a later lookup reaches them.
    unreachable: HashMap<ProcName, LookupError>,
    /// Whether dropping the module finalizes it (see [`Drop`]).
    finalize_on_drop: bool,
    /// How its engine was made, for a record of it.
    setup: Box<Setup>,
    /// Where its flight record goes, once recording is on.
    recording: Option<Recording>,
}

/// Where a module's flight record goes, and when.
#[derive(Debug)]
struct Recording {
    /// The directory records are written to.
    dir: PathBuf,
    /// Records it may still write when peers are lost.
    dumps_left: u32,
    /// Peers lost uncleanly so far, as last looked at.
    losses_seen: u64,
}

/// Records a module writes of itself when peers are lost, at most: a flood
/// of losses fills no disk.
pub const RECORD_DUMPS: u32 = 4;

/// Why [`Module::reach`] could not reach a process.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    /// The transport has no usable address for it.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The engine would not add it.
    #[error("adding process {proc}: {error}")]
    Btl {
        /// The process.
        proc: ProcName,
        /// Why.
        error: BtlError,
    },
    /// The module could not join it: for shared memory, not on this
    /// host, no segment, or it did not join back in time.
    #[error("joining process {proc}: {reason}")]
    Join {
        /// The process.
        proc: ProcName,
        /// Why.
        reason: String,
    },
    /// No module of a [`Bml`](crate::Bml) reaches it.
    #[error("no module reaches process {proc}: {said}")]
    NoModule {
        /// The process.
        proc: ProcName,
        /// What each module said, best first.
        said: String,
    },
    /// The address given to [`Module::connect_to`] names no host this
    /// module can reach.
    #[error("`{address}` is not a {component} address HOST:PORT: {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// The module's component.
        component: &'static str,
        /// Why.
        reason: String,
    },
    /// No process of the module's component answered at the address given
    /// to [`Module::connect_to`].
    #[error("{}", no_answer(address, component, *waited, *lost, *refused))]
    NoAnswer {
        /// The address as given.
        address: String,
        /// The module's component.
        component: &'static str,
        /// How long it was tried.
        waited: Duration,
        /// Why the engine gave the peer up, if it did before the time
        /// given ran out.
        lost: Option<LostReason>,
        /// Whether every connection was refused (nothing listens there).
        refused: bool,
    },
}

/// What [`ReachError::NoAnswer`] says: what the tries met, and what to
/// check.
fn no_answer(
    address: &str,
    component: &str,
    waited: Duration,
    lost: Option<LostReason>,
    refused: bool,
) -> String {
    match (lost, refused) {
        (Some(reason), _) => {
            format!("reaching the {component} process at {address} ({waited:.1?}): {reason}")
        }
        (None, true) => format!(
            "nothing listens at {address} for {component}: every connection was refused for {waited:.1?} (is the server started, on that port, and does it serve {component}?)"
        ),
        (None, false) => format!(
            "no {component} process answered at {address} within {waited:.1?} (no route to it, a firewall, or not a btl {component} server)"
        ),
    }
}

impl<T: Transport, M: Buffer> std::fmt::Debug for Module<T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("engine", &self.engine)
            .field("served_by_a_thread", &self.poller.is_none())
            .finish_non_exhaustive()
    }
}

/// Why [`Module::wait_for`] came back without what it waited for.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Nothing it took came within the time given.
    #[error("nothing came within {0:?}")]
    TimedOut(Duration),
    /// The poller failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Hands `btl`'s events to `take` until it takes one, waiting with `wait`
/// (for at most the time left) while none is there, up to `timeout`: the
/// loop of every module's `wait_for`.
pub(crate) fn wait_for_event<B: Btl + ?Sized, R>(
    btl: &mut B,
    timeout: Duration,
    mut take: impl FnMut(Event<'_>) -> Option<R>,
    mut wait: impl FnMut(&mut B, Duration) -> Result<(), WaitError>,
) -> Result<R, WaitError> {
    let start = Instant::now();
    loop {
        while let Some(event) = btl.poll_event() {
            if let Some(taken) = take(event) {
                return Ok(taken);
            }
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(WaitError::TimedOut(waited));
        }
        wait(btl, timeout - waited)?;
    }
}

/// What was outstanding in a module at one moment
/// ([`Module::flush_mark`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushMark {
    peers: Vec<(EndpointId, u64)>,
    ops: u64,
}

/// A connection by address under way ([`Module::start_connect_to`]).
#[derive(Debug, Clone)]
pub struct Connecting {
    address: String,
    /// The stand-in name the peer is listed under until its HELLO.
    name: ProcName,
    endpoint: EndpointId,
    start: Instant,
    timeout: Duration,
}

impl Connecting {
    /// The endpoint the peer will have once reached.
    pub fn endpoint(&self) -> EndpointId {
        self.endpoint
    }
}

/// What [`Module::flush`] could not deliver before its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{outstanding} sends, puts or gets not yet acknowledged after {waited:?}")]
pub struct Unflushed {
    /// Packets and operations still outstanding ([`Engine::outstanding`]).
    ///
    /// [`Engine::outstanding`]: btl_core::engine::Engine::outstanding
    pub outstanding: usize,
    /// How long the flush waited.
    pub waited: Duration,
}

/// How long [`Module::wait`] took to see something, spinning first and
/// blocking at once: moving averages of each, and which one to use. Every
/// [`WaitCosts::PROBE`]th wait tries the other way, so the averages follow
/// the machine as its load changes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WaitCosts {
    spinning_ns: f64,
    blocking_ns: f64,
    waits: u32,
}

impl WaitCosts {
    /// One wait in this many tries the way not in favour.
    const PROBE: u32 = 8;

    /// Whether this wait spins before it blocks.
    pub(crate) fn spin_now(&mut self) -> bool {
        self.waits = self.waits.wrapping_add(1);
        let favour = self.spinning_ns <= self.blocking_ns;
        if self.waits.is_multiple_of(Self::PROBE) {
            !favour
        } else {
            favour
        }
    }

    /// A wait that spun (or not) saw something after `took`.
    pub(crate) fn record(&mut self, spun: bool, took: Duration) {
        let ns = took.as_nanos() as f64;
        let avg = if spun {
            &mut self.spinning_ns
        } else {
            &mut self.blocking_ns
        };
        *avg = if *avg == 0.0 {
            ns
        } else {
            *avg + (ns - *avg) / 8.0
        };
    }
}

impl<T: Transport, M: Buffer> Module<T, M> {
    /// A module of `engine` over `transport`, whose sockets are already
    /// registered with `poller`, and `directory`, whose card is published.
    pub fn new(
        engine: StdEngine<T, M>,
        setup: Setup,
        transport: T,
        directory: Directory,
        poller: <T::Net as Net>::Poller,
        spin: Duration,
    ) -> io::Result<Self> {
        Ok(Module {
            setup: Box::new(setup),
            recording: None,
            engine,
            transport,
            directory,
            registry: poller.registry()?,
            poller: Some(poller),
            spin,
            timer_check_at: time::Instant::ZERO,
            waited_for_timer: None,
            passes: 0,
            clock: time::Instant::ZERO,
            waits: WaitCosts::default(),
            unreachable: HashMap::new(),
            finalize_on_drop: true,
        })
    }

    /// A module named `name` whose engine has `config`, `pools` and
    /// `capacities`, over network `net` and the transport `start` makes of
    /// it (registering its sockets with the poller's registry it is given,
    /// listening where `directory`'s bootstrap assigns this process, if it
    /// does); then `directory` publishes the card of where it listens.
    /// An epoch of 0 in `config` is replaced by a random one: each start of
    /// a process is a new start to its peers.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        name: &'static str,
        mut config: btl_core::engine::config::EngineConfig,
        pools: btl_core::pool::FragmentPoolsConfig,
        capacities: Capacities,
        spin: Duration,
        net: T::Net,
        mut directory: Directory,
        start: impl FnOnce(T::Net, &RegistryOf<T::Net>, &Directory) -> io::Result<T>,
    ) -> io::Result<Self> {
        if config.epoch == 0 {
            let [a, b, c, d, e, f, g, h, ..] = net.random();
            config.epoch = u64::from_le_bytes([a, b, c, d, e, f, g, h]);
        }
        if config.cookie_secret == [0; 16] {
            config.cookie_secret = net.random();
        }
        // The engine learns the time before anything is asked of it: a
        // connection asked for at once is timed from now, not from 0.
        let now = net.now();
        let poller = net.poller()?;
        let transport = start(net, &poller.registry()?, &directory)?;
        directory.publish(transport.contacts())?;
        if config.job_key.is_none() {
            tracing::warn!(
                "{name} {}: no job key: anyone who reaches this module's ports can hold a peer slot; give the job a key (BTL_JOB_KEY, ModuleBuilder::job_key)",
                config.me
            );
        }
        let setup = Setup {
            component: name.to_owned(),
            framing: transport.framing().framed(),
            config: config.clone(),
            capacities,
            pools,
            start: now,
        };
        let mut engine = Heap::engine(config, transport.framing(), capacities, pools, now)
            .map_err(|e| io::Error::other(format!("fragment pools: {e}")))?;
        engine.set_name(name);
        Module::new(engine, setup, transport, directory, poller, spin)
    }

    /// The transport, to inspect it (its addresses, its connections).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Its card, its peers' contacts and its refusals of strangers.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Whether the module reaches `proc`: its card looked up (waiting up
    /// to `timeout`), one of its contacts pairs with a local one.
    fn resolve(&mut self, proc: ProcName, timeout: Duration) -> Result<(), LookupError> {
        self.directory.lookup(proc, timeout)?;
        self.transport.pairs_with(&self.directory, proc)
    }

    /// Looks `proc` up, waiting up to `timeout` for its card, and adds it
    /// (as [`Btl::add_procs`] does, with the lookup's bound and cause):
    /// its endpoint, or why it cannot be reached.
    pub fn reach(&mut self, proc: ProcName, timeout: Duration) -> Result<EndpointId, ReachError> {
        self.resolve(proc, timeout)?;
        self.unreachable.remove(&proc);
        btl_core::btl::add_proc(&mut self.engine, proc)
            .map_err(|error| ReachError::Btl { proc, error })?
            .ok_or(ReachError::Btl {
                proc,
                error: BtlError::Unreachable,
            })
    }

    /// Reaches the process that listens at `address` (`HOST:PORT`) for
    /// this module's component, knowing nothing else of it: no job, no
    /// rank, no card. Its name comes from its handshake, and is returned
    /// with its endpoint. A process that does not listen yet is tried
    /// again, with a backoff that grows to the largest retransmission
    /// timeout, until `timeout` has passed (or the peer timeout, if that is
    /// shorter); then the error says what the last try met. The
    /// endpoint reconnects to the same address if its link breaks.
    ///
    /// What a storage client does with the address of its server; the
    /// server sees a client as any other (with the job's key, if it has
    /// one: set it on both sides). Reaching a process that is already a
    /// peer here, by address or by name, makes no second one: the error
    /// says [`LostReason::Duplicate`].
    ///
    /// Events that come meanwhile stay queued for [`Btl::poll_event`].
    pub fn connect_to(
        &mut self,
        address: &str,
        timeout: Duration,
    ) -> Result<(EndpointId, ProcName), ReachError> {
        let connecting = self.start_connect_to(address, timeout)?;
        loop {
            if let Some(reached) = self.poll_connect_to(&connecting) {
                return reached;
            }
            let waited = connecting.start.elapsed();
            self.wait_a_step(timeout.saturating_sub(waited));
        }
    }

    /// Begins [`connect_to`](Self::connect_to) without waiting: the peer
    /// is added and its connection asked for;
    /// [`poll_connect_to`](Self::poll_connect_to) says how it went, while
    /// whoever serves the module (a pass, an async driver) moves it
    /// forward.
    pub fn start_connect_to(
        &mut self,
        address: &str,
        timeout: Duration,
    ) -> Result<Connecting, ReachError> {
        let start = Instant::now();
        let component = self.directory.component();
        let contacts = self
            .directory
            .contacts_at(address)
            .map_err(|e| ReachError::Address {
                address: address.to_owned(),
                component,
                reason: e.to_string(),
            })?;
        let name = self.directory.list(contacts);
        let added = self
            .transport
            .pairs_with(&self.directory, name)
            .map_err(ReachError::from)
            .and_then(|()| {
                let btl = |error| ReachError::Btl { proc: name, error };
                let ep = btl_core::btl::add_proc(&mut self.engine, name)
                    .map_err(btl)?
                    .ok_or(btl(BtlError::Unreachable))?;
                self.engine.connect(ep).map_err(btl)?;
                Ok(ep)
            });
        match added {
            Ok(endpoint) => Ok(Connecting {
                address: address.to_owned(),
                name,
                endpoint,
                start,
                timeout,
            }),
            Err(e) => {
                self.directory.unlist(name);
                Err(e)
            }
        }
    }

    /// How a connection begun by [`start_connect_to`](Self::start_connect_to)
    /// went: `None` while its handshake is under way and its time is not
    /// up; the endpoint and the name the peer told once it completes; why
    /// not once the peer is lost or the time given has passed (the peer
    /// not reached is then removed, and it says whether every connection
    /// was refused). Asked again after it answered, it answers the same
    /// way only while the peer stays as it was.
    pub fn poll_connect_to(
        &mut self,
        connecting: &Connecting,
    ) -> Option<Result<(EndpointId, ProcName), ReachError>> {
        let ep = connecting.endpoint;
        if self.engine.is_connected(ep)
            && let Some(proc) = self.engine.proc_of(ep)
        {
            return Some(Ok((ep, proc)));
        }
        let lost = self.engine.lost(ep);
        if lost.is_none() && connecting.start.elapsed() < connecting.timeout {
            return None;
        }
        let refused = self.engine.refused(ep);
        // Removing a peer still unnamed says nothing to the upper layer.
        let _ = self.engine.del_procs(&[ep]);
        self.directory.unlist(connecting.name);
        Some(Err(ReachError::NoAnswer {
            address: connecting.address.clone(),
            component: self.directory.component(),
            waited: connecting.start.elapsed(),
            lost,
            refused,
        }))
    }

    /// Why [`Btl::add_procs`] found `proc` unreachable, if it did (and no
    /// later lookup reached it).
    pub fn why_unreachable(&self, proc: ProcName) -> Option<&LookupError> {
        self.unreachable.get(&proc)
    }

    /// Makes dropping this module close its sockets without a word, as a
    /// killed process's are: its peers find it gone by their own means
    /// (refused reconnections, their peer timeout). For simulations and
    /// tests that play a crash.
    pub fn abort_on_drop(&mut self) {
        self.finalize_on_drop = false;
    }

    /// The largest message [`send_copy`](Btl::send_copy) takes for
    /// `endpoint`: `attributes().max_send_size`, or the peer's own limit
    /// where it is lower, once a link to the peer has opened (what the
    /// peer's largest receive fragment holds, as its handshake said: a
    /// peer with a smaller `btl_<c>_max_send_size` takes little more than
    /// that; beyond it a send fails `TooLarge` with `Limit::Peer`). `None`
    /// for an unknown endpoint.
    pub fn max_send_to(&self, endpoint: EndpointId) -> Option<usize> {
        self.engine.max_send_to(endpoint)
    }

    /// Whether a put, get or send under way reads or writes registration
    /// `handle` (its deregistration is refused until they end).
    pub fn region_in_use(&self, handle: MemHandle) -> bool {
        self.engine.region_in_use(handle)
    }

    /// How much of the engine's fixed storage is in use.
    pub fn usage(&self) -> Usage {
        self.engine.usage()
    }

    /// Peers on record now (as [`usage`](Self::usage) counts them, without
    /// its walk over the links).
    pub fn peer_count(&self) -> usize {
        self.engine.peer_count()
    }

    /// The module's traffic: every peer's counters summed (those gone
    /// included) and what it refused, as its engine counts them.
    pub fn metrics(&self) -> ModuleMetrics {
        self.engine.metrics()
    }

    /// Each peer on record and its traffic.
    pub fn peer_metrics(&self) -> impl Iterator<Item = PeerReport> + '_ {
        self.engine.peer_metrics()
    }

    /// The module's metrics now, for a [`MetricsServer`](crate::metrics::MetricsServer).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            component: self.engine.attributes().name,
            module: self.metrics(),
            usage: self.usage(),
            peers: self.peer_metrics().collect(),
        }
    }

    /// Starts the flight recorder: up to `limit` bytes of what the engine
    /// takes in are kept in memory, and written to a file in `dir` when a
    /// peer is lost for a reason other than a clean close (at most
    /// [`RECORD_DUMPS`] times), or by [`write_record`](Self::write_record).
    /// Only a module not used yet can start it (a replay starts from a
    /// fresh engine): what its component's `btl_<c>_record` parameter does
    /// as the module opens.
    pub fn start_recording(&mut self, limit: usize, dir: PathBuf) -> Result<(), RecordError> {
        if self.engine.journal().is_on() || self.passes != 0 || self.engine.peer_count() != 0 {
            return Err(RecordError::AlreadyInUse);
        }
        *self.engine.journal_mut() = Recorder::with_limit(limit)?;
        self.recording = Some(Recording {
            dir,
            dumps_left: RECORD_DUMPS,
            losses_seen: 0,
        });
        Ok(())
    }

    /// The flight record so far, with `why` it is taken; `None` unless
    /// recording is on.
    pub fn record(&self, why: &str) -> Option<Record> {
        self.recording.as_ref()?;
        let recorder = self.engine.journal();
        Some(Record {
            setup: (*self.setup).clone(),
            why: why.to_owned(),
            full: recorder.is_full(),
            journal: recorder.bytes().to_vec(),
        })
    }

    /// Writes the flight record so far to a new file in the recording's
    /// directory, saying `why`: its path. Replay it with `btl replay FILE`.
    pub fn write_record(&mut self, why: &str) -> Result<PathBuf, RecordError> {
        let record = self.record(why).ok_or(RecordError::NotRecording)?;
        let dir = self
            .recording
            .as_ref()
            .map(|r| r.dir.clone())
            .unwrap_or_default();
        static WRITTEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = self.engine.config().me;
        let path = dir.join(format!(
            "btl-{}-{}.{}-{}-{n}.record",
            self.setup.component,
            me.job,
            me.rank,
            std::process::id()
        ));
        record.save(&path)?;
        Ok(path)
    }

    /// Writes the flight record if a peer was lost uncleanly since the last
    /// look, and the module may still write one.
    fn record_losses(&mut self) {
        let (lost, last) = self.engine.unclean_losses();
        let Some(recording) = self.recording.as_mut() else {
            return;
        };
        if lost == recording.losses_seen {
            return;
        }
        recording.losses_seen = lost;
        if recording.dumps_left == 0 {
            return;
        }
        recording.dumps_left -= 1;
        let why = match last {
            Some((proc, reason)) => format!("peer {proc} lost: {}", reason.label()),
            None => "a peer lost".to_owned(),
        };
        let name = self.setup.component.clone();
        match self.write_record(&why) {
            Ok(path) => tracing::warn!(
                "{name}: {why}: flight record written to {}; `btl replay {}` replays it",
                path.display(),
                path.display()
            ),
            Err(e) => tracing::warn!("{name}: {why}: the flight record could not be written: {e}"),
        }
    }

    /// The refusals of strangers so far, by reason.
    pub fn refusals(&self) -> &Refusals {
        self.directory.refusals()
    }

    /// Moves the protocol forward until everything sent so far is
    /// acknowledged by its peer (or has failed, and its event is queued),
    /// waiting up to `timeout`: the first half of a graceful close, before
    /// [`Btl::finalize`], after which nothing queued is lost unreported.
    /// Sends that owe no event (`sendi`, owned descriptors) are covered
    /// too: when this returns `Ok`, their peers have them. What is sent
    /// after the call is not waited for ([`flush_mark`](Self::flush_mark)).
    ///
    /// Events that arrive meanwhile stay queued for [`Btl::poll_event`]:
    /// a peer that keeps sending fills the event queue, and its
    /// acknowledgements then wait behind its messages. A module served by
    /// a [`ProgressThread`](super::progress_thread::ProgressThread) is
    /// flushed with [`Served::flush`](super::progress_thread::Served::flush),
    /// which lets the thread serve (and its handler take events) meanwhile.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), Unflushed> {
        let start = Instant::now();
        let mark = self.flush_mark();
        loop {
            if self.flushed(&mark) {
                return Ok(());
            }
            let outstanding = self.engine.outstanding();
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Unflushed {
                    outstanding,
                    waited,
                });
            }
            self.wait_a_step(timeout - waited);
        }
    }

    /// One step of a bounded wait with `left` to go: a pass that waits in
    /// the poller up to 10 ms, or, while a progress thread reads the
    /// sockets, what the caller queued sent and a short sleep.
    fn wait_a_step(&mut self, left: Duration) {
        let step = left.min(Duration::from_millis(10));
        if self.poller.is_some() {
            let _ = self.pass(Some(step));
        } else {
            self.serve_queued();
            std::thread::sleep(step.min(Duration::from_micros(200)));
        }
    }

    /// A mark of what is outstanding now: every send, queued packet and
    /// operation so far. [`flushed`](Self::flushed) says when it is all
    /// done; what is sent later does not count, so a flush ends even while
    /// peers keep the module busy.
    pub fn flush_mark(&self) -> FlushMark {
        FlushMark {
            peers: self.engine.send_marks().collect(),
            ops: self.engine.ops_mark(),
        }
    }

    /// Whether everything outstanding at `mark` is acknowledged by its
    /// peer, or has failed with its event queued.
    pub fn flushed(&self, mark: &FlushMark) -> bool {
        self.engine.reached(&mark.peers, mark.ops)
    }

    /// Packets and operations outstanding now ([`Engine::outstanding`]).
    ///
    /// [`Engine::outstanding`]: btl_core::engine::Engine::outstanding
    pub fn outstanding(&self) -> usize {
        self.engine.outstanding()
    }

    /// Nanoseconds since the module was made: the engine's clock.
    fn now(&self) -> time::Instant {
        self.transport.net().now()
    }

    /// One pass over sockets and timers, the poller waiting up to `wait`
    /// for a socket; returns whether a socket event came.
    fn pass(&mut self, wait: Option<Duration>) -> io::Result<bool> {
        let moved = self.serve_pass(wait);
        if self.recording.is_some() {
            self.record_losses();
        }
        moved
    }

    /// One pass of [`pass`](Self::pass).
    fn serve_pass(&mut self, wait: Option<Duration>) -> io::Result<bool> {
        if self.poller.is_none() {
            self.serve_queued();
            return Ok(false);
        }
        self.passes = self.passes.wrapping_add(1);
        let direct = <T::Net as Net>::READS_DIRECTLY
            && wait.is_none()
            && !self.passes.is_multiple_of(POLLER_EVERY)
            && self.transport.few_sockets();
        if direct {
            return Ok(self.direct_pass());
        }
        let wait = match wait {
            // Bytes left unread wait for no event.
            Some(_) if self.transport.left_unread() => Some(Duration::ZERO),
            // Not past the engine's next timer.
            Some(w) => {
                let at = self.timer_at();
                self.waited_for_timer = Some(at.unwrap_or(time::Instant::NEVER));
                let until = at.map(|t| Duration::from(self.now().until(t)));
                Some(until.map_or(w, |t| t.min(w)))
            }
            None => Some(Duration::ZERO),
        };
        let Some(mut poller) = self.poller.take() else {
            return Ok(false);
        };
        let polled = poller.poll(wait);
        let any = polled.is_ok() && self.on_socket_events(&poller, wait.is_some());
        self.poller = Some(poller);
        polled.map(|()| any)
    }

    /// Serves what the poller reported: the sockets' events and the reads
    /// they call for (with those a pass left unread), then the engine's
    /// timers (if the poller `waited`, when the wake may have been for a
    /// timer: unless the wait was bounded by a timer still to come, which
    /// saves a scan of every peer on a wake that a socket made) and
    /// requests. Whether any socket event came, or bytes.
    pub(crate) fn on_socket_events(
        &mut self,
        poller: &<T::Net as Net>::Poller,
        waited: bool,
    ) -> bool {
        let now = self.now();
        self.clock = now;
        let for_timer = self.waited_for_timer.take().is_none_or(|at| now >= at);
        let check_timers = self.timers_due(now) || (waited && for_timer);
        let Module {
            engine,
            transport,
            registry,
            directory,
            ..
        } = self;
        let mut cx = Context {
            registry,
            directory,
        };
        for event in poller.events().filter(|e| e.token() != WAKE) {
            transport.on_event(engine, &mut cx, event, now);
        }
        let read = transport.read_ready(engine, &mut cx, now);
        engine.serve(&mut Sockets { transport, cx }, now, check_timers);
        read || !poller.is_empty()
    }

    /// The oldest completion of this module's own sends, puts and gets,
    /// taken past the messages queued before it
    /// ([`Engine::poll_completion`](btl_core::engine::Engine::poll_completion)):
    /// for a caller that cannot take a message now but must learn its
    /// operations ended.
    pub fn poll_completion(&mut self) -> Option<btl_core::btl::Completion> {
        self.engine.poll_completion()
    }

    /// [`Btl::progress`], saying whether bytes or socket events came (a
    /// handshake's, an acknowledgement's), not how many events are ready:
    /// for a driver that passes again while something moves.
    pub fn progress_moved(&mut self) -> bool {
        self.pass(None).unwrap_or(false)
    }

    /// One pass over the sockets the poller reports ready, and the
    /// engine's timers, without waiting and without reading any socket
    /// directly: what a driver does before it sleeps, so that every socket
    /// is watched again. Whether a socket event or bytes came.
    pub fn poll_ready(&mut self) -> io::Result<bool> {
        self.pass(Some(Duration::ZERO))
    }

    /// Sends what the caller has queued, without reading: the pass of a
    /// module whose sockets a progress thread reads, and what an async
    /// driver does after a call so that a reply leaves at once.
    pub fn serve_queued(&mut self) {
        let now = self.now();
        let Module {
            engine,
            transport,
            registry,
            directory,
            ..
        } = self;
        let cx = Context {
            registry,
            directory,
        };
        engine.serve(&mut Sockets { transport, cx }, now, false);
    }

    /// How long a close waits for what was sent to be acknowledged
    /// (`btl_<c>_linger`).
    pub fn linger(&self) -> Duration {
        Duration::from_nanos(self.engine.config().linger.as_nanos())
    }

    /// How long a wait may spin before it blocks (`btl_<c>_spin`).
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// Hands the poller to a progress thread; `None` if one has it already.
    pub(crate) fn take_poller(&mut self) -> Option<<T::Net as Net>::Poller> {
        self.poller.take()
    }

    /// Takes the poller back from a progress thread.
    pub(crate) fn give_poller(&mut self, poller: <T::Net as Net>::Poller) {
        self.poller = Some(poller);
    }

    /// When the engine's next timer is due (its clock), if it has one.
    pub(crate) fn timer_at(&self) -> Option<time::Instant> {
        self.engine.poll_timeout()
    }

    /// Whether a socket was left with bytes unread: the next pass is not
    /// to wait ([`Transport::left_unread`]).
    pub fn left_unread(&self) -> bool {
        self.transport.left_unread()
    }

    /// How long until the engine's next timer, if it has one: how long a
    /// driver that is not woken otherwise may sleep.
    pub fn until_timer(&self) -> Option<Duration> {
        let now = self.now();
        self.timer_at().map(|t| now.until(t).into())
    }

    /// Events ready to poll.
    pub fn pending_events(&self) -> usize {
        self.engine.pending_events()
    }

    /// Whether the engine's timers are to be looked at now (every
    /// [`TIMER_CHECK`]).
    fn timers_due(&mut self, now: time::Instant) -> bool {
        let due = now >= self.timer_check_at;
        if due {
            self.timer_check_at = now + TIMER_CHECK;
        }
        due
    }

    /// A busy-polling pass without the poller: sockets read directly.
    fn direct_pass(&mut self) -> bool {
        // The clock is read every few passes only: a busy-polling pass is
        // a few hundred nanoseconds, and timers are far coarser.
        if self.passes % CLOCK_EVERY == 1 {
            self.clock = self.now();
        }
        let now = self.clock;
        let check_timers = self.timers_due(now);
        let Module {
            engine,
            transport,
            registry,
            directory,
            ..
        } = self;
        let mut cx = Context {
            registry,
            directory,
        };
        let before = engine.pending_events();
        // What the caller queued goes out before anything is read: the
        // latency of a reply.
        transport.flush(engine, &mut cx, now);
        let read = transport.read_directly(engine, &mut cx, now);
        engine.serve(&mut Sockets { transport, cx }, now, check_timers);
        read || engine.pending_events() > before
    }

    /// Waits for something to happen, at most `timeout`: progresses without
    /// waiting for a while, then blocks in the poller. Returns how many
    /// events are ready to poll; it also returns, with none, when bytes
    /// came that made none (an acknowledgement that grants credits), so
    /// that the caller can try again what it was waiting to do.
    ///
    /// Spinning first or blocking at once is chosen by what each has cost
    /// lately (and the other is tried now and then): with a core each,
    /// spinning catches the answer without the kernel's wake-up; with
    /// cores shared, a spinning process keeps its peer off the core and
    /// blocking at once is faster.
    ///
    /// A module that a progress thread serves does not wait here (the
    /// thread holds the poller): it sends what is queued and returns.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        if self.poller.is_none() {
            self.serve_queued();
            return Ok(self.pending_events());
        }
        let start = Instant::now();
        let spins = self.waits.spin_now();
        let spin = if spins {
            self.spin.min(timeout)
        } else {
            Duration::ZERO
        };
        loop {
            let moved = self.pass(None)?;
            let ready = self.pending_events();
            if ready > 0 || moved {
                self.waits.record(spins, start.elapsed());
                return Ok(ready);
            }
            if start.elapsed() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
        let elapsed = start.elapsed();
        if elapsed < timeout && self.pass(Some(timeout - elapsed))? {
            self.waits.record(spins, start.elapsed());
        }
        Ok(self.pending_events())
    }
}

impl<T: Transport, M: Buffer> Module<T, M> {
    /// Serves the module until `take` takes one of its events, for at most
    /// `timeout`: each event goes to `take` in turn, and the first `Some`
    /// it returns is the answer. The events it passes over are gone (it
    /// was theirs to see), so `take` is where a caller also counts
    /// completions or notes errors while it waits, say, for the reply of
    /// one tag:
    ///
    /// ```no_run
    /// # fn f(module: &mut btl_std::TcpModule) -> Result<(), btl_std::WaitError> {
    /// use btl_std::{Event, Tag};
    /// let reply = module.wait_for(std::time::Duration::from_secs(5), |e| match e {
    ///     Event::Received(m) if m.tag == Tag(0x81) => Some(m.data.to_vec()),
    ///     _ => None,
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn wait_for<R>(
        &mut self,
        timeout: Duration,
        take: impl FnMut(Event<'_>) -> Option<R>,
    ) -> Result<R, WaitError> {
        self.progress();
        wait_for_event(self, timeout, take, |m, left| {
            m.wait(left).map(drop).map_err(WaitError::from)
        })
    }
}

impl<T: Transport, M: Buffer> Module<T, M> {
    /// [`Btl::finalize`] without its linger: the engine shuts down at
    /// once and its CLOSEs go out. For a caller that has waited for its
    /// acknowledgements its own way (an async driver's flush); what is
    /// still outstanding is counted in the answer.
    pub fn finalize_now(&mut self) -> Undelivered {
        if self.engine.is_finalized() {
            return Undelivered::default();
        }
        // What came from the peers is acknowledged before the CLOSEs: a
        // peer that reads the CLOSE first fails what it sent last.
        self.engine.acknowledge_now();
        self.serve_queued();
        let undelivered = self.engine.finalize();
        // The CLOSEs go out before the sockets are dropped.
        let _ = self.pass(None);
        undelivered
    }
}

impl<T: Transport, M: Buffer> Btl for Module<T, M> {
    type Memory = M;

    btl_core::forward_btl_operations!(engine);

    /// Looks each process up with the transport (its card, an address
    /// that pairs with a local one) and adds those it reaches.
    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        let timeout = self.directory.lookup_timeout();
        for (i, (proc, ep)) in procs.iter().zip(endpoints.iter_mut()).enumerate() {
            *ep = None;
            if let Err(e) = self.resolve(*proc, timeout) {
                tracing::debug!(
                    "{}: process {proc} is not reachable: {e}",
                    self.attributes().name
                );
                self.unreachable.insert(*proc, e);
                continue;
            }
            self.unreachable.remove(proc);
            let one = btl_core::btl::add_proc(&mut self.engine, *proc)?;
            if one.is_some() && reachable.set(i) {
                *ep = one;
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        self.engine.del_procs(endpoints)
    }

    fn register_mem(
        &mut self,
        region: M,
        access: btl_core::btl::Access,
    ) -> Result<MemHandle, RegisterError<M>> {
        let handle = self.engine.register_mem(region, access)?;
        self.transport.registered(&mut self.engine, handle, access);
        Ok(handle)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<M, BtlError> {
        self.transport.deregister(&mut self.engine, handle)
    }

    /// Polls the sockets without waiting, then returns how many events are
    /// ready. A socket error of the poller itself is reported as an
    /// `Error` event by the engine's peers timing out; it is not expected.
    fn progress(&mut self) -> usize {
        let _ = self.pass(None);
        self.pending_events()
    }

    /// Waits up to the engine's `linger` for what was sent to be
    /// acknowledged (as [`flush`](Module::flush)), then shuts the engine
    /// down and sends its CLOSEs; returns what was still outstanding.
    fn finalize(&mut self) -> Undelivered {
        if self.engine.is_finalized() {
            return Undelivered::default();
        }
        let linger = self.engine.config().linger;
        if !linger.is_zero() {
            let _ = self.flush(Duration::from_nanos(linger.as_nanos()));
        }
        self.finalize_now()
    }
}

impl<T: Transport, M: Buffer> Observed for Module<T, M> {
    fn snapshots(&self, out: &mut Vec<Snapshot>) {
        out.push(self.snapshot());
    }
}

impl<T: Transport, M: Buffer> Drop for Module<T, M> {
    /// A module dropped without [`Btl::finalize`] (an early return, a
    /// panic) is finalized: its peers read a CLOSE and lose this process
    /// at once, instead of waiting out their peer timeout. Unless
    /// [`abort_on_drop`](Module::abort_on_drop) said otherwise.
    fn drop(&mut self) {
        if self.finalize_on_drop && !self.engine.is_finalized() {
            let undelivered = self.finalize();
            if !undelivered.is_empty() {
                tracing::warn!(
                    "{} {}: dropped with {undelivered} (after waiting {:?}): they are lost; flush before dropping to wait longer",
                    self.engine.attributes().name,
                    self.engine.config().me,
                    self.engine.config().linger,
                );
            }
        }
    }
}
