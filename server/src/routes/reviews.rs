//! Reviews: `POST /v1/boxes/{id}/reviews` hands a box to a person (it shows
//! under "Ready for you" in the app), `GET /v1/reviews[/{id}]` reads them
//! (`wait_s` waits for the answer), `POST /v1/reviews/{id}/answer` answers
//! one as the app does. The shapes are the ones `sandbox_review` and
//! `sandbox_status` answer.

use super::shots::ShotView;
use crate::auth::Auth;
use crate::error::{ApiError, BoxCallErrors, error_responses};
use crate::server_info::ServerInfo;
use actix_web::{HttpResponse, get, post, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use psbx_actors::reviews::{Answerer, NewItem, NewReview, Review, ReviewState, Reviews};
use psbx_actors::store::Credential;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use utoipa::openapi::{RefOr, Response};
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

/// The errors of a review asked for by id.
struct ReviewErrors;

impl utoipa::IntoResponses for ReviewErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses(&[
            (
                400,
                "A field out of range (`invalid_review`, `invalid_request`)",
            ),
            (404, "No such review in this account (`review_not_found`)"),
            (409, "The review was answered already (`review_answered`)"),
        ])
    }
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

#[utoipa::path(
    tag = "reviews",
    operation_id = "handOverBox",
    params(("id" = String, Path, description = "`box_...`")),
    request_body = HandOver,
    security(("api_key" = [])),
    responses(
        (status = 201, description = "The box's review, waiting for a person: new, or the one still waiting \
            with what it says replaced. The box's shots are kept for it", body = ReviewView),
        BoxCallErrors,
    )
)]
#[post("/boxes/{id}/reviews")]
pub async fn hand_over(
    Auth(who): Auth,
    reviews: web::Data<Reviews>,
    info: web::Data<ServerInfo>,
    id: web::Path<String>,
    body: web::Json<HandOver>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let review = reviews
        .hand_over(
            &who.account_id,
            &id,
            NewReview {
                title: body.title,
                summary: body.summary,
                urls: body.urls,
            },
        )
        .await?;
    Ok(HttpResponse::Created().json(ReviewView::new(&review, &info)))
}

#[utoipa::path(
    tag = "reviews",
    operation_id = "listReviews",
    params(ListQuery),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The account's reviews, newest first (at most 200)", body = ReviewList),
        (status = 400, description = "An unknown state or query parameter (`invalid_request`)", body = crate::error::ErrorBody),
    )
)]
#[get("/reviews")]
pub async fn list(
    Auth(who): Auth,
    reviews: web::Data<Reviews>,
    info: web::Data<ServerInfo>,
    query: web::Query<ListQuery>,
) -> Result<web::Json<ReviewList>, ApiError> {
    let listed = reviews
        .list(&who.account_id, state(query.state.as_deref())?)
        .await?;
    Ok(web::Json(ReviewList {
        reviews: listed.iter().map(|r| ReviewView::new(r, &info)).collect(),
    }))
}

#[utoipa::path(
    tag = "reviews",
    operation_id = "getReview",
    params(("id" = String, Path, description = "`rev_...`"), WaitQuery),
    security(("api_key" = [])),
    responses((status = 200, description = "The review; with `wait_s`, once it is answered or the wait is up", body = ReviewView), ReviewErrors)
)]
#[get("/reviews/{id}")]
pub async fn get(
    Auth(who): Auth,
    reviews: web::Data<Reviews>,
    info: web::Data<ServerInfo>,
    id: web::Path<String>,
    query: web::Query<WaitQuery>,
) -> Result<web::Json<ReviewView>, ApiError> {
    let wait = query.wait_s.unwrap_or(0);
    if wait > MAX_WAIT_S {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!("wait_s must be at most {MAX_WAIT_S}; to wait longer, ask again"),
        ));
    }
    let review = reviews
        .wait(&who.account_id, &id, Duration::from_secs(wait))
        .await?;
    Ok(web::Json(ReviewView::new(&review, &info)))
}

#[utoipa::path(
    tag = "reviews",
    operation_id = "answerReview",
    params(("id" = String, Path, description = "`rev_...`")),
    request_body = Answer,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Answered: `answered` with the items, or `approved`", body = ReviewView),
        ReviewErrors,
        (status = 429, description = "The images would take the account's shots past `quotas.max_shot_bytes` (`quota_exceeded`): nothing is stored", body = crate::error::ErrorBody),
    )
)]
#[post("/reviews/{id}/answer")]
pub async fn answer(
    Auth(who): Auth,
    reviews: web::Data<Reviews>,
    info: web::Data<ServerInfo>,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<web::Json<ReviewView>, ApiError> {
    let body: Answer =
        crate::limits::body::json_upto(payload, crate::limits::body::ANSWER_LIMIT).await?;
    let items = body
        .items
        .into_iter()
        .enumerate()
        .map(|(n, item)| {
            let image_png = item
                .image
                .map(|b64| {
                    STANDARD.decode(b64.trim()).map_err(|e| {
                        ApiError::bad_request(
                            "invalid_review",
                            format!("items[{n}].image is not base64: {e}"),
                        )
                    })
                })
                .transpose()?;
            Ok(NewItem {
                text: item.text,
                image_png,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let by = match &who.credential {
        Credential::ApiKey(key) => Answerer::ApiKey(key.to_string()),
        Credential::OAuth { client_id, .. } => Answerer::OAuthClient(client_id.clone()),
    };
    let review = reviews
        .answer(&who.account_id, &id, &by, body.approved, items)
        .await?;
    Ok(web::Json(ReviewView::new(&review, &info)))
}
