//! The `self` component: registers the loopback's parameters and, at init,
//! hands out the setup of one loopback module. The caller supplies the
//! memory (`LoopbackSetup::build`), since the core never allocates.

use super::Loopback;
use crate::endpoint::ProcName;
use crate::mca::{Component, Modules, NotAvailable, ParamSpec, Params, RegisterError, Version};
use crate::pool::{
    FragmentPools, FragmentPoolsConfig, PoolDefaults, PoolError, PoolParams, Region,
    pool_param_specs,
};

/// The loopback's pool parameters (`btl_self_eager_limit`, ...): a process
/// rarely sends much to itself, so its pools are small.
pub static SELF_POOL_PARAMS: [ParamSpec; 6] = pool_param_specs(
    "self",
    PoolDefaults {
        small_size: "256",
        eager_limit: "64k",
        max_send_size: "128k",
        free_list_num: "4",
        free_list_max: "64",
        free_list_inc: "4",
    },
);

/// The `self` component.
#[derive(Debug, Default)]
pub struct SelfComponent {
    pool_params: Option<PoolParams>,
}

/// What `init` yields: the configuration of one loopback module, built once
/// the caller hands in the memory for its pools.
#[derive(Debug, Clone, Copy)]
pub struct LoopbackSetup {
    /// Sizes of the module's fragment pools.
    pub pools: FragmentPoolsConfig,
}

impl LoopbackSetup {
    /// Bytes of region [`LoopbackSetup::build`] needs.
    pub const fn required_bytes(&self) -> usize {
        FragmentPools::required_bytes(&self.pools)
    }

    /// The loopback of process `me`, its pools carved from `region` (lent
    /// cells, [`PoolCell::from_mut`](crate::pool::PoolCell::from_mut), or
    /// one the module keeps).
    pub fn build<R: Region, M: AsRef<[u8]> + AsMut<[u8]>, const REGS: usize, const QUEUE: usize>(
        &self,
        region: R,
        me: ProcName,
    ) -> Result<Loopback<R, M, REGS, QUEUE>, PoolError> {
        Ok(Loopback::new(
            me,
            FragmentPools::owning(region, self.pools)?,
        ))
    }
}

impl Component for SelfComponent {
    type Module = LoopbackSetup;

    crate::btl_component_identity!("self", Version::new(0, 1, 0));

    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
        self.pool_params = Some(PoolParams::register(params, &SELF_POOL_PARAMS)?);
        Ok(())
    }

    fn init(&mut self, params: &dyn Params) -> Result<Modules<LoopbackSetup>, NotAvailable> {
        let pool_params = self
            .pool_params
            .ok_or(NotAvailable::new("self: parameters were not registered"))?;
        let pools = pool_params
            .read(params, 0)
            .map_err(|e| NotAvailable::from_args(format_args!("self: {e}")))?;
        let mut modules = Modules::new();
        // One module always fits.
        let _ = modules.push(LoopbackSetup { pools });
        Ok(modules)
    }
}
