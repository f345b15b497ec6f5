//! btl on the board: an engine over one of `btl_core::smoltcp`'s drivers,
//! holding the interop conversation (`btl-exchange`) with the Linux side
//! (`btl-exchange-peer`, process [`LINUX`]) twice, as `btl-exchange-peer`
//! does on its side: first as [`Role::Follow`] (Linux leads), then as
//! [`Role::Lead`].
//!
//! [`tcp_session`] and [`udp_session`] build an engine and its driver and
//! hand them to [`run`], one transport's whole session, bounded in time at
//! every step: make the peer known, register the region, say `ready`, wait
//! for the peer to connect, hold both conversations, then wait for the
//! peer to close (it flushes, then finalizes its module) and give the
//! region back for the next engine.

use btl_core::btl::{Access, Btl, BtlError, Event};
use btl_core::endpoint::{ProcName, Reachability};
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Datagram, Engine, Framing, Stream};
use btl_core::pool::{FragmentPools, FragmentPoolsConfig, PoolError};
use btl_core::smoltcp::{Driver, PeerAddr, Polled, TcpDriver, UdpDriver};
use btl_core::time::{Duration, Instant};
use btl_exchange::{Exchange, ExchangeError, JOB_KEY, Role};
use smoltcp::iface::{Interface, SocketSet};
use smoltcp::socket::udp::BindError;
use smoltcp::wire::{IpEndpoint, Ipv4Address};

use crate::clock;
use crate::println;
use crate::rng::Seeded;
use crate::sockets;
use crate::storage::{BULK, Memory, Storage, TCP_POOLS, Tables, UDP_POOLS, WINDOW};
use crate::virtio::VirtioNet;

/// This process.
pub const ME: ProcName = ProcName::new(1, 1);
/// The Linux side.
pub const LINUX: ProcName = ProcName::new(1, 0);
/// The port both drivers listen on (TCP) or are bound to (UDP).
pub const PORT: u16 = 7000;
/// The Linux side's address.
pub const LINUX_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
/// Where the Linux side's TCP module listens.
pub const LINUX_TCP_PORT: u16 = 7100;
/// Where the Linux side's UDP module is bound.
pub const LINUX_UDP_PORT: u16 = 7200;

/// How long the peer may take to connect once this side is ready.
const PEER_WAIT: Duration = Duration::from_secs(60);
/// How long one conversation may take.
const CONVERSATION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long, after the last conversation, the peer may take to close.
const LINGER: Duration = Duration::from_secs(10);

/// An engine of this firmware.
pub type FwEngine<F> = Engine<Storage, F, WINDOW>;
/// The TCP driver: its sockets, and the peer's address.
pub type Tcp = TcpDriver<Seeded, { sockets::TCP_SOCKETS }, 1>;
/// The UDP driver: links to two endpoints (the peer, and a stranger it
/// may have to refuse), the peer's address.
pub type UdpLinks = UdpDriver<Seeded, 2, 1>;

/// The network: the device, smoltcp's interface over it and the socket
/// set the drivers' sockets are in.
pub struct Net {
    /// The interface.
    pub iface: Interface,
    /// The device.
    pub dev: VirtioNet,
    /// The sockets.
    pub sockets: SocketSet<'static>,
}

/// One turn of `driver` over `net` for `engine` at `now`.
fn step<F: Framing, D: Driver<F>>(
    driver: &mut D,
    engine: &mut FwEngine<F>,
    net: &mut Net,
    now: Instant,
) -> Polled {
    driver.poll(engine, &mut net.iface, &mut net.dev, &mut net.sockets, now)
}

/// Why a session failed.
#[derive(Debug)]
pub enum Failure {
    /// The job key does not fit the engine's configuration.
    JobKey,
    /// The pools do not fit their region.
    Pools(PoolError),
    /// The engine refused to know the peer.
    AddProcs(BtlError),
    /// The engine refused the region.
    Register,
    /// The peer did not connect (and complete its handshake) in time.
    NoPeer,
    /// A conversation failed.
    Exchange(Role, ExchangeError),
    /// A conversation did not end in time.
    Timeout(Role),
    /// After the conversations, the engine reported this error.
    After(BtlError),
    /// After the conversations, this much was still unacknowledged when
    /// time ran out.
    Unflushed(usize),
    /// The region could not be taken back.
    Deregister(BtlError),
    /// The driver has no room for the peer's address.
    AddPeer,
    /// The UDP socket could not be bound.
    Bind(BindError),
}

/// The TCP session: an engine in stream framing over `tables` and
/// `pool_region`, its driver over the TCP sockets `handles`. Gives the
/// region back, and leaves the sockets closed.
pub fn tcp_session(
    net: &mut Net,
    handles: &sockets::Handles,
    tables: &'static mut Tables,
    pool_region: &'static mut [u8],
    rng: &mut Seeded,
    mac: [u8; 6],
    region: Memory,
) -> Result<Memory, Failure> {
    let mut engine = engine("tcp", Stream, tables, pool_region, TCP_POOLS, rng)?;
    let mut driver = Tcp::new(handles.tcp, &mut net.sockets, PORT, Seeded::new(mac, 1));
    driver
        .add_peer(PeerAddr {
            proc: LINUX,
            endpoint: IpEndpoint::new(LINUX_ADDR.into(), LINUX_TCP_PORT),
        })
        .map_err(|_| Failure::AddPeer)?;
    let region = run("tcp", &mut engine, &mut driver, net, region);
    sockets::abort_tcp(&mut net.sockets, handles);
    region
}

