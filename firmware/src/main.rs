//! Bare-metal firmware for QEMU `virt` (RISC-V 64): btl's engine over
//! smoltcp on a virtio-net device, with no allocator. It first runs btl's
//! shared-memory ring between its two harts ([`harts`]), then holds the
//! interop conversation (`btl-exchange`) with `btl-exchange-peer` on
//! Linux, over TCP and then over UDP, each way round, and ends QEMU with
//! its verdict.
//!
//! Modules: [`boot`] (entry, traps, panic, exit), [`harts`] (the ring
//! between two cores), [`uart`] (console),
//! [`clock`] (`time` CSR), [`virtio`] (DMA and the smoltcp device),
//! [`cell`] (statics lent once), [`rng`] (nonces), [`sockets`] (smoltcp's
//! sockets), [`storage`] (the engines' tables, pools and memory),
//! [`interop`] (the sessions).

#![no_std]
#![no_main]

pub mod boot;
pub mod cell;
pub mod clock;
pub mod harts;
pub mod interop;
pub mod rng;
pub mod sockets;
pub mod storage;
pub mod uart;
pub mod virtio;

use core::mem::size_of;

use btl_core::engine::{Datagram, Stream};
use smoltcp::iface::{Config, Interface};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address, Ipv6Address};

use crate::cell::StaticCell;
use crate::interop::{Failure, FwEngine, Net};
use crate::rng::Seeded;
use crate::storage::{
    CAPACITIES, Memory, TCP_POOL_BYTES, TCP_POOL_REGION, TCP_POOLS, TCP_TABLES, Tables,
    UDP_POOL_BYTES, UDP_POOL_REGION, UDP_POOLS, UDP_TABLES, WINDOW,
};
use crate::virtio::VirtioNet;

/// The firmware's IPv4 address.
pub const IPV4_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
/// Prefix length of [`IPV4_ADDR`]'s network.
pub const IPV4_PREFIX: u8 = 24;

static NET_BUFFERS: StaticCell<virtio::Buffers> = StaticCell::new(virtio::Buffers::new());
static SOCKET_SLOTS: StaticCell<sockets::Slots> = StaticCell::new(sockets::Slots::new());
static SOCKET_BUFFERS: StaticCell<sockets::Buffers> = StaticCell::new(sockets::Buffers::new());

/// The IPv6 link-local address made from a MAC address (modified EUI-64).
fn link_local(mac: [u8; 6]) -> Ipv6Address {
    let w = |a: u8, b: u8| u16::from_be_bytes([a, b]);
    Ipv6Address::new(
        0xfe80,
        0,
        0,
        0,
        w(mac[0] ^ 0x02, mac[1]),
        w(mac[2], 0xff),
        w(0xfe, mac[3]),
        w(mac[4], mac[5]),
    )
}

/// What btl takes of the image, printed at boot.
fn print_footprint() {
    println!(
        "btl-firmware: footprint: engine value {} B (tcp), {} B (udp); driver value {} B (tcp), {} B (udp)",
        size_of::<FwEngine<Stream>>(),
        size_of::<FwEngine<Datagram>>(),
        size_of::<interop::Tcp>(),
        size_of::<interop::UdpLinks>(),
    );
    println!(
        "btl-firmware: footprint: lent tables {} B per engine (inline, {} B of slots: {} peers, {} links, window {}, {} ops, {} events, {} registrations)",
        size_of::<Tables>(),
        CAPACITIES.table_bytes::<WINDOW, Memory>(),
        CAPACITIES.peers,
        CAPACITIES.links,
        WINDOW,
        CAPACITIES.ops,
        CAPACITIES.events,
        CAPACITIES.registrations,
    );
    let classes = |p: &btl_core::pool::FragmentPoolsConfig| {
        [p.small, p.eager, p.max].map(|c| (c.max, c.fragment_size))
    };
    let [ts, te, tm] = classes(&TCP_POOLS);
    let [us, ue, um] = classes(&UDP_POOLS);
    println!(
        "btl-firmware: footprint: pools {TCP_POOL_BYTES} B (tcp: {}x{}, {}x{}, {}x{} B), {UDP_POOL_BYTES} B (udp: {}x{}, {}x{}, {}x{} B)",
        ts.0, ts.1, te.0, te.1, tm.0, tm.1, us.0, us.1, ue.0, ue.1, um.0, um.1,
    );
    println!(
        "btl-firmware: footprint: smoltcp sockets {} B of buffers ({} tcp x 2 x {} B, udp {} B in, {} B out), registered region {} B",
        size_of::<sockets::Buffers>(),
        sockets::TCP_SOCKETS,
        sockets::TCP_BUF,
        sockets::UDP_RX_BUF,
        sockets::UDP_TX_BUF,
        2 * storage::BULK,
    );
}

