//! Engine parameters shared by the socket components: the same four timers
//! and checks under each component's name (`btl_tcp_peer_timeout`,
//! `btl_udp_peer_timeout`), since a job may want UDP's to differ.

use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::mca::{
    AccessError, BTL_FRAMEWORK, ParamId, ParamKind, ParamSpec, Params, RegisterError,
};

const MILLIS: ParamKind = ParamKind::Int {
    min: 0,
    max: 86_400_000,
};

/// The engine parameters of `component`.
pub const fn engine_param_specs(component: &'static str) -> [ParamSpec; 4] {
    [
        ParamSpec::new(BTL_FRAMEWORK, component, "peer_timeout", MILLIS, "30000")
            .help("Milliseconds a peer may stay silent (while reconnecting, or with work outstanding) before it counts as lost and its operations fail")
            .level(3),
        ParamSpec::new(BTL_FRAMEWORK, component, "keepalive", MILLIS, "10000")
            .help("Milliseconds of silence after which an idle peer is asked for a sign of life (at most a third of peer_timeout); 0 turns keepalives off")
            .level(4),
        ParamSpec::new(BTL_FRAMEWORK, component, "handshake_timeout", MILLIS, "5000")
            .help("Milliseconds a connection's handshake may take")
            .level(5),
        ParamSpec::new(BTL_FRAMEWORK, component, "checksum", ParamKind::Bool, "false")
            .help("Ask peers for CRC32C trailers on every packet (used when both ask); TCP already checks its bytes, so this guards against bugs and bad memory")
            .level(4),
    ]
}

/// The registered engine parameters of one component.
#[derive(Debug, Clone, Copy)]
pub struct EngineParams {
    ids: [ParamId; 4],
}

impl EngineParams {
    /// Registers `specs`, made by [`engine_param_specs`].
    pub fn register(
        params: &mut dyn Params,
        specs: &'static [ParamSpec; 4],
    ) -> Result<Self, RegisterError> {
        Ok(EngineParams {
            ids: register_specs(params, specs)?,
        })
    }

    /// An engine configuration with these values; the process name is a
    /// placeholder that the module sets.
    pub fn read(&self, params: &dyn Params) -> Result<EngineConfig, AccessError> {
        let ms = |i: usize| -> Result<u64, AccessError> {
            Ok(u64::try_from(params.int(self.ids[i])?).unwrap_or(0) * 1_000_000)
        };
        let mut config = EngineConfig::new(ProcName::new(0, 0));
        config.peer_timeout = ms(0)?;
        config.keepalive = ms(1)?;
        config.handshake_timeout = ms(2)?;
        config.checksum = params.bool(self.ids[3])?;
        Ok(config)
    }
}

/// Registers every spec of `specs`, in order.
pub fn register_specs<const N: usize>(
    params: &mut dyn Params,
    specs: &'static [ParamSpec; N],
) -> Result<[ParamId; N], RegisterError> {
    let mut ids = Vec::with_capacity(N);
    for spec in specs {
        ids.push(params.register(spec)?);
    }
    // N specs gave N ids.
    Ok(ids
        .try_into()
        .unwrap_or_else(|_| unreachable!("one id per spec")))
}

/// A job key as the engine keeps it, or why it cannot be one.
pub fn job_key(
    key: Option<&[u8]>,
) -> std::io::Result<Option<heapless::Vec<u8, { btl_core::engine::config::MAX_KEY_LEN }>>> {
    key.map(|k| {
        heapless::Vec::from_slice(k).map_err(|_| {
            std::io::Error::other(format!(
                "job key longer than {} bytes",
                btl_core::engine::config::MAX_KEY_LEN
            ))
        })
    })
    .transpose()
}
