//! [`UdpDriver`]: an engine in datagram framing over one smoltcp UDP
//! socket.
//!
//! A link is a remote endpoint: the [`Association`]s the caller lends say
//! which. A datagram from an endpoint without one is a new link the engine
//! learns the peer of from its HELLO; a connection the engine asks for is
//! an association made at once (datagrams need no setup), or the one
//! already there when that peer's datagrams came first.

use ::smoltcp::iface::{Interface, SocketHandle, SocketSet};
use ::smoltcp::phy::Device;
use ::smoltcp::socket::udp::{SendError, Socket};
use ::smoltcp::wire::IpEndpoint;

use heapless::Vec;

use super::{
    Budget, Driver, Nonces, PeerAddr, Polled, add_peer, address_of, earliest, egress, ingress,
    source_of,
};
use crate::engine::driver::Io;
use crate::engine::storage::Storage;
use crate::engine::{ConnectFailure, ConnectRequest, Datagram, Engine, LinkId};
use crate::time::Instant;

/// One link of a [`UdpDriver`]: the remote endpoint it is with. The caller
/// lends one slot per link the engine may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Association {
    /// The peer's address and port.
    pub remote: IpEndpoint,
    /// The link.
    pub link: LinkId,
}

/// An engine in datagram framing over one smoltcp UDP socket, bound to the
/// driver's port: up to `LINKS` links, to any of `PEERS` peers it knows
/// the address of and from any peer that sends to its port.
pub struct UdpDriver<N, const LINKS: usize, const PEERS: usize> {
    handle: SocketHandle,
    links: [Option<Association>; LINKS],
    peers: Vec<PeerAddr, PEERS>,
    nonces: N,
    budget: Budget,
}

impl<N: Nonces, const LINKS: usize, const PEERS: usize> UdpDriver<N, LINKS, PEERS> {
    /// A driver of the UDP socket `handle` (in `sockets`), bound to `port`,
    /// knowing no peer's address yet ([`add_peer`](Self::add_peer)). Fails
    /// as smoltcp's `bind` does (port 0). The socket's send buffer must
    /// hold a datagram of the engine's MTU.
    pub fn new(
        handle: SocketHandle,
        sockets: &mut SocketSet<'_>,
        port: u16,
        nonces: N,
    ) -> Result<Self, ::smoltcp::socket::udp::BindError> {
        let socket = sockets.get_mut::<Socket<'_>>(handle);
        socket.close();
        socket.bind(port)?;
        Ok(UdpDriver {
            handle,
            links: [None; LINKS],
            peers: Vec::new(),
            nonces,
            budget: Budget::default(),
        })
    }

    /// How much one poll may do.
    pub fn set_budget(&mut self, budget: Budget) {
        self.budget = budget;
    }

    /// The links and their endpoints, for reports and tests.
    pub fn associations(&self) -> impl Iterator<Item = &Association> {
        self.links.iter().flatten()
    }

    /// Every datagram the socket holds, each to its link.
    fn receive<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Datagram, W>,
        sockets: &mut SocketSet<'_>,
        now: Instant,
    ) {
        let socket = sockets.get_mut::<Socket<'_>>(self.handle);
        while let Ok((datagram, meta)) = socket.recv() {
            let from = meta.endpoint;
            let link = match self.links.iter().flatten().find(|a| a.remote == from) {
                Some(a) => a.link,
                None => {
                    // A stranger: a link, if there is a slot for it both
                    // here and in the engine; otherwise the datagram is
                    // dropped and the sender tries again.
                    let Some(free) = self.links.iter_mut().find(|a| a.is_none()) else {
                        continue;
                    };
                    let Ok(link) =
                        engine.handle_accepted(source_of(from.addr), self.nonces.nonce(), now)
                    else {
                        continue;
                    };
                    *free = Some(Association { remote: from, link });
                    link
                }
            };
            if engine.handle_datagram(link, datagram, now).is_err() {
                forget(&mut self.links, link);
            }
        }
    }
}

