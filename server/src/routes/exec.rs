//! Working in a box: `POST /v1/boxes/{id}/exec` (foreground, streamed as
//! NDJSON or answered as one JSON result with head and tail of the output;
//! background, answered at once with a process id), background processes and
//! their logs, and `POST /v1/boxes/{id}/sync` (a tar stream unpacked under
//! `/work/<dest>`). Output reaching the caller has the box's secrets masked.

use super::patterns;
use crate::auth::Auth;
use crate::error::{ApiError, BoxCallErrors};
use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, web};
use futures_util::StreamExt;
use psbx_actors::boxes::Boxes;
use psbx_actors::exec::bounded::Bounded;
use psbx_actors::exec::run::ExecEvent;
use psbx_actors::exec::spec::ExecSpec;
use psbx_wire::boxd::{EndpointFailure, ExecRequest, Exit, Process};
use psbx_wire::frame::code::{BAD_GATEWAY, FORBIDDEN, UNAVAILABLE};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Output kept of each of stdout and stderr in a JSON result: head and tail.
const KEEP: usize = 32 * 1024;
/// The time limit when none is given.
const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// A shell command line, run with `sh -lc`.
    pub cmd: String,
    /// Working directory (default `/work`).
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Kill the command (its whole process group) after this long, e.g. `"90s"`;
    /// default `"30m"`, at most `"24h"`. Foreground commands only.
    pub timeout: Option<String>,
    /// Return at once with a process id; read the output later from its logs.
    #[serde(default)]
    pub background: bool,
    /// Why the command runs, for people reading the box's history.
    pub note: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ExecQuery {
    /// `true`: stream NDJSON events (`{"stdout": ...}`, `{"stderr": ...}`,
    /// `{"exit": ...}`) as the command runs, instead of one JSON result.
    pub stream: Option<bool>,
}

/// The output of one stream, as kept for the caller.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputView {
    /// The first and last bytes, with a marker saying what was cut between.
    pub text: String,
    pub total_bytes: u64,
    pub cut_bytes: u64,
}

