//! `box_access`: the account's box-URL IP allowlist as stored, entries in
//! their canonical CIDR text (checked by `crate::box_access` before they get
//! here). An empty list is stored as an empty array, not deleted, so the
//! time it was turned off is still known.

use super::schema::box_access;
use super::{Store, StoreError};
use crate::ids::AccountId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// An account's stored list.
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct BoxAccessRow {
    pub entries: Vec<String>,
    pub updated_at: DateTime<Utc>,
}

impl Store {
    /// The account's entries and when they were last set; `None` when the
    /// account never set a list.
    pub fn box_access(&self, account: &AccountId) -> Result<Option<BoxAccessRow>, StoreError> {
        Ok(box_access::table
            .find(account.as_str())
            .select((box_access::entries, box_access::updated_at))
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// Replaces the account's entries (an empty list turns the allowlist
    /// off); returns when.
    pub fn put_box_access(
        &self,
        account: &AccountId,
        entries: &[String],
    ) -> Result<DateTime<Utc>, StoreError> {
        Ok(diesel::insert_into(box_access::table)
            .values((
                box_access::account_id.eq(account.as_str()),
                box_access::entries.eq(entries),
            ))
            .on_conflict(box_access::account_id)
            .do_update()
            .set((
                box_access::entries.eq(entries),
                box_access::updated_at.eq(diesel::dsl::now),
            ))
            .returning(box_access::updated_at)
            .get_result(&mut self.conn()?)?)
    }
}
