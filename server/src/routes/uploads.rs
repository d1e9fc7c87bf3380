//! `PUT|POST /v1/uploads/{token}`: a one-time upload URL, as the MCP tool
//! `sandbox_sync` hands out, for a tar stream unpacked into a box exactly like
//! `POST /v1/boxes/{id}/sync`. The token in the path is the credential (single
//! use, short-lived, bound to an account, a box and a destination), so these
//! routes sit outside the API key middleware. The token never reaches the log
//! (see `request_span`).

use crate::error::{ApiError, blocking};
use crate::limits::body;
use crate::views::exec::Synced;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, post, put, web};
use psbx_actors::boxes::Boxes;
use psbx_actors::store::{Store, UploadClaim};

const AGAIN: &str = "call the MCP tool sandbox_sync again for a fresh upload URL \
                     (each URL takes one upload within 15 minutes)";

async fn receive(
    req: HttpRequest,
    store: web::Data<Store>,
    boxes: web::Data<Boxes>,
    token: String,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // Before the token is spent: a body said to be too large is refused
    // and the URL stays usable for a smaller one.
    body::check_length(&req, body::UPLOAD_LIMIT)?;
    let store = store.into_inner();
    let claim = blocking(move || store.claim_upload(&token)).await?;
    let target = match claim {
        UploadClaim::Ready(target) => target,
        UploadClaim::Unknown => {
            return Err(ApiError::not_found(
                "upload_not_found",
                "this upload URL is not known to this server",
            )
            .hint(AGAIN));
        }
        UploadClaim::Used => {
            return Err(ApiError::new(
                StatusCode::GONE,
                "upload_used",
                "this upload URL was already used: each one takes exactly one upload",
            )
            .hint(AGAIN));
        }
        UploadClaim::Expired => {
            return Err(ApiError::new(
                StatusCode::GONE,
                "upload_expired",
                "this upload URL has expired",
            )
            .hint(AGAIN));
        }
    };
    let (limited, payload) = body::Limited::wrap(payload, body::UPLOAD_LIMIT);
    let done = boxes
        .sync(&target.account_id, &target.box_id, &target.dest, payload)
        .await
        .map_err(|e| limited.or(e.into()))?;
    tracing::info!(box_id = %target.box_id, files = done.files, bytes = done.bytes, "upload unpacked");
    Ok(HttpResponse::Ok().json(Synced::from(done)))
}

/// The error answers of an upload (`PUT` and `POST` alike).
pub struct UploadErrors;

impl utoipa::IntoResponses for UploadErrors {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        crate::error::error_responses(&[
            (
                400,
                "Not a tar stream (`invalid_body`), or one with paths leaving the destination (`sync_refused`)",
            ),
            (
                404,
                "Unknown token (`upload_not_found`), or its box is gone (`box_not_found`)",
            ),
            (
                409,
                "The box is stopped or failed (`box_stopped`, `box_failed`), or cannot wake (`invalid_state`)",
            ),
            (
                410,
                "Used or expired token (`upload_used`, `upload_expired`)",
            ),
            (
                413,
                "The tar stream passed the upload limit (1 GiB, `payload_too_large`)",
            ),
            (
                503,
                "The box or the database cannot be reached now (`box_channel_lost`, `boxes_unavailable`, `database_unavailable`)",
            ),
            (504, "boxd did not answer in time (`box_not_answering`)"),
        ])
    }
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "uploadPut",
    params(("token" = String, Path, description = "The one-time token sandbox_sync returned")),
    request_body(content = String, content_type = "application/x-tar", description = "A tar stream"),
    responses((status = 200, description = "Unpacked", body = Synced), UploadErrors)
)]
#[put("/v1/uploads/{token}")]
pub async fn upload_put(
    req: HttpRequest,
    store: web::Data<Store>,
    boxes: web::Data<Boxes>,
    token: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    receive(req, store, boxes, token.into_inner(), payload).await
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "uploadPost",
    params(("token" = String, Path, description = "The one-time token sandbox_sync returned")),
    request_body(content = String, content_type = "application/x-tar", description = "A tar stream"),
    responses((status = 200, description = "Unpacked", body = Synced), UploadErrors)
)]
#[post("/v1/uploads/{token}")]
pub async fn upload_post(
    req: HttpRequest,
    store: web::Data<Store>,
    boxes: web::Data<Boxes>,
    token: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    receive(req, store, boxes, token.into_inner(), payload).await
}
