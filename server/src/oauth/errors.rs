//! Errors of the OAuth endpoints a client program calls (token, registration,
//! revocation), in the shape RFC 6749 §5.2 prescribes:
//! `{"error": "invalid_grant", "error_description": "..."}`, never cached.

use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::http::header::{CACHE_CONTROL, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// An OAuth error answer.
#[derive(Debug)]
pub struct OAuthError {
    status: StatusCode,
    code: &'static str,
    description: String,
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
        HttpResponse::build(self.status)
            .insert_header((CACHE_CONTROL, HeaderValue::from_static("no-store")))
            .json(Body {
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
