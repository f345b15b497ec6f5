//! [`TcpDriver`]: an engine in stream framing over smoltcp's TCP sockets.
//!
//! Each [`TcpSlot`] is one TCP socket of the caller's set and what it
//! carries. smoltcp has no `accept`: a listening socket becomes the
//! connection. So every slot not carrying a link listens on the driver's
//! port, and a connection the engine asks for takes one of them. A slot
//! goes:
//!
//! ```text
//!   Idle ──▶ Listening ──(a peer connects)──▶ Open(link) ──▶ Closing ──▶ Idle
//!     ▲          │                                 ▲
//!     │          └──(the engine connects)──▶ Connecting
//!     └── refused (RST) / timed out ◀──────────────┘
//! ```

use ::smoltcp::iface::{Interface, SocketHandle, SocketSet};
use ::smoltcp::phy::Device;
use ::smoltcp::socket::tcp::{Socket, State};

use heapless::Vec;

use super::{
    ACK_DELAY, Budget, Driver, Nonces, PeerAddr, Polled, add_peer, address_of, earliest, egress,
    ingress, source_of,
};
use crate::engine::driver::Io;
use crate::engine::storage::Storage;
use crate::engine::{ConnectFailure, ConnectRequest, Engine, LinkId, Stream};
use crate::time::{Duration, Instant};
use crate::wire::{CloseReason, close_frame};

/// The first port of the range the driver connects from (IANA's dynamic
/// ports).
const FIRST_EPHEMERAL: u16 = 49152;

/// One TCP socket of a [`TcpDriver`] and what it carries. The caller adds
/// the socket (with its buffers) to its set and lends the driver one slot
/// per socket.
#[derive(Debug, Clone, Copy)]
pub struct TcpSlot {
    handle: SocketHandle,
    state: SlotState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Closed, to listen at the next poll.
    Idle,
    /// Waiting for a peer to connect.
    Listening,
    /// Connecting as the engine asked, until `deadline`.
    Connecting {
        req: ConnectRequest,
        deadline: Instant,
    },
    /// Carrying `link`.
    Open(LinkId),
    /// Sending its last bytes and a FIN, until `deadline`.
    Closing { deadline: Instant },
}

impl TcpSlot {
    /// The slot of the socket `handle` names.
    pub const fn new(handle: SocketHandle) -> Self {
        TcpSlot {
            handle,
            state: SlotState::Idle,
        }
    }

    /// The link this slot carries, if any.
    pub fn link(&self) -> Option<LinkId> {
        match self.state {
            SlotState::Open(link) => Some(link),
            _ => None,
        }
    }
}

/// An engine in stream framing over `SOCKETS` of smoltcp's TCP sockets:
/// links to the (at most `PEERS`) peers in its address list, and from any
/// peer that connects to its port.
pub struct TcpDriver<N, const SOCKETS: usize, const PEERS: usize> {
    slots: [TcpSlot; SOCKETS],
    peers: Vec<PeerAddr, PEERS>,
    port: u16,
    next_port: u16,
    nonces: N,
    budget: Budget,
    connect_timeout: Duration,
    linger: Duration,
}

impl<N: Nonces, const SOCKETS: usize, const PEERS: usize> TcpDriver<N, SOCKETS, PEERS> {
    /// A driver listening on `port` with the TCP sockets `handles` of
    /// `sockets`, knowing no peer's address yet ([`add_peer`](Self::add_peer)).
    /// It turns Nagle's algorithm off on its sockets and shortens their
    /// delayed acknowledgement (see the [module](super)).
    pub fn new(
        handles: [SocketHandle; SOCKETS],
        sockets: &mut SocketSet<'_>,
        port: u16,
        mut nonces: N,
    ) -> Self {
        let slots = handles.map(TcpSlot::new);
        for slot in slots.iter() {
            let socket = sockets.get_mut::<Socket<'_>>(slot.handle);
            socket.set_nagle_enabled(false);
            socket.set_ack_delay(Some(::smoltcp::time::Duration::from_micros(
                ACK_DELAY.as_micros(),
            )));
            socket.abort();
        }
        // Ports from a random point of the range: a restarted board does
        // not reuse the 4-tuples of its previous start.
        let [a, b, ..] = nonces.nonce();
        let range = u16::MAX - FIRST_EPHEMERAL;
        let next_port = FIRST_EPHEMERAL + u16::from_le_bytes([a, b]) % range;
        TcpDriver {
            slots,
            peers: Vec::new(),
            port,
            next_port,
            nonces,
            budget: Budget::default(),
            connect_timeout: Duration::from_secs(5),
            linger: Duration::from_secs(2),
        }
    }

    /// How long a connection may take to open before it counts as
    /// unreachable (5 s by default). One that the peer's host refuses
    /// (RST) fails at once, as refused.
    pub fn set_connect_timeout(&mut self, timeout: Duration) {
        self.connect_timeout = timeout;
    }

