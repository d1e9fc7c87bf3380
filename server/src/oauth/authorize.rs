//! `GET /oauth/authorize` shows the sign-in and approval page for a client's
//! authorization request; `POST /oauth/authorize` takes the person's decision
//! and redirects to the client with `code`, `state` and `iss` (RFC 9207).
//!
//! Until the client and its redirect URI are known to be right, problems are
//! shown on the page and never redirected; after that they go back to the
//! client as `error=...`. PKCE S256 is required (`plain` is refused), and the
//! `resource` (RFC 8707) must be this server's `/mcp` (or absent: then it is
//! that). Any `scope` is answered with psbx's one scope, `mcp`. The form carries a per-page token that must equal the `psbx_csrf`
//! cookie set with the page (a double-submit check: a cross-site POST carries
//! neither the cookie nor the token).

use super::clients::{Client, ClientError};
use super::cookies;
use super::page::{self, SignIn};
use super::{OAuth, SCOPE};
use crate::error::blocking;
use actix_web::http::StatusCode;
use actix_web::http::header::{LOCATION, SET_COOKIE};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use psbx_actors::ids::random_token;
use psbx_actors::store::{Account, NewCode, Store};
use serde::Deserialize;

/// How long the page's form (its CSRF cookie) and the way back after a
/// sign-in link stay usable.
const PAGE_TTL_SECS: i64 = 3600;

/// The parameters of an authorization request (query string or form).
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    response_type: Option<String>,
    client_id: Option<String>,
    redirect_uri: Option<String>,
    state: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
    resource: Option<String>,
    // `scope` is read by nobody: psbx grants its one scope, `mcp`, whatever is asked.
}

/// The form the page posts back.
#[derive(Debug, Deserialize)]
pub struct Decision {
    #[serde(flatten)]
    params: Params,
    csrf: Option<String>,
    decision: Option<String>,
    account: Option<String>,
    password: Option<String>,
}

/// A request that passed every check.
struct Checked {
    client: Client,
    redirect_uri: String,
    state: Option<String>,
    code_challenge: String,
    resource: String,
}

/// Where an error goes back to, once the redirect URI is trusted.
struct Back<'a> {
    oauth: &'a OAuth,
    redirect_uri: &'a str,
    state: Option<&'a str>,
}

impl Back<'_> {
    fn to(&self, pairs: &[(&str, &str)]) -> HttpResponse {
        let mut url = match url::Url::parse(self.redirect_uri) {
            Ok(url) => url,
            Err(e) => {
                return page::problem(
                    StatusCode::BAD_REQUEST,
                    "Invalid redirect URI",
                    &format!("the redirect URI cannot be used: {e}"),
                );
            }
        };
        {
            let mut query = url.query_pairs_mut();
            for (k, v) in pairs {
                query.append_pair(k, v);
            }
            if let Some(state) = self.state {
                query.append_pair("state", state);
            }
            query.append_pair("iss", &self.oauth.issuer);
        }
        HttpResponse::SeeOther()
            .insert_header((LOCATION, url.as_str()))
            .finish()
    }

    fn error(&self, code: &str, description: &str) -> HttpResponse {
        self.to(&[("error", code), ("error_description", description)])
    }
}

