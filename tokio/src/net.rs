//! [`TokioNet`]: btl-std's [`Net`] with its sockets in tokio's reactor.
//!
//! The sockets are the operating system's, made as [`Os`] makes them (the
//! same options, the same UDP offloads); each is registered with tokio's
//! reactor instead of a poller of the module's own. Readiness comes as a
//! wake of a waker made for the socket's token, which puts the token on
//! the module's ready list and wakes the driver task; the poller then asks
//! tokio about those tokens only, so a pass costs what is ready, not what
//! is registered. As with `mio`, readiness is an edge: it is cleared when
//! reported, before the transport reads until the socket would block.
//!
//! A blocking wait outside the driver (a synchronous `flush`, the
//! finalize of a module dropped without `close`) cannot count on the
//! reactor running: it tries every socket, pausing briefly between passes.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use btl_core::time;
use btl_std::driver::net::{
    DatagramSocket, ListenerSocket, Net, Os, Poller, Readiness, Segments, StreamOptions,
    StreamSocket, Watch,
};
use btl_std::driver::udp_offload::OffloadedUdp;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::runtime::Handle;

/// What the driver task needs of a network: how it is woken when a socket
/// becomes ready. Implemented by [`TokioNet`], and by a simulated network
/// (btl-sim's turmoil network), which cannot wake it and is passed over on
/// a fixed tick instead.
pub trait Reactor: Net {
    /// How often the driver makes a pass whatever happens, for a network
    /// whose sockets cannot wake it; `None` when readiness wakes it.
    const TICK: Option<Duration> = None;

    /// Wake `waker` (the driver task's) when a socket becomes ready.
    fn wake_on_ready(&self, waker: &Waker);

    /// Whether a socket became ready that no pass has looked at yet.
    fn has_ready(&self) -> bool;
}

/// The network of one module, in the reactor of the tokio runtime it was
/// made in. Make one per module: its ready list is the module's.
#[derive(Clone)]
pub struct TokioNet {
    reactor: Arc<Shared>,
}

impl std::fmt::Debug for TokioNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioNet").finish_non_exhaustive()
    }
}

impl TokioNet {
    /// The network of a module in the tokio runtime of the caller. Fails
    /// outside a runtime: a module's sockets need one to live in.
    pub fn new() -> io::Result<Self> {
        let handle = Handle::try_current().map_err(|e| {
            io::Error::other(format!(
                "btl's tokio network is made inside a tokio runtime ({e}): call it from async code or after Runtime::enter"
            ))
        })?;
        Ok(TokioNet {
            reactor: Arc::new(Shared {
                handle,
                state: Mutex::new(State::default()),
            }),
        })
    }
}

/// The ready list and registrations of one module, shared by its poller,
/// its sockets' wakers and the driver.
struct Shared {
    handle: Handle,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Tokens to ask tokio about on the next pass: woken, newly watched,
    /// or reported ready on the last pass (to be watched again).
    ready: Vec<usize>,
    sockets: HashMap<usize, Entry>,
    /// The driver task, woken when a token joins `ready`.
    driver: Option<Waker>,
}

/// A registered socket as the poller sees it.
struct Entry {
    /// The socket's registration; the socket holds the only lasting strong
    /// reference, so that it is deregistered when the socket goes.
    fd: Weak<AsyncFd<OwnedFd>>,
    writable: bool,
    /// Whether the token is on the ready list already.
    queued: bool,
    /// The waker tokio calls when the socket becomes ready.
    waker: Waker,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under this lock panics midway; a poisoned lock still
        // holds a whole list.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `token` on the ready list; the driver to wake, if it was not
    /// on it.
    fn mark(state: &mut State, token: usize) -> Option<Waker> {
        let entry = state.sockets.get_mut(&token)?;
        if entry.queued {
            return None;
        }
        entry.queued = true;
        state.ready.push(token);
        state.driver.clone()
    }
}

