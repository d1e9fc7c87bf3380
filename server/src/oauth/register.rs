//! `POST /oauth/register`: dynamic client registration (RFC 7591), which
//! Claude Code, Codex and most MCP clients use. Every client is public
//! (`token_endpoint_auth_method` "none", PKCE protects its codes); a request
//! for another method is answered with "none", as §3.2.1 allows. Redirect URIs
//! are checked by [`super::redirect_uris`]: a refused one is an
//! `invalid_redirect_uri` error that says which and why.
//!
//! Registration is open (MCP clients register themselves), so it is bounded:
//! 20 registrations a minute per client address ([`super::throttle`]; 429
//! `too_many_requests` with `Retry-After`), a body of at most
//! [`MAX_BODY`] bytes, at most 10 redirect URIs, and clients that no account
//! authorized within [`UNUSED_CLIENT_TTL`] are deleted (at each registration).
//! The `client_name` is the client's own claim: the consent page says so.

use super::errors::OAuthError;
use super::{OAuth, redirect_uris, throttle};
use crate::error::blocking;
use actix_web::http::header::{CACHE_CONTROL, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use psbx_actors::store::Store;
use serde::Deserialize;
use serde_json::json;

/// The client metadata psbx reads; other fields are accepted and ignored.
#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    redirect_uris: Option<Vec<String>>,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    grant_types: Option<Vec<String>>,
    #[serde(default)]
    response_types: Option<Vec<String>>,
}

/// The largest registration body read (metadata with ten long redirect URIs fits).
pub const MAX_BODY: usize = 32 * 1024;
/// How long a registered client may wait for its first authorization.
pub const UNUSED_CLIENT_TTL: chrono::Duration = chrono::Duration::hours(24);

const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];

fn check(meta: &Metadata) -> Result<(Vec<String>, Option<String>), OAuthError> {
    let uris = meta.redirect_uris.clone().unwrap_or_default();
    redirect_uris::check_all(&uris).map_err(|e| OAuthError::new("invalid_redirect_uri", e))?;
    if let Some(bad) = meta
        .grant_types
        .iter()
        .flatten()
        .find(|g| !GRANT_TYPES.contains(&g.as_str()))
    {
        return Err(OAuthError::new(
            "invalid_client_metadata",
            format!(
                "grant type {bad:?} is not supported: use authorization_code and refresh_token"
            ),
        ));
    }
    if let Some(bad) = meta.response_types.iter().flatten().find(|r| *r != "code") {
        return Err(OAuthError::new(
            "invalid_client_metadata",
            format!("response type {bad:?} is not supported: use code"),
        ));
    }
    let name = match meta.client_name.as_deref().map(str::trim) {
        Some(n) if n.chars().count() > 200 || n.chars().any(char::is_control) => {
            return Err(OAuthError::new(
                "invalid_client_metadata",
                "client_name must be one line of at most 200 characters",
            ));
        }
        Some("") | None => None,
        Some(n) => Some(n.to_owned()),
    };
    Ok((uris, name))
}

pub async fn register(
    req: HttpRequest,
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    body: web::Bytes,
) -> Result<HttpResponse, OAuthError> {
    let address = throttle::address(&req);
    if let Err(exceeded) = oauth.throttles.registrations_by_address.hit(&address) {
        tracing::info!(%address, "a client registration was refused: too many from this address");
        return Err(OAuthError::too_many(&exceeded));
    }
    if body.len() > MAX_BODY {
        return Err(OAuthError::too_large(
            "invalid_client_metadata",
            format!(
                "the registration is larger than {MAX_BODY} bytes; send only the metadata psbx reads (redirect_uris, client_name, grant_types, response_types)"
            ),
        ));
    }
    let meta: Metadata = serde_json::from_slice(&body).map_err(|e| {
        OAuthError::new(
            "invalid_client_metadata",
            format!("the body must be a JSON object of client metadata (RFC 7591): {e}"),
        )
    })?;
    let (uris, name) = check(&meta)?;
    let store = store.get_ref().clone();
    let (client, expired) = blocking(move || {
        let expired = store.expire_unused_oauth_clients(UNUSED_CLIENT_TTL)?;
        Ok((
            store.register_oauth_client(name.as_deref(), &uris)?,
            expired,
        ))
    })
    .await?;
    if expired > 0 {
        tracing::info!(
            expired,
            "deleted OAuth clients nobody authorized within a day"
        );
    }
    tracing::info!(client_id = %client.id, name = ?client.name, "registered an OAuth client");
    let mut body = json!({
        "client_id": client.id,
        "client_id_issued_at": client.created_at.timestamp(),
        "redirect_uris": client.redirect_uris,
        "grant_types": GRANT_TYPES,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    if let Some(name) = client.name {
        body["client_name"] = name.into();
    }
    Ok(HttpResponse::Created()
        .insert_header((CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .json(body))
}
