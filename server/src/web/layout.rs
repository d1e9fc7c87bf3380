//! The app's HTML frame and its error pages: every page is server-rendered
//! around [`page`] (a header with the account, the gear to Settings and Sign
//! out; one stylesheet and one script from `/app/assets/`, no inline script
//! or style), every interpolated value escaped with
//! [`crate::oauth::page::escape`]. [`PageError`] is what an app handler
//! fails with: it renders as a page with the API's status and message (an
//! internal error's message is generic, its cause only logged).
//! The security headers are added to every `/app` response by
//! `pages::headers`.

use super::session::Signed;
use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use chrono::{DateTime, Utc};

pub use crate::oauth::page::escape;

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// An API error (a box, secret, review or shot call), shown as a page.
    #[error("{0}")]
    Api(ApiError),
    /// A request the app cannot use (400).
    #[error("{0}")]
    Invalid(String),
    /// Something failed inside: logged, shown generically.
    #[error("{0}")]
    Internal(String),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

impl From<psbx_actors::error::BoxError> for PageError {
    fn from(e: psbx_actors::error::BoxError) -> Self {
        Self::Api(e.into())
    }
}

impl From<psbx_actors::secrets::SecretError> for PageError {
    fn from(e: psbx_actors::secrets::SecretError) -> Self {
        Self::Api(e.into())
    }
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Api(e) => e.status(),
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            Self::Api(e) => {
                let title = match e.status() {
                    StatusCode::NOT_FOUND => "Not found",
                    s if s.is_client_error() => "That did not work",
                    _ => "psbx could not do that",
                };
                let message = match e.hint_text() {
                    Some(hint) => format!("{} ({hint})", e.message()),
                    None => e.message().to_owned(),
                };
                problem(e.status(), title, &message)
            }
            Self::Invalid(message) => {
                problem(StatusCode::BAD_REQUEST, "That did not work", message)
            }
            Self::Internal(cause) => {
                tracing::error!(error = %cause, "internal error in the app");
                problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "psbx could not do that",
                    "something failed inside psbx; the server log says what. Try again in a moment",
                )
            }
        }
    }
}

/// A whole page: `body` is already HTML; `who` adds the header's account,
/// Settings and Sign out.
pub fn page(title: &str, who: Option<&Signed>, body: &str) -> String {
    let header = match who {
        Some(signed) => format!(
            "<header class=\"top\"><a class=\"brand\" href=\"/app\">psbx</a>\
             <span class=\"who\">{}</span>\
             <a class=\"gear\" href=\"/app/settings\" aria-label=\"Settings\" title=\"Settings\">\
             <span aria-hidden=\"true\">⚙</span></a>\
             <form method=\"post\" action=\"/app/sign-out\" class=\"inline\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" class=\"link\">Sign out</button></form></header>",
            escape(&signed.account.name),
            escape(&signed.csrf)
        ),
        None => {
            "<header class=\"top\"><a class=\"brand\" href=\"/app\">psbx</a></header>".to_owned()
        }
    };
    let csrf = who
        .map(|s| format!("<meta name=\"csrf-token\" content=\"{}\">", escape(&s.csrf)))
        .unwrap_or_default();
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{csrf}\
         <title>{} · psbx</title><link rel=\"stylesheet\" href=\"/app/assets/app.css\">\
         <script src=\"/app/assets/app.js\" defer></script></head>\
         <body>{header}<main id=\"main\">{body}</main></body></html>\n",
        escape(title)
    )
}

/// An HTML answer, not cached.
pub fn html(status: StatusCode, html: String) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        ))
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .body(html)
}

/// A page that explains a problem, with the way home.
pub fn problem(status: StatusCode, title: &str, message: &str) -> HttpResponse {
    html(
        status,
        page(
            title,
            None,
            &format!(
                "<section class=\"narrow\"><h1>{}</h1><p class=\"error\" role=\"alert\">{}</p>\
                 <p><a href=\"/app\">Back to the app</a></p></section>",
                escape(title),
                escape(message)
            ),
        ),
    )
}

/// A time as a `<time>` element: UTC, to the minute (the script shows it local).
pub fn when(at: DateTime<Utc>) -> String {
    format!(
        "<time datetime=\"{}\">{}</time>",
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        at.format("%Y-%m-%d %H:%M UTC")
    )
}

/// Plain text as HTML: escaped, line breaks kept.
pub fn text(plain: &str) -> String {
    escape(plain).replace("\r\n", "\n").replace('\n', "<br>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_keeps_its_lines() {
        assert_eq!(
            text("a <b>\nc & \"d\""),
            "a &lt;b&gt;<br>c &amp; &quot;d&quot;"
        );
        let html = page("<x>", None, "");
        assert!(html.contains("<title>&lt;x&gt; · psbx</title>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
    }
}
