//! Engine storage on the heap: each table a box of the length the
//! capacities give, the fragment pools' region a pinned box, registered
//! memory owned buffers. Allocated once, when a module opens; nothing
//! grows after.

use super::recorder::Recorder;
use std::marker::PhantomData;
use std::pin::Pin;

use btl_core::btl::RegSlot;
use btl_core::engine::framing::Framing;
use btl_core::engine::{Capacities, Engine, Storage, Tables};
use btl_core::pool::{FragmentPools, FragmentPoolsConfig, PoolCell, PoolError};

/// What a module holds a registered region as: an owned buffer it keeps
/// until deregistration hands it back (`Vec<u8>` for a service).
pub trait Buffer: AsRef<[u8]> + AsMut<[u8]> {}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Buffer for B {}

/// Storage whose tables are boxes, whose pools own their region, and
/// whose registered memory is owned buffers of type `M` (`Vec<u8>`, or any
/// owned `AsMut<[u8]>`), handed back at deregistration.
#[derive(Debug)]
pub struct Heap<M = Vec<u8>>(PhantomData<M>);

impl<M: AsRef<[u8]> + AsMut<[u8]>> Storage for Heap<M> {
    type Table<T: 'static> = Box<[T]>;
    type Memory = M;
    type Registrations = Box<[RegSlot<M>]>;
    type Region = Pin<Box<[PoolCell]>>;
    type Journal = Recorder;
}

/// The engine of a module over `F` framing, with a window of `W`.
pub type HeapEngine<F, M = Vec<u8>, const W: usize = 64> = Engine<Heap<M>, F, W>;

impl<M: AsRef<[u8]> + AsMut<[u8]>> Heap<M> {
    /// Empty tables of the lengths `capacities` gives.
    pub fn tables<const W: usize>(capacities: Capacities) -> Tables<Heap<M>, W> {
        Tables {
            peers: boxed(capacities.peers),
            peer_order: boxed(capacities.peers),
            peer_schedule: boxed(capacities.peers),
            links: boxed(capacities.links),
            link_order: boxed(capacities.links),
            link_schedule: boxed(capacities.links),
            ops: boxed(capacities.ops),
            events: boxed(capacities.events),
            forgotten: boxed(capacities.peers),
            registrations: boxed(capacities.registrations),
            journal: Recorder::off(),
        }
    }

    /// A region of `len` bytes for fragment pools to own.
    pub fn region(len: usize) -> Pin<Box<[PoolCell]>> {
        PoolCell::boxed(len)
    }

    /// Fragment pools laid out as `config`, over a region of their own.
    pub fn pools(
        config: FragmentPoolsConfig,
    ) -> Result<FragmentPools<Pin<Box<[PoolCell]>>>, PoolError> {
        FragmentPools::owning(Self::region(config.required_bytes()), config)
    }

    /// An engine with `config`, framed as `framing`, its tables sized by
    /// `capacities` and its pools by `pools`, started at `now`.
    pub fn engine<F: Framing, const W: usize>(
        config: btl_core::engine::config::EngineConfig,
        framing: F,
        capacities: Capacities,
        pools: FragmentPoolsConfig,
        now: btl_core::time::Instant,
    ) -> Result<Engine<Heap<M>, F, W>, PoolError> {
        Ok(Engine::new(
            config,
            framing,
            Self::tables(capacities),
            Self::pools(pools)?,
            now,
        ))
    }
}

/// `n` empty slots.
fn boxed<T: Default>(n: usize) -> Box<[T]> {
    std::iter::repeat_with(T::default).take(n).collect()
}
