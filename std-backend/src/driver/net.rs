//! The network the socket transports move bytes through, behind one
//! interface: the operating system's sockets through `mio` ([`Os`]), or a
//! simulated network (`btl-sim` runs the same transports over turmoil).
//! The TCP and UDP transports and the module are written once against it;
//! only the sockets, the readiness poller, the clock and the randomness
//! differ.

use std::io::{self, IoSlice, Read};
use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use btl_core::time;
use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token};
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};

use super::udp_offload::OffloadedUdp;

/// Socket events taken from the poller at once.
const EVENTS: usize = 256;

/// The poller token of a progress thread's waker; transports number their
/// sockets from 0 and their listeners from the middle of the range.
pub const WAKE: usize = usize::MAX;

/// A network: its sockets, its poller, its clock and its randomness.
pub trait Net: Sized + 'static {
    /// A stream connection.
    type Stream: StreamSocket + Watch<RegistryOf<Self>>;
    /// A listener for stream connections.
    type Listener: ListenerSocket<Stream = Self::Stream> + Watch<RegistryOf<Self>>;
    /// A datagram socket.
    type Datagram: DatagramSocket + Watch<RegistryOf<Self>>;
    /// What tells a module which sockets are ready.
    type Poller: Poller;

    /// Whether a busy-polling module may read its sockets without asking
    /// the poller first (one system call instead of two). A simulated
    /// network, whose poller costs nothing and reports every socket, says
    /// no.
    const READS_DIRECTLY: bool = true;

    /// A new poller.
    fn poller(&self) -> io::Result<Self::Poller>;

    /// A listener on `at` (port 0: any free one), and the address it is
    /// bound to.
    fn listen(&self, at: SocketAddr) -> io::Result<(Self::Listener, SocketAddr)>;

    /// Starts a connection from `local` to `remote`; it finishes later
    /// ([`StreamSocket::connected`]).
    fn connect(
        &self,
        local: IpAddr,
        remote: SocketAddr,
        options: &StreamOptions,
    ) -> io::Result<Self::Stream>;

    /// Applies `options` to an accepted stream.
    fn tune(&self, stream: &Self::Stream, options: &StreamOptions) -> io::Result<()>;

    /// A datagram socket on `at`, and the address it is bound to.
    fn bind(&self, at: SocketAddr) -> io::Result<(Self::Datagram, SocketAddr)>;

    /// The largest datagram payload that leaves the interface of local
    /// address `ip` whole (its MTU less the IP and UDP headers), if this
    /// network can tell.
    fn datagram_mtu(&self, _ip: IpAddr) -> Option<usize> {
        None
    }

    /// Nanoseconds on this network's monotonic clock: the engine's time.
    fn now(&self) -> time::Instant;

    /// Sixteen fresh random bytes (handshake nonces, epochs).
    fn random(&self) -> [u8; 16];
}

/// The registry of `N`'s poller.
pub type RegistryOf<N> = <<N as Net>::Poller as Poller>::Registry;

/// Socket options of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Send buffer, 0 for the kernel's autotuning.
    pub sndbuf: usize,
    /// Receive buffer, 0 for the kernel's autotuning.
    pub rcvbuf: usize,
    /// `TCP_USER_TIMEOUT`; zero leaves the kernel's.
    pub user_timeout: Duration,
    /// The congestion control of each connection (`TCP_CONGESTION`).
    pub congestion: Congestion,
}

/// A TCP congestion control algorithm by name (`cubic`, `reno`, `bbr`:
/// what `TCP_CONGESTION` takes) for every connection or only for those
/// within the host, or the system's default
/// (`net.ipv4.tcp_congestion_control`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Congestion {
    name: [u8; CONGESTION_NAME_MAX],
    len: u8,
    /// Only for connections within the host: to a loopback address, or
    /// from and to the same address.
    within_host: bool,
}

/// Longest algorithm name the kernel takes (`TCP_CA_NAME_MAX` less its
/// terminating zero).
const CONGESTION_NAME_MAX: usize = 15;

impl Congestion {
    /// The system's default: the socket is left as the kernel made it.
    pub const SYSTEM: Congestion = Congestion {
        name: [0; CONGESTION_NAME_MAX],
        len: 0,
        within_host: false,
    };

