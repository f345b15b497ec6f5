//! The engine over smoltcp: A and B are two boards, each an engine, a
//! driver of `btl_core::smoltcp` and a smoltcp interface, joined by an
//! in-memory Ethernet cable ([`Wire`]) that may lose, duplicate and
//! reorder frames. [`SmolTcpWorld`] runs the stream framing over smoltcp's
//! TCP, [`SmolUdpWorld`] the datagram framing over its UDP.
//!
//! Time is simulated: each round moves the clock by [`TICK`], and when no
//! frame is on its way to a board that is still running, on to the
//! earliest deadline of the engines, drivers and interfaces (smoltcp's TCP
//! waits a second before it sends a lost segment again).
//!
//! Fault hooks: `pause` stops polling a side (what is sent to it waits on
//! the cable, up to its capacity), `kill` cuts its end of the cable for
//! good: nobody is told, and the survivor finds out by its keepalives.

use std::boxed::Box;
use std::vec;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::{Capacities, Datagram, Framing, Stream};
use btl_core::smoltcp::{Driver, Nonces, PeerAddr, TcpDriver, UdpDriver, smol_instant};
use btl_core::time::{Duration, Instant};
use btl_core::wire::NONCE_LEN;
use btl_std::driver::heap::{Heap, HeapEngine};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::{tcp, udp};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};

use crate::pair::SplitMix64;
use crate::pair::datagram::Faults;
use crate::pair::ethernet::Wire;
use crate::world::{Capabilities, Memory, Side, World};

/// What an engine of the harness holds.
pub const CAPACITIES: Capacities = Capacities {
    peers: 4,
    links: 4,
    ops: 64,
    events: 256,
    registrations: 16,
};

/// The job of A and B.
pub const JOB: u64 = 0x5307;
/// The process names of A and B.
pub const NAMES: [ProcName; 2] = [ProcName::new(JOB, 1), ProcName::new(JOB, 0)];
/// The job key both hold.
pub const KEY: &[u8] = b"smoltcp job key";
/// The port both listen on.
pub const PORT: u16 = 7000;
/// Payload of an eager fragment.
pub const EAGER: usize = 1024;
/// Fragments of each class.
pub const FRAGMENTS: u32 = 64;
/// The largest TCP message: what a max fragment holds.
pub const MAX_SEND: usize = 16 << 10;
/// A UDP datagram's payload on an Ethernet frame: 1500 bytes less the IPv4
/// and UDP headers.
pub const UDP_MTU: usize = 1500 - 20 - 8;
/// Bytes each way of a TCP socket's buffers: below 64 KiB, so that no
/// window scaling is needed.
pub const TCP_BUFFER: usize = 32 << 10;
/// TCP sockets of a board: one per link and one to listen with.
pub const SOCKETS: usize = 4;
/// Simulated time per round.
pub const TICK: Duration = Duration::from_millis(1);
/// A peer silent this long is lost.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(20);
/// Silence after which a keepalive goes out.
pub const KEEPALIVE: Duration = Duration::from_secs(2);
/// Frames the cable holds each way.
pub const CABLE: usize = 256;
/// Progress rounds within which anything must finish.
pub const MAX_ROUNDS: u32 = 20_000;
/// The seed of the cable's faults and the boards' nonces.
pub const SEED: u64 = 0x5307_5EED;
/// What a faulty cable does: 2 % of frames lost, 1 % duplicated, 3 %
/// reordered.
pub const FAULTS: Faults = Faults {
    loss: 20,
    duplication: 10,
    reordering: 30,
};

/// The IPv4 address of `side`'s board.
fn address(side: Side) -> IpAddress {
    IpAddress::v4(10, 53, 0, 1 + side.index() as u8)
}

/// Handshake nonces from a seeded generator: deterministic runs.
pub struct SeededNonces(SplitMix64);

impl SeededNonces {
    /// Nonces drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        SeededNonces(SplitMix64(seed))
    }
}

impl Nonces for SeededNonces {
    fn nonce(&mut self) -> [u8; NONCE_LEN] {
        let mut n = [0; NONCE_LEN];
        n[..8].copy_from_slice(&self.0.next().to_le_bytes());
        n[8..].copy_from_slice(&self.0.next().to_le_bytes());
        n
    }
}

