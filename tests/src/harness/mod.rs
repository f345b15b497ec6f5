//! Harnesses: one [`World`](crate::world::World) per backend.
//!
//! A harness builds two processes' BTLs (or, for the loopback, one),
//! connects them, and carries their bytes when the suite calls `progress`.

pub mod datagram_pair;
pub mod loopback;
pub mod serial;
pub mod smoltcp;
pub mod sockets;
pub mod stream_pair;