    /// CUBIC, Linux's default before some systems chose BBR: it paces
    /// nothing.
    pub const CUBIC: Congestion = Congestion {
        name: *b"cubic\0\0\0\0\0\0\0\0\0\0",
        len: 5,
        within_host: false,
    };

    /// CUBIC within the host, the system's between hosts: BBR (the
    /// default some systems choose) paces a connection to what it
    /// measures, and between two processes of one host that is below what
    /// its memory moves (the book's TCP chapter measures both), while
    /// between hosts its pacing is what the network's owner chose.
    pub const AUTO: Congestion = Congestion {
        within_host: true,
        ..Congestion::CUBIC
    };

    /// `auto` ([`AUTO`](Self::AUTO)), `system` (or nothing) for the
    /// system's, or an algorithm's name for every connection: 1 to 15
    /// lowercase letters, digits or `_`, as the kernel's are.
    pub fn parse(name: &str) -> Result<Congestion, String> {
        let name = name.trim();
        if name.is_empty() || name == "system" {
            return Ok(Congestion::SYSTEM);
        }
        if name == "auto" {
            return Ok(Congestion::AUTO);
        }
        let valid = name.len() <= CONGESTION_NAME_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(format!(
                "`{name}` is not auto, system, or an algorithm name like cubic"
            ));
        }
        let mut c = Congestion::SYSTEM;
        c.name[..name.len()].copy_from_slice(name.as_bytes());
        c.len = name.len() as u8;
        Ok(c)
    }

    /// Whether it is for a connection between `ends` (local, remote):
    /// any, or one within the host (to a loopback address, or from and to
    /// the same address; IPv4-mapped addresses as IPv4). Ends unknown are
    /// taken for two hosts.
    pub fn applies(&self, ends: Option<(IpAddr, IpAddr)>) -> bool {
        if !self.within_host {
            return true;
        }
        ends.is_some_and(|(local, remote)| {
            let (local, remote) = (local.to_canonical(), remote.to_canonical());
            remote.is_loopback() || local == remote
        })
    }

    /// The algorithm's name; `None` for the system's.
    pub fn name(&self) -> Option<&str> {
        std::str::from_utf8(&self.name[..usize::from(self.len)])
            .ok()
            .filter(|n| !n.is_empty())
    }

    /// Whether this kernel gives a new TCP socket this algorithm (it is
    /// built in, or loaded, and allowed to this process:
    /// `net.ipv4.tcp_allowed_congestion_control`); the error says why not.
    pub fn check(&self) -> io::Result<()> {
        // An IPv6 socket where the host has no IPv4.
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .or_else(|_| Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)))?;
        set_congestion(&SockRef::from(&socket), self)
    }
}

impl std::fmt::Display for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            None => f.write_str("system"),
            Some(_) if *self == Congestion::AUTO => f.write_str("auto"),
            Some(name) => f.write_str(name),
        }
    }
}

/// Sets `congestion` on `socket`, if it names one.
fn set_congestion(socket: &SockRef<'_>, congestion: &Congestion) -> io::Result<()> {
    let Some(name) = congestion.name() else {
        return Ok(());
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    return socket.set_tcp_congestion(name.as_bytes());
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (socket, name);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "TCP_CONGESTION is Linux's",
        ))
    }
}

/// A stream connection, non-blocking: an operation that would wait fails
/// with `WouldBlock`.
pub trait StreamSocket {
    /// Reads what is there; 0 at the end of the stream.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes what fits.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    /// The address of the other end.
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    /// The address of this end, where the network tells it (for a
    /// capture's description of the connection).
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Whether a connect begun by [`Net::connect`] finished: `Ok(true)`
    /// connected, `Ok(false)` not yet, an error if it failed.
    fn connected(&mut self) -> io::Result<bool>;
}

/// A listener, non-blocking.
pub trait ListenerSocket {
    /// The streams it accepts.
    type Stream;
    /// The next connection, or `WouldBlock`.
    fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)>;
}

