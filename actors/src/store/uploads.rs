//! One-time upload tokens (`sandbox_sync` on the remote MCP server): made for
//! an account, a box and a destination, stored as their SHA-256 only, claimed
//! at most once and only before they expire.

use super::credentials::digest;
use super::schema::uploads;
use super::{Store, StoreError};
use crate::ids::{AccountId, BoxId, random_token};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use std::fmt;

/// A token as handed out: the only credential of its upload URL.
pub struct UploadToken(String);

impl UploadToken {
    pub const PREFIX: &'static str = "psbxup_";

    /// The token as it goes into the URL.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for UploadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UploadToken(****)")
    }
}

/// Where an upload goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadTarget {
    pub account_id: AccountId,
    pub box_id: BoxId,
    pub dest: String,
}

/// What presenting a token found.
#[derive(Debug, PartialEq, Eq)]
pub enum UploadClaim {
    /// Valid: it is now spent, and the upload goes here.
    Ready(UploadTarget),
    /// Spent by an earlier upload.
    Used,
    Expired,
    Unknown,
}

impl Store {
    /// Makes a token for one upload into `box_id` under `/work/<dest>`, valid
    /// for `ttl`. Tokens that expired a day ago or more are deleted on the way.
    pub fn create_upload(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        dest: &str,
        ttl: chrono::Duration,
    ) -> Result<(UploadToken, DateTime<Utc>), StoreError> {
        let token = UploadToken(format!("{}{}", UploadToken::PREFIX, random_token(40)?));
        let expires_at = Utc::now() + ttl;
        let mut conn = self.conn()?;
        diesel::delete(
            uploads::table.filter(uploads::expires_at.lt(Utc::now() - chrono::Duration::days(1))),
        )
        .execute(&mut conn)?;
        diesel::insert_into(uploads::table)
            .values((
                uploads::token_sha256.eq(&digest(token.expose())[..]),
                uploads::account_id.eq(account.as_str()),
                uploads::box_id.eq(box_id),
                uploads::dest.eq(dest),
                uploads::expires_at.eq(expires_at),
            ))
            .execute(&mut conn)?;
        Ok((token, expires_at))
    }

    /// The box a live, unspent token uploads into, without spending it
    /// (which node answers the upload: `cluster::forward`).
    pub fn upload_box(&self, presented: &str) -> Result<Option<BoxId>, StoreError> {
        if !presented.starts_with(UploadToken::PREFIX) {
            return Ok(None);
        }
        let hash = digest(presented);
        Ok(uploads::table
            .filter(uploads::token_sha256.eq(&hash[..]))
            .filter(uploads::used_at.is_null())
            .filter(uploads::expires_at.gt(diesel::dsl::now))
            .select(uploads::box_id)
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// Spends a presented token: the first claim of a live token gets its
    /// target; every later one, or one after expiry, is refused.
    pub fn claim_upload(&self, presented: &str) -> Result<UploadClaim, StoreError> {
        if !presented.starts_with(UploadToken::PREFIX) {
            return Ok(UploadClaim::Unknown);
        }
        let hash = digest(presented);
        let mut conn = self.conn()?;
        let claimed: Option<(AccountId, BoxId, String)> = diesel::update(
            uploads::table
                .filter(uploads::token_sha256.eq(&hash[..]))
                .filter(uploads::used_at.is_null())
                .filter(uploads::expires_at.gt(diesel::dsl::now)),
        )
        .set(uploads::used_at.eq(diesel::dsl::now))
        .returning((uploads::account_id, uploads::box_id, uploads::dest))
        .get_result(&mut conn)
        .optional()?;
        if let Some((account_id, box_id, dest)) = claimed {
            return Ok(UploadClaim::Ready(UploadTarget {
                account_id,
                box_id,
                dest,
            }));
        }
        let found: Option<Option<DateTime<Utc>>> = uploads::table
            .filter(uploads::token_sha256.eq(&hash[..]))
            .select(uploads::used_at)
            .first(&mut conn)
            .optional()?;
        Ok(match found {
            None => UploadClaim::Unknown,
            Some(Some(_)) => UploadClaim::Used,
            Some(None) => UploadClaim::Expired,
        })
    }
}
