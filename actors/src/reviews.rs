//! Reviews: a box handed to a person (`sandbox_review`, the app's "Ready
//! for you") and what they send back.
//!
//! * [`Reviews::hand_over`] makes the box's review, or updates the one still
//!   waiting (an agent calling again after its wait ran out loses nothing a
//!   person is writing). The box's shots are kept for the review, past the
//!   box's stop; shots taken while it waits join it when it is read.
//! * [`Reviews::answer`] stores the person's items (text, and the image they
//!   drew on) and the verdict, at once; a review is answered once.
//! * [`Reviews::wait`] returns when the review is answered or the time is up:
//!   woken at once by an answer on this replica, and reading the store every
//!   [`POLL`] for an answer another replica took.

use crate::blocking::{TaskFailed, blocking};
use crate::boxes::Boxes;
use crate::error::BoxError;
use crate::ids::{AccountId, BoxId, FeedbackId, ReviewId, ShotId};
use crate::shots::{NewFiles, Shot, ShotError, Shots, StoredKind, preview};
use crate::store::{ItemRow, ReviewRow, ShotRow, Store, StoreError, read_enum};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub const TITLE_MAX: usize = 200;
pub const SUMMARY_MAX: usize = 20_000;
pub const URLS_MAX: usize = 20;
pub const URL_MAX: usize = 2048;
pub const ITEMS_MAX: usize = 20;
pub const TEXT_MAX: usize = 10_000;
/// The largest annotated image a person may send.
pub const IMAGE_MAX_BYTES: usize = 16 << 20;
/// How often a waiter reads the store (answers taken by other replicas).
const POLL: Duration = Duration::from_secs(2);
/// The most reviews one list answers.
const LIST_MAX: i64 = 200;

/// Where a review stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewState {
    /// Handed over; nobody answered yet.
    Waiting,
    /// The person sent feedback: something to change.
    Answered,
    /// The person said it looks good.
    Approved,
}

impl ReviewState {
    /// The state a review's row holds; any other value is unreadable.
    fn of(row: &ReviewRow) -> Result<Self, StoreError> {
        read_enum(
            || format!("the state of review {}", row.id),
            &row.state,
            Self::parse,
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Answered => "answered",
            Self::Approved => "approved",
        }
    }

    /// The state a name (a query's or a row's) names; `None` for any other.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "waiting" => Some(Self::Waiting),
            "answered" => Some(Self::Answered),
            "approved" => Some(Self::Approved),
            _ => None,
        }
    }
}

/// Who answered a review: a person in psbx's app, or a caller of the API
/// (`POST /v1/reviews/{id}/answer`), which may be the agent itself. Shown
/// wherever the answer is, so that an agent's own answer is never taken for
/// the person's (review-2 L6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answerer {
    /// Signed in to psbx's app.
    App,
    /// An API key, by its id (`key_...`).
    ApiKey(String),
    /// An OAuth client (an MCP client), by its client id.
    OAuthClient(String),
}

impl Answerer {
    /// What the `answered_by` column holds.
    pub fn stored(&self) -> String {
        match self {
            Self::App => "app".to_owned(),
            Self::ApiKey(id) => format!("api_key:{id}"),
            Self::OAuthClient(id) => format!("oauth:{id}"),
        }
    }

    /// Back from the column; `None` for reviews answered before it existed.
    pub fn parse(stored: &str) -> Option<Self> {
        match stored.split_once(':') {
            None if stored == "app" => Some(Self::App),
            Some(("api_key", id)) => Some(Self::ApiKey(id.to_owned())),
            Some(("oauth", id)) => Some(Self::OAuthClient(id.to_owned())),
            _ => None,
        }
    }

    /// Whether a person answered in the app (not through the API).
    pub fn is_person(&self) -> bool {
        matches!(self, Self::App)
    }
}

impl std::fmt::Display for Answerer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::App => f.write_str("a person in psbx's app"),
            Self::ApiKey(id) => write!(f, "the API with key {id}, not in psbx's app"),
            Self::OAuthClient(id) => write!(f, "the API as OAuth client {id}, not in psbx's app"),
        }
    }
}

/// A review with its feedback and the shots it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub id: ReviewId,
    pub box_id: BoxId,
    pub title: String,
    pub summary: String,
    pub urls: Vec<String>,
    pub state: ReviewState,
    pub created_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
    /// Who answered (none while waiting, or for answers from before psbx
    /// kept it).
    pub answered_by: Option<Answerer>,
    pub items: Vec<FeedbackItem>,
    /// The box's screenshots and recordings the review keeps, oldest first.
    pub shots: Vec<Shot>,
}

