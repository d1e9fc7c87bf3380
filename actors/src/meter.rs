//! What the streams a box opens to the server may cost (review-2 M4): a box
//! may open `env:`, `link:`, `aws:token` and `dns:` streams as fast as its
//! channel allows, so each kind has a per-box [`Bucket`] (a token bucket:
//! a burst, then a steady rate; a stream over it is refused before anything
//! is read or asked), and refusals are logged per box at most
//! [`REFUSALS_LOGGED`] per [`REFUSAL_LOG_INTERVAL`], then one summary line
//! ([`RefusalLog`]).
//!
//! The bucket is written here rather than taken from a crate (`governor`):
//! it is a few lines of arithmetic under a lock its caller holds for no
//! await, and one bucket per box and kind needs none of a keyed limiter's
//! machinery.

use std::time::{Duration, Instant};

/// Refused streams logged per box and interval; the rest are counted.
pub const REFUSALS_LOGGED: u32 = 10;
/// The interval of [`REFUSALS_LOGGED`].
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// How many of a box's refusals were logged in the current interval.
#[derive(Debug)]
pub struct RefusalLog {
    since: Instant,
    logged: u32,
    quiet: u64,
}

impl Default for RefusalLog {
    fn default() -> Self {
        Self::new()
    }
}

impl RefusalLog {
    pub fn new() -> Self {
        Self {
            since: Instant::now(),
            logged: 0,
            quiet: 0,
        }
    }

    /// Whether to log this refusal, and how many went unlogged in the
    /// interval that just ended (to say so once).
    pub fn admit(&mut self) -> (bool, u64) {
        let mut summary = 0;
        if self.since.elapsed() >= REFUSAL_LOG_INTERVAL {
            summary = std::mem::take(&mut self.quiet);
            self.since = Instant::now();
            self.logged = 0;
        }
        if self.logged < REFUSALS_LOGGED {
            self.logged += 1;
            (true, summary)
        } else {
            self.quiet += 1;
            (false, summary)
        }
    }
}

/// A token bucket: `burst` streams at once, then `per_second` more each
/// second.
#[derive(Debug)]
pub struct Bucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(burst: u32, per_second: f64) -> Self {
        Self {
            burst: f64::from(burst),
            per_second,
            tokens: f64::from(burst),
            at: Instant::now(),
        }
    }

    /// Takes one token: false when the bucket is empty (the stream is
    /// refused).
    pub fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// What the bucket allows, for messages: "20 per second" or "6 per
    /// minute".
    pub fn rate(&self) -> String {
        if self.per_second >= 1.0 {
            format!("{} per second", self.per_second.round())
        } else {
            format!("{} per minute", (self.per_second * 60.0).round())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_refuses() {
        // A rate so slow that no token comes back during the test.
        let mut bucket = Bucket::new(3, 1.0 / 3600.0);
        assert!((0..3).all(|_| bucket.take()));
        assert!(!bucket.take());
        assert_eq!(Bucket::new(5, 0.1).rate(), "6 per minute");
        assert_eq!(Bucket::new(1, 50.0).rate(), "50 per second");
    }

    #[test]
    fn refusals_are_logged_up_to_the_limit() {
        let mut log = RefusalLog::new();
        let logged = (0..100).filter(|_| log.admit().0).count();
        assert_eq!(logged, REFUSALS_LOGGED as usize);
    }
}
