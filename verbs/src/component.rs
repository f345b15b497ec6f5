//! The `verbs` component as the MCA sees it: its parameters, and whether
//! it can run here.
//!
//! Its parameters size the transport's queue pairs and buffers and set
//! their timers (openib's `ib_timeout`, `ib_retry_count`, `ib_rnr_retry`,
//! `ib_min_rnr_timer`, `ib_max_rdma_dst_ops`), choose the device and port,
//! and choose the CPC. [`probe`] says why the component cannot run: a
//! build without the `rdma` feature, no RDMA device (as on a kernel
//! without InfiniBand or soft-RoCE, where listing devices fails with
//! `ENOSYS`), a port that is not active, or no CPC that serves it.

use btl_core::engine::HEADER_RESERVE;
use btl_core::mca::{
    AccessError, BTL_FRAMEWORK, BTL_FRAMEWORK_VERSION, Component, Modules, NotAvailable, ParamId,
    ParamKind, ParamSpec, Params, RegisterError, Version,
};
use btl_core::pool::{FragmentPoolsConfig, PoolDefaults, PoolParams, pool_param_specs};
use btl_core::time::Duration;

use crate::cpc::{self, OobConfig, QpTuning};
use crate::provider::{AckTimeout, RnrTimer};
use crate::transport::VerbsConfig;

/// The component's name.
pub const NAME: &str = "verbs";
/// The component's own version.
pub const VERSION: Version = Version::new(0, 1, 0);
/// The framework interface it implements.
pub const FRAMEWORK_VERSION: Version = BTL_FRAMEWORK_VERSION;

const fn int(min: i64, max: i64) -> ParamKind {
    ParamKind::Int { min, max }
}

/// The component's own parameters (the CPCs register theirs too).
pub const PARAMS: [ParamSpec; 12] = [
    ParamSpec::new(BTL_FRAMEWORK, NAME, "device", ParamKind::Str, "")
        .help("The RDMA device to use (`mlx5_0`); empty: the first one listed")
        .level(2),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "port", int(1, 255), "1")
        .help("The device's port to use")
        .level(2),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "max_peers", int(1, 65_536), "64")
        .help("Most queue pairs at once, one per peer (and per connection being made)")
        .level(4),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "recv_buffers", int(1, 16_384), "16")
        .help("Receives posted on each queue pair")
        .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "send_buffers", int(1, 16_384), "16")
        .help("Sends outstanding on each queue pair")
        .level(5),
    ParamSpec::new(
        BTL_FRAMEWORK,
        NAME,
        "buffer_size",
        ParamKind::Size {
            min: 256,
            max: 1 << 30,
        },
        "16k",
    )
    .help("Bytes of each send and receive buffer: the most one SEND carries")
    .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "rdma_depth", int(1, 16_384), "16")
        .help("RDMA writes and reads (puts and gets) outstanding on each queue pair")
        .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "ib_timeout", int(0, 31), "20")
        .help(
            "Local ACK timeout, 4.096 us times 2 to this power (0: none); a request goes \
             again after it",
        )
        .level(6),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "ib_retry_count", int(0, 7), "7")
        .help("Retries of a request no acknowledgement answered, before its queue pair fails")
        .level(6),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "ib_rnr_retry", int(0, 7), "7")
        .help("Retries of a send the peer had no receive for (7: without end)")
        .level(6),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "ib_min_rnr_timer", int(0, 31), "20")
        .help("How long a peer waits before it sends again into no receive (the IB code; 20 is 10.24 ms)")
        .level(6),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "ib_max_rdma_dst_ops", int(0, 255), "4")
        .help("RDMA reads outstanding at once, each way")
        .level(6),
];

/// The component's fragment pool parameters: Open MPI's names
/// (`btl_verbs_eager_limit`, `btl_verbs_max_send_size`, ...) and the TCP
/// BTL's sizes.
pub static POOL_PARAMS: [ParamSpec; 6] = pool_param_specs(NAME, PoolDefaults::DEFAULT);

/// The ids of the component's parameters in a registry.
#[derive(Debug, Clone)]
pub struct VerbsParams {
    /// Of [`PARAMS`], in order.
    ids: Vec<ParamId>,
    /// Of [`POOL_PARAMS`].
    pools: PoolParams,
    /// `btl_verbs_cpc`: the CPCs to use.
    pub cpc: ParamId,
    /// `btl_verbs_cpc_oob_timeout`.
    pub oob_timeout: ParamId,
}

