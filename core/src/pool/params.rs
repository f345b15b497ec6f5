//! The parameters that size a component's fragment pools, named as Open
//! MPI's: `btl_<component>_eager_limit`, `_max_send_size`, `_small_size`,
//! `_free_list_num`, `_free_list_max`, `_free_list_inc`.
//!
//! A component declares the specs once as a static, registers them, and
//! reads them back as a [`FragmentPoolsConfig`]:
//!
//! ```
//! use btl_core::mca::{ParamSpec, Params, Registry};
//! use btl_core::pool::{PoolDefaults, PoolParams, pool_param_specs};
//!
//! static TCP_POOL: [ParamSpec; 6] = pool_param_specs("tcp", PoolDefaults::DEFAULT);
//!
//! let mut registry = Registry::<16>::new();
//! let pool_params = PoolParams::register(&mut registry, &TCP_POOL)?;
//! let config = pool_params.read(&registry, 32)?; // 32-byte header reserve
//! assert_eq!(config.eager.fragment_size, 64 * 1024 + 32);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::fmt;

use super::{FragmentPoolConfig, FragmentPoolsConfig, MAX_FRAGMENTS};
use crate::mca::{AccessError, ParamId, ParamKind, ParamName, ParamSpec, Params, RegisterError};

/// Largest fragment payload a size parameter accepts (64 MiB): larger
/// messages are split by the protocol, not carried in one fragment.
pub const MAX_FRAGMENT_PAYLOAD: u64 = 64 << 20;

const PAYLOAD: ParamKind = ParamKind::Size {
    min: 0,
    max: MAX_FRAGMENT_PAYLOAD,
};
const COUNT: ParamKind = ParamKind::Int {
    min: 1,
    max: MAX_FRAGMENTS as i64,
};

/// A component's default pool sizes, as parameter text.
#[derive(Clone, Copy, Debug)]
pub struct PoolDefaults {
    /// Payload of a small fragment (control packets, `sendi`, rdma descriptors).
    pub small_size: &'static str,
    /// Largest message sent eagerly; payload of an eager fragment.
    pub eager_limit: &'static str,
    /// Largest payload of one send fragment.
    pub max_send_size: &'static str,
    /// Fragments of each class ready at start.
    pub free_list_num: &'static str,
    /// Hard cap of fragments per class.
    pub free_list_max: &'static str,
    /// Batch in which more fragments are made ready.
    pub free_list_inc: &'static str,
}

impl PoolDefaults {
    /// Open MPI's TCP BTL sizes (64k eager, 128k max send, 8 ready, batches of
    /// 32), with a 256-fragment cap since btl's pools are bounded.
    pub const DEFAULT: PoolDefaults = PoolDefaults {
        small_size: "256",
        eager_limit: "64k",
        max_send_size: "128k",
        free_list_num: "8",
        free_list_max: "256",
        free_list_inc: "32",
    };
}

/// The six pool parameter specs of `component`, for a `static`.
pub const fn pool_param_specs(component: &'static str, d: PoolDefaults) -> [ParamSpec; 6] {
    [
        ParamSpec::new("btl", component, "small_size", PAYLOAD, d.small_size)
            .help("Payload bytes of a small fragment: control packets, immediate sends and rdma descriptors")
            .level(5),
        ParamSpec::new("btl", component, "eager_limit", PAYLOAD, d.eager_limit)
            .help("Largest message sent eagerly, without a rendezvous; sizes the eager fragments")
            .level(4),
        ParamSpec::new("btl", component, "max_send_size", PAYLOAD, d.max_send_size)
            .help("Largest payload of one send fragment; larger messages are pipelined")
            .level(4),
        ParamSpec::new("btl", component, "free_list_num", COUNT, d.free_list_num)
            .help("Fragments of each class made ready at start")
            .level(5),
        ParamSpec::new("btl", component, "free_list_max", COUNT, d.free_list_max)
            .help("Most fragments of each class; running out is an OutOfResource error, not an allocation")
            .level(5),
        ParamSpec::new("btl", component, "free_list_inc", COUNT, d.free_list_inc)
            .help("Fragments made ready at once when a class runs short")
            .level(6),
    ]
}

