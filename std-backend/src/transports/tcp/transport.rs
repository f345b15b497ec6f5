//! The TCP transport: listeners on the selected addresses, connections to
//! peers over paired addresses, and the bytes between sockets and engine.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use btl_core::endpoint::ProcName;
use btl_core::engine::{ConnectFailure, ConnectRequest, LinkError, LinkId, Stream};
use btl_core::time::Instant;
use btl_core::wire::{self, CloseReason};
use ipnet::IpNet;

use super::TcpConfig;
use super::capture::ConnCapture;
use super::conn::{Conn, ConnState, READ_BUDGET, ReadOutcome};
use crate::bootstrap::{Bootstrap, Contact, LookupError};
use crate::capture::{Direction, NO_LINK, Tap, describe, link_key};
use crate::driver::directory::Directory;
use crate::driver::heap::{Buffer, HeapEngine};
use crate::driver::link_map::LinkMap;
use crate::driver::module::{Context, EventOf, Transport, source_of};
use crate::driver::net::{
    ListenerSocket, Net, Readiness, RegistryOf, StreamOptions, StreamSocket, Watch,
};
use crate::driver::read_queue::ReadQueue;
use crate::driver::refusals::Refused;
use crate::transports::interfaces;
use crate::transports::listen::listen_all;

/// Component name in cards and parameters.
pub const NAME: &str = "tcp";
/// Tokens from here down name listeners; connections count up from 0.
const LISTENER_BASE: usize = usize::MAX / 2;
/// Connections one listener accepts per pass at most, after the open
/// connections have been read; the rest wait for the next pass, once the
/// links the engine closed meanwhile have been closed. A flood of
/// connections then cannot hold a pass: a peer's request is not kept
/// behind the flood's handshakes, the HELLO of a client accepted a moment
/// ago is read before many more strangers come, and the links they push
/// out of the handshake budget give their slots back as they go rather
/// than piling up, closing, within one pass. Eight a pass drain a flood of
/// thousands a second (a pass takes tens of microseconds) and cost a
/// legit peer's request little.
const ACCEPTS_PER_PASS: usize = 8;

/// What a TCP transport has read ([`Tcp::bytes_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BytesRead {
    /// Bytes read from the open connections.
    pub total: u64,
    /// Of them, bytes read straight into their payload's target (a receive
    /// fragment, the registered memory of a put), not copied there from
    /// the read buffer.
    pub in_place: u64,
}

/// The TCP side of a module, over network `N`.
pub struct Tcp<N: Net> {
    net: N,
    me: ProcName,
    config: TcpConfig,
    listeners: Vec<(N::Listener, Contact)>,
    conns: Vec<Option<Conn<N::Stream>>>,
    by_link: LinkMap<usize>,
    /// Open connections to read on the next pass: those the poller
    /// reported, and those a pass left with bytes unread.
    readable: ReadQueue,
    /// Listeners to accept from on the next pass: those the poller
    /// reported, and those a pass left with connections waiting.
    accepting: ReadQueue,
    /// Connections still connecting, whose connect may time out.
    connecting: Vec<usize>,
    /// Connections holding bytes the engine had no room for: read again
    /// at each flush.
    held: Vec<usize>,
    /// The module's capture, if `btl_tcp_capture` asks for one: each
    /// open connection cuts what it writes and reads into frames for it.
    capture: Option<Tap>,
}

impl<N: Net> Tcp<N> {
    /// Listens on the addresses `config` selects (or those `bootstrap`
    /// assigns `me`) and registers the listeners with `registry`; starts
    /// the capture `config` asks for, whose file must be created.
    pub fn start(
        me: ProcName,
        config: TcpConfig,
        bootstrap: &dyn Bootstrap,
        net: N,
        registry: &RegistryOf<N>,
    ) -> io::Result<Self> {
        let capture = match config.capture.clone() {
            Some(wanted) => {
                let mut tap = Tap::open(NAME, me, wanted)?;
                tap.add_link(
                    NO_LINK,
                    "tcp refused",
                    "connections refused before they carried a link: the CLOSE each was told",
                );
                Some(tap)
            }
            None => None,
        };
        let mut listeners =
            listen_all(me, NAME, bootstrap, &config.selection, config.ports, |at| {
                net.listen(at)
            })?;
        for (i, (listener, _)) in listeners.iter_mut().enumerate() {
            listener.watch(registry, LISTENER_BASE + i, false)?;
        }
        Ok(Tcp {
            net,
            me,
            config,
            listeners,
            conns: Vec::new(),
            by_link: LinkMap::default(),
            readable: ReadQueue::default(),
            accepting: ReadQueue::default(),
            connecting: Vec::new(),
            held: Vec::new(),
            capture,
        })
    }