    /// How long a closed link's socket may take to send its last bytes
    /// before it is reset and reused (2 s by default).
    pub fn set_linger(&mut self, linger: Duration) {
        self.linger = linger;
    }

    /// How much one poll may do.
    pub fn set_budget(&mut self, budget: Budget) {
        self.budget = budget;
    }

    /// The slots, for reports and tests.
    pub fn slots(&self) -> &[TcpSlot] {
        &self.slots
    }

    /// What slot `i`'s socket brought: a connection opened, refused or
    /// ended, bytes for its link.
    fn read<S: Storage, const W: usize>(
        &mut self,
        i: usize,
        engine: &mut Engine<S, Stream, W>,
        sockets: &mut SocketSet<'_>,
        now: Instant,
    ) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let socket = sockets.get_mut::<Socket<'_>>(slot.handle);
        slot.state = match slot.state {
            SlotState::Idle => SlotState::Idle,
            SlotState::Listening => match socket.state() {
                State::Established | State::CloseWait => {
                    accepted(socket, engine, &mut self.nonces, self.linger, now)
                }
                _ => SlotState::Listening,
            },
            SlotState::Connecting { req, deadline } => match socket.state() {
                State::Established | State::CloseWait => {
                    match engine.handle_connected(req, self.nonces.nonce(), now) {
                        Ok(link) => SlotState::Open(link),
                        Err(_) => {
                            socket.abort();
                            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
                            SlotState::Idle
                        }
                    }
                }
                // Closed before the deadline: the peer's host reset it,
                // nothing listens there.
                State::Closed => {
                    engine.handle_connect_failed(req, ConnectFailure::Refused, now);
                    SlotState::Idle
                }
                _ if now >= deadline => {
                    socket.abort();
                    engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
                    SlotState::Idle
                }
                _ => SlotState::Connecting { req, deadline },
            },
            SlotState::Open(link) => read_link(socket, link, engine, self.linger, now),
            SlotState::Closing { deadline } if now >= deadline => {
                socket.abort();
                SlotState::Idle
            }
            SlotState::Closing { deadline } => SlotState::Closing { deadline },
        };
    }

    fn ephemeral_port(&mut self) -> u16 {
        let port = self.next_port;
        self.next_port = if port == u16::MAX {
            FIRST_EPHEMERAL
        } else {
            port + 1
        };
        port
    }
}

impl<N: Nonces, const SOCKETS: usize, const PEERS: usize> Driver<Stream>
    for TcpDriver<N, SOCKETS, PEERS>
{
    fn poll<S: Storage, const W: usize, D: Device + ?Sized>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
        now: Instant,
    ) -> Polled {
        let (slots, port) = (&mut self.slots, self.port);
        let polled = ingress(iface, device, sockets, self.budget, now, |sockets| {
            recycle(slots, port, sockets)
        });
        for i in 0..self.slots.len() {
            self.read(i, engine, sockets, now);
        }
        recycle(&mut self.slots, self.port, sockets);
        engine.serve(
            &mut TcpIo {
                driver: self,
                iface,
                sockets,
            },
            now,
            true,
        );
        egress(iface, device, sockets, self.budget, now);
        polled
    }

    fn poll_at<S: Storage, const W: usize>(
        &self,
        engine: &Engine<S, Stream, W>,
        iface: &mut Interface,
        sockets: &SocketSet<'_>,
        now: Instant,
    ) -> Option<Instant> {
        let mine = self
            .slots
            .iter()
            .filter_map(|s| match s.state {
                SlotState::Connecting { deadline, .. } | SlotState::Closing { deadline } => {
                    Some(deadline)
                }
                _ => None,
            })
            .min();
        earliest(
            engine.poll_timeout().into_iter().chain(mine),
            iface,
            sockets,
            now,
        )
    }

    fn add_peer(&mut self, peer: PeerAddr) -> Result<(), PeerAddr> {
        add_peer(&mut self.peers, peer)
    }
}

/// Every slot done with its connection (idle, or closing and closed)
/// listens on `port`, so that as many peers can connect at once as there
/// are sockets free. Run after each frame that changed a socket: a socket
/// the last ACK of a connection freed takes the SYN that follows it in the
/// same batch, rather than leave it to be refused.
fn recycle(slots: &mut [TcpSlot], port: u16, sockets: &mut SocketSet<'_>) {
    for slot in slots.iter_mut() {
        let socket = sockets.get_mut::<Socket<'_>>(slot.handle);
        let free = match slot.state {
            SlotState::Idle => true,
            SlotState::Closing { .. } => matches!(socket.state(), State::Closed | State::TimeWait),
            _ => false,
        };
        if free {
            socket.abort();
            slot.state = match socket.listen(port) {
                Ok(()) => SlotState::Listening,
                Err(_) => SlotState::Idle,
            };
        }
    }
}

