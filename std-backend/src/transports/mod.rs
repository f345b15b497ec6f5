//! The socket transports a [`Module`](crate::driver::module::Module)
//! drives, each a component of its own: [`tcp`] (stream framing over TCP
//! connections) and [`udp`] (datagram framing, made reliable by the
//! engine). Both choose the local addresses they use and pair them with a
//! peer's by the same rules ([`interfaces`]), and listen on the
//! [`Ports`] their parameters give. [`sm`] holds the parts of the
//! shared-memory component built so far.

pub mod interfaces;
mod listen;
// Real mappings of real memory: nothing for loom to model.
#[cfg(not(loom))]
pub mod sm;
pub mod tcp;
pub mod udp;

pub use listen::Ports;
