//! The rate limits of the sign-in pages and registration (see README, "Sign-in
//! and OAuth limits"), per process:
//!
//! * failed password sign-ins: 5 a minute per account name, 20 a minute per
//!   client address; once over, the form answers 429 with `Retry-After` and
//!   argon2 is not run at all;
//! * sign-in links that do not work (unknown, used, expired): 10 a minute per
//!   client address;
//! * dynamic client registrations: 20 a minute per client address;
//! * client metadata documents fetched (not from the cache): 30 a minute per
//!   client address;
//! * bearer tokens on `/v1` and `/mcp` that are not valid (unknown API keys,
//!   unknown, expired or revoked OAuth tokens) and takeover links that do not
//!   work: 60 a minute per client address; once over, the answer is 429
//!   `too_many_attempts` with `Retry-After`, and no token is looked up
//!   (review-2 L7: every lookup is a database query).
//!
//! The client address is [`crate::client_addr::client_ip`]'s: the TCP peer's,
//! or behind one of the configured `trusted_proxies` the address it forwarded
//! (a reverse proxy not listed there is the client: then the per-address
//! limits apply to everyone behind it).

use super::page;
use crate::client_addr::{TrustedProxies, client_ip};
use crate::limits::rate::{Exceeded, Limit, RateLimiter, client_key};
use actix_web::HttpRequest;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderValue, RETRY_AFTER};
use actix_web::web;
use std::time::Duration;

const MINUTE: Duration = Duration::from_secs(60);

pub const FAILED_SIGN_INS_PER_ACCOUNT: Limit = Limit {
    what: "failed sign-ins for this account",
    max: 5,
    per: MINUTE,
};
pub const FAILED_SIGN_INS_PER_ADDRESS: Limit = Limit {
    what: "failed sign-ins from this address",
    max: 20,
    per: MINUTE,
};
pub const FAILED_LINKS_PER_ADDRESS: Limit = Limit {
    what: "sign-in links that did not work from this address",
    max: 10,
    per: MINUTE,
};
pub const REGISTRATIONS_PER_ADDRESS: Limit = Limit {
    what: "client registrations from this address",
    max: 20,
    per: MINUTE,
};

pub const FAILED_TOKENS_PER_ADDRESS: Limit = Limit {
    what: "invalid bearer tokens or takeover links from this address",
    max: 60,
    per: MINUTE,
};

pub const DOCUMENT_FETCHES_PER_ADDRESS: Limit = Limit {
    what: "client metadata documents fetched for this address",
    max: 30,
    per: MINUTE,
};

/// The limiters of one server process.
pub struct Throttles {
    pub sign_ins_by_account: RateLimiter,
    pub sign_ins_by_address: RateLimiter,
    pub links_by_address: RateLimiter,
    pub registrations_by_address: RateLimiter,
    pub documents_by_address: RateLimiter,
    pub tokens_by_address: RateLimiter,
}

impl Default for Throttles {
    fn default() -> Self {
        Self {
            sign_ins_by_account: RateLimiter::new(FAILED_SIGN_INS_PER_ACCOUNT),
            sign_ins_by_address: RateLimiter::new(FAILED_SIGN_INS_PER_ADDRESS),
            links_by_address: RateLimiter::new(FAILED_LINKS_PER_ADDRESS),
            registrations_by_address: RateLimiter::new(REGISTRATIONS_PER_ADDRESS),
            documents_by_address: RateLimiter::new(DOCUMENT_FETCHES_PER_ADDRESS),
            tokens_by_address: RateLimiter::new(FAILED_TOKENS_PER_ADDRESS),
        }
    }
}

/// The key of the request's client address (`unknown` when there is no peer,
/// as in in-process tests, or a trusted proxy forwarded nothing readable).
pub fn address(req: &HttpRequest) -> String {
    let trusted = req.app_data::<web::Data<TrustedProxies>>();
    let none = TrustedProxies::default();
    let trusted = trusted.map_or(&none, |t| t.get_ref());
    client_ip(req, trusted).map_or_else(|| "unknown".to_owned(), client_key)
}

/// Adds `Retry-After` to an answer.
pub fn with_retry_after(mut answer: HttpResponse, exceeded: &Exceeded) -> HttpResponse {
    if let Ok(value) = HeaderValue::from_str(&exceeded.retry_after_secs().to_string()) {
        answer.headers_mut().insert(RETRY_AFTER, value);
    }
    answer
}

/// The sign-in page's 429: which limit, and when to try again.
pub fn too_many_page(exceeded: &Exceeded) -> HttpResponse {
    with_retry_after(
        page::problem(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many attempts",
            &format!(
                "{} (code too_many_attempts). Wait, then reload the sign-in page; or sign in \
                 with a link from `psbx login-link`",
                exceeded.message()
            ),
        ),
        exceeded,
    )
}
