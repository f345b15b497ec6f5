//! The parameter registry: registration, setting from prioritised sources,
//! typed lookup, and iteration for `btl info`.

use core::fmt;

use super::excerpt::Excerpt;
use super::name::ParamName;
use super::param::{ListValue, ParamValue, ValueError};
use super::source::Source;
use super::spec::{LEVEL_MAX, LEVEL_MIN, ParamSpec};

/// A handle to a registered parameter, returned by [`Params::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParamId(usize);

impl ParamId {
    /// The position of the parameter in registration order.
    pub const fn index(self) -> usize {
        self.0
    }
}

/// A read-only view of one parameter: its spec, current value and where the
/// value came from. This is what `btl info` prints.
#[derive(Clone, Copy, Debug)]
pub struct Param<'a> {
    /// The parameter's handle.
    pub id: ParamId,
    /// Its description.
    pub spec: &'static ParamSpec,
    /// Its current value; `Display` prints it canonically.
    pub value: &'a ParamValue,
    /// The source of the current value.
    pub source: Source,
}

impl Param<'_> {
    fn wrong_kind(&self, expected: &'static str) -> AccessError {
        AccessError::WrongKind {
            param: &self.spec.name,
            expected,
            found: self.value.kind_name(),
        }
    }
}

/// What a set did, when the value was valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// The value is now the parameter's value.
    Applied,
    /// The value was valid but a source of higher precedence had already
    /// set the parameter, so it was left unchanged.
    Ignored {
        /// The source of the value that stays.
        current: Source,
    },
}

/// Why a parameter could not be registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// The name breaks the naming rules of [`ParamName`].
    InvalidName {
        /// The offending name.
        param: &'static ParamName,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The level is outside `1..=9`.
    InvalidLevel {
        /// The parameter.
        param: &'static ParamName,
        /// The level given.
        level: u8,
    },
    /// The kind is unusable (bounds out of order, bad flag table).
    InvalidKind {
        /// The parameter.
        param: &'static ParamName,
        /// What is wrong with the kind.
        reason: &'static str,
    },
    /// The default fails the parameter's own validation.
    InvalidDefault {
        /// The parameter.
        param: &'static ParamName,
        /// The default text.
        default: &'static str,
        /// What is wrong with it.
        problem: ValueError,
    },
    /// A parameter with the same full name is already registered.
    Duplicate {
        /// The name.
        param: &'static ParamName,
    },
    /// The registry has no room left.
    Full {
        /// The parameter that did not fit.
        param: &'static ParamName,
        /// The registry's capacity.
        capacity: usize,
    },
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::InvalidName { param, reason } => {
                write!(f, "invalid parameter name `{param}`: {reason}")
            }
            RegisterError::InvalidLevel { param, level } => write!(
                f,
                "parameter {param}: level {level} is outside {LEVEL_MIN}..={LEVEL_MAX}"
            ),
            RegisterError::InvalidKind { param, reason } => {
                write!(f, "parameter {param}: invalid kind: {reason}")
            }
            RegisterError::InvalidDefault {
                param,
                default,
                problem,
            } => write!(
                f,
                "parameter {param}: invalid default `{}`: {problem}",
                Excerpt::new(default)
            ),
            RegisterError::Duplicate { param } => {
                write!(f, "parameter {param} is already registered")
            }
            RegisterError::Full { param, capacity } => write!(
                f,
                "cannot register parameter {param}: the registry is full ({capacity} parameters)"
            ),
        }
    }
}

impl core::error::Error for RegisterError {}

