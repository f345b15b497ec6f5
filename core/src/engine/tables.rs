//! The tables an engine keeps its state in: one per kind of thing it
//! holds, each as long as the [`Capacities`] say, held as the engine's
//! [`Storage`] says. The window `W` (packets in flight per peer) is a
//! const generic of the engine, as each peer keeps its windows inline.

use super::events::EventSlot;
use super::forgotten::Start;
use super::link::Link;
use super::ops::OpSlot;
use super::peer::Peer;
use super::schedule::Slot;
use super::storage::{Lent, Storage};
use crate::btl::RegSlot;
use crate::endpoint::EndpointSlot;
use crate::table::Entry;

/// Every table of an engine with window `W`, held as `S` says. Build it
/// with [`Inline::lend`], or fill it with tables of the lengths the
/// [`Capacities`] give (all in their empty state).
pub struct Tables<S: Storage, const W: usize> {
    /// One slot per peer.
    pub peers: S::Table<EndpointSlot<Peer<W>>>,
    /// The order of the peers, one per peer.
    pub peer_order: S::Table<u16>,
    /// Which peers a call touched, and when each is due: one per peer.
    pub peer_schedule: S::Table<Slot>,
    /// One slot per link.
    pub links: S::Table<Entry<Link<W>>>,
    /// The order of the links, one per link.
    pub link_order: S::Table<u16>,
    /// Which links a call touched or may write, and when each is due: one
    /// per link.
    pub link_schedule: S::Table<Slot>,
    /// Puts and gets under way, this side's and peers' gets served.
    pub ops: S::Table<OpSlot>,
    /// Events waiting to be polled, and room kept for those owed.
    pub events: S::Table<EventSlot>,
    /// Starts of lost peers whose records were freed: one per peer is
    /// plenty.
    pub forgotten: S::Table<Start>,
    /// Registered memory.
    pub registrations: S::Registrations,
    /// Where the engine records its calls.
    pub journal: S::Journal,
}

/// How many of each thing an engine holds: the lengths of its [`Tables`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacities {
    /// Peers on record at once (at most 65536).
    pub peers: usize,
    /// Connections at once, any state (at most 65536).
    pub links: usize,
    /// Puts and gets under way at once.
    pub ops: usize,
    /// Events: waiting to be polled, owed by work under way, and a quarter
    /// kept for lost peers' errors.
    pub events: usize,
    /// Registrations at once.
    pub registrations: usize,
}

impl Capacities {
    /// What a socket module of btl-std holds by default: 64 peers, 128
    /// links, 64 operations, 256 events, 64 registrations.
    pub const SOCKET_MODULE: Capacities = Capacities::for_peers(64);

    /// What a socket module for `peers` peers holds: two links each (a
    /// connection of each side's while they cross), four events each (the
    /// errors of a lost peer's work), and a quarter as many operations and
    /// registrations, at least 64 of each.
    pub const fn for_peers(peers: usize) -> Capacities {
        let quarter = if peers / 4 > 64 { peers / 4 } else { 64 };
        Capacities {
            peers,
            links: 2 * peers,
            ops: quarter,
            events: 4 * peers,
            registrations: quarter,
        }
    }

    /// Bytes the tables of an engine with window `W` and these capacities
    /// take, registered memory held as `M`: what the caller lends (or a
    /// host allocates) beside the engine value itself and its pools.
    pub const fn table_bytes<const W: usize, M>(&self) -> usize {
        use core::mem::size_of;
        self.peers
            * (size_of::<EndpointSlot<Peer<W>>>()
                + size_of::<u16>()
                + size_of::<Slot>()
                + size_of::<Start>())
            + self.links * (size_of::<Entry<Link<W>>>() + size_of::<u16>() + size_of::<Slot>())
            + self.ops * size_of::<OpSlot>()
            + self.events * size_of::<EventSlot>()
            + self.registrations * size_of::<RegSlot<M>>()
    }
}

/// Every table of an engine inline, sized by const generics: `P` peers,
/// `L` links, window `W`, `O` operations, `E` events, `R` registrations of
/// memory held as `M`. Keep it where it stays put (a `static`, a stack
/// frame that outlives the engine) and [`lend`](Self::lend) it.
pub struct Inline<
    const P: usize,
    const L: usize,
    const W: usize,
    const O: usize,
    const E: usize,
    const R: usize,
    M,
> {
    peers: [EndpointSlot<Peer<W>>; P],
    peer_order: [u16; P],
    peer_schedule: [Slot; P],
    links: [Entry<Link<W>>; L],
    link_order: [u16; L],
    link_schedule: [Slot; L],
    ops: [OpSlot; O],
    events: [EventSlot; E],
    forgotten: [Start; P],
    registrations: [RegSlot<M>; R],
}

impl<
    const P: usize,
    const L: usize,
    const W: usize,
    const O: usize,
    const E: usize,
    const R: usize,
    M,
> Inline<P, L, W, O, E, R, M>
{
    /// Empty tables.
    pub const fn new() -> Self {
        Inline {
            peers: [const { Entry::EMPTY }; P],
            peer_order: [0; P],
            peer_schedule: [Slot::EMPTY; P],
            links: [const { Entry::EMPTY }; L],
            link_order: [0; L],
            link_schedule: [Slot::EMPTY; L],
            ops: [OpSlot::EMPTY; O],
            events: [const { EventSlot::EMPTY }; E],
            forgotten: [Start::EMPTY; P],
            registrations: [const { RegSlot::EMPTY }; R],
        }
    }

    /// The tables, lent to an engine for as long as it lives.
    pub fn lend<'a>(&'a mut self) -> Tables<Lent<'a, M>, W>
    where
        M: AsRef<[u8]> + AsMut<[u8]> + 'a,
    {
        Tables {
            peers: &mut self.peers,
            peer_order: &mut self.peer_order,
            peer_schedule: &mut self.peer_schedule,
            links: &mut self.links,
            link_order: &mut self.link_order,
            link_schedule: &mut self.link_schedule,
            ops: &mut self.ops,
            events: &mut self.events,
            forgotten: &mut self.forgotten,
            registrations: &mut self.registrations,
            journal: (),
        }
    }
}

impl<
    const P: usize,
    const L: usize,
    const W: usize,
    const O: usize,
    const E: usize,
    const R: usize,
    M,
> Default for Inline<P, L, W, O, E, R, M>
{
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_bytes_are_what_inline_storage_takes() {
        type Firmware = Inline<2, 2, 8, 4, 16, 4, &'static mut [u8]>;
        let caps = Capacities {
            peers: 2,
            links: 2,
            ops: 4,
            events: 16,
            registrations: 4,
        };
        assert_eq!(
            caps.table_bytes::<8, &'static mut [u8]>(),
            core::mem::size_of::<Firmware>()
        );
    }
}