/// The pool parameters could not be read into a valid configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolParamsError {
    /// A parameter could not be read (wrong registry or kind).
    Access(AccessError),
    /// Two parameters contradict each other.
    Inconsistent {
        /// The parameter that is too large.
        larger: &'static ParamName,
        /// The parameter it may not exceed.
        limit: &'static ParamName,
    },
    /// A fragment size does not fit this machine's `usize`.
    TooLarge(&'static ParamName),
}

impl From<AccessError> for PoolParamsError {
    fn from(e: AccessError) -> Self {
        PoolParamsError::Access(e)
    }
}

impl fmt::Display for PoolParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolParamsError::Access(e) => e.fmt(f),
            PoolParamsError::Inconsistent { larger, limit } => {
                write!(f, "{larger} may not exceed {limit}")
            }
            PoolParamsError::TooLarge(name) => {
                write!(f, "{name} is too large for this machine")
            }
        }
    }
}

impl core::error::Error for PoolParamsError {}

/// Handles of one component's registered pool parameters.
#[derive(Clone, Copy, Debug)]
pub struct PoolParams {
    specs: &'static [ParamSpec; 6],
    ids: [ParamId; 6],
}

const SMALL: usize = 0;
const EAGER: usize = 1;
const MAX_SEND: usize = 2;
const NUM: usize = 3;
const MAX: usize = 4;
const INC: usize = 5;

impl PoolParams {
    /// Registers the specs made by [`pool_param_specs`].
    pub fn register(
        params: &mut dyn Params,
        specs: &'static [ParamSpec; 6],
    ) -> Result<Self, RegisterError> {
        let mut register = |i: usize| params.register(&specs[i]);
        let ids = [
            register(0)?,
            register(1)?,
            register(2)?,
            register(3)?,
            register(4)?,
            register(5)?,
        ];
        Ok(PoolParams { specs, ids })
    }

    /// The eager limit and the max send size, each where a source other
    /// than its default set it (a file, the environment, the code): the
    /// sizes a user chose, to be told of if something caps them.
    pub fn chosen_sizes(&self, params: &dyn Params) -> [Option<(ParamName, u64)>; 2] {
        [EAGER, MAX_SEND].map(|i| {
            let param = params.param(self.ids[i])?;
            if param.source == crate::mca::Source::Default {
                return None;
            }
            Some((self.specs[i].name, params.size(self.ids[i]).ok()?))
        })
    }

    /// The pools the parameters describe, each fragment holding
    /// `header_reserve` bytes in front of its class's payload.
    ///
    /// Requires small ≤ eager ≤ max send size and num ≤ max.
    pub fn read(
        &self,
        params: &dyn Params,
        header_reserve: usize,
    ) -> Result<FragmentPoolsConfig, PoolParamsError> {
        let size = |i: usize| params.size(self.ids[i]);
        let count = |i: usize| -> Result<u32, PoolParamsError> {
            // The kind bounds the value to 1..=MAX_FRAGMENTS.
            u32::try_from(params.int(self.ids[i])?).map_err(|_| self.too_large(i))
        };
        let (small, eager, max_send) = (size(SMALL)?, size(EAGER)?, size(MAX_SEND)?);
        self.ordered(small, SMALL, eager, EAGER)?;
        self.ordered(eager, EAGER, max_send, MAX_SEND)?;
        let (num, max, inc) = (count(NUM)?, count(MAX)?, count(INC)?);
        self.ordered(u64::from(num), NUM, u64::from(max), MAX)?;
        let class = |payload: u64, i: usize| -> Result<FragmentPoolConfig, PoolParamsError> {
            let fragment_size = usize::try_from(payload)
                .ok()
                .and_then(|p| p.checked_add(header_reserve))
                .ok_or(self.too_large(i))?;
            Ok(FragmentPoolConfig {
                fragment_size,
                num,
                max,
                inc,
            })
        };
        Ok(FragmentPoolsConfig {
            small: class(small, SMALL)?,
            eager: class(eager, EAGER)?,
            max: class(max_send, MAX_SEND)?,
        })
    }

