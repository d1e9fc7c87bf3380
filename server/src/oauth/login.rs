//! One-time sign-in links printed by `psbx login-link`, in two steps so that
//! a link scanner (mail, chat) that fetches the link does not spend it, and a
//! page elsewhere cannot sign a browser in to another account (login CSRF):
//!
//! * `GET /oauth/login/{token}` shows which account the link signs in to and a
//!   button; the link stays usable;
//! * `POST /oauth/login/{token}` (from that page: same origin, and the form's
//!   token equal to its `psbx_link_csrf` cookie) spends the link, gives the
//!   browser a session cookie, and goes back to the authorize page or app
//!   page it came from (the `psbx_return` cookie: only those two kinds of
//!   path) or to `/oauth/signed-in`, a page that says who it is signed in as
//!   and links to the app.
//!
//! Links that do not work count against the client address
//! ([`super::throttle`]): over the limit both steps answer 429.

use super::authorize::cross_origin;
use super::{OAuth, page, throttle};
use crate::error::blocking;
use crate::signin::csrf::same_secret;
use crate::signin::{cookies, origin, return_path};
use actix_web::http::StatusCode;
use actix_web::http::header::{LOCATION, SET_COOKIE};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use psbx_actors::ids::random_token;
use psbx_actors::store::{Account, SESSION_TTL, Store};
use serde::Deserialize;

/// The cookie of the confirmation page's form.
pub const LINK_CSRF: &str = "psbx_link_csrf";
/// How long the confirmation page's form stays usable (links last 15 minutes).
const FORM_TTL_SECS: i64 = 900;

/// The form the confirmation page posts.
#[derive(Debug, Deserialize)]
pub struct LinkForm {
    csrf: Option<String>,
}

/// The authorize page to return to, if the cookie names one.
fn return_path(oauth: &OAuth, req: &HttpRequest) -> Option<String> {
    let encoded = oauth.cookies.get(req, cookies::RETURN)?;
    let path = String::from_utf8(URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()?;
    // Only our own authorize page or an app page: never an open redirect.
    return_path::after_link(&path).then_some(path)
}

fn not_working() -> HttpResponse {
    page::problem(
        StatusCode::NOT_FOUND,
        "This sign-in link does not work",
        "it was already used, has expired (links last 15 minutes), or was mistyped; \
         run `psbx login-link` again for a new one",
    )
}

/// Refuses a client address whose links failed too often lately.
fn throttled(oauth: &OAuth, address: &str) -> Option<HttpResponse> {
    let exceeded = oauth.throttles.links_by_address.check(address).err()?;
    tracing::info!(%address, "a sign-in link was refused: too many links that did not work");
    Some(throttle::too_many_page(&exceeded))
}

/// Counts a link that did not work against the address.
fn failed(oauth: &OAuth, address: &str) -> HttpResponse {
    let limiter = &oauth.throttles.links_by_address;
    limiter.record(address);
    if limiter.check(address).is_err() {
        tracing::warn!(%address, limit = %limiter.limit().describe(),
            "sign-in links that did not work reached their limit for this address");
    }
    not_working()
}

fn with_cookies(mut answer: HttpResponse, set: &[String]) -> HttpResponse {
    for cookie in set {
        if let Ok(value) = cookie.parse() {
            answer.headers_mut().append(SET_COOKIE, value);
        }
    }
    answer
}

fn confirmation(account: &Account, token: &str, csrf: &str) -> String {
    page::layout(
        "Sign in",
        &format!(
            "<h1>Sign in to psbx</h1><p>This link signs this browser in to the psbx account \
             <strong>{}</strong>.</p><form method=\"post\" action=\"/oauth/login/{}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <div class=\"buttons\"><button class=\"approve\">Sign in</button></div></form>\
             <p class=\"muted\">Did not run <code>psbx login-link</code> yourself? Close this \
             page: someone may be trying to sign your browser in to their account.</p>",
            page::escape(&account.name),
            page::escape(token),
            page::escape(csrf),
        ),
    )
}

/// `GET /oauth/login/{token}`: the confirmation page (the link is not spent).
pub async fn confirm_link(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    token: web::Path<String>,
) -> HttpResponse {
    let address = throttle::address(&req);
    if let Some(refused) = throttled(&oauth, &address) {
        return refused;
    }
    let token = token.into_inner();
    let found = {
        let (store, token) = (store.get_ref().clone(), token.clone());
        blocking(move || store.login_link_account(&token)).await
    };
    let account = match found {
        Ok(Some(account)) => account,
        Ok(None) => return failed(&oauth, &address),
        Err(e) => return page::problem(e.status(), "Sign-in failed", &e.to_string()),
    };
    let csrf = match random_token(32) {
        Ok(csrf) => csrf,
        Err(e) => {
            return page::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "psbx could not handle this request",
                &format!("no random numbers: {e}"),
            );
        }
    };
    with_cookies(
        page::respond(StatusCode::OK, confirmation(&account, &token, &csrf)),
        &[oauth.cookies.set(LINK_CSRF, &csrf, FORM_TTL_SECS)],
    )
}

/// `POST /oauth/login/{token}`: spends the link and signs the browser in.
pub async fn use_link(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    token: web::Path<String>,
    form: web::Form<LinkForm>,
) -> HttpResponse {
    if let Err(why) = origin::check(&req, &oauth.origins) {
        return cross_origin(&why);
    }
    let csrf_ok = match (oauth.cookies.get(&req, LINK_CSRF), form.csrf.as_deref()) {
        (Some(cookie), Some(field)) => same_secret(&cookie, field),
        _ => false,
    };
    if !csrf_ok {
        return super::authorize::expired_form();
    }
    let address = throttle::address(&req);
    if let Some(refused) = throttled(&oauth, &address) {
        return refused;
    }
    let token = token.into_inner();
    let store = store.get_ref().clone();
    let opened = match blocking(move || store.use_login_link(&token)).await {
        Ok(opened) => opened,
        Err(e) => return page::problem(e.status(), "Sign-in failed", &e.to_string()),
    };
    let Some((account, session)) = opened else {
        return failed(&oauth, &address);
    };
    tracing::info!(%account, "a sign-in link was used");
    let to = return_path(&oauth, &req).unwrap_or_else(|| "/oauth/signed-in".to_owned());
    with_cookies(
        HttpResponse::SeeOther()
            .insert_header((LOCATION, to))
            .finish(),
        &[
            oauth
                .cookies
                .set(cookies::SESSION, &session, SESSION_TTL.num_seconds()),
            oauth.cookies.clear(cookies::RETURN),
            oauth.cookies.clear(LINK_CSRF),
        ],
    )
}

pub async fn signed_in(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
) -> HttpResponse {
    let account = crate::signin::session::account(&oauth.cookies, &store, &req)
        .await
        .ok()
        .flatten();
    match account {
        Some(account) => page::respond(
            StatusCode::OK,
            page::layout(
                "Signed in",
                &format!(
                    "<h1>Signed in</h1><p>This browser is signed in to psbx as \
                     <strong>{}</strong>.</p><p class=\"muted\">Go back to the sign-in page \
                     your MCP client opened and reload it to approve the client, or \
                     <a href=\"/app\">open the psbx app</a>.</p>",
                    page::escape(&account.name)
                ),
            ),
        ),
        None => page::problem(
            StatusCode::UNAUTHORIZED,
            "Not signed in",
            "this browser is not signed in to psbx; run `psbx login-link` for a sign-in link",
        ),
    }
}
