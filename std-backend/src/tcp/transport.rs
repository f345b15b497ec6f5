//! The TCP transport: listeners on the selected addresses, connections to
//! peers over paired addresses, and the bytes between sockets and engine.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use btl_core::endpoint::ProcName;
use btl_core::engine::{ConnectRequest, LinkId};
use ipnet::IpNet;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::TcpConfig;
use super::conn::{Conn, ConnState, ReadOutcome};
use crate::bootstrap::{Bootstrap, Card, Contact};
use crate::contacts::PeerContacts;
use crate::engine_cell::StdEngine;
use crate::interfaces;
use crate::listen::listen_all;
use crate::module::{Transport, log_link_end, nonce};

/// Component name in cards and parameters.
pub const NAME: &str = "tcp";
/// Tokens from here down name listeners; connections count up from 0.
const LISTENER_BASE: usize = usize::MAX / 2;
/// Pending connections a listener queues.
const BACKLOG: i32 = 128;

/// The TCP side of a module.
pub struct Tcp {
    me: ProcName,
    config: TcpConfig,
    bootstrap: Arc<dyn Bootstrap>,
    listeners: Vec<(TcpListener, Contact)>,
    conns: Vec<Option<Conn>>,
    by_link: HashMap<LinkId, usize>,
    /// Each reachable peer's TCP contacts, as it published them.
    peers: PeerContacts,
}

impl Tcp {
    /// Listens on the addresses `config` selects (or those a static peer
    /// list assigns `me`), registers the listeners with `registry` and
    /// publishes this process's card.
    pub fn start(
        me: ProcName,
        config: TcpConfig,
        bootstrap: Arc<dyn Bootstrap>,
        registry: &Registry,
    ) -> io::Result<Self> {
        let mut listeners = listen_all(
            me,
            NAME,
            &*bootstrap,
            &config.selection,
            config.ports,
            |at| {
                let listener = bind_listener(at)?;
                let bound = listener.local_addr()?;
                Ok((listener, bound))
            },
        )?;
        let mut card = Card::new(me);
        for (i, (listener, contact)) in listeners.iter_mut().enumerate() {
            registry.register(listener, Token(LISTENER_BASE + i), Interest::READABLE)?;
            card.contacts.push(contact.clone());
        }
        bootstrap.publish(&card).map_err(io::Error::other)?;
        Ok(Tcp {
            me,
            config,
            bootstrap,
            listeners,
            conns: Vec::new(),
            by_link: HashMap::new(),
            peers: PeerContacts::new(NAME),
        })
    }

    /// The contacts this process listens on.
    pub fn contacts(&self) -> impl Iterator<Item = &Contact> {
        self.listeners.iter().map(|(_, c)| c)
    }

    /// Bytes read from every open connection so far.
    fn received(&self) -> u64 {
        self.conns.iter().flatten().map(|c| c.received).sum()
    }