/// Registers the component's parameters and its CPCs'.
pub fn register(params: &mut dyn Params) -> Result<VerbsParams, RegisterError> {
    let ids = PARAMS
        .iter()
        .map(|spec| params.register(spec))
        .collect::<Result<Vec<_>, _>>()?;
    let pools = PoolParams::register(params, &POOL_PARAMS)?;
    let cpc = params.register(&cpc::CPC_PARAM)?;
    let oob_timeout = params.register(&cpc::OOB_TIMEOUT_PARAM)?;
    Ok(VerbsParams {
        ids,
        pools,
        cpc,
        oob_timeout,
    })
}

impl VerbsParams {
    fn id(&self, name: &str) -> ParamId {
        let i = PARAMS
            .iter()
            .position(|p| p.name.name == name)
            .expect("one of PARAMS");
        self.ids[i]
    }

    fn int(&self, params: &dyn Params, name: &str) -> Result<i64, AccessError> {
        params.int(self.id(name))
    }

    /// The device asked for, if one is.
    pub fn device(&self, params: &dyn Params) -> Result<Option<String>, AccessError> {
        let name = params.str(self.id("device"))?;
        Ok((!name.is_empty()).then(|| name.to_owned()))
    }

    /// The transport's configuration from the parameters' values.
    pub fn config(&self, params: &dyn Params) -> Result<VerbsConfig, AccessError> {
        // Every value is within its parameter's bounds, which fit.
        let small = |v: i64| u8::try_from(v).unwrap_or(u8::MAX);
        let count = |v: i64| usize::try_from(v).unwrap_or(1);
        Ok(VerbsConfig {
            port: small(self.int(params, "port")?),
            max_peers: count(self.int(params, "max_peers")?),
            recv_buffers: count(self.int(params, "recv_buffers")?),
            send_buffers: count(self.int(params, "send_buffers")?),
            buffer_size: usize::try_from(params.size(self.id("buffer_size"))?)
                .unwrap_or(usize::MAX),
            rdma_depth: count(self.int(params, "rdma_depth")?),
            tuning: QpTuning {
                ack_timeout: AckTimeout(small(self.int(params, "ib_timeout")?)),
                retry_cnt: small(self.int(params, "ib_retry_count")?),
                rnr_retry: small(self.int(params, "ib_rnr_retry")?),
                min_rnr_timer: RnrTimer(small(self.int(params, "ib_min_rnr_timer")?)),
                max_rd_atomic: small(self.int(params, "ib_max_rdma_dst_ops")?),
            },
        })
    }
}

/// What the component's modules are made with: the device and port it
/// found, and the parameters' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsFound {
    /// The device and port.
    pub found: Found,
    /// Queue pairs, buffers and their timers.
    pub config: VerbsConfig,
    /// The `oob` CPC's timeout and bound.
    pub oob: OobConfig,
    /// The engine's fragment pools.
    pub pools: FragmentPoolsConfig,
}

/// The `verbs` component as the MCA drives it: its parameters, then, if
/// a device and a CPC serve, what its module is made with
/// ([`VerbsFound`]; `open` makes the module of a real HCA, with the
/// feature `rdma`).
#[derive(Debug, Default)]
pub struct VerbsComponent {
    ids: Option<VerbsParams>,
}

impl Component for VerbsComponent {
    type Module = VerbsFound;

    btl_core::btl_component_identity!(NAME, VERSION);

    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
        self.ids = Some(register(params)?);
        Ok(())
    }

    fn init(&mut self, params: &dyn Params) -> Result<Modules<VerbsFound>, NotAvailable> {
        let ids = self
            .ids
            .as_ref()
            .ok_or(NotAvailable::new("its parameters were not registered"))?;
        let found = probe(params, ids)?;
        let unreadable = |e: &dyn std::fmt::Display| NotAvailable::from_args(format_args!("{e}"));
        let config = ids.config(params).map_err(|e| unreadable(&e))?;
        let millis = params.int(ids.oob_timeout).map_err(|e| unreadable(&e))?;
        let oob = OobConfig {
            timeout: Duration::from_millis(u64::try_from(millis).unwrap_or(1)),
            max_peers: config.max_peers,
        };
        let pools = ids
            .pools
            .read(params, HEADER_RESERVE)
            .map_err(|e| unreadable(&format_args!("{e:?}")))?;
        let mut modules = Modules::new();
        let _ = modules.push(VerbsFound {
            found,
            config,
            oob,
            pools,
        });
        Ok(modules)
    }
}

/// What the component found to run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The device's name.
    pub device: String,
    /// The port.
    pub port: u8,
}

/// Whether the component can run here with the parameters' values, and on
/// what; why not if it cannot.
pub fn probe(params: &dyn Params, ids: &VerbsParams) -> Result<Found, NotAvailable> {
    let unreadable = |_| NotAvailable::new("its parameters are unreadable");
    let device = ids.device(params).map_err(unreadable)?;
    let config = ids.config(params).map_err(unreadable)?;
    let cpcs = params.list(ids.cpc).map_err(unreadable)?;
    probe_devices(device.as_deref(), config.port, cpcs)
}

