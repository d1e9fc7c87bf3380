//! Takeover links: one-time, expiring tokens for the web terminal of a box.
//! A link is a random `tko_...` token shown once; only its SHA-256 (hex) is
//! stored. Looking at a link (its page) does not spend it; spending is one
//! atomic `UPDATE ... WHERE used_at IS NULL AND expires_at > now()`, so two
//! WebSockets racing for a link cannot both win. Links used or expired for
//! a day are deleted by [`Store::prune_takeover_links`] (the heartbeat's).

use super::credentials::digest;
use super::schema::takeover_links;
use super::{Store, StoreError};
use crate::ids::{AccountId, BoxId, random_token};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// What every takeover token starts with.
pub const TAKEOVER_TOKEN_PREFIX: &str = "tko_";
/// The length of a token's random part.
const RANDOM_LEN: usize = 40;

/// How a link stands, for its page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// No such link (never issued, mistyped, or deleted a day after its end).
    Unknown,
    /// Spent by a terminal that opened with it.
    Used,
    /// Not used before it expired.
    Expired,
    /// Usable, for this account's box, until `expires_at`.
    Valid {
        account_id: AccountId,
        box_id: BoxId,
        expires_at: DateTime<Utc>,
    },
}

/// A link just made: the token its holder needs, never stored.
#[derive(Debug, Clone)]
pub struct NewTakeoverLink {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// The stored form of a token.
fn token_hash(token: &str) -> String {
    hex::encode(digest(token))
}

#[derive(Queryable)]
struct LinkRow {
    account_id: String,
    box_id: String,
    expires_at: DateTime<Utc>,
    used_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Makes a link to the terminal of `box_id` (the caller checked that the
    /// account owns it), usable once within `ttl`.
    pub fn create_takeover_link(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        ttl: chrono::Duration,
    ) -> Result<NewTakeoverLink, StoreError> {
        let token = format!("{TAKEOVER_TOKEN_PREFIX}{}", random_token(RANDOM_LEN)?);
        let expires_at = Utc::now() + ttl;
        diesel::insert_into(takeover_links::table)
            .values((
                takeover_links::token_hash.eq(token_hash(&token)),
                takeover_links::account_id.eq(account),
                takeover_links::box_id.eq(box_id.as_str()),
                takeover_links::expires_at.eq(expires_at),
            ))
            .execute(&mut self.conn()?)?;
        Ok(NewTakeoverLink { token, expires_at })
    }

    /// How the link `token` stands, without spending it.
    pub fn look_takeover_link(&self, token: &str) -> Result<LinkState, StoreError> {
        let row: Option<LinkRow> = takeover_links::table
            .find(token_hash(token))
            .select((
                takeover_links::account_id,
                takeover_links::box_id,
                takeover_links::expires_at,
                takeover_links::used_at,
            ))
            .first(&mut self.conn()?)
            .optional()?;
        let Some(row) = row else {
            return Ok(LinkState::Unknown);
        };
        if row.used_at.is_some() {
            return Ok(LinkState::Used);
        }
        if row.expires_at <= Utc::now() {
            return Ok(LinkState::Expired);
        }
        let (account_id, box_id) = ids(&row.account_id, &row.box_id)?;
        Ok(LinkState::Valid {
            account_id,
            box_id,
            expires_at: row.expires_at,
        })
    }

    /// Spends the link `token`, once: the account and box it is for, or how
    /// it stands when it cannot be spent (unknown, used, expired).
    pub fn spend_takeover_link(
        &self,
        token: &str,
    ) -> Result<Result<(AccountId, BoxId), LinkState>, StoreError> {
        let spent: Option<(String, String)> = diesel::update(
            takeover_links::table
                .filter(takeover_links::token_hash.eq(token_hash(token)))
                .filter(takeover_links::used_at.is_null())
                .filter(takeover_links::expires_at.gt(diesel::dsl::now)),
        )
        .set(takeover_links::used_at.eq(diesel::dsl::now))
        .returning((takeover_links::account_id, takeover_links::box_id))
        .get_result(&mut self.conn()?)
        .optional()?;
        match spent {
            Some((account, box_id)) => Ok(Ok(ids(&account, &box_id)?)),
            None => Ok(Err(self.look_takeover_link(token)?)),
        }
    }

    /// Deletes links used or expired more than a day ago; how many.
    pub fn prune_takeover_links(&self) -> Result<usize, StoreError> {
        let day_ago = Utc::now() - chrono::Duration::days(1);
        Ok(diesel::delete(
            takeover_links::table.filter(
                takeover_links::expires_at
                    .lt(day_ago)
                    .or(takeover_links::used_at.lt(day_ago)),
            ),
        )
        .execute(&mut self.conn()?)?)
    }
}

/// The stored ids as their types.
fn ids(account: &str, box_id: &str) -> Result<(AccountId, BoxId), StoreError> {
    let unreadable = |why: String| StoreError::Unreadable {
        what: "a takeover link's ids".to_owned(),
        why,
    };
    Ok((
        AccountId::parse(account).map_err(|e| unreadable(e.to_string()))?,
        BoxId::parse(box_id).map_err(|e| unreadable(e.to_string()))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stored_as_sha256_hex() {
        let hash = token_hash("tko_x");
        assert_eq!(hash.len(), 64);
        assert!(
            hash.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(hash, token_hash("tko_y"));
    }
}
