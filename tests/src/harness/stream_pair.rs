//! The sans-I/O engine over an in-memory stream pair: two [`Engine`]s, A
//! and B (two processes of one job, holding its key), joined by a byte
//! pipe each way. The harness is the driver of both: it opens the
//! connections they ask for, carries what they write to the other end
//! (keeping whatever the reader does not take yet), closes what they
//! close, and runs a fake clock.
//!
//! Every fault hook is real:
//!
//! - `pause` stops driving a side altogether: no bytes into it or out of
//!   it, no accepts, closes, timeouts or progress; what is sent to it waits
//!   in its pipe.
//! - `kill` breaks the side's connections without a goodbye: what was in
//!   flight either way is lost, and the survivor is told its link closed
//!   (`handle_closed`). The dead engine is never driven again.
//! - `inject_handshake` has a rogue third process connect to the target (a
//!   fresh accepted link) and send a HELLO of another major version, a full
//!   handshake from a third engine holding another job key, or garbage.
//!   The rogue ignores what the target answers (it never checks the
//!   target's proof), so only the target can refuse; the outcome is
//!   `Refused` once the target closes that link.
//! - `inject_garbage` writes garbage into the established connection
//!   towards the target, at a frame boundary, as if its peer had sent it.

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Engine, LinkId};
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use btl_core::wire::{
    self, CloseReason, HEADER_LEN, HeaderRepr, HelloRepr, Limits, NONCE_LEN, PacketRepr, SendRepr,
    VERSION_MAJOR, VERSION_MINOR,
};

use crate::data::{leak, pattern};
use crate::world::{BadHandshake, Capabilities, HandshakeOutcome, Side, World};

/// Peers an engine of the harness knows (A or B, and a rogue).
pub const PEERS: usize = 4;
/// Connections an engine of the harness holds at once.
pub const LINKS: usize = 8;
/// Registrations: more than any suite keeps at once.
pub const REGS: usize = 16;

/// The engine the harness runs on each side.
pub type PairEngine = Engine<'static, 'static, PEERS, LINKS, REGS>;

/// The job of A, B and the rogue.
pub const JOB: u64 = 0x5742;
/// A's process name. A has the higher rank: when both sides connect at once
/// (the handshake and finalize tests send both ways before any progress),
/// the connection of the lower name survives, and A's own, which opens
/// first at A and carries A's first packets, is the one dropped. The
/// engine then sends them again on B's.
pub const A_NAME: ProcName = ProcName::new(JOB, 1);
/// B's process name.
pub const B_NAME: ProcName = ProcName::new(JOB, 0);
/// The rogue's process name.
pub const ROGUE_NAME: ProcName = ProcName::new(JOB, 2);
/// The job key A and B hold.
pub const KEY: &[u8] = b"stream-pair job key";
/// The key of the rogue of [`BadHandshake::WrongJobKey`].
pub const ROGUE_KEY: &[u8] = b"some other job's key";

/// Largest message sent eagerly (`eager_limit`).
pub const EAGER: usize = 4096;
/// Largest message (`max_send_size`).
pub const MAX_SEND: usize = 64 << 10;
/// Fragments of each class: small, so that a stalled receiver fills the
/// credit window and the sender's queue quickly.
pub const FRAGMENTS: u32 = 64;
/// Fake nanoseconds per progress round. With [`MAX_ROUNDS`] rounds a wait
/// stays well within the engine's handshake (5 s) and peer (30 s)
/// timeouts, so only a real stall times out.
pub const TICK: u64 = 1_000_000;
/// Progress rounds within which anything must finish.
pub const MAX_ROUNDS: u32 = 2_000;

/// Headroom a descriptor keeps for the engine's packet header.
const PREFIX: usize = HEADER_LEN + SendRepr::LEN;
/// Garbage bytes the rogue or `inject_garbage` sends.
const GARBAGE_LEN: usize = 256;
/// Iterations of a loop that must end long before.
const BOUND: usize = 1 << 20;