/// Why a value could not be set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetError {
    /// No parameter has this full name.
    UnknownName {
        /// The name as given.
        name: Excerpt,
        /// Where the name came from.
        origin: Source,
    },
    /// The id does not belong to this registry.
    UnknownId {
        /// The id given.
        id: ParamId,
    },
    /// The value is not valid for the parameter.
    InvalidValue {
        /// The parameter.
        param: &'static ParamName,
        /// The value as given (truncated if long).
        value: Excerpt,
        /// Where the value came from.
        origin: Source,
        /// What is wrong with it.
        problem: ValueError,
    },
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::UnknownName { name, origin } => {
                write!(f, "unknown parameter `{name}` (from {origin})")
            }
            SetError::UnknownId { id } => {
                write!(f, "no parameter with id {} in this registry", id.index())
            }
            SetError::InvalidValue {
                param,
                value,
                origin,
                problem,
            } => {
                write!(f, "invalid value `{value}` for parameter {param} (from ")?;
                match origin {
                    Source::Environment => write!(f, "environment variable {}", param.env())?,
                    other => write!(f, "{other}")?,
                }
                write!(f, "): {problem}")
            }
        }
    }
}

impl core::error::Error for SetError {}

/// A typed getter was used with an id it cannot serve; both cases are
/// programming errors, reported rather than panicking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// The id does not belong to this registry.
    UnknownId {
        /// The id given.
        id: ParamId,
    },
    /// The parameter is of another kind than the getter's.
    WrongKind {
        /// The parameter.
        param: &'static ParamName,
        /// The getter's kind.
        expected: &'static str,
        /// The parameter's kind.
        found: &'static str,
    },
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::UnknownId { id } => {
                write!(f, "no parameter with id {} in this registry", id.index())
            }
            AccessError::WrongKind {
                param,
                expected,
                found,
            } => write!(f, "parameter {param} is of kind {found}, not {expected}"),
        }
    }
}

impl core::error::Error for AccessError {}

