//! The behaviours, one module per group. Each public function is one test:
//! it takes a fresh world, drives it for a bounded number of rounds, and
//! panics on the first broken promise.
//!
//! The groups `send`, `tags`, `sendi`, `rdma`, `registration`, `flow`,
//! `finalize` and `xfer` hold for every backend; `flow::paused_receiver_bounds_the_sender`,
//! `peer_loss`, `handshake` and `garbage` need a harness hook and run only
//! where the harness declares it (see [`Capabilities`](crate::world::Capabilities)).

pub mod finalize;
pub mod flow;
pub mod garbage;
pub mod handshake;
pub mod peer_loss;
pub mod rdma;
pub mod registration;
pub mod send;
pub mod sendi;
pub mod tags;
pub mod xfer;

use btl_core::btl::{Access, Attributes, MemHandle, MemSlice, RemoteSlice};

use crate::data::fill_pattern;
use crate::world::{Side, World};

/// Registers a fresh `len`-byte region with `side`'s BTL, filled with the
/// pattern of `seed` (or zeroed for `None`).
pub fn register(
    world: &mut dyn World,
    side: Side,
    len: usize,
    access: Access,
    seed: Option<u64>,
) -> MemHandle {
    let mut region = vec![0u8; len];
    if let Some(seed) = seed {
        fill_pattern(&mut region, seed);
    }
    world
        .btl(side)
        .register_mem(region, access)
        .expect("register_mem")
}

/// The attributes that hold for A's messages to B: the limits of the
/// module that carries them.
pub fn a_to_b(world: &mut dyn World) -> Attributes {
    let peer = world.peer(Side::A);
    *world.btl(Side::A).attributes_for(peer)
}

/// A local slice of `handle`.
pub fn local(handle: MemHandle, offset: u64, len: u64) -> MemSlice {
    handle.slice(offset, len)
}

/// The slice of `handle` as the peer names it.
pub fn remote(handle: MemHandle, offset: u64, len: u64) -> RemoteSlice {
    handle.remote_key().slice(offset, len)
}

/// The whole registered region of `handle` at `side`, copied out.
pub fn region(world: &mut dyn World, side: Side, handle: MemHandle) -> Vec<u8> {
    world
        .btl(side)
        .region(handle)
        .expect("a registered region")
        .to_vec()
}

/// The checksum of the registered region of `handle` at `side`.
pub fn region_sum(world: &mut dyn World, side: Side, handle: MemHandle) -> u64 {
    crate::data::checksum(world.btl(side).region(handle).expect("a registered region"))
}

/// A message header carrying a sequence number, for order checks.
pub fn seq_header(seq: u64) -> [u8; 8] {
    seq.to_le_bytes()
}

/// The sequence number at the front of a received message.
pub fn seq_of(data: &[u8]) -> u64 {
    let head: [u8; 8] = data
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .expect("a message with an 8-byte sequence header");
    u64::from_le_bytes(head)
}
