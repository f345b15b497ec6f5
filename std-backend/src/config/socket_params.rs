//! Parameters every socket component has, under its own name: where it
//! listens (`btl_tcp_if_include`, `btl_udp_port_min`, ...), the engine's
//! timers and checks (`btl_tcp_peer_timeout`, ...), since a job may want
//! UDP's to differ from TCP's, and where it captures its frames
//! (`btl_tcp_capture`, ...).

use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, HEADER_RESERVE};
use btl_core::mca::{
    AccessError, BTL_FRAMEWORK, ParamId, ParamKind, ParamName, ParamSpec, Params, RegisterError,
};
use btl_core::pool::{FragmentPoolsConfig, PoolParams};
use btl_core::time::Duration;
use btl_core::wire::MAX_PREFIX_LEN;

use crate::capture::CaptureConfig;
use crate::transports::Ports;
use crate::transports::interfaces::Selection;

/// Parameters [`socket_param_specs`] makes.
pub const SOCKET_PARAMS: usize = 5;
/// Parameters [`engine_param_specs`] makes.
pub const ENGINE_PARAMS: usize = 10;
/// Parameters [`capture_param_specs`] makes.
pub const CAPTURE_PARAMS: usize = 6;

/// Where `component` listens (interfaces and ports), and how long it looks
/// for a peer's address.
pub const fn socket_param_specs(component: &'static str) -> [ParamSpec; SOCKET_PARAMS] {
    const PORT: ParamKind = ParamKind::Int { min: 0, max: 65535 };
    [
        ParamSpec::new(BTL_FRAMEWORK, component, "if_include", ParamKind::List, "")
            .help("Interfaces to use, by name (eth0, ib*) or subnet (10.1.0.0/16); exclusive with if_exclude")
            .level(1),
        ParamSpec::new(BTL_FRAMEWORK, component, "if_exclude", ParamKind::List, "")
            .help("Interfaces not to use; with neither list set, loopback and virtual bridges (docker*, virbr*, veth*) are left out unless nothing else is up")
            .level(1),
        ParamSpec::new(BTL_FRAMEWORK, component, "port_min", PORT, "0")
            .help("Lowest port to listen on; 0 takes any free port (firewalled sites set a range)")
            .level(2),
        ParamSpec::new(BTL_FRAMEWORK, component, "port_range", ParamKind::Int { min: 1, max: 65535 }, "100")
            .help("Ports tried from port_min on")
            .level(2),
        ParamSpec::new(BTL_FRAMEWORK, component, "lookup_timeout", MILLIS, "30000")
            .help("Milliseconds add_procs waits for a peer's card (its addresses) to be published before it counts the peer unreachable")
            .level(3),
    ]
}