/// A process of the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Side(Side),
    /// The engine of the rogue with the wrong job key.
    Rogue,
}

/// One end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// An engine's link.
    Link(Node, LinkId),
    /// Opened towards a process that has not accepted it yet (paused).
    Accepting(Node),
    /// A rogue that is no engine: its bytes were queued when it connected,
    /// and what it is sent is dropped.
    Raw,
}

/// Bytes in flight one way, oldest first.
#[derive(Debug, Default)]
struct Pipe {
    bytes: Vec<u8>,
    head: usize,
}

impl Pipe {
    fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn pending(&self) -> &[u8] {
        &self.bytes[self.head..]
    }

    fn is_empty(&self) -> bool {
        self.head == self.bytes.len()
    }

    fn consume(&mut self, n: usize) {
        self.head += n;
        if self.is_empty() {
            self.clear();
        } else if self.head >= 1 << 20 && 2 * self.head >= self.bytes.len() {
            self.bytes.drain(..self.head);
            self.head = 0;
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.head = 0;
    }
}

/// A stream connection: `ends[0]` opened it, `ends[1]` accepted it.
#[derive(Debug)]
struct Conn {
    id: u64,
    ends: [End; 2],
    /// Bytes in flight towards each end.
    to: [Pipe; 2],
    /// Each end has closed its side, or been told the other did.
    closed: [bool; 2],
    /// `ends[0]` is a rogue: it takes only the target's HELLO frames (it
    /// never checks the target's proof, so it cannot refuse first).
    rogue: bool,
}

impl Conn {
    fn new(id: u64, ends: [End; 2]) -> Self {
        Conn {
            id,
            ends,
            to: Default::default(),
            closed: [false; 2],
            rogue: false,
        }
    }
}

/// The engines: A, B, and the rogue's once it exists; boxed, since an
/// engine holds all its state inline (some 200 KiB).
struct Engines {
    a: Box<PairEngine>,
    b: Box<PairEngine>,
    rogue: Option<Box<PairEngine>>,
    paused: [bool; 2],
    dead: [bool; 2],
}

impl Engines {
    /// The engine of `node` if it is driven now (alive, not paused).
    fn active(&mut self, node: Node) -> Option<&mut PairEngine> {
        match node {
            Node::Side(side) if self.paused[side as usize] || self.dead[side as usize] => None,
            Node::Side(Side::A) => Some(&mut self.a),
            Node::Side(Side::B) => Some(&mut self.b),
            Node::Rogue => self.rogue.as_deref_mut(),
        }
    }
}

/// A and B as two engines over an in-memory stream pair.
pub struct StreamPairWorld {
    engines: Engines,
    /// The endpoint of B at A and of A at B.
    peers: [EndpointId; 2],
    conns: Vec<Conn>,
    next_conn: u64,
    now: u64,
    nonces: u64,
    /// The connection of the last injected rogue and its target; whether
    /// the target closed it, and the reason its CLOSE gave.
    rogue: Option<(u64, Side)>,
    rogue_refused: bool,
    rogue_close: Option<CloseReason>,
}

impl StreamPairWorld {
    /// Two engines of one job, each knowing the other (`add_procs`), no
    /// connection yet: the first operation opens one.
    pub fn new() -> Self {
        let mut a = engine(A_NAME, KEY);
        let mut b = engine(B_NAME, KEY);
        let peers = [add(&mut a, B_NAME), add(&mut b, A_NAME)];
        StreamPairWorld {
            engines: Engines {
                a,
                b,
                rogue: None,
                paused: [false; 2],
                dead: [false; 2],
            },
            peers,
            conns: Vec::new(),
            next_conn: 0,
            now: 1,
            nonces: 0,
            rogue: None,
            rogue_refused: false,
            rogue_close: None,
        }
    }

