//! `GET /oauth/authorize` shows the sign-in and approval page for a client's
//! authorization request; `POST /oauth/authorize` takes the person's decision
//! and redirects to the client with `code`, `state` and `iss` (RFC 9207).
//!
//! Until the client and its redirect URI are known to be right, problems are
//! shown on the page and never redirected; after that they go back to the
//! client as `error=...`. PKCE S256 is required (`plain` is refused), and the
//! `resource` (RFC 8707) must be this server's `/mcp`, `/v1` or the issuer
//! itself (absent: `/mcp`); the token then works on `/mcp` and `/v1`. Any
//! `scope` is answered with psbx's one scope, `mcp`.
//!
//! The form carries a per-page token that must equal the `psbx_csrf` cookie
//! set with the page (double submit), and the POST must come from this
//! server's origin ([`super::origin`]). Failed password sign-ins are
//! throttled ([`super::throttle`]): over the limit the form answers 429 with
//! `Retry-After` without running argon2.

use super::clients::{Client, ClientError};
use super::page::{self, SignIn};
use super::{OAuth, SCOPE, throttle};
use crate::error::blocking;
use crate::signin::csrf::same_secret;
use crate::signin::{cookies, origin};
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

async fn check(
    oauth: &OAuth,
    store: &Store,
    req: &HttpRequest,
    p: &Params,
) -> Result<Checked, HttpResponse> {
    let invalid = |message: &str| {
        page::problem(
            StatusCode::BAD_REQUEST,
            "This sign-in request is not valid",
            message,
        )
    };
    let client = match oauth
        .client(
            store,
            p.client_id.as_deref().unwrap_or_default(),
            &throttle::address(req),
        )
        .await
    {
        Ok(client) => client,
        Err(ClientError::Invalid(message)) => return Err(invalid(&message)),
        Err(ClientError::Throttled(exceeded)) => return Err(throttle::too_many_page(&exceeded)),
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
        Some(asked) => match oauth.known_resource(asked) {
            Some(resource) => resource,
            None => {
                return Err(back.error(
                    "invalid_target",
                    &format!(
                        "this server only issues tokens for its own resources: {}",
                        oauth.resources.join(", ")
                    ),
                ));
            }
        },
    };
    Ok(Checked {
        state: p.state.clone(),
        client,
        redirect_uri,
        code_challenge,
        resource,
    })
}

async fn session_account(oauth: &OAuth, store: &Store, req: &HttpRequest) -> Option<Account> {
    crate::signin::session::account(&oauth.cookies, store, req)
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
        client_name: checked.client.name.as_deref(),
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
    let checked = match check(&oauth, &store, &req, &params).await {
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
    let account = session_account(&oauth, &store, &req).await;
    let back_here = URL_SAFE_NO_PAD.encode(format!("/oauth/authorize?{}", req.query_string()));
    let mut answer = page::respond(
        StatusCode::OK,
        form(&checked, &csrf, account.as_ref(), None),
    );
    for cookie in [
        oauth.cookies.set(cookies::CSRF, &csrf, PAGE_TTL_SECS),
        oauth
            .cookies
            .set(cookies::RETURN, &back_here, PAGE_TTL_SECS),
    ] {
        if let Ok(value) = cookie.parse() {
            answer.headers_mut().append(SET_COOKIE, value);
        }
    }
    answer
}

/// `POST /oauth/authorize`.
pub async fn decide(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    form_data: web::Form<Decision>,
) -> HttpResponse {
    let decision = form_data.into_inner();
    if let Err(why) = origin::check(&req, &oauth.origins) {
        return cross_origin(&why);
    }
    if !csrf_matches(&oauth, &req, decision.csrf.as_deref()) {
        return expired_form();
    }
    let checked = match check(&oauth, &store, &req, &decision.params).await {
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
        session_account(&oauth, &store, &req).await
    } else {
        let name = decision.account.unwrap_or_default().trim().to_owned();
        match checked_password(&oauth, &store, &req, name, password).await {
            Ok(found) => found,
            Err(answer) => return answer,
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
            if let Ok(value) = oauth.cookies.clear(cookies::RETURN).parse() {
                answer.headers_mut().append(SET_COOKIE, value);
            }
            answer
        }
        Err(e) => page::problem(e.status(), "Sign-in failed", &e.to_string()),
    }
}

/// The 403 of a form posted from another origin.
pub fn cross_origin(why: &str) -> HttpResponse {
    tracing::warn!(reason = %why, "a sign-in form was posted from another origin");
    page::problem(
        StatusCode::FORBIDDEN,
        "This form was sent from another site",
        "psbx only accepts its sign-in forms from its own pages; open the sign-in page \
         again from your MCP client (or the link from `psbx login-link`) and use it directly",
    )
}

/// The 403 of a form without its matching CSRF cookie.
pub fn expired_form() -> HttpResponse {
    page::problem(
        StatusCode::FORBIDDEN,
        "This form has expired",
        "it was not sent from a psbx sign-in page open in this browser (or the page is \
         too old); go back, reload the page, and try again",
    )
}

/// Whether the form's CSRF field equals the page's cookie.
pub fn csrf_matches(oauth: &OAuth, req: &HttpRequest, field: Option<&str>) -> bool {
    match (oauth.cookies.get(req, cookies::CSRF), field) {
        (Some(cookie), Some(field)) => same_secret(&cookie, field),
        _ => false,
    }
}

/// Checks a password unless the account or the address failed too often
/// lately (429 then, argon2 not run); counts a failure against both. The
/// app's sign-in page (`crate::web::session`) signs in through it too.
pub(crate) async fn checked_password(
    oauth: &OAuth,
    store: &Store,
    req: &HttpRequest,
    name: String,
    password: String,
) -> Result<Option<Account>, HttpResponse> {
    let throttles = &oauth.throttles;
    let address = throttle::address(req);
    let throttled = throttles
        .sign_ins_by_account
        .check(&name)
        .and_then(|()| throttles.sign_ins_by_address.check(&address));
    if let Err(exceeded) = throttled {
        tracing::info!(account = %name, %address, limit = exceeded.limit.what,
            "a sign-in was refused: too many failed attempts");
        return Err(throttle::too_many_page(&exceeded));
    }
    let found = {
        let (store, name) = (store.clone(), name.clone());
        blocking(move || store.check_password(&name, &password))
            .await
            .map_err(|e| page::problem(e.status(), "Sign-in failed", &e.to_string()))?
    };
    if found.is_none() {
        throttles.sign_ins_by_account.record(&name);
        throttles.sign_ins_by_address.record(&address);
        for (limiter, key) in [
            (&throttles.sign_ins_by_account, &name),
            (&throttles.sign_ins_by_address, &address),
        ] {
            if let Err(exceeded) = limiter.check(key) {
                tracing::warn!(account = %name, %address, limit = %exceeded.limit.describe(),
                    "failed sign-ins reached their limit: further attempts are refused for {} s",
                    exceeded.retry_after_secs());
            }
        }
    }
    Ok(found)
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
}
