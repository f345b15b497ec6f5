//! The [`Endpoint`] handle and the driver task behind it.

use std::future::{Future, poll_fn};
use std::ops::RangeInclusive;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use btl_std::bootstrap::LookupError;
use btl_std::driver::module::{FlushMark, Module, ReachError, Transport};
use btl_std::transports::tcp::Tcp;
use btl_std::transports::udp::Udp;
use btl_std::{
    Access, Btl, BtlError, EndpointId, MemError, MemHandle, MemSlice, ModuleBuilder, OpenError,
    Opening, ProcName, RemoteKey, RemoteSlice, Tag,
};

use crate::Error;
use crate::inbox::{Arrivals, Inbox, PeerEvents, Queue, Receiver};
use crate::net::{Reactor, TokioNet};
use crate::ops::{Kind, Send, Transfer};
use crate::spin::Spin;
use crate::state::{Route, Shared};

/// An endpoint over TCP, its sockets in tokio's reactor.
pub type TcpEndpoint = Endpoint<Tcp<TokioNet>>;
/// An endpoint over UDP, its sockets in tokio's reactor.
pub type UdpEndpoint = Endpoint<Udp<TokioNet>>;
/// The messages of a range of tags of a [`TcpEndpoint`].
pub type TcpReceiver = Receiver<Tcp<TokioNet>>;
/// The messages of a range of tags of a [`UdpEndpoint`].
pub type UdpReceiver = Receiver<Udp<TokioNet>>;

/// A handle on a module driven by a task of its own: cheap to clone,
/// shared by any number of tasks (`Send + Sync` where the module is
/// `Send`, as the TCP and UDP modules are).
pub struct Endpoint<T: Transport> {
    shared: Arc<Shared<T>>,
}

impl<T: Transport> Clone for Endpoint<T> {
    fn clone(&self) -> Self {
        Endpoint {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Transport> Drop for Endpoint<T> {
    /// The driver looks whether this was the last handle: then it closes
    /// the module once what was sent is acknowledged (or its linger passed).
    fn drop(&mut self) {
        self.shared.lock().kick();
    }
}

impl<T: Transport> std::fmt::Debug for Endpoint<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").finish_non_exhaustive()
    }
}

/// Memory lent to peers ([`Endpoint::lend`]): they reach it by
/// [`remote_key`](Self::remote_key) until it is taken back
/// ([`Endpoint::reclaim`]).
#[derive(Debug)]
#[must_use = "lent memory stays with the module until it is reclaimed"]
pub struct Lent {
    handle: MemHandle,
    len: usize,
}

impl Lent {
    /// The key peers name it by; send it to them.
    pub fn remote_key(&self) -> RemoteKey {
        self.handle.remote_key()
    }

