//! The TCP component (`btl_tcp_*`): its parameters, and modules that run
//! the engine in stream framing over TCP connections.

mod capture;
mod conn;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use btl_core::endpoint::ProcName;
use btl_core::engine::Capacities;
use btl_core::engine::config::EngineConfig;
use btl_core::mca::{
    BTL_FRAMEWORK, Component, Modules, NotAvailable, ParamKind, ParamSpec, Params, RegisterError,
    Version,
};
use btl_core::pool::{PoolDefaults, pool_param_specs};

pub use transport::{BytesRead, LOOKUP_TIMEOUT, NAME, Tcp};

use crate::bootstrap::Bootstrap;
use crate::capture::CaptureConfig;
use crate::config::socket_params::{
    CAPTURE_PARAMS, ENGINE_PARAMS, RecordConfig, Registered, SOCKET_PARAMS, SocketParams,
    capture_param_specs, engine_param_specs, socket_param_specs,
};
use crate::driver::directory::Directory;
use crate::driver::heap::Buffer;
use crate::driver::module::Module;
use crate::driver::net::{Congestion, Net, Os};
use crate::transports::Ports;
use crate::transports::interfaces::Selection;

/// A module of the TCP component over the operating system's sockets.
pub type TcpModule = Module<Tcp<Os>>;

/// The TCP component's pool parameters (`btl_tcp_eager_limit`, ...).
pub static TCP_POOL_PARAMS: [ParamSpec; 6] = pool_param_specs(
    NAME,
    PoolDefaults {
        small_size: "256",
        eager_limit: "64k",
        max_send_size: "256k",
        free_list_num: "16",
        free_list_max: "256",
        free_list_inc: "16",
    },
);

/// The engine parameters of the TCP component (`btl_tcp_peer_timeout`, ...).
pub static TCP_ENGINE_PARAMS: [ParamSpec; ENGINE_PARAMS] = engine_param_specs(NAME);

/// Where the TCP component listens (`btl_tcp_if_include`, ...).
pub static TCP_SOCKET_PARAMS: [ParamSpec; SOCKET_PARAMS] = socket_param_specs(NAME);

/// Where the TCP component captures its frames (`btl_tcp_capture`, ...).
pub static TCP_CAPTURE_PARAMS: [ParamSpec; CAPTURE_PARAMS] = capture_param_specs(NAME);

/// The TCP component's own parameters.
pub static TCP_PARAMS: [ParamSpec; 5] = [
    ParamSpec::new(BTL_FRAMEWORK, NAME, "links", ParamKind::Int { min: 1, max: 4 }, "1")
        .help("Connections per peer used in parallel: large puts are striped across them, and one carries on when another breaks")
        .level(4),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "sndbuf", ParamKind::Size { min: 0, max: 1 << 30 }, "0")
        .help("Socket send buffer; 0 leaves the kernel's autotuning, which a fixed size can halve on fast links")
        .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "rcvbuf", ParamKind::Size { min: 0, max: 1 << 30 }, "0")
        .help("Socket receive buffer; 0 leaves the kernel's autotuning")
        .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "link_timeout", ParamKind::Int { min: 0, max: 3_600_000 }, "10000")
        .help("Milliseconds a link's data may stay unacknowledged before the link is given up (TCP_USER_TIMEOUT); the peer's other links carry on; 0 leaves the kernel's")
        .level(5),
    ParamSpec::new(BTL_FRAMEWORK, NAME, "congestion", ParamKind::Str, "auto")
        .help("Congestion control (TCP_CONGESTION): `auto` is cubic for connections within the host, where bbr (some systems' default) paces transfers below what memory moves, and the system's between hosts; `system` keeps the kernel's default for all; a name (cubic, reno, bbr) is for all; one the kernel refuses keeps the system's, with a warning")
        .level(5),
];

/// What a TCP module is built with, read from the parameters.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Which local interfaces to use.
    pub selection: Selection,
    /// Where to listen.
    pub ports: Ports,
    /// Connections per peer.
    pub links: u8,
    /// Socket buffers, 0 for the kernel's autotuning.
    pub sndbuf: usize,
    /// See `sndbuf`.
    pub rcvbuf: usize,
    /// `TCP_USER_TIMEOUT`; zero leaves the kernel's.
    pub user_timeout: Duration,
    /// The connections' congestion control (by default CUBIC within the
    /// host, the system's between hosts; a name the kernel refuses leaves
    /// the system's).
    pub congestion: Congestion,
    /// How long a connect may take before it counts as failed.
    pub connect_timeout: Duration,
    /// How long `add_procs` waits for a peer's card.
    pub lookup_timeout: Duration,
    /// How long [`Module::wait`] spins before it blocks.
    pub spin: Duration,
    /// Where the module's frames are captured (`btl_tcp_capture`), if
    /// they are.
    pub capture: Option<CaptureConfig>,
    /// What the module's flight recorder keeps (`btl_tcp_record`), if
    /// anything.
    pub record: Option<RecordConfig>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            selection: Selection::default(),
            ports: Ports { min: 0, range: 100 },
            links: 1,
            sndbuf: 0,
            rcvbuf: 0,
            user_timeout: Duration::from_secs(10),
            congestion: Congestion::AUTO,
            connect_timeout: Duration::from_secs(5),
            lookup_timeout: LOOKUP_TIMEOUT,
            spin: Duration::from_micros(50),
            capture: None,
            record: None,
        }
    }
}

