//! How the `btl` command opens a module of the chosen BTL from the
//! parameters (config file, environment) and meets its peer: a second
//! process it starts itself on loopback, or across hosts with
//! `btl serve` and `btl connect HOST:PORT`.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::loopback::{Loopback, SelfComponent};
use btl_core::mca::{Component, Params, Source};
use btl_core::pool::PoolCell;

use btl_std::ParamRegistry;
use btl_std::bootstrap::Bootstrap;
use btl_std::config::sources::{apply_environment, apply_file, default_param_file};
use btl_std::transports::tcp::{TcpComponent, TcpModule};
use btl_std::transports::udp::{UdpComponent, UdpModule};

/// Environment variable holding the job key both sides prove.
pub const JOB_KEY_VAR: &str = "BTL_JOB_KEY";

/// The loopback module of the command (`--btl self`).
pub type SelfModule = Loopback<Pin<Box<[PoolCell]>>, Vec<u8>, 16, 256>;

/// Where a run's parameters come from, besides the defaults: a config
/// file (`--param-file`, else `$BTL_PARAM_FILE` or the user's default
/// file) and the environment; `local` keeps the run on loopback.
#[derive(Debug, Clone, Default)]
pub struct ParamSources {
    /// The config file to read, if any.
    pub file: Option<PathBuf>,
    /// Use `lo` unless the user chose interfaces.
    pub local: bool,
}

impl ParamSources {
    /// The file given, or the default one.
    pub fn new(file: Option<PathBuf>, local: bool) -> Self {
        let env = |var: &str| std::env::var(var).ok();
        ParamSources {
            file: file.or_else(|| default_param_file(env)),
            local,
        }
    }

    /// Registers `component`'s parameters in a registry of its own, applies
    /// the sources, and initialises it: its module setup.
    pub fn setup<C: Component>(&self, component: &mut C) -> Result<C::Module, String> {
        let mut registry = Box::new(ParamRegistry::new());
        let params: &mut dyn Params = registry.as_mut();
        component.register(params).map_err(|e| e.to_string())?;
        if let Some(path) = &self.file {
            // Names of other components' parameters are expected here.
            apply_file(params, path).map_err(|e| e.to_string())?;
        }
        apply_environment(params, |v| std::env::var(v).ok()).map_err(|e| e.to_string())?;
        if self.local {
            prefer_loopback(params, component.name());
        }
        component
            .init(params)
            .map_err(|e| e.to_string())?
            .into_iter()
            .next()
            .ok_or_else(|| format!("{}: no module", component.name()))
    }
}

/// Keeps a run on loopback: `if_include` becomes `lo` for `component`
/// unless the user chose interfaces (file or environment).
fn prefer_loopback(params: &mut dyn Params, component: &str) {
    let name = |n: &str| format!("btl_{component}_{n}");
    let untouched = |params: &dyn Params, n: &str| {
        params
            .find(&name(n))
            .and_then(|id| params.param(id))
            .is_none_or(|p| p.source == Source::Default)
    };
    if untouched(params, "if_include") && untouched(params, "if_exclude") {
        let _ = params.set_by_name(&name("if_include"), "lo", Source::Code);
    }
}

/// The job key from [`JOB_KEY_VAR`], if set.
pub fn job_key() -> Option<Vec<u8>> {
    std::env::var(JOB_KEY_VAR)
        .ok()
        .filter(|k| !k.is_empty())
        .map(String::into_bytes)
}

/// A TCP module of process `me`.
pub fn tcp_module(
    sources: &ParamSources,
    me: ProcName,
    bootstrap: Arc<dyn Bootstrap>,
) -> Result<TcpModule, String> {
    sources
        .setup(&mut TcpComponent::default())?
        .build(me, job_key().as_deref(), bootstrap)
        .map_err(|e| format!("tcp: {e}"))
}

/// A UDP module of process `me`.
pub fn udp_module(
    sources: &ParamSources,
    me: ProcName,
    bootstrap: Arc<dyn Bootstrap>,
) -> Result<UdpModule, String> {
    sources
        .setup(&mut UdpComponent::default())?
        .build(me, job_key().as_deref(), bootstrap)
        .map_err(|e| format!("udp: {e}"))
}

/// The loopback module of process `me`.
pub fn self_module(sources: &ParamSources, me: ProcName) -> Result<SelfModule, String> {
    let setup = sources.setup(&mut SelfComponent::default())?;
    setup
        .build(PoolCell::boxed(setup.required_bytes()), me)
        .map_err(|e| format!("self: {e:?}"))
}

/// Makes `proc` known to `btl`; its endpoint, or why not.
pub fn reach<B: btl_core::btl::Btl + ?Sized>(
    btl: &mut B,
    proc: ProcName,
) -> Result<EndpointId, String> {
    let mut ep = [None];
    let mut words = [0u64];
    btl.add_procs(&[proc], &mut ep, &mut Reachability::new(&mut words))
        .map_err(|e| format!("adding {proc}: {e:?}"))?;
    ep[0].ok_or_else(|| format!("process {proc} is not reachable"))
}

/// A scratch directory for a local run's bootstrap, removed when dropped.
pub struct RunDir(pub PathBuf);

impl RunDir {
    /// A fresh directory for job `job`.
    pub fn new(job: u64) -> Self {
        let dir = std::env::temp_dir().join(format!("btl-run-{job:x}"));
        let _ = std::fs::remove_dir_all(&dir);
        RunDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
