//! `GET /metrics`: Prometheus text format, for scrapers. Open (it holds no
//! account data); restrict it at the network when the server is public.

use crate::error::ApiError;
use crate::metrics::Metrics;
use actix_web::{HttpResponse, web};
use psbx_actors::store::Store;

pub async fn scrape(
    metrics: web::Data<Metrics>,
    store: web::Data<Store>,
) -> Result<HttpResponse, ApiError> {
    let text = metrics
        .render(store.pool_use())
        .map_err(ApiError::internal)?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text))
}
