//! `POST /v1/boxes/{id}/wire`: a running box's declared services and links
//! changed — a service switched between `box` and `external` mode, a name
//! declared later (taken over in place: it keeps its address in the box,
//! connections open through the connector are closed), links added — and the
//! request shapes links and modes have at start too (`sandbox_start`,
//! `sandbox_wire` take the same).

use crate::auth::Auth;
use crate::error::ApiError;
use actix_web::{post, web};
use psbx_actors::boxes::Boxes;
use psbx_actors::environments::Environments;
use psbx_actors::spec::{LinkSpec, Mode};
use psbx_actors::wiring::{ServiceChange, WireChange};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::boxes::BoxView;
use super::patterns;

/// Where a declared service's connections go: `box` (the box's own process
/// on `targetPort`) or `external` (boxd forwards HTTP to the external base URL).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ModeBody {
    Box,
    External,
}

impl From<ModeBody> for Mode {
    fn from(m: ModeBody) -> Self {
        match m {
            ModeBody::Box => Self::Box,
            ModeBody::External => Self::External,
        }
    }
}

/// A name in this box that leads to a port of another box of the account.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkBody {
    /// The host name the box's programs dial (`api.svc.local`).
    pub name: String,
    /// The port they dial.
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(deserialize_with = "super::whole::required")]
    pub port: u16,
    /// The linked box, `box_...` (one of this account's, running or frozen).
    #[serde(rename = "box")]
    pub box_id: String,
    /// The port the linked box's process listens on (default `port`).
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub target_port: Option<u16>,
}

impl From<LinkBody> for LinkSpec {
    fn from(l: LinkBody) -> Self {
        Self {
            target_port: l.target_port.unwrap_or(l.port),
            name: l.name,
            port: l.port,
            box_id: l.box_id,
        }
    }
}

/// A change of the box's services or links: `service` with what changes
/// (`mode`, `targetPort`, `version`; `port` says which of its ports, or
/// declares a new one), and/or `links` to add.
#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireBody {
    /// The service's name, as declared (or to declare).
    pub service: Option<String>,
    pub mode: Option<ModeBody>,
    /// The port callers dial: which declaration of `service`, or a new one
    /// (then in box mode unless `mode` says otherwise).
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub port: Option<u16>,
    /// The port the box's process listens on.
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub target_port: Option<u16>,
    /// A published version to run instead of a process of your own.
    pub version: Option<String>,
    /// Links to add (each replaces a link of the same name and port).
    #[serde(default)]
    pub links: Vec<LinkBody>,
}

impl WireBody {
    /// The change it asks for, or what is wrong with it.
    pub fn change(self) -> Result<WireChange, ApiError> {
        if let Some(version) = &self.version {
            patterns::no_nul("version", version)?;
        }
        let service = match self.service {
            Some(name) => {
                patterns::no_nul("service", &name)?;
                Some(ServiceChange {
                    name,
                    mode: self.mode.map(Into::into),
                    port: self.port,
                    target_port: self.target_port,
                    version: self.version,
                })
            }
            None if self.mode.is_some()
                || self.port.is_some()
                || self.target_port.is_some()
                || self.version.is_some() =>
            {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    "mode, port, targetPort and version change a service: name it in service",
                ));
            }
            None => None,
        };
        if service.is_none() && self.links.is_empty() {
            return Err(ApiError::bad_request(
                "invalid_request",
                "nothing to change: give service (with mode, port, targetPort or version) or links",
            ));
        }
        Ok(WireChange {
            service,
            links: self.links.into_iter().map(Into::into).collect(),
        })
    }
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "wireBox",
    params(("id" = String, Path, description = "`box_...`")),
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
    id: web::Path<String>,
    body: web::Json<WireBody>,
) -> Result<web::Json<BoxView>, ApiError> {
    let change = body.into_inner().change()?;
    let snapshot = boxes.wire(&who.account_id, &id, change).await?;
    Ok(web::Json(BoxView::live(snapshot, &envs).await))
}