impl<N: Nonces, const LINKS: usize, const PEERS: usize> Driver<Datagram>
    for UdpDriver<N, LINKS, PEERS>
{
    fn poll<S: Storage, const W: usize, D: Device + ?Sized>(
        &mut self,
        engine: &mut Engine<S, Datagram, W>,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
        now: Instant,
    ) -> Polled {
        let polled = ingress(iface, device, sockets, self.budget, now, |_| {});
        self.receive(engine, sockets, now);
        engine.serve(
            &mut UdpIo {
                driver: self,
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
        engine: &Engine<S, Datagram, W>,
        iface: &mut Interface,
        sockets: &SocketSet<'_>,
        now: Instant,
    ) -> Option<Instant> {
        earliest(engine.poll_timeout(), iface, sockets, now)
    }

    fn add_peer(&mut self, peer: PeerAddr) -> Result<(), PeerAddr> {
        add_peer(&mut self.peers, peer)
    }
}

/// Drops the association of `link`, if there is one.
fn forget(links: &mut [Option<Association>], link: LinkId) {
    for a in links.iter_mut() {
        if a.is_some_and(|a| a.link == link) {
            *a = None;
        }
    }
}

/// What the engine asks of a [`UdpDriver`] during one turn.
struct UdpIo<'d, 's, 'b, N, const LINKS: usize, const PEERS: usize> {
    driver: &'d mut UdpDriver<N, LINKS, PEERS>,
    sockets: &'s mut SocketSet<'b>,
}

impl<S: Storage, const W: usize, N: Nonces, const LINKS: usize, const PEERS: usize>
    Io<Engine<S, Datagram, W>> for UdpIo<'_, '_, '_, N, LINKS, PEERS>
{
    fn connect(&mut self, engine: &mut Engine<S, Datagram, W>, req: ConnectRequest, now: Instant) {
        let driver = &mut *self.driver;
        let Some(remote) = address_of(&driver.peers, req.listed_as) else {
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        };
        if driver.links.iter().flatten().any(|a| a.remote == remote) {
            // The peer's datagrams made a link already; it carries the
            // peer.
            return;
        }
        let Some(free) = driver.links.iter_mut().find(|a| a.is_none()) else {
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        };
        match engine.handle_connected(req, driver.nonces.nonce(), now) {
            Ok(link) => *free = Some(Association { remote, link }),
            Err(_) => engine.handle_connect_failed(req, ConnectFailure::Unreachable, now),
        }
    }

    fn write(&mut self, engine: &mut Engine<S, Datagram, W>, _now: Instant) {
        let socket = self.sockets.get_mut::<Socket<'_>>(self.driver.handle);
        for a in self.driver.links.iter().flatten() {
            loop {
                let Some(transmit) = engine.poll_transmit(a.link) else {
                    break;
                };
                let len: usize = transmit.segments.iter().map(|s| s.len()).sum();
                match socket.send(len, a.remote) {
                    Ok(buf) => {
                        let mut at = 0;
                        for segment in transmit.segments.iter() {
                            if let Some(to) = buf.get_mut(at..at + segment.len()) {
                                to.copy_from_slice(segment);
                            }
                            at += segment.len();
                        }
                    }
                    // The socket's buffer is full: this datagram waits for
                    // the next poll, when egress has made room.
                    Err(SendError::BufferFull) => return,
                    // Never sendable (no route to the address): dropped, as
                    // the network would, and retransmission repairs it if
                    // a route comes.
                    Err(SendError::Unaddressable) => {}
                }
                drop(transmit);
                engine.handle_written(a.link, len);
            }
        }
    }

    fn close(&mut self, engine: &mut Engine<S, Datagram, W>, link: LinkId, now: Instant) {
        forget(&mut self.driver.links, link);
        engine.handle_closed(link, now);
    }
}