    /// `len` bytes of it from `offset`, as a peer names them.
    pub fn remote(&self, offset: u64, len: u64) -> RemoteSlice {
        RemoteSlice {
            key: self.remote_key(),
            offset,
            len,
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl TcpEndpoint {
    /// Opens a TCP module as `builder` says (its parameters, bootstrap and
    /// job key), its sockets in the current runtime's reactor, and spawns
    /// its driver on the runtime.
    pub fn tcp(builder: ModuleBuilder) -> Result<Self, OpenError> {
        let setup = builder.tcp_setup()?;
        open("tcp", &builder, |net, o| {
            setup.build_on(net, o.me, o.job_key.as_deref(), o.bootstrap)
        })
    }
}

impl UdpEndpoint {
    /// Opens a UDP module as `builder` says, its sockets in the current
    /// runtime's reactor, and spawns its driver on the runtime.
    pub fn udp(builder: ModuleBuilder) -> Result<Self, OpenError> {
        let setup = builder.udp_setup()?;
        open("udp", &builder, |net, o| {
            setup.build_on(net, o.me, o.job_key.as_deref(), o.bootstrap)
        })
    }
}

/// Opens the module `build` makes of a new [`TokioNet`] and what `builder`
/// knows of the process, and spawns its driver.
fn open<T>(
    component: &'static str,
    builder: &ModuleBuilder,
    build: impl FnOnce(TokioNet, Opening) -> std::io::Result<Module<T>>,
) -> Result<Endpoint<T>, OpenError>
where
    T: Transport<Net = TokioNet> + std::marker::Send + 'static,
    Module<T>: std::marker::Send,
{
    let opening = builder.opening()?;
    let io = |error| OpenError::Io { component, error };
    let module = build(TokioNet::new().map_err(io)?, opening).map_err(io)?;
    Ok(Endpoint::spawn(module))
}

impl<T> Endpoint<T>
where
    T: Transport + std::marker::Send + 'static,
    T::Net: Reactor,
    Module<T>: std::marker::Send,
{
    /// A handle on `module`, its driver spawned on the current tokio
    /// runtime (`tokio::spawn`).
    pub fn spawn(module: Module<T>) -> Self {
        let (endpoint, driver) = Endpoint::new(module);
        tokio::spawn(driver);
        endpoint
    }
}

impl<T> Endpoint<T>
where
    T: Transport + 'static,
    T::Net: Reactor,
{
    /// A handle on `module`, and the driver future that serves it: spawn
    /// it (`tokio::spawn`, or `spawn_local` for a module that is not
    /// `Send`, as a simulated one). The driver ends when the endpoint is
    /// closed; until it runs, operations wait, and if it is dropped they
    /// fail with [`Error::DriverGone`].
    pub fn new(module: Module<T>) -> (Self, impl Future<Output = ()> + 'static) {
        let shared = Shared::new(module);
        // The guard goes into the future as it is made, not at its first
        // poll: a driver dropped unpolled still fails what waits on it.
        let driver = drive(DriverGuard(Arc::clone(&shared)));
        (Endpoint { shared }, driver)
    }

    /// A handle on `module`, its driver spawned on the current
    /// `LocalSet` (`tokio::task::spawn_local`): for a module that is not
    /// `Send`, such as one over a simulated network.
    pub fn spawn_local(module: Module<T>) -> Self {
        let (endpoint, driver) = Endpoint::new(module);
        tokio::task::spawn_local(driver);
        endpoint
    }
}

impl<T: Transport> Endpoint<T> {
    /// Runs `f` on the module under the endpoint's lock: to read its
    /// counters ([`Module::usage`], [`Module::outstanding`]) or its
    /// addresses. What `f` queues leaves with the driver's next pass. Keep
    /// it short: the driver waits meanwhile.
    pub fn with<R>(&self, f: impl FnOnce(&mut Module<T>) -> R) -> R {
        let mut state = self.shared.lock();
        let r = f(&mut state.module);
        state.after_call();
        r
    }

    /// The longest the driver passes over the sockets after work, waiting
    /// for more, before it sleeps ([`DEFAULT_SPIN_LIMIT`], 1 ms). It spins
    /// that long only while work has lately come back within it (a
    /// ping-pong, a stream), else the module's own `spin` (50 µs): a
    /// wake-up costs tens of microseconds that spinning saves, at the
    /// price of the core meanwhile. Zero: it sleeps as soon as there is
    /// nothing to do.
    pub fn set_spin_limit(&self, limit: Duration) {
        self.shared.lock().spin_limit = limit;
    }

    /// Sends a copy of `data` to `peer` with `tag`: the module takes the
    /// copy now, or, while it has no room for the peer, once it has, in the
    /// order of the calls (so messages to one peer arrive in the order
    /// `send` was called). The future completes once the peer has
    /// acknowledged the message; it fails if the module refuses it
    /// (`TooLarge` beyond [`Module::max_send_to`]: move that much with a
    /// put) or the peer is lost first. See [`Send`] for what dropping it
    /// does.
    pub fn send<B: AsRef<[u8]> + Unpin>(&self, peer: EndpointId, tag: Tag, data: B) -> Send<T, B> {
        Send::new(Arc::clone(&self.shared), peer, tag, data)
    }

    /// Writes `data` into the peer's `remote` region, starting now (or in
    /// its turn once there is room, as a send); the buffer comes back once
    /// the data is in the peer's memory. See [`Transfer`].
    pub fn put(&self, peer: EndpointId, data: Vec<u8>, remote: RemoteSlice) -> Transfer<T> {
        Transfer::new(Arc::clone(&self.shared), peer, data, remote, Kind::Put)
    }

    /// As [`put`](Self::put), and the peer is told: its
    /// [`arrivals`](Self::arrivals) get the place and `imm`.
    pub fn put_notify(
        &self,
        peer: EndpointId,
        data: Vec<u8>,
        remote: RemoteSlice,
        imm: u64,
    ) -> Transfer<T> {
        let kind = Kind::PutNotify(imm);
        Transfer::new(Arc::clone(&self.shared), peer, data, remote, kind)
    }

    /// Reads the peer's `remote` region into the start of `buffer` (at
    /// least as long); the buffer comes back filled. See [`Transfer`].
    pub fn get(&self, peer: EndpointId, buffer: Vec<u8>, remote: RemoteSlice) -> Transfer<T> {
        Transfer::new(Arc::clone(&self.shared), peer, buffer, remote, Kind::Get)
    }

    /// Lends `buffer` to peers for `access` (their puts into it, their
    /// gets from it) until [`reclaim`](Self::reclaim); a refused buffer
    /// comes back in the error.
    pub fn lend(
        &self,
        buffer: Vec<u8>,
        access: Access,
    ) -> Result<Lent, btl_std::RegisterError<Vec<u8>>> {
        let len = buffer.len();
        let mut state = self.shared.lock();
        let handle = state.module.register_mem(buffer, access)?;
        Ok(Lent { handle, len })
    }

    /// Runs `f` on the bytes of lent memory as they are now (what peers
    /// put there), under the endpoint's lock.
    pub fn with_lent<R>(&self, lent: &Lent, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, Error> {
        let mut state = self.shared.lock();
        let bytes = state.module.region_mut(lent.handle)?;
        Ok(f(bytes))
    }

    /// Runs `f` on the bytes of `slice` of memory this endpoint lent (where
    /// a peer's put landed: [`Arrival::slice`](crate::Arrival::slice)),
    /// under the endpoint's lock.
    pub fn with_slice<R>(
        &self,
        slice: MemSlice,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, Error> {
        let mut state = self.shared.lock();
        let bytes = state.module.region_mut(slice.handle)?;
        let out_of_bounds = BtlError::Memory(MemError::OutOfBounds {
            offset: slice.offset,
            len: slice.len,
            size: bytes.len() as u64,
        });
        let range = usize::try_from(slice.offset)
            .ok()
            .zip(usize::try_from(slice.offset.saturating_add(slice.len)).ok())
            .filter(|&(_, end)| end <= bytes.len())
            .ok_or(out_of_bounds)?;
        Ok(f(&mut bytes[range.0..range.1]))
    }

    /// Takes lent memory back once no operation of a peer reads or writes
    /// it (a peer's get is done here a moment after it completes there:
    /// its acknowledgement ends it). Fails if the endpoint stops first.
    pub async fn reclaim(&self, lent: Lent) -> Result<Vec<u8>, Error> {
        poll_fn(|cx| {
            let mut state = self.shared.lock();
            if !state.module.region_in_use(lent.handle) {
                return Poll::Ready(state.module.deregister_mem(lent.handle).map_err(Error::Btl));
            }
            if let Err(why) = state.check_open() {
                return Poll::Ready(Err(why));
            }
            state.watchers.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// An inbox of the messages whose tag is in `tags`, holding up to
    /// `capacity` of them (at least 1). When it is full the driver stops
    /// taking the module's messages, notices and peer events (of every
    /// peer) until it is read: the peers' credits run out and their sends
    /// wait. The completions of this endpoint's own operations are still
    /// taken, so a task that awaits its send before it reads goes on. A
    /// message whose tag no receiver takes waits likewise, with a warning
    /// in the log, until a receiver for it is made. Ranges may not
    /// overlap.
    pub fn receiver(
        &self,
        tags: RangeInclusive<Tag>,
        capacity: usize,
    ) -> Result<Receiver<T>, Error> {
        let mut state = self.shared.lock();
        state.check_open()?;
        if let Some(r) = state
            .routes
            .iter()
            .find(|r| r.tags.start() <= tags.end() && tags.start() <= r.tags.end())
        {
            return Err(Error::TagsTaken {
                asked: (tags.start().0, tags.end().0),
                taken: (r.tags.start().0, r.tags.end().0),
            });
        }
        let id = state.next_id();
        state.routes.push(Route {
            id,
            tags,
            queue: Queue::new(capacity.max(1)),
        });
        state.kick();
        Ok(Inbox::new(Arc::clone(&self.shared), id))
    }

    /// An inbox of notices of peers' [`put_notify`](Self::put_notify) that
    /// landed in memory this endpoint lent, up to `capacity` (a full one
    /// holds the module's events back, as a receiver's does). Only one at a
    /// time: a second replaces the first. While there is none, notices are
    /// dropped (the data is in its region all the same).
    pub fn arrivals(&self, capacity: usize) -> Arrivals<T> {
        let mut state = self.shared.lock();
        let id = state.next_id();
        state.arrivals = Some((id, Queue::new(capacity.max(1))));
        state.kick();
        Inbox::new(Arc::clone(&self.shared), id)
    }

    /// An inbox of peers that left or were lost, up to `capacity` (a full
    /// one holds the module's events back). Only one at a time: a second
    /// replaces the first. While there is none, they are dropped: the
    /// operations of a peer lost fail with the reason all the same.
    pub fn peer_events(&self, capacity: usize) -> PeerEvents<T> {
        let mut state = self.shared.lock();
        let id = state.next_id();
        state.peer_events = Some((id, Queue::new(capacity.max(1))));
        state.kick();
        Inbox::new(Arc::clone(&self.shared), id)
    }

    /// Looks `proc` up through the module's bootstrap (its card, waiting up
    /// to `timeout` for it to be published) and adds it: its endpoint. The
    /// connection is made on first use.
    pub async fn reach(&self, proc: ProcName, timeout: Duration) -> Result<EndpointId, ReachError> {
        let start = Instant::now();
        loop {
            let tried = {
                let mut state = self.shared.lock();
                state.module.reach(proc, Duration::ZERO)
            };
            match tried {
                // A card not yet published is looked for again; anything
                // else the card says is final.
                Err(ReachError::Lookup(e @ LookupError::Bootstrap(_)))
                    if start.elapsed() < timeout =>
                {
                    tracing::trace!("looking {proc} up again: {e}");
                    tokio::time::sleep(LOOKUP_PAUSE.min(timeout - start.elapsed())).await;
                }
                reached => return reached,
            }
        }
    }

    /// Reaches the process that listens at `address` (`HOST:PORT`),
    /// knowing nothing else of it, as
    /// [`Module::connect_to`](btl_std::Module::connect_to) does, without
    /// blocking: its endpoint and the name its handshake told.
    pub async fn connect_to(
        &self,
        address: &str,
        timeout: Duration,
    ) -> Result<(EndpointId, ProcName), ReachError> {
        let connecting = {
            let mut state = self.shared.lock();
            let connecting = state.module.start_connect_to(address, timeout)?;
            state.after_call();
            connecting
        };
        // Looked at after every pass of the driver, and once the time is
        // up, when no pass may come.
        let mut time_up = pin!(tokio::time::sleep(timeout));
        poll_fn(|cx| {
            let _ = time_up.as_mut().poll(cx);
            let mut state = self.shared.lock();
            match state.module.poll_connect_to(&connecting) {
                Some(reached) => Poll::Ready(reached),
                None => {
                    state.watchers.push(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// Waits until everything sent so far is acknowledged by its peer, or
    /// has failed (its future told). What is sent after the call is not
    /// waited for. Events keep flowing to the inboxes meanwhile; a full
    /// inbox nobody reads holds acknowledgements back too.
    pub async fn flush(&self) -> Result<(), Error> {
        let mark = {
            let state = self.shared.lock();
            state.check_open()?;
            state.module.flush_mark()
        };
        self.flushed(&mark).await
    }

    async fn flushed(&self, mark: &FlushMark) -> Result<(), Error> {
        poll_fn(|cx| {
            let mut state = self.shared.lock();
            if state.module.flushed(mark) {
                return Poll::Ready(Ok(()));
            }
            if let Err(why) = state.check_open() {
                return Poll::Ready(Err(why));
            }
            // Woken after the driver's next pass that moved something; the
            // driver is not asked for one (it would pass in a loop).
            state.watchers.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Closes the endpoint gracefully: waits until what was sent is
    /// acknowledged (as [`flush`](Self::flush)), then shuts the module
    /// down (its peers are told goodbye), and ends the driver. Every
    /// operation after it, or still waiting, fails with
    /// [`Error::Closed`]; inboxes end once empty. To bound the wait, wrap
    /// it in `tokio::time::timeout`: a close abandoned midway leaves the
    /// endpoint open.
    pub async fn close(&self) -> Result<(), Error> {
        let flushed = self.flush().await;
        let mut state = self.shared.lock();
        if state.stopped.is_some() {
            return flushed;
        }
        let undelivered = state.module.finalize_now();
        // The module's own events of the shutdown (its operations failed
        // with `Finalized`) reach their futures before they learn of it.
        let _ = state.pass(false);
        state.stop(Error::Closed);
        flushed?;
        if undelivered.is_empty() {
            Ok(())
        } else {
            Err(Error::Undelivered(undelivered.outstanding))
        }
    }
}

/// Pause between two lookups of a card not yet published.
const LOOKUP_PAUSE: Duration = Duration::from_millis(10);

/// The finest sleep tokio's timer keeps: an engine timer due sooner is
/// waited for by passing again, not by sleeping.
const TIMER_GRAIN: Duration = Duration::from_millis(1);

/// The longest a driver spins after work before it sleeps, unless
/// [`Endpoint::set_spin_limit`] says otherwise.
pub const DEFAULT_SPIN_LIMIT: Duration = Duration::from_millis(1);

/// Passes a driver makes before it yields to the runtime's other tasks.
const PASSES_PER_TURN: u32 = 8;

/// Marks the endpoint's driver gone when its future is dropped before the
/// endpoint closed.
struct DriverGuard<T: Transport>(Arc<Shared<T>>);

impl<T: Transport> Drop for DriverGuard<T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.driver_busy = false;
        if state.stopped.is_none() {
            // Nothing serves the module any more: its operations under way
            // end now, and give their buffers back to their futures.
            let _ = state.module.finalize_now();
            let _ = state.pass(false);
        }
        state.stop(Error::DriverGone);
    }
}

/// The driver task: passes over the sockets while there is work, spins a
/// while after it ([`Spin`]: at least the module's `spin`, longer while
/// work has lately come back sooner than the endpoint's spin limit), then
/// sleeps until a socket, the engine's next timer or a handle wakes it.
async fn drive<T>(guard: DriverGuard<T>)
where
    T: Transport,
    T::Net: Reactor,
{
    let shared = Arc::clone(&guard.0);
    let _guard = guard;
    let tick = <T::Net as Reactor>::TICK;
    // A simulated network never spins: its time passes between passes.
    let floor = match tick {
        Some(_) => Duration::ZERO,
        None => shared.lock().module.spin(),
    };
    let mut spin = Spin::new(floor, DEFAULT_SPIN_LIMIT);
    if tick.is_some() {
        spin.limit(Duration::ZERO);
    }
    let mut busy_at = Instant::now();
    // Whether a turn has found nothing since the last work.
    let mut paused = false;
    let mut orphaned_at: Option<(Instant, FlushMark)> = None;
    let mut woke = false;
    loop {
        // Passes while there is work, reading the sockets directly.
        let busy = {
            let mut state = shared.lock();
            if state.stopped.is_some() {
                return;
            }
            // No handle, future or inbox is left (the driver and its guard
            // hold the last two references): what was sent is given the
            // module's linger to be acknowledged, then the module closes.
            if Arc::strong_count(&shared) <= 2 {
                let orphaned =
                    orphaned_at.get_or_insert_with(|| (Instant::now(), state.module.flush_mark()));
                if state.module.flushed(&orphaned.1)
                    || orphaned.0.elapsed() >= state.module.linger()
                {
                    let undelivered = state.module.finalize_now();
                    if !undelivered.is_empty() {
                        tracing::warn!(
                            "a btl endpoint dropped without close: {undelivered}: they are lost; close it to wait for them"
                        );
                    }
                    let _ = state.pass(false);
                    state.stop(Error::Closed);
                    return;
                }
            }
            if tick.is_none() {
                spin.limit(state.spin_limit);
            }
            state.driver_busy = true;
            // The first pass after a sleep reads the clock (a direct pass
            // reads it now and then only): what the wake brought is served
            // at the time it came, with the engine's timers.
            let mut busy = std::mem::take(&mut woke) && state.pass(false);
            // While spinning, a turn passes a few times before it yields
            // (each yield costs the runtime a look at its reactor and
            // timers); what moved ends the turn, so that the tasks it
            // woke run at once.
            let spinning = !busy && busy_at.elapsed() < spin.window();
            for _ in 0..PASSES_PER_TURN {
                if state.pass(tick.is_none()) {
                    busy = true;
                    break;
                }
                if !spinning && !state.kicked {
                    break;
                }
            }
            busy
        };
        if busy {
            if std::mem::take(&mut paused) {
                spin.on_gap(busy_at.elapsed());
            }
            busy_at = Instant::now();
            tokio::task::yield_now().await;
            continue;
        }
        paused = true;
        if busy_at.elapsed() < spin.window() {
            tokio::task::yield_now().await;
            continue;
        }
        // Before sleeping, every socket the reactor woke is looked at,
        // which arms its waker again.
        let sleep_for = {
            let mut state = shared.lock();
            let mut moved = false;
            for _ in 0..PASSES_PER_TURN {
                if !net_has_ready(&state.module) && !state.module.left_unread() && !state.kicked {
                    break;
                }
                moved |= state.pass(false);
            }
            if moved {
                None
            } else {
                let timer = state.until_timer();
                match (timer, tick) {
                    // Sooner than tokio's timer can wake: passed again.
                    (Some(t), None) if t < TIMER_GRAIN && !spin.window().is_zero() => None,
                    (t, tick) => Some(match (t, tick) {
                        (Some(t), Some(k)) => Some(t.min(k)),
                        (t, k) => t.or(k),
                    }),
                }
            }
        };
        let Some(sleep_for) = sleep_for else {
            tokio::task::yield_now().await;
            continue;
        };
        sleep(&shared, sleep_for).await;
        woke = true;
    }
}

/// Whether the reactor has woken a socket no pass has looked at.
fn net_has_ready<T: Transport>(module: &Module<T>) -> bool
where
    T::Net: Reactor,
{
    module.transport().net().has_ready()
}

/// Sleeps until a socket is ready, a handle kicks, or `timer` (if any)
/// passes.
async fn sleep<T>(shared: &Shared<T>, timer: Option<Duration>)
where
    T: Transport,
    T::Net: Reactor,
{
    let deadline = timer.map(|t| tokio::time::Instant::now() + t);
    let mut timeout = pin!(deadline.map(tokio::time::sleep_until));
    poll_fn(|cx| {
        {
            let mut state = shared.lock();
            if !state
                .driver
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                state.driver = Some(cx.waker().clone());
            }
            state.module.transport().net().wake_on_ready(cx.waker());
            if state.kicked || state.stopped.is_some() || net_has_ready(&state.module) {
                state.driver_busy = true;
                return Poll::Ready(());
            }
            state.driver_busy = false;
            state.driver_wakes_at = deadline;
        }
        match timeout.as_mut().as_pin_mut().map(|t| t.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(()),
            _ => Poll::Pending,
        }
    })
    .await;
    let mut state = shared.lock();
    state.driver_busy = true;
    state.driver_wakes_at = None;
}
