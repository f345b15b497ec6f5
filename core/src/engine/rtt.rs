//! Retransmission timeout from measured round trips, after RFC 6298.
//!
//! The first sample `R` sets `SRTT = R` and `RTTVAR = R / 2`; each later
//! sample `R'` sets `RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'|`, then
//! `SRTT = 7/8 SRTT + 1/8 R'`. The timeout is `SRTT + 4 RTTVAR`, clamped to
//! the configured bounds, and doubles (up to the maximum) on every expiry
//! until the next sample recomputes it. Samples must obey Karn's rule (never
//! from a retransmitted packet); [`SendWindow::on_ack`] only offers such
//! samples.
//!
//! The arithmetic is integer only, in nanoseconds (no float unit needed on
//! Cortex-M); the clock granularity term `G` of the RFC is left to
//! `min_rto`.
//!
//! [`SendWindow::on_ack`]: super::window::SendWindow::on_ack

use core::fmt;

use crate::time::Duration;

/// The bounds of an [`RttEstimator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttConfig {
    /// Timeout before any sample has been taken.
    pub initial_rto: Duration,
    /// Floor of the timeout: guards against spurious retransmissions when
    /// the measured variance is tiny.
    pub min_rto: Duration,
    /// Ceiling of the timeout, also of its backoff.
    pub max_rto: Duration,
}

impl RttConfig {
    /// The values RFC 6298 recommends for the Internet: 1 s initial and
    /// minimum, 60 s maximum. Much too slow for a data-centre fabric, where
    /// the parameters should be set from the link.
    pub const RFC6298: RttConfig = RttConfig {
        initial_rto: Duration::from_secs(1),
        min_rto: Duration::from_secs(1),
        max_rto: Duration::from_secs(60),
    };

    /// Bounds for a data-centre network, the engine's default: 50 ms
    /// before any sample, at least 2 ms, at most 2 s.
    pub const DATA_CENTRE: RttConfig = RttConfig {
        initial_rto: Duration::from_millis(50),
        min_rto: Duration::from_millis(2),
        max_rto: Duration::from_secs(2),
    };

    /// The nearest valid bounds: the maximum raised to the minimum, the
    /// initial timeout clamped between them. Lets a component build an
    /// estimator from user parameters it has already reported on.
    pub const fn normalized(self) -> RttConfig {
        let max_rto = if self.max_rto.as_nanos() < self.min_rto.as_nanos() {
            self.min_rto
        } else {
            self.max_rto
        };
        let initial_rto = if self.initial_rto.as_nanos() < self.min_rto.as_nanos() {
            self.min_rto
        } else if self.initial_rto.as_nanos() > max_rto.as_nanos() {
            max_rto
        } else {
            self.initial_rto
        };
        RttConfig {
            initial_rto,
            min_rto: self.min_rto,
            max_rto,
        }
    }
}

/// Why an [`RttConfig`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RttConfigError {
    /// `min_rto` is above `max_rto`.
    MinAboveMax {
        /// The configured minimum.
        min: Duration,
        /// The configured maximum.
        max: Duration,
    },
    /// `initial_rto` lies outside `[min_rto, max_rto]`.
    InitialOutOfRange {
        /// The configured initial timeout.
        initial: Duration,
        /// The configured minimum.
        min: Duration,
        /// The configured maximum.
        max: Duration,
    },
}

impl fmt::Display for RttConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RttConfigError::MinAboveMax { min, max } => write!(
                f,
                "minimum retransmission timeout {min} is above the maximum {max}"
            ),
            RttConfigError::InitialOutOfRange { initial, min, max } => write!(
                f,
                "initial retransmission timeout {initial} is outside [{min}, {max}]"
            ),
        }
    }
}

impl core::error::Error for RttConfigError {}

/// Smoothed round-trip time and the retransmission timeout derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttEstimator {
    config: RttConfig,
    /// `None` until the first sample.
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    backoffs: u32,
}

impl RttEstimator {
    /// An estimator with no samples yet, whose timeout is `initial_rto`.
    pub fn new(config: RttConfig) -> Result<Self, RttConfigError> {
        let RttConfig {
            initial_rto: initial,
            min_rto: min,
            max_rto: max,
        } = config;
        if min > max {
            return Err(RttConfigError::MinAboveMax { min, max });
        }
        if !(min..=max).contains(&initial) {
            return Err(RttConfigError::InitialOutOfRange { initial, min, max });
        }
        Ok(RttEstimator {
            config,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: initial,
            backoffs: 0,
        })
    }

