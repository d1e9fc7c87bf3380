//! Reviews: `POST /v1/boxes/{id}/reviews` hands a box to a person (it shows
//! under "Ready for you" in the app), `GET /v1/reviews[/{id}]` reads them
//! (`wait_s` waits for the answer), `POST /v1/reviews/{id}/answer` answers
//! one as the app does. The shapes, the ones `sandbox_review` and
//! `sandbox_status` answer, are in `views::reviews`.

use crate::auth::Auth;
use crate::error::{ApiError, BoxCallErrors, error_responses};
use crate::ids::IdPath;
use crate::server_info::ServerInfo;
use crate::views::paths::{BoxPath, ReviewPath};
use crate::views::reviews::{
    Answer, HandOver, ListQuery, MAX_WAIT_S, ReviewList, ReviewView, WaitQuery, state,
};
use actix_web::{HttpResponse, get, post, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_actors::ids::{BoxId, ReviewId};
use psbx_actors::reviews::{Answerer, NewItem, NewReview, Reviews};
use psbx_actors::store::Credential;
use std::collections::BTreeMap;
use std::time::Duration;
use utoipa::openapi::{RefOr, Response};

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

#[utoipa::path(
    tag = "reviews",
    operation_id = "handOverBox",
    params(BoxPath),
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
    id: IdPath<BoxId>,
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
    params(ReviewPath, WaitQuery),
    security(("api_key" = [])),
    responses((status = 200, description = "The review; with `wait_s`, once it is answered or the wait is up", body = ReviewView), ReviewErrors)
)]
#[get("/reviews/{id}")]
pub async fn get(
    Auth(who): Auth,
    reviews: web::Data<Reviews>,
    info: web::Data<ServerInfo>,
    id: IdPath<ReviewId>,
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
    params(ReviewPath),
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
    id: IdPath<ReviewId>,
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
