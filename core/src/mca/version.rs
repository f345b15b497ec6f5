//! Version triples of components and of the framework interfaces they
//! implement.

use core::fmt;

/// A `major.minor.patch` version.
///
/// Components carry two: their own release, and the version of the
/// framework interface they were written against. A component is only used
/// when the latter is [compatible](Version::is_compatible_with) with the
/// framework's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Incremented on incompatible interface changes.
    pub major: u16,
    /// Incremented on backwards-compatible additions.
    pub minor: u16,
    /// Incremented on fixes that change no interface.
    pub patch: u16,
}

impl Version {
    /// Builds a version from its three parts.
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Whether code written against `self` works with `other`: same major
    /// version (minor and patch releases only add or fix).
    pub const fn is_compatible_with(self, other: Version) -> bool {
        self.major == other.major
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the BTL framework interface (the component lifecycle and,
/// later, the `Btl` trait) that this crate defines.
pub const BTL_FRAMEWORK_VERSION: Version = Version::new(1, 0, 0);

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn displays_as_dotted_triple() {
        assert_eq!(Version::new(2, 10, 3).to_string(), "2.10.3");
        assert_eq!(BTL_FRAMEWORK_VERSION.to_string(), "1.0.0");
    }

    #[test]
    fn compatible_means_same_major() {
        let v = Version::new(1, 0, 0);
        assert!(v.is_compatible_with(Version::new(1, 7, 2)));
        assert!(Version::new(1, 7, 2).is_compatible_with(v));
        assert!(!v.is_compatible_with(Version::new(2, 0, 0)));
        assert!(!v.is_compatible_with(Version::new(0, 9, 9)));
    }

    #[test]
    fn orders_by_major_minor_patch() {
        assert!(Version::new(1, 2, 3) < Version::new(1, 3, 0));
        assert!(Version::new(1, 9, 9) < Version::new(2, 0, 0));
    }
}
