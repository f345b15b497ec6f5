//! The component model: what a transport implementation provides so that
//! it can be registered, configured, selected and started.

use core::fmt;

use super::excerpt::Truncating;
use super::registry::{Params, RegisterError};
use super::version::Version;

/// The most modules one component may create (one per NIC or port).
pub const MAX_MODULES: usize = 8;

/// The modules returned by [`Component::init`].
pub type Modules<M> = heapless::Vec<M, MAX_MODULES>;

/// How many bytes of a formatted "not available" reason are kept.
pub const REASON_LEN: usize = 96;

/// A component cannot run here, and why, in words for the user
/// (`no RDMA device found`, `disabled by btl_tcp_disable`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotAvailable {
    reason: Reason,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Reason {
    Static(&'static str),
    Formatted {
        text: heapless::String<REASON_LEN, u8>,
        truncated: bool,
    },
}

impl NotAvailable {
    /// With a fixed reason.
    pub const fn new(reason: &'static str) -> Self {
        Self {
            reason: Reason::Static(reason),
        }
    }

    /// With a reason formatted at run time, e.g.
    /// `NotAvailable::from_args(format_args!("{n} devices, at most 8"))`;
    /// truncated to [`REASON_LEN`] bytes.
    pub fn from_args(args: fmt::Arguments<'_>) -> Self {
        let mut w = Truncating::<REASON_LEN>::default();
        // Truncating never fails; a failing Display leaves a shorter text.
        let _ = fmt::write(&mut w, args);
        Self {
            reason: Reason::Formatted {
                text: w.text,
                truncated: w.truncated,
            },
        }
    }

    /// The reason, without the truncation mark.
    pub fn reason(&self) -> &str {
        match &self.reason {
            Reason::Static(s) => s,
            Reason::Formatted { text, .. } => text,
        }
    }
}

impl fmt::Display for NotAvailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())?;
        if let Reason::Formatted {
            truncated: true, ..
        } = self.reason
        {
            f.write_str("...")?;
        }
        Ok(())
    }
}

impl core::error::Error for NotAvailable {}

/// Inside an `impl Component` of the BTL framework, the four methods that
/// say what the component is: its framework (`btl`), `$name`, its own
/// `$version`, and the framework interface it implements
/// ([`BTL_FRAMEWORK_VERSION`](crate::mca::BTL_FRAMEWORK_VERSION)).
#[macro_export]
macro_rules! btl_component_identity {
    ($name:expr, $version:expr) => {
        fn framework(&self) -> &'static str {
            $crate::mca::BTL_FRAMEWORK
        }

        fn name(&self) -> &'static str {
            $name
        }

        fn version(&self) -> $crate::mca::Version {
            $version
        }

        fn framework_version(&self) -> $crate::mca::Version {
            $crate::mca::BTL_FRAMEWORK_VERSION
        }
    };
}

/// A component of a framework (for the BTL framework: a transport such as
/// `self`, `tcp` or `verbs`).
///
/// # Lifecycle
///
/// As in Open MPI's MCA, every component goes through four steps, driven by
/// the framework:
///
/// 1. [`register`](Component::register): declare its parameters in the
///    registry (before any source is applied, so `btl info` can list them
///    even for components that will not run);
/// 2. [`open`](Component::open): read the parameters, check for the
///    resources it needs; "not available" ends its life here;
/// 3. [`init`](Component::init): create its modules, one per usable device
///    (NIC, HCA port), zero to [`MAX_MODULES`] of them, or "not available";
/// 4. [`close`](Component::close): release what `open` took.
///
/// Components are values, not plugins: a driver builds them and holds them in
/// an array or struct. They see the parameter registry only as
/// `dyn Params`, so one implementation works with a registry of any
/// capacity.
///
/// The trait is object-safe for a given module type
/// (`dyn Component<Module = M>`), so a driver can keep different components
/// that produce the same kind of module in one array.
pub trait Component {
    /// What [`init`](Self::init) creates: for the BTL framework, a value
    /// implementing the `Btl` trait.
    type Module;

    /// The framework this component belongs to (`btl`).
    fn framework(&self) -> &'static str;

    /// The component's name (`tcp`), used in parameter names and in the
    /// selection list.
    fn name(&self) -> &'static str;

    /// The component's own release.
    fn version(&self) -> Version;

    /// The version of the framework interface the component implements;
    /// it runs only if [compatible](Version::is_compatible_with) with the
    /// framework's (see [`check_version`]).
    fn framework_version(&self) -> Version;

    /// Declares the component's parameters, keeping their ids for later.
    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError>;

