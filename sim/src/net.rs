//! [`SimNet`]: btl-std's [`Net`] over turmoil's simulated TCP and UDP, so
//! that the very transports and module of the std backend run between
//! simulated hosts.
//!
//! turmoil's sockets are asynchronous; the driver's are non-blocking. Each
//! operation is polled once with a waker that does nothing: ready means
//! done, pending means `WouldBlock`. A connect is a future kept in its
//! stream until it resolves. The poller costs nothing, so it gives every
//! registered socket to try on each pass, and the transports try them all
//! (a read that finds nothing is a `WouldBlock`, as over the OS). Time is
//! turmoil's simulated clock and randomness a seeded generator: a run is a
//! function of its seed. turmoil loses and reorders datagrams; `SimNet`
//! adds duplication.
//!
//! btl-tokio's async face runs over it too (`SimNet` is a
//! [`Reactor`](btl_tokio::Reactor)): a host's `Endpoint`, made with
//! `Endpoint::spawn_local` (the module is not `Send`), passes over the
//! sockets once per simulated step.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use btl_std::driver::net::{
    DatagramSocket, ListenerSocket, Net, Poller, Readiness, StreamOptions, StreamSocket, Watch,
};
use tokio::io::{AsyncRead, ReadBuf};

/// A simulated network as one host sees it: turmoil's sockets, its clock,
/// and a generator seeded for this start of this host.
#[derive(Debug)]
pub struct SimNet {
    random: Random,
    /// Datagrams sent twice, in thousandths: turmoil loses and reorders
    /// datagrams, but never duplicates them.
    duplication: u16,
}

/// SplitMix64, shared by a host's network and its datagram sockets: a
/// bijection of a counter, deterministic from its seed. (Atomic only so
/// that a socket may be `Send`, as a verbs module's side channel must be:
/// a simulation runs on one thread.)
#[derive(Debug, Clone)]
struct Random(Arc<AtomicU64>);

impl Random {
    fn next(&self) -> u64 {
        let s = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl SimNet {
    /// The network of a host whose randomness (handshake nonces, the
    /// epoch) comes from `seed`: give each start of each host its own.
    pub fn new(seed: u64) -> Self {
        SimNet {
            random: Random(Arc::new(AtomicU64::new(seed))),
            duplication: 0,
        }
    }

    /// Sends `per_mille` thousandths of the datagrams twice.
    pub fn with_duplication(mut self, per_mille: u16) -> Self {
        self.duplication = per_mille;
        self
    }

    fn next(&self) -> u64 {
        self.random.next()
    }
}

/// Polls `f` once, with a waker that does nothing.
fn poll_once<T>(f: Pin<&mut dyn Future<Output = T>>) -> Poll<T> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// The registry of a [`SimPoller`]: the registered tokens and whether each
/// wants to write.
type Tokens = Rc<RefCell<BTreeMap<usize, bool>>>;

/// A poller that gives every registered socket to try, in token order, on
/// every poll. It never finds one ready, and says so (`is_empty`): a pass
/// moved something only if its reads brought bytes.
#[derive(Debug, Default)]
pub struct SimPoller {
    tokens: Tokens,
    events: Vec<SimEvent>,
}

/// "Try this socket": every registered socket, on every poll.
#[derive(Debug, Clone, Copy)]
pub struct SimEvent {
    token: usize,
    writable: bool,
}

impl Readiness for SimEvent {
    fn token(&self) -> usize {
        self.token
    }
    fn is_readable(&self) -> bool {
        true
    }
    fn is_writable(&self) -> bool {
        self.writable
    }
    fn is_read_closed(&self) -> bool {
        false
    }
    fn is_error(&self) -> bool {
        false
    }
}

impl Poller for SimPoller {
    type Registry = Tokens;
    type Event = SimEvent;

    fn registry(&self) -> io::Result<Tokens> {
        Ok(self.tokens.clone())
    }

    /// Never waits: simulated time passes between the host's passes.
    fn poll(&mut self, _wait: Option<Duration>) -> io::Result<()> {
        self.events.clear();
        self.events.extend(
            self.tokens
                .borrow()
                .iter()
                .map(|(&token, &writable)| SimEvent { token, writable }),
        );
        Ok(())
    }

    fn events(&self) -> impl Iterator<Item = &SimEvent> {
        self.events.iter()
    }

    /// Always: the events are every socket to try, not readiness found,
    /// so whether a pass over them moved anything is what its reads
    /// brought. (An async driver that took them for readiness would pass
    /// again and again within one step, and simulated time, which moves
    /// only once every task of the host waits, would stand still.)
    fn is_empty(&self) -> bool {
        true
    }
}

/// The token a socket is registered under, for [`Watch`].
#[derive(Debug, Default)]
struct Registered(Option<usize>);

impl Registered {
    fn watch(&mut self, tokens: &Tokens, token: usize, writable: bool) -> io::Result<()> {
        tokens.borrow_mut().insert(token, writable);
        self.0 = Some(token);
        Ok(())
    }

    fn unwatch(&mut self, tokens: &Tokens) -> io::Result<()> {
        if let Some(token) = self.0.take() {
            tokens.borrow_mut().remove(&token);
        }
        Ok(())
    }
}

/// [`Watch`] for a socket type with a `registered` field.
macro_rules! watched {
    ($($socket:ty),*) => {$(
        impl Watch<Tokens> for $socket {
            fn watch(&mut self, tokens: &Tokens, token: usize, writable: bool) -> io::Result<()> {
                self.registered.watch(tokens, token, writable)
            }
            fn rewatch(&mut self, tokens: &Tokens, token: usize, writable: bool) -> io::Result<()> {
                self.registered.watch(tokens, token, writable)
            }
            fn unwatch(&mut self, tokens: &Tokens) -> io::Result<()> {
                self.registered.unwatch(tokens)
            }
        }
    )*};
}

watched!(SimStream, SimListener, SimDatagram);

/// A connect under way, resolving to a stream.
type Connecting = Pin<Box<dyn Future<Output = io::Result<turmoil::net::TcpStream>>>>;

enum StreamState {
    Connecting(Connecting),
    Open(turmoil::net::TcpStream),
}

/// A simulated TCP stream.
pub struct SimStream {
    state: StreamState,
    registered: Registered,
}

impl std::fmt::Debug for SimStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            StreamState::Connecting(_) => "connecting",
            StreamState::Open(_) => "open",
        };
        write!(f, "SimStream({state})")
    }
}