/// A datagram socket, non-blocking.
pub trait DatagramSocket {
    /// Sends one datagram of `bufs` to `to`.
    fn send_to_vectored(&self, bufs: &[IoSlice<'_>], to: SocketAddr) -> io::Result<usize>;
    /// Receives one datagram.
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)>;

    /// Sends `buf` to `to` as datagrams of `segment` bytes, the last one
    /// possibly shorter, in as few calls as the platform allows. Returns
    /// the bytes of the datagrams that went (whole ones, from the start),
    /// or the error if none did.
    fn send_segments(&self, buf: &[u8], segment: usize, to: SocketAddr) -> io::Result<usize> {
        send_one_by_one(self, buf, segment, to)
    }

    /// The address of the next datagram sent that its destination refused
    /// (an ICMP port unreachable: nothing listens there), where the
    /// platform reports it; `None` when none is left to report. Looked at
    /// after a receive failed, as one does when such a refusal comes.
    fn next_refused(&self) -> io::Result<Option<SocketAddr>> {
        Ok(None)
    }

    /// Receives one datagram, or several from one sender that the platform
    /// has joined, each of [`Segments::segment`] bytes but the last.
    fn recv_segments(&self, buf: &mut [u8]) -> io::Result<Segments> {
        let (len, from) = self.recv_from(buf)?;
        Ok(Segments {
            len,
            segment: len.max(1),
            from,
        })
    }
}

/// What one [`DatagramSocket::recv_segments`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segments {
    /// Bytes read.
    pub len: usize,
    /// Size of each datagram in them but the last (at least 1).
    pub segment: usize,
    /// Their sender.
    pub from: SocketAddr,
}

/// [`DatagramSocket::send_segments`] one datagram per call.
pub(crate) fn send_one_by_one<D: DatagramSocket + ?Sized>(
    socket: &D,
    buf: &[u8],
    segment: usize,
    to: SocketAddr,
) -> io::Result<usize> {
    let mut sent = 0;
    for datagram in buf.chunks(segment.max(1)) {
        match socket.send_to_vectored(&[IoSlice::new(datagram)], to) {
            Ok(_) => sent += datagram.len(),
            Err(e) if sent == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(sent)
}

/// Registration of a socket with a poller's registry, under a token.
pub trait Watch<R> {
    /// Starts watching: for reading, and for writing if `writable`.
    fn watch(&mut self, registry: &R, token: usize, writable: bool) -> io::Result<()>;
    /// Changes what is watched.
    fn rewatch(&mut self, registry: &R, token: usize, writable: bool) -> io::Result<()>;
    /// Stops watching.
    fn unwatch(&mut self, registry: &R) -> io::Result<()>;
}

/// What tells a module which of its sockets are ready.
pub trait Poller {
    /// Where sockets are registered.
    type Registry;
    /// A readiness event.
    type Event: Readiness;

    /// A handle on the registry that stays with the module while the
    /// poller is elsewhere (a progress thread).
    fn registry(&self) -> io::Result<Self::Registry>;
    /// Waits up to `wait` (forever if `None`) for events; an interrupted
    /// wait is an empty one.
    fn poll(&mut self, wait: Option<Duration>) -> io::Result<()>;
    /// The events of the last poll.
    fn events(&self) -> impl Iterator<Item = &Self::Event>;
    /// Whether the last poll reported nothing.
    fn is_empty(&self) -> bool;
}

/// One readiness event.
pub trait Readiness {
    /// The token the socket was registered under.
    fn token(&self) -> usize;
    /// Bytes (or a connection) to read.
    fn is_readable(&self) -> bool;
    /// Room to write (or a connect finished).
    fn is_writable(&self) -> bool;
    /// The other end closed its side.
    fn is_read_closed(&self) -> bool;
    /// The socket has an error.
    fn is_error(&self) -> bool;
}

/// The operating system's network, through `mio` and `socket2`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Os;

/// A `mio` poller, the room for its events, and its waker once a progress
/// thread asked for one (a poll has one waker for its whole life).
pub struct OsPoller {
    pub(crate) poll: Poll,
    pub(crate) events: Events,
    waker: Option<std::sync::Arc<mio::Waker>>,
}

impl OsPoller {
    /// The poller's waker, its events under [`WAKE`].
    pub(crate) fn waker(&mut self) -> io::Result<std::sync::Arc<mio::Waker>> {
        if let Some(w) = &self.waker {
            return Ok(w.clone());
        }
        let w = std::sync::Arc::new(mio::Waker::new(self.poll.registry(), Token(WAKE))?);
        self.waker = Some(w.clone());
        Ok(w)
    }
}

impl Poller for OsPoller {
    type Registry = mio::Registry;
    type Event = mio::event::Event;

    fn registry(&self) -> io::Result<mio::Registry> {
        self.poll.registry().try_clone()
    }

    fn poll(&mut self, wait: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, wait) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                self.events.clear();
                Ok(())
            }
            r => r,
        }
    }

    fn events(&self) -> impl Iterator<Item = &mio::event::Event> {
        self.events.iter()
    }

    fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

