//! The sans-I/O engine over an in-memory stream pair: two [`Engine`](btl_core::engine::Engine)s, A
//! and B (two processes of one job, holding its key), driven by the core's
//! [`StreamPair`]: it opens the connections they ask for, carries what they
//! write through a bounded pipe per direction and connection (keeping
//! whatever the reader does not take yet, and the rest in the writer when a
//! pipe is full), closes what they close, and runs a fake clock. The
//! harness adds only the rogue process of the handshake hook.
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
//!   fresh accepted link, whose other end the harness plays) and send a
//!   HELLO of another major version, a full handshake from a third engine
//!   holding another job key, or garbage. The rogue ignores what the
//!   target answers (it never checks the target's proof), so only the
//!   target can refuse; the outcome is `Refused` once the target closes
//!   that link.
//! - `inject_garbage` writes garbage into the established connection
//!   towards the target, at a frame boundary, as if its peer had sent it.

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::{Capacities, ConnectRequest, LinkId, Stream};
use btl_core::time::{Duration, Instant};
use btl_core::wire::{self, CloseReason, Limits, PacketRepr};
use btl_std::driver::heap::{Heap, HeapEngine};

use crate::pair::pipe::{Pipe, write_link};
use crate::pair::stream::{Closure, ConnId, Role, StreamPair};
use crate::rogue;
use crate::world::{BadHandshake, Capabilities, HandshakeOutcome, Memory, Side, World};

/// What an engine of the harness holds: A or B and a rogue, two links
/// each connected from both sides at once, more registrations than any
/// suite keeps at once.
pub const CAPACITIES: Capacities = Capacities {
    peers: 4,
    links: 8,
    ops: 64,
    events: 256,
    registrations: 16,
};

/// The engine the harness runs on each side.
pub type PairEngine = HeapEngine<Stream>;

/// Bytes each pipe holds: less than the largest frames (64 KiB sends and
/// puts), so writes and reads are partial all the time.
pub const PIPE: usize = 32 << 10;
/// Connection slots: two links, each connected from both sides at once, a
/// rogue, and room to keep closed ones visible.
pub const CONNS: usize = 8;

/// The driver of A and B.
pub type Pair = StreamPair<PairEngine, PIPE, CONNS, Box<PairEngine>>;

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
/// The seed of the pair's nonces: every run is the same.
pub const SEED: u64 = 0x5742_5EED;

/// Largest message sent eagerly (`eager_limit`).
pub const EAGER: usize = 4096;
/// Largest message (`max_send_size`).
pub const MAX_SEND: usize = 64 << 10;
/// Fragments of each class: small, so that a stalled receiver fills the
/// credit window and the sender's queue quickly.
pub const FRAGMENTS: u32 = 64;
/// Fake nanoseconds per progress round: a millisecond, so that the
/// handshake timeout (5 s) is far beyond [`MAX_ROUNDS`] and the shortened
/// [`PEER_TIMEOUT`] within it.
pub const TICK: Duration = Duration::from_millis(1);
/// Progress rounds within which anything must finish (a peer timeout
/// included).
pub const MAX_ROUNDS: u32 = 4_000;
/// A peer silent this long is lost: a killed peer's survivor reconnects
/// (and fails to) until then. Short, so that it comes within the suite's
/// rounds; far above any pause the suite makes.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(1);

/// The rogue third process of the last `inject_handshake`: the external
/// end of a connection towards the target.
struct Rogue {
    conn: ConnId,
    target: Side,
    /// The engine with the wrong job key and its link, for
    /// [`BadHandshake::WrongJobKey`]; the other kinds only wrote their
    /// bytes when they connected.
    engine: Option<(Box<PairEngine>, LinkId)>,
    /// The target closed the connection itself.
    refused: bool,
    /// The reason of the target's CLOSE, once the rogue has read it.
    close: Option<CloseReason>,
    /// The rogue's engine has been told the connection ended.
    told: bool,
}

