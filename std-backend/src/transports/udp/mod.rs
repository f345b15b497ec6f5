//! The UDP component (`btl_udp_*`): the engine in datagram framing over UDP
//! sockets, so delivery is reliable, ordered and exactly-once as over TCP,
//! with packets sized to `btl_udp_mtu`.
//!
//! One socket per selected address. A peer is one link, named by its
//! socket address: a datagram from an address without a link is a new
//! link (the engine learns who it is from its HELLO), and a connect request
//! for a peer that already has one is left alone (the engine takes the
//! link it has).

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{
    COOKIE_FRAME_LEN, Capacities, ConnectFailure, ConnectRequest, Datagram, LinkError, LinkId,
    Stranger,
};
use btl_core::mca::{
    BTL_FRAMEWORK, Component, Modules, NotAvailable, ParamKind, ParamName, ParamSpec, Params,
    RegisterError, Version,
};
use btl_core::pool::{FragmentPoolsConfig, PoolDefaults, pool_param_specs};
use btl_core::time::Instant;

use crate::bootstrap::{Bootstrap, Contact, LookupError};
use crate::capture::{CaptureConfig, Direction, NO_LINK, Tap, describe, link_key};
use crate::config::socket_params::{
    CAPTURE_PARAMS, ENGINE_PARAMS, RecordConfig, Registered, SOCKET_PARAMS, SocketParams,
    capture_param_specs, engine_param_specs, socket_param_specs,
};
use crate::driver::directory::Directory;
use crate::driver::heap::{Buffer, HeapEngine};
use crate::driver::link_map::LinkMap;
use crate::driver::module::{Context, EventOf, Module, Transport, source_of};
use crate::driver::net::{DatagramSocket, Net, Os, Readiness, RegistryOf, Segments, Watch};
use crate::driver::read_queue::ReadQueue;
use crate::driver::refusals::{Refusals, Refused};
use crate::driver::udp_offload::{MAX_BATCH, MAX_SEGMENTS};
use crate::transports::Ports;
use crate::transports::interfaces::{self, Selection};
use crate::transports::listen::listen_all;

mod batch;
use batch::Batch;

/// Component name in cards and parameters.
pub const NAME: &str = "udp";
/// Largest datagram a socket reads.
const RECV_BYTES: usize = 64 << 10;
/// Receive calls a socket may make per pass. Every peer's datagrams come
/// through the one socket, in the order they arrived, but a pass that
/// never ends reading (a flood of datagrams) never writes: the other
/// peers' handshakes and acknowledgements would wait for good. 256 calls
/// are 256 datagrams, or up to 16 MiB where the kernel joins them (GRO):
/// against a pass's few microseconds, well under 1 % of the time they take.
const RECVS_PER_PASS: usize = 256;
/// Smallest datagram every IPv4 host takes whole, and the smallest MTU.
pub const MIN_MTU: usize = 576;
/// The datagram size where the interfaces' MTU cannot be known: what fits
/// a 1500-byte Ethernet frame over IPv4.
pub const DEFAULT_MTU: usize = 1472;

/// A module of the UDP component over the operating system's sockets.
pub type UdpModule = Module<Udp<Os>>;

/// The UDP component's pool parameters (`btl_udp_eager_limit`, ...): as
/// large as the largest datagram, which the engine shrinks them to.
pub static UDP_POOL_PARAMS: [ParamSpec; 6] = pool_param_specs(
    NAME,
    PoolDefaults {
        small_size: "256",
        eager_limit: "64k",
        max_send_size: "64k",
        free_list_num: "16",
        free_list_max: "256",
        free_list_inc: "16",
    },
);

/// The engine parameters of the UDP component.
pub static UDP_ENGINE_PARAMS: [ParamSpec; ENGINE_PARAMS] = engine_param_specs(NAME);

/// Where the UDP component listens (`btl_udp_if_include`, ...).
pub static UDP_SOCKET_PARAMS: [ParamSpec; SOCKET_PARAMS] = socket_param_specs(NAME);

/// Where the UDP component captures its frames (`btl_udp_capture`, ...).
pub static UDP_CAPTURE_PARAMS: [ParamSpec; CAPTURE_PARAMS] = capture_param_specs(NAME);

