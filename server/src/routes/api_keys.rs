//! `/v1/api-keys`: list, create and revoke the caller's account's API keys.
//! A key's secret appears in one answer only, the one that creates it.

use super::paging::{self, ListQuery};
use crate::auth::Auth;
use crate::error::{ApiError, blocking};
use crate::ids::{IdPath, RequestId};
use crate::views::paths::ApiKeyPath;
use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use psbx_actors::ids::ApiKeyId;
use psbx_actors::store::{ApiKey, Store};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An API key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyView {
    /// `key_...`
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// When the key last authenticated a request (to the minute).
    pub last_used_at: Option<DateTime<Utc>>,
}

impl From<ApiKey> for ApiKeyView {
    fn from(k: ApiKey) -> Self {
        Self {
            id: k.id.to_string(),
            name: k.name,
            created_at: k.created_at,
            last_used_at: k.last_used_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyList {
    pub api_keys: Vec<ApiKeyView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKey {
    /// What the key is for, e.g. `ci` or `laptop` (1 to 100 characters, one line).
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
}

/// A new key with its secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedApiKey {
    #[serde(flatten)]
    pub api_key: ApiKeyView,
    /// The secret (`psbx_...`): send it as `Authorization: Bearer <key>`. It is
    /// not stored and cannot be shown again.
    pub key: String,
}

#[utoipa::path(
    tag = "api-keys",
    operation_id = "listApiKeys",
    params(ListQuery),
    security(("api_key" = [])),
    responses(
        (status = 200, body = ApiKeyList),
        (status = 400, description = "`limit` is out of range (`invalid_limit`) or the cursor is not one this server gave out (`invalid_cursor`)", body = crate::error::ErrorBody),
    )
)]
#[get("/api-keys")]
pub async fn list(
    Auth(who): Auth,
    store: web::Data<Store>,
    query: web::Query<ListQuery>,
) -> Result<web::Json<ApiKeyList>, ApiError> {
    let limit = query.limit()?;
    let after = query.position(ApiKeyId::parse)?;
    let store = store.into_inner();
    let page =
        blocking(move || store.list_api_keys(&who.account_id, after.as_ref(), limit)).await?;
    Ok(web::Json(ApiKeyList {
        api_keys: page.keys.into_iter().map(ApiKeyView::from).collect(),
        next_cursor: page.next.as_ref().map(paging::cursor),
    }))
}

#[utoipa::path(
    tag = "api-keys",
    operation_id = "createApiKey",
    request_body = CreateApiKey,
    security(("api_key" = [])),
    responses(
        (status = 201, body = CreatedApiKey),
    )
)]
#[post("/api-keys")]
pub async fn create(
    Auth(who): Auth,
    store: web::Data<Store>,
    body: web::Json<CreateApiKey>,
) -> Result<HttpResponse, ApiError> {
    let store = store.into_inner();
    let name = body.into_inner().name;
    let made = blocking(move || store.create_api_key(&who.account_id, &name)).await?;
    Ok(HttpResponse::Created().json(CreatedApiKey {
        key: made.secret.expose().to_owned(),
        api_key: made.key.into(),
    }))
}

#[utoipa::path(
    tag = "api-keys",
    operation_id = "revokeApiKey",
    params(ApiKeyPath),
    security(("api_key" = [])),
    responses(
        (status = 204, description = "Revoked: the key stops working at once"),
        (status = 404, description = "No such key in this account (`api_key_not_found`)", body = crate::error::ErrorBody),
    )
)]
#[delete("/api-keys/{id}")]
pub async fn revoke(
    Auth(who): Auth,
    store: web::Data<Store>,
    id: IdPath<ApiKeyId>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let (store, key_id) = (store.into_inner(), id.clone());
    if blocking(move || store.revoke_api_key(&who.account_id, &key_id)).await? {
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(ApiKeyId::not_found(id.as_str()))
    }
}
