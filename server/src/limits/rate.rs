//! Sliding-window rate limits kept in memory, per key (a client address, an
//! account name): at most `max` events within `per`. A limiter can count every
//! request ([`RateLimiter::hit`]) or only failures ([`RateLimiter::check`]
//! before the work, [`RateLimiter::record`] after a failure), which is what
//! sign-in throttling needs: checking does not count, so a throttled caller
//! costs nothing.
//!
//! Memory is bounded: at most [`MAX_KEYS`] keys; when full, keys whose events
//! all expired go first, then the key with the fewest events (a flood of new
//! keys cannot push out a key under attack). Limits are per process: with
//! several replicas each counts on its own.
//!
//! (Not the `governor` crate: its GCRA cells count every check, and failure
//! counting needs to look without counting.)

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Keys tracked at most per limiter.
pub const MAX_KEYS: usize = 10_000;

/// A limit: a name for answers and logs, and its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What is limited, as a person reads it: "failed sign-ins per account".
    pub what: &'static str,
    pub max: usize,
    pub per: Duration,
}

impl Limit {
    /// "at most 5 failed sign-ins per account a minute".
    pub fn describe(&self) -> String {
        let per = match self.per.as_secs() {
            60 => "a minute".to_owned(),
            3600 => "an hour".to_owned(),
            s => format!("per {s} s"),
        };
        format!("at most {} {} {per}", self.max, self.what)
    }
}

/// A refused event: which limit, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub limit: Limit,
    pub retry_after: Duration,
}

impl Exceeded {
    /// Whole seconds for `Retry-After` (at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0)
    }

    /// "too many failed sign-ins per account: at most 5 ... a minute; try again in 42 s".
    pub fn message(&self) -> String {
        format!(
            "too many {}: {}; try again in {} s",
            self.limit.what,
            self.limit.describe(),
            self.retry_after_secs()
        )
    }
}

/// One limit applied to many keys.
pub struct RateLimiter {
    limit: Limit,
    events: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl RateLimiter {
    pub fn new(limit: Limit) -> Self {
        Self {
            limit,
            events: Mutex::new(HashMap::new()),
        }
    }

    pub fn limit(&self) -> Limit {
        self.limit
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, VecDeque<Instant>>> {
        // Timestamps only: still consistent after a panic elsewhere.
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether one more event for `key` fits now; does not count it.
    pub fn check(&self, key: &str) -> Result<(), Exceeded> {
        self.check_at(key, Instant::now())
    }

    /// Counts an event for `key` (e.g. a failed attempt).
    pub fn record(&self, key: &str) {
        self.record_at(key, Instant::now());
    }

    /// Counts an event for `key` if it fits; refuses it (uncounted) if not.
    pub fn hit(&self, key: &str) -> Result<(), Exceeded> {
        let now = Instant::now();
        self.check_at(key, now)?;
        self.record_at(key, now);
        Ok(())
    }

    fn check_at(&self, key: &str, now: Instant) -> Result<(), Exceeded> {
        let mut events = self.lock();
        let Some(times) = events.get_mut(key) else {
            return Ok(());
        };
        expire(times, now, self.limit.per);
        if times.len() < self.limit.max {
            return Ok(());
        }
        let oldest = times.front().copied().unwrap_or(now);
        Err(Exceeded {
            limit: self.limit,
            retry_after: (oldest + self.limit.per).saturating_duration_since(now),
        })
    }

    fn record_at(&self, key: &str, now: Instant) {
        let mut events = self.lock();
        if !events.contains_key(key) && events.len() >= MAX_KEYS {
            make_room(&mut events, now, self.limit.per);
        }
        let times = events.entry(key.to_owned()).or_default();
        expire(times, now, self.limit.per);
        times.push_back(now);
        // Only the last `max` matter for the decision.
        while times.len() > self.limit.max {
            times.pop_front();
        }
    }
}

fn expire(times: &mut VecDeque<Instant>, now: Instant, per: Duration) {
    while times
        .front()
        .is_some_and(|t| now.saturating_duration_since(*t) >= per)
    {
        times.pop_front();
    }
}

fn make_room(events: &mut HashMap<String, VecDeque<Instant>>, now: Instant, per: Duration) {
    events.retain(|_, times| {
        expire(times, now, per);
        !times.is_empty()
    });
    if events.len() >= MAX_KEYS {
        let fewest = events
            .iter()
            .min_by_key(|(_, times)| times.len())
            .map(|(key, _)| key.clone());
        if let Some(key) = fewest {
            events.remove(&key);
        }
    }
}

/// The key of a client address: the address itself for IPv4, its /64 for
/// IPv6 (one host usually has a whole /64); IPv4-mapped IPv6 counts as IPv4.
pub fn client_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIVE: Limit = Limit {
        what: "failed sign-ins per account",
        max: 5,
        per: Duration::from_secs(60),
    };

    #[test]
    fn the_sixth_event_within_the_window_is_refused_until_the_first_expires() {
        let limiter = RateLimiter::new(FIVE);
        let start = Instant::now();
        for i in 0..5 {
            assert!(
                limiter
                    .check_at("a", start + Duration::from_secs(i))
                    .is_ok()
            );
            limiter.record_at("a", start + Duration::from_secs(i));
        }
        let refused = limiter
            .check_at("a", start + Duration::from_secs(10))
            .unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(50));
        assert_eq!(refused.retry_after_secs(), 50);
        assert!(
            refused
                .message()
                .contains("at most 5 failed sign-ins per account a minute")
        );
        // Another key is not affected; checking does not count.
        assert!(limiter.check_at("b", start).is_ok());
        assert!(limiter.check_at("b", start).is_ok());
        // The first event leaves the window at 60 s.
        assert!(
            limiter
                .check_at("a", start + Duration::from_secs(60))
                .is_ok()
        );
    }

    #[test]
    fn hit_counts_only_what_it_lets_through() {
        let limiter = RateLimiter::new(Limit { max: 2, ..FIVE });
        assert!(limiter.hit("k").is_ok());
        assert!(limiter.hit("k").is_ok());
        assert!(limiter.hit("k").is_err());
        assert!(limiter.hit("k").is_err());
        assert_eq!(limiter.lock()["k"].len(), 2);
    }

    #[test]
    fn a_flood_of_keys_does_not_evict_a_key_under_attack() {
        let limiter = RateLimiter::new(FIVE);
        let now = Instant::now();
        for _ in 0..5 {
            limiter.record_at("default", now);
        }
        for i in 0..MAX_KEYS + 10 {
            limiter.record_at(&format!("guess{i}"), now);
        }
        assert!(limiter.lock().len() <= MAX_KEYS);
        assert!(limiter.check_at("default", now).is_err());
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_eq!(client_key(a), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_key(mapped), "192.0.2.7");
    }
}
