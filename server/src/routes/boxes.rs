//! `/v1/boxes`: start, list, read (thawing a frozen box), keep and stop
//! boxes. The request and answer shapes are in `views::boxes`.

use super::paging::{self, ListQuery};
use crate::auth::Auth;
use crate::error::ApiError;
use crate::ids::IdPath;
use crate::views::boxes::{BoxList, BoxView, KeepBody, StartBox, StartWiring, start_spec};
use crate::views::paths::BoxPath;
use crate::views::patterns;
use actix_web::{HttpResponse, delete, get, post, web};
use psbx_actors::boxes::{Boxes, CreateRequest};
use psbx_actors::environments::Environments;
use psbx_actors::ids::BoxId;

#[utoipa::path(
    tag = "boxes",
    operation_id = "startBox",
    request_body = StartBox,
    security(("api_key" = [])),
    responses(
        (status = 201, body = BoxView),
        (status = 400, description = "A service, link or externalBaseUrl is not valid (`invalid_request`): a name that is neither a host name nor a private range, a range without a port, external mode without an external base URL, a name:port declared twice or both declared and linked, a link to a box that is stopped", body = crate::error::ErrorBody),
        (status = 404, description = "A secret or the environment the box is to receive is not in this account (`secret_not_found`, `environment_not_found`), or a linked box is not one of its boxes (`box_not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The environment lists more addresses than a box takes (`environment_too_large`)", body = crate::error::ErrorBody),
        (status = 429, description = "An account quota (boxes, units) is used up (`quota_exceeded`)", body = crate::error::ErrorBody),
        (status = 503, description = "The host is full: CPU, memory or disk (`host_full`), this server runs no boxes (`boxes_unavailable`), or its box network rules are not in place (`box_network_unavailable`), or the box came up but did not take its configuration and was removed (`box_not_configured`: retry)", body = crate::error::ErrorBody),
    )
)]
#[post("/boxes")]
pub async fn start(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    envs: web::Data<Environments>,
    body: web::Json<StartBox>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if let Some(kept) = &body.keep {
        patterns::strict_duration("keep", kept, boxes.settings().max_keep)?;
    }
    patterns::no_nul("goal", body.goal.as_deref().unwrap_or_default())?;
    let spec = start_spec(
        StartWiring {
            services: body.services,
            links: body.links,
            external_base_url: body.external_base_url,
            url_ports: body.url_ports,
        },
        body.secrets,
        body.environment,
    )?;
    let request = CreateRequest {
        name: body.name,
        goal: body.goal,
        size: body.size,
        keep: body.keep,
        spec,
    };
    let snapshot = boxes.create(who.account_id, request).await?;
    Ok(HttpResponse::Created().json(BoxView::live(snapshot, &envs).await))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "listBoxes",
    params(ListQuery),
    security(("api_key" = [])),
    responses((status = 200, body = BoxList), (status = 400, description = "`limit` is out of range (`invalid_limit`) or the cursor is not one this server gave out (`invalid_cursor`)", body = crate::error::ErrorBody))
)]
#[get("/boxes")]
pub async fn list(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    query: web::Query<ListQuery>,
) -> Result<web::Json<BoxList>, ApiError> {
    let limit = query.limit()?;
    let before = query.position(BoxId::parse)?;
    let (page, next) = boxes.list(&who.account_id, before, limit).await?;
    Ok(web::Json(BoxList {
        boxes: page.into_iter().map(BoxView::from).collect(),
        next_cursor: next.as_ref().map(paging::cursor),
    }))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "getBox",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The box; a frozen box is thawed first", body = BoxView),
        crate::error::BoxCallErrors,
    )
)]
#[get("/boxes/{id}")]
pub async fn get(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    envs: web::Data<Environments>,
    id: IdPath<BoxId>,
) -> Result<web::Json<BoxView>, ApiError> {
    let snapshot = boxes.get(&who.account_id, &id, true).await?;
    Ok(web::Json(BoxView::live(snapshot, &envs).await))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "keepBox",
    params(BoxPath),
    request_body = KeepBody,
    security(("api_key" = [])),
    responses(
        (status = 200, body = BoxView),
        crate::error::BoxCallErrors,
    )
)]
#[post("/boxes/{id}/keep")]
pub async fn keep(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
    body: web::Json<KeepBody>,
) -> Result<web::Json<BoxView>, ApiError> {
    Ok(web::Json(
        boxes.keep(&who.account_id, &id, &body.keep).await?.into(),
    ))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "stopBox",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Stopped: its disk and saved memory are deleted", body = BoxView),
        crate::error::BoxCallErrors,
    )
)]
#[delete("/boxes/{id}")]
pub async fn stop(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
) -> Result<web::Json<BoxView>, ApiError> {
    Ok(web::Json(boxes.stop(&who.account_id, &id).await?.into()))
}