    /// The reason of the CLOSE the target of the last
    /// [`inject_handshake`](World::inject_handshake) sent the rogue, if any.
    pub fn rogue_close_reason(&self) -> Option<CloseReason> {
        self.rogue_close
    }

    /// Fresh nonce bytes, distinct for every link.
    fn nonce(&mut self) -> [u8; NONCE_LEN] {
        self.nonces += 1;
        let mut n = [0; NONCE_LEN];
        n[..8].copy_from_slice(&self.nonces.to_le_bytes());
        n[8..].copy_from_slice(&(!self.nonces).to_le_bytes());
        n
    }

    fn add_conn(&mut self, ends: [End; 2]) -> usize {
        self.next_conn += 1;
        self.conns.push(Conn::new(self.next_conn, ends));
        self.conns.len() - 1
    }

    /// The accepting end of a new connection towards `node`: accepted now
    /// if it is driven, else when it is again.
    fn accept(&mut self, node: Node) -> End {
        let nonce = self.nonce();
        let now = self.now;
        match self.engines.active(node) {
            Some(e) => End::Link(
                node,
                e.handle_accepted(nonce, now)
                    .expect("the harness sizes LINKS for every connection"),
            ),
            None => End::Accepting(node),
        }
    }

    /// Accepts the connections opened towards processes now driven again.
    fn serve_accepts(&mut self) {
        for i in 0..self.conns.len() {
            for end in 0..2 {
                if let End::Accepting(node) = self.conns[i].ends[end]
                    && self.engines.active(node).is_some()
                {
                    self.conns[i].ends[end] = self.accept(node);
                }
            }
        }
    }

    /// Opens the connections the engines ask for.
    fn serve_connects(&mut self) {
        for side in Side::BOTH {
            let node = Node::Side(side);
            for _ in 0..BOUND {
                let Some(req) = self.engines.active(node).and_then(|e| e.poll_connect()) else {
                    break;
                };
                let target = match req.proc {
                    p if p == A_NAME => Side::A,
                    p if p == B_NAME => Side::B,
                    other => panic!("{side:?} asked to connect to unknown process {other}"),
                };
                let now = self.now;
                if self.engines.dead[target as usize] {
                    if let Some(e) = self.engines.active(node) {
                        e.handle_connect_failed(req.endpoint, now);
                    }
                    continue;
                }
                let nonce = self.nonce();
                let link = self
                    .engines
                    .active(node)
                    .expect("driven")
                    .handle_connected(req.endpoint, nonce, now)
                    .expect("the harness sizes LINKS for every connection");
                let accepted = self.accept(Node::Side(target));
                self.add_conn([End::Link(node, link), accepted]);
            }
        }
    }

    /// Moves what every driven end writes into the other end's pipe, then
    /// feeds every driven end what its pipe holds, and tells an end whose
    /// peer closed once it has read everything before the close.
    fn move_bytes(&mut self) {
        let now = self.now;
        let Self {
            engines,
            conns,
            rogue_close,
            ..
        } = self;
        for conn in conns.iter_mut() {
            for from in 0..2 {
                let End::Link(node, link) = conn.ends[from] else {
                    continue;
                };
                if conn.closed[from] {
                    continue;
                }
                let Some(e) = engines.active(node) else {
                    continue;
                };
                let keep = !conn.closed[1 - from];
                transmit(e, link, &mut conn.to[1 - from], keep);
            }
            for to in 0..2 {
                if conn.closed[to] {
                    continue;
                }
                match conn.ends[to] {
                    _ if conn.rogue && to == 0 => {
                        let rogue = match conn.ends[0] {
                            End::Link(node, link) => engines.active(node).map(|e| (e, link)),
                            _ => None,
                        };
                        if let Some(reason) = feed_rogue(rogue, &mut conn.to[0], now) {
                            *rogue_close = Some(reason);
                        }
                    }
                    End::Raw => conn.to[to].clear(),
                    End::Accepting(_) => {}
                    End::Link(node, link) => {
                        if let Some(e) = engines.active(node) {
                            feed(e, link, &mut conn.to[to], now);
                        }
                    }
                }
                // End of stream once everything before it was read.
                if conn.closed[1 - to] && conn.to[to].is_empty() {
                    match conn.ends[to] {
                        End::Link(node, link) => {
                            if let Some(e) = engines.active(node) {
                                e.handle_closed(link, now);
                                conn.closed[to] = true;
                            }
                        }
                        End::Accepting(_) | End::Raw => conn.closed[to] = true,
                    }
                }
            }
        }
    }