/// Where `component` captures the frames it sends and receives, for
/// Wireshark (off unless `capture` names a path), and how much of its
/// engine's input its flight recorder keeps (off unless `record` is set).
pub const fn capture_param_specs(component: &'static str) -> [ParamSpec; CAPTURE_PARAMS] {
    [
        ParamSpec::new(BTL_FRAMEWORK, component, "capture", ParamKind::Str, "")
            .help("Captures every frame the module sends and receives to pcapng files at this path, for Wireshark or tshark with the repository's wireshark/btl.lua: `dir/btl.pcapng` writes dir/btl.0.pcapng, dir/btl.1.pcapng, ... (a ring: see capture_files), one interface per link, no privileges needed; `{job}` and `{rank}` in the path become the process's, so the processes of a job write apart. Empty captures nothing. A file that cannot be created keeps the module from opening")
            .level(3),
        ParamSpec::new(BTL_FRAMEWORK, component, "capture_file_size", ParamKind::Size { min: 4 << 10, max: 1 << 40 }, "64M")
            .help("Bytes a capture file holds before the next one is started; each file is readable alone")
            .level(4),
        ParamSpec::new(BTL_FRAMEWORK, component, "capture_files", ParamKind::Int { min: 1, max: 1000 }, "4")
            .help("Capture files kept: starting one more deletes the oldest, so a capture takes at most capture_files times capture_file_size of disk, however long the module runs")
            .level(4),
        ParamSpec::new(BTL_FRAMEWORK, component, "capture_snaplen", ParamKind::Size { min: MAX_PREFIX_LEN as u64, max: 1 << 20 }, "256")
            .help("Bytes kept of each frame: at least the header and the longest fixed body (96), so that every field shows; of a larger payload only the start is kept and the frame's length recorded, which keeps captures small and data out of them")
            .level(4),
        ParamSpec::new(BTL_FRAMEWORK, component, "record", ParamKind::Size { min: 0, max: 1 << 40 }, "0")
            .help("Keeps up to this many bytes of what the module's engine takes in (bytes from links, the time, the calls made to it) from its start, and writes them with how the engine was made to a file in record_dir when a peer is lost for a reason other than a clean close (4 times at most): `btl replay FILE` feeds it to a fresh engine and says whether it did the same. 0 keeps nothing. The memory is taken, all of it, as the module starts, so that recording never waits for the system's pages. A record holds messages' bytes and the job key: it is written readable by its owner only")
            .level(3),
        ParamSpec::new(BTL_FRAMEWORK, component, "record_dir", ParamKind::Str, "")
            .help("Where flight records are written (see record); empty: the system's temporary directory")
            .level(4),
    ]
}

/// The parameters every socket component has, registered: where it
/// listens, its pools, its engine and its capture.
#[derive(Debug, Clone, Copy)]
pub struct SocketParams {
    socket: Registered<SOCKET_PARAMS>,
    pools: PoolParams,
    engine: EngineParams,
    capture: Registered<CAPTURE_PARAMS>,
}

/// What [`SocketParams`] read.
#[derive(Debug, Clone)]
pub struct SocketSettings {
    /// Which local interfaces to use.
    pub selection: Selection,
    /// Where to listen.
    pub ports: Ports,
    /// How long `add_procs` waits for a peer's card.
    pub lookup_timeout: std::time::Duration,
    /// The fragment pools.
    pub pools: FragmentPoolsConfig,
    /// The eager limit and max send size where a user set them.
    pub chosen_sizes: [Option<(ParamName, u64)>; 2],
    /// Engine timers and checks.
    pub engine: EngineConfig,
    /// How many peers, links, operations and events the engine holds.
    pub capacities: Capacities,
    /// Where its frames are captured, if they are.
    pub capture: Option<CaptureConfig>,
    /// What its flight recorder keeps, if anything.
    pub record: Option<RecordConfig>,
}

/// A module's flight recorder as its parameters set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordConfig {
    /// Bytes of journal kept at most.
    pub limit: usize,
    /// Where records are written.
    pub dir: std::path::PathBuf,
}

impl SocketParams {
    /// Registers one component's specs, made by [`socket_param_specs`],
    /// `pool_param_specs`, [`engine_param_specs`] and
    /// [`capture_param_specs`].
    pub fn register(
        params: &mut dyn Params,
        socket: &'static [ParamSpec; SOCKET_PARAMS],
        pools: &'static [ParamSpec; 6],
        engine: &'static [ParamSpec; ENGINE_PARAMS],
        capture: &'static [ParamSpec; CAPTURE_PARAMS],
    ) -> Result<Self, RegisterError> {
        Ok(SocketParams {
            socket: Registered::register(params, socket)?,
            pools: PoolParams::register(params, pools)?,
            engine: EngineParams::register(params, engine)?,
            capture: Registered::register(params, capture)?,
        })
    }

