//! `reviews` and `review_items`: boxes handed to a person and what the person
//! sent back. A review is answered once, in one transaction with its items
//! and their annotated images' rows, so an agent polling never sees half an
//! answer.

use super::schema::{review_items, reviews, shots};
use super::shots::ShotRow;
use super::{Store, StoreError};
use crate::ids::{AccountId, BoxId, ReviewId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A review as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = reviews)]
pub struct ReviewRow {
    pub id: String,
    pub account_id: String,
    pub box_id: String,
    pub title: String,
    pub summary: String,
    pub urls: Vec<String>,
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
}

/// One feedback item as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = review_items)]
pub struct ItemRow {
    pub id: String,
    pub review_id: String,
    pub account_id: String,
    pub position: i32,
    pub text: String,
    pub shot_id: Option<String>,
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
        id: &str,
        title: &str,
        summary: &str,
        urls: &[String],
    ) -> Result<ReviewRow, StoreError> {
        Ok(diesel::update(
            reviews::table
                .find(id)
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

    /// Answers a waiting review with its items and their images' rows, all
    /// at once; `None` (nothing written) when the review is not waiting.
    pub fn answer_review(
        &self,
        account: &AccountId,
        id: &ReviewId,
        state: &str,
        items: &[ItemRow],
        images: &[ShotRow],
    ) -> Result<Option<ReviewRow>, StoreError> {
        let mut conn = self.conn()?;
        Ok(conn.transaction(|conn| {
            let answered: Option<ReviewRow> = diesel::update(
                reviews::table
                    .find(id.as_str())
                    .filter(reviews::account_id.eq(account.as_str()))
                    .filter(reviews::state.eq("waiting")),
            )
            .set((
                reviews::state.eq(state),
                reviews::answered_at.eq(diesel::dsl::now),
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
            Ok::<_, diesel::result::Error>(answered)
        })?)
    }
}
