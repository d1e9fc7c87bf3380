//! `GET /oauth/login/{token}`: opens a one-time sign-in link printed by
//! `psbx login-link`. The link is spent, the browser gets a session cookie, and
//! goes back to the authorize page it came from (the `psbx_return` cookie) or
//! to `/oauth/signed-in`, a page that says who it is signed in as.

use super::OAuth;
use super::cookies;
use super::page;
use crate::error::blocking;
use actix_web::http::StatusCode;
use actix_web::http::header::{LOCATION, SET_COOKIE};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use psbx_actors::store::{SESSION_TTL, Store};

/// The authorize page to return to, if the cookie names one.
fn return_path(req: &HttpRequest) -> Option<String> {
    let encoded = cookies::get(req, cookies::RETURN)?;
    let path = String::from_utf8(URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()?;
    // Only our own authorize page: never an open redirect.
    path.starts_with("/oauth/authorize?").then_some(path)
}

pub async fn open_link(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    token: web::Path<String>,
) -> HttpResponse {
    let token = token.into_inner();
    let store = store.get_ref().clone();
    let opened = match blocking(move || store.use_login_link(&token)).await {
        Ok(opened) => opened,
        Err(e) => return page::problem(e.status(), "Sign-in failed", &e.to_string()),
    };
    let Some((account, session)) = opened else {
        return page::problem(
            StatusCode::NOT_FOUND,
            "This sign-in link does not work",
            "it was already used, has expired (links last 15 minutes), or was mistyped; \
             run `psbx login-link` again for a new one",
        );
    };
    tracing::info!(%account, "a sign-in link was used");
    let to = return_path(&req).unwrap_or_else(|| "/oauth/signed-in".to_owned());
    let mut answer = HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish();
    for cookie in [
        cookies::set(
            cookies::SESSION,
            &session,
            SESSION_TTL.num_seconds(),
            oauth.secure_cookies,
        ),
        cookies::clear(cookies::RETURN, oauth.secure_cookies),
    ] {
        if let Ok(value) = cookie.parse() {
            answer.headers_mut().append(SET_COOKIE, value);
        }
    }
    answer
}

pub async fn signed_in(req: HttpRequest, store: web::Data<Store>) -> HttpResponse {
    let account = match cookies::get(&req, cookies::SESSION) {
        Some(token) => {
            let store = store.get_ref().clone();
            blocking(move || store.session_account(&token))
                .await
                .ok()
                .flatten()
        }
        None => None,
    };
    match account {
        Some(account) => page::respond(
            StatusCode::OK,
            page::layout(
                "Signed in",
                &format!(
                    "<h1>Signed in</h1><p>This browser is signed in to psbx as \
                     <strong>{}</strong>.</p><p class=\"muted\">Go back to the sign-in page \
                     your MCP client opened and reload it to approve the client.</p>",
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
