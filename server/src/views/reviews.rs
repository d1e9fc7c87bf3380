//! The shapes of reviews on the API: a hand-over, what a review reads as
//! ([`ReviewView`], with its feedback and the shots it keeps), the queries
//! that list and wait for them, and an answer. `routes::reviews` and MCP's
//! `sandbox_review` and `sandbox_status` answer the same views.

use super::shots::ShotView;
use crate::error::ApiError;
use crate::server_info::ServerInfo;
use chrono::{DateTime, Utc};
use psbx_actors::reviews::{Answerer, Review, ReviewState};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The longest a read waits for an answer.
pub const MAX_WAIT_S: u64 = 3600;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandOver {
    /// What the person should look at, in a few words.
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    /// What was done and how to try it (plain text).
    #[serde(default)]
    #[schema(max_length = 20000)]
    pub summary: String,
    /// The pages to open (box URLs); none: the box's URL.
    #[serde(default)]
    #[schema(max_items = 20)]
    pub urls: Vec<String>,
}

/// One thing the person said.
#[derive(Debug, Clone, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackView {
    pub id: String,
    pub text: String,
    /// The screenshot they drew on (PNG), if they did.
    pub image: Option<ShotView>,
    pub created_at: DateTime<Utc>,
}

/// A box handed to a person, and what they answered.
#[derive(Debug, Clone, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReviewView {
    /// `rev_...`
    pub id: String,
    pub box_id: String,
    pub title: String,
    pub summary: String,
    pub urls: Vec<String>,
    /// `waiting` (nobody answered yet), `answered` (feedback: something to
    /// change) or `approved` (it looks good).
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
    /// Who answered: `app` (a person signed in to psbx's app), or
    /// `api_key:<key id>` / `oauth:<client id>` when the answer came through
    /// `POST /v1/reviews/{id}/answer` (a program, perhaps the agent itself,
    /// not the person in the app). Null while waiting.
    pub answered_by: Option<String>,
    pub feedback: Vec<FeedbackView>,
    /// The box's screenshots and recordings the review keeps.
    pub shots: Vec<ShotView>,
    /// The review in psbx's app, for the person.
    pub app_url: String,
}

impl ReviewView {
    pub fn new(review: &Review, info: &ServerInfo) -> Self {
        Self {
            id: review.id.to_string(),
            box_id: review.box_id.to_string(),
            title: review.title.clone(),
            summary: review.summary.clone(),
            urls: review.urls.clone(),
            state: review.state.as_str().to_owned(),
            created_at: review.created_at,
            answered_at: review.answered_at,
            answered_by: review.answered_by.as_ref().map(Answerer::stored),
            feedback: review
                .items
                .iter()
                .map(|i| FeedbackView {
                    id: i.id.to_string(),
                    text: i.text.clone(),
                    image: i.image.as_ref().map(|s| ShotView::new(s, info)),
                    created_at: i.created_at,
                })
                .collect(),
            shots: review
                .shots
                .iter()
                .map(|s| ShotView::new(s, info))
                .collect(),
            app_url: format!("{}/app/reviews/{}", info.public_url, review.id),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewList {
    pub reviews: Vec<ReviewView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only reviews in this state.
    #[param(pattern = "^(waiting|answered|approved)$")]
    pub state: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Wait this many seconds at most for the person's answer (0 to 3600,
    /// default 0: read it as it stands).
    #[param(maximum = 3600)]
    pub wait_s: Option<u64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerItem {
    #[serde(default)]
    #[schema(max_length = 10000)]
    pub text: String,
    /// The image drawn on, PNG in base64 (at most 16 MiB decoded; the whole body at most 32 MiB).
    pub image: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// It looks good.
    #[serde(default)]
    pub approved: bool,
    #[serde(default)]
    #[schema(max_items = 20)]
    pub items: Vec<AnswerItem>,
}

/// The state a query names.
pub fn state(name: Option<&str>) -> Result<Option<ReviewState>, ApiError> {
    name.map(|s| {
        ReviewState::parse(s).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("state {s:?} is not waiting, answered or approved"),
            )
        })
    })
    .transpose()
}
