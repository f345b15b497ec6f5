//! The demonstration services: UDP and TCP echo on port 7 (RFC 862), each
//! doing a bounded amount of work per call.

use smoltcp::iface::{SocketHandle, SocketSet, SocketStorage};
use smoltcp::socket::{tcp, udp};
use smoltcp::time::Duration;

/// The echo port.
pub const PORT: u16 = 7;
/// TCP sockets listening on [`PORT`]: that many connections at once.
pub const TCP_SOCKETS: usize = 2;
/// Sockets in the set: the UDP one and the TCP ones.
pub const SOCKETS: usize = 1 + TCP_SOCKETS;

const TCP_BUF: usize = 4096;
const UDP_BUF: usize = 4096;
const UDP_PACKETS: usize = 8;
/// Largest UDP payload that fits one Ethernet frame without fragments.
const UDP_MAX_PAYLOAD: usize = 1472;
/// Bytes moved from receive to send buffer per TCP socket per call.
const TCP_CHUNK: usize = 1024;
/// Datagrams echoed per call.
const UDP_BUDGET: usize = 4;

/// Socket slots and packet metadata, to be reserved in a static and lent to
/// smoltcp. (Kept apart from [`Buffers`]: these are not all-zero, so they
/// go to `.data`, while the byte buffers stay in `.bss`.)
pub struct Slots {
    sockets: [SocketStorage<'static>; SOCKETS],
    udp_rx_meta: [udp::PacketMetadata; UDP_PACKETS],
    udp_tx_meta: [udp::PacketMetadata; UDP_PACKETS],
}

impl Slots {
    /// Empty slots.
    pub const fn new() -> Self {
        Self {
            sockets: [SocketStorage::EMPTY; SOCKETS],
            udp_rx_meta: [udp::PacketMetadata::EMPTY; UDP_PACKETS],
            udp_tx_meta: [udp::PacketMetadata::EMPTY; UDP_PACKETS],
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
    udp_rx: [u8; UDP_BUF],
    udp_tx: [u8; UDP_BUF],
    tcp: [[[u8; TCP_BUF]; 2]; TCP_SOCKETS],
}

impl Buffers {
    /// Zeroed buffers.
    pub const fn new() -> Self {
        Self {
            udp_rx: [0; UDP_BUF],
            udp_tx: [0; UDP_BUF],
            tcp: [[[0; TCP_BUF]; 2]; TCP_SOCKETS],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Self::new()
    }
}

/// The echo services, by their socket handles.
#[derive(Debug)]
pub struct Echo {
    udp: SocketHandle,
    tcp: [SocketHandle; TCP_SOCKETS],
}

impl Echo {
    /// Builds the socket set over `slots` and `buffers`, with the UDP socket
    /// bound and the TCP sockets listening on [`PORT`].
    pub fn new(
        slots: &'static mut Slots,
        buffers: &'static mut Buffers,
    ) -> (Self, SocketSet<'static>) {
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

        let mut udp = udp::Socket::new(
            udp::PacketBuffer::new(&mut udp_rx_meta[..], &mut udp_rx[..]),
            udp::PacketBuffer::new(&mut udp_tx_meta[..], &mut udp_tx[..]),
        );
        if let Err(e) = udp.bind(PORT) {
            panic!("udp bind: {e}");
        }
        let udp = sockets.add(udp);

        let tcp = tcp_bufs.each_mut().map(|[rx, tx]| {
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(&mut rx[..]),
                tcp::SocketBuffer::new(&mut tx[..]),
            );
            configure(&mut s);
            sockets.add(s)
        });
        let mut echo = Self { udp, tcp };
        echo.listen(&mut sockets);
        (echo, sockets)
    }

    /// Puts every closed TCP socket back to listening. Cheap: call it after
    /// each received frame, so that a socket closed by a frame (the last ACK
    /// of a connection) listens again before the next frame, which may be a
    /// SYN, is processed.
    pub fn listen(&mut self, sockets: &mut SocketSet<'_>) {
        for &h in &self.tcp {
            let s = sockets.get_mut::<tcp::Socket<'_>>(h);
            // Closed or in TIME-WAIT.
            if !s.is_open() {
                if let Err(e) = s.listen(PORT) {
                    log::warn!("tcp listen: {e}");
                }
                configure(s);
            }
        }
    }

    /// Echoes what has arrived, a bounded amount per socket, and keeps the
    /// TCP sockets listening.
    pub fn poll(&mut self, sockets: &mut SocketSet<'_>) {
        self.echo_udp(sockets);
        for &h in &self.tcp {
            echo_tcp(sockets.get_mut::<tcp::Socket<'_>>(h));
        }
        self.listen(sockets);
    }

    fn echo_udp(&mut self, sockets: &mut SocketSet<'_>) {
        let s = sockets.get_mut::<udp::Socket<'_>>(self.udp);
        let mut buf = [0u8; UDP_MAX_PAYLOAD];
        for _ in 0..UDP_BUDGET {
            if !s.can_recv() || !s.can_send() {
                break;
            }
            match s.recv_slice(&mut buf) {
                // Sent back from the address it came to, to where it came from.
                Ok((n, meta)) => {
                    if let Err(e) = s.send_slice(&buf[..n], meta) {
                        log::warn!("udp echo: {e}");
                    }
                }
                Err(e) => log::warn!("udp echo: {e}"),
            }
        }
    }
}

/// Per-connection settings: echo at once (no Nagle), give up on a silent
/// peer after a minute.
fn configure(s: &mut tcp::Socket<'_>) {
    s.set_nagle_enabled(false);
    s.set_timeout(Some(Duration::from_secs(60)));
}

/// Moves up to one chunk from the receive to the send buffer of `s`, and
/// closes it once the peer has closed and all is echoed.
fn echo_tcp(s: &mut tcp::Socket<'_>) {
    let room = s.send_capacity() - s.send_queue();
    if s.can_recv() && room > 0 {
        let mut buf = [0u8; TCP_CHUNK];
        let want = room.min(TCP_CHUNK);
        match s.recv_slice(&mut buf[..want]) {
            Ok(n) => match s.send_slice(&buf[..n]) {
                Ok(sent) if sent == n => {}
                // Cannot happen: there was room for `want` bytes.
                Ok(sent) => log::warn!("tcp echo: {} bytes lost", n - sent),
                Err(e) => log::warn!("tcp echo: {e}"),
            },
            Err(e) => log::warn!("tcp echo: {e}"),
        }
    }
    // The peer has closed and everything it sent is echoed (or queued, and
    // smoltcp sends the FIN after it): close our side too.
    if s.state() == tcp::State::CloseWait && s.recv_queue() == 0 {
        s.close();
    }
}
