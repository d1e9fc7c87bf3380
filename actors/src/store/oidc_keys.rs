//! `oidc_keys`: psbx's signing keys as an OIDC issuer, as stored — the
//! public JWK, the sealed private key (sealing is `crate::oidc`'s), when each
//! was made and retired. Rotation is one transaction: the current key is
//! retired and the new one inserted together (a unique index allows one
//! current key), so two replicas rotating at once leave one current key.

use super::schema::oidc_keys;
use super::{Store, StoreError};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A key as stored.
#[derive(Debug, Clone, PartialEq, Queryable)]
pub struct OidcKeyRow {
    pub kid: String,
    pub public_jwk: serde_json::Value,
    pub nonce: Vec<u8>,
    pub sealed_key: Vec<u8>,
    pub created_at: DateTime<Utc>,
    pub retired_at: Option<DateTime<Utc>>,
}

/// A key to insert.
pub struct NewOidcKey<'a> {
    pub kid: &'a str,
    pub public_jwk: &'a serde_json::Value,
    pub nonce: &'a [u8],
    pub sealed_key: &'a [u8],
}

impl Store {
    /// The key that signs now, if there is one.
    pub fn current_oidc_key(&self) -> Result<Option<OidcKeyRow>, StoreError> {
        Ok(oidc_keys::table
            .filter(oidc_keys::retired_at.is_null())
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// The keys to publish: the current one, and those retired after `since`
    /// (their tokens may still be valid), newest first.
    pub fn published_oidc_keys(&self, since: DateTime<Utc>) -> Result<Vec<OidcKeyRow>, StoreError> {
        Ok(oidc_keys::table
            .filter(
                oidc_keys::retired_at
                    .is_null()
                    .or(oidc_keys::retired_at.gt(since)),
            )
            .order(oidc_keys::created_at.desc())
            .load(&mut self.conn()?)?)
    }

    /// Makes `new` the current key, retiring the one that was (`expected`:
    /// its kid, or none when there was none). Another replica's rotation
    /// that came first wins: `Ok(false)`, and this key is not stored.
    pub fn rotate_oidc_key(
        &self,
        expected: Option<&str>,
        new: &NewOidcKey<'_>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction::<_, StoreError, _>(|conn| {
            let current: Option<String> = oidc_keys::table
                .filter(oidc_keys::retired_at.is_null())
                .select(oidc_keys::kid)
                .for_update()
                .first(conn)
                .optional()?;
            if current.as_deref() != expected {
                return Ok(false);
            }
            if let Some(kid) = &current {
                diesel::update(oidc_keys::table.find(kid))
                    .set(oidc_keys::retired_at.eq(diesel::dsl::now))
                    .execute(conn)?;
            }
            let inserted = diesel::insert_into(oidc_keys::table)
                .values((
                    oidc_keys::kid.eq(new.kid),
                    oidc_keys::public_jwk.eq(new.public_jwk.clone()),
                    oidc_keys::nonce.eq(new.nonce),
                    oidc_keys::sealed_key.eq(new.sealed_key),
                ))
                .on_conflict_do_nothing()
                .execute(conn)?;
            Ok(inserted == 1)
        })
    }

    /// Forgets keys retired before `before` (no token they signed is valid).
    pub fn delete_old_oidc_keys(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        Ok(
            diesel::delete(oidc_keys::table.filter(oidc_keys::retired_at.lt(before)))
                .execute(&mut self.conn()?)?,
        )
    }
}