    /// An estimator with the nearest valid bounds to `config` (see
    /// [`RttConfig::normalized`]): for callers that have checked or
    /// reported their configuration already.
    pub const fn with_bounds(config: RttConfig) -> Self {
        let config = config.normalized();
        RttEstimator {
            config,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: config.initial_rto,
            backoffs: 0,
        }
    }

    /// Feeds one round-trip measurement (RFC 6298 section 2.2 and 2.3) and
    /// recomputes the timeout, which ends any backoff.
    pub fn on_sample(&mut self, rtt: Duration) {
        let (srtt, rttvar) = match self.srtt {
            None => (rtt, rtt / 2),
            Some(srtt) => {
                // RTTVAR uses the SRTT from before this sample. The blends
                // are computed in u128 and are at most the larger input, so
                // they fit back into u64.
                let (srtt, rtt) = (srtt.as_nanos(), rtt.as_nanos());
                let deviation = u128::from(srtt.abs_diff(rtt));
                let rttvar = (3 * u128::from(self.rttvar.as_nanos()) + deviation) / 4;
                let srtt = (7 * u128::from(srtt) + u128::from(rtt)) / 8;
                (narrow(srtt), narrow(rttvar))
            }
        };
        self.srtt = Some(srtt);
        self.rttvar = rttvar;
        self.rto = self.clamp(srtt + rttvar * 4);
        self.backoffs = 0;
    }

    /// An acknowledgement released packets but gave no sample (they had
    /// been retransmitted): the path works again, so the backoff ends and
    /// the timeout returns to what the samples so far say. Without this, a
    /// lossy path where most packets need a retransmission would keep the
    /// timeout at its maximum (Karn's rule leaves few samples).
    pub fn on_progress(&mut self) {
        if self.backoffs == 0 {
            return;
        }
        self.rto = match self.srtt {
            Some(srtt) => self.clamp(srtt + self.rttvar * 4),
            None => self.config.initial_rto,
        };
        self.backoffs = 0;
    }

    /// The retransmission timer expired: doubles the timeout, up to the
    /// maximum (RFC 6298 section 5.5).
    pub fn on_timeout(&mut self) {
        self.rto = self.clamp(self.rto * 2);
        self.backoffs = self.backoffs.saturating_add(1);
    }

    /// The current retransmission timeout.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// The smoothed round-trip time, once there has been a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The round-trip time variation (0 before the first sample).
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// Timeouts since the last sample: how long the peer has been silent,
    /// for an engine that gives up after so many.
    pub fn backoffs(&self) -> u32 {
        self.backoffs
    }

    /// The bounds this estimator was built with.
    pub fn config(&self) -> RttConfig {
        self.config
    }

    fn clamp(&self, rto: Duration) -> Duration {
        rto.clamp(self.config.min_rto, self.config.max_rto)
    }
}