/// A and B as two engines over an in-memory stream pair.
pub struct StreamPairWorld {
    pair: Box<Pair>,
    /// The endpoint of B at A and of A at B.
    peers: [EndpointId; 2],
    rogue: Option<Rogue>,
}

impl StreamPairWorld {
    /// Two engines of one job, each knowing the other (`add_procs`), no
    /// connection yet: the first operation opens one.
    pub fn new() -> Self {
        Self::with_links(1)
    }

    /// As [`new`](Self::new), with `links` connections per peer: puts are
    /// striped across them.
    pub fn with_links(links: u8) -> Self {
        let mut pair = Box::new(Pair::new(
            engine_of(A_NAME, KEY, links),
            engine_of(B_NAME, KEY, links),
            [A_NAME, B_NAME],
            SEED,
        ));
        pair.set_tick(TICK);
        let peers = pair.introduce().expect("A and B reach each other");
        StreamPairWorld {
            pair,
            peers,
            rogue: None,
        }
    }

    /// The reason of the CLOSE the target of the last
    /// [`inject_handshake`](World::inject_handshake) sent the rogue, if any.
    pub fn rogue_close_reason(&self) -> Option<CloseReason> {
        self.rogue.as_ref().and_then(|r| r.close)
    }

    /// The rogue's part of a round, before the pair's: it reads what the
    /// target sent (HELLOs to its engine, a CLOSE's reason noted), its
    /// engine writes, and it learns of the end of the connection.
    fn drive_rogue(&mut self) {
        let now = self.pair.now();
        let Some(rogue) = self.rogue.as_mut() else {
            return;
        };
        let Some(conn) = self.pair.connection(rogue.conn) else {
            return;
        };
        if let Ok(pipe) = self.pair.pipe_mut(rogue.conn, Role::Opener) {
            let engine = rogue.engine.as_mut().map(|(e, link)| (&mut **e, *link));
            if let Some(reason) = feed_rogue(engine, pipe, now) {
                rogue.close = Some(reason);
            }
        }
        let Some((e, link)) = rogue.engine.as_mut() else {
            return;
        };
        if conn.closure(Role::Opener).is_none()
            && let Ok(pipe) = self.pair.pipe_mut(rogue.conn, Role::Acceptor)
        {
            let keep = conn.closure(Role::Acceptor).is_none();
            write_link(e, *link, keep.then_some(pipe));
        }
        if conn.closure(Role::Opener).is_some() && !rogue.told {
            e.handle_closed(*link, now);
            rogue.told = true;
        }
        if e.poll_timeout().is_some_and(|t| t <= now) {
            e.handle_timeout(now);
        }
        e.progress();
        while let Some(l) = e.poll_close() {
            if l == *link && !rogue.told {
                e.handle_closed(l, now);
                rogue.told = true;
                let _ = self.pair.close_external(rogue.conn);
            }
        }
    }