impl Readiness for mio::event::Event {
    fn token(&self) -> usize {
        mio::event::Event::token(self).0
    }
    fn is_readable(&self) -> bool {
        mio::event::Event::is_readable(self)
    }
    fn is_writable(&self) -> bool {
        mio::event::Event::is_writable(self)
    }
    fn is_read_closed(&self) -> bool {
        mio::event::Event::is_read_closed(self)
    }
    fn is_error(&self) -> bool {
        mio::event::Event::is_error(self)
    }
}

fn interest(writable: bool) -> Interest {
    if writable {
        Interest::READABLE | Interest::WRITABLE
    } else {
        Interest::READABLE
    }
}

impl<S: mio::event::Source> Watch<mio::Registry> for S {
    fn watch(&mut self, registry: &mio::Registry, token: usize, writable: bool) -> io::Result<()> {
        registry.register(self, Token(token), interest(writable))
    }
    fn rewatch(
        &mut self,
        registry: &mio::Registry,
        token: usize,
        writable: bool,
    ) -> io::Result<()> {
        registry.reregister(self, Token(token), interest(writable))
    }
    fn unwatch(&mut self, registry: &mio::Registry) -> io::Result<()> {
        registry.deregister(self)
    }
}

impl StreamSocket for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Read::read(self, buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // `sendmsg`, not `writev`: the socket call skips the file layer
        // (0.2 to 0.4 µs of a small message's one-way latency on
        // loopback), and a peer gone away is an error, not a SIGPIPE.
        let socket = SockRef::from(&*self);
        match bufs {
            // One piece (a small message, header and payload together):
            // `send`, which spares the kernel the vector's import.
            [one] => socket.send_with_flags(one, SEND_FLAGS),
            _ => socket.send_vectored_with_flags(bufs, SEND_FLAGS),
        }
    }
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::peer_addr(self)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::local_addr(self)
    }
    fn connected(&mut self) -> io::Result<bool> {
        if let Some(e) = self.take_error()? {
            return Err(e);
        }
        match TcpStream::peer_addr(self) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl ListenerSocket for TcpListener {
    type Stream = TcpStream;
    fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
        TcpListener::accept(self)
    }
}

