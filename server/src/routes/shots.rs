//! `/v1/boxes/{id}/shots`: screenshots and recordings taken in a box
//! (Chromium for a page, the virtual display otherwise), stored by psbx:
//! take, list, read, fetch the file (or its preview or poster), delete one
//! or all. The shapes, the ones `sandbox_shot` answers, are in
//! `views::shots`.

use crate::auth::Auth;
use crate::error::{ApiError, BoxCallErrors, error_responses};
use crate::ids::{IdPath, RequestId};
use crate::server_info::ServerInfo;
use crate::views::paths::{BoxPath, ShotPath};
use crate::views::shots::{Deleted, FileQuery, ShotList, ShotView, TakeShot, part};
use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, web};
use psbx_actors::ids::{BoxId, ShotId};
use psbx_actors::shots::{Shot, Shots};
use psbx_actors::storage::FileReader;
use std::collections::BTreeMap;
use utoipa::openapi::{RefOr, Response};

/// The errors of a shot that is asked for by id.
struct ShotErrors;

impl utoipa::IntoResponses for ShotErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses(&[(
            404,
            "No such box (`box_not_found`) or no such shot of it (`shot_not_found`) in this account",
        )])
    }
}

/// The errors of taking a shot, beyond a box call's.
struct TakeErrors;

impl utoipa::IntoResponses for TakeErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut all = BoxCallErrors::responses();
        all.extend(error_responses(&[
            (
                400,
                "Out of range or contradicting fields (`invalid_shot`), or boxd refused the request (`invalid_request`)",
            ),
            (
                413,
                "The file would pass 200 MiB (`shot_too_large`): a smaller viewport, no fullPage, fewer seconds",
            ),
            (
                429,
                "The shot would take the account's shots past `quotas.max_shot_bytes` (`quota_exceeded`; nothing is stored), \
                 or this account (4) or this server (16) is taking as many shots at once as it may (`too_many_shots`)",
            ),
            (
                502,
                "The page could not be opened (`shot_failed`: the URL and the browser's error), or Chromium or ffmpeg failed in the box (the last lines they wrote), \
                 or boxd sent something other than what was asked for (`shot_failed`: not a PNG, or a recording whose first bytes are not WebM's or MP4's, \
                 another media type, an image over 7680x16384 px, a file shorter than announced; nothing is stored)",
            ),
            (
                503,
                "The box's image lacks Chromium, Xvfb or ffmpeg (`shot_unavailable`), or the box cannot be reached now",
            ),
            (
                504,
                "The page did not load within 30 s (`page_timeout`), or boxd did not answer in time",
            ),
        ]));
        all
    }
}

#[utoipa::path(
    tag = "shots",
    operation_id = "takeShot",
    params(BoxPath),
    request_body = TakeShot,
    security(("api_key" = [])),
    responses(
        (status = 201, description = "Taken and stored. A screenshot of a page is taken by Chromium in the box \
            at `width`x`height`; without `url`, of the box's virtual display. Wakes a frozen box", body = ShotView),
        TakeErrors,
    )
)]
#[post("/boxes/{id}/shots")]
pub async fn take(
    Auth(who): Auth,
    shots: web::Data<Shots>,
    info: web::Data<ServerInfo>,
    id: IdPath<BoxId>,
    body: Option<web::Json<TakeShot>>,
) -> Result<HttpResponse, ApiError> {
    let request = body
        .map(web::Json::into_inner)
        .unwrap_or_default()
        .request();
    let shot = shots.take(&who.account_id, &id, request).await?;
    Ok(HttpResponse::Created().json(ShotView::new(&shot, &info)))
}

#[utoipa::path(
    tag = "shots",
    operation_id = "listShots",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The box's screenshots and recordings, oldest first", body = ShotList),
        (status = 404, description = "No such box in this account (`box_not_found`)", body = crate::error::ErrorBody),
    )
)]
#[get("/boxes/{id}/shots")]
pub async fn list(
    Auth(who): Auth,
    shots: web::Data<Shots>,
    info: web::Data<ServerInfo>,
    id: IdPath<BoxId>,
) -> Result<web::Json<ShotList>, ApiError> {
    let (listed, account_stored_bytes) = shots.list(&who.account_id, &id).await?;
    Ok(web::Json(ShotList {
        stored_bytes: listed.iter().map(|s| s.stored_bytes).sum(),
        shots: listed.iter().map(|s| ShotView::new(s, &info)).collect(),
        account_stored_bytes,
    }))
}