    /// The values, or what is wrong with them, in words.
    pub fn read(&self, params: &dyn Params) -> Result<SocketSettings, String> {
        let socket = &self.socket;
        let list = |name| -> Result<String, String> {
            params
                .list(socket.id(name))
                .map(|l| l.as_str().to_string())
                .map_err(|e| e.to_string())
        };
        let port = |name| -> Result<u16, String> {
            let v = params.int(socket.id(name)).map_err(|e| e.to_string())?;
            u16::try_from(v).map_err(|_| format!("port {v} out of range"))
        };
        let lookup_ms = params
            .int(socket.id("lookup_timeout"))
            .map_err(|e| e.to_string())?;
        Ok(SocketSettings {
            selection: Selection::new(&list("if_include")?, &list("if_exclude")?)
                .map_err(|e| e.to_string())?,
            ports: Ports {
                min: port("port_min")?,
                range: port("port_range")?,
            },
            lookup_timeout: std::time::Duration::from_millis(lookup_ms.max(0) as u64),
            pools: self
                .pools
                .read(params, HEADER_RESERVE)
                .map_err(|e| format!("{e:?}"))?,
            chosen_sizes: self.pools.chosen_sizes(params),
            engine: self.engine.read(params).map_err(|e| e.to_string())?,
            capacities: self.engine.capacities(params).map_err(|e| e.to_string())?,
            capture: self.capture(params)?,
            record: self.record(params)?,
        })
    }

    /// The flight recorder the parameters ask for: none while `record` is
    /// 0.
    fn record(&self, params: &dyn Params) -> Result<Option<RecordConfig>, String> {
        let ids = &self.capture;
        let limit = params.size(ids.id("record")).map_err(|e| e.to_string())?;
        if limit == 0 {
            return Ok(None);
        }
        let dir = params
            .str(ids.id("record_dir"))
            .map_err(|e| e.to_string())?;
        Ok(Some(RecordConfig {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            dir: if dir.trim().is_empty() {
                std::env::temp_dir()
            } else {
                dir.into()
            },
        }))
    }

    /// The capture the parameters ask for: none while the path is empty.
    fn capture(&self, params: &dyn Params) -> Result<Option<CaptureConfig>, String> {
        let ids = &self.capture;
        let path = params.str(ids.id("capture")).map_err(|e| e.to_string())?;
        if path.trim().is_empty() {
            return Ok(None);
        }
        let size = |name| params.size(ids.id(name)).map_err(|e| e.to_string());
        let files = params
            .int(ids.id("capture_files"))
            .map_err(|e| e.to_string())?;
        Ok(Some(CaptureConfig {
            path: path.into(),
            file_bytes: size("capture_file_size")?,
            files: u32::try_from(files).unwrap_or(1),
            snaplen: u32::try_from(size("capture_snaplen")?).unwrap_or(u32::MAX),
        }))
    }
}

const MILLIS: ParamKind = ParamKind::Int {
    min: 0,
    max: 86_400_000,
};

/// A percentage.
const PERCENT: ParamKind = ParamKind::Int { min: 1, max: 100 };

/// The engine parameters of `component`.
pub const fn engine_param_specs(component: &'static str) -> [ParamSpec; ENGINE_PARAMS] {
    const COUNT: ParamKind = ParamKind::Int { min: 1, max: 65535 };
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
        ParamSpec::new(BTL_FRAMEWORK, component, "refused_timeout", MILLIS, "250")
            .help("Milliseconds a peer whose host refuses every reconnection (nothing listens: its process died) is tried before it counts as lost (PeerLost(Refused)); other failures are retried until peer_timeout")
            .level(4),
        ParamSpec::new(BTL_FRAMEWORK, component, "handshake_budget", COUNT, "32")
            .help("Connections (UDP: new source addresses) in their handshake at once; beyond it the oldest is dropped, silent ones first, never a verified peer's")
            .level(5),
        ParamSpec::new(BTL_FRAMEWORK, component, "handshake_budget_per_source", COUNT, "8")
            .help("As handshake_budget, from one IP address (an IPv6 /64)")
            .level(5),
        ParamSpec::new(BTL_FRAMEWORK, component, "linger", MILLIS, "1000")
            .help("Milliseconds finalize (and dropping a module) waits for what was sent to be acknowledged before it closes; what is left is reported, not lost in silence. 0 closes at once")
            .level(4),
        ParamSpec::new(BTL_FRAMEWORK, component, "source_share", PERCENT, "10")
            .help("Without a job key, the percentage of the peer and link slots that the peers and connections from one IP address (an IPv6 /64) may hold; 100: no bound. With a key, peers proved they belong to the job and are not held to it")
            .level(5),
        ParamSpec::new(BTL_FRAMEWORK, component, "max_peers", ParamKind::Int { min: 1, max: 16384 }, "64")
            .help("Peers the module keeps at once (and twice as many connections), allocated when it opens: about 31 KiB each with the default window. A peer beyond it is refused (PeerLost(NoRoom) at its end)")
            .level(3),
    ]
}