/// The TCP component.
#[derive(Debug, Default)]
pub struct TcpComponent {
    ids: Option<TcpIds>,
}

#[derive(Debug, Clone, Copy)]
struct TcpIds {
    socket: SocketParams,
    own: Registered<5>,
}

/// Everything a TCP module needs from the parameters; `build` adds the
/// process, its job key and the bootstrap.
#[derive(Debug, Clone)]
pub struct TcpSetup {
    /// Socket-level settings.
    pub tcp: TcpConfig,
    /// Fragment pools.
    pub pools: btl_core::pool::FragmentPoolsConfig,
    /// Engine timers and checks, without the process's name and key.
    pub engine: EngineConfig,
    /// The engine's tables (`btl_tcp_max_peers`).
    pub capacities: Capacities,
}

impl TcpSetup {
    /// A module for process `me` of a job whose key is `job_key`, listening
    /// as the setup says and publishing its card through `bootstrap`.
    pub fn build(
        &self,
        me: ProcName,
        job_key: Option<&[u8]>,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> std::io::Result<TcpModule> {
        self.build_on(Os, me, job_key, bootstrap)
    }

    /// [`build`](Self::build) over network `net`.
    pub fn build_on<N: Net, M: Buffer>(
        &self,
        net: N,
        me: ProcName,
        job_key: Option<&[u8]>,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> std::io::Result<Module<Tcp<N>, M>> {
        let mut config = self.engine.clone();
        config.me = me;
        config.job_key = crate::config::socket_params::job_key(job_key)?;
        config.links = self.tcp.links;
        let mut module = Module::open(
            NAME,
            config,
            self.pools,
            self.capacities,
            self.tcp.spin,
            net,
            Directory::new(me, NAME, bootstrap, self.tcp.lookup_timeout),
            |net, registry, directory| {
                Tcp::start(me, self.tcp.clone(), directory.bootstrap(), net, registry)
            },
        )?;
        if let Some(record) = &self.tcp.record {
            module
                .start_recording(record.limit, record.dir.clone())
                .map_err(std::io::Error::other)?;
        }
        Ok(module)
    }
}

impl Component for TcpComponent {
    type Module = TcpSetup;

    btl_core::btl_component_identity!(NAME, Version::new(0, 1, 0));

    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
        self.ids = Some(TcpIds {
            socket: SocketParams::register(
                params,
                &TCP_SOCKET_PARAMS,
                &TCP_POOL_PARAMS,
                &TCP_ENGINE_PARAMS,
                &TCP_CAPTURE_PARAMS,
            )?,
            own: Registered::register(params, &TCP_PARAMS)?,
        });
        Ok(())
    }

    fn init(&mut self, params: &dyn Params) -> Result<Modules<TcpSetup>, NotAvailable> {
        let ids = self
            .ids
            .ok_or(NotAvailable::new("parameters were not registered"))?;
        let na = |what: &dyn std::fmt::Display| NotAvailable::from_args(format_args!("{what}"));
        let settings = ids.socket.read(params).map_err(|e| na(&e))?;
        let int = |name| params.int(ids.own.id(name)).map_err(|e| na(&e));
        let size = |name| params.size(ids.own.id(name)).map_err(|e| na(&e));
        let tcp = TcpConfig {
            selection: settings.selection,
            ports: settings.ports,
            lookup_timeout: settings.lookup_timeout,
            capture: settings.capture,
            record: settings.record,
            links: u8::try_from(int("links")?).unwrap_or(1),
            sndbuf: usize::try_from(size("sndbuf")?).unwrap_or(0),
            rcvbuf: usize::try_from(size("rcvbuf")?).unwrap_or(0),
            user_timeout: Duration::from_millis(u64::try_from(int("link_timeout")?).unwrap_or(0)),
            congestion: congestion(params.str(ids.own.id("congestion")).map_err(|e| na(&e))?)
                .map_err(|e| na(&e))?,
            ..TcpConfig::default()
        };
        let (pools, engine, capacities) = (settings.pools, settings.engine, settings.capacities);
        let mut modules = Modules::new();
        let _ = modules.push(TcpSetup {
            tcp,
            pools,
            engine,
            capacities,
        });
        Ok(modules)
    }
}

/// The congestion control `btl_tcp_congestion` names, if this kernel gives
/// it; the system's, with a warning, if not (a default must not keep a
/// module from opening). A name that is no name is an error.
fn congestion(value: &str) -> Result<Congestion, String> {
    let wanted = Congestion::parse(value).map_err(|e| format!("btl_tcp_congestion: {e}"))?;
    match wanted.check() {
        Ok(()) => Ok(wanted),
        // The default asks nothing of the user: a system without the
        // algorithm (or without TCP_CONGESTION) keeps its own quietly.
        Err(error) if wanted == Congestion::AUTO => {
            tracing::debug!("btl_tcp_congestion=auto: {error}; connections keep the system's");
            Ok(Congestion::SYSTEM)
        }
        Err(error) => {
            tracing::warn!(
                "btl_tcp_congestion={wanted}: the kernel refuses {} ({error}); connections keep the system's (net.ipv4.tcp_congestion_control); set btl_tcp_congestion=system to say so",
                wanted.name().unwrap_or("it")
            );
            Ok(Congestion::SYSTEM)
        }
    }
}
