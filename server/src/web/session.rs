//! Who is signed in to the app, and whether a POST may change anything.
//!
//! * The app signs in the way the OAuth sign-in page does: a password through
//!   [`crate::oauth::authorize::checked_password`] (with its throttles), or a
//!   one-time link from `psbx login-link`, which returns to the app page the
//!   sign-in started from (the `psbx_return` cookie names it; only paths
//!   [`is_app_path`] accepts). Both open the same browser session
//!   (`psbx_session`), never with a box key.
//! * [`Signed`] is the extractor of every app page: without a live session
//!   it answers 303 to `/app/sign-in?next=<the page>`.
//! * Every POST passes [`check_post`]: the browser's `Origin`
//!   ([`crate::signin::origin`]) and a double-submit token, the
//!   `psbx_app_csrf` cookie against the form's `csrf` field or the
//!   `X-CSRF-Token` header. The cookie is made once per browser (set by the
//!   app's middleware when a page made one, [`NewCsrf`]); the app has its own
//!   so that the OAuth pages' per-page token does not expire the app's forms.

use super::layout::{self, PageError};
use crate::error::blocking;
use crate::oauth::OAuth;
use crate::oauth::authorize::checked_password;
use crate::signin::csrf::same_secret;
use crate::signin::return_path::{is_app_path, sign_in_url};
use crate::signin::{cookies, origin};
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{LOCATION, RETRY_AFTER, SET_COOKIE};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, ResponseError, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures_util::future::LocalBoxFuture;
use psbx_actors::ids::random_token;
use psbx_actors::store::{Account, SESSION_TTL, Store};
use serde::Deserialize;

/// The app's anti-CSRF cookie.
pub const APP_CSRF: &str = "psbx_app_csrf";
/// The header a script sends the token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long the anti-CSRF cookie lasts (renewed with every page that has none).
const CSRF_TTL_SECS: i64 = 7 * 24 * 3600;
/// How long the way back after a sign-in link is remembered.
const RETURN_TTL_SECS: i64 = 3600;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No live session: the sign-in page, then back to `next`.
    #[error("not signed in")]
    SignedOut { next: String },
    /// A POST from another origin, or without its token.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Page(#[from] PageError),
}

impl ResponseError for SessionError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::SignedOut { .. } => StatusCode::SEE_OTHER,
            Self::Refused(_) => StatusCode::FORBIDDEN,
            Self::Page(e) => e.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            Self::SignedOut { next } => HttpResponse::SeeOther()
                .insert_header((LOCATION, sign_in_url(next)))
                .finish(),
            Self::Refused(why) => {
                tracing::warn!(reason = %why, "an app form was refused");
                layout::problem(
                    StatusCode::FORBIDDEN,
                    "This form was not sent from this page",
                    "psbx only accepts its forms from its own pages open in this browser; \
                     reload the page and try again",
                )
            }
            Self::Page(e) => e.error_response(),
        }
    }
}

/// A signed-in person: the account, and the token the page's forms carry.
#[derive(Debug, Clone)]
pub struct Signed {
    pub account: Account,
    pub csrf: String,
}

/// A new anti-CSRF token made for this request: the middleware sets its cookie.
#[derive(Debug, Clone)]
pub struct NewCsrf(pub String);

/// The request's anti-CSRF token: its cookie's, or a new one (then the
/// middleware sets the cookie).
pub fn csrf_token(req: &HttpRequest) -> Result<String, PageError> {
    if let Some(kept) = req.extensions().get::<NewCsrf>() {
        return Ok(kept.0.clone());
    }
    let oauth = oauth(req)?;
    if let Some(token) = oauth.cookies.get(req, APP_CSRF)
        && token.len() >= 32
        && token.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Ok(token);
    }
    let token =
        random_token(32).map_err(|e| PageError::Internal(format!("no random numbers: {e}")))?;
    req.extensions_mut().insert(NewCsrf(token.clone()));
    Ok(token)
}

/// The `Set-Cookie` value of a new anti-CSRF token.
pub fn csrf_cookie(oauth: &OAuth, token: &str) -> String {
    oauth.cookies.set(APP_CSRF, token, CSRF_TTL_SECS)
}

