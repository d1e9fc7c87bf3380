//! The API's errors: an HTTP status and the JSON body of DESIGN.md §10,
//! `{"error": {"code", "message", "hint"}}`. Internal causes are logged here and
//! answered with a generic message.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use psbx_actors::store::StoreError;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `unauthorized`, `api_key_not_found`, ...
    pub code: Cow<'static, str>,
    /// What went wrong, for a person.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// A documented error answer: the [`ErrorBody`] with what its status means here.
pub fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// A response map of error answers, by status.
pub fn error_responses(list: &[(u16, &str)]) -> BTreeMap<String, RefOr<Response>> {
    list.iter()
        .map(|(status, description)| (status.to_string(), error_response(description).into()))
        .collect()
}

/// The error answers of a call on a box (`/v1/boxes/{id}/...`), in one place
/// for every box route's `responses(...)`. (401, the body's 400 and 413, and
/// the database's 503 are added to every route by `routes::docs`.)
pub struct BoxCallErrors;

impl utoipa::IntoResponses for BoxCallErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses(&[
            (
                404,
                "No such box in this account (`box_not_found`), or no such process in it (`process_not_found`)",
            ),
            (
                409,
                "The box is stopped or failed (`box_stopped`, `box_failed`), still starting (`box_starting`: retry once it runs), its state does not allow the change (`invalid_state`), or boxd could not start the command as the box is now, e.g. its `cwd` is missing (`cannot_run`)",
            ),
            (
                503,
                "The box cannot be reached now: the connection to boxd broke or is closed (`box_channel_lost`), \
                   the box network rules are not in place (`box_network_unavailable`), the host refused to thaw \
                   or freeze it and it is as it was (`box_step_failed`), this server runs no boxes \
                   (`boxes_unavailable`), no node holds the box's host now (`host_unavailable`), or the database does not answer (`database_unavailable`)",
            ),
            (
                504,
                "boxd did not answer in time (`box_not_answering`): the box is busy or stuck",
            ),
        ])
    }
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    detail: ErrorDetail,
    /// For 401: whether a credential was presented (and refused).
    bad_credential: bool,
    /// For 401: the protected resource metadata URL (RFC 9728) to point to.
    resource_metadata: Option<String>,
    /// For 429: seconds to wait (`Retry-After`).
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            detail: ErrorDetail {
                code: code.into(),
                message: message.into(),
                hint: None,
            },
            bad_credential: false,
            resource_metadata: None,
            retry_after: None,
        }
    }

    /// Too many failed attempts from the caller's address (429
    /// `too_many_attempts`, with `Retry-After`): nothing was looked up.
    pub fn too_many_attempts(exceeded: &crate::limits::rate::Exceeded) -> Self {
        let mut error = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            exceeded.message(),
        )
        .hint("check the credential (an API key from `psbx keys create`, or sign in again), then retry after Retry-After seconds");
        error.retry_after = Some(exceeded.retry_after_secs());
        error
    }

    /// Points a 401's `WWW-Authenticate` challenge at the protected resource
    /// metadata (RFC 9728 §5.1), where OAuth clients discover how to sign in.
    pub fn with_resource_metadata(mut self, url: String) -> Self {
        self.resource_metadata = Some(url);
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.detail.hint = Some(hint.into());
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &str {
        &self.detail.code
    }

    /// What went wrong, as the body says it (generic for internal errors).
    pub fn message(&self) -> &str {
        &self.detail.message
    }

    /// What to do about it, when the error says.
    pub fn hint_text(&self) -> Option<&str> {
        self.detail.hint.as_deref()
    }

    /// No credential, or not a bearer one.
    pub fn missing_credentials() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this request needs an API key",
        )
        .hint("send the header `Authorization: Bearer psbx_...`; `psbx keys create` makes a key")
    }

    /// A key that is unknown or revoked.
    pub fn invalid_credentials() -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the API key is not valid: it is unknown or was revoked",
        )
        .hint("check the key you sent, or make a new one with `psbx keys create`");
        e.bad_credential = true;
        e
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// Logs an error with its chain of causes; the caller only learns that
    /// something failed inside.
    pub fn internal_error(e: &(dyn std::error::Error + 'static)) -> Self {
        Self::internal(Causes(e))
    }

    /// Logs the cause; the caller only learns that something failed inside.
    /// An error goes through [`ApiError::internal_error`], which keeps its causes.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "psbx failed to handle this request; the server log says why",
        )
    }

    /// A lifecycle change the box's state does not allow (DESIGN.md §3).
    pub fn invalid_state(refused: &psbx_actors::box_state::InvalidTransition) -> Self {
        Self::new(StatusCode::CONFLICT, "invalid_state", refused.to_string()).hint(format!(
            "`GET /v1/boxes/{}` shows the box's state; the request can be made again once the box is in a state that allows it",
            refused.id
        ))
    }

    /// A request past one of the account's quotas (429 `quota_exceeded`).
    pub fn quota_exceeded(refused: &psbx_actors::quota::QuotaExceeded) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            refused.to_string(),
        )
        .hint(refused.hint)
    }

    pub fn unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "database unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the database is not answering right now",
        )
        .hint("retry in a moment; the operator should check the server log")
    }
}

