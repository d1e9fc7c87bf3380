//! `POST /v1/boxes/{id}/wire`: a running box's declared services and links
//! changed — a service switched between `box` and `external` mode, a name
//! declared later (taken over in place: it keeps its address in the box,
//! connections open through the connector are closed), links added. The
//! request's shape, which links and modes have at start too, is in
//! `views::wire`.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::ids::IdPath;
use crate::views::boxes::BoxView;
use crate::views::paths::BoxPath;
use crate::views::wire::WireBody;
use actix_web::{post, web};
use psbx_actors::boxes::Boxes;
use psbx_actors::environments::Environments;
use psbx_actors::ids::BoxId;

#[utoipa::path(
    tag = "boxes",
    operation_id = "wireBox",
    params(BoxPath),
    request_body = WireBody,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The box with its services and links as they are now (a frozen box is thawed first)", body = BoxView),
        (status = 400, description = "The request alone is refused: mode, port, targetPort or version without service, nothing to change, a range as service (declared at start only), a port 0, a malformed link or more than the most links, or a link to this box itself (`invalid_request`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such box in this account, or a linked box is not one of its boxes (`box_not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The box is stopped or failed (`box_stopped`, `box_failed`), still starting (`box_starting`: retry once it runs), or boxd could not rewire it (`cannot_run`); or the change does not fit what the box declares now (`wire_conflict`: a service it does not declare given without port, one declared on several ports given without port, external mode in a box without an external base URL, a name:port both declared and linked, the most services)", body = crate::error::ErrorBody),
    )
)]
#[post("/boxes/{id}/wire")]
pub async fn wire(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    envs: web::Data<Environments>,
    id: IdPath<BoxId>,
    body: web::Json<WireBody>,
) -> Result<web::Json<BoxView>, ApiError> {
    let change = body.into_inner().change()?;
    let snapshot = boxes.wire(&who.account_id, &id, change).await?;
    Ok(web::Json(BoxView::live(snapshot, &envs).await))
}