impl From<&Bounded> for OutputView {
    fn from(b: &Bounded) -> Self {
        Self {
            text: b.render(),
            total_bytes: b.total(),
            cut_bytes: b.cut(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// For background commands: the process id to read logs from or signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub background: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Connections to environment addresses the command made that failed
    /// (and those of containers, whose program boxd cannot tell, made while
    /// it ran): `<host>:<port> <code> <reason>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub private_endpoint_errors: Vec<String>,
    /// What to do about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_endpoint_hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<OutputView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<OutputView>,
}

/// The command boxd is sent: the body checked by the one check every front
/// makes (`ExecSpec`), and its time limit read here (a duration text).
pub(crate) fn request(body: ExecBody) -> Result<ExecRequest, ApiError> {
    let mut request = ExecSpec::request(
        body.cmd,
        body.cwd,
        body.env.into_iter().collect(),
        None,
        body.background,
    )?;
    let timeout = match &body.timeout {
        Some(t) => patterns::strict_duration("timeout", t, patterns::MAX_EXEC_TIMEOUT)?,
        None => DEFAULT_TIMEOUT,
    };
    request.timeout_s = (!body.background).then_some(timeout.as_secs());
    Ok(request)
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "exec",
    params(("id" = String, Path, description = "`box_...`"), ExecQuery),
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
    id: web::Path<String>,
    query: web::Query<ExecQuery>,
    body: web::Json<ExecBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if let Some(note) = &body.note {
        tracing::info!(box_id = %id, note = %note.chars().take(200).collect::<String>(), "exec");
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

#[derive(Debug, Serialize, ToSchema)]
pub struct ProcessList {
    pub processes: Vec<ProcessView>,
}

/// A background command (or one MCP's `sandbox_exec` started), as
/// `GET /v1/boxes/{id}/processes` and MCP's `sandbox_status` show it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessView {
    pub pid: u32,
    pub cmd: String,
    pub running: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Killed for running past its time limit.
    pub timed_out: bool,
    /// Once it ended: like an exec result's `privateEndpointErrors`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub private_endpoint_errors: Vec<String>,
    /// Its whole output (stdout and stderr together), a file in the box.
    pub log: String,
}

impl From<Process> for ProcessView {
    fn from(p: Process) -> Self {
        let exit = p.exit.as_ref();
        Self {
            pid: p.pid,
            cmd: p.cmd,
            running: exit.is_none(),
            exit_code: exit.and_then(|e| e.code),
            signal: exit.and_then(|e| e.signal),
            timed_out: exit.is_some_and(|e| e.timed_out),
            private_endpoint_errors: exit
                .map(|e| failure_texts(&e.private_endpoint_errors))
                .unwrap_or_default(),
            log: p.log,
        }
    }
}

/// A command's end as the API shows it (the `exit` line of a streamed
/// exec): boxd's [`Exit`] with its failed connections as text.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ExitView {
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    private_endpoint_errors: Vec<String>,
}

impl From<&Exit> for ExitView {
    fn from(exit: &Exit) -> Self {
        Self {
            code: exit.code,
            signal: exit.signal,
            timed_out: exit.timed_out,
            private_endpoint_errors: failure_texts(&exit.private_endpoint_errors),
        }
    }
}

/// Failed connections as the API shows them: `<host>:<port> <code> <reason>`.
pub fn failure_texts(failures: &[EndpointFailure]) -> Vec<String> {
    failures.iter().map(ToString::to_string).collect()
}

/// What to do about the connections to environment addresses a command saw
/// fail, by their codes.
pub fn private_endpoint_hint(errors: &[EndpointFailure]) -> Option<String> {
    let codes: Vec<u16> = errors.iter().map(|f| f.code).collect();
    let mut hints = Vec::new();
    if codes.contains(&UNAVAILABLE) {
        hints.push(
            "503: the connector of that connection is offline; check its log (docker logs \
             parallelsandbox-connector) and sandbox_environments",
        );
    }
    if codes.contains(&BAD_GATEWAY) {
        hints.push(
            "502: the connector could not reach the target; check DNS, routes and security groups \
             between the connector's machine and that address",
        );
    }
    if codes.contains(&FORBIDDEN) {
        hints.push(
            "403: the address is no longer listed; add it back with PUT \
             /v1/environments/{env}/connections/{id}/endpoints",
        );
    }
    if hints.is_empty() && !errors.is_empty() {
        hints.push("see /work/.sbx/logs/private-endpoints.log and health.privateEndpoints");
    }
    (!hints.is_empty()).then(|| hints.join("; "))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "listProcesses",
    params(("id" = String, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = ProcessList), BoxCallErrors)
)]
#[get("/boxes/{id}/processes")]
pub async fn processes(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: web::Path<String>,
) -> Result<web::Json<ProcessList>, ApiError> {
    let list = boxes.processes(&who.account_id, &id).await?;
    Ok(web::Json(ProcessList {
        processes: list.into_iter().map(ProcessView::from).collect(),
    }))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "processLogs",
    params(("id" = String, Path), ("pid" = u32, Path, maximum = 4294967295.0)),
    security(("api_key" = [])),
    responses((status = 200, body = OutputView), BoxCallErrors)
)]
#[get("/boxes/{id}/processes/{pid}/logs")]
pub async fn logs(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    path: web::Path<(String, u32)>,
) -> Result<web::Json<OutputView>, ApiError> {
    let (id, pid) = path.into_inner();
    let kept = boxes.logs(&who.account_id, &id, pid, 4 * KEEP).await?;
    Ok(web::Json((&kept).into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SignalQuery {
    /// `TERM` (default), `KILL`, `INT` or `HUP`.
    #[param(inline)]
    pub signal: Option<SignalName>,
}

/// The signals a process can be sent.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum SignalName {
    TERM,
    KILL,
    INT,
    HUP,
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "signalProcess",
    params(("id" = String, Path), ("pid" = u32, Path, maximum = 4294967295.0), SignalQuery),
    security(("api_key" = [])),
    responses((status = 204), BoxCallErrors)
)]
#[delete("/boxes/{id}/processes/{pid}")]
pub async fn signal(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    path: web::Path<(String, u32)>,
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

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SyncQuery {
    /// Where under `/work` to unpack (default: `/work` itself).
    pub dest: Option<String>,
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "sync",
    params(("id" = String, Path), SyncQuery),
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
    id: web::Path<String>,
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

/// Where under `/work` a sync unpacks: `dest` without a leading `/work` or `/`.
pub fn sync_dest(dest: &str) -> String {
    dest.trim_start_matches("/work")
        .trim_start_matches('/')
        .to_owned()
}

/// What a sync answers (and an upload to a one-time upload URL).
#[derive(Debug, Serialize, ToSchema)]
pub struct Synced {
    /// Files unpacked.
    pub files: u64,
    /// Bytes of file content unpacked.
    pub bytes: u64,
}

impl From<psbx_actors::boxes::Synced> for Synced {
    fn from(done: psbx_actors::boxes::Synced) -> Self {
        Self {
            files: done.files,
            bytes: done.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(errors: &[&str]) -> Option<String> {
        let failures: Vec<EndpointFailure> = errors.iter().map(|e| e.parse().unwrap()).collect();
        private_endpoint_hint(&failures)
    }

    #[test]
    fn each_code_boxd_reports_has_its_hint_and_others_point_at_the_log() {
        assert_eq!(hint(&[]), None);
        let offline = hint(&["db.internal:5432 503 no connector session"]).unwrap();
        assert!(
            offline.starts_with("503: the connector of that connection is offline"),
            "{offline}"
        );
        assert!(
            !offline.contains("502") && !offline.contains("403"),
            "{offline}"
        );
        let both = hint(&[
            "db.internal:5432 502 connection refused",
            "10.0.0.1:443 403 not listed",
        ])
        .unwrap();
        assert!(
            both.starts_with("502: ") && both.contains("; 403: "),
            "{both}"
        );
        // (A text that is not a failure no longer reaches here: boxd sends
        // them typed, and an old boxd's unreadable text is left out.)
        for other in ["db.internal:5432 504 no answer", "10.0.0.1:80 400 bad"] {
            assert_eq!(
                hint(&[other]).unwrap(),
                "see /work/.sbx/logs/private-endpoints.log and health.privateEndpoints"
            );
        }
    }

    #[test]
    fn a_process_shows_its_exit_its_time_limit_and_its_log() {
        let view = ProcessView::from(Process {
            pid: 7,
            cmd: "make".into(),
            started_at_unix: 1,
            exit: Some(psbx_wire::boxd::Exit {
                code: None,
                signal: Some(9),
                timed_out: true,
                private_endpoint_errors: vec!["db.internal:5432 503 offline".parse().unwrap()],
            }),
            log: "/run/psbx/processes/7.log".into(),
        });
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::json!({
                "pid": 7, "cmd": "make", "running": false, "exitCode": null, "signal": 9,
                "timedOut": true, "privateEndpointErrors": ["db.internal:5432 503 offline"],
                "log": "/run/psbx/processes/7.log",
            })
        );
    }
}
