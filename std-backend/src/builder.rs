//! Opening a module in one expression: who this process is, how it finds
//! its peers, and what it sets in code; the defaults, a parameter file and
//! the environment (`BTL_TCP_IF_INCLUDE=eth0`) do the rest.
//!
//! ```no_run
//! use btl_std::{ModuleBuilder, ProcName};
//!
//! let tcp = ModuleBuilder::new(ProcName::new(7, 0))
//!     .shared_dir("/tmp/my-job")
//!     .job_key(b"a secret of the job".to_vec())
//!     .param("btl_tcp_if_include", "lo")
//!     .tcp()?;
//! # Ok::<(), btl_std::OpenError>(())
//! ```

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::loopback::{Loopback, SelfComponent};
use btl_core::mca::{Component, ListValue, Params, Source, register_framework_params};
use btl_core::pool::PoolCell;

use crate::ParamRegistry;
use crate::bml::{Bml, Member, Offer, Outcome, Shared};
use crate::bootstrap::{Bootstrap, BootstrapError, OneCard, SharedDir, StaticPeers};
use crate::config::sources::{
    SourceError, apply_environment, apply_file, default_param_file, warn_environment_mistakes,
};
use crate::driver::heap::Buffer;
use crate::driver::module::Module;
use crate::driver::net::Os;
#[cfg(not(loom))]
use crate::transports::sm::{SmComponent, SmModule, SmSetup};
use crate::transports::tcp::{Tcp, TcpComponent, TcpModule, TcpSetup};
use crate::transports::udp::{Udp, UdpComponent, UdpModule, UdpSetup};

/// The loopback module (`self`): messages, puts and gets within this
/// process, 16 registrations and 256 events deep, registered memory held
/// as `M`.
pub type SelfModule<M = Vec<u8>> = Loopback<Pin<Box<[PoolCell]>>, M, 16, 256>;

/// The loopback module as a [`Bml`] holds it.
pub(crate) type SharedSelf = SelfModule<Shared>;

/// Opens a module of process `me` ([`tcp`](Self::tcp),
/// [`udp`](Self::udp), [`sm`](Self::sm), [`loopback`](Self::loopback)).
///
/// Parameters come, lowest first, from their defaults, a parameter file
/// (the one given, else `$BTL_PARAM_FILE` or `~/.config/btl/params.conf`),
/// the environment (`BTL_TCP_EAGER_LIMIT=64k`), and [`param`](Self::param)
/// calls. Peers are found through the bootstrap given, else the static
/// list in `BTL_PEERS` or `BTL_PEERS_FILE`.
#[derive(Clone)]
pub struct ModuleBuilder {
    me: ProcName,
    bootstrap: Option<Arc<dyn Bootstrap>>,
    job_key: Option<Vec<u8>>,
    params: Vec<(String, String)>,
    param_file: Option<PathBuf>,
    environment: bool,
    loopback: bool,
    /// Components of other crates a `Bml` may hold.
    offers: Vec<Offer>,
}

/// Why a module could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No bootstrap was given and `BTL_PEERS`/`BTL_PEERS_FILE` name none.
    #[error(
        "no way to find peers: give a bootstrap (shared_dir, bootstrap) or set BTL_PEERS or BTL_PEERS_FILE"
    )]
    NoBootstrap,
    /// The static peer list of the environment is wrong.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The parameter file or the environment holds something wrong.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A parameter set in code is unknown or its value invalid.
    #[error("parameter {name}: {reason}")]
    Param {
        /// The parameter's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The component cannot run as configured.
    #[error("{component}: {reason}")]
    NotAvailable {
        /// The component.
        component: &'static str,
        /// Why.
        reason: String,
    },
    /// Its sockets could not be opened.
    #[error("{component}: {error}")]
    Io {
        /// The component.
        component: &'static str,
        /// What the system said.
        error: std::io::Error,
    },
}

impl ModuleBuilder {
    /// A module of process `me`, every parameter as the defaults, file and
    /// environment say.
    pub fn new(me: ProcName) -> Self {
        ModuleBuilder {
            me,
            bootstrap: None,
            job_key: None,
            params: Vec::new(),
            param_file: None,
            environment: true,
            loopback: false,
            offers: Vec::new(),
        }
    }