fn would_block() -> io::Error {
    io::ErrorKind::WouldBlock.into()
}

impl StreamSocket for SimStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let StreamState::Open(stream) = &mut self.state else {
            return Err(would_block());
        };
        let mut read = ReadBuf::new(buf);
        match Pin::new(stream).poll_read(&mut Context::from_waker(Waker::noop()), &mut read) {
            Poll::Ready(Ok(())) => Ok(read.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(would_block()),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let StreamState::Open(stream) = &self.state else {
            return Err(would_block());
        };
        let mut written = 0;
        for buf in bufs {
            match stream.try_write(buf) {
                Ok(n) => {
                    written += n;
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && written > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.state {
            StreamState::Open(stream) => stream.peer_addr(),
            StreamState::Connecting(_) => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn connected(&mut self) -> io::Result<bool> {
        let StreamState::Connecting(connect) = &mut self.state else {
            return Ok(true);
        };
        match poll_once(connect.as_mut()) {
            Poll::Ready(Ok(stream)) => {
                self.state = StreamState::Open(stream);
                Ok(true)
            }
            // Turmoil drops the SYN's answer alike whether the port is
            // closed or a partition ate the SYN, and calls both refused. A
            // refusal means the process is gone (the engine gives such a
            // peer up quickly), so it is said only where it is sure: never
            // here. A simulated connect fails as across a partition.
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                Err(io::Error::new(io::ErrorKind::TimedOut, e))
            }
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(false),
        }
    }
}

/// A simulated TCP listener.
pub struct SimListener {
    listener: turmoil::net::TcpListener,
    registered: Registered,
}

impl ListenerSocket for SimListener {
    type Stream = SimStream;

    /// turmoil's accept takes a pending connection without waiting once
    /// there is one, so a future polled once and dropped loses nothing.
    fn accept(&mut self) -> io::Result<(SimStream, SocketAddr)> {
        let mut accept = std::pin::pin!(self.listener.accept());
        match poll_once(accept.as_mut()) {
            Poll::Ready(Ok((stream, from))) => Ok((
                SimStream {
                    state: StreamState::Open(stream),
                    registered: Registered::default(),
                },
                from,
            )),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(would_block()),
        }
    }
}

/// A simulated UDP socket.
pub struct SimDatagram {
    socket: turmoil::net::UdpSocket,
    registered: Registered,
    /// A datagram's slices joined, kept from send to send.
    joined: RefCell<Vec<u8>>,
    /// Datagrams sent twice, in thousandths, by the host's generator.
    duplication: u16,
    random: Random,
}

impl DatagramSocket for SimDatagram {
    fn send_to_vectored(&self, bufs: &[IoSlice<'_>], to: SocketAddr) -> io::Result<usize> {
        let mut joined = self.joined.borrow_mut();
        joined.clear();
        for buf in bufs {
            joined.extend_from_slice(buf);
        }
        let sent = self.socket.try_send_to(&joined, to)?;
        if self.duplication > 0 && self.random.next() % 1000 < u64::from(self.duplication) {
            // The copy is the network's doing: its fate is not the sender's.
            let _ = self.socket.try_send_to(&joined, to);
        }
        Ok(sent)
    }

    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.socket.try_recv_from(buf)
    }
}

/// turmoil binds the unspecified address only: a socket for `at` is bound
/// to its port there, and peers reach it at `at`.
fn unspecified(at: SocketAddr) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), at.port())
}

/// Completes an operation that turmoil declares asynchronous but finishes
/// at once (binding).
fn at_once<T>(f: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    let mut f = std::pin::pin!(f);
    match poll_once(f.as_mut()) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(io::Error::other("turmoil's bind did not finish at once")),
    }
}