/// A peer connected to a listening socket: a link, or, with every link
/// slot taken, a CLOSE saying so and the socket closed.
fn accepted<S: Storage, const W: usize>(
    socket: &mut Socket<'_>,
    engine: &mut Engine<S, Stream, W>,
    nonces: &mut impl Nonces,
    linger: Duration,
    now: Instant,
) -> SlotState {
    let Some(remote) = socket.remote_endpoint() else {
        socket.abort();
        return SlotState::Idle;
    };
    match engine.handle_accepted(source_of(remote.addr), nonces.nonce(), now) {
        Ok(link) => SlotState::Open(link),
        Err(_) => {
            let _ = socket.send_slice(&close_frame(CloseReason::ResourceExhausted));
            socket.close();
            SlotState::Closing {
                deadline: now + linger,
            }
        }
    }
}

/// Hands the bytes waiting in `socket` to `link` as far as the engine
/// takes them (what it leaves stays in the socket, whose window closes:
/// flow control), and reports the connection's end.
fn read_link<S: Storage, const W: usize>(
    socket: &mut Socket<'_>,
    link: LinkId,
    engine: &mut Engine<S, Stream, W>,
    linger: Duration,
    now: Instant,
) -> SlotState {
    while socket.can_recv() {
        let taken = socket.recv(|bytes| match engine.handle_stream(link, bytes, now) {
            Ok(n) => (n, Some(n)),
            Err(_) => (0, None),
        });
        match taken {
            Ok(Some(0)) => break,
            Ok(Some(_)) => {}
            // The engine no longer knows the link (it ended it).
            Ok(None) | Err(_) => {
                socket.abort();
                engine.handle_closed(link, now);
                return SlotState::Idle;
            }
        }
    }
    if socket.may_recv() || socket.can_recv() {
        return SlotState::Open(link);
    }
    // The peer closed its half, or the connection was reset or timed out.
    engine.handle_closed(link, now);
    if socket.state() == State::Closed {
        SlotState::Idle
    } else {
        socket.close();
        SlotState::Closing {
            deadline: now + linger,
        }
    }
}

/// What the engine asks of a [`TcpDriver`] during one turn.
struct TcpIo<'d, 'i, 's, 'b, N, const SOCKETS: usize, const PEERS: usize> {
    driver: &'d mut TcpDriver<N, SOCKETS, PEERS>,
    iface: &'i mut Interface,
    sockets: &'s mut SocketSet<'b>,
}

impl<S: Storage, const W: usize, N: Nonces, const SOCKETS: usize, const PEERS: usize>
    Io<Engine<S, Stream, W>> for TcpIo<'_, '_, '_, '_, N, SOCKETS, PEERS>
{
    fn connect(&mut self, engine: &mut Engine<S, Stream, W>, req: ConnectRequest, now: Instant) {
        let free = self
            .driver
            .slots
            .iter()
            .position(|s| matches!(s.state, SlotState::Idle | SlotState::Listening));
        let (Some(remote), Some(i)) = (address_of(&self.driver.peers, req.listed_as), free) else {
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        };
        let port = self.driver.ephemeral_port();
        let deadline = now + self.driver.connect_timeout;
        let Some(slot) = self.driver.slots.get_mut(i) else {
            return;
        };
        let socket = self.sockets.get_mut::<Socket<'_>>(slot.handle);
        socket.abort();
        slot.state = match socket.connect(self.iface.context(), remote, port) {
            Ok(()) => SlotState::Connecting { req, deadline },
            Err(_) => {
                engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
                SlotState::Idle
            }
        };
    }

    fn write(&mut self, engine: &mut Engine<S, Stream, W>, _now: Instant) {
        for slot in self.driver.slots.iter() {
            let SlotState::Open(link) = slot.state else {
                continue;
            };
            let socket = self.sockets.get_mut::<Socket<'_>>(slot.handle);
            while socket.can_send() {
                let Some(transmit) = engine.poll_transmit(link) else {
                    break;
                };
                let mut written = 0;
                let mut full = false;
                for segment in transmit.segments.iter() {
                    let n = socket.send_slice(segment).unwrap_or(0);
                    written += n;
                    if n < segment.len() {
                        full = true;
                        break;
                    }
                }
                drop(transmit);
                engine.handle_written(link, written);
                if full || written == 0 {
                    break;
                }
            }
        }
    }

    fn close(&mut self, engine: &mut Engine<S, Stream, W>, link: LinkId, now: Instant) {
        let linger = self.driver.linger;
        if let Some(slot) = self
            .driver
            .slots
            .iter_mut()
            .find(|s| s.state == SlotState::Open(link))
        {
            self.sockets.get_mut::<Socket<'_>>(slot.handle).close();
            slot.state = SlotState::Closing {
                deadline: now + linger,
            };
        }
        engine.handle_closed(link, now);
    }
}
