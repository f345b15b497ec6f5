//! Time as a driver tells it: an [`Instant`] on the driver's clock and a
//! [`Duration`] between two instants.
//!
//! The core never reads a clock. Every call that moves a state machine takes
//! `now`, and every timer it keeps is an `Instant` on the same clock, so a
//! driver may count from whatever start it likes (process start, boot, a
//! simulation's zero), as long as it never goes back.
//!
//! Both are whole nanoseconds in a `u64` (584 years), eight bytes each, so
//! a timer table on a microcontroller costs little. Arithmetic saturates:
//! a deadline past the end of the clock is the end of the clock (never),
//! and the time between an instant and a later one is zero. Timeouts from
//! users or peers can therefore be added without checks and never wrap into
//! the past.
//!
//! `Duration` converts to and from [`core::time::Duration`] (which
//! `std::time::Duration` is), saturating at about 584 years.

use core::fmt;
use core::ops::{Add, AddAssign, Div, Mul, Sub, SubAssign};

/// Nanoseconds in a microsecond, a millisecond and a second.
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// A point on the driver's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The start of the clock.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// The end of the clock: a deadline that never comes.
    pub const NEVER: Instant = Instant { nanos: u64::MAX };

    /// `nanos` nanoseconds after the start of the clock.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant { nanos }
    }

    /// `micros` microseconds after the start of the clock (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Instant::from_nanos(micros.saturating_mul(US))
    }

    /// `millis` milliseconds after the start of the clock (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Instant::from_nanos(millis.saturating_mul(MS))
    }

    /// `secs` seconds after the start of the clock (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Instant::from_nanos(secs.saturating_mul(S))
    }

    /// Nanoseconds since the start of the clock.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// The time since `earlier`; zero if `earlier` is not earlier.
    pub const fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }

    /// The time from now until `later`; zero if it has passed.
    pub const fn until(self, later: Instant) -> Duration {
        later.since(self)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates at [`Instant::NEVER`].
    fn add(self, d: Duration) -> Instant {
        Instant::from_nanos(self.nanos.saturating_add(d.nanos))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    /// Saturates at [`Instant::ZERO`].
    fn sub(self, d: Duration) -> Instant {
        Instant::from_nanos(self.nanos.saturating_sub(d.nanos))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;

    /// [`Instant::since`]: zero if `earlier` is later.
    fn sub(self, earlier: Instant) -> Duration {
        self.since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}", Duration::from_nanos(self.nanos))
    }
}

/// A span of time, in whole nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration {
    nanos: u64,
}

impl Duration {
    /// No time.
    pub const ZERO: Duration = Duration { nanos: 0 };
    /// The longest span: a timeout that never ends.
    pub const MAX: Duration = Duration { nanos: u64::MAX };

    /// `nanos` nanoseconds.
    pub const fn from_nanos(nanos: u64) -> Self {
        Duration { nanos }
    }

    /// `micros` microseconds (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Duration::from_nanos(micros.saturating_mul(US))
    }

    /// `millis` milliseconds (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Duration::from_nanos(millis.saturating_mul(MS))
    }

    /// `secs` seconds (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Duration::from_nanos(secs.saturating_mul(S))
    }

    /// Whole nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Whole microseconds (rounded down).
    pub const fn as_micros(self) -> u64 {
        self.nanos / US
    }

    /// Whole milliseconds (rounded down).
    pub const fn as_millis(self) -> u64 {
        self.nanos / MS
    }

    /// Whether this is no time at all.
    pub const fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// `self * n`, saturating at [`Duration::MAX`].
    pub const fn saturating_mul(self, n: u64) -> Duration {
        Duration::from_nanos(self.nanos.saturating_mul(n))
    }
}

impl Add for Duration {
    type Output = Duration;

    /// Saturates at [`Duration::MAX`].
    fn add(self, other: Duration) -> Duration {
        Duration::from_nanos(self.nanos.saturating_add(other.nanos))
    }
}

