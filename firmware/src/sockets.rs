//! The smoltcp sockets btl's drivers run over, with their buffers reserved
//! in statics: [`TCP_SOCKETS`] TCP sockets for the `TcpDriver` and one UDP
//! socket for the `UdpDriver`.

use smoltcp::iface::{SocketHandle, SocketSet, SocketStorage};
use smoltcp::socket::{tcp, udp};

/// TCP sockets: the link to the peer, one listening for a connection that
/// crosses it, one closing, and one to spare.
pub const TCP_SOCKETS: usize = 4;
/// Sockets in the set: the TCP ones and the UDP one.
pub const SOCKETS: usize = TCP_SOCKETS + 1;
/// Bytes of each TCP socket's buffers, each way: below 64 KiB, so that no
/// window scaling is needed (the device caps the advertised window at 16
/// segments anyway, see `virtio`).
pub const TCP_BUF: usize = 32 << 10;
/// A UDP datagram's payload on an Ethernet frame (1500 less the IPv4 and
/// UDP headers): the engine's MTU over UDP.
pub const UDP_MTU: usize = 1500 - 20 - 8;
/// Datagrams the UDP socket's receive buffer holds: more than one poll
/// takes from the device (32 frames), so that a burst of the peer's window
/// is not dropped by the socket.
pub const UDP_RX_PACKETS: usize = 48;
/// Datagrams the UDP socket's send buffer holds: what one poll sends to
/// the device at most (its egress budget). A write that finds it full
/// waits for the next poll.
pub const UDP_TX_PACKETS: usize = 32;
/// Payload bytes of the UDP socket's receive buffer.
pub const UDP_RX_BUF: usize = UDP_RX_PACKETS * UDP_MTU;
/// Payload bytes of the UDP socket's send buffer.
pub const UDP_TX_BUF: usize = UDP_TX_PACKETS * UDP_MTU;

/// Socket slots and packet metadata, to be reserved in a static and lent to
/// smoltcp. (Kept apart from [`Buffers`]: these are not all-zero, so they
/// go to `.data`, while the byte buffers stay in `.bss`.)
pub struct Slots {
    sockets: [SocketStorage<'static>; SOCKETS],
    udp_rx_meta: [udp::PacketMetadata; UDP_RX_PACKETS],
    udp_tx_meta: [udp::PacketMetadata; UDP_TX_PACKETS],
}

impl Slots {
    /// Empty slots.
    pub const fn new() -> Self {
        Self {
            sockets: [SocketStorage::EMPTY; SOCKETS],
            udp_rx_meta: [udp::PacketMetadata::EMPTY; UDP_RX_PACKETS],
            udp_tx_meta: [udp::PacketMetadata::EMPTY; UDP_TX_PACKETS],
        }
    }
}

impl Default for Slots {
    fn default() -> Self {
        Self::new()
    }
}

/// The sockets' byte buffers, to be reserved in a static.
pub struct Buffers {
    udp_rx: [u8; UDP_RX_BUF],
    udp_tx: [u8; UDP_TX_BUF],
    tcp: [[[u8; TCP_BUF]; 2]; TCP_SOCKETS],
}

impl Buffers {
    /// Zeroed buffers.
    pub const fn new() -> Self {
        Self {
            udp_rx: [0; UDP_RX_BUF],
            udp_tx: [0; UDP_TX_BUF],
            tcp: [[[0; TCP_BUF]; 2]; TCP_SOCKETS],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Self::new()
    }
}

/// The sockets, by their handles in the set.
#[derive(Debug, Clone, Copy)]
pub struct Handles {
    /// The TCP sockets (closed: the `TcpDriver` makes them listen).
    pub tcp: [SocketHandle; TCP_SOCKETS],
    /// The UDP socket (unbound: the `UdpDriver` binds it).
    pub udp: SocketHandle,
}

/// Builds the socket set over `slots` and `buffers`.
pub fn build(
    slots: &'static mut Slots,
    buffers: &'static mut Buffers,
) -> (SocketSet<'static>, Handles) {
    let Slots {
        sockets: slots,
        udp_rx_meta,
        udp_tx_meta,
    } = slots;
    let Buffers {
        udp_rx,
        udp_tx,
        tcp: tcp_bufs,
    } = buffers;
    let mut sockets = SocketSet::new(&mut slots[..]);
    let tcp = tcp_bufs.each_mut().map(|[rx, tx]| {
        sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut rx[..]),
            tcp::SocketBuffer::new(&mut tx[..]),
        ))
    });
    let udp = sockets.add(udp::Socket::new(
        udp::PacketBuffer::new(&mut udp_rx_meta[..], &mut udp_rx[..]),
        udp::PacketBuffer::new(&mut udp_tx_meta[..], &mut udp_tx[..]),
    ));
    (sockets, Handles { tcp, udp })
}

/// Closes every TCP socket at once (a reset for any still connected), so
/// that nothing answers on the TCP port once its driver is gone.
pub fn abort_tcp(sockets: &mut SocketSet<'_>, handles: &Handles) {
    for &h in &handles.tcp {
        sockets.get_mut::<tcp::Socket<'_>>(h).abort();
    }
}
