//! `btl-core`: the protocol core of the btl byte transfer layer.
//!
//! It makes every protocol decision and never touches a socket, a clock, a
//! thread or the allocator: `#![no_std]` without `alloc`, every capacity fixed
//! at construction, exhaustion reported as an error value. Drivers in other
//! crates feed it bytes and time and carry out the I/O it asks for. (On a
//! host, the feature `alloc` adds one convenience: a pool region taken from
//! the heap, [`pool::PoolCell::boxed`].)
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

// `arbitrary` and its derive need `std`; the feature is for fuzzing and
// property tests on a host, never for a `no_std` target.
#[cfg(any(test, feature = "arbitrary"))]
extern crate std;

#[cfg(any(test, feature = "alloc"))]
extern crate alloc;

pub mod addr;
pub mod btl;
pub mod desc;
pub mod endpoint;
pub mod engine;
pub mod loopback;
pub mod mca;
pub mod pool;
pub mod ring;
#[cfg(feature = "embedded-io")]
pub mod serial;
pub mod sm;
#[cfg(feature = "smoltcp")]
pub mod smoltcp;
mod sync;
pub mod table;
pub mod time;
pub mod wire;
pub mod xfer;