    fn ordered(&self, a: u64, ia: usize, b: u64, ib: usize) -> Result<(), PoolParamsError> {
        if a > b {
            return Err(PoolParamsError::Inconsistent {
                larger: &self.specs[ia].name,
                limit: &self.specs[ib].name,
            });
        }
        Ok(())
    }

    fn too_large(&self, i: usize) -> PoolParamsError {
        PoolParamsError::TooLarge(&self.specs[i].name)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::mca::{Registry, Source};
    use crate::pool::FragmentPools;
    use std::string::ToString;
    use std::vec;

    static SPECS: [ParamSpec; 6] = pool_param_specs("demo", PoolDefaults::DEFAULT);

    fn setup() -> (Registry<8>, PoolParams) {
        let mut r = Registry::new();
        let p = PoolParams::register(&mut r, &SPECS).expect("register");
        (r, p)
    }

    #[test]
    fn defaults_give_open_mpi_sizes_plus_the_reserve() {
        let (r, p) = setup();
        let cfg = p.read(&r, 40).expect("valid");
        assert_eq!(cfg.small.fragment_size, 256 + 40);
        assert_eq!(cfg.eager.fragment_size, 65536 + 40);
        assert_eq!(cfg.max.fragment_size, 131072 + 40);
        assert_eq!((cfg.eager.num, cfg.eager.max, cfg.eager.inc), (8, 256, 32));
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn names_follow_the_convention() {
        let (r, _) = setup();
        for name in [
            "btl_demo_small_size",
            "btl_demo_eager_limit",
            "btl_demo_max_send_size",
            "btl_demo_free_list_num",
            "btl_demo_free_list_max",
            "btl_demo_free_list_inc",
        ] {
            assert!(r.find(name).is_some(), "{name}");
        }
    }

    #[test]
    fn set_values_size_the_pools() {
        let (mut r, p) = setup();
        r.set_by_name("btl_demo_eager_limit", "4k", Source::Environment)
            .expect("set");
        r.set_by_name("btl_demo_max_send_size", "8k", Source::Environment)
            .expect("set");
        r.set_by_name("btl_demo_free_list_max", "4", Source::Code)
            .expect("set");
        r.set_by_name("btl_demo_free_list_num", "2", Source::Code)
            .expect("set");
        let cfg = p.read(&r, 0).expect("valid");
        assert_eq!(cfg.eager.fragment_size, 4096);
        let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
        let pools = FragmentPools::new(&mut region, cfg).expect("pools");
        assert_eq!(
            pools.view().stats(crate::pool::FragmentClass::Max).capacity,
            4
        );
    }

    #[test]
    fn contradictions_name_both_parameters() {
        let (mut r, p) = setup();
        r.set_by_name("btl_demo_eager_limit", "1M", Source::Code)
            .expect("set");
        let err = p.read(&r, 0).expect_err("eager above max send");
        assert_eq!(
            err.to_string(),
            "btl_demo_eager_limit may not exceed btl_demo_max_send_size"
        );

        let (mut r, p) = setup();
        r.set_by_name("btl_demo_free_list_num", "300", Source::Code)
            .expect("set");
        let err = p.read(&r, 0).expect_err("num above max");
        assert_eq!(
            err.to_string(),
            "btl_demo_free_list_num may not exceed btl_demo_free_list_max"
        );
    }

    #[test]
    fn counts_are_bounded_by_the_kind() {
        let (mut r, _) = setup();
        assert!(
            r.set_by_name("btl_demo_free_list_max", "70000", Source::Code)
                .is_err()
        );
        assert!(
            r.set_by_name("btl_demo_free_list_inc", "0", Source::Code)
                .is_err()
        );
        assert!(
            r.set_by_name("btl_demo_eager_limit", "1G", Source::Code)
                .is_err()
        );
    }
}
