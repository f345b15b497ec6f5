//! The sans-I/O state machines that carry packets to a peer: connection,
//! movers, bulk transfers, credits, and the reliability layer underneath.
//!
//! [`window`] numbers every reliable packet, acknowledges, retransmits,
//! suppresses duplicates and restores order; [`rtt`] turns acknowledgement
//! round trips into a retransmission timeout. Both take the time from the
//! driver and hold everything in fixed storage.
//!
//! [`pipe`] is a driver of its own: two engines over in-memory byte pipes,
//! for tests (on a host or a board) and benchmarks.

pub mod config;
pub mod dgram;
pub mod handshake;
mod machine;
pub mod mover;
pub mod pipe;
pub mod rtt;
pub mod window;

#[cfg(test)]
mod datagram_tests;
#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod third_party_tests;

pub use machine::{
    ConnectFailure, ConnectRequest, Engine, LinkEnd, LinkError, LinkId, MAX_OPS, MAX_PEER_LINKS,
    MAX_SEGMENTS, Source, Transmit, Usage, WINDOW,
};
