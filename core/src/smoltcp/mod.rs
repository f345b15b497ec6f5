//! The engine over smoltcp (feature `smoltcp`): btl on a board with a NIC
//! and no operating system, or on any [`smoltcp::phy::Device`].
//!
//! Two drivers, one per framing, each carrying an engine's links over
//! sockets of a smoltcp [`SocketSet`]:
//!
//! - [`TcpDriver`] runs an `Engine<_, Stream, _>` over TCP sockets: one
//!   socket per link, listening ones turned into links as peers connect;
//! - [`UdpDriver`] runs an `Engine<_, Datagram, _>` over one UDP socket,
//!   one link per remote endpoint.
//!
//! Everything is the caller's, as smoltcp's own sockets are: the device,
//! the [`Interface`], the socket set and the
//! sockets' buffers, the clock and the randomness of the handshake nonces
//! ([`Nonces`]). A driver's own tables (its sockets' [`TcpSlot`]s or its
//! [`Association`]s, the peers' addresses, [`PeerAddr`]) are sized by
//! const generics and live in the driver's value, wherever the caller
//! puts it. Nothing allocates.
//!
//! A driver's [`poll`](Driver::poll) does a bounded amount of work:
//! at most [`Budget::ingress`] frames from the device, the engine's input
//! from the sockets, one turn of [`Engine::serve`](crate::engine::Engine::serve)
//! and the interface's egress. It says whether frames may still wait in the
//! device ([`Polled::more`]), which the interface's own deadline
//! (`poll_at`) does not count: call it again at once then, and otherwise at
//! [`poll_at`](TcpDriver::poll_at).
//!
//! smoltcp's TCP defaults suit interactive traffic, not a transfer layer:
//! the drivers turn Nagle's algorithm off on their sockets (a small frame
//! would wait for the acknowledgement of the previous one) and shorten
//! the delayed acknowledgement to [`ACK_DELAY`] (smoltcp's 10 ms would cap
//! a ping-pong at 100 round trips a second).

mod datagram;
mod stream;

pub use datagram::{Association, UdpDriver};
pub use stream::{TcpDriver, TcpSlot};

use ::smoltcp::iface::{Interface, PollIngressSingleResult, PollResult, SocketSet};
use ::smoltcp::phy::Device;
use ::smoltcp::wire::{IpAddress, IpEndpoint};

pub use crate::engine::driver::Nonces;

use crate::endpoint::ProcName;
use crate::engine::storage::Storage;
use crate::engine::{Engine, Framing, Source};
use crate::time::{Duration, Instant};

/// What [`TcpDriver`] and [`UdpDriver`] have in common, for code that
/// runs an engine of framing `F` over either.
pub trait Driver<F: Framing> {
    /// One bounded turn at `now`: frames from the device, the sockets'
    /// input into the engine, one turn of the engine's driver loop
    /// (timers, connects, writes, closes) into the sockets, frames to the
    /// device.
    fn poll<S: Storage, const W: usize, D: Device + ?Sized>(
        &mut self,
        engine: &mut Engine<S, F, W>,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
        now: Instant,
    ) -> Polled;

    /// When to poll next, if nothing comes before: the earliest of the
    /// engine's, the driver's and the interface's deadlines.
    fn poll_at<S: Storage, const W: usize>(
        &self,
        engine: &Engine<S, F, W>,
        iface: &mut Interface,
        sockets: &SocketSet<'_>,
        now: Instant,
    ) -> Option<Instant>;

    /// Tells the driver where `peer.proc` listens (again, if it moved);
    /// refused when its list of addresses is full.
    fn add_peer(&mut self, peer: PeerAddr) -> Result<(), PeerAddr>;
}

/// The delayed acknowledgement the drivers give their TCP sockets.
pub const ACK_DELAY: Duration = Duration::from_millis(1);

/// Where a peer listens: what [`TcpDriver`] and [`UdpDriver`] connect to
/// when the engine asks for process `proc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr {
    /// The peer's process name.
    pub proc: ProcName,
    /// Its address and port.
    pub endpoint: IpEndpoint,
}

/// How much one [`poll`](Driver::poll) may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Frames taken from the device at the most.
    pub ingress: usize,
    /// Turns of the interface's egress at the most.
    pub egress: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            ingress: 32,
            egress: 32,
        }
    }
}

/// What one poll did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Polled {
    /// The ingress budget ran out: frames may still wait in the device.
    pub more: bool,
}

