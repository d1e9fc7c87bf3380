//! `POST /oauth/revoke` (RFC 7009): revokes an access token, or a refresh token
//! together with every token of its authorization. Answers 200 whether or not
//! the token was known (§2.2), so it tells a caller nothing about tokens.

use super::errors::OAuthError;
use crate::error::blocking;
use actix_web::{HttpResponse, web};
use psbx_actors::store::Store;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct RevokeRequest {
    token: Option<String>,
    /// When given, only this client's tokens are revoked.
    client_id: Option<String>,
}

pub async fn revoke(
    store: web::Data<Store>,
    form: web::Form<RevokeRequest>,
) -> Result<HttpResponse, OAuthError> {
    let ask = form.into_inner();
    let token = ask
        .token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| OAuthError::invalid_request("token is missing"))?;
    let store = store.get_ref().clone();
    let client_id = ask.client_id.filter(|c| !c.is_empty());
    let revoked = blocking(move || store.revoke_oauth_token(&token, client_id.as_deref())).await?;
    if revoked {
        tracing::info!("an OAuth token was revoked");
    }
    Ok(HttpResponse::Ok().finish())
}