/// A PKCE value: 43 to 128 characters of `A-Z a-z 0-9 - . _ ~` (RFC 7636 §4.1).
pub fn is_pkce_value(value: &str) -> bool {
    (43..=128).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

async fn check(oauth: &OAuth, store: &Store, p: &Params) -> Result<Checked, HttpResponse> {
    let invalid = |message: &str| {
        page::problem(
            StatusCode::BAD_REQUEST,
            "This sign-in request is not valid",
            message,
        )
    };
    let client = match oauth
        .client(store, p.client_id.as_deref().unwrap_or_default())
        .await
    {
        Ok(client) => client,
        Err(ClientError::Invalid(message)) => return Err(invalid(&message)),
        Err(ClientError::Internal(e)) => {
            return Err(page::problem(
                e.status(),
                "psbx could not handle this request",
                "the server log says why; try again in a moment",
            ));
        }
    };
    let redirect_uri = match (&p.redirect_uri, client.redirect_uris.as_slice()) {
        (Some(uri), registered) if registered.contains(uri) => uri.clone(),
        (Some(uri), _) => {
            return Err(invalid(&format!(
                "redirect_uri {uri:?} is not one of the redirect URIs registered for this client"
            )));
        }
        (None, [only]) => only.clone(),
        (None, _) => {
            return Err(invalid(
                "redirect_uri is missing, and this client registered several",
            ));
        }
    };
    let back = Back {
        oauth,
        redirect_uri: &redirect_uri,
        state: p.state.as_deref(),
    };
    match p.response_type.as_deref() {
        Some("code") => {}
        None => return Err(back.error("invalid_request", "response_type is missing")),
        Some(_) => {
            return Err(back.error(
                "unsupported_response_type",
                "only response_type=code is supported",
            ));
        }
    }
    if p.code_challenge_method.as_deref() != Some("S256") {
        return Err(back.error(
            "invalid_request",
            "code_challenge_method must be S256 (PKCE); plain is refused",
        ));
    }
    let code_challenge = match p.code_challenge.as_deref() {
        Some(c) if is_pkce_value(c) => c.to_owned(),
        Some(_) => {
            return Err(back.error(
                "invalid_request",
                "code_challenge is not a valid S256 challenge",
            ));
        }
        None => {
            return Err(back.error(
                "invalid_request",
                "code_challenge is required (PKCE with S256)",
            ));
        }
    };
    let resource = match p.resource.as_deref() {
        None => oauth.resource.clone(),
        Some(r) if r.trim_end_matches('/') == oauth.resource => oauth.resource.clone(),
        Some(_) => {
            return Err(back.error(
                "invalid_target",
                &format!(
                    "this server only issues tokens for the resource {}",
                    oauth.resource
                ),
            ));
        }
    };
    Ok(Checked {
        state: p.state.clone(),
        client,
        redirect_uri,
        code_challenge,
        resource,
    })
}

async fn session_account(store: &Store, req: &HttpRequest) -> Option<Account> {
    let token = cookies::get(req, cookies::SESSION)?;
    let store = store.clone();
    blocking(move || store.session_account(&token))
        .await
        .ok()
        .flatten()
}

/// The page with its form; `csrf` is the token its cookie carries.
fn form(checked: &Checked, csrf: &str, account: Option<&Account>, error: Option<&str>) -> String {
    let state = checked.state.as_deref().unwrap_or_default();
    let hidden = [
        ("response_type", "code"),
        ("client_id", checked.client.id.as_str()),
        ("redirect_uri", checked.redirect_uri.as_str()),
        ("state", state),
        ("code_challenge", checked.code_challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", checked.resource.as_str()),
    ];
    let hidden: Vec<(&str, &str)> = hidden
        .into_iter()
        .filter(|(name, value)| *name != "state" || !value.is_empty())
        .collect();
    page::sign_in(&SignIn {
        client_name: checked
            .client
            .name
            .as_deref()
            .unwrap_or(checked.client.id.as_str()),
        client_id: &checked.client.id,
        redirect_uri: &checked.redirect_uri,
        hidden: &hidden,
        csrf,
        signed_in_as: account.map(|a| a.name.as_str()),
        error,
    })
}

/// `GET /oauth/authorize`.
pub async fn show(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    params: web::Query<Params>,
) -> HttpResponse {
    let checked = match check(&oauth, &store, &params).await {
        Ok(checked) => checked,
        Err(answer) => return answer,
    };
    let csrf = match random_token(32) {
        Ok(token) => token,
        Err(e) => {
            return page::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "psbx could not handle this request",
                &format!("no random numbers: {e}"),
            );
        }
    };
    let account = session_account(&store, &req).await;
    let back_here = URL_SAFE_NO_PAD.encode(format!("/oauth/authorize?{}", req.query_string()));
    let mut answer = page::respond(
        StatusCode::OK,
        form(&checked, &csrf, account.as_ref(), None),
    );
    for cookie in [
        cookies::set(cookies::CSRF, &csrf, PAGE_TTL_SECS, oauth.secure_cookies),
        cookies::set(
            cookies::RETURN,
            &back_here,
            PAGE_TTL_SECS,
            oauth.secure_cookies,
        ),
    ] {
        if let Ok(value) = cookie.parse() {
            answer.headers_mut().append(SET_COOKIE, value);
        }
    }
    answer
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// `POST /oauth/authorize`.
pub async fn decide(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    form_data: web::Form<Decision>,
) -> HttpResponse {
    let decision = form_data.into_inner();
    let csrf_ok = match (cookies::get(&req, cookies::CSRF), &decision.csrf) {
        (Some(cookie), Some(field)) => same_secret(&cookie, field),
        _ => false,
    };
    if !csrf_ok {
        return page::problem(
            StatusCode::FORBIDDEN,
            "This form has expired",
            "it was not sent from a psbx sign-in page open in this browser (or the page is \
             too old); go back, reload the page, and try again",
        );
    }
    let checked = match check(&oauth, &store, &decision.params).await {
        Ok(checked) => checked,
        Err(answer) => return answer,
    };
    let back = Back {
        oauth: &oauth,
        redirect_uri: &checked.redirect_uri,
        state: checked.state.as_deref(),
    };
    if decision.decision.as_deref() != Some("approve") {
        tracing::info!(client_id = %checked.client.id, "an authorization request was denied");
        return back.error("access_denied", "the person signing in denied the request");
    }
    let csrf = decision.csrf.unwrap_or_default();
    let password = decision.password.unwrap_or_default();
    let error = if password.is_empty() {
        "Sign in with the account's name and password."
    } else {
        "The account name or password is wrong."
    };
    let account = if password.is_empty() {
        session_account(&store, &req).await
    } else {
        let name = decision.account.unwrap_or_default().trim().to_owned();
        let store = store.get_ref().clone();
        match blocking(move || store.check_password(&name, &password)).await {
            Ok(found) => found,
            Err(e) => return page::problem(e.status(), "Sign-in failed", &e.to_string()),
        }
    };
    let Some(account) = account else {
        return page::respond(
            StatusCode::UNAUTHORIZED,
            form(&checked, &csrf, None, Some(error)),
        );
    };
    let code = {
        let store = store.get_ref().clone();
        let (account_id, client_id, redirect_uri, challenge, resource) = (
            account.id.clone(),
            checked.client.id.clone(),
            checked.redirect_uri.clone(),
            checked.code_challenge.clone(),
            checked.resource.clone(),
        );
        blocking(move || {
            store.create_oauth_code(NewCode {
                account: &account_id,
                client_id: &client_id,
                redirect_uri: &redirect_uri,
                code_challenge: &challenge,
                resource: &resource,
                scope: SCOPE,
            })
        })
        .await
    };
    match code {
        Ok(code) => {
            tracing::info!(client_id = %checked.client.id, account = %account.id,
                "an authorization request was approved");
            let mut answer = back.to(&[("code", &code)]);
            if let Ok(value) = cookies::clear(cookies::RETURN, oauth.secure_cookies).parse() {
                answer.headers_mut().append(SET_COOKIE, value);
            }
            answer
        }
        Err(e) => page::problem(e.status(), "Sign-in failed", &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_values_follow_rfc_7636() {
        assert!(is_pkce_value(&"a".repeat(43)));
        assert!(is_pkce_value("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
        assert!(!is_pkce_value(&"a".repeat(42)));
        assert!(!is_pkce_value(&"a".repeat(129)));
        assert!(!is_pkce_value(&format!("{}+", "a".repeat(43))));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