    /// After the pair's round: whether the target closed the rogue's
    /// connection itself.
    fn check_rogue(&mut self) {
        let Some(rogue) = self.rogue.as_mut() else {
            return;
        };
        if let Some(conn) = self.pair.connection(rogue.conn)
            && conn.closure(Role::Acceptor) == Some(Closure::Closed)
        {
            rogue.refused = true;
        }
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
            sendi_max: self.pair.engine(Side::A).attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: true,
            garbage: true,
        }
    }

    fn btl(&mut self, s: Side) -> &mut dyn Btl<Memory = Memory> {
        self.pair.engine_mut(s)
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        self.drive_rogue();
        self.pair.round();
        self.check_rogue();
    }

    fn pause(&mut self, s: Side) {
        self.pair.pause(s);
    }

    fn resume(&mut self, s: Side) {
        self.pair.resume(s);
    }

    fn kill(&mut self, s: Side) {
        self.pair.kill(s);
    }

    fn inject_handshake(&mut self, target: Side, kind: BadHandshake) {
        let conn = self
            .pair
            .connect_external(target)
            .expect("the harness sizes CONNS and LINKS for a rogue");
        let mut engine = None;
        let bytes = match kind {
            BadHandshake::WrongVersion => {
                rogue::hello_of_another_version(ROGUE_NAME, self.pair.nonce())
            }
            BadHandshake::Garbage => rogue::garbage(0x6A7B_0001),
            BadHandshake::WrongJobKey => {
                let mut rogue = engine_of(ROGUE_NAME, ROGUE_KEY, 1);
                let proc = [A_NAME, B_NAME][target as usize];
                let endpoint = super::add_peer(&mut *rogue, proc);
                let req = ConnectRequest {
                    endpoint,
                    proc,
                    listed_as: proc,
                    link_index: 0,
                };
                let nonce = self.pair.nonce();
                let link = rogue
                    .handle_connected(req, nonce, self.pair.now())
                    .expect("a fresh engine has a free link");
                engine = Some((rogue, link));
                Vec::new()
            }
        };
        let n = self
            .pair
            .inject(conn, Role::Acceptor, &bytes)
            .expect("a fresh connection");
        assert_eq!(n, bytes.len(), "the rogue's bytes fit the pipe");
        self.rogue = Some(Rogue {
            conn,
            target,
            engine,
            refused: false,
            close: None,
            told: false,
        });
    }

    fn handshake_outcome(&mut self) -> HandshakeOutcome {
        let Some(rogue) = self.rogue.as_ref() else {
            return HandshakeOutcome::Pending;
        };
        let good = self.peers[rogue.target as usize];
        let e = self.pair.engine(rogue.target);
        let accepted = e.endpoints().any(|ep| ep != good && e.is_connected(ep));
        if accepted {
            HandshakeOutcome::Accepted
        } else if rogue.refused {
            HandshakeOutcome::Refused
        } else {
            HandshakeOutcome::Pending
        }
    }

    fn inject_garbage(&mut self, target: Side) {
        let conn = self
            .pair
            .established()
            .expect("an established connection between A and B");
        let to = conn
            .role_of(target)
            .expect("the connection has an end at the target");
        assert!(
            conn.between_frames(to),
            "the pipe towards the target ends between frames"
        );
        let bytes = rogue::garbage(0x6A7B_0002);
        let n = self
            .pair
            .inject(conn.id, to, &bytes)
            .expect("an open connection");
        assert_eq!(n, bytes.len(), "the garbage fits the pipe");
    }
}

/// An engine of process `me` holding `key`, with CRC32C trailers.
fn engine_of(me: ProcName, key: &[u8], links: u8) -> Box<PairEngine> {
    let mut config = super::engine_config(me, key, TICK, 100);
    config.links = links;
    config.peer_timeout = PEER_TIMEOUT;
    let cfg = super::pools(EAGER, MAX_SEND, FRAGMENTS);
    let mut e = Box::new(
        Heap::engine(config, Stream, CAPACITIES, cfg, Instant::ZERO).expect("engine pools"),
    );
    e.set_name("stream-pair");
    e
}

/// What the target sends a rogue, frame by frame: a HELLO goes to the
/// rogue's engine if it has one, the rest is dropped. Returns the reason of
/// a CLOSE among them.
fn feed_rogue(
    mut rogue: Option<(&mut PairEngine, LinkId)>,
    pipe: &mut Pipe<PIPE>,
    now: Instant,
) -> Option<CloseReason> {
    let limits = Limits::new(1 << 20);
    let mut close = None;
    while let Ok((_, packet, used)) = wire::parse(pipe.make_contiguous(), &limits) {
        match packet {
            PacketRepr::Close(c) => close = Some(c.reason),
            PacketRepr::Hello(_) => {
                if let Some((e, link)) = rogue.as_mut() {
                    let taken = e.handle_stream(*link, &pipe.make_contiguous()[..used], now);
                    assert_eq!(taken, Ok(used), "the rogue takes a HELLO whole");
                }
            }
            _ => {}
        }
        pipe.consume(used);
    }
    close
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
