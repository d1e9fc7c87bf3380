//! `GET /v1/health`: is this server up and can it reach its database. Open to all.

use crate::error::blocking;
use actix_web::{HttpResponse, get, web};
use psbx_actors::store::Store;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` when the database does not answer.
    pub status: &'static str,
    pub version: &'static str,
    /// `ok` or `unreachable`.
    pub database: &'static str,
}

#[utoipa::path(
    tag = "server",
    operation_id = "health",
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 503, description = "The database does not answer", body = Health),
    )
)]
#[get("/v1/health")]
pub async fn health(store: web::Data<Store>) -> HttpResponse {
    let store = store.into_inner();
    let db_ok = blocking(move || store.ping()).await.is_ok();
    let body = Health {
        status: if db_ok { "ok" } else { "unavailable" },
        version: env!("CARGO_PKG_VERSION"),
        database: if db_ok { "ok" } else { "unreachable" },
    };
    if db_ok {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}
