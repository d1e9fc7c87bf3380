//! `/v1/box-access`: the account's box-URL IP allowlist (faq "Who can open a
//! box's URL?"). One list per account of at most 50 IPv4 addresses and
//! ranges; an empty list lets every address open the account's box URLs.
//! A change is in force on every replica within about 3 seconds.

use crate::auth::Auth;
use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::{get, put, web};
use chrono::{DateTime, Utc};
use psbx_actors::box_access::{BoxAccess, BoxAccessError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

impl From<BoxAccessError> for ApiError {
    fn from(e: BoxAccessError) -> Self {
        match e {
            BoxAccessError::Store(inner) => inner.into(),
            refused => {
                let hint = refused.hint();
                let mut api = Self::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_box_access",
                    refused.to_string(),
                );
                if let Some(hint) = hint {
                    api = api.hint(hint);
                }
                api
            }
        }
    }
}

/// The account's box-URL allowlist.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxAccessView {
    /// The IPv4 addresses (`203.0.113.7`) and ranges (`203.0.113.0/24`) that
    /// may open the account's box URLs; empty: every address may.
    pub entries: Vec<String>,
    /// When the list was last set; null if never.
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBoxAccess {
    /// IPv4 addresses and ranges in CIDR form without bits past the prefix
    /// (`203.0.113.0/24`, not `203.0.113.5/24`); IPv6 is not matched yet.
    /// Duplicates are dropped. An empty list turns the allowlist off.
    #[schema(max_items = 50)]
    pub entries: Vec<String>,
}

#[utoipa::path(
    tag = "box-access",
    operation_id = "getBoxAccess",
    security(("api_key" = [])),
    responses((status = 200, body = BoxAccessView))
)]
#[get("/box-access")]
pub async fn get(
    Auth(who): Auth,
    access: web::Data<BoxAccess>,
) -> Result<web::Json<BoxAccessView>, ApiError> {
    let (entries, updated_at) = access.get(&who.account_id).await?;
    Ok(web::Json(BoxAccessView {
        entries,
        updated_at,
    }))
}

#[utoipa::path(
    tag = "box-access",
    operation_id = "putBoxAccess",
    request_body = PutBoxAccess,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Replaced: in force on every replica within about 3 seconds", body = BoxAccessView),
        (status = 400, description = "More than 50 entries, an IPv6 entry, a range with bits set past its prefix, or something that is no IPv4 address or range (`invalid_box_access`; the message names the entry)", body = crate::error::ErrorBody),
    )
)]
#[put("/box-access")]
pub async fn put(
    Auth(who): Auth,
    access: web::Data<BoxAccess>,
    body: web::Json<PutBoxAccess>,
) -> Result<web::Json<BoxAccessView>, ApiError> {
    let (entries, updated_at) = access
        .set(&who.account_id, body.into_inner().entries)
        .await?;
    Ok(web::Json(BoxAccessView {
        entries,
        updated_at: Some(updated_at),
    }))
}