/// The process's clock origin: engine time is nanoseconds since it.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Net for Os {
    type Stream = TcpStream;
    type Listener = TcpListener;
    type Datagram = OffloadedUdp;
    type Poller = OsPoller;

    fn poller(&self) -> io::Result<OsPoller> {
        Ok(OsPoller {
            poll: Poll::new()?,
            events: Events::with_capacity(EVENTS),
            waker: None,
        })
    }

    fn listen(&self, at: SocketAddr) -> io::Result<(TcpListener, SocketAddr)> {
        let socket = Socket::new(Domain::for_address(at), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        if at.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&SockAddr::from(at))?;
        socket.listen(BACKLOG)?;
        let listener = TcpListener::from_std(socket.into());
        let bound = listener.local_addr()?;
        Ok((listener, bound))
    }

    fn connect(
        &self,
        local: IpAddr,
        remote: SocketAddr,
        options: &StreamOptions,
    ) -> io::Result<TcpStream> {
        let socket = Socket::new(
            Domain::for_address(remote),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        socket.set_nonblocking(true)?;
        configure(&SockRef::from(&socket), options, Some((local, remote.ip())))?;
        // The local address picks the interface of the pair.
        socket.bind(&SockAddr::from(SocketAddr::new(local, 0)))?;
        match socket.connect(&SockAddr::from(remote)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(TcpStream::from_std(socket.into()))
    }

    fn tune(&self, stream: &TcpStream, options: &StreamOptions) -> io::Result<()> {
        // A connection the peer reset already has no peer address: it is
        // tuned all the same, and fails at its first read.
        let ends = stream
            .local_addr()
            .and_then(|l| Ok((l.ip(), stream.peer_addr()?.ip())));
        configure(&SockRef::from(stream), options, ends.ok())
    }

    fn bind(&self, at: SocketAddr) -> io::Result<(OffloadedUdp, SocketAddr)> {
        let socket = Socket::new(Domain::for_address(at), Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_nonblocking(true)?;
        socket.set_recv_buffer_size(DATAGRAM_RCVBUF)?;
        if at.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&SockAddr::from(at))?;
        let socket = OffloadedUdp::new(UdpSocket::from_std(socket.into()));
        let bound = socket.local_addr()?;
        Ok((socket, bound))
    }

    fn datagram_mtu(&self, ip: IpAddr) -> Option<usize> {
        crate::transports::interfaces::datagram_mtu(ip)
    }

    fn now(&self) -> time::Instant {
        time::Instant::ZERO + origin().elapsed().into()
    }

    fn random(&self) -> [u8; 16] {
        let mut n = [0u8; 16];
        // The OS generator does not fail once the system is up; were it
        // to, zero bytes still work, only less fresh.
        let _ = getrandom::fill(&mut n);
        n
    }
}

/// Flags of every stream send: no SIGPIPE where the platform can say so.
#[cfg(any(target_os = "linux", target_os = "android"))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const SEND_FLAGS: libc::c_int = 0;

/// Pending connections a listener queues.
const BACKLOG: i32 = 128;

/// The receive buffer of a datagram socket: a peer's whole window (64
/// packets) of the largest datagrams (64 KiB), so that a burst the window
/// allows is not dropped by the kernel while the receiver is busy (each
/// drop costs a retransmission timeout). The kernel caps it at
/// `net.core.rmem_max`; its default (208 KiB) held a fifth of that.
const DATAGRAM_RCVBUF: usize = 4 << 20;

/// TCP_NODELAY always; buffer sizes only when set (0 leaves the kernel's
/// autotuning, which a fixed size can halve on fast links); the user
/// timeout that gives up a link whose data stays unacknowledged; the
/// congestion control, if it is for a connection between `ends` (local,
/// remote) and the kernel gives it.
fn configure(
    socket: &SockRef<'_>,
    options: &StreamOptions,
    ends: Option<(IpAddr, IpAddr)>,
) -> io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    // A tuning, not a condition of the connection: a name the kernel
    // refuses leaves the system's (the component warned when it read it).
    if options.congestion.applies(ends) {
        let _ = set_congestion(socket, &options.congestion);
    }
    if options.sndbuf > 0 {
        socket.set_send_buffer_size(options.sndbuf)?;
    }
    if options.rcvbuf > 0 {
        socket.set_recv_buffer_size(options.rcvbuf)?;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if !options.user_timeout.is_zero() {
        socket.set_tcp_user_timeout(Some(options.user_timeout))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_congestion_control_is_a_kernel_name_or_the_systems() {
        assert_eq!(Congestion::parse("system"), Ok(Congestion::SYSTEM));
        assert_eq!(Congestion::parse(""), Ok(Congestion::SYSTEM));
        assert_eq!(Congestion::parse("cubic"), Ok(Congestion::CUBIC));
        assert_eq!(
            Congestion::parse(" bbr ").map(|c| c.to_string()),
            Ok("bbr".into())
        );
        assert_eq!(Congestion::SYSTEM.to_string(), "system");
        assert_eq!(Congestion::parse("auto"), Ok(Congestion::AUTO));
        assert_eq!(Congestion::AUTO.to_string(), "auto");
        assert_eq!(Congestion::AUTO.name(), Some("cubic"));
        let (lo, here, there): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.1".parse().expect("an address"),
            "10.1.0.1".parse().expect("an address"),
            "10.1.0.2".parse().expect("an address"),
        );
        assert!(Congestion::AUTO.applies(Some((lo, lo))));
        assert!(Congestion::AUTO.applies(Some((here, here))));
        assert!(
            !Congestion::AUTO.applies(Some((here, there))),
            "between hosts"
        );
        assert!(!Congestion::AUTO.applies(None), "ends unknown");
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("an address");
        assert!(Congestion::AUTO.applies(Some((mapped, mapped))));
        assert!(
            Congestion::CUBIC.applies(Some((here, there))),
            "a name is for all"
        );
        assert!(Congestion::CUBIC.applies(None));
        assert_eq!(Congestion::SYSTEM.name(), None);
        for bad in ["Cubic", "cu-bic", "a_name_of_sixteen"] {
            let error = Congestion::parse(bad).expect_err(bad);
            assert!(error.contains(bad) && error.contains("system"), "{error}");
        }
    }

    /// The algorithm `socket` has, as the kernel names it.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn algorithm(socket: &Socket) -> std::string::String {
        let name = socket.tcp_congestion().expect("TCP_CONGESTION");
        std::string::String::from_utf8_lossy(&name)
            .trim_end_matches('\0')
            .to_owned()
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_connection_gets_the_congestion_control_asked_for_or_keeps_the_systems() {
        let socket =
            || Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("a socket");
        let system = algorithm(&socket());
        let (lo, here, there): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.1".parse().expect("an address"),
            "10.1.0.1".parse().expect("an address"),
            "10.1.0.2".parse().expect("an address"),
        );
        let with = |congestion| StreamOptions {
            sndbuf: 0,
            rcvbuf: 0,
            user_timeout: Duration::ZERO,
            congestion,
        };
        // Reno is built into every Linux kernel.
        let reno = Congestion::parse("reno").expect("a name");
        reno.check().expect("reno is always there");
        let s = socket();
        configure(&SockRef::from(&s), &with(reno), Some((here, there))).expect("configured");
        assert_eq!(algorithm(&s), "reno", "a name is for every connection");
        // Auto: cubic within the host, the system's between hosts.
        let s = socket();
        configure(&SockRef::from(&s), &with(Congestion::AUTO), Some((lo, lo))).expect("configured");
        assert_eq!(algorithm(&s), "cubic");
        let s = socket();
        configure(
            &SockRef::from(&s),
            &with(Congestion::AUTO),
            Some((here, there)),
        )
        .expect("configured");
        assert_eq!(algorithm(&s), system, "between hosts");
        // One the kernel does not know fails the check, not the connection.
        let unknown = Congestion::parse("no_such_cc").expect("a name");
        assert!(unknown.check().is_err());
        let s = socket();
        configure(&SockRef::from(&s), &with(unknown), Some((lo, lo)))
            .expect("configured all the same");
        assert_eq!(algorithm(&s), system, "unchanged");
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn both_ends_of_a_connection_within_the_host_take_the_auto_choice() {
        let options = StreamOptions {
            sndbuf: 0,
            rcvbuf: 0,
            user_timeout: Duration::ZERO,
            congestion: Congestion::AUTO,
        };
        let lo: IpAddr = "127.0.0.1".parse().expect("an address");
        let (listener, at) = Os.listen(SocketAddr::new(lo, 0)).expect("a listener");
        let client = Os.connect(lo, at, &options).expect("connecting");
        let start = Instant::now();
        let server = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(start.elapsed() < Duration::from_secs(5), "never accepted");
                    std::thread::yield_now();
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        Os.tune(&server, &options).expect("tuned");
        let name = |s: &TcpStream| {
            let name = SockRef::from(s).tcp_congestion().expect("TCP_CONGESTION");
            std::string::String::from_utf8_lossy(&name)
                .trim_end_matches('\0')
                .to_owned()
        };
        assert_eq!(
            (name(&client), name(&server)),
            ("cubic".into(), "cubic".into())
        );
    }
}
