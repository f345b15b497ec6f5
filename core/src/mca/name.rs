//! Parameter names: `<framework>_<component>_<name>` and the environment
//! variable that goes with each.

use core::fmt::{self, Write};

/// The three parts of a parameter's name.
///
/// The full name joins the non-empty parts with `_`: `btl_tcp_eager_limit`
/// for (`btl`, `tcp`, `eager_limit`). Framework-level parameters leave the
/// component and/or the name empty: the selection list is (`btl`, ``, ``),
/// named just `btl`. Parts use lowercase ASCII letters, digits and `_`, so
/// that the upper-cased full name is a portable environment variable name.
///
/// Two names are the same parameter when their full names are equal, even if
/// split differently (`btl`+`tcp`+`x_y` and `btl`+`tcp_x`+`y`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamName {
    /// The framework, e.g. `btl`; never empty.
    pub framework: &'static str,
    /// The component, e.g. `tcp`; empty for framework-level parameters.
    pub component: &'static str,
    /// The parameter within the component, e.g. `eager_limit`; may be empty.
    pub name: &'static str,
}

impl ParamName {
    /// Builds a name from its parts; [`validate`](Self::validate) checks it.
    pub const fn new(framework: &'static str, component: &'static str, name: &'static str) -> Self {
        Self {
            framework,
            component,
            name,
        }
    }

    /// Checks the rules of the type: a non-empty framework and only
    /// `[a-z0-9_]` in every part. Returns what is wrong otherwise.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.framework.is_empty() {
            return Err("the framework part is empty");
        }
        let ok = |part: &str| {
            part.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if !(ok(self.framework) && ok(self.component) && ok(self.name)) {
            return Err("names may only use lowercase ASCII letters, digits and `_`");
        }
        Ok(())
    }

    /// The bytes of the full name, without building it.
    fn bytes(&self) -> impl Iterator<Item = u8> + 'static {
        [self.framework, self.component, self.name]
            .into_iter()
            .filter(|part| !part.is_empty())
            .enumerate()
            .flat_map(|(i, part)| (i > 0).then_some(b'_').into_iter().chain(part.bytes()))
    }

    /// Whether the full name equals `full` exactly (case-sensitive).
    pub fn matches(&self, full: &str) -> bool {
        self.bytes().eq(full.bytes())
    }

    /// Whether `self` and `other` have the same full name.
    pub fn same_as(&self, other: &ParamName) -> bool {
        self.bytes().eq(other.bytes())
    }

    /// The environment variable that sets this parameter: the full name
    /// upper-cased (`BTL_TCP_EAGER_LIMIT`, `BTL`).
    pub const fn env(self) -> EnvName {
        EnvName(self)
    }
}

impl fmt::Display for ParamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.bytes().try_for_each(|b| f.write_char(char::from(b)))
    }
}

/// The environment variable name of a parameter, printed on demand so that
/// no buffer is needed: `format!("{}", name.env())` gives `BTL_TCP_EAGER_LIMIT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EnvName(pub ParamName);

impl EnvName {
    /// Whether this variable name equals `var` exactly (case-sensitive, as
    /// environment variables are on Unix).
    pub fn matches(&self, var: &str) -> bool {
        self.0
            .bytes()
            .map(|b| b.to_ascii_uppercase())
            .eq(var.bytes())
    }
}

impl fmt::Display for EnvName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0
            .bytes()
            .try_for_each(|b| f.write_char(char::from(b.to_ascii_uppercase())))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn full_name_joins_non_empty_parts() {
        assert_eq!(
            ParamName::new("btl", "tcp", "eager_limit").to_string(),
            "btl_tcp_eager_limit"
        );
        assert_eq!(ParamName::new("btl", "", "").to_string(), "btl");
        assert_eq!(
            ParamName::new("btl", "", "verbose").to_string(),
            "btl_verbose"
        );
        assert_eq!(ParamName::new("btl", "tcp", "").to_string(), "btl_tcp");
    }

    #[test]
    fn env_name_is_upper_case_full_name() {
        let n = ParamName::new("btl", "tcp", "eager_limit");
        assert_eq!(n.env().to_string(), "BTL_TCP_EAGER_LIMIT");
        assert!(n.env().matches("BTL_TCP_EAGER_LIMIT"));
        assert!(!n.env().matches("btl_tcp_eager_limit"));
        assert!(!n.env().matches("BTL_TCP_EAGER_LIMIT_X"));
        assert_eq!(ParamName::new("btl", "", "").env().to_string(), "BTL");
    }

    #[test]
    fn matching_is_by_full_name() {
        let a = ParamName::new("btl", "tcp", "x_y");
        let b = ParamName::new("btl", "tcp_x", "y");
        assert!(a.same_as(&b));
        assert!(a.matches("btl_tcp_x_y"));
        assert!(!a.matches("btl_tcp_x"));
        assert!(!a.matches("btl_tcp_x_y_"));
        assert!(!a.matches("BTL_TCP_X_Y"));
        assert!(!a.matches(""));
    }

    #[test]
    fn validation() {
        assert!(
            ParamName::new("btl", "tcp", "eager_limit")
                .validate()
                .is_ok()
        );
        assert!(ParamName::new("btl", "", "").validate().is_ok());
        assert!(ParamName::new("", "tcp", "x").validate().is_err());
        assert!(ParamName::new("btl", "TCP", "x").validate().is_err());
        assert!(
            ParamName::new("btl", "tcp", "eager-limit")
                .validate()
                .is_err()
        );
        assert!(ParamName::new("btl", "tcp", "a b").validate().is_err());
    }
}
