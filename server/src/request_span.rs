//! The span every HTTP request is logged in: tracing-actix-web's, except that a
//! one-time sign-in link (`/oauth/login/<token>`) is logged without its token
//! (here and in the request log line, [`loggable_path`]).

use actix_web::Error;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use tracing::Span;
use tracing::field::Empty;
use tracing_actix_web::{DefaultRootSpanBuilder, RootSpanBuilder};

/// Where secrets ride in the path: logged as this prefix and `[redacted]`.
const SECRET_PATHS: [&str; 1] = ["/oauth/login/"];

/// The request's path as logs may show it.
pub fn loggable_path(path: &str) -> String {
    match SECRET_PATHS.iter().find(|p| path.starts_with(*p)) {
        Some(prefix) => format!("{prefix}[redacted]"),
        None => path.to_owned(),
    }
}

pub struct RedactingRootSpan;

impl RootSpanBuilder for RedactingRootSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        match SECRET_PATHS.iter().find(|p| request.path().starts_with(*p)) {
            // The default span records the whole target: this one does not.
            Some(prefix) => {
                let route = request.match_pattern().unwrap_or_default();
                tracing::info_span!(
                    "HTTP request",
                    http.method = %request.method(),
                    http.route = %route,
                    http.target = %format!("{prefix}[redacted]"),
                    http.status_code = Empty,
                    otel.name = %format!("{} {route}", request.method()),
                    otel.kind = "server",
                    otel.status_code = Empty,
                    exception.message = Empty,
                    exception.details = Empty,
                )
            }
            None => DefaultRootSpanBuilder::on_request_start(request),
        }
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_in_links_lose_their_token() {
        assert_eq!(
            loggable_path("/oauth/login/abc123"),
            "/oauth/login/[redacted]"
        );
        assert_eq!(loggable_path("/v1/boxes"), "/v1/boxes");
    }
}
