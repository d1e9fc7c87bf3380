//! Bearer authentication. `/v1` takes API keys: a middleware on the protected
//! scope checks `Authorization: Bearer <key>` against the store and leaves the
//! [`Principal`] in the request; handlers take it with the [`Auth`] extractor.
//! Being a middleware on the scope, a route added to `/v1` cannot forget it.
//!
//! `/mcp` takes an API key too, or an OAuth access token issued for this
//! server's `/mcp` resource (not expired, not revoked); its 401 points OAuth
//! clients to the protected resource metadata. OAuth tokens are not accepted
//! on `/v1`: their audience is `/mcp`.

use crate::error::{ApiError, blocking};
use crate::oauth::OAuth;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{AUTHORIZATION, HeaderMap};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, ResponseError, web};
use psbx_actors::store::{OAUTH_TOKEN_PREFIX, Principal, Store};
use std::future::{Ready, ready};

/// The bearer token of a request, if it carries one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Refuses requests without a valid API key (401 with `WWW-Authenticate: Bearer`),
/// answering at once instead of passing an error outwards.
pub async fn require_api_key(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let who = principal(&req).await;
    admit(req, next, who).await
}

/// Passes the request on with its principal, or answers the refusal at once.
async fn admit<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
    who: Result<Principal, ApiError>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    match who {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            Ok(next.call(req).await?.map_into_left_body())
        }
        Err(refused) => Ok(req
            .into_response(refused.error_response())
            .map_into_right_body()),
    }
}

async fn principal(req: &ServiceRequest) -> Result<Principal, ApiError> {
    let token = bearer_token(req.headers())
        .ok_or_else(ApiError::missing_credentials)?
        .to_owned();
    let store = req
        .app_data::<web::Data<Store>>()
        .ok_or_else(|| ApiError::internal("the store is not registered with the app"))?
        .clone();
    blocking(move || store.authenticate(&token))
        .await?
        .ok_or_else(ApiError::invalid_credentials)
}

/// Refuses `/mcp` requests without a valid API key or OAuth access token; the
/// 401 names the protected resource metadata (RFC 9728) in `WWW-Authenticate`.
pub async fn require_mcp_credential(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let who = mcp_principal(&req).await;
    admit(req, next, who).await
}

async fn mcp_principal(req: &ServiceRequest) -> Result<Principal, ApiError> {
    let oauth = req
        .app_data::<web::Data<OAuth>>()
        .ok_or_else(|| ApiError::internal("the OAuth settings are not registered with the app"))?
        .clone();
    let refuse = |e: ApiError| e.with_resource_metadata(oauth.resource_metadata_url());
    let token = bearer_token(req.headers())
        .ok_or_else(|| {
            refuse(
                ApiError::missing_credentials()
                    .hint("sign in with OAuth (MCP clients discover it from this answer), or send `Authorization: Bearer psbx_...` with an API key from `psbx keys create`"),
            )
        })?
        .to_owned();
    let store = req
        .app_data::<web::Data<Store>>()
        .ok_or_else(|| ApiError::internal("the store is not registered with the app"))?
        .clone();
    let resource = oauth.resource.clone();
    let found = blocking(move || {
        if token.starts_with(OAUTH_TOKEN_PREFIX) {
            store.authenticate_oauth(&token, &resource)
        } else {
            store.authenticate(&token)
        }
    })
    .await?;
    found.ok_or_else(|| {
        refuse(ApiError::invalid_credentials().hint(
            "the API key or OAuth access token is unknown, expired, revoked, or was issued              for another resource: sign in again, or use a key from `psbx keys create`",
        ))
    })
}

/// The caller of an authenticated route.
pub struct Auth(pub Principal);

impl FromRequest for Auth {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Principal>()
                .cloned()
                .map(Auth)
                .ok_or_else(ApiError::missing_credentials),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;

    fn headers(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn only_bearer_tokens_count() {
        assert_eq!(bearer_token(&headers("Bearer psbx_abc")), Some("psbx_abc"));
        assert_eq!(
            bearer_token(&headers("bearer  psbx_abc ")),
            Some("psbx_abc")
        );
        assert_eq!(bearer_token(&headers("Basic dXNlcjpwYXNz")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