    /// Open connections, for tests and `btl info`.
    pub fn open_connections(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.link().is_some())
            .count()
    }

    /// The (local, remote) addresses of link `index` to `proc`.
    fn pair_for(&self, proc: ProcName, index: u8) -> Option<(IpNet, SocketAddr)> {
        let mine: Vec<Contact> = self.contacts().cloned().collect();
        interfaces::link_addresses(
            (self.me, &mine),
            (proc, self.peers.get(proc)?),
            self.config.links,
            index,
        )
    }

    fn insert(&mut self, conn: Conn, registry: &Registry) -> io::Result<usize> {
        let i = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let mut conn = conn;
        let interest = match conn.state {
            ConnState::Connecting { .. } => Interest::READABLE | Interest::WRITABLE,
            ConnState::Open(_) => Interest::READABLE,
        };
        registry.register(&mut conn.stream, Token(i), interest)?;
        conn.write_interest = interest.is_writable();
        self.conns[i] = Some(conn);
        Ok(i)
    }

    fn remove(&mut self, i: usize, registry: &Registry) -> Option<Conn> {
        let mut conn = self.conns.get_mut(i)?.take()?;
        let _ = registry.deregister(&mut conn.stream);
        if let Some(link) = conn.link() {
            self.by_link.remove(&link);
        }
        Some(conn)
    }

    /// A connection that broke or was closed by its peer: the engine is
    /// told and the socket dropped.
    fn broken(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, i: usize, now: u64) {
        if let Some(conn) = self.remove(i, registry) {
            match conn.state {
                ConnState::Open(link) => engine.handle_closed(link, now),
                ConnState::Connecting { req, .. } => engine.handle_connect_failed(req, now),
            }
        }
    }

    fn accept(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, l: usize, now: u64) {
        loop {
            let accepted = match self.listeners.get(l) {
                Some((listener, _)) => listener.accept(),
                None => return,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("tcp: accept failed: {e}");
                    return;
                }
            };
            if let Err(e) = configure(&socket2::SockRef::from(&stream), &self.config) {
                tracing::warn!("tcp: socket options of an accepted connection: {e}");
            }
            let link = match engine.handle_accepted(nonce(), now) {
                Ok(link) => link,
                Err(e) => {
                    tracing::warn!("tcp: connection refused: {e}");
                    continue;
                }
            };
            match self.insert(Conn::new(stream, ConnState::Open(link)), registry) {
                Ok(i) => {
                    self.by_link.insert(link, i);
                }
                Err(e) => {
                    tracing::warn!("tcp: registering an accepted connection: {e}");
                    engine.handle_closed(link, now);
                }
            }
        }
    }

    /// Our connect completed or failed (the socket became writable).
    fn connected(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let ConnState::Connecting { req, .. } = conn.state else {
            return;
        };
        let failed = match conn.stream.take_error() {
            Ok(Some(_)) | Err(_) => true,
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => false,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(_) => true,
            },
        };
        if failed {
            self.broken(engine, registry, i, now);
            return;
        }
        match engine.handle_connected(req, nonce(), now) {
            Ok(link) => {
                conn.state = ConnState::Open(link);
                self.by_link.insert(link, i);
            }
            Err(e) => {
                tracing::warn!("tcp: engine refused a connection to {}: {e}", req.proc);
                self.remove(i, registry);
                engine.handle_connect_failed(req, now);
            }
        }
    }

    /// Reads connection `i` into the engine (`closing`: the poller saw the
    /// peer's end of the stream or an error).
    fn read(
        &mut self,
        engine: &mut StdEngine<'_>,
        registry: &Registry,
        i: usize,
        now: u64,
        closing: bool,
    ) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let Some(link) = conn.link() else {
            return;
        };
        if conn.read(engine, link, now, closing) == ReadOutcome::Closed {
            self.broken(engine, registry, i, now);
        }
    }

    /// Writes connection `i`'s pending bytes; watches for writability only
    /// while some wait (as Motr's `ep_balance`).
    fn write(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let Some(link) = conn.link() else {
            return;
        };
        match conn.write(engine, link) {
            Ok(waiting) => {
                if waiting != conn.write_interest {
                    let interest = if waiting {
                        Interest::READABLE | Interest::WRITABLE
                    } else {
                        Interest::READABLE
                    };
                    if registry
                        .reregister(&mut conn.stream, Token(i), interest)
                        .is_ok()
                    {
                        conn.write_interest = waiting;
                    }
                }
            }
            Err(_) => self.broken(engine, registry, i, now),
        }
    }
}

impl Transport for Tcp {
    fn resolve(&mut self, proc: ProcName) -> bool {
        if proc == self.me {
            return false;
        }
        let timeout = self.config.lookup_timeout;
        self.peers.learn(&*self.bootstrap, proc, timeout).is_some()
            && self.pair_for(proc, 0).is_some()
    }

