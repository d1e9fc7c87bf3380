//! `reviews` and `review_items`: boxes handed to a person and what the person
//! sent back. A review is answered once, in one transaction with its items
//! and their annotated images' rows, so an agent polling never sees half an
//! answer.

use super::schema::{review_items, reviews, shots};
use super::shots::ShotRow;
use super::{Store, StoreError};
use crate::ids::{AccountId, BoxId, FeedbackId, ReviewId, ShotId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A review as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = reviews)]
pub struct ReviewRow {
    pub id: ReviewId,
    pub account_id: AccountId,
    pub box_id: BoxId,
    pub title: String,
    pub summary: String,
    pub urls: Vec<String>,
    /// `waiting`, `answered` or `approved` (`reviews::ReviewState`, read
    /// back with an error for any other value).
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
    /// `app`, `api_key:<key id>` or `oauth:<client id>` (`reviews::Answerer`).
    pub answered_by: Option<String>,
}

/// One feedback item as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = review_items)]
pub struct ItemRow {
    pub id: FeedbackId,
    pub review_id: ReviewId,
    pub account_id: AccountId,
    pub position: i32,
    pub text: String,
    pub shot_id: Option<ShotId>,
    pub created_at: DateTime<Utc>,
}

impl Store {
    pub fn insert_review(&self, row: &ReviewRow) -> Result<(), StoreError> {
        diesel::insert_into(reviews::table)
            .values(row)
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// Replaces what a waiting review says (the agent handed the box over
    /// again before anyone answered).
    pub fn update_review(
        &self,
        account: &AccountId,
        id: &ReviewId,
        title: &str,
        summary: &str,
        urls: &[String],
    ) -> Result<ReviewRow, StoreError> {
        Ok(diesel::update(
            reviews::table
                .find(id.as_str())
                .filter(reviews::account_id.eq(account.as_str())),
        )
        .set((
            reviews::title.eq(title),
            reviews::summary.eq(summary),
            reviews::urls.eq(urls),
        ))
        .returning(ReviewRow::as_returning())
        .get_result(&mut self.conn()?)?)
    }

    /// One of the account's reviews.
    pub fn review(
        &self,
        account: &AccountId,
        id: &ReviewId,
    ) -> Result<Option<ReviewRow>, StoreError> {
        Ok(reviews::table
            .find(id.as_str())
            .filter(reviews::account_id.eq(account.as_str()))
            .select(ReviewRow::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// The box review `id` is of, whoever's it is (which node answers for
    /// the review's box: `cluster::forward`; the node that answers checks
    /// the account).
    pub fn review_box(&self, id: &ReviewId) -> Result<Option<BoxId>, StoreError> {
        Ok(reviews::table
            .find(id.as_str())
            .select(reviews::box_id)
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// The account's reviews, newest first, in one state or all, at most `limit`.
    pub fn reviews(
        &self,
        account: &AccountId,
        state: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ReviewRow>, StoreError> {
        let mut query = reviews::table
            .filter(reviews::account_id.eq(account.as_str()))
            .into_boxed();
        if let Some(state) = state {
            query = query.filter(reviews::state.eq(state.to_owned()));
        }
        Ok(query
            .order((reviews::created_at.desc(), reviews::id.desc()))
            .limit(limit)
            .select(ReviewRow::as_select())
            .load(&mut self.conn()?)?)
    }

    /// The box's latest review.
    pub fn latest_review(
        &self,
        account: &AccountId,
        box_id: &BoxId,
    ) -> Result<Option<ReviewRow>, StoreError> {
        Ok(reviews::table
            .filter(reviews::account_id.eq(account.as_str()))
            .filter(reviews::box_id.eq(box_id.as_str()))
            .order((reviews::created_at.desc(), reviews::id.desc()))
            .select(ReviewRow::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// The review's feedback in the order it was sent.
    pub fn review_items(&self, review: &ReviewId) -> Result<Vec<ItemRow>, StoreError> {
        Ok(review_items::table
            .filter(review_items::review_id.eq(review.as_str()))
            .order(review_items::position.asc())
            .select(ItemRow::as_select())
            .load(&mut self.conn()?)?)
    }

    /// Deletes (at most `limit` of) the files' rows of reviews answered or
    /// approved before `before`: the box's shots they keep and the images
    /// people sent. The rows they were, for their files to be deleted.
    pub fn take_shots_of_old_reviews(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<ShotRow>, StoreError> {
        let old = reviews::table
            .filter(reviews::state.ne("waiting"))
            .filter(reviews::answered_at.lt(before))
            .select(reviews::id.nullable());
        let doomed: Vec<ShotId> = shots::table
            .filter(shots::review_id.eq_any(old))
            .select(shots::id)
            .limit(limit)
            .load(&mut self.conn()?)?;
        if doomed.is_empty() {
            return Ok(Vec::new());
        }
        Ok(
            diesel::delete(shots::table.filter(shots::id.eq_any(&doomed)))
                .returning(ShotRow::as_returning())
                .get_results(&mut self.conn()?)?,
        )
    }

    /// Deletes the reviews answered or approved before `before` whose box
    /// is over (stopped, failed, or gone) and that keep no shot; how many.
    pub fn delete_old_reviews(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        Ok(diesel::sql_query(
            "DELETE FROM reviews r WHERE r.state <> 'waiting' AND r.answered_at < $1 \
               AND NOT EXISTS (SELECT 1 FROM boxes b WHERE b.id = r.box_id \
                               AND b.state NOT IN ('stopped', 'failed')) \
               AND NOT EXISTS (SELECT 1 FROM shots s WHERE s.review_id = r.id)",
        )
        .bind::<diesel::sql_types::Timestamptz, _>(before)
        .execute(&mut self.conn()?)?)
    }

    /// Answers a waiting review with its items and their images' rows, all
    /// at once; `None` (nothing written) when the review is not waiting.
    /// The images count toward the account's `quotas.max_shot_bytes`,
    /// checked under the account lock ([`StoreError::QuotaExceeded`]).
    pub fn answer_review(
        &self,
        account: &AccountId,
        id: &ReviewId,
        state: &str,
        answered_by: &str,
        items: &[ItemRow],
        images: &[ShotRow],
    ) -> Result<Option<ReviewRow>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            super::quota::lock_account(conn, account.as_str())?;
            let adding = images.iter().map(super::shots::row_bytes).sum();
            super::quota::check_shot_bytes(conn, &self.quotas, account.as_str(), adding)?;
            let answered: Option<ReviewRow> = diesel::update(
                reviews::table
                    .find(id.as_str())
                    .filter(reviews::account_id.eq(account.as_str()))
                    .filter(reviews::state.eq("waiting")),
            )
            .set((
                reviews::state.eq(state),
                reviews::answered_at.eq(diesel::dsl::now),
                reviews::answered_by.eq(answered_by),
            ))
            .returning(ReviewRow::as_returning())
            .get_result(conn)
            .optional()?;
            if answered.is_some() {
                diesel::insert_into(shots::table)
                    .values(images)
                    .execute(conn)?;
                diesel::insert_into(review_items::table)
                    .values(items)
                    .execute(conn)?;
            }
            Ok::<_, StoreError>(answered)
        })
    }
}