/// Ends QEMU with failure after saying why.
fn fail(what: &str, failure: Failure) -> ! {
    println!("btl-firmware: FAIL: {what}: {failure:?}");
    boot::exit(1);
}

/// Called by the boot code on hart 1 with a stack of its own: the other
/// end of the ring check; the hart parks when it returns.
extern "C" fn second_hart() {
    harts::echo();
}

/// Called by the boot code on hart 0 with a stack and a cleared `.bss`.
extern "C" fn main() -> ! {
    uart::Uart::init();
    uart::init_logger(log::LevelFilter::Info);
    println!("btl-firmware {}: booting", env!("CARGO_PKG_VERSION"));

    let (
        Some(buffers),
        Some(slots),
        Some(socket_buffers),
        Some(region),
        Some(tcp_tables),
        Some(udp_tables),
        Some(tcp_pool_region),
        Some(udp_pool_region),
    ) = (
        NET_BUFFERS.take(),
        SOCKET_SLOTS.take(),
        SOCKET_BUFFERS.take(),
        storage::REGION.take(),
        TCP_TABLES.take(),
        UDP_TABLES.take(),
        TCP_POOL_REGION.take(),
        UDP_POOL_REGION.take(),
    )
    else {
        unreachable!("main runs once");
    };
    let mut dev = match VirtioNet::probe(buffers) {
        Ok(dev) => dev,
        Err(e) => {
            println!("btl-firmware: no network device: {e:?}");
            boot::exit(2);
        }
    };
    let mac = dev.mac();

    let mut config = Config::new(EthernetAddress(mac).into());
    config.random_seed = clock::ticks();
    let mut iface = Interface::new(config, &mut dev, clock::now());
    iface.update_ip_addrs(|addrs| {
        let v4 = IpCidr::new(IpAddress::Ipv4(IPV4_ADDR), IPV4_PREFIX);
        let v6 = IpCidr::new(IpAddress::Ipv6(link_local(mac)), 64);
        if addrs.push(v4).is_err() || addrs.push(v6).is_err() {
            panic!("interface address table too small");
        }
    });
    let (sockets, handles) = sockets::build(slots, socket_buffers);
    let mut net = Net {
        iface,
        dev,
        sockets,
    };
    println!(
        "btl-firmware: up: mac {}, {}/{} and {}",
        EthernetAddress(mac),
        IPV4_ADDR,
        IPV4_PREFIX,
        link_local(mac),
    );
    print_footprint();

    match harts::check() {
        Ok(micros) => println!(
            "btl-firmware: ring: {} records of 0 to {} bytes each way between harts 0 and 1, intact and in order, in {micros} us",
            harts::RECORDS,
            harts::LONGEST,
        ),
        Err(e) => {
            println!("btl-firmware: FAIL: ring between harts: {e:?}");
            boot::exit(1);
        }
    }
    let mut rng = Seeded::new(mac, 0);
    let region: Memory = &mut region[..];

    // TCP first, then UDP over the same region.
    let region = interop::tcp_session(
        &mut net,
        &handles,
        tcp_tables,
        tcp_pool_region.as_mut_slice(),
        &mut rng,
        mac,
        region,
    )
    .unwrap_or_else(|e| fail("tcp", e));
    interop::udp_session(
        &mut net,
        &handles,
        udp_tables,
        udp_pool_region.as_mut_slice(),
        &mut rng,
        mac,
        region,
    )
    .unwrap_or_else(|e| fail("udp", e));

    let s = net.dev.stats();
    println!(
        "btl-firmware: done: rx {} frames, tx {} frames, tx dropped {}",
        s.rx_frames, s.tx_frames, s.tx_dropped
    );
    println!("btl-firmware: PASS");
    boot::exit(0);
}