fn oauth(req: &HttpRequest) -> Result<web::Data<OAuth>, PageError> {
    req.app_data::<web::Data<OAuth>>()
        .cloned()
        .ok_or_else(|| PageError::Internal("the app has no OAuth settings".into()))
}

fn store(req: &HttpRequest) -> Result<web::Data<Store>, PageError> {
    req.app_data::<web::Data<Store>>()
        .cloned()
        .ok_or_else(|| PageError::Internal("the app has no store".into()))
}

/// The account the request's session cookie is signed in to.
pub async fn session_account(req: &HttpRequest) -> Result<Option<Account>, PageError> {
    let (oauth, store) = (oauth(req)?, store(req)?);
    Ok(crate::signin::session::account(&oauth.cookies, &store, req).await?)
}

/// The page to come back to: the request's own path for a GET, the app's
/// home for anything else (a POST cannot be replayed after signing in).
fn back_to(req: &HttpRequest) -> String {
    let path = match req.query_string() {
        "" => req.path().to_owned(),
        query => format!("{}?{query}", req.path()),
    };
    if req.method() == actix_web::http::Method::GET && is_app_path(&path) {
        path
    } else {
        "/app".to_owned()
    }
}

impl FromRequest for Signed {
    type Error = SessionError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let Some(account) = session_account(&req).await? else {
                return Err(SessionError::SignedOut {
                    next: back_to(&req),
                });
            };
            Ok(Self {
                account,
                csrf: csrf_token(&req)?,
            })
        })
    }
}

/// Whether a POST may change state: this server's origin, and the form's
/// token (`field`, or the `X-CSRF-Token` header) equal to the cookie's.
pub fn check_post(req: &HttpRequest, field: Option<&str>) -> Result<(), SessionError> {
    let oauth = oauth(req)?;
    origin::check(req, &oauth.origins).map_err(SessionError::Refused)?;
    let header = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    match (oauth.cookies.get(req, APP_CSRF), field.or(header)) {
        (Some(cookie), Some(given)) if same_secret(&cookie, given) => Ok(()),
        (None, _) => Err(SessionError::Refused(
            "the app's anti-CSRF cookie is missing".into(),
        )),
        _ => Err(SessionError::Refused(
            "the form's token is not the cookie's".into(),
        )),
    }
}

/// The query of the sign-in page.
#[derive(Debug, Deserialize)]
pub struct Next {
    next: Option<String>,
}

impl Next {
    fn path(&self) -> String {
        self.next
            .as_deref()
            .filter(|p| is_app_path(p))
            .unwrap_or("/app")
            .to_owned()
    }
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    csrf: Option<String>,
    account: Option<String>,
    password: Option<String>,
    next: Option<String>,
}

/// The sign-in page (a problem shown above the form when `error`).
fn sign_in_page(csrf: &str, next: &str, account: &str, error: Option<&str>) -> String {
    let error = error
        .map(|e| {
            format!(
                "<p class=\"error\" role=\"alert\">{}</p>",
                layout::escape(e)
            )
        })
        .unwrap_or_default();
    layout::page(
        "Sign in",
        None,
        &format!(
            "<section class=\"narrow\"><h1>Sign in to psbx</h1>{error}\
             <form method=\"post\" action=\"/app/sign-in\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"next\" value=\"{next}\">\
             <label for=\"account\">Account</label>\
             <input type=\"text\" id=\"account\" name=\"account\" value=\"{account}\" \
             autocomplete=\"username\" autocapitalize=\"none\" required>\
             <label for=\"password\">Password</label>\
             <input type=\"password\" id=\"password\" name=\"password\" \
             autocomplete=\"current-password\" required>\
             <p><button class=\"primary\" type=\"submit\">Sign in</button></p></form>\
             <p class=\"muted\">No password? On the psbx server run \
             <code>psbx account set-password</code>, or <code>psbx login-link</code> and open \
             the link it prints in this browser: it brings you back here signed in.</p>\
             </section>",
            csrf = layout::escape(csrf),
            next = layout::escape(next),
            account = layout::escape(account),
        ),
    )
}

fn with_cookies(mut answer: HttpResponse, set: &[String]) -> HttpResponse {
    for cookie in set {
        if let Ok(value) = cookie.parse() {
            answer.headers_mut().append(SET_COOKIE, value);
        }
    }
    answer
}

