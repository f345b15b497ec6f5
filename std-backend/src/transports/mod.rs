//! The socket transports a [`Module`](crate::driver::module::Module)
//! drives, each a component of its own: [`tcp`] (stream framing over TCP
//! connections) and [`udp`] (datagram framing, made reliable by the
//! engine). Both choose the local addresses they use and pair them with a
//! peer's by the same rules ([`interfaces`]), and listen where those say
//! ([`listen`]).

pub mod interfaces;
pub mod listen;
pub mod tcp;
pub mod udp;