    /// Prepares the component with its parameters' final values; returns
    /// `NotAvailable` if it cannot run here. The default does nothing.
    fn open(&mut self, params: &dyn Params) -> Result<(), NotAvailable> {
        let _ = params;
        Ok(())
    }

    /// Creates the component's modules (possibly none), or says why it
    /// cannot run.
    fn init(&mut self, params: &dyn Params) -> Result<Modules<Self::Module>, NotAvailable>;

    /// Releases what `open` acquired; called once for every successful
    /// `open`. The default does nothing.
    fn close(&mut self) {}
}

/// Checks that `component` implements an interface compatible with
/// `framework` (same major version), for the framework to call before
/// `open`.
pub fn check_version<C: Component + ?Sized>(
    component: &C,
    framework: Version,
) -> Result<(), NotAvailable> {
    let implemented = component.framework_version();
    if implemented.is_compatible_with(framework) {
        Ok(())
    } else {
        Err(NotAvailable::from_args(format_args!(
            "implements {} interface {implemented}, framework is {framework}",
            component.framework()
        )))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::mca::param::ParamKind;
    use crate::mca::registry::{ParamId, Registry};
    use crate::mca::select::{self, Candidate, Exclusivity};
    use crate::mca::source::Source;
    use crate::mca::spec::ParamSpec;
    use crate::mca::version::BTL_FRAMEWORK_VERSION;
    use std::string::ToString;
    use std::vec::Vec;

    /// A module of the test component: one per configured device.
    #[derive(Debug, PartialEq, Eq)]
    struct Nic {
        device: heapless::String<16>,
        eager_limit: u64,
    }

    #[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
    enum Stage {
        #[default]
        New,
        Registered,
        Open,
        Initialised,
        Closed,
    }

    /// A small real component: its devices come from a list parameter, and
    /// a bool parameter can switch it off.
    #[derive(Default)]
    struct Fake {
        devices: Option<ParamId>,
        disable: Option<ParamId>,
        eager: Option<ParamId>,
        stage: Stage,
    }

    const DEVICES: ParamSpec = ParamSpec::new("btl", "fake", "devices", ParamKind::List, "nic0")
        .help("Devices to open, one module each")
        .level(3);
    const DISABLE: ParamSpec = ParamSpec::new("btl", "fake", "disable", ParamKind::Bool, "false")
        .help("Switch the component off")
        .level(2);
    const EAGER_LIMIT: ParamSpec = ParamSpec::new(
        "btl",
        "fake",
        "eager_limit",
        ParamKind::Size {
            min: 1024,
            max: 1 << 20,
        },
        "4k",
    )
    .level(4);

    impl Component for Fake {
        type Module = Nic;

        fn framework(&self) -> &'static str {
            "btl"
        }

        fn name(&self) -> &'static str {
            "fake"
        }

        fn version(&self) -> Version {
            Version::new(0, 3, 1)
        }

        fn framework_version(&self) -> Version {
            BTL_FRAMEWORK_VERSION
        }

        fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
            assert_eq!(self.stage, Stage::New);
            self.devices = Some(params.register(&DEVICES)?);
            self.disable = Some(params.register(&DISABLE)?);
            self.eager = Some(params.register(&EAGER_LIMIT)?);
            self.stage = Stage::Registered;
            Ok(())
        }

        fn open(&mut self, params: &dyn Params) -> Result<(), NotAvailable> {
            assert_eq!(self.stage, Stage::Registered);
            let disable = self
                .disable
                .and_then(|id| params.bool(id).ok())
                .ok_or(NotAvailable::new("parameters not registered"))?;
            if disable {
                return Err(NotAvailable::new("disabled by btl_fake_disable"));
            }
            self.stage = Stage::Open;
            Ok(())
        }

        fn init(&mut self, params: &dyn Params) -> Result<Modules<Nic>, NotAvailable> {
            assert_eq!(self.stage, Stage::Open);
            let missing = NotAvailable::new("parameters not registered");
            let devices = self
                .devices
                .and_then(|id| params.list(id).ok())
                .ok_or(missing.clone())?;
            let eager_limit = self
                .eager
                .and_then(|id| params.size(id).ok())
                .ok_or(missing)?;
            let mut modules = Modules::new();
            for device in devices {
                let name = heapless::String::try_from(device).map_err(|_| {
                    NotAvailable::from_args(format_args!("device name `{device}` too long"))
                })?;
                modules
                    .push(Nic {
                        device: name,
                        eager_limit,
                    })
                    .map_err(|_| {
                        NotAvailable::from_args(format_args!(
                            "{} devices configured, at most {MAX_MODULES} supported",
                            devices.len()
                        ))
                    })?;
            }
            self.stage = Stage::Initialised;
            Ok(modules)
        }

        fn close(&mut self) {
            self.stage = Stage::Closed;
        }
    }

    /// Drives one component through the whole lifecycle the way a driver
    /// would, with environment-style settings applied between register and
    /// open.
    fn run(settings: &[(&str, &str)]) -> (Fake, Result<Modules<Nic>, NotAvailable>) {
        let mut registry = Registry::<8>::new();
        select::register_framework_params(&mut registry).expect("framework params");
        let mut c = Fake::default();
        c.register(&mut registry).expect("register");
        for (name, value) in settings {
            let id = registry.find_env(name).expect("known variable");
            registry
                .set(id, value, Source::Environment)
                .expect("valid value");
        }
        check_version(&c, BTL_FRAMEWORK_VERSION).expect("compatible");
        let result = c.open(&registry).and_then(|()| {
            let modules = c.init(&registry);
            c.close();
            modules
        });
        (c, result)
    }

    #[test]
    fn lifecycle_with_defaults() {
        let (c, modules) = run(&[]);
        let modules = modules.expect("available");
        assert_eq!(modules.len(), 1);
        assert_eq!(modules[0].device, "nic0");
        assert_eq!(modules[0].eager_limit, 4096);
        assert_eq!(c.stage, Stage::Closed);
    }

    #[test]
    fn lifecycle_one_module_per_configured_device() {
        let (_, modules) = run(&[
            ("BTL_FAKE_DEVICES", "mlx0,mlx1,eth2"),
            ("BTL_FAKE_EAGER_LIMIT", "64k"),
        ]);
        let modules = modules.expect("available");
        let names: Vec<&str> = modules.iter().map(|m| m.device.as_str()).collect();
        assert_eq!(names, ["mlx0", "mlx1", "eth2"]);
        assert!(modules.iter().all(|m| m.eager_limit == 65536));
    }

    #[test]
    fn lifecycle_zero_modules() {
        let (_, modules) = run(&[("BTL_FAKE_DEVICES", "")]);
        assert!(modules.expect("available").is_empty());
    }

    #[test]
    fn lifecycle_not_available_when_disabled() {
        let (c, modules) = run(&[("BTL_FAKE_DISABLE", "yes")]);
        let err = modules.expect_err("disabled");
        assert_eq!(err.reason(), "disabled by btl_fake_disable");
        assert_eq!(err.to_string(), "disabled by btl_fake_disable");
        assert_eq!(c.stage, Stage::Registered, "never opened, so not closed");
    }

    #[test]
    fn lifecycle_too_many_devices() {
        let (_, modules) = run(&[("BTL_FAKE_DEVICES", "a,b,c,d,e,f,g,h,i")]);
        assert_eq!(
            modules.expect_err("too many").to_string(),
            "9 devices configured, at most 8 supported"
        );
    }

    #[test]
    fn modules_feed_selection() {
        let (c, modules) = run(&[("BTL_FAKE_DEVICES", "a,b")]);
        let modules = modules.expect("available");
        let candidates: Vec<Candidate<'_>> = modules
            .iter()
            .map(|_| Candidate {
                name: c.name(),
                exclusivity: Exclusivity::DEFAULT,
                priority: 0,
            })
            .collect();
        let list = crate::mca::param::ListValue::parse("fake").expect("valid");
        let s = select::select::<8>(&list, &candidates).expect("fits");
        assert_eq!(s.indices(), [0, 1]);
    }

    #[test]
    fn components_are_object_safe() {
        let mut a = Fake::default();
        let c: &mut dyn Component<Module = Nic> = &mut a;
        assert_eq!(c.name(), "fake");
        assert_eq!(c.framework(), "btl");
        assert_eq!(c.version().to_string(), "0.3.1");
        let mut registry = Registry::<4>::new();
        c.register(&mut registry).expect("register");
        assert_eq!(registry.len(), 3);
    }

    #[test]
    fn incompatible_framework_version() {
        let c = Fake::default();
        let err = check_version(&c, Version::new(2, 0, 0)).expect_err("major differs");
        assert_eq!(
            err.to_string(),
            "implements btl interface 1.0.0, framework is 2.0.0"
        );
        assert!(check_version(&c, Version::new(1, 4, 0)).is_ok());
    }

    #[test]
    fn long_reasons_are_truncated() {
        let long = "x".repeat(200);
        let err = NotAvailable::from_args(format_args!("{long}"));
        assert_eq!(err.reason().len(), REASON_LEN);
        assert!(err.to_string().ends_with("..."));
    }
}
