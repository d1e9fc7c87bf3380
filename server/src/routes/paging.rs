//! Paging of list endpoints (DESIGN.md §10): `limit` and an opaque `cursor`
//! that encodes where the previous page ended (a time and an id).

use crate::error::ApiError;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::fmt::Display;
use utoipa::IntoParams;

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 200;
/// The longest cursor taken (the document's pattern says the same): a time
/// and an id, base64url, are far shorter.
const MAX_CURSOR: usize = 400;

/// The query of every list endpoint.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page, passed unchanged: an opaque
    /// token (base64url without padding) that only this server makes; any
    /// other value is refused with 400 `invalid_cursor`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,400}$")]
    pub cursor: Option<String>,
}

impl ListQuery {
    /// The page size asked for, checked.
    pub fn limit(&self) -> Result<u32, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if (1..=MAX_LIMIT).contains(&limit) {
            Ok(limit)
        } else {
            Err(ApiError::bad_request(
                "invalid_limit",
                format!("limit must be between 1 and {MAX_LIMIT}, not {limit}"),
            ))
        }
    }

    /// Where this page starts, decoded with `parse_id` for the id part.
    pub fn position<I, E>(
        &self,
        parse_id: impl Fn(&str) -> Result<I, E>,
    ) -> Result<Option<(DateTime<Utc>, I)>, ApiError> {
        self.cursor
            .as_deref()
            .map(|cursor| decode(cursor, parse_id))
            .transpose()
    }
}

/// The cursor that continues after `(time, id)`.
pub fn cursor<I: Display>((time, id): &(DateTime<Utc>, I)) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}|{id}", time.to_rfc3339()))
}

fn decode<I, E>(
    cursor: &str,
    parse_id: impl Fn(&str) -> Result<I, E>,
) -> Result<(DateTime<Utc>, I), ApiError> {
    let invalid = || {
        ApiError::bad_request(
            "invalid_cursor",
            "the cursor is not one this server gave out",
        )
        .hint("pass the `nextCursor` of the previous page unchanged, or omit `cursor`")
    };
    if cursor.len() > MAX_CURSOR {
        return Err(invalid());
    }
    let text = URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|raw| String::from_utf8(raw).ok())
        .ok_or_else(invalid)?;
    let (time, id) = text.split_once('|').ok_or_else(invalid)?;
    let time = DateTime::parse_from_rfc3339(time).map_err(|_| invalid())?;
    Ok((
        time.with_timezone(&Utc),
        parse_id(id).map_err(|_| invalid())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use psbx_actors::ids::ApiKeyId;

    fn query(cursor: &str) -> ListQuery {
        ListQuery {
            limit: None,
            cursor: Some(cursor.to_owned()),
        }
    }

    #[test]
    fn cursors_round_trip_and_refuse_forgeries() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T10:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let id = ApiKeyId::parse("key_abc123").unwrap();
        let encoded = cursor(&(at, id.clone()));
        assert_eq!(
            query(&encoded).position(ApiKeyId::parse).unwrap(),
            Some((at, id))
        );
        for bad in [
            "",
            "!!",
            &URL_SAFE_NO_PAD.encode("nope"),
            &URL_SAFE_NO_PAD.encode("2026|x"),
        ] {
            let err = query(bad).position(ApiKeyId::parse).unwrap_err();
            assert_eq!(err.code(), "invalid_cursor");
        }
    }

    #[test]
    fn limits_are_bounded() {
        let q = |limit| ListQuery {
            limit,
            cursor: None,
        };
        assert_eq!(q(None).limit().unwrap(), 50);
        assert_eq!(q(Some(200)).limit().unwrap(), 200);
        assert_eq!(q(Some(0)).limit().unwrap_err().code(), "invalid_limit");
        assert_eq!(q(Some(201)).limit().unwrap_err().code(), "invalid_limit");
    }
}