    /// Offers the `Bml`s this builder opens a component of another crate
    /// (the verbs one): the `btl` list selects it as it does the others,
    /// by its name, and ranks it by its exclusivity.
    pub fn offer(mut self, offer: Offer) -> Self {
        self.offers.push(offer);
        self
    }

    /// The components of other crates offered so far.
    pub fn offers(&self) -> &[Offer] {
        &self.offers
    }

    /// Finds peers through `bootstrap` (and publishes this process there).
    pub fn bootstrap(mut self, bootstrap: Arc<dyn Bootstrap>) -> Self {
        self.bootstrap = Some(bootstrap);
        self
    }

    /// Finds peers through a directory every process of the job reaches
    /// ([`SharedDir`]).
    pub fn shared_dir(self, dir: impl Into<PathBuf>) -> Self {
        self.bootstrap(Arc::new(SharedDir::new(dir)))
    }

    /// The job's key, which every process proves it holds in its handshake.
    pub fn job_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.job_key = Some(key.into());
        self
    }

    /// Sets parameter `name` (its full name, `btl_tcp_if_include`) to
    /// `value`, above what the file and environment say.
    pub fn param(mut self, name: &str, value: impl ToString) -> Self {
        self.params.push((name.to_owned(), value.to_string()));
        self
    }

    /// Reads parameters from `path` instead of the default file.
    pub fn param_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.param_file = Some(path.into());
        self
    }

    /// Reads nothing from the environment: no `BTL_*` parameter, no default
    /// parameter file, no static peer list.
    pub fn ignore_environment(mut self) -> Self {
        self.environment = false;
        self
    }

    /// Keeps the module on loopback interfaces unless the file or the
    /// environment chose interfaces: for a job on one host.
    pub fn on_loopback(mut self) -> Self {
        self.loopback = true;
        self
    }

    /// Opens every component the framework parameter `btl` selects
    /// (`self,sm,tcp`, `^udp`; empty: `self`, `sm` and `tcp`) under one
    /// [`Bml`], which routes each peer to the best module that reaches
    /// it. A component the list names must open; one it does not name
    /// and that cannot run here is left out, and
    /// [`Bml::selection`] says why.
    pub fn open(self) -> Result<Bml, OpenError> {
        let list = self.selection_list()?;
        let mut choices =
            crate::bml::choose(&list, &self.offers).map_err(|reason| OpenError::Param {
                name: "btl".into(),
                reason,
            })?;
        let bootstrap: Arc<dyn Bootstrap> = Arc::new(OneCard::new(self.peers()?));
        let mut members: Vec<Box<dyn Member>> = Vec::new();
        for choice in &mut choices {
            if !matches!(choice.outcome, Outcome::Selected { .. }) {
                continue;
            }
            match self.member(&choice.component, &bootstrap) {
                Ok(member) => members.push(member),
                // A component the list names must run.
                Err(e) if !list.is_negated() && list.contains(&choice.component) => {
                    return Err(e);
                }
                Err(e) => {
                    choice.outcome = Outcome::Unavailable {
                        reason: e.to_string(),
                    }
                }
            }
        }
        if members.is_empty() {
            return Err(OpenError::NotAvailable {
                component: "btl",
                reason: format!("no component selected by btl={list} can run"),
            });
        }
        bootstrap.published().map_err(OpenError::Bootstrap)?;
        Ok(Bml::new(members, choices))
    }

    /// The framework's `btl` list, from the usual sources.
    fn selection_list(&self) -> Result<ListValue, OpenError> {
        let mut selection = None;
        let registry = self.configured("", |params| {
            selection =
                Some(
                    register_framework_params(params).map_err(|e| OpenError::NotAvailable {
                        component: "btl",
                        reason: e.to_string(),
                    })?,
                );
            Ok(())
        })?;
        let id = selection.map(|s| s.selection);
        id.and_then(|id| registry.list(id).ok().cloned())
            .ok_or_else(|| OpenError::NotAvailable {
                component: "btl",
                reason: "the btl parameter was not registered".into(),
            })
    }

    /// Opens the module of component `name` for a [`Bml`], publishing
    /// through `bootstrap`.
    fn member(
        &self,
        name: &str,
        bootstrap: &Arc<dyn Bootstrap>,
    ) -> Result<Box<dyn Member>, OpenError> {
        let key = self.job_key.as_deref();
        let io = |component: &'static str| move |error| OpenError::Io { component, error };
        Ok(match name {
            "self" => {
                let module: SharedSelf = self.self_module()?;
                Box::new(module)
            }
            #[cfg(not(loom))]
            "sm" => {
                let module: SmModule<Shared> = self
                    .sm_setup()?
                    .build(self.me, Arc::clone(bootstrap))
                    .map_err(|e| OpenError::NotAvailable {
                        component: "sm",
                        reason: e.to_string(),
                    })?;
                Box::new(module)
            }
            "tcp" => {
                let module: Module<Tcp<Os>, Shared> = self
                    .tcp_setup()?
                    .build_on(Os, self.me, key, Arc::clone(bootstrap))
                    .map_err(io("tcp"))?;
                Box::new(module)
            }
            "udp" => {
                let module: Module<Udp<Os>, Shared> = self
                    .udp_setup()?
                    .build_on(Os, self.me, key, Arc::clone(bootstrap))
                    .map_err(io("udp"))?;
                Box::new(module)
            }
            other => match self.offers.iter().find(|o| o.name() == other) {
                Some(offer) => offer.open(self.clone().bootstrap(Arc::clone(bootstrap)))?,
                None => {
                    return Err(OpenError::NotAvailable {
                        component: "btl",
                        reason: format!("no component {other}"),
                    });
                }
            },
        })
    }

    /// Opens a TCP module.
    pub fn tcp(self) -> Result<TcpModule, OpenError> {
        let setup = self.setup(&mut TcpComponent::default())?;
        let bootstrap = self.peers()?;
        setup
            .build(self.me, self.job_key.as_deref(), bootstrap)
            .map_err(|error| OpenError::Io {
                component: "tcp",
                error,
            })
    }

    /// Opens a UDP module.
    pub fn udp(self) -> Result<UdpModule, OpenError> {
        let setup = self.setup(&mut UdpComponent::default())?;
        let bootstrap = self.peers()?;
        setup
            .build(self.me, self.job_key.as_deref(), bootstrap)
            .map_err(|error| OpenError::Io {
                component: "udp",
                error,
            })
    }

    /// Opens a shared-memory module: its segment made in `/dev/shm`, and
    /// published on this process's card, for the processes of this host.
    #[cfg(not(loom))]
    pub fn sm(self) -> Result<SmModule, OpenError> {
        let setup = self.sm_setup()?;
        let bootstrap = self.peers()?;
        setup
            .build(self.me, bootstrap)
            .map_err(|e| OpenError::NotAvailable {
                component: "sm",
                reason: e.to_string(),
            })
    }

    /// What a shared-memory module would be built with.
    #[cfg(not(loom))]
    pub fn sm_setup(&self) -> Result<SmSetup, OpenError> {
        self.setup(&mut SmComponent::default())
    }

    /// What a TCP module would be built with (socket settings, pools,
    /// engine configuration without the process and its key), as the
    /// parameters say: for a driver of one's own that takes btl's TCP
    /// parameters, such as the engine over smoltcp.
    pub fn tcp_setup(&self) -> Result<TcpSetup, OpenError> {
        self.setup(&mut TcpComponent::default())
    }

    /// What a UDP module would be built with, as [`tcp_setup`](Self::tcp_setup).
    pub fn udp_setup(&self) -> Result<UdpSetup, OpenError> {
        self.setup(&mut UdpComponent::default())
    }

    /// Opens a module of `component`, a component of another crate (the
    /// verbs one): its parameters are registered and take their values
    /// from the same sources as the others', and `build` makes the module
    /// from the component's setup and what this builder knows of the
    /// process ([`Opening`]).
    pub fn open_with<C: Component, M>(
        self,
        component: &mut C,
        build: impl FnOnce(C::Module, Opening) -> Result<M, OpenError>,
    ) -> Result<M, OpenError> {
        let setup = self.setup(component)?;
        build(setup, self.opening()?)
    }

    /// What this builder knows of the process, for a module opened
    /// outside it (an [`Offered`](crate::bml::Offered) component's): its
    /// name, bootstrap, key, and whether the run stays on loopback.
    pub fn opening(&self) -> Result<Opening, OpenError> {
        Ok(Opening {
            me: self.me,
            bootstrap: self.peers()?,
            job_key: self.job_key.clone(),
            loopback: self.loopback,
        })
    }

    /// Opens the loopback module, which reaches this process only.
    pub fn loopback(self) -> Result<SelfModule, OpenError> {
        self.self_module()
    }

    /// The loopback module, holding registered memory as `M`.
    fn self_module<M: Buffer>(&self) -> Result<SelfModule<M>, OpenError> {
        let setup = self.setup(&mut SelfComponent::default())?;
        setup
            .build(PoolCell::boxed(setup.required_bytes()), self.me)
            .map_err(|e| OpenError::NotAvailable {
                component: "self",
                reason: format!("{e:?}"),
            })
    }

    /// The bootstrap given, else the environment's static list.
    fn peers(&self) -> Result<Arc<dyn Bootstrap>, OpenError> {
        if let Some(b) = &self.bootstrap {
            return Ok(Arc::clone(b));
        }
        match self.environment.then(StaticPeers::from_env).flatten() {
            Some(list) => Ok(Arc::new(list?)),
            None => Err(OpenError::NoBootstrap),
        }
    }

    /// Registers `component`'s parameters, applies the sources in their
    /// order of precedence, and initialises it: its module's setup.
    fn setup<C: Component>(&self, component: &mut C) -> Result<C::Module, OpenError> {
        let name = component.name();
        let na = |reason: String| OpenError::NotAvailable {
            component: name,
            reason,
        };
        let registry = self.configured(name, |params| {
            component.register(params).map_err(|e| na(e.to_string()))
        })?;
        component
            .init(registry.as_ref())
            .map_err(|e| na(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| na("no module".to_owned()))
    }

    /// A registry where `register` put its parameters, with the sources
    /// applied in their order of precedence; `component` names whose
    /// interfaces [`on_loopback`](Self::on_loopback) chooses.
    fn configured(
        &self,
        component: &str,
        register: impl FnOnce(&mut dyn Params) -> Result<(), OpenError>,
    ) -> Result<Box<ParamRegistry>, OpenError> {
        let mut registry = Box::new(ParamRegistry::new());
        let params: &mut dyn Params = registry.as_mut();
        register(params)?;
        let env = |var: &str| std::env::var(var).ok();
        let file = match (&self.param_file, self.environment) {
            (Some(path), _) => Some(path.clone()),
            (None, true) => default_param_file(env),
            (None, false) => None,
        };
        if let Some(path) = file {
            // Names of other components' parameters are expected there.
            apply_file(params, &path)?;
        }
        if self.environment {
            apply_environment(params, env)?;
            warn_environment_mistakes();
        }
        for (param, value) in &self.params {
            if params.find(param).is_none() && known_elsewhere(param) {
                // Another component's, or the framework's: checked where
                // it is read.
                continue;
            }
            params
                .set_by_name(param, value, Source::Code)
                .map_err(|e| OpenError::Param {
                    name: param.clone(),
                    reason: e.to_string(),
                })?;
        }
        if self.loopback {
            prefer_loopback(params, component);
        }
        Ok(registry)
    }
}