/// The UDP component's own parameter.
pub static UDP_PARAMS: [ParamSpec; 1] = [
    ParamSpec::new(BTL_FRAMEWORK, NAME, "mtu", ParamKind::Int { min: 0, max: 65507 }, "0")
        .help("Largest datagram sent, headers of btl included, from 576 (1472 fits a 1500-byte Ethernet MTU; 8972 a jumbo one); 0: the smallest MTU of the interfaces used less the IP and UDP headers (65507 over loopback), 1472 where it cannot be known")
        .level(3),
];

/// What a UDP module is built with, besides the engine and pools.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Which local interfaces to use.
    pub selection: Selection,
    /// Where to listen.
    pub ports: Ports,
    /// Largest datagram; `None`: the smallest MTU of the interfaces the
    /// sockets are on, less the IP and UDP headers ([`DEFAULT_MTU`] where
    /// that cannot be known).
    pub mtu: Option<usize>,
    /// How long `add_procs` waits for a peer's card.
    pub lookup_timeout: Duration,
    /// How long [`Module::wait`] spins before it blocks.
    pub spin: Duration,
    /// Where the module's frames are captured (`btl_udp_capture`), if
    /// they are.
    pub capture: Option<CaptureConfig>,
    /// What the module's flight recorder keeps (`btl_udp_record`), if
    /// anything.
    pub record: Option<RecordConfig>,
    /// The eager limit and max send size where a user set them: a module
    /// whose datagrams hold less says so once, when it opens.
    pub chosen_sizes: [Option<(ParamName, u64)>; 2],
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            selection: Selection::default(),
            ports: Ports { min: 0, range: 100 },
            mtu: None,
            lookup_timeout: crate::transports::tcp::LOOKUP_TIMEOUT,
            spin: Duration::from_micros(50),
            capture: None,
            record: None,
            chosen_sizes: [None; 2],
        }
    }
}

/// The UDP side of a module, over network `N`.
pub struct Udp<N: Net> {
    net: N,
    me: ProcName,
    /// Largest datagram sent: the configured one, or the interfaces'.
    mtu: usize,
    sockets: Vec<(N::Datagram, Contact)>,
    /// The link of each remote address, and each link's socket and
    /// address.
    by_addr: HashMap<SocketAddr, LinkId>,
    by_link: LinkMap<(usize, SocketAddr)>,
    recv: Box<[u8]>,
    /// Sockets to read on the next pass: those the poller reported, and
    /// those a pass left with datagrams unread.
    readable: ReadQueue,
    /// Each socket's datagrams on their way out.
    batches: Vec<Batch>,
    /// Sockets that would block on a send: they wait for writability.
    write_interest: Vec<bool>,
    /// Sockets whose send failed: the error queue may hold a refusal, to
    /// be read at the end of the flush.
    reported: Vec<bool>,
    /// Scratch of `flush`, kept so that a flush allocates nothing.
    scratch_links: Vec<(LinkId, usize, SocketAddr)>,
    scratch_blocked: Vec<bool>,
    /// Links a blocked socket kept from writing all they had: the next
    /// flush tries them first.
    deferred: Vec<LinkId>,
    /// The module's capture, if `btl_udp_capture` asks for one: every
    /// datagram sent and received, one frame each, on its link's
    /// interface or on the strangers' ([`NO_LINK`]).
    capture: Option<Tap>,
}