    fn on_event(
        &mut self,
        engine: &mut StdEngine<'_>,
        registry: &Registry,
        event: &mio::event::Event,
        now: u64,
    ) {
        let token = event.token().0;
        if token >= LISTENER_BASE {
            self.accept(engine, registry, token - LISTENER_BASE, now);
            return;
        }
        let connecting = self
            .conns
            .get(token)
            .and_then(Option::as_ref)
            .is_some_and(|c| matches!(c.state, ConnState::Connecting { .. }));
        if connecting {
            if event.is_writable() || event.is_error() || event.is_read_closed() {
                self.connected(engine, registry, token, now);
            }
            if self
                .conns
                .get(token)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.link().is_some())
            {
                self.write(engine, registry, token, now);
            }
            return;
        }
        let closing = event.is_read_closed() || event.is_error();
        if event.is_readable() || closing {
            self.read(engine, registry, token, now, closing);
        }
        if event.is_writable() {
            self.write(engine, registry, token, now);
        }
    }

    fn connect(
        &mut self,
        engine: &mut StdEngine<'_>,
        registry: &Registry,
        req: ConnectRequest,
        now: u64,
    ) {
        let Some((local, remote)) = self.pair_for(req.proc, req.link_index) else {
            engine.handle_connect_failed(req, now);
            return;
        };
        let stream = match open(local, remote, &self.config) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("tcp: connect to {} at {remote}: {e}", req.proc);
                engine.handle_connect_failed(req, now);
                return;
            }
        };
        let state = ConnState::Connecting {
            req,
            since: Instant::now(),
        };
        if self.insert(Conn::new(stream, state), registry).is_err() {
            engine.handle_connect_failed(req, now);
        }
    }

    fn close(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, link: LinkId, now: u64) {
        if let Some(conn) = self
            .by_link
            .get(&link)
            .copied()
            .and_then(|i| self.remove(i, registry))
        {
            let remote = conn.stream.peer_addr().ok();
            log_link_end(NAME, remote, engine.link_end(link));
        }
        engine.handle_closed(link, now);
    }

    fn few_sockets(&self) -> bool {
        self.by_link.len() <= 8
    }

    fn read_directly(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, now: u64) -> bool {
        let before = self.received();
        for i in 0..self.conns.len() {
            if self.conns[i].as_ref().is_some_and(|c| c.link().is_some()) {
                self.read(engine, registry, i, now, false);
            }
        }
        self.received() != before
    }

    fn flush(&mut self, engine: &mut StdEngine<'_>, registry: &Registry, now: u64) {
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_ref() else {
                continue;
            };
            match conn.state {
                ConnState::Connecting { since, req } => {
                    if since.elapsed() >= self.config.connect_timeout {
                        tracing::debug!("tcp: connect to {} timed out", req.proc);
                        self.broken(engine, registry, i, now);
                    }
                }
                ConnState::Open(_) => {
                    if conn.holds_input() {
                        self.read(engine, registry, i, now, false);
                    }
                    self.write(engine, registry, i, now);
                }
            }
        }
    }
}

/// TCP_NODELAY always; buffer sizes only when set (0 leaves the kernel's
/// autotuning, which a fixed size can halve on fast links); the user
/// timeout that gives up a link whose data stays unacknowledged.
fn configure(socket: &Socket, config: &TcpConfig) -> io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    if config.sndbuf > 0 {
        socket.set_send_buffer_size(config.sndbuf)?;
    }
    if config.rcvbuf > 0 {
        socket.set_recv_buffer_size(config.rcvbuf)?;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if !config.user_timeout.is_zero() {
        socket.set_tcp_user_timeout(Some(config.user_timeout))?;
    }
    Ok(())
}

/// A non-blocking connect from `local`'s address to `remote`.
fn open(local: IpNet, remote: SocketAddr, config: &TcpConfig) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(remote),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_nonblocking(true)?;
    configure(&socket, config)?;
    // The local address picks the interface of the pair.
    socket.bind(&SockAddr::from(SocketAddr::new(local.addr(), 0)))?;
    match socket.connect(&SockAddr::from(remote)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// A listener on `addr` (its port 0: any free one), non-blocking.
fn bind_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&SockAddr::from(addr))?;
    socket.listen(BACKLOG)?;
    Ok(TcpListener::from_std(socket.into()))
}

/// How long a lookup waits for a peer's card by default.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);
