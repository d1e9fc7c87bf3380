//! Limits the server sets on requests: how often ([`rate`]: sliding windows
//! per caller, answered 429 with `Retry-After`) and how large ([`body`]: body
//! sizes, answered 413 `payload_too_large`).

pub mod body;
pub mod rate;
