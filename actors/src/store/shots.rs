//! `shots`: what psbx knows of each stored screenshot, recording or
//! annotated image (the files are in the shot storage, `crate::shots`):
//! its box, size in bytes (for metering), where it is stored, and the review
//! that keeps it past its box's stop.

use super::schema::{boxes, shots};
use super::{Store, StoreError};
use crate::ids::{AccountId, BoxId, ReviewId, ShotId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A stored shot as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = shots)]
pub struct ShotRow {
    pub id: ShotId,
    pub account_id: AccountId,
    pub box_id: BoxId,
    /// `screenshot`, `recording` or `annotation` (`shots::StoredKind`, read
    /// back with an error for any other value).
    pub kind: String,
    pub mime: String,
    pub width: i32,
    pub height: i32,
    pub duration_ms: Option<i64>,
    pub bytes: i64,
    pub preview_bytes: i64,
    pub poster_bytes: i64,
    pub source: Option<String>,
    pub review_id: Option<ReviewId>,
    pub storage_key: String,
    pub created_at: DateTime<Utc>,
}

/// Kinds a box's own shots have (an annotation belongs to its feedback).
const BOX_KINDS: [&str; 2] = ["screenshot", "recording"];

/// The bytes a shot row stands for (its file, preview and poster).
pub(super) fn row_bytes(row: &ShotRow) -> u64 {
    [row.bytes, row.preview_bytes, row.poster_bytes]
        .iter()
        .map(|n| u64::try_from(*n).unwrap_or(0))
        .sum()
}

impl Store {
    /// Inserts the shot when the account's `quotas.max_shot_bytes` leaves
    /// room for it, checked under the account lock (else
    /// [`StoreError::QuotaExceeded`], nothing written).
    pub fn insert_shot(&self, row: &ShotRow) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            super::quota::lock_account(conn, row.account_id.as_str())?;
            super::quota::check_shot_bytes(
                conn,
                &self.quotas,
                row.account_id.as_str(),
                row_bytes(row),
            )?;
            diesel::insert_into(shots::table)
                .values(row)
                .execute(conn)?;
            Ok::<_, StoreError>(())
        })
    }

    /// The box's own shots (no annotations), oldest first.
    pub fn box_shots(
        &self,
        account: &AccountId,
        box_id: &BoxId,
    ) -> Result<Vec<ShotRow>, StoreError> {
        Ok(shots::table
            .filter(shots::account_id.eq(account.as_str()))
            .filter(shots::box_id.eq(box_id.as_str()))
            .filter(shots::kind.eq_any(BOX_KINDS))
            .order((shots::created_at.asc(), shots::id.asc()))
            .select(ShotRow::as_select())
            .load(&mut self.conn()?)?)
    }

    /// The shots a review keeps (the box's, at hand-over), oldest first.
    pub fn review_shots(&self, review: &ReviewId) -> Result<Vec<ShotRow>, StoreError> {
        Ok(shots::table
            .filter(shots::review_id.eq(review.as_str()))
            .filter(shots::kind.eq_any(BOX_KINDS))
            .order((shots::created_at.asc(), shots::id.asc()))
            .select(ShotRow::as_select())
            .load(&mut self.conn()?)?)
    }

    /// One of the account's shots.
    pub fn shot(&self, account: &AccountId, id: &ShotId) -> Result<Option<ShotRow>, StoreError> {
        Ok(shots::table
            .find(id.as_str())
            .filter(shots::account_id.eq(account.as_str()))
            .select(ShotRow::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// Several shots by id (feedback images), in no particular order.
    pub fn shots_by_id(&self, ids: &[ShotId]) -> Result<Vec<ShotRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(shots::table
            .filter(shots::id.eq_any(ids))
            .select(ShotRow::as_select())
            .load(&mut self.conn()?)?)
    }

    /// Deletes one of the box's own shots; the row it was, if there was one.
    pub fn delete_shot(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        id: &ShotId,
    ) -> Result<Option<ShotRow>, StoreError> {
        Ok(diesel::delete(
            shots::table
                .find(id.as_str())
                .filter(shots::account_id.eq(account.as_str()))
                .filter(shots::box_id.eq(box_id.as_str()))
                .filter(shots::kind.eq_any(BOX_KINDS)),
        )
        .returning(ShotRow::as_returning())
        .get_result(&mut self.conn()?)
        .optional()?)
    }

    /// Deletes all of the box's own shots, those a review keeps included
    /// (someone asked: "delete this box's screenshots").
    pub fn delete_box_shots(
        &self,
        account: &AccountId,
        box_id: &BoxId,
    ) -> Result<Vec<ShotRow>, StoreError> {
        Ok(diesel::delete(
            shots::table
                .filter(shots::account_id.eq(account.as_str()))
                .filter(shots::box_id.eq(box_id.as_str()))
                .filter(shots::kind.eq_any(BOX_KINDS)),
        )
        .returning(ShotRow::as_returning())
        .get_results(&mut self.conn()?)?)
    }

    /// Keeps the box's shots taken so far for the review (past the box's stop).
    pub fn keep_shots_for_review(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        review: &ReviewId,
    ) -> Result<usize, StoreError> {
        Ok(diesel::update(
            shots::table
                .filter(shots::account_id.eq(account.as_str()))
                .filter(shots::box_id.eq(box_id.as_str()))
                .filter(shots::kind.eq_any(BOX_KINDS))
                .filter(shots::review_id.is_null()),
        )
        .set(shots::review_id.eq(review.as_str()))
        .execute(&mut self.conn()?)?)
    }

    /// Deletes (at most `limit` of) the shots of boxes that stopped or failed,
    /// or whose box is gone, that no review keeps; the rows they were, for
    /// their files to be deleted.
    pub fn take_shots_of_stopped_boxes(&self, limit: i64) -> Result<Vec<ShotRow>, StoreError> {
        let live = boxes::table
            .filter(boxes::state.ne_all(["stopped", "failed"]))
            .select(boxes::id);
        let doomed: Vec<ShotId> = shots::table
            .filter(shots::kind.eq_any(BOX_KINDS))
            .filter(shots::review_id.is_null())
            .filter(shots::box_id.ne_all(live))
            .select(shots::id)
            .limit(limit)
            .load(&mut self.conn()?)?;
        if doomed.is_empty() {
            return Ok(Vec::new());
        }
        Ok(diesel::delete(
            shots::table
                .filter(shots::id.eq_any(&doomed))
                .filter(shots::review_id.is_null()),
        )
        .returning(ShotRow::as_returning())
        .get_results(&mut self.conn()?)?)
    }

    /// The bytes the account's stored shots take (files, previews, posters).
    pub fn account_shot_bytes(&self, account: &AccountId) -> Result<i64, StoreError> {
        let mut conn = self.conn()?;
        account_shot_bytes_on(&mut conn, account.as_str())
    }
}

/// [`Store::account_shot_bytes`] on a connection (in a transaction).
pub(super) fn account_shot_bytes_on(
    conn: &mut diesel::PgConnection,
    account: &str,
) -> Result<i64, StoreError> {
    #[derive(QueryableByName)]
    struct Total {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        total: i64,
    }
    let row: Total = diesel::sql_query(
        "SELECT COALESCE(SUM(bytes + preview_bytes + poster_bytes), 0)::BIGINT AS total \
         FROM shots WHERE account_id = $1",
    )
    .bind::<diesel::sql_types::Text, _>(account)
    .get_result(conn)?;
    Ok(row.total)
}
