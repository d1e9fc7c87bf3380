//! `/v1/secrets`: the account's secrets. Reads give names and times only; no
//! answer ever carries a value.

use crate::auth::Auth;
use crate::error::ApiError;
use actix_web::{HttpResponse, delete, get, put, web};
use chrono::{DateTime, Utc};
use psbx_actors::secrets::Secrets;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretView {
    pub name: String,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretView>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    /// The value (1 byte to 64 KiB, without NUL). It cannot be read back.
    #[schema(min_length = 1, max_length = 65536)]
    pub value: String,
}

#[utoipa::path(
    tag = "secrets",
    operation_id = "listSecrets",
    security(("api_key" = [])),
    responses((status = 200, body = SecretList))
)]
#[get("/secrets")]
pub async fn list(
    Auth(who): Auth,
    secrets: web::Data<Secrets>,
) -> Result<web::Json<SecretList>, ApiError> {
    let listed = secrets.list(&who.account_id).await?;
    Ok(web::Json(SecretList {
        secrets: listed
            .into_iter()
            .map(|(name, updated_at)| SecretView { name, updated_at })
            .collect(),
    }))
}

#[utoipa::path(
    tag = "secrets",
    operation_id = "putSecret",
    params(("name" = String, Path, description = "An environment variable name: a letter or `_`, then letters, digits or `_`", max_length = 128, pattern = "^[A-Za-z_][A-Za-z0-9_]*$")),
    request_body = PutSecret,
    security(("api_key" = [])),
    responses(
        (status = 201, description = "Created", body = SecretView),
        (status = 200, description = "Replaced", body = SecretView),
        (status = 400, description = "The name is not an environment variable name or the value is empty, too long or has NUL (`invalid_request`)", body = crate::error::ErrorBody),
        (status = 429, description = "The account's secrets quota is used up (`quota_exceeded`)", body = crate::error::ErrorBody),
        (status = 422, description = "The value is or holds a psbx API key, connector token or OAuth token of this server (`not_a_secret`): a box reaches psbx without it", body = crate::error::ErrorBody),
    )
)]
#[put("/secrets/{name}")]
pub async fn put(
    Auth(who): Auth,
    secrets: web::Data<Secrets>,
    name: web::Path<String>,
    body: web::Json<PutSecret>,
) -> Result<HttpResponse, ApiError> {
    let (created, updated_at) = secrets.put(&who.account_id, &name, &body.value).await?;
    let view = SecretView {
        name: name.into_inner(),
        updated_at,
    };
    Ok(if created {
        HttpResponse::Created().json(view)
    } else {
        HttpResponse::Ok().json(view)
    })
}

#[utoipa::path(
    tag = "secrets",
    operation_id = "deleteSecret",
    params(("name" = String, Path, description = "The secret's name, as `GET /v1/secrets` lists it")),
    security(("api_key" = [])),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such secret in this account (`secret_not_found`)", body = crate::error::ErrorBody))
)]
#[delete("/secrets/{name}")]
pub async fn remove(
    Auth(who): Auth,
    secrets: web::Data<Secrets>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    secrets.delete(&who.account_id, &name).await?;
    Ok(HttpResponse::NoContent().finish())
}