/// A parameter registry as components see it: object-safe, so that a
/// component takes `&mut dyn Params` and works with a registry of any
/// capacity.
///
/// # Design
///
/// [`Registry<N>`] owns a fixed array of `N` entries, so a driver can keep
/// one in a struct with no lifetime and no allocation. Components, which are
/// written once and must work with any capacity, never name `N`: they see the
/// registry as `&mut dyn Params` (register) or `&dyn Params` (read), an
/// object-safe trait that `Registry<N>` implements for every `N`. Typed
/// getters and lookups are provided methods of the trait, so they work the
/// same on the concrete type and on the trait object.
///
/// Specs are registered by `&'static` reference (components declare them
/// as `const` or `static` items): an entry then costs a pointer plus the
/// value, and errors can name the parameter without copying its name.
///
/// A [`ParamId`] is the index of a parameter in the registry that returned
/// it. Using it with another registry is a programming error that the
/// getters report as [`AccessError`], never a panic.
pub trait Params {
    /// Registers a parameter, validating its spec and parsing its default
    /// (which becomes the value, with [`Source::Default`]).
    fn register(&mut self, spec: &'static ParamSpec) -> Result<ParamId, RegisterError>;

    /// The parameter with this id, if it belongs to this registry.
    fn param(&self, id: ParamId) -> Option<Param<'_>>;

    /// How many parameters are registered; ids are `0..len` in order.
    fn len(&self) -> usize;

    /// Parses `text` as the parameter's kind and sets it if `origin` has at
    /// least the precedence of the current value's source. An invalid value
    /// is an error even when it would have been ignored.
    fn set(&mut self, id: ParamId, text: &str, origin: Source) -> Result<SetOutcome, SetError>;

    /// Sets a typed value, with the same validation and precedence as
    /// [`set`](Self::set). For flags, the bits are checked against the
    /// parameter's table, and the `names` of the value given are ignored.
    fn set_value(
        &mut self,
        id: ParamId,
        value: ParamValue,
        origin: Source,
    ) -> Result<SetOutcome, SetError>;

    /// Whether no parameter is registered.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parameter whose full name is `name` (`btl_tcp_eager_limit`).
    fn find(&self, name: &str) -> Option<ParamId> {
        (0..self.len())
            .map(ParamId)
            .find(|&id| self.param(id).is_some_and(|p| p.spec.name.matches(name)))
    }

    /// The parameter whose environment variable is `var`
    /// (`BTL_TCP_EAGER_LIMIT`).
    fn find_env(&self, var: &str) -> Option<ParamId> {
        (0..self.len()).map(ParamId).find(|&id| {
            self.param(id)
                .is_some_and(|p| p.spec.name.env().matches(var))
        })
    }

    /// [`set`](Self::set) by full name: how config files and command lines
    /// name parameters.
    fn set_by_name(
        &mut self,
        name: &str,
        text: &str,
        origin: Source,
    ) -> Result<SetOutcome, SetError> {
        let id = self.find(name).ok_or_else(|| SetError::UnknownName {
            name: Excerpt::new(name),
            origin,
        })?;
        self.set(id, text, origin)
    }

    /// The current value, of any kind.
    fn value(&self, id: ParamId) -> Result<&ParamValue, AccessError> {
        self.param(id)
            .map(|p| p.value)
            .ok_or(AccessError::UnknownId { id })
    }

    /// The value of an integer parameter.
    fn int(&self, id: ParamId) -> Result<i64, AccessError> {
        let p = self.param(id).ok_or(AccessError::UnknownId { id })?;
        match *p.value {
            ParamValue::Int(v) => Ok(v),
            _ => Err(p.wrong_kind("int")),
        }
    }

    /// The value of a size parameter, in bytes.
    fn size(&self, id: ParamId) -> Result<u64, AccessError> {
        let p = self.param(id).ok_or(AccessError::UnknownId { id })?;
        match *p.value {
            ParamValue::Size(v) => Ok(v),
            _ => Err(p.wrong_kind("size")),
        }
    }

    /// The value of a boolean parameter.
    fn bool(&self, id: ParamId) -> Result<bool, AccessError> {
        let p = self.param(id).ok_or(AccessError::UnknownId { id })?;
        match *p.value {
            ParamValue::Bool(v) => Ok(v),
            _ => Err(p.wrong_kind("bool")),
        }
    }

    /// The value of a string parameter.
    fn str(&self, id: ParamId) -> Result<&str, AccessError> {
        let p = self.param(id).ok_or(AccessError::UnknownId { id })?;
        match p.value {
            ParamValue::Str(s) => Ok(s.as_str()),
            _ => Err(p.wrong_kind("string")),
        }
    }

    /// The value of a list parameter; iterate it for the items.
    fn list(&self, id: ParamId) -> Result<&ListValue, AccessError> {
        let p = self.param(id).ok_or(AccessError::UnknownId { id })?;
        match p.value {
            ParamValue::List(l) => Ok(l),
            _ => Err(p.wrong_kind("list")),
        }
    }

    /// The bitmask of a flags parameter (bit `i` for name `i` of its table).
    fn flags(&self, id: ParamId) -> Result<u32, AccessError> {
        let p = self.param(id).ok_or(AccessError::UnknownId { id })?;
        match *p.value {
            ParamValue::Flags { bits, .. } => Ok(bits),
            _ => Err(p.wrong_kind("flags")),
        }
    }
}

impl dyn Params + '_ {
    /// All parameters in registration order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            params: self,
            next: 0,
        }
    }
}

/// The parameters of a registry in registration order.
#[derive(Clone, Copy)]
pub struct Iter<'a> {
    params: &'a dyn Params,
    next: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Param<'a>;

    fn next(&mut self) -> Option<Param<'a>> {
        let p = self.params.param(ParamId(self.next))?;
        self.next += 1;
        Some(p)
    }
}

impl fmt::Debug for Iter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").field("next", &self.next).finish()
    }
}

#[derive(Clone, Debug)]
struct Entry {
    spec: &'static ParamSpec,
    value: ParamValue,
    source: Source,
}

impl Entry {
    fn apply(&mut self, value: ParamValue, origin: Source) -> SetOutcome {
        if origin.overrides(self.source) {
            self.value = value;
            self.source = origin;
            SetOutcome::Applied
        } else {
            SetOutcome::Ignored {
                current: self.source,
            }
        }
    }
}