/// What wakes for one socket: its token goes on the ready list.
struct TokenWaker {
    token: usize,
    reactor: Weak<Shared>,
}

impl Wake for TokenWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(reactor) = self.reactor.upgrade() else {
            return;
        };
        let driver = Shared::mark(&mut reactor.lock(), self.token);
        if let Some(driver) = driver {
            driver.wake();
        }
    }
}

impl Reactor for TokioNet {
    fn wake_on_ready(&self, waker: &Waker) {
        let mut state = self.reactor.lock();
        if !state.driver.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.driver = Some(waker.clone());
        }
    }

    fn has_ready(&self) -> bool {
        !self.reactor.lock().ready.is_empty()
    }
}

/// A socket of the operating system, registered with tokio's reactor
/// while a module watches it.
pub struct Registered<S> {
    // The registration of a duplicate of the socket's descriptor, and the
    // token it is watched under.
    registration: Option<(usize, Arc<AsyncFd<OwnedFd>>)>,
    socket: S,
}

impl<S> Registered<S> {
    fn new(socket: S) -> Self {
        Registered {
            registration: None,
            socket,
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Registered<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("socket", &self.socket)
            .field("watched", &self.registration.is_some())
            .finish()
    }
}

/// Registers `fd` with the reactor of `runtime`, for reading and writing.
#[allow(unsafe_code)]
fn register(runtime: &Handle, fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    let _runtime = runtime.enter();
    // SAFETY: an `OwnedFd` is open and names the same file description
    // until it is dropped, which is when the `AsyncFd` that owns it is.
    let fd =
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE | Interest::WRITABLE) };
    fd.map_err(io::Error::from)
}

/// The registry of a [`TokioPoller`].
#[derive(Clone)]
pub struct TokioRegistry(Arc<Shared>);

impl<S: AsFd> Watch<TokioRegistry> for Registered<S> {
    /// Registers a duplicate of the socket's descriptor with tokio's
    /// reactor (readiness is the socket's, whichever descriptor asks), so
    /// that the registration owns what it watches: a pass that still holds
    /// it keeps the socket open a moment longer, never watches a number
    /// reused by another.
    fn watch(&mut self, registry: &TokioRegistry, token: usize, writable: bool) -> io::Result<()> {
        let reactor = &registry.0;
        let fd = Arc::new(register(
            &reactor.handle,
            self.socket.as_fd().try_clone_to_owned()?,
        )?);
        let waker = Waker::from(Arc::new(TokenWaker {
            token,
            reactor: Arc::downgrade(reactor),
        }));
        let replaced = {
            let mut state = reactor.lock();
            let old = state.sockets.insert(
                token,
                Entry {
                    fd: Arc::downgrade(&fd),
                    writable,
                    queued: false,
                    waker,
                },
            );
            // Looked at once, which arms its waker.
            let _ = Shared::mark(&mut state, token);
            old
        };
        drop(replaced);
        // A registration replaced goes outside the lock: dropping it wakes
        // its waiters.
        drop(self.registration.replace((token, fd)));
        Ok(())
    }

    fn rewatch(
        &mut self,
        registry: &TokioRegistry,
        token: usize,
        writable: bool,
    ) -> io::Result<()> {
        let mut state = registry.0.lock();
        match state.sockets.get_mut(&token) {
            Some(entry) => {
                entry.writable = writable;
                let _ = Shared::mark(&mut state, token);
                Ok(())
            }
            None => {
                drop(state);
                self.watch(registry, token, writable)
            }
        }
    }

    fn unwatch(&mut self, registry: &TokioRegistry) -> io::Result<()> {
        let Some((token, fd)) = self.registration.take() else {
            return Ok(());
        };
        let removed = registry.0.lock().sockets.remove(&token);
        // Outside the lock: deregistering wakes the socket's waker.
        drop(removed);
        drop(fd);
        Ok(())
    }
}