impl Net for SimNet {
    type Stream = SimStream;
    type Listener = SimListener;
    type Datagram = SimDatagram;
    type Poller = SimPoller;

    const READS_DIRECTLY: bool = false;

    fn poller(&self) -> io::Result<SimPoller> {
        Ok(SimPoller::default())
    }

    fn listen(&self, at: SocketAddr) -> io::Result<(SimListener, SocketAddr)> {
        let listener = at_once(turmoil::net::TcpListener::bind(unspecified(at)))?;
        let port = listener.local_addr()?.port();
        let listener = SimListener {
            listener,
            registered: Registered::default(),
        };
        Ok((listener, SocketAddr::new(at.ip(), port)))
    }

    fn connect(
        &self,
        _local: IpAddr,
        remote: SocketAddr,
        _options: &StreamOptions,
    ) -> io::Result<SimStream> {
        Ok(SimStream {
            state: StreamState::Connecting(Box::pin(turmoil::net::TcpStream::connect(remote))),
            registered: Registered::default(),
        })
    }

    fn tune(&self, _stream: &SimStream, _options: &StreamOptions) -> io::Result<()> {
        Ok(())
    }

    fn bind(&self, at: SocketAddr) -> io::Result<(SimDatagram, SocketAddr)> {
        let socket = at_once(turmoil::net::UdpSocket::bind(unspecified(at)))?;
        let port = socket.local_addr()?.port();
        let socket = SimDatagram {
            socket,
            registered: Registered::default(),
            joined: RefCell::new(Vec::new()),
            duplication: self.duplication,
            random: self.random.clone(),
        };
        Ok((socket, SocketAddr::new(at.ip(), port)))
    }

    fn now(&self) -> btl_core::time::Instant {
        btl_core::time::Instant::ZERO + turmoil::elapsed().into()
    }

    fn random(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next().to_le_bytes());
        out[8..].copy_from_slice(&self.next().to_le_bytes());
        out
    }
}

/// The network of btl-tokio's async face over the simulation: an
/// [`Endpoint`](btl_tokio::Endpoint) over `SimNet`. turmoil's sockets are
/// polled with a waker that does nothing, so none of them can wake the
/// endpoint's driver task: it passes over them on a fixed tick instead.
impl btl_tokio::Reactor for SimNet {
    /// 100 µs: turmoil's step in the scenarios, and the pause between two
    /// passes of their hosts. tokio's timer counts whole milliseconds, and
    /// a step of a millisecond or less moves a host's clock on to the next
    /// one, so a sleep this short ends at the host's next step: an idle
    /// endpoint makes one pass per step, as a scenario's host does, and
    /// serves an engine timer at most a step late.
    const TICK: Option<Duration> = Some(Duration::from_micros(100));

    /// Nothing: no socket can wake the driver, which waits for its tick.
    fn wake_on_ready(&self, _waker: &Waker) {}

    /// Never: what is ready is found by trying every socket on each pass.
    fn has_ready(&self) -> bool {
        false
    }
}
