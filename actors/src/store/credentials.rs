//! The credentials psbx issues, as the store's files share them: how a
//! token is stored ([`digest`], its SHA-256 only), who a recognised
//! credential acts for ([`Principal`], [`Credential`]), and the OAuth access
//! token's prefix, which the API-key check must tell apart. They live here,
//! below `api_keys.rs`, `oauth.rs`, `sign_in.rs`, `takeover.rs` and
//! `uploads.rs`, so that those files need not import each other.
//!
//! Also: finding this server's own credentials inside a value someone wants
//! to store as a secret: an API key, a connector token or an OAuth token
//! (`psbx_...`, also inside `Bearer psbx_...` or a URL). Boxes reach psbx
//! without any of them, so none is ever a secret a box needs; a value that
//! merely looks like one but is not this server's is left alone.

use super::schema::{api_keys, connections, oauth_tokens};
use super::{Store, StoreError};
use crate::ids::{AccountId, ApiKeyId};
use diesel::prelude::*;
use sha2::{Digest, Sha256};

/// OAuth access tokens start with this (API keys never contain a second `_`).
pub const OAUTH_TOKEN_PREFIX: &str = "psbx_at_";

/// Who a request acts for, once its credential is recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub account_id: AccountId,
    pub credential: Credential,
}

/// What a request authenticated with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// An API key (`psbx_...`).
    ApiKey(ApiKeyId),
    /// An OAuth access token issued under this grant to this client (a
    /// registered `client_...` or a metadata document's URL).
    OAuth { grant_id: String, client_id: String },
}

/// What the store keeps of a token, link or key handed out: its SHA-256.
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Every credential psbx issues starts with this.
const PREFIX: &str = "psbx_";
/// The random part of every token: `random_token(40)`.
const RANDOM_LEN: usize = 40;
/// At most this many `psbx_` places in one value are looked up.
const MAX_CANDIDATES: usize = 64;

fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')
}

/// The strings in `value` that could be a psbx credential: from each `psbx_`
/// on, the run of token characters, and the shapes cut from it that the
/// issued tokens have (`psbx_` + 40, `psbx_at_` + 40, `psbx_conn_<issuer>.` + 40),
/// so that trailing punctuation does not hide one.
pub fn candidates(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    for (start, _) in value.match_indices(PREFIX).take(MAX_CANDIDATES) {
        let end = bytes[start..]
            .iter()
            .position(|c| !token_char(*c))
            .map_or(bytes.len(), |n| start + n);
        let run = &value[start..end];
        out.push(run.to_owned());
        for len in [
            PREFIX.len() + RANDOM_LEN,
            OAUTH_TOKEN_PREFIX.len() + RANDOM_LEN,
        ] {
            if let Some(cut) = run.get(..len) {
                out.push(cut.to_owned());
            }
        }
        if let Some(dot) = run.find('.')
            && let Some(cut) = run.get(..dot + 1 + RANDOM_LEN)
        {
            out.push(cut.to_owned());
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

impl Store {
    /// What live credential of this server `value` is or holds (`a psbx API
    /// key`, `a psbx connector token`, `a psbx OAuth token`), looked up by
    /// hash; `None` when it holds none.
    pub fn credential_in(&self, value: &str) -> Result<Option<&'static str>, StoreError> {
        let hashes: Vec<Vec<u8>> = candidates(value)
            .iter()
            .map(|c| digest(c).to_vec())
            .collect();
        if hashes.is_empty() {
            return Ok(None);
        }
        let mut conn = self.conn()?;
        let key: bool = diesel::select(diesel::dsl::exists(
            api_keys::table
                .filter(api_keys::key_sha256.eq_any(&hashes))
                .filter(api_keys::revoked_at.is_null()),
        ))
        .get_result(&mut conn)?;
        if key {
            return Ok(Some("a psbx API key"));
        }
        let connector: bool = diesel::select(diesel::dsl::exists(
            connections::table.filter(connections::token_sha256.eq_any(&hashes)),
        ))
        .get_result(&mut conn)?;
        if connector {
            return Ok(Some("a psbx connector token"));
        }
        let oauth: bool = diesel::select(diesel::dsl::exists(
            oauth_tokens::table
                .filter(oauth_tokens::token_sha256.eq_any(&hashes))
                .filter(oauth_tokens::revoked_at.is_null())
                .filter(oauth_tokens::expires_at.gt(diesel::dsl::now)),
        ))
        .get_result(&mut conn)?;
        Ok(oauth.then_some("a psbx OAuth token"))
    }

    /// Refuses (`NotASecret`) a value that is or holds a live credential of
    /// this server.
    pub fn refuse_credentials(&self, value: &str) -> Result<(), StoreError> {
        match self.credential_in(value)? {
            Some(what) => Err(StoreError::NotASecret(what)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::candidates;

    #[test]
    fn a_token_is_found_inside_a_header_a_url_and_before_punctuation() {
        let key = format!("psbx_{}", "a".repeat(40));
        for value in [
            key.clone(),
            format!("Bearer {key}"),
            format!("https://x/?k={key}&y=1"),
            format!("{key}.done"),
            format!("\"{key}\""),
        ] {
            assert!(candidates(&value).contains(&key), "{value}");
        }
        let conn = format!("psbx_conn_aHR0cDovL3g.{}", "b".repeat(40));
        assert!(candidates(&format!("T={conn}.")).contains(&conn));
        assert!(candidates("no token here").is_empty());
    }
}