/// A blend of two durations' nanoseconds back in a duration (it never
/// exceeds the larger).
fn narrow(v: u128) -> Duration {
    Duration::from_nanos(u64::try_from(v).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SECOND: u64 = 1_000_000_000;

    fn ns(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    fn estimator(initial: u64, min: u64, max: u64) -> RttEstimator {
        RttEstimator::new(RttConfig {
            initial_rto: ns(initial),
            min_rto: ns(min),
            max_rto: ns(max),
        })
        .expect("valid config")
    }

    #[test]
    fn initial_rto_until_the_first_sample() {
        let e = RttEstimator::new(RttConfig::RFC6298).expect("rfc config");
        assert_eq!(e.rto(), ns(SECOND));
        assert_eq!(e.srtt(), None);
        assert_eq!(e.rttvar(), ns(0));
    }

    #[test]
    fn samples_follow_rfc_6298() {
        let mut e = estimator(SECOND, MS, 60 * SECOND);
        // First: SRTT = 100, RTTVAR = 50, RTO = 100 + 4 * 50 = 300 (ms).
        e.on_sample(ns(100 * MS));
        assert_eq!(e.srtt(), Some(ns(100 * MS)));
        assert_eq!(e.rttvar(), ns(50 * MS));
        assert_eq!(e.rto(), ns(300 * MS));
        // Second, 200: RTTVAR = (3 * 50 + |100 - 200|) / 4 = 62.5,
        // SRTT = (7 * 100 + 200) / 8 = 112.5, RTO = 112.5 + 250 = 362.5.
        e.on_sample(ns(200 * MS));
        assert_eq!(e.rttvar(), ns(62_500_000));
        assert_eq!(e.srtt(), Some(ns(112_500_000)));
        assert_eq!(e.rto(), ns(362_500_000));
        // Third, 112.5 (equal to SRTT): RTTVAR = 3/4 * 62.5 = 46.875,
        // SRTT unchanged, RTO = 112.5 + 187.5 = 300.
        e.on_sample(ns(112_500_000));
        assert_eq!(e.rttvar(), ns(46_875_000));
        assert_eq!(e.srtt(), Some(ns(112_500_000)));
        assert_eq!(e.rto(), ns(300 * MS));
    }

    #[test]
    fn integer_division_truncates() {
        let mut e = estimator(10, 0, 1_000);
        e.on_sample(ns(3)); // SRTT 3, RTTVAR 1 (3 / 2), RTO 7.
        assert_eq!((e.srtt(), e.rttvar(), e.rto()), (Some(ns(3)), ns(1), ns(7)));
        e.on_sample(ns(4)); // RTTVAR (3 + 1) / 4 = 1, SRTT (21 + 4) / 8 = 3.
        assert_eq!((e.srtt(), e.rttvar(), e.rto()), (Some(ns(3)), ns(1), ns(7)));
    }

    #[test]
    fn rto_is_clamped() {
        let mut e = estimator(SECOND, 200 * MS, 2 * SECOND);
        e.on_sample(ns(MS)); // 1 + 4 * 0.5 = 3 ms, below the floor.
        assert_eq!(e.rto(), ns(200 * MS));
        e.on_sample(ns(10 * SECOND));
        assert_eq!(e.rto(), ns(2 * SECOND));
    }

    #[test]
    fn timeouts_back_off_until_the_next_sample() {
        let mut e = estimator(SECOND, 100 * MS, 5 * SECOND);
        e.on_timeout();
        assert_eq!((e.rto(), e.backoffs()), (ns(2 * SECOND), 1));
        e.on_timeout();
        assert_eq!(e.rto(), ns(4 * SECOND));
        e.on_timeout();
        assert_eq!((e.rto(), e.backoffs()), (ns(5 * SECOND), 3));
        e.on_timeout();
        assert_eq!(e.rto(), ns(5 * SECOND));
        e.on_sample(ns(100 * MS));
        assert_eq!((e.rto(), e.backoffs()), (ns(300 * MS), 0));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let mut e = estimator(u64::MAX, 0, u64::MAX);
        e.on_timeout();
        assert_eq!(e.rto(), ns(u64::MAX));
        e.on_sample(ns(u64::MAX));
        assert_eq!(e.rto(), ns(u64::MAX));
        e.on_sample(ns(0));
        e.on_sample(ns(u64::MAX));
        assert!(e.srtt().is_some());
        e.on_sample(ns(0));
        e.on_sample(ns(0));
        assert!(e.rto() > Duration::ZERO);
    }

    #[test]
    fn bad_configs_are_refused() {
        let cfg = |initial, min, max| RttConfig {
            initial_rto: ns(initial),
            min_rto: ns(min),
            max_rto: ns(max),
        };
        assert_eq!(
            RttEstimator::new(cfg(5, 10, 1)),
            Err(RttConfigError::MinAboveMax {
                min: ns(10),
                max: ns(1)
            })
        );
        assert_eq!(
            RttEstimator::new(cfg(50, 1, 10)),
            Err(RttConfigError::InitialOutOfRange {
                initial: ns(50),
                min: ns(1),
                max: ns(10)
            })
        );
        assert!(RttEstimator::new(cfg(0, 0, 0)).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn rto_stays_within_bounds(
            min in 0u64..1_000_000,
            span in 0u64..1_000_000,
            events in proptest::collection::vec(proptest::option::of(proptest::num::u64::ANY), 0..64),
        ) {
            let max = min + span;
            let mut e = estimator(min, min, max);
            for ev in events {
                match ev {
                    Some(rtt) => e.on_sample(ns(rtt)),
                    None => e.on_timeout(),
                }
                proptest::prop_assert!((ns(min)..=ns(max)).contains(&e.rto()));
            }
        }
    }
}