impl<N: Net> Udp<N> {
    /// Binds the addresses `config` selects (or those `bootstrap` assigns
    /// `me`) and registers the sockets with `registry`; starts the capture
    /// `config` asks for, whose file must be created.
    pub fn start(
        me: ProcName,
        config: UdpConfig,
        bootstrap: &dyn Bootstrap,
        net: N,
        registry: &RegistryOf<N>,
    ) -> io::Result<Self> {
        let capture = match config.capture.clone() {
            Some(wanted) => {
                let mut tap = Tap::open(NAME, me, wanted)?;
                tap.add_link(
                    NO_LINK,
                    "udp strangers",
                    "datagrams from and to addresses without a link: handshakes' HELLOs and COOKIEs, and what is dropped",
                );
                Some(tap)
            }
            None => None,
        };
        let mut sockets = listen_all(me, NAME, bootstrap, &config.selection, config.ports, |at| {
            net.bind(at)
        })?;
        for (i, (socket, _)) in sockets.iter_mut().enumerate() {
            socket.watch(registry, i, false)?;
        }
        let n = sockets.len();
        // The smallest of the interfaces' MTUs: one module's datagrams
        // may leave by any of them.
        let mtu = config.mtu.unwrap_or_else(|| {
            let mtus = sockets.iter().map(|(_, c)| net.datagram_mtu(c.addr.ip()));
            let smallest = mtus
                .collect::<Option<Vec<_>>>()
                .and_then(|m| m.into_iter().min());
            smallest.unwrap_or(DEFAULT_MTU).max(MIN_MTU)
        });
        Ok(Udp {
            net,
            me,
            mtu,
            sockets,
            by_addr: HashMap::new(),
            by_link: LinkMap::default(),
            recv: vec![0; RECV_BYTES].into_boxed_slice(),
            readable: ReadQueue::default(),
            batches: (0..n)
                .map(|_| Batch::new(MAX_BATCH, MAX_SEGMENTS))
                .collect(),
            write_interest: vec![false; n],
            reported: vec![false; n],
            scratch_links: Vec::new(),
            deferred: Vec::new(),
            scratch_blocked: vec![false; n],
            capture,
        })
    }

    /// The contacts this process listens on.
    pub fn contacts(&self) -> impl Iterator<Item = &Contact> {
        self.sockets.iter().map(|(_, c)| c)
    }

    /// The largest datagram it sends: `btl_udp_mtu`, or the interfaces'.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Peers with a link, for tests and reports.
    pub fn links(&self) -> usize {
        self.by_link.len()
    }

    /// The socket and remote address of the link to the peer whose
    /// contacts `directory` lists under `name`.
    fn pair_for(&self, directory: &Directory, name: ProcName) -> Option<(usize, SocketAddr)> {
        let mine: Vec<Contact> = self.contacts().cloned().collect();
        let peer = (name, directory.contacts_of(name)?);
        let (local, remote) = interfaces::link_addresses((self.me, &mine), peer, 1, 0)?;
        let socket = mine.iter().position(|c| interfaces::net_of(c) == local)?;
        Some((socket, remote))
    }

    /// Knows `link` as the one of remote address `addr`, on socket `s`,
    /// to `peer` if this side knows who it is; declares its interface if
    /// the module captures.
    fn adopt(&mut self, link: LinkId, s: usize, addr: SocketAddr, peer: Option<ProcName>) {
        self.by_addr.insert(addr, link);
        self.by_link.insert(link, (s, addr));
        if let Some(tap) = self.capture.as_mut() {
            let local = self.sockets.get(s).map(|(_, contact)| contact.addr);
            tap.add_link(
                link_key(link),
                &format!("udp link {}", link.slot()),
                &describe(local, addr, peer),
            );
        }
    }

    /// Forgets `link`; the address it was with, if it was current.
    fn forget(&mut self, link: LinkId) -> Option<SocketAddr> {
        let (_, addr) = self.by_link.remove(link)?;
        self.by_addr.remove(&addr);
        if let Some(tap) = self.capture.as_mut() {
            tap.remove_link(link_key(link));
        }
        Some(addr)
    }