    /// Closes the links the engines are done with; the other end sees the
    /// end of the stream once it has read what came before.
    fn serve_closes(&mut self) {
        let now = self.now;
        for node in [Node::Side(Side::A), Node::Side(Side::B), Node::Rogue] {
            for _ in 0..BOUND {
                let Some(link) = self.engines.active(node).and_then(|e| e.poll_close()) else {
                    break;
                };
                let found = self.conns.iter_mut().find_map(|c| {
                    let end =
                        (0..2).find(|&i| !c.closed[i] && c.ends[i] == End::Link(node, link))?;
                    Some((c, end))
                });
                // Already closed (the engine may ask more than once).
                let Some((conn, end)) = found else {
                    continue;
                };
                if let Some(e) = self.engines.active(node) {
                    e.handle_closed(link, now);
                }
                conn.closed[end] = true;
                conn.to[end].clear();
                if let Some((id, target)) = self.rogue
                    && conn.id == id
                    && node == Node::Side(target)
                {
                    self.rogue_refused = true;
                }
            }
        }
        self.conns.retain(|c| !(c.closed[0] && c.closed[1]));
    }

    /// The established connection between A and B, for `inject_garbage`.
    fn established(&self) -> Option<usize> {
        let is_pair_link = |e: &End| matches!(e, End::Link(Node::Side(_), _));
        self.conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.ends.iter().all(is_pair_link) && !c.closed[0] && !c.closed[1])
            .max_by_key(|(_, c)| c.id)
            .map(|(i, _)| i)
    }
}