    /// The contacts this process listens on.
    pub fn contacts(&self) -> impl Iterator<Item = &Contact> {
        self.listeners.iter().map(|(_, c)| c)
    }

    /// Bytes read from the open connections so far, and how many of them
    /// were read in place, straight into their payload's target: how much
    /// copying the large-message path spares the receiving side.
    pub fn bytes_read(&self) -> BytesRead {
        let conns = self.conns.iter().flatten();
        BytesRead {
            total: conns.clone().map(|c| c.received).sum(),
            in_place: conns.map(|c| c.in_place).sum(),
        }
    }

    /// Open connections, for tests and `btl info`.
    pub fn open_connections(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.link().is_some())
            .count()
    }

    /// The (local, remote) addresses of link `index` to the peer whose
    /// contacts `directory` lists under `name`.
    fn pair_for(
        &self,
        directory: &Directory,
        name: ProcName,
        index: u8,
    ) -> Option<(IpNet, SocketAddr)> {
        let mine: Vec<Contact> = self.contacts().cloned().collect();
        interfaces::link_addresses(
            (self.me, &mine),
            (name, directory.contacts_of(name)?),
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
            congestion: self.config.congestion,
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
            self.by_link.remove(link);
            if let Some(tap) = self.capture.as_mut()
                && conn.capture.is_some()
            {
                tap.remove_link(link_key(link));
            }
        }
        Some(conn)
    }

    /// Connection `i` carries `link` from now on: if the module captures,
    /// the link gets its interface, described by the connection's ends
    /// and its peer, if known (`local` where the socket cannot tell it).
    fn capture_link(
        &mut self,
        i: usize,
        link: LinkId,
        local: Option<SocketAddr>,
        peer: Option<ProcName>,
    ) {
        let (Some(tap), Some(Some(conn))) = (self.capture.as_mut(), self.conns.get_mut(i)) else {
            return;
        };
        let key = link_key(link);
        let local = conn.stream.local_addr().ok().or(local);
        let description = match conn.stream.peer_addr() {
            Ok(remote) => describe(local, remote, peer),
            Err(_) => String::from("a connection whose peer address is unknown"),
        };
        tap.add_link(key, &format!("tcp link {}", link.slot()), &description);
        conn.capture = Some(Box::new(ConnCapture::new(key, tap)));
    }

    /// A connection that broke or was closed by its peer (`why`, if it was
    /// still connecting): the engine is told and the socket dropped.
    fn broken<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        registry: &RegistryOf<N>,
        i: usize,
        why: ConnectFailure,
        now: Instant,
    ) {
        if let Some(conn) = self.remove(i, registry) {
            match conn.state {
                ConnState::Open(link) => engine.handle_closed(link, now),
                ConnState::Connecting { req, .. } => engine.handle_connect_failed(req, why, now),
            }
        }
    }

    /// Accepts what listener `l` has waiting, up to [`ACCEPTS_PER_PASS`];
    /// past it the listener waits for the next pass.
    fn accept<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        l: usize,
        now: Instant,
    ) {
        for _ in 0..ACCEPTS_PER_PASS {
            let accepted = match self.listeners.get_mut(l) {
                Some((listener, _)) => listener.accept(),
                None => return,
            };
            let (mut stream, from) = match accepted {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: the listener
                    // stays, and the next readiness tries again.
                    if cx.directory.refusals_mut().record(
                        now,
                        None,
                        Refused::Connection,
                        "accept failed",
                    ) {
                        tracing::warn!("tcp {}: accept failed: {e}", self.me);
                    }
                    return;
                }
            };
            if let Err(e) = self.net.tune(&stream, &self.options()) {
                tracing::debug!(
                    "tcp {}: socket options of a connection from {from}: {e}",
                    self.me
                );
            }
            let link = match engine.handle_accepted(source_of(from), self.net.random(), now) {
                Ok(link) => link,
                Err(e) => {
                    // Every link slot is taken (by verified peers: strangers
                    // are held to the handshake budget). The peer is told
                    // why, so that it fails at once and says so.
                    let reason = CloseReason::ResourceExhausted;
                    let close = wire::close_frame(reason);
                    let written = stream.write_vectored(&[io::IoSlice::new(&close)]);
                    if let (Ok(n), Some(tap)) = (written, self.capture.as_mut()) {
                        tap.frame_prefix(NO_LINK, Direction::Out, &[&close[..n]], close.len());
                    }
                    let what = match e {
                        LinkError::TooManyLinks => {
                            "every link slot in use (btl_tcp_max_peers sizes them)"
                        }
                        LinkError::SourceFull => "its address holds its share of the link slots",
                        _ => "refused by the engine",
                    };
                    if cx.directory.refusals_mut().record(
                        now,
                        Some(from),
                        Refused::Connection,
                        what,
                    ) {
                        tracing::warn!("tcp {}: refused a connection with {from}: {what}", self.me);
                    }
                    continue;
                }
            };
            match self.insert(Conn::new(stream, ConnState::Open(link)), cx.registry) {
                Ok(i) => {
                    self.by_link.insert(link, i);
                    let local = self.listeners.get(l).map(|(_, contact)| contact.addr);
                    self.capture_link(i, link, local, None);
                }
                Err(e) => {
                    tracing::warn!("tcp: registering an accepted connection: {e}");
                    engine.handle_closed(link, now);
                }
            }
        }
        // The budget is spent, and more may wait: the poller will not say
        // so again.
        self.accepting.push(l);
    }

    /// Our connect completed or failed (the socket became writable).
    fn connected<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        registry: &RegistryOf<N>,
        i: usize,
        now: Instant,
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
            Err(e) => {
                tracing::debug!("tcp {}: connecting to {}: {e}", self.me, req.proc);
                self.broken(engine, registry, i, failure(&e), now);
                return;
            }
        }
        match engine.handle_connected(req, self.net.random(), now) {
            Ok(link) => {
                conn.state = ConnState::Open(link);
                self.by_link.insert(link, i);
                self.capture_link(i, link, None, Some(req.proc));
            }
            Err(e) => {
                tracing::debug!(
                    "tcp {}: no link for a connection to {}: {e}",
                    self.me,
                    req.proc
                );
                self.remove(i, registry);
                engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            }
        }
    }

    /// Reads connection `i` into the engine, up to [`READ_BUDGET`]; queues
    /// it for the next pass if that was spent. Whether bytes came.
    fn read<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        registry: &RegistryOf<N>,
        i: usize,
        now: Instant,
    ) -> bool {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return false;
        };
        let Some(link) = conn.link() else {
            return false;
        };
        let before = conn.received;
        let outcome = conn.read(engine, link, now, READ_BUDGET, self.capture.as_mut());
        let came = conn.received != before;
        match outcome {
            ReadOutcome::Budgeted => self.readable.push(i),
            ReadOutcome::Closed => {
                self.broken(engine, registry, i, ConnectFailure::Unreachable, now);
            }
            ReadOutcome::Held if !self.held.contains(&i) => self.held.push(i),
            ReadOutcome::Drained | ReadOutcome::Held => {}
        }
        came
    }

    /// Writes connection `i`'s pending bytes; watches for writability only
    /// while some wait (as Motr's `ep_balance`).
    fn write<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        registry: &RegistryOf<N>,
        i: usize,
        now: Instant,
    ) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let Some(link) = conn.link() else {
            return;
        };
        match conn.write(engine, link, self.capture.as_mut()) {
            Ok(waiting) => {
                if waiting != conn.write_interest
                    && conn.stream.rewatch(registry, i, waiting).is_ok()
                {
                    conn.write_interest = waiting;
                }
            }
            Err(_) => self.broken(engine, registry, i, ConnectFailure::Unreachable, now),
        }
    }
}