    /// Reads socket `s` until it would block, each datagram to its link,
    /// or until it has made [`RECVS_PER_PASS`] calls: then it is queued for
    /// the next pass. Whether any came.
    fn receive<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        refusals: &mut Refusals,
        s: usize,
        now: Instant,
    ) -> bool {
        let mut any = false;
        for _ in 0..RECVS_PER_PASS {
            let Some((socket, _)) = self.sockets.get(s) else {
                return any;
            };
            let Segments { len, segment, from } = match socket.recv_segments(&mut self.recv) {
                Ok(got) => {
                    any = true;
                    got
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return any,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier send: a refusal (nothing
                // listens at a peer's address) is its link's to hear; the
                // engine's timers deal with the others.
                Err(_) => {
                    self.refused(engine, s, now);
                    continue;
                }
            };
            // Lent out while its datagrams are taken: a stranger's answer
            // goes out from this transport meanwhile.
            let recv = std::mem::take(&mut self.recv);
            // The datagrams of one read come from one address: its link
            // is looked up once, and again only after a stranger's.
            let mut known = self.by_addr.get(&from).copied();
            for datagram in recv[..len].chunks(segment.max(1)) {
                if let Some(tap) = self.capture.as_mut() {
                    let key = known.map_or(NO_LINK, link_key);
                    tap.frame(key, Direction::In, &[datagram]);
                }
                let Some(link) = known else {
                    self.stranger(engine, refusals, s, from, datagram, now);
                    known = self.by_addr.get(&from).copied();
                    continue;
                };
                if engine.handle_datagram(link, datagram, now).is_err() {
                    self.forget(link);
                    break;
                }
            }
            self.recv = recv;
        }
        self.readable.push(s);
        any
    }

    /// Hands each refusal socket `s` has to report to the link it concerns
    /// (a link's peer whose process died answers so at once, where only
    /// the peer timeout would say it), and forgets the link: the engine
    /// asks again, and gives the peer up once the refusals last the
    /// refusal timeout. A refusal for an address with no link is dropped.
    fn refused<M: Buffer>(&mut self, engine: &mut HeapEngine<Datagram, M>, s: usize, now: Instant) {
        // Bounded: the error queue holds what the socket's buffer does.
        while let Some(Ok(Some(to))) = self.sockets.get(s).map(|(socket, _)| socket.next_refused())
        {
            // Only a refusal of a datagram the link's own socket sent.
            if let Some(&link) = self.by_addr.get(&to)
                && self
                    .by_link
                    .get(link)
                    .is_some_and(|&(socket, _)| socket == s)
            {
                tracing::debug!(
                    "udp {}: {to} refused a datagram: nothing listens there",
                    self.me
                );
                self.forget(link);
                engine.handle_refused(link, now);
            }
        }
    }

    /// A datagram from `from`, on socket `s`, with which no link exists:
    /// its HELLO is answered with a COOKIE, an echo of one made for it
    /// opens a link, anything else is dropped (see the engine's
    /// `handle_stranger`). Nothing is kept for an address until it has
    /// shown that it receives there.
    fn stranger<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        refusals: &mut Refusals,
        s: usize,
        from: SocketAddr,
        datagram: &[u8],
        now: Instant,
    ) {
        let (address, n) = address_bytes(from);
        let mut answer = [0u8; COOKIE_FRAME_LEN];
        let what = match engine.handle_stranger(&address[..n], datagram, now, &mut answer) {
            Stranger::Answer(n) => {
                if let Some((socket, _)) = self.sockets.get(s) {
                    // Lost if the socket has no room: the HELLO comes again.
                    let sent = socket.send_to_vectored(&[io::IoSlice::new(&answer[..n])], from);
                    if let (Ok(_), Some(tap)) = (sent, self.capture.as_mut()) {
                        tap.frame(NO_LINK, Direction::Out, &[&answer[..n]]);
                    }
                }
                return;
            }
            Stranger::Admit => {
                match engine.handle_accepted(source_of(from), self.net.random(), now) {
                    Ok(link) => {
                        self.adopt(link, s, from, None);
                        return;
                    }
                    // Its address holds its share of the link slots, or
                    // every one is in use (by verified peers: strangers
                    // are held to the handshake budget): the sender
                    // retries.
                    Err(LinkError::SourceFull) => "its address holds its share of the link slots",
                    Err(_) => "every link slot in use (btl_udp_max_peers sizes them)",
                }
            }
            Stranger::Refuse(why) => why.description(),
        };
        if refusals.record(now, Some(from), Refused::Datagram, what) {
            tracing::warn!("udp {}: refused a datagram from {from}: {what}", self.me);
        }
    }

    /// Sends what socket `s`'s batch holds; whether all of it went (or was
    /// dropped, as the network may drop any datagram: the engine sends it
    /// again), `false` if the socket would block with some left.
    fn send_batch(&mut self, s: usize) -> bool {
        let (Some((socket, _)), Some(batch)) = (self.sockets.get(s), self.batches.get_mut(s))
        else {
            return true;
        };
        let Some((bytes, segment, to)) = batch.pending() else {
            return true;
        };
        let reported = &mut self.reported[s];
        match send_past_reports(reported, || socket.send_segments(bytes, segment, to)) {
            Ok(sent) => {
                if let Some(tap) = self.capture.as_mut() {
                    let key = self
                        .by_addr
                        .get(&to)
                        .map_or(NO_LINK, |&link| link_key(link));
                    for datagram in bytes[..sent.min(bytes.len())].chunks(segment.max(1)) {
                        tap.frame(key, Direction::Out, &[datagram]);
                    }
                }
                batch.sent(sent);
                batch.is_empty()
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            // Too large, unreachable, ...
            Err(_) => {
                batch.clear();
                true
            }
        }
    }
}

impl<N: Net> Transport for Udp<N> {
    type Net = N;
    type Framing = Datagram;

    fn framing(&self) -> Datagram {
        Datagram { mtu: self.mtu }
    }

    fn net(&self) -> &N {
        &self.net
    }

    fn contacts(&self) -> Vec<Contact> {
        Udp::contacts(self).cloned().collect()
    }

    fn pairs_with(&mut self, directory: &Directory, name: ProcName) -> Result<(), LookupError> {
        match self.pair_for(directory, name) {
            Some(_) => Ok(()),
            None => Err(directory.no_pairing(name)),
        }
    }

    fn on_event<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        cx: &mut Context<'_, N>,
        event: &EventOf<N>,
        now: Instant,
    ) {
        let s = event.token();
        if event.is_readable() && s < self.sockets.len() {
            self.readable.push(s);
        }
        // The error queue holds a report: a refusal, maybe (see `refused`).
        if event.is_error() {
            self.refused(engine, s, now);
        }
        if event.is_writable() {
            self.flush(engine, cx, now);
        }
    }

    fn connect<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        cx: &mut Context<'_, N>,
        req: ConnectRequest,
        now: Instant,
    ) {
        let Some((s, remote)) = self.pair_for(cx.directory, req.listed_as) else {
            // A peer that came to this side and published no address here:
            // it is waited for, to come again.
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        };
        if self.by_addr.contains_key(&remote) {
            // The peer's datagrams made a link already; it carries the peer.
            return;
        }
        match engine.handle_connected(req, self.net.random(), now) {
            Ok(link) => self.adopt(link, s, remote, Some(req.proc)),
            Err(_) => engine.handle_connect_failed(req, ConnectFailure::Unreachable, now),
        }
    }

    fn close<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        cx: &mut Context<'_, N>,
        link: LinkId,
        now: Instant,
    ) {
        if let Some(addr) = self.forget(link) {
            let end = engine.link_end(link);
            cx.directory.refusals_mut().link_end(
                now,
                (NAME, self.me),
                Some(addr),
                end,
                Refused::Datagram,
            );
        }
        engine.handle_closed(link, now);
    }

    fn few_sockets(&self) -> bool {
        self.sockets.len() <= 8
    }

    fn read_ready<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        cx: &mut Context<'_, N>,
        now: Instant,
    ) -> bool {
        let round = self.readable.start_round();
        let mut any = false;
        for &s in &round {
            any |= self.receive(engine, cx.directory.refusals_mut(), s, now);
        }
        self.readable.end_round(round);
        any
    }

    fn left_unread(&self) -> bool {
        !self.readable.is_empty()
    }

    fn read_directly<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        cx: &mut Context<'_, N>,
        now: Instant,
    ) -> bool {
        for s in 0..self.sockets.len() {
            self.readable.push(s);
        }
        self.read_ready(engine, cx, now)
    }

    fn flush<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Datagram, M>,
        cx: &mut Context<'_, N>,
        now: Instant,
    ) {
        cx.directory
            .refusals_mut()
            .log_summaries(now, (NAME, self.me));
        let mut links = std::mem::take(&mut self.scratch_links);
        let mut blocked = std::mem::take(&mut self.scratch_blocked);
        links.clear();
        // The links a blocked socket left, then those the engine has
        // touched since: not every link of every peer.
        let deferred = std::mem::take(&mut self.deferred);
        let ready = std::iter::from_fn(|| engine.poll_ready_link());
        for link in deferred.iter().copied().chain(ready) {
            if let Some(&(s, a)) = self.by_link.get(link) {
                links.push((link, s, a));
            }
        }
        self.deferred = deferred;
        self.deferred.clear();
        blocked.clear();
        blocked.resize(self.sockets.len(), false);
        // What a socket would not take at the last flush goes first.
        for (s, blocked) in blocked.iter_mut().enumerate() {
            *blocked = !self.send_batch(s);
        }
        for &(link, s, addr) in &links {
            if blocked[s] {
                self.deferred.push(link);
                continue;
            }
            while !blocked[s] {
                let step = {
                    let Some(t) = engine.poll_transmit(link) else {
                        break;
                    };
                    let size = t.segments.iter().map(|s| s.len()).sum();
                    let batch = &mut self.batches[s];
                    if batch.is_empty() && size > MAX_BATCH / 2 {
                        // No other datagram could join it: it goes as it
                        // is, without the copy into the batch.
                        let slices: heapless::Vec<IoSlice<'_>, { btl_core::engine::MAX_SEGMENTS }> =
                            t.segments.iter().map(|s| IoSlice::new(s)).collect();
                        let socket = &self.sockets[s].0;
                        let reported = &mut self.reported[s];
                        match send_past_reports(reported, || socket.send_to_vectored(&slices, addr))
                        {
                            Ok(_) => {
                                if let Some(tap) = self.capture.as_mut() {
                                    tap.frame(link_key(link), Direction::Out, &t.segments);
                                }
                                Step::Written(size)
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::Blocked,
                            // Too large, unreachable, ...: dropped, as the
                            // network may drop any datagram.
                            Err(_) => Step::Written(0),
                        }
                    } else if batch.push(addr, size, t.segments.iter().map(|s| &s[..])) {
                        Step::Written(size)
                    } else {
                        Step::SendBatch
                    }
                };
                match step {
                    Step::Written(size) => engine.handle_written(link, size),
                    Step::Blocked => blocked[s] = true,
                    Step::SendBatch => blocked[s] = !self.send_batch(s),
                }
            }
            if blocked[s] {
                self.deferred.push(link);
            }
        }
        for (s, blocked) in blocked.iter_mut().enumerate() {
            if !*blocked {
                *blocked = !self.send_batch(s);
            }
        }
        for s in 0..self.sockets.len() {
            if std::mem::take(&mut self.reported[s]) {
                self.refused(engine, s, now);
            }
        }
        for (s, &want) in blocked.iter().enumerate() {
            if want != self.write_interest[s]
                && let Some((socket, _)) = self.sockets.get_mut(s)
                && socket.rewatch(cx.registry, s, want).is_ok()
            {
                self.write_interest[s] = want;
            }
        }
        self.scratch_links = links;
        self.scratch_blocked = blocked;
    }
}