impl Default for StreamPairWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl World for StreamPairWorld {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            same_btl: false,
            max_rounds: MAX_ROUNDS,
            linger_rounds: 2,
            max_rdma_len: 64 << 20,
            sendi_max: self.engines.a.attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: true,
            garbage: true,
        }
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<'static> {
        match side {
            Side::A => &mut *self.engines.a,
            Side::B => &mut *self.engines.b,
        }
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        self.now += TICK;
        self.serve_accepts();
        self.serve_connects();
        self.move_bytes();
        self.serve_closes();
        let now = self.now;
        for node in [Node::Side(Side::A), Node::Side(Side::B), Node::Rogue] {
            if let Some(e) = self.engines.active(node) {
                e.handle_timeout(now);
                e.progress();
            }
        }
    }

    fn pause(&mut self, side: Side) {
        self.engines.paused[side as usize] = true;
    }

    fn resume(&mut self, side: Side) {
        self.engines.paused[side as usize] = false;
    }

    fn kill(&mut self, side: Side) {
        let now = self.now;
        self.engines.dead[side as usize] = true;
        let dead = Node::Side(side);
        for conn in &mut self.conns {
            let Some(end) = (0..2).find(|&i| match conn.ends[i] {
                End::Link(node, _) | End::Accepting(node) => node == dead,
                End::Raw => false,
            }) else {
                continue;
            };
            // A crash resets the connection: nothing more arrives either way.
            conn.closed[end] = true;
            conn.to[0].clear();
            conn.to[1].clear();
            let other = 1 - end;
            if conn.closed[other] {
                continue;
            }
            match conn.ends[other] {
                End::Link(node, link) => {
                    if let Some(e) = self.engines.active(node) {
                        e.handle_closed(link, now);
                        conn.closed[other] = true;
                    }
                }
                End::Accepting(_) | End::Raw => conn.closed[other] = true,
            }
        }
        self.conns.retain(|c| !(c.closed[0] && c.closed[1]));
    }

    fn inject_handshake(&mut self, target: Side, kind: BadHandshake) {
        let target_end = self.accept(Node::Side(target));
        let i = match kind {
            BadHandshake::WrongVersion => {
                let mut frame = rogue_hello(self.nonce());
                let major = HEADER_LEN + 4;
                assert_eq!(
                    frame[major], VERSION_MAJOR,
                    "the HELLO's major version byte"
                );
                frame[major] = VERSION_MAJOR + 1;
                let i = self.add_conn([End::Raw, target_end]);
                self.conns[i].to[1].push(&frame);
                i
            }
            BadHandshake::Garbage => {
                let i = self.add_conn([End::Raw, target_end]);
                self.conns[i].to[1].push(&garbage(0x6A7B_0001));
                i
            }
            BadHandshake::WrongJobKey => {
                let mut rogue = engine(ROGUE_NAME, ROGUE_KEY);
                let ep = add(&mut rogue, [A_NAME, B_NAME][target as usize]);
                let nonce = self.nonce();
                let link = rogue
                    .handle_connected(ep, nonce, self.now)
                    .expect("a fresh engine has a free link");
                self.engines.rogue = Some(rogue);
                self.add_conn([End::Link(Node::Rogue, link), target_end])
            }
        };
        self.conns[i].rogue = true;
        self.rogue = Some((self.conns[i].id, target));
        self.rogue_refused = false;
        self.rogue_close = None;
    }

    fn handshake_outcome(&mut self) -> HandshakeOutcome {
        let Some((_, target)) = self.rogue else {
            return HandshakeOutcome::Pending;
        };
        let good = self.peers[target as usize];
        let e = match target {
            Side::A => &*self.engines.a,
            Side::B => &*self.engines.b,
        };
        let accepted = (0..PEERS as u16)
            .map(EndpointId)
            .any(|ep| ep != good && e.is_connected(ep));
        if accepted {
            HandshakeOutcome::Accepted
        } else if self.rogue_refused {
            HandshakeOutcome::Refused
        } else {
            HandshakeOutcome::Pending
        }
    }

    fn inject_garbage(&mut self, target: Side) {
        let i = self
            .established()
            .expect("an established connection between A and B");
        let conn = &mut self.conns[i];
        let end = (0..2)
            .find(|&e| matches!(conn.ends[e], End::Link(Node::Side(s), _) if s == target))
            .expect("the connection has an end at the target");
        // The pipe holds whole frames: the garbage starts at a frame boundary.
        conn.to[end].push(&garbage(0x6A7B_0002));
    }
}

/// An engine of process `me` holding `key`, with CRC32C trailers, its pools
/// carved from a leaked region.
fn engine(me: ProcName, key: &[u8]) -> Box<PairEngine> {
    let pool = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + PREFIX,
        num: FRAGMENTS,
        max: FRAGMENTS,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(EAGER),
        max: pool(MAX_SEND),
    };
    let pools =
        FragmentPools::new(leak(FragmentPools::required_bytes(&cfg)), cfg).expect("engine pools");
    let mut config = EngineConfig::new(me);
    config.job_key = Some(key.try_into().expect("a short job key"));
    config.checksum = true;
    let mut e = Box::new(Engine::new(config, pools));
    e.set_name("stream-pair");
    e
}

/// Makes `proc` known to `e`; returns its endpoint.
fn add(e: &mut PairEngine, proc: ProcName) -> EndpointId {
    let mut endpoint = [None];
    let mut words = [0u64];
    e.add_procs(&[proc], &mut endpoint, &mut Reachability::new(&mut words))
        .expect("add_procs");
    endpoint[0].expect("the engine reaches the other process")
}

