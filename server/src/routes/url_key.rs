//! `POST /v1/boxes/{id}/url-key`: a new random key for a box's URLs. A link
//! to the box handed to someone (a reviewer, a webhook provider, a public
//! post) stops working: its host answers the same constant 404 as a host
//! that never was a box's. Requests open at that moment go on to their end.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::ids::IdPath;
use crate::views::paths::BoxPath;
use actix_web::{post, web};
use psbx_actors::boxes::Boxes;
use psbx_actors::ids::BoxId;

use crate::views::boxes::BoxView;

#[utoipa::path(
    tag = "boxes",
    operation_id = "rotateBoxUrlKey",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The box with its new URLs (`url`, and each service's \
            `url`); the former URLs answer 404 from now on", body = BoxView),
        crate::error::BoxCallErrors,
    )
)]
#[post("/boxes/{id}/url-key")]
pub async fn rotate(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
) -> Result<web::Json<BoxView>, ApiError> {
    Ok(web::Json(
        boxes.rotate_url_key(&who.account_id, &id).await?.into(),
    ))
}