/// Sends with `send`; a failure is tried once more, and `reported` set.
/// With `IP_RECVERR` the kernel reports a refusal that an earlier
/// datagram met (to any peer) on the socket's next call, a send as well
/// as a receive: the send that hears of it fails, though it could go,
/// and goes once the report is cleared. The error queue is then read for
/// the refusal (`Udp::refused`). A send that fails twice fails for
/// itself (too large, no route): the datagram is dropped, as the network
/// may drop any.
fn send_past_reports<R>(
    reported: &mut bool,
    mut send: impl FnMut() -> io::Result<R>,
) -> io::Result<R> {
    match send() {
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => {
            *reported = true;
            send()
        }
        sent => sent,
    }
}

/// What became of one datagram the engine handed the transport.
enum Step {
    /// Sent, batched, or dropped (0 bytes): the engine may let it go.
    Written(usize),
    /// The socket would block: the engine keeps it.
    Blocked,
    /// It does not join the batch: the batch goes first.
    SendBatch,
}

/// The UDP component.
#[derive(Debug, Default)]
pub struct UdpComponent {
    ids: Option<UdpIds>,
}

#[derive(Debug, Clone, Copy)]
struct UdpIds {
    socket: SocketParams,
    own: Registered<1>,
}

/// Everything a UDP module needs from the parameters.
#[derive(Debug, Clone)]
pub struct UdpSetup {
    /// Socket-level settings.
    pub udp: UdpConfig,
    /// Fragment pools.
    pub pools: FragmentPoolsConfig,
    /// Engine timers and checks, without the process's name and key.
    pub engine: EngineConfig,
    /// The engine's tables (`btl_udp_max_peers`).
    pub capacities: Capacities,
}