/// Writes everything `e` has for `link` into `out` (or drops it, when the
/// other end has closed).
fn transmit(e: &mut PairEngine, link: LinkId, out: &mut Pipe, keep: bool) {
    for _ in 0..BOUND {
        let n = {
            let Some(t) = e.poll_transmit(link) else {
                return;
            };
            let mut n = 0;
            for segment in &t.segments {
                if keep {
                    out.push(segment);
                }
                n += segment.len();
            }
            n
        };
        e.handle_written(link, n);
    }
    panic!("link {link:?} never ran out of bytes to write");
}

/// Hands `e` what `pipe` holds for `link`; keeps what it does not take yet.
fn feed(e: &mut PairEngine, link: LinkId, pipe: &mut Pipe, now: u64) {
    if pipe.is_empty() {
        return;
    }
    match e.handle_stream(link, pipe.pending(), now) {
        Ok(n) => pipe.consume(n),
        // The engine has dropped the link: nothing more is read from it.
        Err(_) => pipe.clear(),
    }
}

/// What the target sends a rogue, frame by frame: a HELLO goes to the
/// rogue's engine if it has one, the rest is dropped. Returns the reason of
/// a CLOSE among them.
fn feed_rogue(
    mut rogue: Option<(&mut PairEngine, LinkId)>,
    pipe: &mut Pipe,
    now: u64,
) -> Option<CloseReason> {
    let limits = Limits::new(1 << 20);
    let mut close = None;
    while let Ok((_, packet, used)) = wire::parse(pipe.pending(), &limits) {
        match packet {
            PacketRepr::Close(c) => close = Some(c.reason),
            PacketRepr::Hello(_) => {
                if let Some((e, link)) = rogue.as_mut() {
                    let taken = e.handle_stream(*link, &pipe.pending()[..used], now);
                    assert_eq!(taken, Ok(used), "the rogue takes a HELLO whole");
                }
            }
            _ => {}
        }
        pipe.consume(used);
    }
    close
}

/// A valid HELLO frame from the rogue process, announcing a job key.
fn rogue_hello(nonce: [u8; NONCE_LEN]) -> Vec<u8> {
    let hello = HelloRepr {
        version_minor: VERSION_MINOR,
        link_index: 0,
        job: ROGUE_NAME.job,
        rank: ROGUE_NAME.rank,
        capabilities: wire::Capabilities::JOB_KEY,
        nonce,
        max_body: 1 << 20,
        initial_credits: 16,
    };
    let packet = PacketRepr::Hello(hello);
    let mut frame = vec![0; HEADER_LEN + HelloRepr::LEN];
    let len = wire::emit(&HeaderRepr::new(&packet), &packet, &mut frame).expect("a HELLO frame");
    frame.truncate(len);
    frame
}

/// Bytes that are no protocol: a pseudo-random pattern that does not start
/// with a packet type.
fn garbage(seed: u64) -> Vec<u8> {
    let mut bytes = pattern(seed, GARBAGE_LEN);
    bytes[0] |= 0x80;
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::track::{Tracker, round};

    /// The target, not the rogue, refuses, and its CLOSE names the fault.
    #[test]
    fn the_target_closes_the_rogue_with_the_reason_of_its_fault() {
        for (kind, reason) in [
            (BadHandshake::WrongVersion, CloseReason::VersionMismatch),
            (BadHandshake::WrongJobKey, CloseReason::AuthFailed),
            (BadHandshake::Garbage, CloseReason::ProtocolError),
        ] {
            let mut world = StreamPairWorld::new();
            let mut tracker = Tracker::new(&world);
            world.inject_handshake(Side::B, kind);
            for _ in 0..10 {
                round(&mut world, &mut tracker);
            }
            assert_eq!(
                world.handshake_outcome(),
                HandshakeOutcome::Refused,
                "{kind:?}"
            );
            assert_eq!(world.rogue_close_reason(), Some(reason), "{kind:?}");
            assert!(tracker.seen.is_empty(), "{kind:?}: {:?}", tracker.seen);
        }
    }
}