/// A poller over tokio's reactor: it reports the sockets woken since the
/// last pass, and never waits (the driver task waits instead).
pub struct TokioPoller {
    reactor: Arc<Shared>,
    events: Vec<TokioEvent>,
    /// The sockets to ask tokio about on this pass (the room kept from
    /// pass to pass).
    asked: Vec<Asked>,
}

/// A socket to ask about: its token, registration, whether it wants to
/// write, and its waker.
type Asked = (usize, Weak<AsyncFd<OwnedFd>>, bool, Waker);

/// A socket found ready.
#[derive(Debug, Clone, Copy)]
pub struct TokioEvent {
    token: usize,
    readable: bool,
    writable: bool,
    read_closed: bool,
    error: bool,
}

impl Readiness for TokioEvent {
    fn token(&self) -> usize {
        self.token
    }
    fn is_readable(&self) -> bool {
        self.readable
    }
    fn is_writable(&self) -> bool {
        self.writable
    }
    fn is_read_closed(&self) -> bool {
        self.read_closed
    }
    fn is_error(&self) -> bool {
        self.error
    }
}

/// How long a blocking wait outside the driver pauses between its passes
/// over every socket.
const BLOCKING_PAUSE: Duration = Duration::from_micros(100);

impl TokioPoller {
    /// Asks tokio whether the socket of `token` is ready, arming its waker
    /// if not; the event, if it is (its readiness then cleared: the
    /// transport reads or writes until the socket would block).
    fn ask(
        token: usize,
        fd: &AsyncFd<OwnedFd>,
        writable: bool,
        waker: &Waker,
    ) -> Option<TokioEvent> {
        let mut cx = Context::from_waker(waker);
        let mut event = TokioEvent {
            token,
            readable: false,
            writable: false,
            read_closed: false,
            error: false,
        };
        match fd.poll_read_ready(&mut cx) {
            Poll::Ready(Ok(mut guard)) => {
                let ready = guard.ready();
                event.readable = true;
                event.read_closed = ready.is_read_closed();
                event.error = ready.is_error();
                guard.clear_ready();
            }
            Poll::Ready(Err(_)) => {
                event.readable = true;
                event.error = true;
            }
            Poll::Pending => {}
        }
        if writable {
            match fd.poll_write_ready(&mut cx) {
                Poll::Ready(Ok(mut guard)) => {
                    event.writable = true;
                    event.error |= guard.ready().is_error();
                    guard.clear_ready();
                }
                Poll::Ready(Err(_)) => {
                    event.writable = true;
                    event.error = true;
                }
                Poll::Pending => {}
            }
        }
        (event.readable || event.writable).then_some(event)
    }
}

impl Poller for TokioPoller {
    type Registry = TokioRegistry;
    type Event = TokioEvent;

    fn registry(&self) -> io::Result<TokioRegistry> {
        Ok(TokioRegistry(Arc::clone(&self.reactor)))
    }

    /// With no time to wait (the driver's passes): the sockets woken since
    /// the last pass. With time (a blocking wait outside the driver, which
    /// may be running on the runtime's only thread): every socket, after a
    /// short pause.
    fn poll(&mut self, wait: Option<Duration>) -> io::Result<()> {
        self.events.clear();
        let blocking = wait.is_none_or(|w| !w.is_zero());
        if blocking {
            std::thread::sleep(wait.unwrap_or(BLOCKING_PAUSE).min(BLOCKING_PAUSE));
        }
        // The registrations are asked outside the lock: tokio may call a
        // socket's waker, which takes it.
        {
            let mut state = self.reactor.lock();
            let State { ready, sockets, .. } = &mut *state;
            let mut ask = |token: usize, entry: &mut Entry| {
                entry.queued = false;
                let waker = entry.waker.clone();
                self.asked
                    .push((token, entry.fd.clone(), entry.writable, waker));
            };
            if blocking {
                sockets.iter_mut().for_each(|(&t, entry)| ask(t, entry));
            } else {
                for token in ready.drain(..) {
                    if let Some(entry) = sockets.get_mut(&token) {
                        ask(token, entry);
                    }
                }
            }
        }
        for (token, fd, writable, waker) in self.asked.drain(..) {
            let Some(fd) = fd.upgrade() else { continue };
            if let Some(event) = Self::ask(token, &fd, writable, &waker) {
                self.events.push(event);
            }
        }
        // A socket reported ready is asked again next pass, once the
        // transport has emptied it: that arms its waker.
        let mut state = self.reactor.lock();
        for event in &self.events {
            let _ = Shared::mark(&mut state, event.token);
        }
        Ok(())
    }

