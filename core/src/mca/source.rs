//! Where a parameter's value came from, and which source wins.

use core::fmt;

/// The origin of a parameter value.
///
/// Sources are ranked `Default` < `ConfigFile` < `Environment` < `Code`.
/// A set from a source ranked below the one that set the current value is
/// ignored; a set from an equal or higher one replaces it, so among equals
/// the last one wins (a later line of a config file overrides an earlier
/// one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The default from the parameter's registration.
    Default,
    /// A `name = value` line of a config file; the std crate names the file
    /// in its own error.
    ConfigFile {
        /// The 1-based line number in the file.
        line: u32,
    },
    /// An environment variable named after the parameter
    /// (`BTL_TCP_EAGER_LIMIT`).
    Environment,
    /// The application or a driver, through the API.
    Code,
}

impl Source {
    /// The rank of this source: a value set from a source of lower rank
    /// cannot replace one of higher rank.
    pub const fn precedence(self) -> u8 {
        match self {
            Source::Default => 0,
            Source::ConfigFile { .. } => 1,
            Source::Environment => 2,
            Source::Code => 3,
        }
    }

    /// Whether a value from `self` may replace a value that came from
    /// `current` (equal precedence overwrites: last wins).
    pub const fn overrides(self, current: Source) -> bool {
        self.precedence() >= current.precedence()
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::ConfigFile { line } => write!(f, "config file line {line}"),
            Source::Environment => f.write_str("environment"),
            Source::Code => f.write_str("code"),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn ranks_default_file_env_code() {
        let order = [
            Source::Default,
            Source::ConfigFile { line: 9 },
            Source::Environment,
            Source::Code,
        ];
        for (i, lower) in order.iter().enumerate() {
            for higher in &order[i + 1..] {
                assert!(higher.overrides(*lower));
                assert!(!lower.overrides(*higher));
            }
            assert!(lower.overrides(*lower));
        }
        assert!(Source::ConfigFile { line: 1 }.overrides(Source::ConfigFile { line: 7 }));
    }

    #[test]
    fn displays_for_humans() {
        assert_eq!(Source::Default.to_string(), "default");
        assert_eq!(
            Source::ConfigFile { line: 12 }.to_string(),
            "config file line 12"
        );
        assert_eq!(Source::Environment.to_string(), "environment");
        assert_eq!(Source::Code.to_string(), "code");
    }
}
