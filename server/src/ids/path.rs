//! [`IdPath`]: a route's path with its ids typed, `IdPath<BoxId>`,
//! `IdPath<(BoxId, u32)>`, `IdPath<(BoxId, ShotId)>`, in place of
//! `web::Path<String>` and a parse in every handler.
//!
//! Not `web::Path<BoxId>`: that would answer a malformed id with the
//! app's generic 400 `invalid_path`, and serde's error does not say which
//! kind of id failed but in its text. Here actix reads the path as strings
//! first ([`FromIdPath::Raw`], through `web::Path`, so a segment of the wrong
//! type, such as a pid that is not a number, still gets the app's
//! `invalid_path`), then each id is read as its kind, and a malformed one is
//! answered with its kind's not-found error ([`RequestId`]).

use super::RequestId;
use crate::error::ApiError;
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, ResponseError, web};
use psbx_actors::ids::{BoxId, ShotId, TerminalId};
use serde::de::DeserializeOwned;
use std::future::{Ready, ready};
use std::marker::PhantomData;

/// A path whose ids are read as their kinds.
pub trait FromIdPath: Sized {
    /// The path's segments as actix reads them, ids as strings.
    type Raw: DeserializeOwned;

    /// The ids typed; the answer to a malformed one otherwise.
    fn typed(raw: Self::Raw) -> Result<Self, ApiError>;
}

/// A path of one id.
impl<T: RequestId> FromIdPath for T {
    type Raw = String;

    fn typed(raw: String) -> Result<Self, ApiError> {
        T::read(&raw).map_err(Into::into)
    }
}

/// A box and a process in it (`/boxes/{id}/processes/{pid}`).
impl FromIdPath for (BoxId, u32) {
    type Raw = (String, u32);

    fn typed((id, pid): (String, u32)) -> Result<Self, ApiError> {
        Ok((BoxId::read(&id)?, pid))
    }
}

/// A shot of a box (`/boxes/{id}/shots/{shot}`). A shot is found by its own
/// id; the box only narrows it: a shot under another box, or under an id no
/// box can have, is not found (`shot_not_found`, naming the shot), as a shot
/// that does not exist.
impl FromIdPath for (BoxId, ShotId) {
    type Raw = (String, String);

    fn typed((id, shot): (String, String)) -> Result<Self, ApiError> {
        match (BoxId::parse(&id), ShotId::parse(&shot)) {
            (Ok(id), Ok(shot_id)) => Ok((id, shot_id)),
            _ => Err(ShotId::not_found(&shot).into()),
        }
    }
}

/// A terminal of a box (`/boxes/{id}/terminals/{terminal}`). A terminal id is
/// no account's: it is checked first, and a malformed one is a 400
/// (`invalid_terminal_id`); an unknown one is the route's to answer.
impl FromIdPath for (BoxId, TerminalId) {
    type Raw = (String, String);

    fn typed((id, terminal): (String, String)) -> Result<Self, ApiError> {
        let terminal = TerminalId::parse(&terminal).map_err(|e| {
            ApiError::bad_request("invalid_terminal_id", e.to_string())
                .hint("use an id from GET /v1/boxes/{id}/terminals")
        })?;
        Ok((BoxId::read(&id)?, terminal))
    }
}

/// The extractor: the path's ids, typed. `E` is how a refusal is shown:
/// the API's JSON error, or a web page's (`IdPath<BoxId, PageError>`).
pub struct IdPath<T, E = ApiError>(T, PhantomData<fn() -> E>);

impl<T, E> IdPath<T, E> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T, E> std::ops::Deref for IdPath<T, E> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T, E> FromRequest for IdPath<T, E>
where
    T: FromIdPath + 'static,
    E: From<ApiError> + ResponseError + 'static,
{
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        // `web::Path` answers at once (its future is ready).
        let raw = web::Path::<T::Raw>::from_request(req, payload).into_inner();
        ready(raw.and_then(|raw| {
            T::typed(raw.into_inner())
                .map(|ids| IdPath(ids, PhantomData))
                .map_err(|e| E::from(e).into())
        }))
    }
}
