//! The TCP transport: listeners on the selected addresses, connections to
//! peers over paired addresses, and the bytes between sockets and engine.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use btl_core::endpoint::ProcName;
use btl_core::engine::{ConnectRequest, LinkId};
use ipnet::IpNet;

use super::TcpConfig;
use super::conn::{Conn, ConnState, ReadOutcome};
use crate::bootstrap::{Bootstrap, Card, Contact};
use crate::contacts::PeerContacts;
use crate::engine_cell::StdEngine;
use crate::interfaces;
use crate::listen::listen_all;
use crate::module::{EventOf, Transport, log_link_end};
use crate::net::{ListenerSocket, Net, Readiness, RegistryOf, StreamOptions, StreamSocket, Watch};

/// Component name in cards and parameters.
pub const NAME: &str = "tcp";
/// Tokens from here down name listeners; connections count up from 0.
const LISTENER_BASE: usize = usize::MAX / 2;

/// The TCP side of a module, over network `N`.
pub struct Tcp<N: Net> {
    net: N,
    me: ProcName,
    config: TcpConfig,
    bootstrap: Arc<dyn Bootstrap>,
    listeners: Vec<(N::Listener, Contact)>,
    conns: Vec<Option<Conn<N::Stream>>>,
    by_link: HashMap<LinkId, usize>,
    /// Each reachable peer's TCP contacts, as it published them.
    peers: PeerContacts,
}

impl<N: Net> Tcp<N> {
    /// Listens on the addresses `config` selects (or those the bootstrap
    /// assigns `me`), registers the listeners with `registry` and
    /// publishes this process's card.
    pub fn start(
        me: ProcName,
        config: TcpConfig,
        bootstrap: Arc<dyn Bootstrap>,
        net: N,
        registry: &RegistryOf<N>,
    ) -> io::Result<Self> {
        let mut listeners = listen_all(
            me,
            NAME,
            &*bootstrap,
            &config.selection,
            config.ports,
            |at| net.listen(at),
        )?;
        let mut card = Card::new(me);
        for (i, (listener, contact)) in listeners.iter_mut().enumerate() {
            listener.watch(registry, LISTENER_BASE + i, false)?;
            card.contacts.push(contact.clone());
        }
        bootstrap.publish(&card).map_err(io::Error::other)?;
        Ok(Tcp {
            net,
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

    /// The socket options of every connection.
    fn options(&self) -> StreamOptions {
        StreamOptions {
            sndbuf: self.config.sndbuf,
            rcvbuf: self.config.rcvbuf,
            user_timeout: self.config.user_timeout,
        }
    }

    fn insert(&mut self, conn: Conn<N::Stream>, registry: &RegistryOf<N>) -> io::Result<usize> {
        let i = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let mut conn = conn;
        let writable = matches!(conn.state, ConnState::Connecting { .. });
        conn.stream.watch(registry, i, writable)?;
        conn.write_interest = writable;
        self.conns[i] = Some(conn);
        Ok(i)
    }

    fn remove(&mut self, i: usize, registry: &RegistryOf<N>) -> Option<Conn<N::Stream>> {
        let mut conn = self.conns.get_mut(i)?.take()?;
        let _ = conn.stream.unwatch(registry);
        if let Some(link) = conn.link() {
            self.by_link.remove(&link);
        }
        Some(conn)
    }

    /// A connection that broke or was closed by its peer: the engine is
    /// told and the socket dropped.
    fn broken(&mut self, engine: &mut StdEngine<'_>, registry: &RegistryOf<N>, i: usize, now: u64) {
        if let Some(conn) = self.remove(i, registry) {
            match conn.state {
                ConnState::Open(link) => engine.handle_closed(link, now),
                ConnState::Connecting { req, .. } => engine.handle_connect_failed(req, now),
            }
        }
    }

    fn accept(&mut self, engine: &mut StdEngine<'_>, registry: &RegistryOf<N>, l: usize, now: u64) {
        loop {
            let accepted = match self.listeners.get_mut(l) {
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
            if let Err(e) = self.net.tune(&stream, &self.options()) {
                tracing::warn!("tcp: socket options of an accepted connection: {e}");
            }
            let link = match engine.handle_accepted(self.net.random(), now) {
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
    fn connected(
        &mut self,
        engine: &mut StdEngine<'_>,
        registry: &RegistryOf<N>,
        i: usize,
        now: u64,
    ) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let ConnState::Connecting { req, .. } = conn.state else {
            return;
        };
        match conn.stream.connected() {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => {
                self.broken(engine, registry, i, now);
                return;
            }
        }
        match engine.handle_connected(req, self.net.random(), now) {
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
        registry: &RegistryOf<N>,
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
    fn write(&mut self, engine: &mut StdEngine<'_>, registry: &RegistryOf<N>, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let Some(link) = conn.link() else {
            return;
        };
        match conn.write(engine, link) {
            Ok(waiting) => {
                if waiting != conn.write_interest
                    && conn.stream.rewatch(registry, i, waiting).is_ok()
                {
                    conn.write_interest = waiting;
                }
            }
            Err(_) => self.broken(engine, registry, i, now),
        }
    }
}

impl<N: Net> Transport for Tcp<N> {
    type Net = N;

    fn net(&self) -> &N {
        &self.net
    }

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
        registry: &RegistryOf<N>,
        event: &EventOf<N>,
        now: u64,
    ) {
        let token = event.token();
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
        registry: &RegistryOf<N>,
        req: ConnectRequest,
        now: u64,
    ) {
        let Some((local, remote)) = self.pair_for(req.proc, req.link_index) else {
            engine.handle_connect_failed(req, now);
            return;
        };
        let stream = match self.net.connect(local.addr(), remote, &self.options()) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("tcp: connect to {} at {remote}: {e}", req.proc);
                engine.handle_connect_failed(req, now);
                return;
            }
        };
        let state = ConnState::Connecting { req, since: now };
        if self.insert(Conn::new(stream, state), registry).is_err() {
            engine.handle_connect_failed(req, now);
        }
    }

    fn close(
        &mut self,
        engine: &mut StdEngine<'_>,
        registry: &RegistryOf<N>,
        link: LinkId,
        now: u64,
    ) {
        if let Some(conn) = self
            .by_link
            .get(&link)
            .copied()
            .and_then(|i| self.remove(i, registry))
        {
            let remote = conn.stream.peer_addr().ok();
            log_link_end(NAME, self.me, remote, engine.link_end(link));
        }
        engine.handle_closed(link, now);
    }

    fn few_sockets(&self) -> bool {
        self.by_link.len() <= 8
    }

    fn read_directly(
        &mut self,
        engine: &mut StdEngine<'_>,
        registry: &RegistryOf<N>,
        now: u64,
    ) -> bool {
        let before = self.received();
        for i in 0..self.conns.len() {
            if self.conns[i].as_ref().is_some_and(|c| c.link().is_some()) {
                self.read(engine, registry, i, now, false);
            }
        }
        self.received() != before
    }

    fn flush(&mut self, engine: &mut StdEngine<'_>, registry: &RegistryOf<N>, now: u64) {
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_ref() else {
                continue;
            };
            match conn.state {
                ConnState::Connecting { since, req } => {
                    let limit =
                        u64::try_from(self.config.connect_timeout.as_nanos()).unwrap_or(u64::MAX);
                    if now.saturating_sub(since) >= limit {
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

/// How long a lookup waits for a peer's card by default.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);