impl UdpSetup {
    /// A module for process `me` of a job whose key is `job_key`.
    pub fn build(
        &self,
        me: ProcName,
        job_key: Option<&[u8]>,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> io::Result<UdpModule> {
        self.build_on(Os, me, job_key, bootstrap)
    }

    /// [`build`](Self::build) over network `net`.
    pub fn build_on<N: Net, M: Buffer>(
        &self,
        net: N,
        me: ProcName,
        job_key: Option<&[u8]>,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> io::Result<Module<Udp<N>, M>> {
        let mut config = self.engine.clone();
        config.me = me;
        config.job_key = crate::config::socket_params::job_key(job_key)?;
        let mut module = Module::open(
            NAME,
            config,
            self.pools,
            self.capacities,
            self.udp.spin,
            net,
            Directory::new(me, NAME, bootstrap, self.udp.lookup_timeout),
            |net, registry, directory| {
                Udp::start(me, self.udp.clone(), directory.bootstrap(), net, registry)
            },
        )?;
        if let Some(record) = &self.udp.record {
            module
                .start_recording(record.limit, record.dir.clone())
                .map_err(io::Error::other)?;
        }
        let [eager, max_send] = self.udp.chosen_sizes;
        let attributes = btl_core::btl::Btl::attributes(&module);
        for (chosen, applies) in [
            (eager, attributes.eager_limit),
            (max_send, attributes.max_send_size),
        ] {
            if let Some((name, size)) = chosen
                && size > applies as u64
            {
                tracing::warn!(
                    "udp {me}: {name} = {size} is capped at {applies} bytes: a message is one datagram of at most {} bytes (btl_udp_mtu) less the header and trailers; move more with a put",
                    module.transport().mtu()
                );
            }
        }
        Ok(module)
    }
}

impl Component for UdpComponent {
    type Module = UdpSetup;

    btl_core::btl_component_identity!(NAME, Version::new(0, 1, 0));

    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
        self.ids = Some(UdpIds {
            socket: SocketParams::register(
                params,
                &UDP_SOCKET_PARAMS,
                &UDP_POOL_PARAMS,
                &UDP_ENGINE_PARAMS,
                &UDP_CAPTURE_PARAMS,
            )?,
            own: Registered::register(params, &UDP_PARAMS)?,
        });
        Ok(())
    }

    fn init(&mut self, params: &dyn Params) -> Result<Modules<UdpSetup>, NotAvailable> {
        let ids = self
            .ids
            .ok_or(NotAvailable::new("parameters were not registered"))?;
        let na = |what: &dyn std::fmt::Display| NotAvailable::from_args(format_args!("{what}"));
        let settings = ids.socket.read(params).map_err(|e| na(&e))?;
        let mtu = params.int(ids.own.id("mtu")).map_err(|e| na(&e))?;
        let udp = UdpConfig {
            selection: settings.selection,
            ports: settings.ports,
            lookup_timeout: settings.lookup_timeout,
            capture: settings.capture,
            record: settings.record,
            chosen_sizes: settings.chosen_sizes,
            mtu: match usize::try_from(mtu) {
                Ok(0) => None,
                Ok(mtu) if mtu >= MIN_MTU => Some(mtu),
                _ => {
                    return Err(na(&format_args!(
                        "btl_udp_mtu = {mtu}: 0 (the interfaces') or {MIN_MTU} to 65507"
                    )));
                }
            },
            ..UdpConfig::default()
        };
        let (pools, engine, capacities) = (settings.pools, settings.engine, settings.capacities);
        let mut modules = Modules::new();
        let _ = modules.push(UdpSetup {
            udp,
            pools,
            engine,
            capacities,
        });
        Ok(modules)
    }
}

/// The bytes an address cookie is made for: the IP address and the port,
/// in the first `n` of the array.
fn address_bytes(at: SocketAddr) -> ([u8; 18], usize) {
    let mut out = [0u8; 18];
    let ip = match at.ip() {
        std::net::IpAddr::V4(ip) => {
            out[..4].copy_from_slice(&ip.octets());
            4
        }
        std::net::IpAddr::V6(ip) => {
            out[..16].copy_from_slice(&ip.octets());
            16
        }
    };
    out[ip..ip + 2].copy_from_slice(&at.port().to_be_bytes());
    (out, ip + 2)
}
