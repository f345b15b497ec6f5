//! Bare-metal firmware for QEMU `virt` (RISC-V 64): a virtio-net device
//! driven through smoltcp, with no allocator. It serves UDP and TCP echo on
//! port 7 at [`IPV4_ADDR`], the base on which btl's engine will run.
//!
//! Modules: [`boot`] (entry, traps, panic, exit), [`uart`] (console),
//! [`clock`] (`time` CSR), [`virtio`] (DMA and the smoltcp device),
//! [`cell`] (statics lent once), [`echo`] (the services).

#![no_std]
#![no_main]

pub mod boot;
pub mod cell;
pub mod clock;
pub mod echo;
pub mod uart;
pub mod virtio;

use smoltcp::iface::{Config, Interface, PollIngressSingleResult};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address, Ipv6Address};

use crate::cell::StaticCell;
use crate::virtio::VirtioNet;

/// The firmware's IPv4 address.
pub const IPV4_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
/// Prefix length of [`IPV4_ADDR`]'s network.
pub const IPV4_PREFIX: u8 = 24;
/// Frames taken from the device per loop iteration.
const INGRESS_BUDGET: usize = 8;
/// Seconds between two lines of counters (printed only if they changed).
const STATS_PERIOD_S: u64 = 10;

static NET_BUFFERS: StaticCell<virtio::Buffers> = StaticCell::new(virtio::Buffers::new());
static SOCKET_SLOTS: StaticCell<echo::Slots> = StaticCell::new(echo::Slots::new());
static SOCKET_BUFFERS: StaticCell<echo::Buffers> = StaticCell::new(echo::Buffers::new());

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

/// Called by the boot code on hart 0 with a stack and a cleared `.bss`.
extern "C" fn main() -> ! {
    uart::Uart::init();
    uart::init_logger(log::LevelFilter::Info);
    println!("btl-firmware {}: booting", env!("CARGO_PKG_VERSION"));

    let (Some(buffers), Some(slots), Some(socket_buffers)) = (
        NET_BUFFERS.take(),
        SOCKET_SLOTS.take(),
        SOCKET_BUFFERS.take(),
    ) else {
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
    let (mut echo, mut sockets) = echo::Echo::new(slots, socket_buffers);

    println!(
        "btl-firmware: up: mac {}, {}/{} and {}, echo on udp/{port} and tcp/{port}",
        EthernetAddress(mac),
        IPV4_ADDR,
        IPV4_PREFIX,
        link_local(mac),
        port = echo::PORT,
    );

    let mut last_stats = (0, 0);
    let mut next_stats = clock::micros() + STATS_PERIOD_S * 1_000_000;
    loop {
        let now = clock::now();
        iface.poll_maintenance(now);
        for _ in 0..INGRESS_BUDGET {
            if iface.poll_ingress_single(now, &mut dev, &mut sockets)
                == PollIngressSingleResult::None
            {
                break;
            }
            // The frame may have closed a connection (its last ACK): listen
            // again before the next frame, which may be a SYN for the port.
            echo.listen(&mut sockets);
        }
        echo.poll(&mut sockets);
        iface.poll_egress(now, &mut dev, &mut sockets);

        if clock::micros() >= next_stats {
            next_stats += STATS_PERIOD_S * 1_000_000;
            let s = dev.stats();
            if (s.rx_frames, s.tx_frames) != last_stats {
                last_stats = (s.rx_frames, s.tx_frames);
                println!(
                    "btl-firmware: rx {} frames, tx {} frames, tx dropped {}",
                    s.rx_frames, s.tx_frames, s.tx_dropped
                );
            }
        }
    }
}
