//! How long the driver keeps passing over the sockets after its last
//! work before it sleeps: long enough to catch what comes next when the
//! gaps between arrivals have lately been short (a ping-pong of large
//! messages, a stream), no longer than the module's own `spin` when they
//! have been long (a service that hears from a client now and then), and
//! never past a ceiling.
//!
//! Sleeping costs a wake-up (tens of microseconds on a loaded host) each
//! time work comes back; spinning costs the core meanwhile. The gaps seen
//! decide which is cheaper, as [`Module::wait`](btl_std::Module::wait)
//! lets what each has cost decide whether it spins at all.

use std::time::Duration;

/// The spin of one driver.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spin {
    /// What it spins at least (under the ceiling): the module's `spin`.
    floor: Duration,
    /// What it spins at most.
    ceiling: Duration,
    /// A moving average of the gaps between one piece of work and the
    /// next, as seen when work came back after a pause.
    typical_gap: Option<Duration>,
}

impl Spin {
    /// A driver's spin: at least `floor`, at most `ceiling` (a floor
    /// above the ceiling is cut to it).
    pub(crate) fn new(floor: Duration, ceiling: Duration) -> Self {
        Spin {
            floor,
            ceiling,
            typical_gap: None,
        }
    }

    /// Sets the ceiling.
    pub(crate) fn limit(&mut self, ceiling: Duration) {
        self.ceiling = ceiling;
    }

    /// Work came back `gap` after the last.
    pub(crate) fn on_gap(&mut self, gap: Duration) {
        self.typical_gap = Some(match self.typical_gap {
            None => gap,
            Some(typical) => (typical * 3 + gap) / 4,
        });
    }

    /// How long to spin after work before sleeping: twice the typical gap
    /// when that is within the ceiling (what comes next is then likely to
    /// come while spinning), else the floor.
    pub(crate) fn window(&self) -> Duration {
        let floor = self.floor.min(self.ceiling);
        match self.typical_gap {
            Some(gap) if gap <= self.ceiling => (gap * 2).clamp(floor, self.ceiling),
            _ => floor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn short_gaps_stretch_the_spin_up_to_the_ceiling() {
        let mut spin = Spin::new(50 * US, 1000 * US);
        assert_eq!(spin.window(), 50 * US, "nothing seen yet: the floor");
        spin.on_gap(150 * US);
        assert_eq!(spin.window(), 300 * US, "twice the gap");
        for _ in 0..20 {
            spin.on_gap(10 * US);
        }
        assert_eq!(spin.window(), 50 * US, "never below the floor");
        for _ in 0..20 {
            spin.on_gap(900 * US);
        }
        assert_eq!(spin.window(), 1000 * US, "never above the ceiling");
    }

    #[test]
    fn long_gaps_bring_it_back_to_the_floor() {
        let mut spin = Spin::new(50 * US, 1000 * US);
        spin.on_gap(200 * US);
        assert_eq!(spin.window(), 400 * US);
        // A client heard from every 10 ms: spinning would not catch it.
        for _ in 0..10 {
            spin.on_gap(Duration::from_millis(10));
        }
        assert_eq!(spin.window(), 50 * US);
    }

    #[test]
    fn a_ceiling_of_zero_never_spins() {
        let mut spin = Spin::new(50 * US, Duration::ZERO);
        spin.on_gap(Duration::ZERO);
        assert_eq!(spin.window(), Duration::ZERO);
        let mut spin = Spin::new(50 * US, 1000 * US);
        spin.on_gap(100 * US);
        spin.limit(Duration::ZERO);
        assert_eq!(spin.window(), Duration::ZERO, "limited after the start");
        spin.limit(1000 * US);
        assert_eq!(spin.window(), 200 * US, "and given room again");
    }
}