/// A registry with room for `N` parameters, stored inline.
///
/// Use it directly where the capacity is known (a driver, `btl info`);
/// hand it to components as `&mut dyn Params`.
#[derive(Clone, Debug)]
pub struct Registry<const N: usize> {
    entries: heapless::Vec<Entry, N>,
}

impl<const N: usize> Registry<N> {
    /// An empty registry.
    pub const fn new() -> Self {
        Self {
            entries: heapless::Vec::new(),
        }
    }

    /// How many parameters fit.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// All parameters in registration order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            params: self,
            next: 0,
        }
    }
}

impl<const N: usize> Default for Registry<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Params for Registry<N> {
    fn register(&mut self, spec: &'static ParamSpec) -> Result<ParamId, RegisterError> {
        let param = &spec.name;
        param
            .validate()
            .map_err(|reason| RegisterError::InvalidName { param, reason })?;
        if !(LEVEL_MIN..=LEVEL_MAX).contains(&spec.level) {
            return Err(RegisterError::InvalidLevel {
                param,
                level: spec.level,
            });
        }
        spec.kind
            .validate()
            .map_err(|reason| RegisterError::InvalidKind { param, reason })?;
        let value =
            spec.kind
                .parse(spec.default)
                .map_err(|problem| RegisterError::InvalidDefault {
                    param,
                    default: spec.default,
                    problem,
                })?;
        if self.entries.iter().any(|e| e.spec.name.same_as(param)) {
            return Err(RegisterError::Duplicate { param });
        }
        let id = ParamId(self.entries.len());
        self.entries
            .push(Entry {
                spec,
                value,
                source: Source::Default,
            })
            .map_err(|_| RegisterError::Full { param, capacity: N })?;
        Ok(id)
    }

    fn param(&self, id: ParamId) -> Option<Param<'_>> {
        self.entries.get(id.0).map(|e| Param {
            id,
            spec: e.spec,
            value: &e.value,
            source: e.source,
        })
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn set(&mut self, id: ParamId, text: &str, origin: Source) -> Result<SetOutcome, SetError> {
        let entry = self
            .entries
            .get_mut(id.0)
            .ok_or(SetError::UnknownId { id })?;
        let value = entry
            .spec
            .kind
            .parse(text)
            .map_err(|problem| SetError::InvalidValue {
                param: &entry.spec.name,
                value: Excerpt::new(text),
                origin,
                problem,
            })?;
        Ok(entry.apply(value, origin))
    }

