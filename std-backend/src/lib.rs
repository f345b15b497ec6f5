//! `btl-std`: btl on an operating system.
//!
//! Today it supplies what `btl-core` cannot do without `std`: the
//! environment and config-file sources of parameters ([`param_sources`]),
//! and the `btl` command's reports ([`info`]). The TCP and UDP components,
//! their `mio` progress loop and the bootstrap arrive with the engine.
#![forbid(unsafe_code)]

pub mod bootstrap;
pub mod info;
pub mod interfaces;
pub mod param_file;
pub mod param_sources;

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
    Ok(vec![ComponentInfo::of(&loopback)])
}