/// What a [`ModuleBuilder`] knows of the process whose module a
/// component's `build` makes ([`ModuleBuilder::open_with`]).
#[derive(Clone)]
pub struct Opening {
    /// The process.
    pub me: ProcName,
    /// How it finds its peers and publishes its card.
    pub bootstrap: Arc<dyn Bootstrap>,
    /// The job key it proves, if any.
    pub job_key: Option<Vec<u8>>,
    /// Whether the run stays on this host's loopback.
    pub loopback: bool,
}

impl Opening {
    /// The engine's configuration for the process, from `base` (timers
    /// and checks): its name and job key set.
    pub fn engine_config(
        &self,
        component: &'static str,
        base: EngineConfig,
    ) -> Result<EngineConfig, OpenError> {
        let job_key = crate::config::socket_params::job_key(self.job_key.as_deref())
            .map_err(|error| OpenError::Io { component, error })?;
        Ok(EngineConfig {
            me: self.me,
            job_key,
            ..base
        })
    }
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opening")
            .field("me", &self.me)
            .field("job_key", &self.job_key.is_some())
            .field("loopback", &self.loopback)
            .finish()
    }
}

impl std::fmt::Debug for ModuleBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleBuilder")
            .field("me", &self.me)
            .field("bootstrap", &self.bootstrap.is_some())
            .field("job_key", &self.job_key.is_some())
            .field("params", &self.params)
            .field("param_file", &self.param_file)
            .field("environment", &self.environment)
            .field("loopback", &self.loopback)
            .finish()
    }
}

