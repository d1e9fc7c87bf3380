//! Request body limits: every route that takes a body reads at most a known
//! number of bytes, and a larger body is answered 413 `payload_too_large`
//! with the error body, naming the limit. JSON, form and plain bodies are
//! bounded app-wide (`app.rs` installs [`json_config`], [`form_config`] and
//! [`payload_config`]; a route may set a tighter one); the streamed tar
//! uploads (`POST /v1/boxes/{id}/sync`, `/v1/uploads/{token}`) are counted
//! as they arrive ([`Limited`]), and refused before any work when their
//! `Content-Length` already says too much.

use crate::error::ApiError;
use actix_web::HttpRequest;
use actix_web::http::StatusCode;
use actix_web::web;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The largest JSON body (the largest JSON field accepted, a service's
/// `.env` text, is 512 KiB).
pub const JSON_LIMIT: usize = 1 << 20;
/// The largest form body (the OAuth sign-in and token forms are a few
/// hundred bytes).
pub const FORM_LIMIT: usize = 64 << 10;
/// The largest body read whole by any other extractor (`Bytes`, `String`:
/// the MCP transport's JSON-RPC messages).
pub const PAYLOAD_LIMIT: usize = 4 << 20;
/// The largest review answer (its images drawn on, in base64).
pub const ANSWER_LIMIT: usize = 32 << 20;
/// The largest tar stream a sync or an upload URL takes.
pub const UPLOAD_LIMIT: u64 = 1 << 30;

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// 413 `payload_too_large`: the body passed `limit` bytes.
pub fn too_large(what: &str, limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!(
            "{what} is larger than this route takes: at most {} ({limit} bytes)",
            size(limit)
        ),
    )
    .hint("send less: split the upload (sync a directory at a time), or keep large files out of it")
}

/// JSON bodies: at most [`JSON_LIMIT`], JSON whatever the content type says
/// (the spec's own examples post with `curl -d`, which says form-urlencoded).
pub fn json_config() -> web::JsonConfig {
    use actix_web::error::JsonPayloadError as E;
    web::JsonConfig::default()
        .limit(JSON_LIMIT)
        .content_type_required(false)
        .error_handler(|err, _| match err {
            E::Overflow { limit } | E::OverflowKnownLength { limit, .. } => {
                too_large("the JSON body", limit as u64).into()
            }
            err => ApiError::bad_request("invalid_body", format!("the JSON body was refused: {err}"))
                .hint("send `Content-Type: application/json` with the fields the API documents at /v1/openapi.json")
                .into(),
        })
}

/// Form bodies: at most [`FORM_LIMIT`].
pub fn form_config() -> web::FormConfig {
    use actix_web::error::UrlencodedError as E;
    web::FormConfig::default()
        .limit(FORM_LIMIT)
        .error_handler(|err, _| match err {
            E::Overflow { limit, .. } => too_large("the form", limit as u64).into(),
            err => {
                ApiError::bad_request("invalid_body", format!("the form was refused: {err}")).into()
            }
        })
}

/// Bodies read whole by other extractors: at most [`PAYLOAD_LIMIT`].
pub fn payload_config() -> web::PayloadConfig {
    web::PayloadConfig::new(PAYLOAD_LIMIT)
}

/// A JSON body of at most `limit` bytes, for the few routes that take more
/// than [`JSON_LIMIT`] (images in a review's answer).
pub async fn json_upto<T: serde::de::DeserializeOwned>(
    mut payload: web::Payload,
    limit: usize,
) -> Result<T, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request("invalid_body", format!("reading the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large("the JSON body", limit as u64));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request("invalid_body", format!("the JSON body was refused: {e}"))
            .hint("send the fields the API documents at /v1/openapi.json")
    })
}

/// Refuses a request whose `Content-Length` already passes `limit`.
pub fn check_length(req: &HttpRequest, limit: u64) -> Result<(), ApiError> {
    let length = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match length {
        Some(n) if n > limit => Err(too_large("the upload", limit)),
        _ => Ok(()),
    }
}

/// A streamed body cut off with an error once it passes its limit; `over`
/// says afterwards whether that is why the stream ended.
pub struct Limited {
    over: Arc<AtomicBool>,
    limit: u64,
}

impl Limited {
    /// `payload`, ending in an error past `limit` bytes.
    pub fn wrap<S, E>(payload: S, limit: u64) -> (Self, impl Stream<Item = Result<Bytes, String>>)
    where
        S: Stream<Item = Result<Bytes, E>>,
        E: std::fmt::Display,
    {
        let over = Arc::new(AtomicBool::new(false));
        let flag = over.clone();
        let mut seen = 0u64;
        let stream = payload.map(move |chunk| {
            let chunk = chunk.map_err(|e| e.to_string())?;
            seen = seen.saturating_add(chunk.len() as u64);
            if seen > limit {
                flag.store(true, Ordering::Relaxed);
                return Err(format!("the upload passed {limit} bytes"));
            }
            Ok(chunk)
        });
        (Self { over, limit }, stream)
    }

    /// The 413 when the stream was cut off for its size, else `error`.
    pub fn or(&self, error: ApiError) -> ApiError {
        if self.over.load(Ordering::Relaxed) {
            too_large("the upload", self.limit)
        } else {
            error
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_past_its_limit_ends_in_an_error_and_says_why() {
        let chunks = vec![
            Ok::<_, std::io::Error>(Bytes::from_static(b"12345")),
            Ok(Bytes::from_static(b"67890")),
        ];
        let (limited, stream) = Limited::wrap(futures_util::stream::iter(chunks), 8);
        let got: Vec<Result<Bytes, String>> = futures_executor_block_on(stream.collect());
        assert!(got[0].is_ok());
        assert!(got[1].is_err());
        let answer = limited.or(ApiError::bad_request("invalid_body", "x"));
        assert_eq!(
            (answer.status(), answer.code()),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        );

        let (limited, stream) = Limited::wrap(
            futures_util::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from_static(b"1234"))]),
            8,
        );
        assert!(futures_executor_block_on(stream.collect::<Vec<_>>())[0].is_ok());
        assert_eq!(
            limited
                .or(ApiError::bad_request("invalid_body", "x"))
                .code(),
            "invalid_body"
        );
    }

    fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