/// How the engine is to take a failed connect: a refusal means nothing
/// listens at the peer's address (its process is gone).
fn failure(e: &io::Error) -> ConnectFailure {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
        _ => ConnectFailure::Unreachable,
    }
}

impl<N: Net> Transport for Tcp<N> {
    type Net = N;
    type Framing = Stream;

    fn framing(&self) -> Stream {
        Stream
    }

    fn net(&self) -> &N {
        &self.net
    }

    fn contacts(&self) -> Vec<Contact> {
        Tcp::contacts(self).cloned().collect()
    }

    fn pairs_with(&mut self, directory: &Directory, name: ProcName) -> Result<(), LookupError> {
        match self.pair_for(directory, name, 0) {
            Some(_) => Ok(()),
            None => Err(directory.no_pairing(name)),
        }
    }

    fn on_event<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        event: &EventOf<N>,
        now: Instant,
    ) {
        let token = event.token();
        if token >= LISTENER_BASE {
            self.accepting.push(token - LISTENER_BASE);
            return;
        }
        let connecting = self
            .conns
            .get(token)
            .and_then(Option::as_ref)
            .is_some_and(|c| matches!(c.state, ConnState::Connecting { .. }));
        if connecting {
            if event.is_writable() || event.is_error() || event.is_read_closed() {
                self.connected(engine, cx.registry, token, now);
            }
            if self
                .conns
                .get(token)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.link().is_some())
            {
                self.write(engine, cx.registry, token, now);
            }
            return;
        }
        let closing = event.is_read_closed() || event.is_error();
        if (event.is_readable() || closing)
            && let Some(conn) = self.conns.get_mut(token).and_then(Option::as_mut)
        {
            if closing {
                conn.end_seen();
            }
            self.readable.push(token);
        }
        if event.is_writable() {
            self.write(engine, cx.registry, token, now);
        }
    }

    fn connect<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        req: ConnectRequest,
        now: Instant,
    ) {
        let Some((local, remote)) = self.pair_for(cx.directory, req.listed_as, req.link_index)
        else {
            // A peer that connected to this side and published no address
            // here: it is waited for, to connect again.
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        };
        let stream = match self.net.connect(local.addr(), remote, &self.options()) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("tcp {}: connect to {} at {remote}: {e}", self.me, req.proc);
                engine.handle_connect_failed(req, failure(&e), now);
                return;
            }
        };
        let state = ConnState::Connecting { req, since: now };
        match self.insert(Conn::new(stream, state), cx.registry) {
            Ok(i) => self.connecting.push(i),
            Err(_) => engine.handle_connect_failed(req, ConnectFailure::Unreachable, now),
        }
    }

    fn close<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        link: LinkId,
        now: Instant,
    ) {
        if let Some(conn) = self
            .by_link
            .get(link)
            .copied()
            .and_then(|i| self.remove(i, cx.registry))
        {
            let remote = conn.stream.peer_addr().ok();
            let end = engine.link_end(link);
            cx.directory.refusals_mut().link_end(
                now,
                (NAME, self.me),
                remote,
                end,
                Refused::Connection,
            );
        }
        engine.handle_closed(link, now);
    }

    fn few_sockets(&self) -> bool {
        self.by_link.len() <= 8
    }

    fn read_ready<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        now: Instant,
    ) -> bool {
        // What the connections brought before new connections: a peer's
        // request does not wait behind a flood's handshakes.
        let round = self.readable.start_round();
        let mut came = false;
        for &i in &round {
            came |= self.read(engine, cx.registry, i, now);
        }
        self.readable.end_round(round);
        let round = self.accepting.start_round();
        for &l in &round {
            self.accept(engine, cx, l, now);
        }
        self.accepting.end_round(round);
        came
    }

    fn left_unread(&self) -> bool {
        !self.readable.is_empty() || !self.accepting.is_empty()
    }

    fn read_directly<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        now: Instant,
    ) -> bool {
        for (i, conn) in self.conns.iter().enumerate() {
            if conn.as_ref().is_some_and(|c| c.link().is_some()) {
                self.readable.push(i);
            }
        }
        self.read_ready(engine, cx, now)
    }

    fn flush<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        cx: &mut Context<'_, N>,
        now: Instant,
    ) {
        cx.directory
            .refusals_mut()
            .log_summaries(now, (NAME, self.me));
        // Connects that took too long.
        let mut k = 0;
        while let Some(&i) = self.connecting.get(k) {
            let state = self.conns.get(i).and_then(Option::as_ref).map(|c| c.state);
            match state {
                Some(ConnState::Connecting { since, req }) => {
                    if now - since >= self.config.connect_timeout.into() {
                        tracing::debug!("tcp {}: connect to {} timed out", self.me, req.proc);
                        self.connecting.swap_remove(k);
                        self.broken(engine, cx.registry, i, ConnectFailure::Unreachable, now);
                    } else {
                        k += 1;
                    }
                }
                // Connected, or gone.
                _ => {
                    self.connecting.swap_remove(k);
                }
            }
        }
        // Bytes the engine had no room for: it may have now.
        for i in std::mem::take(&mut self.held) {
            if self
                .conns
                .get(i)
                .and_then(Option::as_ref)
                .is_some_and(Conn::holds_input)
            {
                self.read(engine, cx.registry, i, now);
            }
        }
        // What the engine has to write: the links calls touched, not every
        // connection.
        while let Some(link) = engine.poll_ready_link() {
            if let Some(&i) = self.by_link.get(link) {
                self.write(engine, cx.registry, i, now);
            }
        }
    }
}

/// How long a lookup waits for a peer's card by default.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);