/// A driver of `btl_core::smoltcp` for framing `F`, as the harness builds
/// it.
pub trait SmolDriver<F: Framing>: Driver<F> + Sized {
    /// Builds the board's sockets in `sockets` and the driver over them,
    /// listening on `port`, knowing where `other` listens.
    fn open(
        sockets: &mut SocketSet<'static>,
        nonces: SeededNonces,
        port: u16,
        other: PeerAddr,
    ) -> Self;
    /// The framing of its engine.
    fn framing() -> F;
    /// The largest message its engine sends.
    fn max_send() -> usize;
}

/// The stream driver of a board.
pub type Tcp = TcpDriver<SeededNonces, SOCKETS, 2>;
/// The datagram driver of a board.
pub type Udp = UdpDriver<SeededNonces, 4, 2>;

impl SmolDriver<Stream> for Tcp {
    fn open(
        sockets: &mut SocketSet<'static>,
        nonces: SeededNonces,
        port: u16,
        other: PeerAddr,
    ) -> Self {
        let handles: [SocketHandle; SOCKETS] = core::array::from_fn(|_| {
            sockets.add(tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
                tcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
            ))
        });
        let mut driver = TcpDriver::new(handles, sockets, port, nonces);
        driver.add_peer(other).expect("room for the other board");
        driver
    }

    fn framing() -> Stream {
        Stream
    }

    fn max_send() -> usize {
        MAX_SEND
    }
}

impl SmolDriver<Datagram> for Udp {
    fn open(
        sockets: &mut SocketSet<'static>,
        nonces: SeededNonces,
        port: u16,
        other: PeerAddr,
    ) -> Self {
        let buffer =
            || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0; 64 * UDP_MTU]);
        let handle = sockets.add(udp::Socket::new(buffer(), buffer()));
        let mut driver = UdpDriver::new(handle, sockets, port, nonces).expect("a bound socket");
        driver.add_peer(other).expect("room for the other board");
        driver
    }

    fn framing() -> Datagram {
        Datagram { mtu: UDP_MTU }
    }

    fn max_send() -> usize {
        UDP_MTU
    }
}

/// One board: an engine, its driver, its interface and sockets.
struct Board<F: Framing, D> {
    engine: Box<HeapEngine<F>>,
    driver: D,
    iface: Interface,
    sockets: SocketSet<'static>,
    running: bool,
    paused: bool,
}

/// A and B, two boards on one cable.
pub struct SmoltcpWorld<F: Framing, D> {
    wire: Wire,
    boards: [Board<F, D>; 2],
    peers: [EndpointId; 2],
    now: Instant,
}

/// The engine in stream framing over smoltcp's TCP.
pub type SmolTcpWorld = SmoltcpWorld<Stream, Tcp>;
/// The engine in datagram framing over smoltcp's UDP.
pub type SmolUdpWorld = SmoltcpWorld<Datagram, Udp>;

impl<F: Framing, D: SmolDriver<F>> SmoltcpWorld<F, D> {
    /// Two boards on a perfect cable, each knowing the other.
    pub fn new() -> Self {
        Self::with_faults(Faults::NONE)
    }

    /// Two boards on a cable with `faults` from the first frame on.
    pub fn with_faults(faults: Faults) -> Self {
        let mut wire = Wire::new(CABLE, SEED);
        wire.set_faults(faults);
        let mut boards = Side::BOTH.map(board::<F, D>);
        let peers = Side::BOTH.map(|side| {
            super::add_peer(
                &mut *boards[side.index()].engine,
                NAMES[side.other().index()],
            )
        });
        SmoltcpWorld {
            wire,
            boards,
            peers,
            now: Instant::ZERO,
        }
    }

    /// The cable.
    pub fn wire(&self) -> &Wire {
        &self.wire
    }

    /// Makes `side` look for the other board at `port` of its address.
    pub fn point_at(&mut self, side: Side, port: u16) {
        let other = side.other();
        self.boards[side.index()]
            .driver
            .add_peer(PeerAddr {
                proc: NAMES[other.index()],
                endpoint: IpEndpoint::new(address(other), port),
            })
            .expect("room for the other board");
    }

