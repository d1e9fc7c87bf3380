//! API keys: created with a random secret shown once, stored as its SHA-256 only,
//! listed without secrets, revoked at once.

use super::credentials::{Credential, OAUTH_TOKEN_PREFIX, Principal, digest};
use super::schema::api_keys;
use super::{Store, StoreError};
use crate::ids::{AccountId, ApiKeyId, ApiKeySecret};
use chrono::{DateTime, Utc};
use diesel::pg::PgConnection;
use diesel::prelude::*;

/// Longest key name accepted.
pub const MAX_NAME_LEN: usize = 100;

/// An API key as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = api_keys, check_for_backend(diesel::pg::Pg))]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub account_id: AccountId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = api_keys)]
struct NewApiKeyRow<'a> {
    id: &'a ApiKeyId,
    account_id: &'a AccountId,
    name: &'a str,
    key_sha256: &'a [u8],
}

/// A key just created, with the secret its holder must keep.
#[derive(Debug)]
pub struct NewApiKey {
    pub key: ApiKey,
    pub secret: ApiKeySecret,
}

/// One page of keys, oldest first; `next` is where the following page starts.
#[derive(Debug)]
pub struct KeyPage {
    pub keys: Vec<ApiKey>,
    pub next: Option<(DateTime<Utc>, ApiKeyId)>,
}

/// Checks a key name: what a person would type, on one line.
pub fn validate_name(name: &str) -> Result<&str, StoreError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LEN {
        return Err(StoreError::Invalid(format!(
            "a key name must have 1 to {MAX_NAME_LEN} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(StoreError::Invalid(
            "a key name must not contain control characters (newlines, tabs, ...)".to_owned(),
        ));
    }
    Ok(name)
}

pub(super) fn insert(
    conn: &mut PgConnection,
    account: &AccountId,
    name: &str,
) -> Result<NewApiKey, StoreError> {
    let name = validate_name(name)?;
    let id = ApiKeyId::generate()?;
    let secret = ApiKeySecret::generate()?;
    let hash = digest(secret.expose());
    let row = diesel::insert_into(api_keys::table)
        .values(NewApiKeyRow {
            id: &id,
            account_id: account,
            name,
            key_sha256: &hash,
        })
        .returning(ApiKey::as_returning())
        .get_result(conn)?;
    Ok(NewApiKey { key: row, secret })
}

/// How stale `last_used_at` may get before a request refreshes it: one write a
/// minute per key at most, not one per request.
const LAST_USED_GRANULARITY_SECS: i32 = 60;

impl Store {
    pub fn create_api_key(&self, account: &AccountId, name: &str) -> Result<NewApiKey, StoreError> {
        let mut conn = self.conn()?;
        insert(&mut conn, account, name)
    }

    /// The account's keys that are not revoked, oldest first, `limit` at a time.
    pub fn list_api_keys(
        &self,
        account: &AccountId,
        after: Option<&(DateTime<Utc>, ApiKeyId)>,
        limit: u32,
    ) -> Result<KeyPage, StoreError> {
        let mut query = api_keys::table
            .filter(api_keys::account_id.eq(account.as_str()))
            .filter(api_keys::revoked_at.is_null())
            .into_boxed();
        if let Some((created_at, id)) = after {
            query = query.filter(
                api_keys::created_at.gt(created_at).or(api_keys::created_at
                    .eq(created_at)
                    .and(api_keys::id.gt(id.as_str()))),
            );
        }
        let mut keys: Vec<ApiKey> = query
            .order((api_keys::created_at, api_keys::id))
            .limit(i64::from(limit) + 1)
            .select(ApiKey::as_select())
            .load(&mut self.conn()?)?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next = if keys.len() > limit {
            keys.truncate(limit);
            keys.last().map(|k| (k.created_at, k.id.clone()))
        } else {
            None
        };
        Ok(KeyPage { keys, next })
    }

    /// Revokes one of the account's keys; it stops authenticating at once.
    /// Returns false when the account has no such live key.
    pub fn revoke_api_key(&self, account: &AccountId, id: &ApiKeyId) -> Result<bool, StoreError> {
        let changed = diesel::update(
            api_keys::table
                .filter(api_keys::id.eq(id.as_str()))
                .filter(api_keys::account_id.eq(account.as_str()))
                .filter(api_keys::revoked_at.is_null()),
        )
        .set(api_keys::revoked_at.eq(diesel::dsl::now))
        .execute(&mut self.conn()?)?;
        Ok(changed == 1)
    }

    /// Recognises a presented key: its account and key id, or `None` for a key that
    /// is unknown or revoked. Records the use (at most once a minute per key).
    pub fn authenticate(&self, presented: &str) -> Result<Option<Principal>, StoreError> {
        if !presented.starts_with(ApiKeySecret::PREFIX) || presented.starts_with(OAUTH_TOKEN_PREFIX)
        {
            return Ok(None);
        }
        let hash = digest(presented);
        let mut conn = self.conn()?;
        let found: Option<(ApiKeyId, AccountId, Option<DateTime<Utc>>)> = api_keys::table
            .filter(api_keys::key_sha256.eq(&hash[..]))
            .filter(api_keys::revoked_at.is_null())
            .select((api_keys::id, api_keys::account_id, api_keys::last_used_at))
            .first(&mut conn)
            .optional()?;
        let Some((id, account_id, last_used_at)) = found else {
            return Ok(None);
        };
        let stale = last_used_at.is_none_or(|t| {
            (Utc::now() - t).num_seconds() >= i64::from(LAST_USED_GRANULARITY_SECS)
        });
        if stale {
            diesel::update(api_keys::table.find(&id))
                .set(api_keys::last_used_at.eq(diesel::dsl::now))
                .execute(&mut conn)?;
        }
        Ok(Some(Principal {
            account_id,
            credential: Credential::ApiKey(id),
        }))
    }
}