/// An error and its sources, `outer: inner: innermost`, for the log. A source
/// whose text the message already holds (an `"...: {0}"` wrapper) is not
/// repeated.
pub struct Causes<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let said = cause.to_string();
            if !text.contains(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
            source = cause.source();
        }
        f.write_str(&text)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.detail.code,
            self.detail.message
        )
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            let mut challenge = r#"Bearer realm="psbx""#.to_owned();
            if let Some(url) = &self.resource_metadata {
                challenge.push_str(&format!(r#", resource_metadata="{url}""#));
            }
            if self.bad_credential {
                challenge.push_str(r#", error="invalid_token""#);
            }
            if let Ok(value) = HeaderValue::from_str(&challenge) {
                response.insert_header((header::WWW_AUTHENTICATE, value));
            }
        }
        if let Some(secs) = self.retry_after {
            response.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        response.json(ErrorBody {
            error: ErrorDetail {
                code: self.detail.code.clone(),
                message: self.detail.message.clone(),
                hint: self.detail.hint.clone(),
            },
        })
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(message) => Self::bad_request("invalid_request", message),
            StoreError::InvalidTransition(refused) => Self::invalid_state(&refused),
            StoreError::QuotaExceeded(refused) => Self::quota_exceeded(&refused),
            StoreError::NotASecret(_) => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "not_a_secret",
                e.to_string(),
            )
            .hint(
                "leave it out: a box reaches psbx without any psbx key or token, and one stored \
                 here would only hand your access to the code running in the box",
            ),
            _ if e.is_unavailable() => Self::unavailable(Causes(&e)),
            other => Self::internal_error(&other),
        }
    }
}

/// Runs a blocking store call off the async threads: the one helper,
/// [`psbx_actors::blocking::blocking`], with the store's error answered as an
/// [`ApiError`] here. A thin wrapper because many callers use the answer
/// itself (its status, its text on a sign-in page, an OAuth error wrapping
/// it), not only `?`.
pub async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    psbx_actors::blocking::blocking(f)
        .await
        .map_err(ApiError::from)
}

/// What to do when boxd is too slow to answer (504 `box_not_answering`).
const NOT_ANSWERING_HINT: &str =
    "the box is busy or stuck: retry in a moment; `GET /v1/boxes/{id}` shows its health";
/// What to do when the link to boxd is closed (503 `box_channel_lost`).
const CLOSED_HINT: &str = "boxd is restarting, or the box froze or stopped: retry once the box answers; `GET /v1/boxes/{id}` shows its state";

