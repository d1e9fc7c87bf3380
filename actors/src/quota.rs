//! Per-account quotas: how much of the shared installation one account may
//! hold (live boxes and their units, connections, secrets, bytes of stored
//! values, bytes of stored shots), and the refusal when a request would pass
//! one.
//!
//! The store checks them in the transaction that adds the object, after
//! locking the account's row (`SELECT ... FOR UPDATE`): two concurrent
//! creations for one account are serialised there, on every server sharing
//! the database, so neither can pass the limit the other already reached.

/// The limits, per account. The server reads them from its `[quotas]`
/// section; [`Quotas::default`] holds the defaults documented in the README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Boxes not yet over (creating, booting, running, frozen).
    pub max_boxes: u32,
    /// The sum of those boxes' sizes, in units.
    pub max_units: u32,
    /// Connections, over all of the account's environments.
    pub max_connections: u32,
    /// Secrets.
    pub max_secrets: u32,
    /// Bytes the server stores for the account: sealed secret values and
    /// sealed environment settings.
    pub max_stored_bytes: u64,
    /// Bytes of stored shots: screenshots, recordings and reviewers'
    /// images, with their previews and posters (`crate::shots`).
    pub max_shot_bytes: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_boxes: 20,
            max_units: 40,
            max_connections: 20,
            max_secrets: 200,
            max_stored_bytes: 16 * 1024 * 1024,
            max_shot_bytes: 2 * 1024 * 1024 * 1024,
        }
    }
}

/// A request that would take an account past one of its limits (HTTP 429
/// `quota_exceeded`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: this account may hold at most {limit} ({key} = {limit}){now}")]
pub struct QuotaExceeded {
    /// What the limit counts, as the message opens: "too many boxes".
    pub what: &'static str,
    /// The configuration key: `quotas.max_boxes`.
    pub key: &'static str,
    pub limit: u64,
    /// What the account holds now, said after the limit ("; it holds 20").
    pub now: String,
    /// What to do about it.
    pub hint: &'static str,
}

impl QuotaExceeded {
    /// Refuses when `held + adding` passes `limit`.
    pub fn check(
        what: &'static str,
        key: &'static str,
        limit: u64,
        held: u64,
        adding: u64,
        hint: &'static str,
    ) -> Result<(), Self> {
        if held.saturating_add(adding) <= limit {
            return Ok(());
        }
        Err(Self {
            what,
            key,
            limit,
            now: format!("; it holds {held} and this request adds {adding}"),
            hint,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_limit_its_value_and_what_is_held() {
        assert!(QuotaExceeded::check("too many boxes", "quotas.max_boxes", 2, 1, 1, "h").is_ok());
        let e =
            QuotaExceeded::check("too many boxes", "quotas.max_boxes", 2, 2, 1, "h").unwrap_err();
        assert_eq!(
            e.to_string(),
            "too many boxes: this account may hold at most 2 (quotas.max_boxes = 2); it holds 2 and this request adds 1"
        );
    }
}
