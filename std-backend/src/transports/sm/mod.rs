//! The shared-memory component (`btl_sm_*`): processes of one host talk
//! through rings in each other's memory, with no system call per message.
//!
//! Each module makes its process's [`segment`] in `/dev/shm`, named after
//! the user, job and rank, and publishes it on the process's card with the
//! host's identity ([`segment::host_identity`]). A peer of the same host
//! claims a slot in it and makes its ring there; the owner, seeing the
//! claim (in `add_procs`, or in `progress` for a peer that reached it
//! first), claims one back in the peer's segment. The rings then carry
//! [`btl_core::sm::SharedMemory`]'s records, and each side watches the
//! other's process, so that one that dies is lost within
//! [`WATCH_EVERY`] of progress.

#[allow(unsafe_code)]
mod module;
#[allow(unsafe_code)]
pub mod segment;

use std::sync::Arc;
use std::time::Duration;

use btl_core::endpoint::ProcName;
use btl_core::mca::{
    BTL_FRAMEWORK, Component, Modules, NotAvailable, ParamKind, ParamSpec, Params, RegisterError,
    Version,
};
use btl_core::pool::{FragmentPoolsConfig, PoolDefaults, PoolParams, pool_param_specs};

pub use module::{SM_PEERS, SmError, SmModule, WATCH_EVERY};

use crate::bootstrap::Bootstrap;
use crate::config::socket_params::Registered;
use crate::driver::heap::Buffer;

/// The component's name.
pub const NAME: &str = "sm";

/// The shared-memory component's pool parameters (`btl_sm_eager_limit`,
/// ...), Open MPI's defaults for its own `sm`: a message of up to 4 KiB
/// goes in one record, larger sends in records of 32 KiB.
pub static SM_POOL_PARAMS: [ParamSpec; 6] = pool_param_specs(
    NAME,
    PoolDefaults {
        small_size: "256",
        eager_limit: "4k",
        max_send_size: "32k",
        free_list_num: "16",
        free_list_max: "256",
        free_list_inc: "16",
    },
);

/// The shared-memory component's own parameters.
pub static SM_PARAMS: [ParamSpec; 3] = [
    ParamSpec::new(BTL_FRAMEWORK, NAME, "fifo_size", ParamKind::Size { min: 4096, max: 1 << 30 }, "256k")
        .help("Bytes of the ring each same-host peer writes into this process's segment, rounded down to a power of two; a message, or a piece of a put or get, is at most half of it. A ring takes memory only as its records reach its pages, and only for a peer that talks")
        .level(4),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "connect_timeout", ParamKind::Int { min: 0, max: 3_600_000 }, "10000")
        .help("Milliseconds add_procs waits for a same-host peer's card, and for the peer to join back (in its own add_procs or its progress)")
        .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "single_copy_limit", ParamKind::Size { min: 0, max: 1 << 40 }, "32k")
        .help("Puts and gets at least this large move in one copy: the target copies straight from or into the initiator's memory (Linux cross-memory attach), where the kernel allows it (one user, Yama ptrace_scope 0), else through the rings in two; 0 moves every one through the rings")
        .level(4),
];

/// What a shared-memory module is built with, read from the parameters.
#[derive(Debug, Clone)]
pub struct SmConfig {
    /// Bytes of each inbound ring, a power of two.
    pub fifo_size: usize,
    /// How long `add_procs` waits for a peer.
    pub connect_timeout: Duration,
    /// How long [`SmModule::wait`] polls before it sleeps.
    pub spin: Duration,
    /// Puts and gets at least this long go in one copy; 0: none.
    pub single_copy_limit: usize,
}

impl Default for SmConfig {
    fn default() -> Self {
        SmConfig {
            fifo_size: 256 << 10,
            connect_timeout: Duration::from_secs(10),
            spin: Duration::from_micros(50),
            single_copy_limit: 32 << 10,
        }
    }
}

/// Everything a shared-memory module needs from the parameters; `build`
/// adds the process and the bootstrap.
#[derive(Debug, Clone)]
pub struct SmSetup {
    /// Ring sizes and timers.
    pub sm: SmConfig,
    /// Fragment pools.
    pub pools: FragmentPoolsConfig,
}

impl SmSetup {
    /// The module of process `me`: its segment made, its card published
    /// through `bootstrap`.
    pub fn build<M: Buffer>(
        &self,
        me: ProcName,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> Result<SmModule<M>, SmError> {
        SmModule::open(me, self.sm.clone(), self.pools, bootstrap)
    }
}

/// The shared-memory component.
#[derive(Debug, Default)]
pub struct SmComponent {
    ids: Option<(PoolParams, Registered<3>)>,
}

impl Component for SmComponent {
    type Module = SmSetup;

    btl_core::btl_component_identity!(NAME, Version::new(0, 1, 0));

    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
        self.ids = Some((
            PoolParams::register(params, &SM_POOL_PARAMS)?,
            Registered::register(params, &SM_PARAMS)?,
        ));
        Ok(())
    }

    /// Not available where there is no `/dev/shm` to make segments in, or
    /// no boot id to tell the host by.
    fn init(&mut self, params: &dyn Params) -> Result<Modules<SmSetup>, NotAvailable> {
        let (pool_params, own) = self
            .ids
            .ok_or(NotAvailable::new("sm: parameters were not registered"))?;
        let na = |what: &dyn std::fmt::Display| NotAvailable::from_args(format_args!("sm: {what}"));
        if let Err(e) = segment::host_identity() {
            return Err(na(&format_args!(
                "no shared memory to use here ({e}): it needs Linux's /dev/shm and /proc"
            )));
        }
        let pools = pool_params
            .read(params, btl_core::sm::record::MESSAGE_HEAD)
            .map_err(|e| na(&e))?;
        let fifo = params.size(own.id("fifo_size")).map_err(|e| na(&e))?;
        let fifo_size = 1usize << (usize::try_from(fifo).unwrap_or(1 << 30).ilog2());
        let timeout = params.int(own.id("connect_timeout")).map_err(|e| na(&e))?;
        let single = params
            .size(own.id("single_copy_limit"))
            .map_err(|e| na(&e))?;
        let sm = SmConfig {
            fifo_size,
            connect_timeout: Duration::from_millis(u64::try_from(timeout).unwrap_or(0)),
            single_copy_limit: usize::try_from(single).unwrap_or(usize::MAX),
            ..SmConfig::default()
        };
        let mut modules = Modules::new();
        let _ = modules.push(SmSetup { sm, pools });
        Ok(modules)
    }
}