/// Whether `param` is a parameter of the framework or of some component
/// of the build.
fn known_elsewhere(param: &str) -> bool {
    let mut all = Box::new(ParamRegistry::new());
    crate::register_all(all.as_mut()).is_ok() && all.find(param).is_some()
}

/// `if_include` becomes `lo` for `component` unless some source chose
/// interfaces.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_needs_a_way_to_find_its_peers() {
        let err = ModuleBuilder::new(ProcName::new(1, 0))
            .ignore_environment()
            .tcp()
            .expect_err("no bootstrap");
        assert!(matches!(err, OpenError::NoBootstrap), "{err}");
    }

    #[test]
    fn parameters_set_in_code_are_checked_by_name_and_value() {
        let dir = std::env::temp_dir().join(format!("btl-builder-{}", std::process::id()));
        let builder = ModuleBuilder::new(ProcName::new(1, 0))
            .ignore_environment()
            .shared_dir(&dir);
        let unknown = builder
            .clone()
            .param("btl_tcp_no_such_thing", "1")
            .tcp()
            .expect_err("an unknown name");
        assert!(
            matches!(&unknown, OpenError::Param { name, .. } if name == "btl_tcp_no_such_thing"),
            "{unknown}"
        );
        let invalid = builder
            .param("btl_tcp_links", "99")
            .tcp()
            .expect_err("out of range");
        assert!(matches!(invalid, OpenError::Param { .. }), "{invalid}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_tcp_congestion_control_is_auto_a_name_the_kernel_gives_or_the_systems() {
        use crate::driver::net::Congestion;
        let dir = std::env::temp_dir().join(format!("btl-builder-cc-{}", std::process::id()));
        let builder = ModuleBuilder::new(ProcName::new(1, 0))
            .ignore_environment()
            .shared_dir(&dir);
        let of = |b: ModuleBuilder| b.tcp_setup().map(|s| s.tcp.congestion);
        // Cubic is in every kernel this runs on: Debian's builds it in.
        assert_eq!(of(builder.clone()).expect("the default"), Congestion::AUTO);
        let cubic = of(builder.clone().param("btl_tcp_congestion", "cubic")).expect("cubic");
        assert_eq!(cubic, Congestion::CUBIC);
        let reno = of(builder.clone().param("btl_tcp_congestion", "reno")).expect("reno");
        assert_eq!(reno.name(), Some("reno"));
        let system = of(builder.clone().param("btl_tcp_congestion", "system")).expect("system");
        assert_eq!(system, Congestion::SYSTEM);
        let refused = of(builder.clone().param("btl_tcp_congestion", "no_such_cc"))
            .expect("a name the kernel refuses keeps the system's");
        assert_eq!(refused, Congestion::SYSTEM);
        let bad = of(builder.param("btl_tcp_congestion", "Not A Name")).expect_err("no name");
        assert!(
            bad.to_string().contains("btl_tcp_congestion")
                && bad.to_string().contains("like cubic"),
            "named, and whole: {bad}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_udp_mtu_is_the_interfaces_or_a_size_from_576() {
        let dir = std::env::temp_dir().join(format!("btl-builder-mtu-{}", std::process::id()));
        let builder = ModuleBuilder::new(ProcName::new(1, 0))
            .ignore_environment()
            .shared_dir(&dir)
            .on_loopback();
        let Err(small) = builder.clone().param("btl_udp_mtu", "100").udp() else {
            panic!("an MTU below 576 was taken");
        };
        assert!(
            matches!(&small, OpenError::NotAvailable { reason, .. } if reason.contains("576")),
            "{small}"
        );
        let fixed = builder
            .clone()
            .param("btl_udp_mtu", "1472")
            .udp()
            .expect("udp");
        assert_eq!(fixed.transport().mtu(), 1472);
        let auto = builder.udp().expect("udp");
        let mtus = auto.transport().contacts().map(|c| {
            crate::transports::interfaces::datagram_mtu(c.addr.ip()).expect("loopback's MTU")
        });
        assert_eq!(
            Some(auto.transport().mtu()),
            mtus.min(),
            "0: the smallest of the loopback addresses'"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A builder of a fresh job's process 0 on loopback, its cards in a
    /// directory of its own (`what` in its name).
    fn on_loopback(what: &str) -> (ModuleBuilder, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("btl-builder-{what}-{}", std::process::id()));
        let builder = ModuleBuilder::new(ProcName::new(u64::from(std::process::id()), 0))
            .ignore_environment()
            .shared_dir(&dir)
            .on_loopback();
        (builder, dir)
    }

    fn selected(bml: &Bml) -> Vec<&'static str> {
        bml.names().collect()
    }

    #[test]
    fn the_btl_parameter_chooses_the_modules_in_open_mpis_syntax() {
        let (builder, dir) = on_loopback("select");
        let all = builder.clone().open().expect("the default selection");
        assert_eq!(
            selected(&all),
            ["self", "sm", "tcp"],
            "best first, udp only if named"
        );
        let udp = all.selection().iter().find(|c| c.component == "udp");
        assert_eq!(udp.map(|c| &c.outcome), Some(&Outcome::OnlyIfNamed));
        drop(all);

        let only = builder
            .clone()
            .param("btl", "tcp,self")
            .open()
            .expect("tcp,self");
        assert_eq!(selected(&only), ["self", "tcp"]);
        let sm = only.selection().iter().find(|c| c.component == "sm");
        assert!(
            matches!(sm.map(|c| &c.outcome), Some(Outcome::Excluded { by }) if by == "tcp,self"),
            "{:?}",
            only.selection()
        );
        drop(only);

        let but = builder
            .clone()
            .param("btl", "^sm,self")
            .open()
            .expect("^sm,self");
        assert_eq!(selected(&but), ["tcp", "udp"], "an exclusion keeps udp");
        drop(but);

        let udp = builder.param("btl", "udp").open().expect("udp");
        assert_eq!(selected(&udp), ["udp"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_bad_btl_list_is_a_clear_error() {
        let (builder, dir) = on_loopback("bad-select");
        let unknown = builder
            .clone()
            .param("btl", "tcp,infiniband")
            .open()
            .expect_err("no such component");
        let text = unknown.to_string();
        assert!(
            text.contains("infiniband") && text.contains("self, sm, tcp, udp"),
            "{text}"
        );
        let mixed = builder
            .clone()
            .param("btl", "tcp,^sm")
            .open()
            .expect_err("a ^ inside the list");
        assert!(
            matches!(mixed, OpenError::Param { ref name, .. } if name == "btl"),
            "{mixed}"
        );
        let none = builder
            .param("btl", "^self,sm,tcp,udp")
            .open()
            .expect_err("nothing left");
        assert!(none.to_string().contains("no component"), "{none}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_named_component_that_cannot_open_is_an_error_and_an_unnamed_one_is_left_out() {
        let (builder, dir) = on_loopback("unavailable");
        // An MTU below the least datagram is a configuration udp refuses.
        let named = builder
            .clone()
            .param("btl", "self,udp")
            .param("btl_udp_mtu", "100")
            .open()
            .expect_err("udp was named");
        assert!(named.to_string().contains("576"), "{named}");
        let unnamed = builder
            .param("btl", "^sm")
            .param("btl_udp_mtu", "100")
            .open()
            .expect("udp left out");
        assert_eq!(selected(&unnamed), ["self", "tcp"]);
        let udp = unnamed.selection().iter().find(|c| c.component == "udp");
        assert!(
            matches!(udp.map(|c| &c.outcome), Some(Outcome::Unavailable { reason }) if reason.contains("576")),
            "{:?}",
            unnamed.selection()
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_loopback_module_opens_without_peers() {
        use btl_core::btl::Btl;
        let me = ProcName::new(1, 0);
        let module = ModuleBuilder::new(me)
            .ignore_environment()
            .loopback()
            .expect("self");
        assert_eq!(module.attributes().name, "self");
    }
}