/// One thing the person said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackItem {
    pub id: FeedbackId,
    pub text: String,
    /// The image they drew on (a PNG, kind annotation).
    pub image: Option<Shot>,
    pub created_at: DateTime<Utc>,
}

/// What an agent hands over.
#[derive(Debug, Clone, Default)]
pub struct NewReview {
    pub title: String,
    pub summary: String,
    /// The pages to look at; none: the box's URL.
    pub urls: Vec<String>,
}

/// One item a person sends.
#[derive(Debug, Clone, Default)]
pub struct NewItem {
    pub text: String,
    pub image_png: Option<Vec<u8>>,
}

/// What can go wrong with reviews.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("no review {0} in this account")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// The review was answered already (by this person or someone else).
    #[error(
        "review {id} was already {state}: it is answered once; the agent hands the box over again for another round"
    )]
    AlreadyAnswered { id: String, state: &'static str },
    #[error(transparent)]
    Box(#[from] BoxError),
    #[error(transparent)]
    Shot(#[from] ShotError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<TaskFailed> for ReviewError {
    fn from(e: TaskFailed) -> Self {
        Self::Store(e.into())
    }
}

/// The account's reviews.
#[derive(Clone)]
pub struct Reviews {
    store: Store,
    boxes: Arc<Boxes>,
    shots: Shots,
    /// Bumped on every answer this replica takes: waiters look again.
    answered: Arc<watch::Sender<u64>>,
}

fn invalid(message: impl Into<String>) -> ReviewError {
    ReviewError::Invalid(message.into())
}

/// `text` trimmed, once it is at most `max` characters and has no NUL
/// (which PostgreSQL's text cannot hold), or why not.
fn bounded(field: &str, text: &str, max: usize) -> Result<String, ReviewError> {
    if text.chars().count() > max {
        return Err(invalid(format!(
            "{field} is longer than {max} characters: shorten it"
        )));
    }
    if text.contains('\0') {
        return Err(invalid(format!(
            "{field} contains NUL (\\u0000): send text without it"
        )));
    }
    Ok(text.trim().to_owned())
}

fn check_urls(urls: &[String]) -> Result<Vec<String>, ReviewError> {
    if urls.len() > URLS_MAX {
        return Err(invalid(format!(
            "urls has {} entries: at most {URLS_MAX}",
            urls.len()
        )));
    }
    urls.iter()
        .map(|url| {
            if url.len() <= URL_MAX && psbx_wire::boxd::is_page_url(url) {
                Ok(url.clone())
            } else {
                Err(invalid(format!(
                    "{url:?} in urls is not an http(s) URL of at most {URL_MAX} bytes (a host name, \
                     an optional port, a path without spaces or non-ASCII characters): give the \
                     pages to look at, such as the box's URL"
                )))
            }
        })
        .collect()
}

impl Reviews {
    pub fn new(store: Store, boxes: Arc<Boxes>, shots: Shots) -> Self {
        Self {
            store,
            boxes,
            shots,
            answered: Arc::new(watch::channel(0).0),
        }
    }

    /// Hands the box over: a new review, or the waiting one updated.
    pub async fn hand_over(
        &self,
        account: &AccountId,
        id: &BoxId,
        new: NewReview,
    ) -> Result<Review, ReviewError> {
        let title = bounded("title", &new.title, TITLE_MAX)?;
        if title.is_empty() {
            return Err(invalid(
                "title is empty: say in a few words what the person should look at",
            ));
        }
        let summary = bounded("summary", &new.summary, SUMMARY_MAX)?;
        let mut urls = check_urls(&new.urls)?;
        let record = &self.boxes.record(account, id).await?;
        if record.state.is_terminal() {
            return Err(BoxError::Over {
                id: record.id.to_string(),
                state: record.state,
                reason: Some("a review hands over a box that runs: start a new one".into()),
            }
            .into());
        }
        if urls.is_empty() {
            urls.extend(
                self.boxes
                    .urls()
                    .map(|u| u.of(&record.id, &record.spec.services).url),
            );
        }
        let (store, account, box_id) = (self.store.clone(), account.clone(), record.id.clone());
        let row = blocking(move || {
            let row = match store.latest_review(&account, &box_id)? {
                Some(waiting) if waiting.state == ReviewState::Waiting.as_str() => {
                    store.update_review(&account, &waiting.id, &title, &summary, &urls)?
                }
                _ => {
                    let row = ReviewRow {
                        id: ReviewId::generate().map_err(StoreError::Random)?,
                        account_id: account,
                        box_id,
                        title,
                        summary,
                        urls,
                        state: ReviewState::Waiting.as_str().to_owned(),
                        created_at: Utc::now(),
                        answered_at: None,
                        answered_by: None,
                    };
                    store.insert_review(&row)?;
                    row
                }
            };
            Ok::<_, StoreError>(row)
        })
        .await?;
        self.dressed(row).await
    }

    /// One of the account's reviews.
    pub async fn get(&self, account: &AccountId, id: &ReviewId) -> Result<Review, ReviewError> {
        let row = self.row(account, id).await?;
        self.dressed(row).await
    }

    async fn row(&self, account: &AccountId, id: &ReviewId) -> Result<ReviewRow, ReviewError> {
        let (store, account, rid) = (self.store.clone(), account.clone(), id.clone());
        blocking(move || store.review(&account, &rid))
            .await?
            .ok_or_else(|| ReviewError::NotFound(id.to_string()))
    }

    /// The box's latest review, if it was ever handed over.
    pub async fn latest(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<Option<Review>, ReviewError> {
        let box_id = self.boxes.record(account, id).await?.id;
        let (store, account) = (self.store.clone(), account.clone());
        match blocking(move || store.latest_review(&account, &box_id)).await? {
            Some(row) => Ok(Some(self.dressed(row).await?)),
            None => Ok(None),
        }
    }

    /// The account's reviews, newest first, in one state or all.
    pub async fn list(
        &self,
        account: &AccountId,
        state: Option<ReviewState>,
    ) -> Result<Vec<Review>, ReviewError> {
        let (store, account) = (self.store.clone(), account.clone());
        let rows =
            blocking(move || store.reviews(&account, state.map(ReviewState::as_str), LIST_MAX))
                .await?;
        let mut reviews = Vec::with_capacity(rows.len());
        for row in rows {
            reviews.push(self.dressed(row).await?);
        }
        Ok(reviews)
    }

    /// The review with its items and shots; a waiting one first keeps the
    /// shots its box took since.
    async fn dressed(&self, row: ReviewRow) -> Result<Review, ReviewError> {
        let store = self.store.clone();
        let state = ReviewState::of(&row)?;
        let (row, items, shots, images) = blocking(move || {
            if state == ReviewState::Waiting {
                store.keep_shots_for_review(&row.account_id, &row.box_id, &row.id)?;
            }
            let items = store.review_items(&row.id)?;
            let shots = store.review_shots(&row.id)?;
            let image_ids: Vec<ShotId> = items.iter().filter_map(|i| i.shot_id.clone()).collect();
            let images = store.shots_by_id(&image_ids)?;
            Ok::<_, StoreError>((row, items, shots, images))
        })
        .await?;
        let mut images: HashMap<ShotId, Shot> = images
            .into_iter()
            .map(|r| Ok((r.id.clone(), Shot::try_from(r)?)))
            .collect::<Result<_, StoreError>>()?;
        Ok(Review {
            state,
            items: items
                .into_iter()
                .map(|i| FeedbackItem {
                    image: i.shot_id.as_ref().and_then(|s| images.remove(s)),
                    id: i.id,
                    text: i.text,
                    created_at: i.created_at,
                })
                .collect(),
            shots: shots
                .into_iter()
                .map(Shot::try_from)
                .collect::<Result<_, StoreError>>()?,
            id: row.id,
            box_id: row.box_id,
            title: row.title,
            summary: row.summary,
            urls: row.urls,
            created_at: row.created_at,
            answered_by: row.answered_by.as_deref().and_then(Answerer::parse),
            answered_at: row.answered_at,
        })
    }

    /// The person's answer: items (text, maybe an image drawn on) and
    /// whether it looks good. Something to change needs at least one item.
    pub async fn answer(
        &self,
        account: &AccountId,
        id: &ReviewId,
        by: &Answerer,
        approved: bool,
        items: Vec<NewItem>,
    ) -> Result<Review, ReviewError> {
        if items.len() > ITEMS_MAX {
            return Err(invalid(format!(
                "{} items: send at most {ITEMS_MAX} at once",
                items.len()
            )));
        }
        let items: Vec<NewItem> = items
            .into_iter()
            .map(|item| {
                Ok(NewItem {
                    text: bounded("an item's text", &item.text, TEXT_MAX)?,
                    image_png: item.image_png.filter(|png| !png.is_empty()),
                })
            })
            .collect::<Result<Vec<NewItem>, ReviewError>>()?
            .into_iter()
            .filter(|item: &NewItem| !item.text.is_empty() || item.image_png.is_some())
            .collect();
        if !approved && items.is_empty() {
            return Err(invalid(
                "the feedback is empty: say what is wrong (or circle it on a screenshot), or answer that it looks good",
            ));
        }
        let row = self.row(account, id).await?;
        if row.state != ReviewState::Waiting.as_str() {
            return Err(already(&row));
        }
        let (rid, box_id) = (row.id.clone(), row.box_id.clone());
        let mut images: Vec<ShotRow> = Vec::new();
        let mut item_rows = Vec::with_capacity(items.len());
        let stored = async {
            for (position, item) in items.into_iter().enumerate() {
                let shot_id = match item.image_png {
                    None => None,
                    Some(png) => Some(
                        self.store_image(account, &box_id, &rid, png, &mut images)
                            .await?,
                    ),
                };
                item_rows.push(ItemRow {
                    id: FeedbackId::generate().map_err(StoreError::Random)?,
                    review_id: rid.clone(),
                    account_id: account.clone(),
                    position: i32::try_from(position).unwrap_or(i32::MAX),
                    text: item.text,
                    shot_id,
                    created_at: Utc::now(),
                });
            }
            Ok::<_, ReviewError>(())
        }
        .await;
        let answered = match stored {
            Ok(()) => {
                let state = if approved {
                    ReviewState::Approved
                } else {
                    ReviewState::Answered
                };
                let (store, account, rid, images, by) = (
                    self.store.clone(),
                    account.clone(),
                    rid.clone(),
                    images.clone(),
                    by.stored(),
                );
                blocking(move || {
                    store.answer_review(&account, &rid, state.as_str(), &by, &item_rows, &images)
                })
                .await
                .map_err(ReviewError::from)
            }
            Err(e) => Err(e),
        };
        let answered = match answered {
            Ok(Some(row)) => row,
            Ok(None) | Err(_) => {
                for image in &images {
                    self.shots.delete_files(image).await;
                }
                return match answered {
                    Err(e) => Err(e),
                    _ => Err(already(&self.row(account, id).await?)),
                };
            }
        };
        self.answered.send_modify(|n| *n = n.wrapping_add(1));
        self.dressed(answered).await
    }

    /// Checks and stores an annotated image; its row goes in with the answer.
    async fn store_image(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        review: &ReviewId,
        png: Vec<u8>,
        rows: &mut Vec<ShotRow>,
    ) -> Result<ShotId, ReviewError> {
        if png.len() > IMAGE_MAX_BYTES {
            return Err(invalid(format!(
                "an image is {} bytes: at most {IMAGE_MAX_BYTES}",
                png.len()
            )));
        }
        // Decoded off the async threads, with the decoding limits.
        let previewed = preview::preview_png(png).await.map_err(|e| match e {
            preview::ImageError::Io(_) => ShotError::from(e).into(),
            e => invalid(e.to_string()),
        })?;
        let size = previewed.size;
        let files = NewFiles {
            preview: previewed.preview,
            full: previewed.png,
            poster: None,
        };
        let row = self.shots.new_row(
            account,
            box_id,
            StoredKind::Annotation,
            "image/png",
            size,
            &files,
        )?;
        let row = ShotRow {
            review_id: Some(review.clone()),
            ..row
        };
        self.shots.put_files(&row, files).await?;
        let id = row.id.clone();
        rows.push(row);
        Ok(id)
    }

    /// The review once it is answered, or as it stands when `wait` is up.
    pub async fn wait(
        &self,
        account: &AccountId,
        id: &ReviewId,
        wait: Duration,
    ) -> Result<Review, ReviewError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut answers = self.answered.subscribe();
        loop {
            answers.borrow_and_update();
            let row = self.row(account, id).await?;
            if row.state != ReviewState::Waiting.as_str() || tokio::time::Instant::now() >= deadline
            {
                return self.dressed(row).await;
            }
            let next = (tokio::time::Instant::now() + POLL).min(deadline);
            tokio::select! {
                _ = answers.changed() => {}
                () = tokio::time::sleep_until(next) => {}
            }
        }
    }
}

fn already(row: &ReviewRow) -> ReviewError {
    match ReviewState::of(row) {
        Ok(state) => ReviewError::AlreadyAnswered {
            id: row.id.to_string(),
            state: state.as_str(),
        },
        Err(e) => e.into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::Answerer;

    #[test]
    fn who_answered_is_stored_and_read_back() {
        for by in [
            Answerer::App,
            Answerer::ApiKey("key_abc".into()),
            Answerer::OAuthClient("client:x".into()),
        ] {
            assert_eq!(Answerer::parse(&by.stored()), Some(by));
        }
        assert_eq!(Answerer::parse("someone"), None);
        assert!(!Answerer::ApiKey("key_abc".into()).is_person());
        assert!(
            Answerer::ApiKey("key_abc".into())
                .to_string()
                .contains("not in psbx's app")
        );
    }
}