impl AddAssign for Duration {
    fn add_assign(&mut self, other: Duration) {
        *self = *self + other;
    }
}

impl Sub for Duration {
    type Output = Duration;

    /// Saturates at [`Duration::ZERO`].
    fn sub(self, other: Duration) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(other.nanos))
    }
}

impl SubAssign for Duration {
    fn sub_assign(&mut self, other: Duration) {
        *self = *self - other;
    }
}

impl Mul<u64> for Duration {
    type Output = Duration;

    /// Saturates at [`Duration::MAX`].
    fn mul(self, n: u64) -> Duration {
        self.saturating_mul(n)
    }
}

impl Mul<Duration> for u64 {
    type Output = Duration;

    /// Saturates at [`Duration::MAX`]: `200 * MS` reads as it is meant.
    fn mul(self, d: Duration) -> Duration {
        d.saturating_mul(self)
    }
}

impl Div<u64> for Duration {
    type Output = Duration;

    /// Rounds down. Division by zero gives [`Duration::MAX`], as for an
    /// interval split into no parts.
    fn div(self, n: u64) -> Duration {
        match self.nanos.checked_div(n) {
            Some(nanos) => Duration::from_nanos(nanos),
            None => Duration::MAX,
        }
    }
}

impl From<core::time::Duration> for Duration {
    /// Saturates at [`Duration::MAX`] (about 584 years).
    fn from(d: core::time::Duration) -> Self {
        Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Duration> for core::time::Duration {
    fn from(d: Duration) -> Self {
        core::time::Duration::from_nanos(d.nanos)
    }
}

impl fmt::Display for Duration {
    /// The largest whole unit that shows it exactly: `250 ms`, `1500 us`,
    /// `3 s`, `7 ns`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n == 0 {
            f.write_str("0 s")
        } else if n.is_multiple_of(S) {
            write!(f, "{} s", n / S)
        } else if n.is_multiple_of(MS) {
            write!(f, "{} ms", n / MS)
        } else if n.is_multiple_of(US) {
            write!(f, "{} us", n / US)
        } else {
            write!(f, "{n} ns")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::MAX, Instant::NEVER);
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(t - Instant::from_secs(1), Duration::ZERO);
        assert_eq!(Instant::from_secs(1) - t, Duration::from_millis(995));
        assert_eq!(Duration::MAX + Duration::from_nanos(1), Duration::MAX);
        assert_eq!(Duration::from_secs(1) * u64::MAX, Duration::MAX);
        assert_eq!(Duration::from_secs(1) / 0, Duration::MAX);
        assert_eq!(Duration::from_secs(1) / 4, Duration::from_millis(250));
    }

    #[test]
    fn units_convert_both_ways() {
        assert_eq!(Duration::from_millis(3).as_nanos(), 3_000_000);
        assert_eq!(Duration::from_micros(1500).as_millis(), 1);
        assert_eq!(Instant::from_secs(2).as_nanos(), 2_000_000_000);
        let std = core::time::Duration::from_millis(250);
        assert_eq!(Duration::from(std), Duration::from_millis(250));
        assert_eq!(core::time::Duration::from(Duration::from_millis(250)), std);
        let huge = core::time::Duration::from_secs(u64::MAX);
        assert_eq!(Duration::from(huge), Duration::MAX);
    }

    #[test]
    fn durations_print_in_their_largest_exact_unit() {
        assert_eq!(Duration::from_millis(250).to_string(), "250 ms");
        assert_eq!(Duration::from_micros(1500).to_string(), "1500 us");
        assert_eq!(Duration::from_secs(3).to_string(), "3 s");
        assert_eq!(Duration::from_nanos(7).to_string(), "7 ns");
        assert_eq!(Duration::ZERO.to_string(), "0 s");
        assert_eq!(Instant::from_millis(2).to_string(), "t+2 ms");
    }
}
