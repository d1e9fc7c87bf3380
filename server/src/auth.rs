//! Bearer authentication. A middleware on the protected scope checks
//! `Authorization: Bearer ...` against the store and leaves the [`Principal`]
//! in the request; handlers take it with the [`Auth`] extractor. Being a
//! middleware on the scope, a route added to `/v1` cannot forget it.
//!
//! `/v1` and `/mcp` take the same credentials: an API key, or an OAuth access
//! token issued for one of this server's resources (`/mcp`, `/v1`, the issuer;
//! not expired, not revoked), with the same account scoping. A token issued
//! for another resource is refused. Each 401 points OAuth clients to its
//! protected resource metadata (RFC 9728) in `WWW-Authenticate`. An address
//! that sent 60 invalid tokens within a minute gets 429 `too_many_attempts`
//! without a lookup (`oauth::throttle`).

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

/// Refuses `/v1` requests without a valid API key or OAuth access token (401
/// with `WWW-Authenticate: Bearer`, naming `/v1`'s resource metadata),
/// answering at once instead of passing an error outwards.
pub async fn require_api_key(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let who = principal(&req, Surface::Rest).await;
    admit(req, next, who).await
}

/// Which protected resource a request is for: where its 401 points.
#[derive(Clone, Copy)]
enum Surface {
    Rest,
    Mcp,
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

/// Refuses `/mcp` requests without a valid API key or OAuth access token; the
/// 401 names the protected resource metadata (RFC 9728) in `WWW-Authenticate`.
pub async fn require_mcp_credential(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let who = principal(&req, Surface::Mcp).await;
    admit(req, next, who).await
}

async fn principal(req: &ServiceRequest, surface: Surface) -> Result<Principal, ApiError> {
    let oauth = req
        .app_data::<web::Data<OAuth>>()
        .ok_or_else(|| ApiError::internal("the OAuth settings are not registered with the app"))?
        .clone();
    let metadata = match surface {
        Surface::Rest => oauth.v1_resource_metadata_url(),
        Surface::Mcp => oauth.resource_metadata_url(),
    };
    let refuse = |e: ApiError| e.with_resource_metadata(metadata.clone());
    let token = match bearer_token(req.headers()) {
        Some(token) => token.to_owned(),
        None => {
            let missing = ApiError::missing_credentials();
            return Err(refuse(match surface {
                Surface::Rest => missing,
                Surface::Mcp => missing.hint(
                    "sign in with OAuth (MCP clients discover it from this answer), or send `Authorization: Bearer psbx_...` with an API key from `psbx keys create`",
                ),
            }));
        }
    };
    // An address past its failed lookups gets no more (review-2 L7).
    let address = crate::oauth::throttle::address(req.request());
    let failures = &oauth.throttles.tokens_by_address;
    if let Err(exceeded) = failures.check(&address) {
        return Err(ApiError::too_many_attempts(&exceeded));
    }
    let store = req
        .app_data::<web::Data<Store>>()
        .ok_or_else(|| ApiError::internal("the store is not registered with the app"))?
        .clone();
    let is_oauth = token.starts_with(OAUTH_TOKEN_PREFIX);
    let resources = oauth.resources.clone();
    let found = blocking(move || {
        if is_oauth {
            store.authenticate_oauth(&token, &resources)
        } else {
            store.authenticate(&token)
        }
    })
    .await?;
    if found.is_none() {
        failures.record(&address);
    }
    found.ok_or_else(|| {
        let invalid = ApiError::invalid_credentials();
        refuse(if is_oauth {
            invalid.hint(
                "the OAuth access token is unknown, expired, revoked, or was issued for \
                 another resource: refresh it or sign in again, or use an API key from \
                 `psbx keys create`",
            )
        } else {
            invalid
        })
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