#[cfg(not(feature = "rdma"))]
fn probe_devices(
    _device: Option<&str>,
    _port: u8,
    _request: &btl_core::mca::ListValue,
) -> Result<Found, NotAvailable> {
    Err(NotAvailable::new(
        "this build has no RDMA support (btl-verbs' feature `rdma`)",
    ))
}

#[cfg(feature = "rdma")]
fn probe_devices(
    device: Option<&str>,
    port: u8,
    request: &btl_core::mca::ListValue,
) -> Result<Found, NotAvailable> {
    use crate::provider::Provider;
    use crate::rdma::RdmaProvider;

    let why = |e: crate::provider::VerbsError| NotAvailable::from_args(format_args!("{e}"));
    let provider = RdmaProvider::open(device).map_err(why)?;
    let attr = provider.device();
    let port_attr = provider.port(port).map_err(why)?;
    let cpcs: Vec<Box<dyn cpc::Cpc<crate::transport::Host<RdmaProvider>>>> =
        vec![Box::new(cpc::Oob::new(cpc::OobConfig::default()))];
    cpc::select_for(&cpcs, request, &attr, &port_attr)
        .map_err(|e| NotAvailable::from_args(format_args!("{e}")))?;
    Ok(Found {
        device: attr.name,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use btl_core::mca::{Registry, Source};

    #[test]
    fn the_defaults_are_the_transports_defaults() {
        let mut params = Registry::<32>::new();
        let ids = register(&mut params).expect("register");
        assert_eq!(ids.config(&params), Ok(VerbsConfig::default()));
        assert_eq!(ids.device(&params), Ok(None));
        for name in [
            "btl_verbs_port",
            "btl_verbs_cpc",
            "btl_verbs_cpc_oob_timeout",
        ] {
            assert!(params.find(name).is_some(), "{name}");
        }
    }

    #[test]
    fn values_set_reach_the_configuration() {
        let mut params = Registry::<32>::new();
        let ids = register(&mut params).expect("register");
        for (name, value) in [
            ("btl_verbs_device", "mlx5_1"),
            ("btl_verbs_recv_buffers", "64"),
            ("btl_verbs_buffer_size", "64k"),
            ("btl_verbs_ib_rnr_retry", "3"),
            ("btl_verbs_ib_timeout", "14"),
        ] {
            let id = params.find(name).expect("registered");
            params.set(id, value, Source::Environment).expect(name);
        }
        let c = ids.config(&params).expect("config");
        assert_eq!((c.recv_buffers, c.buffer_size), (64, 64 << 10));
        assert_eq!(
            (c.tuning.rnr_retry, c.tuning.ack_timeout),
            (3, AckTimeout(14))
        );
        assert_eq!(ids.device(&params), Ok(Some("mlx5_1".to_owned())));
        let bad = params.find("btl_verbs_ib_retry_count").expect("registered");
        assert!(params.set(bad, "8", Source::Environment).is_err(), "3 bits");
    }

    #[test]
    fn the_probe_says_why_it_cannot_run() {
        let mut params = Registry::<32>::new();
        let ids = register(&mut params).expect("register");
        match probe(&params, &ids) {
            Err(why) => assert!(!why.reason().is_empty()),
            // A machine with an RDMA device and a build with the feature.
            Ok(found) => assert!(!found.device.is_empty()),
        }
        #[cfg(not(feature = "rdma"))]
        assert!(
            probe(&params, &ids).is_err_and(|why| why.reason().contains("feature `rdma`")),
            "a build without the feature says so"
        );
    }

    #[test]
    fn the_component_opens_what_the_probe_finds_with_its_pools() {
        let mut params = Registry::<32>::new();
        let mut component = VerbsComponent::default();
        assert!(component.init(&params).is_err(), "not registered yet");
        component.register(&mut params).expect("register");
        let eager = params
            .find("btl_verbs_eager_limit")
            .expect("a pool parameter");
        params
            .set(eager, "16k", Source::Environment)
            .expect("a size");
        let ids = register(&mut Registry::<32>::new()).expect("register");
        match component.init(&params) {
            Ok(modules) => {
                let found = &modules[0];
                assert_eq!(found.config.rdma_depth, 16);
                assert_eq!(found.oob.timeout, Duration::from_secs(10));
                assert!(found.pools.eager.fragment_size >= 16 << 10);
            }
            Err(why) => assert_eq!(
                Some(why.reason().to_owned()),
                probe(&params, &ids).err().map(|w| w.reason().to_owned()),
                "the probe's reason"
            ),
        }
    }
}