/// The registered engine parameters of one component.
#[derive(Debug, Clone, Copy)]
pub struct EngineParams {
    ids: Registered<ENGINE_PARAMS>,
}

impl EngineParams {
    /// Registers `specs`, made by [`engine_param_specs`].
    pub fn register(
        params: &mut dyn Params,
        specs: &'static [ParamSpec; ENGINE_PARAMS],
    ) -> Result<Self, RegisterError> {
        Ok(EngineParams {
            ids: Registered::register(params, specs)?,
        })
    }

    /// The engine's tables for `max_peers` peers
    /// ([`Capacities::for_peers`]).
    pub fn capacities(&self, params: &dyn Params) -> Result<Capacities, AccessError> {
        let peers = params.int(self.ids.id("max_peers"))?;
        Ok(Capacities::for_peers(usize::try_from(peers).unwrap_or(64)))
    }

    /// An engine configuration with these values; the process name is a
    /// placeholder that the module sets.
    pub fn read(&self, params: &dyn Params) -> Result<EngineConfig, AccessError> {
        let ids = &self.ids;
        let ms = |name| -> Result<Duration, AccessError> {
            Ok(Duration::from_millis(
                u64::try_from(params.int(ids.id(name))?).unwrap_or(0),
            ))
        };
        let count = |name| -> Result<u16, AccessError> {
            Ok(u16::try_from(params.int(ids.id(name))?).unwrap_or(u16::MAX))
        };
        let mut config = EngineConfig::new(ProcName::new(0, 0));
        config.peer_timeout = ms("peer_timeout")?;
        config.keepalive = ms("keepalive")?;
        config.handshake_timeout = ms("handshake_timeout")?;
        config.checksum = params.bool(ids.id("checksum"))?;
        config.refused_timeout = ms("refused_timeout")?;
        config.linger = ms("linger")?;
        config.handshake_budget = count("handshake_budget")?;
        config.handshake_budget_per_source = count("handshake_budget_per_source")?;
        config.source_share = u8::try_from(params.int(ids.id("source_share"))?).unwrap_or(100);
        Ok(config)
    }
}

/// A component's specs, registered: their handles, taken by the specs'
/// short names (`peer_timeout`), so that what is read never depends on
/// where a spec stands in its table.
#[derive(Debug, Clone, Copy)]
pub struct Registered<const N: usize> {
    specs: &'static [ParamSpec; N],
    ids: [ParamId; N],
}

impl<const N: usize> Registered<N> {
    /// Registers every spec of `specs`.
    pub fn register(
        params: &mut dyn Params,
        specs: &'static [ParamSpec; N],
    ) -> Result<Self, RegisterError> {
        let mut ids = Vec::with_capacity(N);
        for spec in specs {
            ids.push(params.register(spec)?);
        }
        let ids = ids
            .try_into()
            .unwrap_or_else(|_| unreachable!("one id per spec"));
        Ok(Registered { specs, ids })
    }

    /// The handle of the spec whose short name is `name`.
    ///
    /// # Panics
    ///
    /// If no spec has that name: the names are this crate's own, so that
    /// is a bug in it, which the components' tests meet.
    pub fn id(&self, name: &str) -> ParamId {
        let at = self.specs.iter().position(|s| s.name.name == name);
        let at = at.unwrap_or_else(|| panic!("no parameter `{name}` among the specs"));
        self.ids[at]
    }
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
