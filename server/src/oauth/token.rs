//! `POST /oauth/token` (form-encoded): the `authorization_code` grant with PKCE
//! S256, and the `refresh_token` grant with rotation. Clients are public: the
//! `client_id` parameter names them, and a code or refresh token works only for
//! the client it was issued to. Answers are never cached; errors are RFC 6749's.

use super::authorize::is_pkce_value;
use super::errors::OAuthError;
use super::{OAuth, clients};
use crate::error::blocking;
use actix_web::http::header::{CACHE_CONTROL, HeaderValue, PRAGMA};
use actix_web::{HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use psbx_actors::store::{CodeExchange, IssuedTokens, Refused, Store};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

/// The token request's parameters psbx reads (others, e.g. a `client_secret`
/// a client sends anyway, are ignored).
#[derive(Debug, Deserialize)]
pub struct TokenRequest {
    grant_type: Option<String>,
    code: Option<String>,
    redirect_uri: Option<String>,
    code_verifier: Option<String>,
    refresh_token: Option<String>,
    client_id: Option<String>,
    resource: Option<String>,
}

/// The S256 challenge of a PKCE verifier: BASE64URL(SHA-256(verifier)).
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, OAuthError> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| OAuthError::invalid_request(format!("{name} is missing")))
}

fn answer(issued: Result<IssuedTokens, Refused>) -> Result<HttpResponse, OAuthError> {
    let tokens = issued.map_err(|Refused(why)| OAuthError::invalid_grant(why))?;
    Ok(HttpResponse::Ok()
        .insert_header((CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .insert_header((PRAGMA, HeaderValue::from_static("no-cache")))
        .json(json!({
            "access_token": tokens.access_token,
            "token_type": "Bearer",
            "expires_in": tokens.expires_in,
            "refresh_token": tokens.refresh_token,
            "scope": tokens.scope,
        })))
}

pub async fn token(
    oauth: web::Data<OAuth>,
    store: web::Data<Store>,
    form: web::Form<TokenRequest>,
) -> Result<HttpResponse, OAuthError> {
    let ask = form.into_inner();
    let client_id = required(&ask.client_id, "client_id")?.to_owned();
    // The client must exist (a registered id, or a well-formed document URL).
    if clients::is_document_url(&client_id) {
        clients::check_document_url(&client_id, oauth.documents_accepted)
            .map_err(OAuthError::invalid_client)?;
    } else {
        let (store, id) = (store.get_ref().clone(), client_id.clone());
        if blocking(move || store.oauth_client(&id)).await?.is_none() {
            return Err(OAuthError::invalid_client(format!(
                "client_id {client_id:?} is not registered with this server"
            )));
        }
    }
    // RFC 8707: a `resource` must be one of this server's (a trailing slash
    // aside); it must then match the code's or grant's, which the store checks.
    let resource = match ask.resource.as_deref() {
        None => None,
        Some(asked) => Some(oauth.known_resource(asked).ok_or_else(|| {
            OAuthError::new(
                "invalid_target",
                format!(
                    "this server only issues tokens for its own resources: {}",
                    oauth.resources.join(", ")
                ),
            )
        })?),
    };
    let store = store.get_ref().clone();
    match ask.grant_type.as_deref() {
        Some("authorization_code") => {
            let code = required(&ask.code, "code")?.to_owned();
            let redirect_uri = required(&ask.redirect_uri, "redirect_uri")?.to_owned();
            let verifier = required(&ask.code_verifier, "code_verifier")?;
            if !is_pkce_value(verifier) {
                return Err(OAuthError::invalid_request(
                    "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~",
                ));
            }
            let challenge = s256(verifier);
            let issued = blocking(move || {
                store.exchange_oauth_code(CodeExchange {
                    code: &code,
                    client_id: &client_id,
                    redirect_uri: &redirect_uri,
                    challenge_of_verifier: &challenge,
                    resource: resource.as_deref(),
                })
            })
            .await?;
            if let Err(Refused(why)) = &issued {
                tracing::info!(reason = %why, "an authorization code was refused");
            }
            answer(issued)
        }
        Some("refresh_token") => {
            let refresh = required(&ask.refresh_token, "refresh_token")?.to_owned();
            let issued = blocking(move || {
                store.refresh_oauth_token(&refresh, &client_id, resource.as_deref())
            })
            .await?;
            if let Err(Refused(why)) = &issued {
                tracing::info!(reason = %why, "a refresh token was refused");
            }
            answer(issued)
        }
        None => Err(OAuthError::invalid_request("grant_type is missing")),
        Some(other) => Err(OAuthError::new(
            "unsupported_grant_type",
            format!(
                "grant_type {other:?} is not supported: use authorization_code or refresh_token"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_matches_rfc_7636_appendix_b() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
