//! `btl serve --tap`: the answering side of the measurements on btl's own
//! TCP/IP stack (the engine over smoltcp, `btl_core::smoltcp`) attached to
//! a Linux TAP device, as a board would run it, so that `btl connect` on
//! the kernel's stack measures what a board's link costs.
//!
//! The engine takes btl's TCP or UDP parameters (pools, timers, checks)
//! as a socket module does; it listens on the given port of the given
//! address, on the TAP device, which must exist and be up (the kernel's
//! side of it holds another address of the same subnet).

use std::os::fd::AsRawFd;
use std::time::Duration;

use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, Datagram, Framing, Stream};
use btl_core::pool::FragmentPoolsConfig;
use btl_core::smoltcp::{Driver, TcpDriver, UdpDriver, smol_instant};
use btl_core::time::Instant;
use btl_std::driver::heap::{Heap, HeapEngine};
use btl_std::driver::net::{Net, Os};
use btl_std::{ModuleBuilder, ProcName};
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{Medium, TunTapInterface, wait};
use smoltcp::socket::{tcp, udp};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr};

use crate::bench::{Driven, Waiting};

/// TCP sockets of the server: links at once, listening ones among them.
const TCP_SOCKETS: usize = 8;
/// UDP links at once.
const UDP_LINKS: usize = 8;
/// Bytes of each TCP socket's buffers, each way: below 64 KiB, so that no
/// window scaling is needed.
const TCP_BUFFER: usize = 64 * 1024 - 1;
/// Datagrams each way the UDP socket holds.
const UDP_PACKETS: usize = 128;

/// Nonces from the operating system.
fn nonce() -> [u8; 16] {
    Os.random()
}

/// The engine over smoltcp on a TAP device, driven as the benchmark asks.
pub struct TapServer<F: Framing, D> {
    engine: Box<HeapEngine<F>>,
    driver: D,
    iface: Interface,
    device: TunTapInterface,
    sockets: SocketSet<'static>,
    clock: std::time::Instant,
}

impl<F: Framing, D: Driver<F>> TapServer<F, D> {
    fn new(engine: Box<HeapEngine<F>>, driver: D, stack: Stack) -> Self {
        let (device, iface, sockets) = stack;
        TapServer {
            engine,
            driver,
            iface,
            device,
            sockets,
            clock: std::time::Instant::now(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

impl<F: Framing, D: Driver<F>> Driven for TapServer<F, D> {
    type Btl = HeapEngine<F>;

    fn btl(&mut self) -> &mut HeapEngine<F> {
        &mut self.engine
    }

    fn step(&mut self, waiting: Waiting) {
        let now = self.now();
        let polled = self.driver.poll(
            &mut self.engine,
            &mut self.iface,
            &mut self.device,
            &mut self.sockets,
            now,
        );
        if waiting == Waiting::Block && !polled.more {
            let next = self
                .driver
                .poll_at(&self.engine, &mut self.iface, &self.sockets, now);
            let delay = next.map_or(Duration::from_millis(10), |at| {
                Duration::from_nanos(at.since(now).as_nanos()).min(Duration::from_millis(10))
            });
            let _ = wait(
                self.device.as_raw_fd(),
                Some(smoltcp::time::Duration::from_micros(
                    u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
                )),
            );
        }
    }
}

/// A TAP device, the interface over it, and its sockets.
type Stack = (TunTapInterface, Interface, SocketSet<'static>);

/// The interface on `tap` with `address`, and an empty socket set.
fn interface(tap: &str, address: IpCidr) -> std::io::Result<Stack> {
    let mut device = TunTapInterface::new(tap, Medium::Ethernet)?;
    let [a, b, c, d, ..] = nonce();
    let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress([
        0x02, a, b, c, d, 0x01,
    ])));
    config.random_seed = u64::from_le_bytes(nonce()[..8].try_into().unwrap_or_default());
    let mut iface = Interface::new(config, &mut device, smol_instant(Instant::ZERO));
    iface.update_ip_addrs(|addrs| {
        let _ = addrs.push(address);
    });
    Ok((device, iface, SocketSet::new(vec![])))
}

/// A TCP server of process `me` on `tap` at `address`, port `port`, with
/// the TCP component's parameters as `builder` reads them.
pub fn tcp(
    builder: &ModuleBuilder,
    me: ProcName,
    job_key: Option<&[u8]>,
    tap: &str,
    address: IpCidr,
    port: u16,
) -> Result<TapServer<Stream, impl Driver<Stream>>, String> {
    let setup = builder.tcp_setup().map_err(|e| e.to_string())?;
    let (device, iface, mut sockets) =
        interface(tap, address).map_err(|e| format!("tap device {tap}: {e}"))?;
    let handles = core::array::from_fn(|_| {
        sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
            tcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
        ))
    });
    let driver: TcpDriver<_, TCP_SOCKETS, 1> = TcpDriver::new(handles, &mut sockets, port, nonce);
    let mut engine = engine(setup.engine, Stream, setup.pools, me, job_key)?;
    engine.set_name("tcp over smoltcp");
    Ok(TapServer::new(engine, driver, (device, iface, sockets)))
}

/// A UDP server of process `me` on `tap` at `address`, port `port`, with
/// the UDP component's parameters as `builder` reads them; its datagrams
/// are the component's MTU.
pub fn udp(
    builder: &ModuleBuilder,
    me: ProcName,
    job_key: Option<&[u8]>,
    tap: &str,
    address: IpCidr,
    port: u16,
) -> Result<TapServer<Datagram, impl Driver<Datagram>>, String> {
    let setup = builder.udp_setup().map_err(|e| e.to_string())?;
    let (device, iface, mut sockets) =
        interface(tap, address).map_err(|e| format!("tap device {tap}: {e}"))?;
    // The TAP device is an Ethernet one of 1500 bytes unless set.
    let mtu = setup
        .udp
        .mtu
        .unwrap_or(btl_std::transports::udp::DEFAULT_MTU);
    let buffer = || {
        udp::PacketBuffer::new(
            vec![udp::PacketMetadata::EMPTY; UDP_PACKETS],
            vec![0; UDP_PACKETS * mtu],
        )
    };
    let handle = sockets.add(udp::Socket::new(buffer(), buffer()));
    let driver: UdpDriver<_, UDP_LINKS, 1> = UdpDriver::new(handle, &mut sockets, port, nonce)
        .map_err(|e| format!("udp port {port}: {e}"))?;
    let mut engine = engine(setup.engine, Datagram { mtu }, setup.pools, me, job_key)?;
    engine.set_name("udp over smoltcp");
    Ok(TapServer::new(engine, driver, (device, iface, sockets)))
}

/// An engine of process `me` holding `job_key`, configured as a socket
/// module of the component would be.
fn engine<F: Framing>(
    mut config: EngineConfig,
    framing: F,
    pools: FragmentPoolsConfig,
    me: ProcName,
    job_key: Option<&[u8]>,
) -> Result<Box<HeapEngine<F>>, String> {
    config.me = me;
    config.job_key = job_key
        .map(|k| {
            k.try_into()
                .map_err(|_| "the job key is too long".to_owned())
        })
        .transpose()?;
    Heap::engine(
        config,
        framing,
        Capacities::SOCKET_MODULE,
        pools,
        Instant::ZERO,
    )
    .map(Box::new)
    .map_err(|e| format!("pools: {e:?}"))
}
