//! Components and parameters, after Open MPI's Modular Component
//! Architecture (MCA).
//!
//! - [`Component`]: the lifecycle a transport implements
//!   (register → open → init → close) and the [`Version`] of the framework
//!   interface it was written for.
//! - [`Registry`] and [`Params`]: typed, validated parameters named
//!   `<framework>_<component>_<name>` ([`ParamName`]), each with a default,
//!   help text and level, set from prioritised [`Source`]s
//!   (default < config file < environment < code).
//! - [`select`](select()): which components run, from the user's
//!   include/exclude list, exclusivity and priority.
//!
//! Everything here has a fixed capacity and parses untrusted text into
//! `Result`s: a bad value is an error that names the parameter, the value
//! and where it came from.
//!
//! ```
//! use btl_core::mca::{ParamKind, ParamSpec, Params, Registry, Source};
//!
//! const EAGER_LIMIT: ParamSpec =
//!     ParamSpec::new("btl", "tcp", "eager_limit", ParamKind::SIZE, "64k")
//!         .help("Largest message sent eagerly")
//!         .level(4);
//!
//! let mut registry = Registry::<16>::new();
//! let eager = registry.register(&EAGER_LIMIT)?;
//! // What a config file line `btl_tcp_eager_limit = 128k` does:
//! registry.set_by_name("btl_tcp_eager_limit", "128k", Source::ConfigFile { line: 1 })?;
//! // What BTL_TCP_EAGER_LIMIT=1M in the environment does:
//! registry.set(eager, "1M", Source::Environment)?;
//! assert_eq!(registry.size(eager)?, 1 << 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod component;
mod excerpt;
mod name;
mod param;
mod registry;
mod select;
mod source;
mod spec;
mod version;

pub use component::{Component, MAX_MODULES, Modules, NotAvailable, REASON_LEN, check_version};
pub use excerpt::{EXCERPT_LEN, Excerpt};
pub use name::{EnvName, ParamName};
pub use param::{
    DisplaySize, Limit, ListItems, ListValue, MAX_FLAGS, MAX_VALUE_LEN, ParamKind, ParamValue,
    ValueError, ValueString, parse_bool, parse_flags, parse_int, parse_size,
};
pub use registry::{
    AccessError, Iter, Param, ParamId, Params, RegisterError, Registry, SetError, SetOutcome,
};
pub use select::{
    BTL_FRAMEWORK, BTL_SELECTION_PARAM, Candidate, Exclusivity, FrameworkParams, SelectError,
    Selection, register_framework_params, select,
};
pub use source::Source;
pub use spec::{LEVEL_MAX, LEVEL_MIN, ParamSpec};
pub use version::{BTL_FRAMEWORK_VERSION, Version};
