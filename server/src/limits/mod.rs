//! Limits on what callers may ask for: [`rate`] — how often (sliding windows
//! per caller, answered with 429 and `Retry-After`).

pub mod rate;
