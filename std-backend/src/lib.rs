//! `btl-std`: btl on an operating system.
//!
//! A service opens a module with a [`ModuleBuilder`] and talks through the
//! [`Btl`] trait: [`send_copy`](Btl::send_copy) for messages, puts and gets
//! between [registered](Btl::register_mem) buffers it hands over and gets
//! back, and events from [`poll_event`](Btl::poll_event), waited for with
//! [`Module::wait_for`], or handed to a handler by a [`ProgressThread`].
//! The book's "Getting started" chapter walks through a whole program
//! (`examples/request_reply.rs`). A tokio service uses the same modules
//! through the `btl-tokio` crate's async `Endpoint` instead.
//!
//! [`ModuleBuilder::open`] opens every component the framework parameter
//! `btl` selects (`self,sm,tcp` by default) under one [`Bml`], which routes
//! each peer to the best module that reaches it: a service that runs on
//! one host or many then needs no code per transport.
//!
//! Below that, in layers:
//! - [`driver`]: the engine over sockets, a module driven by its caller or
//!   by a progress thread, the network it runs on (the operating system's,
//!   or a simulation's), and the engine's storage on the heap;
//! - [`transports`]: the TCP and UDP components, and how they choose
//!   interfaces; the shared-memory component (`sm`) for the processes of
//!   one host;
//! - [`bml`]: the modules of a process under one `Btl`, each peer routed;
//! - [`bootstrap`]: how the processes of a job find each other;
//! - [`config`]: the parameter sources a module reads (the environment, a
//!   parameter file), for tools that list parameters as a module sees them;
//! - [`register_all`]: every component of the build, with its parameters,
//!   as a service lists them;
//! - [`capture`]: btl's frames written to pcapng files for Wireshark;
//! - [`metrics`]: each module's and each peer's counters, served to
//!   Prometheus;
//! - with the `logging` feature, its log turned on in one call
//!   (`logging::init`).
// Unsafe code only where a system call or a mapping needs it:
// `driver::udp_offload` (Linux's UDP offloads, which cut a datagram
// transport's system calls by up to 64), `driver::icmp` (the error queue),
// `transports::sm` (the shared segments, and copies across processes), and
// `bml::region` (one registered region held by every module of a `Bml`,
// which saves a copy of the region per module).
#![deny(unsafe_code)]

pub mod bml;
pub mod bootstrap;
mod builder;
pub mod capture;
pub mod config;
pub mod driver;
#[cfg(feature = "logging")]
pub mod logging;
pub mod metrics;
pub mod transports;

// What the `Btl` methods take and give, so that a service needs no
// other crate to call them.
pub use bml::Bml;
pub use btl_core::btl::{
    Access, Attributes, Btl, BtlError, ErrorEvent, Event, Incoming, Limit, LostReason, MemError,
    MemHandle, MemSlice, OpId, RegisterError, RejectCode, RemoteKey, RemoteSlice, SendError,
    SendStatus, Tag, TagRange, TagTable,
};
pub use btl_core::desc::{DescFlags, Descriptor, Order};
pub use btl_core::endpoint::{EndpointId, ProcName, Reachability};
pub use builder::{ModuleBuilder, OpenError, Opening, SelfModule};
pub use config::sources::SourceError;
pub use driver::module::{Module, ReachError, WaitError};
pub use driver::progress_thread::{ProgressThread, Served};
#[cfg(not(loom))]
pub use transports::sm::SmModule;
pub use transports::tcp::TcpModule;
pub use transports::udp::UdpModule;

use btl_core::loopback::SelfComponent;
use btl_core::mca::{
    Component, Params, RegisterError as ParamsRegisterError, Registry, register_framework_params,
};

use crate::transports::{tcp, udp};

/// How many parameters one process can register: every component of the
/// build with room to spare. Registering more is an error, not a panic.
pub const PARAM_CAPACITY: usize = 256;

/// The parameter registry of a process.
pub type ParamRegistry = Registry<PARAM_CAPACITY>;

/// A component of the build as it is listed (by `btl info`, or by a
/// service that reports what it runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    /// Framework it belongs to.
    pub framework: String,
    /// Component name, e.g. `tcp`.
    pub name: String,
    /// The component's own version.
    pub version: String,
    /// The framework interface version it implements.
    pub framework_version: String,
    /// Why it cannot run here (no device, a build without its support),
    /// when it cannot.
    pub unavailable: Option<String>,
}

impl ComponentInfo {
    /// The listing of `component`.
    pub fn of<C: Component + ?Sized>(component: &C) -> Self {
        ComponentInfo {
            framework: component.framework().to_owned(),
            name: component.name().to_owned(),
            version: component.version().to_string(),
            framework_version: component.framework_version().to_string(),
            unavailable: None,
        }
    }
}

/// Registers the framework's and every component's parameters in `params`
/// and returns the components as `btl info` lists them.
pub fn register_all(params: &mut dyn Params) -> Result<Vec<ComponentInfo>, ParamsRegisterError> {
    register_framework_params(params)?;
    let mut loopback = SelfComponent::default();
    loopback.register(params)?;
    let mut tcp = tcp::TcpComponent::default();
    tcp.register(params)?;
    let mut udp = udp::UdpComponent::default();
    udp.register(params)?;
    let mut components = vec![
        ComponentInfo::of(&loopback),
        ComponentInfo::of(&tcp),
        ComponentInfo::of(&udp),
    ];
    #[cfg(not(loom))]
    {
        let mut sm = crate::transports::sm::SmComponent::default();
        sm.register(params)?;
        let mut info = ComponentInfo::of(&sm);
        info.unavailable = crate::transports::sm::segment::host_identity()
            .err()
            .map(|e| format!("no shared memory here ({e}): it needs Linux's /dev/shm and /proc"));
        components.push(info);
    }
    Ok(components)
}