    /// `side`'s engine.
    pub fn engine(&mut self, side: Side) -> &mut HeapEngine<F> {
        &mut self.boards[side.index()].engine
    }

    /// The simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }
}

impl<F: Framing, D: SmolDriver<F>> Default for SmoltcpWorld<F, D> {
    fn default() -> Self {
        Self::new()
    }
}

/// `side`'s board, knowing where the other listens.
fn board<F: Framing, D: SmolDriver<F>>(side: Side) -> Board<F, D> {
    let mut seed = SplitMix64(SEED ^ (side.index() as u64 + 1));
    let mac = EthernetAddress([0x02, 0, 0, 0, 0x53, 1 + side.index() as u8]);
    let mut config = Config::new(HardwareAddress::Ethernet(mac));
    config.random_seed = seed.next();
    let mut wire = Wire::new(1, 0);
    let mut iface = Interface::new(config, &mut wire.port(side), smol_instant(Instant::ZERO));
    iface.update_ip_addrs(|addrs| {
        addrs
            .push(IpCidr::new(address(side), 24))
            .expect("room for an address");
    });
    let mut sockets = SocketSet::new(vec![]);
    let other = PeerAddr {
        proc: NAMES[side.other().index()],
        endpoint: IpEndpoint::new(address(side.other()), PORT),
    };
    let driver = D::open(&mut sockets, SeededNonces(seed), PORT, other);
    Board {
        engine: engine_of::<F, D>(NAMES[side.index()], KEY),
        driver,
        iface,
        sockets,
        running: true,
        paused: false,
    }
}

/// An engine for driver `D`, of process `me` holding the job key `key`,
/// with CRC32C trailers and timers for a LAN.
pub fn engine_of<F: Framing, D: SmolDriver<F>>(me: ProcName, key: &[u8]) -> Box<HeapEngine<F>> {
    let mut config = super::engine_config(me, key, TICK, 200);
    config.peer_timeout = PEER_TIMEOUT;
    config.keepalive = KEEPALIVE;
    let cfg = super::pools(EAGER.min(D::max_send()), D::max_send(), FRAGMENTS);
    let mut e = Box::new(
        Heap::engine(config, D::framing(), CAPACITIES, cfg, Instant::ZERO).expect("engine pools"),
    );
    e.set_name("smoltcp");
    e
}

impl<F: Framing, D: SmolDriver<F>> World for SmoltcpWorld<F, D> {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            same_btl: false,
            max_rounds: MAX_ROUNDS,
            // Long enough for a late duplicate and a retransmission.
            linger_rounds: 50,
            max_rdma_len: 16 << 20,
            sendi_max: self.boards[0].engine.attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: false,
            garbage: false,
        }
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        &mut *self.boards[side.index()].engine
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side.index()]
    }

    fn progress(&mut self) {
        let now = self.now;
        let mut more = false;
        for side in Side::BOTH {
            let board = &mut self.boards[side.index()];
            if board.running && !board.paused {
                let polled = board.driver.poll(
                    &mut board.engine,
                    &mut board.iface,
                    &mut self.wire.port(side),
                    &mut board.sockets,
                    now,
                );
                more |= polled.more;
            }
        }
        let mut next = now + TICK;
        let in_flight = Side::BOTH
            .iter()
            .any(|&side| self.boards[side.index()].running && self.wire.queued(side) > 0);
        if !more && !in_flight {
            // Nothing on its way to a running board (paused or not: a
            // paused board's frames wait, and time runs as it would):
            // on to the next deadline.
            let deadline = self
                .boards
                .iter_mut()
                .filter(|b| b.running && !b.paused)
                .filter_map(|b| b.driver.poll_at(&b.engine, &mut b.iface, &b.sockets, now))
                .min();
            if let Some(at) = deadline {
                next = next.max(at);
            }
        }
        self.now = next;
    }

    fn pause(&mut self, side: Side) {
        self.boards[side.index()].paused = true;
    }

    fn resume(&mut self, side: Side) {
        self.boards[side.index()].paused = false;
    }

    fn kill(&mut self, side: Side) {
        self.boards[side.index()].running = false;
        self.wire.cut(side);
    }
}
