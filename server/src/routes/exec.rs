//! Working in a box: `POST /v1/boxes/{id}/exec` (foreground, streamed as
//! NDJSON or answered as one JSON result with head and tail of the output;
//! background, answered at once with a process id), background processes and
//! their logs, and `POST /v1/boxes/{id}/sync` (a tar stream unpacked under
//! `/work/<dest>`). Output reaching the caller has the box's secrets masked.
//! The request and answer shapes are in `views::exec`.

use crate::auth::Auth;
use crate::error::{ApiError, BoxCallErrors};
use crate::ids::IdPath;
use crate::views::exec::{
    ExecBody, ExecQuery, ExecResult, ExitView, OutputView, ProcessList, ProcessView, SignalName,
    SignalQuery, SyncQuery, Synced, failure_texts, private_endpoint_hint, request, sync_dest,
};
use crate::views::paths::{BoxPath, ProcessPath};
use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, web};
use futures_util::StreamExt;
use psbx_actors::boxes::Boxes;
use psbx_actors::exec::bounded::Bounded;
use psbx_actors::exec::run::ExecEvent;
use psbx_actors::ids::BoxId;

/// Output kept of each of stdout and stderr in a JSON result: head and tail.
const KEEP: usize = 32 * 1024;

#[utoipa::path(
    tag = "boxes",
    operation_id = "exec",
    params(BoxPath, ExecQuery),
    request_body = ExecBody,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The result, or an NDJSON stream of `{\"stdout\"}`, `{\"stderr\"}` and `{\"exit\"}` lines with `?stream=true`",
            content((ExecResult = "application/json"), (String = "application/x-ndjson"))),
        BoxCallErrors,
    )
)]
#[post("/boxes/{id}/exec")]
pub async fn exec(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
    query: web::Query<ExecQuery>,
    body: web::Json<ExecBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if let Some(note) = &body.note {
        tracing::info!(box_id = %*id, note = %note.chars().take(200).collect::<String>(), "exec");
    }
    let request = request(body)?;
    let background = request.background;
    let mut events = boxes.exec(&who.account_id, &id, request).await?;
    if background {
        return match events.next().await {
            Some(Ok(ExecEvent::Started(pid))) => Ok(HttpResponse::Ok().json(ExecResult {
                pid: Some(pid),
                background: true,
                exit_code: None,
                signal: None,
                timed_out: false,
                private_endpoint_errors: Vec::new(),
                private_endpoint_hint: None,
                stdout: None,
                stderr: None,
            })),
            Some(Err(e)) => Err(e.into()),
            _ => Err(ApiError::internal("boxd did not say the command started")),
        };
    }
    if query.stream.unwrap_or(false) {
        let lines = events.map(|event| {
            let line = match event {
                Ok(ExecEvent::Stdout(b)) => {
                    serde_json::json!({ "stdout": String::from_utf8_lossy(&b) })
                }
                Ok(ExecEvent::Stderr(b)) => {
                    serde_json::json!({ "stderr": String::from_utf8_lossy(&b) })
                }
                Ok(ExecEvent::Exit(exit)) => serde_json::json!({ "exit": ExitView::from(&exit) }),
                Ok(ExecEvent::Started(pid)) => serde_json::json!({ "pid": pid }),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            };
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            Ok::<_, actix_web::Error>(web::Bytes::from(bytes))
        });
        return Ok(HttpResponse::Ok()
            .content_type("application/x-ndjson")
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .streaming(lines));
    }
    let (mut out, mut err) = (Bounded::new(KEEP, KEEP), Bounded::new(KEEP, KEEP));
    while let Some(event) = events.next().await {
        match event? {
            ExecEvent::Stdout(b) => out.push(&b),
            ExecEvent::Stderr(b) => err.push(&b),
            ExecEvent::Started(_) => {}
            ExecEvent::Exit(exit) => {
                return Ok(HttpResponse::Ok().json(ExecResult {
                    pid: None,
                    background: false,
                    exit_code: exit.code,
                    signal: exit.signal,
                    timed_out: exit.timed_out,
                    private_endpoint_hint: private_endpoint_hint(&exit.private_endpoint_errors),
                    private_endpoint_errors: failure_texts(&exit.private_endpoint_errors),
                    stdout: Some((&out).into()),
                    stderr: Some((&err).into()),
                }));
            }
        }
    }
    Err(ApiError::internal(
        "the command's stream ended without an exit status",
    ))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "listProcesses",
    params(BoxPath),
    security(("api_key" = [])),
    responses((status = 200, body = ProcessList), BoxCallErrors)
)]
#[get("/boxes/{id}/processes")]
pub async fn processes(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
) -> Result<web::Json<ProcessList>, ApiError> {
    let list = boxes.processes(&who.account_id, &id).await?;
    Ok(web::Json(ProcessList {
        processes: list.into_iter().map(ProcessView::from).collect(),
    }))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "processLogs",
    params(ProcessPath),
    security(("api_key" = [])),
    responses((status = 200, body = OutputView), BoxCallErrors)
)]
#[get("/boxes/{id}/processes/{pid}/logs")]
pub async fn logs(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    path: IdPath<(BoxId, u32)>,
) -> Result<web::Json<OutputView>, ApiError> {
    let (id, pid) = path.into_inner();
    let kept = boxes.logs(&who.account_id, &id, pid, 4 * KEEP).await?;
    Ok(web::Json((&kept).into()))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "signalProcess",
    params(ProcessPath, SignalQuery),
    security(("api_key" = [])),
    responses((status = 204), BoxCallErrors)
)]
#[delete("/boxes/{id}/processes/{pid}")]
pub async fn signal(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    path: IdPath<(BoxId, u32)>,
    query: web::Query<SignalQuery>,
) -> Result<HttpResponse, ApiError> {
    let (id, pid) = path.into_inner();
    let number = match query.signal.unwrap_or(SignalName::TERM) {
        SignalName::TERM => 15,
        SignalName::KILL => 9,
        SignalName::INT => 2,
        SignalName::HUP => 1,
    };
    boxes.signal(&who.account_id, &id, pid, number).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "sync",
    params(BoxPath, SyncQuery),
    request_body(content = String, content_type = "application/x-tar", description = "A tar stream"),
    security(("api_key" = [])),
    responses((status = 200, description = "Unpacked", body = Synced),
        (status = 400, description = "Not a tar stream (`invalid_body`), or one with paths leaving the destination (`sync_refused`)", body = crate::error::ErrorBody),
        (status = 413, description = "The tar stream passed the upload limit (1 GiB, `payload_too_large`)", body = crate::error::ErrorBody),
        BoxCallErrors)
)]
#[post("/boxes/{id}/sync")]
pub async fn sync(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
    query: web::Query<SyncQuery>,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    use crate::limits::body;
    body::check_length(&req, body::UPLOAD_LIMIT)?;
    let dest = sync_dest(query.dest.as_deref().unwrap_or_default());
    let (limited, payload) = body::Limited::wrap(payload, body::UPLOAD_LIMIT);
    let done = boxes
        .sync(&who.account_id, &id, &dest, payload)
        .await
        .map_err(|e| limited.or(e.into()))?;
    Ok(HttpResponse::Ok().json(Synced::from(done)))
}
