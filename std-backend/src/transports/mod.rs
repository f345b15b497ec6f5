//! The components of the build beside the loopback: the socket transports
//! a [`Module`](crate::driver::module::Module) drives, [`tcp`] (stream
//! framing over TCP connections) and [`udp`] (datagram framing, made
//! reliable by the engine), which choose the local addresses they use and
//! pair them with a peer's by the same rules ([`interfaces`]) and listen
//! on the [`Ports`] their parameters give; and [`sm`], shared memory
//! between the processes of one host.

pub mod interfaces;
mod listen;
// Real mappings of real memory: nothing for loom to model.
#[cfg(not(loom))]
pub mod sm;
pub mod tcp;
pub mod udp;

pub use listen::Ports;
