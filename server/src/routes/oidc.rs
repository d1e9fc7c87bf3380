//! psbx as the OIDC issuer AWS trusts for boxes' roles (environments.txt,
//! "AWS permissions inside a box"; `psbx_actors::oidc`): the discovery
//! document at `/.well-known/openid-configuration` and the JWKS it names at
//! `/.well-known/jwks.json`, both open (IAM fetches them without a
//! credential). The discovery document is the OAuth authorization server's
//! metadata (RFC 8414, `oauth::metadata`) with OIDC's fields added, so a
//! client looking for either finds one document with one issuer.

use crate::error::ApiError;
use crate::oauth::OAuth;
use actix_web::{HttpResponse, http::header, web};
use psbx_actors::oidc::{ALGORITHM, Issuer};

/// How long verifiers may keep the JWKS (a new key is published before it
/// signs anything a verifier has to check: at most this long late).
const JWKS_MAX_AGE: &str = "max-age=300";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/.well-known/openid-configuration",
        web::get().to(configuration),
    )
    .route("/.well-known/jwks.json", web::get().to(jwks));
}

async fn configuration(oauth: web::Data<OAuth>, issuer: web::Data<Issuer>) -> HttpResponse {
    let mut doc = crate::oauth::metadata::authorization_server_metadata(&oauth);
    doc["jwks_uri"] = issuer.jwks_uri().into();
    doc["response_types_supported"] = serde_json::json!(["code", "id_token"]);
    doc["subject_types_supported"] = serde_json::json!(["public"]);
    doc["id_token_signing_alg_values_supported"] = serde_json::json!([ALGORITHM]);
    doc["claims_supported"] = serde_json::json!(["iss", "sub", "aud", "exp", "iat", "nbf", "jti"]);
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, JWKS_MAX_AGE))
        .json(doc)
}

async fn jwks(issuer: web::Data<Issuer>) -> Result<HttpResponse, ApiError> {
    // The log says why (the database, the master key); the caller retries.
    let keys = issuer.jwks().await.map_err(ApiError::unavailable)?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, JWKS_MAX_AGE))
        .content_type("application/jwk-set+json")
        .json(keys))
}
