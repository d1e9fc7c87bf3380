//! The root span of every request, as tracing-actix-web's default one but with
//! credentials kept out of it: the token of a one-time upload URL
//! (`/v1/uploads/<token>`), sign-in link (`/oauth/login/<token>`) or
//! takeover link (`/takeover/<token>`, `/takeover/<token>/ws`) is the
//! whole credential of that URL, so the logged path (here and in the request
//! log line, [`loggable_path`]) carries `[redacted]` in its place. A box
//! URL's path is not logged at all (the box app's paths are its own).

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{Error, HttpMessage};
use std::borrow::Cow;
use tracing::Span;
use tracing::field::Empty;
use tracing_actix_web::{DefaultRootSpanBuilder, RequestId, RootSpanBuilder};

/// Paths whose last segment is a credential.
const SECRET_SEGMENT_UNDER: &[&str] = &["/v1/uploads/", "/oauth/login/"];

/// Takeover pages and their WebSockets (`<token>`, `<token>/ws`); not their assets.
const TAKEOVER: &str = "/takeover/";

/// The path as it may be logged.
pub fn loggable_path(path: &str) -> Cow<'_, str> {
    if let Some(rest) = path.strip_prefix(TAKEOVER)
        && !rest.is_empty()
        && !rest.starts_with("assets/")
    {
        let ws = if rest.ends_with("/ws") { "/ws" } else { "" };
        return Cow::Owned(format!("{TAKEOVER}[redacted]{ws}"));
    }
    for prefix in SECRET_SEGMENT_UNDER {
        if path.starts_with(prefix) && path.len() > prefix.len() {
            return Cow::Owned(format!("{prefix}[redacted]"));
        }
    }
    Cow::Borrowed(path)
}

/// The path of a request as the span logs it: a box URL's not at all
/// (`crate::metrics::BOX_URL_PATH`).
fn target_of(request: &ServiceRequest) -> Cow<'_, str> {
    if crate::box_urls::is_box_request(request) {
        Cow::Borrowed(crate::metrics::BOX_URL_PATH)
    } else {
        loggable_path(request.path())
    }
}

pub struct RedactedSpan;

impl RootSpanBuilder for RedactedSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let route = request.match_pattern().unwrap_or_else(|| "default".into());
        let request_id = request.extensions().get::<RequestId>().copied();
        tracing::info_span!(
            "HTTP request",
            http.method = %request.method(),
            http.route = %route,
            http.target = %target_of(request),
            request_id = request_id.map(tracing::field::display),
            http.status_code = Empty,
            otel.status_code = Empty,
            exception.message = Empty,
            exception.details = Empty,
        )
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_tokens_never_reach_the_log() {
        assert_eq!(
            loggable_path("/v1/uploads/psbxup_abc"),
            "/v1/uploads/[redacted]"
        );
        assert_eq!(loggable_path("/v1/boxes/box_1"), "/v1/boxes/box_1");
        assert_eq!(loggable_path("/v1/uploads/"), "/v1/uploads/");
        assert_eq!(
            loggable_path("/oauth/login/abc123"),
            "/oauth/login/[redacted]"
        );
        assert_eq!(loggable_path("/takeover/tko_a"), "/takeover/[redacted]");
        assert_eq!(
            loggable_path("/takeover/tko_a/ws"),
            "/takeover/[redacted]/ws"
        );
        assert_eq!(
            loggable_path("/takeover/assets/xterm.js"),
            "/takeover/assets/xterm.js"
        );
    }
}