    fn events(&self) -> impl Iterator<Item = &TokioEvent> {
        self.events.iter()
    }

    fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

impl<S: StreamSocket> StreamSocket for Registered<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.socket.read(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.socket.write_vectored(bufs)
    }
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
    fn connected(&mut self) -> io::Result<bool> {
        self.socket.connected()
    }
}

impl<L: ListenerSocket> ListenerSocket for Registered<L> {
    type Stream = Registered<L::Stream>;
    fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (stream, from) = self.socket.accept()?;
        Ok((Registered::new(stream), from))
    }
}

impl<D: DatagramSocket> DatagramSocket for Registered<D> {
    fn send_to_vectored(&self, bufs: &[IoSlice<'_>], to: SocketAddr) -> io::Result<usize> {
        self.socket.send_to_vectored(bufs, to)
    }
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.socket.recv_from(buf)
    }
    fn send_segments(&self, buf: &[u8], segment: usize, to: SocketAddr) -> io::Result<usize> {
        self.socket.send_segments(buf, segment, to)
    }
    fn next_refused(&self) -> io::Result<Option<SocketAddr>> {
        self.socket.next_refused()
    }
    fn recv_segments(&self, buf: &mut [u8]) -> io::Result<Segments> {
        self.socket.recv_segments(buf)
    }
}

impl Net for TokioNet {
    type Stream = Registered<mio_stream::TcpStream>;
    type Listener = Registered<mio_stream::TcpListener>;
    type Datagram = Registered<OffloadedUdp>;
    type Poller = TokioPoller;

    fn poller(&self) -> io::Result<TokioPoller> {
        Ok(TokioPoller {
            reactor: Arc::clone(&self.reactor),
            events: Vec::new(),
            asked: Vec::new(),
        })
    }

    fn listen(&self, at: SocketAddr) -> io::Result<(Self::Listener, SocketAddr)> {
        let (listener, bound) = Os.listen(at)?;
        Ok((Registered::new(listener), bound))
    }

    fn connect(
        &self,
        local: IpAddr,
        remote: SocketAddr,
        options: &StreamOptions,
    ) -> io::Result<Self::Stream> {
        Os.connect(local, remote, options).map(Registered::new)
    }

    fn tune(&self, stream: &Self::Stream, options: &StreamOptions) -> io::Result<()> {
        Os.tune(&stream.socket, options)
    }

    fn bind(&self, at: SocketAddr) -> io::Result<(Self::Datagram, SocketAddr)> {
        let (socket, bound) = Os.bind(at)?;
        Ok((Registered::new(socket), bound))
    }

    fn datagram_mtu(&self, ip: IpAddr) -> Option<usize> {
        Os.datagram_mtu(ip)
    }

    fn now(&self) -> time::Instant {
        Os.now()
    }

    fn random(&self) -> [u8; 16] {
        Os.random()
    }
}

/// The stream types of [`Os`], named where this crate has no `mio` of its
/// own.
mod mio_stream {
    pub type TcpStream = <btl_std::driver::net::Os as btl_std::driver::net::Net>::Stream;
    pub type TcpListener = <btl_std::driver::net::Os as btl_std::driver::net::Net>::Listener;
}