/// `GET /app/sign-in`: the form; a browser already signed in goes on.
pub async fn show(req: HttpRequest, query: web::Query<Next>) -> Result<HttpResponse, PageError> {
    let next = query.path();
    if session_account(&req).await?.is_some() {
        return Ok(HttpResponse::SeeOther()
            .insert_header((LOCATION, next))
            .finish());
    }
    let oauth = oauth(&req)?;
    let csrf = csrf_token(&req)?;
    // A sign-in link opened in this browser comes back to this page's `next`.
    let back = URL_SAFE_NO_PAD.encode(&next);
    Ok(with_cookies(
        layout::html(StatusCode::OK, sign_in_page(&csrf, &next, "", None)),
        &[oauth.cookies.set(cookies::RETURN, &back, RETURN_TTL_SECS)],
    ))
}

/// `POST /app/sign-in`: checks the password (throttled) and opens a session.
pub async fn sign_in(
    req: HttpRequest,
    form: web::Form<SignInForm>,
) -> Result<HttpResponse, SessionError> {
    let form = form.into_inner();
    check_post(&req, form.csrf.as_deref())?;
    let oauth = oauth(&req)?;
    let store = store(&req)?;
    let next = Next { next: form.next }.path();
    let name = form.account.unwrap_or_default().trim().to_owned();
    let password = form.password.unwrap_or_default();
    let csrf = csrf_token(&req)?;
    if name.is_empty() || password.is_empty() {
        return Ok(layout::html(
            StatusCode::UNAUTHORIZED,
            sign_in_page(
                &csrf,
                &next,
                &name,
                Some("Give the account's name and password."),
            ),
        ));
    }
    let found = match checked_password(&oauth, &store, &req, name.clone(), password).await {
        Ok(found) => found,
        Err(refused) => return Ok(throttled(refused)),
    };
    let Some(account) = found else {
        return Ok(layout::html(
            StatusCode::UNAUTHORIZED,
            sign_in_page(
                &csrf,
                &next,
                &name,
                Some("The account name or password is wrong."),
            ),
        ));
    };
    let session = {
        let (store, id) = (store.get_ref().clone(), account.id.clone());
        blocking(move || store.open_session(&id))
            .await
            .map_err(PageError::from)?
    };
    tracing::info!(account = %account.id, "signed in to the app with a password");
    Ok(with_cookies(
        HttpResponse::SeeOther()
            .insert_header((LOCATION, next))
            .finish(),
        &[
            oauth
                .cookies
                .set(cookies::SESSION, &session, SESSION_TTL.num_seconds()),
            oauth.cookies.clear(cookies::RETURN),
        ],
    ))
}

/// The app's page for a sign-in the throttles refused (the OAuth page's
/// status and `Retry-After`; its words are for MCP clients).
fn throttled(refused: HttpResponse) -> HttpResponse {
    let retry = refused.headers().get(RETRY_AFTER).cloned();
    let wait = retry
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .map(|s| format!("wait {s} s"))
        .unwrap_or_else(|| "wait a minute".to_owned());
    let mut answer = layout::problem(
        refused.status(),
        "Too many failed sign-ins",
        &format!(
            "this account or this address failed to sign in too often lately: {wait}, then try again, or sign in with a link from `psbx login-link`"
        ),
    );
    if let Some(retry) = retry {
        answer.headers_mut().insert(RETRY_AFTER, retry);
    }
    answer
}

/// The sign-out form's fields.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    pub csrf: Option<String>,
}

/// `POST /app/sign-out`: ends the session (for the OAuth pages too).
pub async fn sign_out(
    req: HttpRequest,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, SessionError> {
    check_post(&req, form.csrf.as_deref())?;
    let oauth = oauth(&req)?;
    if let Some(token) = oauth.cookies.get(&req, cookies::SESSION) {
        let store = store(&req)?.get_ref().clone();
        blocking(move || store.end_session(&token))
            .await
            .map_err(PageError::from)?;
    }
    Ok(with_cookies(
        HttpResponse::SeeOther()
            .insert_header((LOCATION, "/app/sign-in"))
            .finish(),
        &[oauth.cookies.clear(cookies::SESSION)],
    ))
}