impl From<psbx_actors::error::BoxError> for ApiError {
    fn from(e: psbx_actors::error::BoxError) -> Self {
        use psbx_actors::box_state::BoxState;
        use psbx_actors::boxd_link::LinkError;
        use psbx_actors::environments::EnvError;
        use psbx_actors::error::BoxError as E;
        match e {
            E::NotFound(_) => Self::not_found("box_not_found", e.to_string())
                .hint("`GET /v1/boxes` lists this account's boxes"),
            E::ProcessNotFound { ref id, .. } => {
                let hint = format!("`GET /v1/boxes/{id}/processes` lists them");
                Self::not_found("process_not_found", e.to_string()).hint(hint)
            }
            E::Over { state, .. } => {
                let code = if state == BoxState::Failed {
                    "box_failed"
                } else {
                    "box_stopped"
                };
                Self::new(StatusCode::CONFLICT, code, e.to_string())
                    .hint("a stopped box does not come back: start a new one with `POST /v1/boxes`")
            }
            E::InvalidTransition(refused) => Self::invalid_state(&refused),
            E::Invalid(message) => Self::bad_request("invalid_request", message),
            E::StepFailed { .. } => {
                tracing::warn!(error = %e, "a lifecycle step failed; the box is as it was");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "box_step_failed", e.to_string())
                    .hint("the box keeps its state: retry in a moment; if it goes on, the operator finds why in the server log")
            }
            E::WireConflict(message) => Self::new(StatusCode::CONFLICT, "wire_conflict", message)
                .hint("`GET /v1/boxes/{id}` lists the box's services and links as they are now"),
            E::CannotRun(message) => Self::new(StatusCode::CONFLICT, "cannot_run", message)
                .hint("check that the working directory (`cwd`) exists in the box; create it first with another command"),
            // The figures (the host's memory and disk, its paths, what other
            // tenants' boxes hold) are the operator's: they go to the log,
            // and the caller learns only that this size does not fit now.
            E::HostFull(detail) => {
                tracing::warn!(why = %detail, "a box was refused: the host is full");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "host_full",
                    "no host has room for a box of this size right now (CPU, memory or disk); \
                     the server's log says what is short and which setting to change",
                )
                .hint("stop boxes you no longer need, ask for a smaller size, or try again later")
            }
            E::NetworkUnavailable(ref cause) => {
                tracing::error!(error = %Causes(cause), "the box network rules are not in place");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "box_network_unavailable",
                    format!("boxes cannot start or wake now: {cause}"),
                )
                .hint("the operator should check the server log and nftables (nft list ruleset)")
            }
            E::Starting { ref id, .. } => {
                let hint = format!("`GET /v1/boxes/{id}` shows its state; calls work once it is `running`");
                Self::new(StatusCode::CONFLICT, "box_starting", e.to_string()).hint(hint)
            }
            E::NoHost(message) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "boxes_unavailable",
                message,
            )
            .hint("the operator should check the server log and libvirt"),
            E::HostUnavailable(_) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "host_unavailable", e.to_string())
                    .hint("retry in a minute; `psbx hosts list` shows the operator which node holds each host")
            }
            E::ChannelLost(_) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "box_channel_lost", e.to_string())
                    .hint("run it again once the box answers; `GET /v1/boxes/{id}/processes` lists its background commands")
            }
            E::Overran { .. } => {
                tracing::warn!(error = %e, "boxd did not end a command at its time limit");
                Self::new(StatusCode::GATEWAY_TIMEOUT, "box_not_answering", e.to_string())
                    .hint("`GET /v1/boxes/{id}/processes` shows whether it still runs; end it with DELETE /v1/boxes/{id}/processes/{pid}")
            }
            E::Upload(_) => Self::bad_request("invalid_body", e.to_string()),
            E::SyncRefused(reason) => Self::bad_request("sync_refused", reason).hint(
                "send a tar of relative paths without '..' or links leaving the destination",
            ),
            E::ShotFailed { code, reason } => shot_failed(code, reason),
            E::ShotTimedOut { .. } => {
                Self::new(StatusCode::GATEWAY_TIMEOUT, "shot_timed_out", e.to_string())
                    .hint("the box is busy: retry, or ask for a shorter recording or a smaller viewport")
            }
            E::Boot(_) => {
                tracing::error!(error = %e, "a box did not start");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "box_start_failed", e.to_string())
                    .hint("retry; if it keeps failing, the operator should check the box image and the server log")
            }
            E::NotConfigured(_) => {
                tracing::warn!(error = %e, "a started box did not take its configuration");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "box_not_configured", e.to_string())
                    .hint("nothing of this start was kept: retry it; if it keeps failing, the operator finds why in the server log")
            }
            E::Boxd(LinkError::NoAnswer(_)) => {
                tracing::warn!(error = %e, "boxd did not answer in time");
                Self::new(StatusCode::GATEWAY_TIMEOUT, "box_not_answering", e.to_string())
                    .hint(NOT_ANSWERING_HINT)
            }
            E::Boxd(LinkError::Closed) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "box_channel_lost", e.to_string())
                    .hint(CLOSED_HINT)
            }
            // The request names an environment that is not there: 404 with
            // the environment's code (a start refers to it by name), or one
            // whose addresses do not fit in a box: its state conflicts.
            E::Environment(EnvError::NotFound(message)) => {
                Self::not_found("environment_not_found", message)
                    .hint("`GET /v1/environments` lists this account's environments")
            }
            E::Environment(EnvError::Conflict(message)) => {
                Self::new(StatusCode::CONFLICT, "environment_too_large", message)
            }
            E::Environment(EnvError::Invalid(message)) => {
                Self::bad_request("invalid_request", message)
            }
            E::Environment(inner) => inner.into(),
            E::Secrets(inner) => inner.into(),
            E::Store(inner) => inner.into(),
            E::Boxd(_)
            | E::Libvirt(_)
            | E::Task(_)
            | E::Gone(..)
            | E::Io { .. }
            | E::Random(_)
            | E::Encode(_)
            | E::Internal(_) => Self::internal_error(&e),
        }
    }
}

