//! Limits the server sets on requests: how often ([`rate`]: sliding windows
//! per caller, answered 429 with `Retry-After`), how large ([`body`]: body
//! sizes, answered 413 `payload_too_large`), and how many at once on one
//! connection ([`streams`]: 503 `too_many_streams`).

pub mod body;
pub mod rate;
pub mod streams;
