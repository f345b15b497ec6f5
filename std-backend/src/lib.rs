//! `btl-std`: btl on an operating system.
//!
//! It supplies what `btl-core` cannot do without `std`: the environment and
//! config-file sources of parameters ([`param_sources`]), the bootstrap
//! that lets processes find each other ([`bootstrap`]), interface
//! selection ([`interfaces`]), the engine over OS sockets ([`module`],
//! [`tcp`], [`udp`]), its log turned on in one call ([`logging`]), and the
//! `btl` command's reports ([`info`]).
#![forbid(unsafe_code)]

pub mod bench;
pub mod bootstrap;
pub mod contacts;
pub mod engine_cell;
pub mod info;
pub mod interfaces;
pub mod launch;
pub mod listen;
pub mod logging;
pub mod module;
pub mod net;
pub mod param_file;
pub mod param_sources;
pub mod params;
pub mod plot;
pub mod progress_thread;
pub mod raw;
pub mod refusals;
pub mod tcp;
pub mod udp;
pub mod wake;

use btl_core::loopback::SelfComponent;
use btl_core::mca::{Component, Params, RegisterError, Registry, register_framework_params};

use crate::info::ComponentInfo;

/// How many parameters one process can register: every component of the
/// build with room to spare. Registering more is an error, not a panic.
pub const PARAM_CAPACITY: usize = 256;

/// The parameter registry of a process.
pub type ParamRegistry = Registry<PARAM_CAPACITY>;

/// Registers the framework's and every component's parameters in `params`
/// and returns the components as `btl info` lists them.
pub fn register_all(params: &mut dyn Params) -> Result<Vec<ComponentInfo>, RegisterError> {
    register_framework_params(params)?;
    let mut loopback = SelfComponent::default();
    loopback.register(params)?;
    let mut tcp = tcp::TcpComponent::default();
    tcp.register(params)?;
    let mut udp = udp::UdpComponent::default();
    udp.register(params)?;
    Ok(vec![
        ComponentInfo::of(&loopback),
        ComponentInfo::of(&tcp),
        ComponentInfo::of(&udp),
    ])
}