/// The UDP session: an engine in datagram framing (Ethernet's MTU) over
/// `tables` and `pool_region`, its driver over the UDP socket of
/// `handles`. Gives the region back.
pub fn udp_session(
    net: &mut Net,
    handles: &sockets::Handles,
    tables: &'static mut Tables,
    pool_region: &'static mut [u8],
    rng: &mut Seeded,
    mac: [u8; 6],
    region: Memory,
) -> Result<Memory, Failure> {
    let framing = Datagram {
        mtu: sockets::UDP_MTU,
    };
    let mut engine = engine("udp", framing, tables, pool_region, UDP_POOLS, rng)?;
    let mut udp: UdpLinks =
        UdpDriver::new(handles.udp, &mut net.sockets, PORT, Seeded::new(mac, 2))
            .map_err(Failure::Bind)?;
    udp.add_peer(PeerAddr {
        proc: LINUX,
        endpoint: IpEndpoint::new(LINUX_ADDR.into(), LINUX_UDP_PORT),
    })
    .map_err(|_| Failure::AddPeer)?;
    run("udp", &mut engine, &mut udp, net, region)
}

/// An engine of [`ME`] holding the job key, with CRC32C trailers, over
/// `tables` and pools `pools` carved from `pool_region`.
pub fn engine<F: Framing>(
    name: &'static str,
    framing: F,
    tables: &'static mut Tables,
    pool_region: &'static mut [u8],
    pools: FragmentPoolsConfig,
    rng: &mut Seeded,
) -> Result<FwEngine<F>, Failure> {
    let mut config = EngineConfig::new(ME);
    config.job_key = Some(JOB_KEY.try_into().map_err(|_| Failure::JobKey)?);
    config.checksum = true;
    // A fresh start each boot, so that the peer tells a restart from a
    // reconnection.
    config.epoch = rng.next_u64();
    let pools = FragmentPools::new(pool_region, pools).map_err(Failure::Pools)?;
    let mut engine = Engine::new(config, framing, tables.lend(), pools, clock::btl_now());
    engine.set_name(name);
    Ok(engine)
}

/// The session of transport `name` over `engine` and `driver`: both
/// conversations with [`LINUX`], over `region` (registered for the
/// session and given back at its end).
pub fn run<F: Framing, D: Driver<F>>(
    name: &str,
    engine: &mut FwEngine<F>,
    driver: &mut D,
    net: &mut Net,
    region: Memory,
) -> Result<Memory, Failure> {
    let mut endpoint = [None];
    let mut words = [0u64];
    engine
        .add_procs(&[LINUX], &mut endpoint, &mut Reachability::new(&mut words))
        .map_err(Failure::AddProcs)?;
    let peer = endpoint[0].ok_or(Failure::AddProcs(BtlError::Unreachable))?;
    let handle = engine
        .register_mem(region, Access::REMOTE_READ | Access::REMOTE_WRITE)
        .map_err(|_| Failure::Register)?;
    // One turn first, so that the TCP driver's sockets listen before the
    // peer is told to come.
    step(driver, engine, net, clock::btl_now());
    println!(
        "btl-firmware: ready: {name} on port {PORT}, process {ME}, peer {LINUX} at {LINUX_ADDR}"
    );

    // The first conversation follows: this side speaks only once the peer
    // has connected. (A first connection of this side's own that the
    // peer's host refuses, its module not being up yet, would lose the
    // peer for good.)
    let deadline = clock::btl_now() + PEER_WAIT;
    loop {
        let now = clock::btl_now();
        step(driver, engine, net, now);
        let usage = engine.usage();
        if usage.links > usage.handshaking {
            break;
        }
        if now >= deadline {
            return Err(Failure::NoPeer);
        }
    }

    for role in [Role::Follow, Role::Lead] {
        let start = clock::btl_now();
        let mut exchange = Exchange::new(engine, role, peer, handle, BULK as u64)
            .map_err(|e| Failure::Exchange(role, e))?;
        while !exchange.is_done() {
            let now = clock::btl_now();
            if now.since(start) > CONVERSATION_TIMEOUT {
                return Err(Failure::Timeout(role));
            }
            step(driver, engine, net, now);
            exchange
                .poll(engine)
                .map_err(|e| Failure::Exchange(role, e))?;
        }
        let took = clock::btl_now().since(start);
        let micros = took.as_micros().max(1);
        // Bytes put and got, in hundredths of a MiB per second.
        let rate = (2 * BULK as u64) * 100 * 1_000_000 / (1 << 20) / micros;
        println!(
            "exchange ok: {name} {role:?}, {BULK} bytes put and got, in {}.{:03} ms ({}.{:02} MiB/s)",
            micros / 1000,
            micros % 1000,
            rate / 100,
            rate % 100,
        );
    }

    // This side's last words (the DONE of its lead) are acknowledged, and
    // the peer, done too, closes.
    let deadline = clock::btl_now() + LINGER;
    let mut closed = false;
    loop {
        let now = clock::btl_now();
        step(driver, engine, net, now);
        while let Some(event) = engine.poll_event() {
            match event {
                Event::PeerLeft { .. } => closed = true,
                Event::Error(e) => return Err(Failure::After(e.error)),
                Event::SendComplete { result: Err(e), .. } => return Err(Failure::After(e)),
                _ => {}
            }
        }
        let outstanding = engine.outstanding();
        if closed && outstanding == 0 {
            println!("btl-firmware: {name}: the peer closed");
            break;
        }
        if now >= deadline {
            if outstanding > 0 {
                return Err(Failure::Unflushed(outstanding));
            }
            println!("btl-firmware: {name}: all acknowledged; the peer did not close");
            break;
        }
    }
    engine.deregister_mem(handle).map_err(Failure::Deregister)
}
