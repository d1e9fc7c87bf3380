//! Jittered exponential backoff between reconnections: 0.5 s doubling to
//! 60 s, each delay drawn between half and all of its nominal value so
//! that many copies restarted together do not reconnect in step. A session
//! that lasted long enough resets it.
//!
//! Written here rather than taken from a crate: it is a dozen lines, and
//! the crates that do it (backoff, backon) bring retry loops around
//! futures that this connector's session loop does not fit.

use std::time::Duration;

/// The first delay.
pub const INITIAL: Duration = Duration::from_millis(500);
/// The longest delay.
pub const MAX: Duration = Duration::from_secs(60);
/// A session that lasted longer than this resets the backoff.
pub const HEALTHY: Duration = Duration::from_secs(30);

/// The state of one session slot's backoff.
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Consecutive failures since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Forgets the failures (after a session that lasted).
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The delay before the next attempt, counting one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let nominal = nominal(self.failures);
        self.failures = self.failures.saturating_add(1);
        jitter(nominal, random_unit())
    }
}

/// 0.5 s × 2^failures, at most [`MAX`].
fn nominal(failures: u32) -> Duration {
    INITIAL
        .checked_mul(1u32.checked_shl(failures.min(16)).unwrap_or(u32::MAX))
        .unwrap_or(MAX)
        .min(MAX)
}

/// Between half and all of `nominal`, by `unit` in [0, 1].
fn jitter(nominal: Duration, unit: f64) -> Duration {
    nominal.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

/// A random number in [0, 1]; 1 if the system has no randomness to give.
fn random_unit() -> f64 {
    getrandom::u32().map_or(1.0, |r| f64::from(r) / f64::from(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_a_minute() {
        let nominals: Vec<_> = (0..10).map(nominal).collect();
        assert_eq!(nominals[0], Duration::from_millis(500));
        assert_eq!(nominals[1], Duration::from_secs(1));
        assert_eq!(nominals[3], Duration::from_secs(4));
        assert_eq!(nominals[7], Duration::from_secs(60));
        assert_eq!(nominal(u32::MAX), MAX);
    }

    #[test]
    fn jitter_stays_within_half_and_all() {
        let d = Duration::from_secs(8);
        assert_eq!(jitter(d, 0.0), Duration::from_secs(4));
        assert_eq!(jitter(d, 1.0), d);
        let mut backoff = Backoff::default();
        for n in 0..20 {
            let delay = backoff.next_delay();
            assert!(delay >= nominal(n) / 2 && delay <= nominal(n), "{delay:?}");
        }
        assert_eq!(backoff.failures(), 20);
        backoff.reset();
        assert!(backoff.next_delay() <= INITIAL);
    }
}
