//! Ids from outside, read typed where they enter: a route's path
//! ([`IdPath`]), or a tool's JSON arguments (the MCP tools call
//! [`RequestId::read`]).
//!
//! A box, shot, review or API key belongs to an account, and the API never
//! says whether an id it does not show the caller exists: another account's
//! box is "not found", like one that never was. A malformed id names nothing
//! either, so it is answered the same way, with the not-found error the
//! façade gives an unknown id of that kind (`box_not_found`,
//! `shot_not_found`, `review_not_found`, `api_key_not_found`: 404, the same
//! message and hint), not with the 400 `invalid_path` of a path that does not
//! fit its route at all (a pid that is not a number). Each kind names its
//! own error here, once, for REST and MCP alike.

mod path;

pub use path::{FromIdPath, IdPath};

use crate::error::ApiError;
use psbx_actors::error::BoxError;
use psbx_actors::ids::{ApiKeyId, BoxId, ReviewId, ShotId};
use psbx_actors::reviews::ReviewError;
use psbx_actors::shots::ShotError;
use std::str::FromStr;

/// An id of something of the account, with the error its façade answers
/// for an id that names nothing of the account.
pub trait RequestId: FromStr {
    /// What a call with an unknown id of this kind fails with.
    type NotFound: Into<ApiError>;

    /// The error for `given`, an id of this kind that names nothing.
    fn not_found(given: &str) -> Self::NotFound;

    /// `given` as an id of this kind; malformed, it is not found.
    fn read(given: &str) -> Result<Self, Self::NotFound> {
        given.parse().map_err(|_| Self::not_found(given))
    }
}

/// An id kind whose façade fails with `$error::NotFound(the id as given)`.
macro_rules! not_found_in {
    ($id:ty, $error:ident) => {
        impl RequestId for $id {
            type NotFound = $error;

            fn not_found(given: &str) -> $error {
                $error::NotFound(given.to_owned())
            }
        }
    };
}

not_found_in!(BoxId, BoxError);
not_found_in!(ShotId, ShotError);
not_found_in!(ReviewId, ReviewError);

/// Keys have no façade: the route asks the store, and answers this itself.
impl RequestId for ApiKeyId {
    type NotFound = ApiError;

    fn not_found(given: &str) -> ApiError {
        ApiError::not_found(
            "api_key_not_found",
            format!("no API key {given:?} in this account"),
        )
        .hint("`GET /v1/api-keys` lists the keys that exist")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::StatusCode;

    /// The answer to `given` as an id of kind `T`: status, code, message, hint.
    fn answer<T: RequestId>(given: &str) -> (StatusCode, String, String, Option<String>) {
        let e: ApiError = T::not_found(given).into();
        (
            e.status(),
            e.code().to_owned(),
            e.message().to_owned(),
            e.hint_text().map(str::to_owned),
        )
    }

    #[test]
    fn each_kind_is_its_own_404() {
        for (status, code, message, hint) in [
            answer::<BoxId>("nope"),
            answer::<ShotId>("nope"),
            answer::<ReviewId>("nope"),
            answer::<ApiKeyId>("nope"),
        ] {
            assert_eq!(status, StatusCode::NOT_FOUND, "{code}");
            assert!(message.contains("nope"), "{message}");
            assert!(hint.is_some(), "{code}");
        }
        assert_eq!(answer::<BoxId>("x").1, "box_not_found");
        assert_eq!(answer::<ShotId>("x").1, "shot_not_found");
        assert_eq!(answer::<ReviewId>("x").1, "review_not_found");
        assert_eq!(answer::<ApiKeyId>("x").1, "api_key_not_found");
    }

    #[test]
    fn a_malformed_id_reads_as_not_found_and_a_good_one_as_itself() {
        assert_eq!(
            BoxId::read("box_abc123").map_err(|e| e.to_string()),
            Ok(BoxId::parse("box_abc123").unwrap())
        );
        for bad in ["", "box_", "shot_abc", "box_a b", "box_ä"] {
            match BoxId::read(bad) {
                Err(BoxError::NotFound(given)) => assert_eq!(given, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
