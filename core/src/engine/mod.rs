//! The sans-I/O state machines that carry packets to a peer: connection,
//! movers, bulk transfers, credits, and the reliability layer underneath.
//!
//! [`window`] numbers every reliable packet, acknowledges, retransmits,
//! suppresses duplicates and restores order; [`rtt`] turns acknowledgement
//! round trips into a retransmission timeout. Both take the time from the
//! driver and hold everything in fixed storage.
//!
//! The in-memory drivers the engine's tests run on (two engines over byte
//! pipes, or over a faulty datagram network) are in the `btl-tests` crate.

pub mod config;
pub mod handshake;
mod machine;
pub mod mover;
pub mod rtt;
pub mod window;

pub use machine::{
    ConnectFailure, ConnectRequest, Engine, LinkEnd, LinkError, LinkId, MAX_OPS, MAX_PEER_LINKS,
    MAX_SEGMENTS, Source, Transmit, Usage, WINDOW,
};
