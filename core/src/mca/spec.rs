//! The description of a parameter, as a component registers it.

use super::name::ParamName;
use super::param::ParamKind;

/// The lowest (most user-facing) `ompi_info`-style level.
pub const LEVEL_MIN: u8 = 1;
/// The highest (most internal) level, and the one a spec gets unless told.
pub const LEVEL_MAX: u8 = 9;

/// Everything about a parameter except its current value: name, kind and
/// bounds, default, help text and level.
///
/// The default is written as text, exactly as a user would write it in a
/// config file (`"64k"`, `"send,put"`), and is parsed by the same code at
/// registration: a default that fails its own validation is a registration
/// error, never a silently wrong value.
///
/// Specs are registered by `&'static` reference, so declare them as `const`
/// or `static` items (or `&const { ... }` inline).
///
/// Levels follow `ompi_info`: 1–3 for end users (basic, detailed, all),
/// 4–6 for application tuners, 7–9 for developers of the transport.
///
/// ```
/// use btl_core::mca::{ParamKind, ParamSpec};
///
/// const EAGER_LIMIT: ParamSpec = ParamSpec::new(
///     "btl", "tcp", "eager_limit",
///     ParamKind::Size { min: 1024, max: 4 << 30 },
///     "64k",
/// )
/// .help("Largest message sent eagerly, without a rendezvous")
/// .level(4);
/// assert_eq!(EAGER_LIMIT.name.env().to_string(), "BTL_TCP_EAGER_LIMIT");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// The parameter's name.
    pub name: ParamName,
    /// Its type and bounds.
    pub kind: ParamKind,
    /// Its default, as text in the syntax of its kind.
    pub default: &'static str,
    /// One or two sentences for `btl info`: what it controls and why one
    /// would change it.
    pub help: &'static str,
    /// Its level, [`LEVEL_MIN`]`..=`[`LEVEL_MAX`].
    pub level: u8,
}

impl ParamSpec {
    /// A spec with no help text at level [`LEVEL_MAX`]; chain
    /// [`help`](Self::help) and [`level`](Self::level) to complete it.
    pub const fn new(
        framework: &'static str,
        component: &'static str,
        name: &'static str,
        kind: ParamKind,
        default: &'static str,
    ) -> Self {
        Self {
            name: ParamName::new(framework, component, name),
            kind,
            default,
            help: "",
            level: LEVEL_MAX,
        }
    }

    /// Sets the help text.
    pub const fn help(mut self, help: &'static str) -> Self {
        self.help = help;
        self
    }

    /// Sets the level (checked at registration).
    pub const fn level(mut self, level: u8) -> Self {
        self.level = level;
        self
    }
}
