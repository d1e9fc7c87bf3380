//! The browser session (`psbx_session`) the OAuth pages and the app share:
//! the account its cookie is signed in to. One lookup for the authorize
//! page, the sign-in link's "signed in" page and the app's `Signed`
//! extractor (`web::session`), which had a copy each.

use super::cookies::{self, Cookies};
use crate::error::{ApiError, blocking};
use actix_web::HttpRequest;
use psbx_actors::store::{Account, Store};

/// The account the request's session cookie is signed in to; `None`
/// without the cookie or with a session that ended or expired.
pub async fn account(
    cookies: &Cookies,
    store: &Store,
    req: &HttpRequest,
) -> Result<Option<Account>, ApiError> {
    let Some(token) = cookies.get(req, cookies::SESSION) else {
        return Ok(None);
    };
    let store = store.clone();
    blocking(move || store.session_account(&token)).await
}