/// The time of smoltcp for an instant of btl (both count from the
/// caller's origin).
pub fn smol_instant(now: Instant) -> ::smoltcp::time::Instant {
    ::smoltcp::time::Instant::from_micros(i64::try_from(now.as_nanos() / 1_000).unwrap_or(i64::MAX))
}

/// The instant of btl for a time of smoltcp (before the origin: the
/// origin).
pub fn btl_instant(t: ::smoltcp::time::Instant) -> Instant {
    Instant::from_micros(u64::try_from(t.total_micros()).unwrap_or(0))
}

/// The engine's name for where a connection or datagram comes from.
fn source_of(addr: IpAddress) -> Source {
    match addr {
        IpAddress::Ipv4(a) => Source::ipv4(a.octets()),
        IpAddress::Ipv6(a) => Source::ipv6(a.octets()),
    }
}

/// Puts `peer` in `peers`, in place of what was said of its process
/// before.
fn add_peer<const P: usize>(
    peers: &mut heapless::Vec<PeerAddr, P>,
    peer: PeerAddr,
) -> Result<(), PeerAddr> {
    match peers.iter_mut().find(|p| p.proc == peer.proc) {
        Some(known) => {
            *known = peer;
            Ok(())
        }
        None => peers.push(peer),
    }
}

/// Where `proc` listens, if the caller said.
fn address_of(peers: &[PeerAddr], proc: ProcName) -> Option<IpEndpoint> {
    peers.iter().find(|p| p.proc == proc).map(|p| p.endpoint)
}

/// The interface's part of a poll before the sockets are read: frames from
/// the device, within the budget, with `after_frame` run after each (so
/// that a socket a frame freed can serve the next one).
fn ingress<D: Device + ?Sized>(
    iface: &mut Interface,
    device: &mut D,
    sockets: &mut SocketSet<'_>,
    budget: Budget,
    now: Instant,
    mut after_frame: impl FnMut(&mut SocketSet<'_>),
) -> Polled {
    let t = smol_instant(now);
    iface.poll_maintenance(t);
    for _ in 0..budget.ingress {
        match iface.poll_ingress_single(t, device, sockets) {
            PollIngressSingleResult::None => return Polled { more: false },
            PollIngressSingleResult::PacketProcessed => {}
            PollIngressSingleResult::SocketStateChanged => after_frame(sockets),
        }
    }
    Polled { more: true }
}

/// The interface's part of a poll after the engine wrote: frames to the
/// device, within the budget.
fn egress<D: Device + ?Sized>(
    iface: &mut Interface,
    device: &mut D,
    sockets: &mut SocketSet<'_>,
    budget: Budget,
    now: Instant,
) {
    let t = smol_instant(now);
    for _ in 0..budget.egress {
        if iface.poll_egress(t, device, sockets) == PollResult::None {
            return;
        }
    }
}

/// The earliest of `deadlines` (the engine's, the driver's) and the
/// interface's.
fn earliest(
    deadlines: impl IntoIterator<Item = Instant>,
    iface: &mut Interface,
    sockets: &SocketSet<'_>,
    now: Instant,
) -> Option<Instant> {
    let net = iface.poll_at(smol_instant(now), sockets).map(btl_instant);
    deadlines.into_iter().chain(net).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::smoltcp::wire::{Ipv4Address, Ipv6Address};

    #[test]
    fn instants_convert_both_ways_to_the_microsecond() {
        let now = Instant::from_nanos(12_345_678_999);
        assert_eq!(smol_instant(now).total_micros(), 12_345_678);
        assert_eq!(
            btl_instant(smol_instant(now)),
            Instant::from_micros(12_345_678)
        );
        assert_eq!(
            btl_instant(::smoltcp::time::Instant::from_micros(-5)),
            Instant::ZERO
        );
    }

    #[test]
    fn sources_fold_an_address_as_the_std_driver_does() {
        let v4 = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));
        assert_eq!(source_of(v4), Source(0x0a00_0002));
        let a = IpAddress::Ipv6(Ipv6Address::new(0xfd00, 0, 0, 1, 0, 0, 0, 5));
        let b = IpAddress::Ipv6(Ipv6Address::new(0xfd00, 0, 0, 1, 9, 9, 9, 9));
        assert_eq!(source_of(a), source_of(b), "one /64, one source");
        assert_ne!(source_of(a), source_of(v4));
    }
}