/// The shot, if it is one of the box's.
async fn of_box(
    shots: &Shots,
    who: &psbx_actors::store::Principal,
    id: &BoxId,
    shot: &ShotId,
) -> Result<Shot, ApiError> {
    let found = shots.get(&who.account_id, shot).await?;
    if found.box_id != *id {
        return Err(ShotId::not_found(shot.as_str()).into());
    }
    Ok(found)
}

#[utoipa::path(
    tag = "shots",
    operation_id = "getShot",
    params(ShotPath),
    security(("api_key" = [])),
    responses((status = 200, body = ShotView), ShotErrors)
)]
#[get("/boxes/{id}/shots/{shot}")]
pub async fn get(
    Auth(who): Auth,
    shots: web::Data<Shots>,
    info: web::Data<ServerInfo>,
    path: IdPath<(BoxId, ShotId)>,
) -> Result<web::Json<ShotView>, ApiError> {
    let (id, shot) = path.into_inner();
    let found = of_box(&shots, &who, &id, &shot).await?;
    Ok(web::Json(ShotView::new(&found, &info)))
}

/// A shot's file as an answer, read from the storage in pieces as the client
/// takes them (a recording is up to 200 MiB: never held whole): never
/// cached by shared caches, never sniffed.
pub fn file_answer(mime: &str, len: u64, reader: FileReader) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(mime.to_owned())
        .insert_header((header::CACHE_CONTROL, "private, max-age=3600"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .no_chunking(len)
        .streaming(pieces(reader))
}

/// The reader's bytes, 64 KiB at a time.
pub fn pieces(
    reader: FileReader,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures_util::stream::try_unfold(reader, |mut reader| async move {
        let mut piece = vec![0u8; 64 << 10];
        let n = tokio::io::AsyncReadExt::read(&mut reader, &mut piece).await?;
        if n == 0 {
            return Ok(None);
        }
        piece.truncate(n);
        Ok(Some((bytes::Bytes::from(piece), reader)))
    })
}

#[utoipa::path(
    tag = "shots",
    operation_id = "getShotFile",
    params(ShotPath, FileQuery),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The file: PNG, WebM or MP4 (`preview` and `poster`: PNG)",
            content(("image/png"), ("video/webm"), ("video/mp4"))),
        (status = 400, description = "An unknown part or query parameter (`invalid_request`)", body = crate::error::ErrorBody),
        ShotErrors,
    )
)]
#[get("/boxes/{id}/shots/{shot}/file")]
pub async fn file(
    Auth(who): Auth,
    shots: web::Data<Shots>,
    path: IdPath<(BoxId, ShotId)>,
    query: web::Query<FileQuery>,
) -> Result<HttpResponse, ApiError> {
    let (id, shot) = path.into_inner();
    let wanted = part(query.part.as_deref())?;
    of_box(&shots, &who, &id, &shot).await?;
    let (_, mime, len, reader) = shots.open(&who.account_id, &shot, wanted).await?;
    Ok(file_answer(&mime, len, reader))
}

#[utoipa::path(
    tag = "shots",
    operation_id = "deleteShot",
    params(ShotPath),
    security(("api_key" = [])),
    responses((status = 204, description = "Deleted, files and all"), ShotErrors)
)]
#[delete("/boxes/{id}/shots/{shot}")]
pub async fn remove(
    Auth(who): Auth,
    shots: web::Data<Shots>,
    path: IdPath<(BoxId, ShotId)>,
) -> Result<HttpResponse, ApiError> {
    let (id, shot) = path.into_inner();
    shots.delete(&who.account_id, &id, &shot).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(
    tag = "shots",
    operation_id = "deleteShots",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "All of the box's screenshots and recordings deleted, those a review keeps \
            included (\"delete this box's screenshots\")", body = Deleted),
        (status = 404, description = "No such box in this account (`box_not_found`)", body = crate::error::ErrorBody),
    )
)]
#[delete("/boxes/{id}/shots")]
pub async fn remove_all(
    Auth(who): Auth,
    shots: web::Data<Shots>,
    id: IdPath<BoxId>,
) -> Result<web::Json<Deleted>, ApiError> {
    let deleted = shots.delete_all(&who.account_id, &id).await?;
    Ok(web::Json(Deleted { deleted }))
}
