//! Errors of the OAuth endpoints a client program calls (token, registration,
//! revocation), in the shape RFC 6749 §5.2 prescribes:
//! `{"error": "invalid_grant", "error_description": "..."}`, never cached.

use crate::error::ApiError;
use crate::limits::rate::Exceeded;
use actix_web::http::StatusCode;
use actix_web::http::header::{CACHE_CONTROL, HeaderValue, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// An OAuth error answer.
#[derive(Debug)]
pub struct OAuthError {
    status: StatusCode,
    code: &'static str,
    description: String,
    /// For 429: seconds until a retry can succeed.
    retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    error_description: &'a str,
}

impl OAuthError {
    pub fn new(code: &'static str, description: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code,
            description: description.into(),
            retry_after: None,
        }
    }

    pub fn invalid_request(description: impl Into<String>) -> Self {
        Self::new("invalid_request", description)
    }

    pub fn invalid_grant(description: impl Into<String>) -> Self {
        Self::new("invalid_grant", description)
    }

    pub fn invalid_client(description: impl Into<String>) -> Self {
        let mut e = Self::new("invalid_client", description);
        e.status = StatusCode::UNAUTHORIZED;
        e
    }

    /// A rate limit was hit: 429 `too_many_requests`, naming the limit, with
    /// `Retry-After`.
    pub fn too_many(exceeded: &Exceeded) -> Self {
        let mut e = Self::new("too_many_requests", exceeded.message());
        e.status = StatusCode::TOO_MANY_REQUESTS;
        e.retry_after = Some(exceeded.retry_after_secs());
        e
    }

    /// The body is larger than the endpoint reads: 413.
    pub fn too_large(code: &'static str, description: impl Into<String>) -> Self {
        let mut e = Self::new(code, description);
        e.status = StatusCode::PAYLOAD_TOO_LARGE;
        e
    }

    /// Logs the cause; the client learns only that the server failed.
    pub fn server_error(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "OAuth endpoint failed");
        let mut e = Self::new("server_error", "psbx failed to handle this request");
        e.status = StatusCode::INTERNAL_SERVER_ERROR;
        e
    }

    pub fn code(&self) -> &str {
        self.code
    }
}

impl std::fmt::Display for OAuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

impl ResponseError for OAuthError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut answer = HttpResponse::build(self.status);
        answer.insert_header((CACHE_CONTROL, HeaderValue::from_static("no-store")));
        if let Some(secs) = self.retry_after {
            answer.insert_header((RETRY_AFTER, secs.to_string()));
        }
        answer.json(Body {
            error: self.code,
            error_description: &self.description,
        })
    }
}

impl From<ApiError> for OAuthError {
    fn from(e: ApiError) -> Self {
        // Already logged where it was made.
        let mut out = Self::new("server_error", e.to_string());
        out.status = e.status();
        out
    }
}