/// boxd's refusal of a shot: its code is the status.
fn shot_failed(code: u16, reason: String) -> ApiError {
    let (status, name, hint) = match code {
        400 => (StatusCode::BAD_REQUEST, "invalid_request", None),
        413 => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "shot_too_large",
            Some("take a smaller viewport, leave fullPage out, or record fewer seconds"),
        ),
        503 => (
            StatusCode::SERVICE_UNAVAILABLE,
            "shot_unavailable",
            Some(
                "the box's image lacks a program shots need: install it in the box, or start the box from psbx's debian image",
            ),
        ),
        504 => (
            StatusCode::GATEWAY_TIMEOUT,
            "page_timeout",
            Some(
                "check that the page's server runs in the box (sandbox_exec `curl -sI <url>`) and answers quickly",
            ),
        ),
        _ => (
            StatusCode::BAD_GATEWAY,
            "shot_failed",
            Some(
                "check the url (is its server running in the box?); a box URL is reached as http://localhost:<port> in the box",
            ),
        ),
    };
    let error = ApiError::new(status, name, reason);
    match hint {
        Some(hint) => error.hint(hint),
        None => error,
    }
}

impl From<psbx_actors::shots::ShotError> for ApiError {
    fn from(e: psbx_actors::shots::ShotError) -> Self {
        use psbx_actors::shots::ShotError as E;
        use psbx_actors::storage::StorageError;
        match e {
            E::NotFound(_) => Self::not_found("shot_not_found", e.to_string())
                .hint("`GET /v1/boxes/{id}/shots` lists a box's shots"),
            E::Invalid(message) => Self::bad_request("invalid_shot", message),
            E::Image(psbx_actors::shots::preview::ImageError::Io(_)) => Self::internal_error(&e),
            E::Image(_) => Self::bad_request("invalid_image", e.to_string()),
            E::BadFile { .. } => Self::new(StatusCode::BAD_GATEWAY, "shot_failed", e.to_string())
                .hint("boxd in the box sent something other than what was asked for; restart the box, or start a new one from psbx's image"),
            E::Busy(message) => Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_shots", message)
                .hint("wait for the shots being taken to finish, then take this one"),
            E::Box(inner) => inner.into(),
            E::Store(inner) => inner.into(),
            E::Storage(StorageError::NotFound(_)) => {
                tracing::error!(error = %e, "a shot's file is missing from the shot storage");
                Self::not_found("shot_not_found", "the shot's file is no longer stored")
            }
            E::Storage(_) => Self::internal_error(&e),
        }
    }
}