    fn set_value(
        &mut self,
        id: ParamId,
        value: ParamValue,
        origin: Source,
    ) -> Result<SetOutcome, SetError> {
        let entry = self
            .entries
            .get_mut(id.0)
            .ok_or(SetError::UnknownId { id })?;
        let shown = Excerpt::of(&value);
        let value = entry
            .spec
            .kind
            .check(value)
            .map_err(|problem| SetError::InvalidValue {
                param: &entry.spec.name,
                value: shown,
                origin,
                problem,
            })?;
        Ok(entry.apply(value, origin))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::mca::param::{Limit, ParamKind};
    use proptest::prelude::*;
    use std::string::ToString;
    use std::vec::Vec;

    const FLAGS: &[&str] = &["send", "put", "get", "inplace"];

    const EAGER: ParamSpec = ParamSpec::new(
        "btl",
        "tcp",
        "eager_limit",
        ParamKind::Size {
            min: 1,
            max: 4 << 30,
        },
        "64k",
    )
    .help("Largest message sent eagerly")
    .level(4);
    const LINKS: ParamSpec = ParamSpec::new(
        "btl",
        "tcp",
        "links",
        ParamKind::Int { min: 1, max: 8 },
        "1",
    );
    const NODELAY: ParamSpec = ParamSpec::new("btl", "tcp", "nodelay", ParamKind::Bool, "yes");
    const IF_INCLUDE: ParamSpec = ParamSpec::new("btl", "tcp", "if_include", ParamKind::List, "");
    const LABEL: ParamSpec = ParamSpec::new("btl", "tcp", "label", ParamKind::Str, "fast");
    const TCP_FLAGS: ParamSpec = ParamSpec::new(
        "btl",
        "tcp",
        "flags",
        ParamKind::Flags { names: FLAGS },
        "send,put",
    );
    const N: ParamSpec = ParamSpec::new("btl", "x", "n", ParamKind::INT, "-1");

    fn full_set() -> Registry<8> {
        let mut r = Registry::<8>::new();
        for spec in [&EAGER, &LINKS, &NODELAY, &IF_INCLUDE, &LABEL, &TCP_FLAGS] {
            r.register(spec).expect("valid spec");
        }
        r
    }

    #[test]
    fn register_and_read_defaults() {
        let r = full_set();
        let p: &dyn Params = &r;
        assert_eq!(p.len(), 6);
        assert!(!p.is_empty());
        let id = |n: &str| p.find(n).expect(n);
        assert_eq!(p.size(id("btl_tcp_eager_limit")), Ok(65536));
        assert_eq!(p.int(id("btl_tcp_links")), Ok(1));
        assert_eq!(p.bool(id("btl_tcp_nodelay")), Ok(true));
        assert!(p.list(id("btl_tcp_if_include")).expect("list").is_empty());
        assert_eq!(p.str(id("btl_tcp_label")), Ok("fast"));
        assert_eq!(p.flags(id("btl_tcp_flags")), Ok(0b11));
        let e = p.param(id("btl_tcp_eager_limit")).expect("param");
        assert_eq!(e.source, Source::Default);
        assert_eq!(e.value.to_string(), "64k");
        assert_eq!(e.spec.level, 4);
        assert_eq!(e.spec.help, "Largest message sent eagerly");
    }

    #[test]
    fn lookup_by_full_and_env_name() {
        let r = full_set();
        assert_eq!(r.find("btl_tcp_links").map(ParamId::index), Some(1));
        assert_eq!(r.find_env("BTL_TCP_LINKS").map(ParamId::index), Some(1));
        assert_eq!(r.find("BTL_TCP_LINKS"), None);
        assert_eq!(r.find_env("btl_tcp_links"), None);
        assert_eq!(r.find("btl_tcp"), None);
        assert_eq!(r.find(""), None);
    }

    #[test]
    fn iteration_gives_env_names_values_and_sources() {
        let mut r = full_set();
        r.set_by_name("btl_tcp_links", "3", Source::Environment)
            .expect("set");
        let lines: Vec<_> = r
            .iter()
            .map(|p| std::format!("{}={} ({})", p.spec.name.env(), p.value, p.source))
            .collect();
        assert_eq!(
            lines,
            [
                "BTL_TCP_EAGER_LIMIT=64k (default)",
                "BTL_TCP_LINKS=3 (environment)",
                "BTL_TCP_NODELAY=true (default)",
                "BTL_TCP_IF_INCLUDE= (default)",
                "BTL_TCP_LABEL=fast (default)",
                "BTL_TCP_FLAGS=send,put (default)",
            ]
        );
        let dynamic: &dyn Params = &r;
        assert_eq!(dynamic.iter().count(), 6);
        assert_eq!(
            dynamic.iter().map(|p| p.id.index()).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn framework_level_names() {
        let mut r = Registry::<4>::new();
        let sel = r
            .register(&const { ParamSpec::new("btl", "", "", ParamKind::List, "").level(2) })
            .expect("btl");
        let verbose = r
            .register(&const { ParamSpec::new("btl", "", "verbose", ParamKind::INT, "0") })
            .expect("btl_verbose");
        assert_eq!(r.find("btl"), Some(sel));
        assert_eq!(r.find_env("BTL"), Some(sel));
        assert_eq!(r.find("btl_verbose"), Some(verbose));
    }

    #[test]
    fn registration_errors() {
        let mut r = Registry::<2>::new();
        r.register(&EAGER).expect("first");
        let name = &EAGER.name;
        assert_eq!(
            r.register(&EAGER),
            Err(RegisterError::Duplicate { param: name })
        );
        // Same full name split differently is the same parameter.
        let split = &const { ParamSpec::new("btl", "tcp_eager", "limit", ParamKind::SIZE, "1") };
        assert!(matches!(
            r.register(split),
            Err(RegisterError::Duplicate { .. })
        ));
        assert_eq!(
            r.register(&const { EAGER.level(0) }),
            Err(RegisterError::InvalidLevel {
                param: name,
                level: 0
            })
        );
        assert_eq!(
            r.register(&const { EAGER.level(10) }),
            Err(RegisterError::InvalidLevel {
                param: name,
                level: 10
            })
        );
        const BAD_DEFAULT: ParamSpec = {
            let mut spec = EAGER;
            spec.default = "8G";
            spec
        };
        assert_eq!(
            r.register(&BAD_DEFAULT),
            Err(RegisterError::InvalidDefault {
                param: name,
                default: "8G",
                problem: ValueError::AboveMaximum(Limit::Size(4 << 30)),
            })
        );
        let bad_kind =
            &const { ParamSpec::new("btl", "tcp", "x", ParamKind::Int { min: 1, max: 0 }, "0") };
        assert!(matches!(
            r.register(bad_kind),
            Err(RegisterError::InvalidKind { .. })
        ));
        let bad_name = &const { ParamSpec::new("btl", "TCP", "x", ParamKind::INT, "0") };
        assert!(matches!(
            r.register(bad_name),
            Err(RegisterError::InvalidName { .. })
        ));
        let empty_fw = &const { ParamSpec::new("", "tcp", "x", ParamKind::INT, "0") };
        assert!(matches!(
            r.register(empty_fw),
            Err(RegisterError::InvalidName { .. })
        ));
        r.register(&const { ParamSpec::new("btl", "tcp", "a", ParamKind::INT, "0") })
            .expect("second fits");
        let third = &const { ParamSpec::new("btl", "tcp", "b", ParamKind::INT, "0") };
        assert_eq!(
            r.register(third),
            Err(RegisterError::Full {
                param: &third.name,
                capacity: 2
            })
        );
        assert_eq!(r.len(), 2);
        assert_eq!(r.capacity(), 2);
    }

    #[test]
    fn registration_error_texts() {
        let name = &EAGER.name;
        let cases = [
            (
                RegisterError::Duplicate { param: name },
                "parameter btl_tcp_eager_limit is already registered",
            ),
            (
                RegisterError::Full {
                    param: name,
                    capacity: 2,
                },
                "cannot register parameter btl_tcp_eager_limit: the registry is full (2 parameters)",
            ),
            (
                RegisterError::InvalidLevel {
                    param: name,
                    level: 0,
                },
                "parameter btl_tcp_eager_limit: level 0 is outside 1..=9",
            ),
            (
                RegisterError::InvalidDefault {
                    param: name,
                    default: "8G",
                    problem: ValueError::AboveMaximum(Limit::Size(4 << 30)),
                },
                "parameter btl_tcp_eager_limit: invalid default `8G`: above maximum 4G",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }

    #[test]
    fn bad_values_name_parameter_value_and_source() {
        let mut r = full_set();
        let id = r.find("btl_tcp_eager_limit").expect("id");
        let err = r
            .set(id, "99999999999G", Source::Environment)
            .expect_err("overflow");
        assert_eq!(
            err.to_string(),
            "invalid value `99999999999G` for parameter btl_tcp_eager_limit \
             (from environment variable BTL_TCP_EAGER_LIMIT): too large (does not fit in 64 bits)"
        );
        let err = r
            .set(id, "lots", Source::ConfigFile { line: 7 })
            .expect_err("not a size");
        assert_eq!(
            err.to_string(),
            "invalid value `lots` for parameter btl_tcp_eager_limit \
             (from config file line 7): not a size (expected digits with an optional k, M or G suffix)"
        );
        let err = r.set(id, "5G", Source::Code).expect_err("above max");
        assert_eq!(
            err.to_string(),
            "invalid value `5G` for parameter btl_tcp_eager_limit (from code): above maximum 4G"
        );
        let flags = r.find("btl_tcp_flags").expect("flags");
        let err = r
            .set(flags, "send,foo", Source::Environment)
            .expect_err("bad flag");
        assert_eq!(
            err.to_string(),
            "invalid value `send,foo` for parameter btl_tcp_flags \
             (from environment variable BTL_TCP_FLAGS): unknown flag `foo`, expected one of send,put,get,inplace"
        );
        // The failed sets changed nothing.
        assert_eq!(r.size(id), Ok(65536));
        assert_eq!(r.param(id).map(|p| p.source), Some(Source::Default));
    }

    #[test]
    fn long_bad_values_are_truncated_in_errors() {
        let mut r = full_set();
        let long = "9".repeat(500);
        let err = r
            .set_by_name("btl_tcp_links", &long, Source::Environment)
            .expect_err("too large");
        let SetError::InvalidValue { value, problem, .. } = &err else {
            panic!("unexpected {err:?}");
        };
        assert!(value.is_truncated());
        assert_eq!(*problem, ValueError::TooLarge);
        assert!(err.to_string().contains("999..."));
    }

    #[test]
    fn unknown_names_and_ids() {
        let mut r = full_set();
        let err = r
            .set_by_name("btl_tcp_eagre_limit", "1", Source::ConfigFile { line: 3 })
            .expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown parameter `btl_tcp_eagre_limit` (from config file line 3)"
        );
        let foreign = ParamId(42);
        assert_eq!(
            r.set(foreign, "1", Source::Code),
            Err(SetError::UnknownId { id: foreign })
        );
        assert_eq!(r.int(foreign), Err(AccessError::UnknownId { id: foreign }));
        assert!(r.param(foreign).is_none());
    }

    #[test]
    fn getters_check_the_kind() {
        let r = full_set();
        let id = r.find("btl_tcp_links").expect("id");
        let err = r.size(id).expect_err("wrong kind");
        assert_eq!(
            err,
            AccessError::WrongKind {
                param: &LINKS.name,
                expected: "size",
                found: "int"
            }
        );
        assert_eq!(
            err.to_string(),
            "parameter btl_tcp_links is of kind int, not size"
        );
        assert!(r.bool(id).is_err());
        assert!(r.str(id).is_err());
        assert!(r.list(id).is_err());
        assert!(r.flags(id).is_err());
        assert!(r.int(r.find("btl_tcp_nodelay").expect("id")).is_err());
    }

    #[test]
    fn typed_set_from_code() {
        let mut r = full_set();
        let links = r.find("btl_tcp_links").expect("id");
        assert_eq!(
            r.set_value(links, ParamValue::Int(4), Source::Code),
            Ok(SetOutcome::Applied)
        );
        assert_eq!(r.int(links), Ok(4));
        let err = r
            .set_value(links, ParamValue::Int(9), Source::Code)
            .expect_err("above max");
        assert_eq!(
            err.to_string(),
            "invalid value `9` for parameter btl_tcp_links (from code): above maximum 8"
        );
        assert!(
            r.set_value(links, ParamValue::Size(1), Source::Code)
                .is_err()
        );
        let flags = r.find("btl_tcp_flags").expect("id");
        r.set_value(
            flags,
            ParamValue::Flags {
                bits: 0b1100,
                names: &[],
            },
            Source::Code,
        )
        .expect("known bits");
        assert_eq!(r.flags(flags), Ok(0b1100));
        assert_eq!(r.value(flags).expect("value").to_string(), "get,inplace");
    }

    #[test]
    fn list_getter_iterates_items() {
        let mut r = full_set();
        let id = r.find("btl_tcp_if_include").expect("id");
        r.set(id, "eth0, 10.0.0.0/8", Source::Environment)
            .expect("valid");
        let items: Vec<&str> = r.list(id).expect("list").into_iter().collect();
        assert_eq!(items, ["eth0", "10.0.0.0/8"]);
    }

    #[test]
    fn precedence_in_every_order() {
        let sources = [
            (Source::Default, "1"),
            (Source::ConfigFile { line: 1 }, "2"),
            (Source::Environment, "3"),
            (Source::Code, "4"),
        ];
        // All 24 orders of the four sources: the highest always wins.
        let mut order = [0usize, 1, 2, 3];
        let mut seen = 0;
        permute(&mut order, 0, &mut |perm| {
            seen += 1;
            let mut r = Registry::<1>::new();
            let id = r.register(&N).expect("register");
            for &i in perm {
                let (source, text) = sources[i];
                let outcome = r.set(id, text, source).expect("valid");
                let current = r.param(id).expect("param").source;
                assert_eq!(outcome == SetOutcome::Applied, current == source);
            }
            assert_eq!(r.int(id), Ok(4), "{perm:?}");
            assert_eq!(r.param(id).map(|p| p.source), Some(Source::Code));
        });
        assert_eq!(seen, 24);
    }

    fn permute(v: &mut [usize; 4], k: usize, f: &mut dyn FnMut(&[usize; 4])) {
        if k == v.len() {
            f(v);
            return;
        }
        for i in k..v.len() {
            v.swap(k, i);
            permute(v, k + 1, f);
            v.swap(k, i);
        }
    }

    #[test]
    fn lower_precedence_is_ignored_equal_overwrites() {
        let mut r = full_set();
        let id = r.find("btl_tcp_links").expect("id");
        assert_eq!(r.set(id, "2", Source::Environment), Ok(SetOutcome::Applied));
        assert_eq!(
            r.set(id, "3", Source::ConfigFile { line: 4 }),
            Ok(SetOutcome::Ignored {
                current: Source::Environment
            })
        );
        assert_eq!(r.int(id), Ok(2));
        assert_eq!(r.set(id, "5", Source::Environment), Ok(SetOutcome::Applied));
        assert_eq!(r.int(id), Ok(5));
        // Later config-file lines override earlier ones.
        let label = r.find("btl_tcp_label").expect("id");
        r.set(label, "a", Source::ConfigFile { line: 1 })
            .expect("ok");
        r.set(label, "b", Source::ConfigFile { line: 2 })
            .expect("ok");
        assert_eq!(r.str(label), Ok("b"));
        // An invalid value from a shadowed source is still reported.
        assert!(r.set(id, "x", Source::Default).is_err());
    }

    fn source_strategy() -> impl Strategy<Value = Source> {
        prop_oneof![
            Just(Source::Default),
            (1u32..100).prop_map(|line| Source::ConfigFile { line }),
            Just(Source::Environment),
            Just(Source::Code),
        ]
    }

    proptest! {
        #[test]
        fn final_value_is_last_of_highest_precedence(
            sets in prop::collection::vec((source_strategy(), any::<i64>()), 0..12)
        ) {
            let mut r = Registry::<1>::new();
            let id = r
                .register(&N)
                .expect("register");
            for (source, v) in &sets {
                r.set(id, &v.to_string(), *source).expect("valid");
            }
            let expected = sets
                .iter()
                .enumerate()
                .max_by_key(|(i, (s, _))| (s.precedence(), *i))
                .map(|(_, (s, v))| (*v, s.precedence()))
                .unwrap_or((-1, 0));
            let p = r.param(id).expect("param");
            prop_assert_eq!(r.int(id), Ok(expected.0));
            prop_assert_eq!(p.source.precedence(), expected.1);
        }

        #[test]
        fn setting_any_text_never_panics(name in ".{0,40}", text in ".{0,200}") {
            let mut r = full_set();
            let _ = r.set_by_name(&name, &text, Source::Environment);
            for i in 0..r.len() {
                let _ = r.set(ParamId(i), &text, Source::ConfigFile { line: 1 });
            }
            let _ = r.find(&name);
            let _ = r.find_env(&name);
        }
    }
}
