//! The storage an engine keeps its state in, chosen by the caller, as
//! smoltcp's `SocketSet` takes its sockets: every table is sized when the
//! engine is made and never grows, and the engine value itself is small.
//!
//! A [`Storage`] says how the tables are held: [`Lent`] borrows them (from
//! an [`Inline`] storage struct sized by const generics, in a `static` or
//! on a stack, or from any slices), and a host can own them (btl-std holds
//! them in boxes). The window `W` (packets in flight per peer) is a const
//! generic of the engine, as each peer keeps its windows inline.

use core::borrow::BorrowMut;
use core::marker::PhantomData;

use super::events::EventSlot;
use super::forgotten::Start;
use super::link::Link;
use super::ops::OpSlot;
use super::peer::Peer;
use crate::btl::RegSlot;
use crate::endpoint::EndpointSlot;
use crate::pool::{PoolCell, Region};
use crate::table::Entry;

/// How an engine holds its tables, registered memory and pool region.
pub trait Storage {
    /// A table of `T`s: a lent slice, an array, a box.
    type Table<T: 'static>: BorrowMut<[T]>;
    /// Registered memory, as the engine keeps it until deregistration
    /// ([`Btl::Memory`](crate::btl::Btl::Memory)).
    type Memory: AsRef<[u8]> + AsMut<[u8]>;
    /// The slots of registered memory.
    type Registrations: BorrowMut<[RegSlot<Self::Memory>]>;
    /// The region the fragment pools are carved from.
    type Region: Region;
}

/// Every table of an engine with window `W`, held as `S` says. Build it
/// with [`Inline::lend`], or fill it with tables of the lengths the
/// [`Capacities`] give (all in their empty state).
pub struct Tables<S: Storage, const W: usize> {
    /// One slot per peer.
    pub peers: S::Table<EndpointSlot<Peer<W>>>,
    /// The order of the peers, one per peer.
    pub peer_order: S::Table<u16>,
    /// One slot per link.
    pub links: S::Table<Entry<Link<W>>>,
    /// The order of the links, one per link.
    pub link_order: S::Table<u16>,
    /// Puts and gets under way, this side's and peers' gets served.
    pub ops: S::Table<OpSlot>,
    /// Events waiting to be polled, and room kept for those owed.
    pub events: S::Table<EventSlot>,
    /// Starts of lost peers whose records were freed: one per peer is
    /// plenty.
    pub forgotten: S::Table<Start>,
    /// Registered memory.
    pub registrations: S::Registrations,
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
    /// What a socket module of btl-std holds: 64 peers, 128 links, 64
    /// operations, 256 events, 64 registrations.
    pub const SOCKET_MODULE: Capacities = Capacities {
        peers: 64,
        links: 128,
        ops: 64,
        events: 256,
        registrations: 64,
    };
}

/// Storage lent for `'a`: every table a slice borrowed from the caller,
/// registered memory held as `M` (`&'a mut [u8]` by default).
#[derive(Debug)]
pub struct Lent<'a, M = &'a mut [u8]>(PhantomData<(&'a mut (), M)>);

impl<'a, M: AsRef<[u8]> + AsMut<[u8]> + 'a> Storage for Lent<'a, M> {
    type Table<T: 'static> = &'a mut [T];
    type Memory = M;
    type Registrations = &'a mut [RegSlot<M>];
    type Region = &'a [PoolCell];
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
    links: [Entry<Link<W>>; L],
    link_order: [u16; L],
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
            links: [const { Entry::EMPTY }; L],
            link_order: [0; L],
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
            links: &mut self.links,
            link_order: &mut self.link_order,
            ops: &mut self.ops,
            events: &mut self.events,
            forgotten: &mut self.forgotten,
            registrations: &mut self.registrations,
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