impl From<psbx_actors::reviews::ReviewError> for ApiError {
    fn from(e: psbx_actors::reviews::ReviewError) -> Self {
        use psbx_actors::reviews::ReviewError as E;
        match e {
            E::NotFound(_) => Self::not_found("review_not_found", e.to_string())
                .hint("`GET /v1/reviews` lists this account's reviews"),
            E::Invalid(message) => Self::bad_request("invalid_review", message),
            E::AlreadyAnswered { .. } => {
                Self::new(StatusCode::CONFLICT, "review_answered", e.to_string())
            }
            E::Box(inner) => inner.into(),
            E::Shot(inner) => inner.into(),
            E::Store(inner) => inner.into(),
        }
    }
}

impl From<psbx_actors::environments::EnvError> for ApiError {
    fn from(e: psbx_actors::environments::EnvError) -> Self {
        use psbx_actors::environments::EnvError;
        match e {
            EnvError::NotFound(message) => Self::not_found("environment_not_found", message),
            EnvError::Conflict(message) => Self::new(StatusCode::CONFLICT, "name_taken", message),
            EnvError::Invalid(message) => Self::bad_request("invalid_request", message),
            EnvError::Store(inner) => inner.into(),
            other => Self::internal_error(&other),
        }
    }
}

impl From<psbx_actors::secrets::SecretError> for ApiError {
    fn from(e: psbx_actors::secrets::SecretError) -> Self {
        use psbx_actors::secrets::SecretError as E;
        match e {
            E::Invalid(message) => Self::bad_request("invalid_request", message),
            E::NotFound(_) => Self::not_found("secret_not_found", e.to_string())
                .hint("`GET /v1/secrets` lists this account's secret names; `PUT /v1/secrets/{name}` stores one"),
            E::Store(inner) => inner.into(),
            E::Vault(_) | E::Internal(_) => Self::internal_error(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use psbx_actors::box_state::{BoxState, InvalidTransition};
    use psbx_actors::error::BoxError;
    use psbx_actors::ids::BoxId;

    #[test]
    fn a_refused_transition_is_a_409_naming_the_box_its_state_and_the_ask() {
        let id = BoxId::parse("box_0123456789abcdefghij").unwrap();
        let refused = InvalidTransition {
            id,
            from: BoxState::Stopped,
            to: BoxState::Frozen,
        };
        // From the actor's check, and from the store's (its compare-and-set
        // guard refuses the same transitions).
        for e in [
            BoxError::InvalidTransition(refused.clone()),
            BoxError::from(StoreError::InvalidTransition(refused.clone())),
        ] {
            let api = ApiError::from(e);
            assert_eq!(api.status(), StatusCode::CONFLICT);
            assert_eq!(api.code(), "invalid_state");
            assert_eq!(
                api.detail.message,
                "box box_0123456789abcdefghij is stopped and cannot become frozen"
            );
            let hint = api.detail.hint.as_deref().unwrap_or_default();
            assert!(
                hint.contains("GET /v1/boxes/box_0123456789abcdefghij"),
                "{hint}"
            );
        }
        let stored = ApiError::from(StoreError::InvalidTransition(refused));
        assert_eq!(
            (stored.status(), stored.code()),
            (StatusCode::CONFLICT, "invalid_state")
        );
    }

    #[test]
    fn a_full_host_tells_the_tenant_no_figure() {
        let detail = "this host's disk cannot fit a box: 12.5 GiB are free in \
                      /var/lib/psbx/data-0123/boxes, 5 GiB of it kept free (boxes.disk_margin_gb)";
        let full = ApiError::from(BoxError::HostFull(detail.into()));
        assert_eq!(
            (full.status(), full.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "host_full")
        );
        for secret in ["GiB", "/var/lib", "disk_margin_gb", "12.5"] {
            assert!(
                !full.detail.message.contains(secret),
                "{}",
                full.detail.message
            );
        }
        assert!(full.detail.hint.is_some());
    }

    #[test]
    fn a_slow_boxd_is_a_504_and_a_closed_link_a_503_not_a_500() {
        use psbx_actors::boxd_link::LinkError;
        let slow = ApiError::from(BoxError::from(LinkError::NoAnswer(
            std::time::Duration::from_secs(30),
        )));
        assert_eq!(
            (slow.status(), slow.code()),
            (StatusCode::GATEWAY_TIMEOUT, "box_not_answering")
        );
        assert_eq!(slow.detail.message, "boxd did not answer within 30s");
        assert!(slow.detail.hint.is_some());
        let closed = ApiError::from(BoxError::from(LinkError::Closed));
        assert_eq!(
            (closed.status(), closed.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "box_channel_lost")
        );
        assert!(closed.detail.hint.is_some());
        // boxd refusing or garbling a request is psbx's own failure.
        let refused = ApiError::from(BoxError::from(LinkError::Refused {
            target: "exec".into(),
            reason: "no".into(),
            code: Some(404),
        }));
        assert_eq!(
            (refused.status(), refused.code()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
    }

    #[test]
    fn a_command_whose_channel_broke_is_still_box_channel_lost() {
        let broke = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let api = ApiError::from(BoxError::ChannelLost(broke));
        assert_eq!(
            (api.status(), api.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "box_channel_lost")
        );
        assert!(
            api.detail.message.contains("(reset)"),
            "{}",
            api.detail.message
        );
    }

    #[test]
    fn a_box_in_a_missing_environment_is_a_404_and_its_store_failure_a_500() {
        use psbx_actors::environments::EnvError;
        let missing = ApiError::from(BoxError::from(EnvError::NotFound(
            "no environment \"nope\" in this account".into(),
        )));
        assert_eq!(
            (missing.status(), missing.code()),
            (StatusCode::NOT_FOUND, "environment_not_found")
        );
        assert_eq!(
            missing.detail.message,
            "no environment \"nope\" in this account"
        );
        // The same error on `/v1/environments/...` is the environment's 404.
        let direct = ApiError::from(EnvError::NotFound("no environment".into()));
        assert_eq!(
            (direct.status(), direct.code()),
            (StatusCode::NOT_FOUND, "environment_not_found")
        );
        let failed = ApiError::from(BoxError::from(EnvError::Store(StoreError::Query(
            diesel::result::Error::BrokenTransactionManager,
        ))));
        assert_eq!(
            (failed.status(), failed.code()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
    }

    #[test]
    fn the_log_line_of_a_500_carries_the_causes_once_each() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading the log of process 7")]
        struct Outer(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped: {0}")]
        struct Repeats(#[source] std::io::Error);
        let outer = Outer(std::io::Error::other("disk gone"));
        assert_eq!(
            Causes(&outer).to_string(),
            "reading the log of process 7: disk gone"
        );
        let repeats = Repeats(std::io::Error::other("disk gone"));
        assert_eq!(Causes(&repeats).to_string(), "wrapped: disk gone");
        let io = psbx_actors::error::io_error("deleting /boxes/b")(std::io::Error::other("busy"));
        assert_eq!(Causes(&io).to_string(), "deleting /boxes/b: busy");
    }
}
