//! The shapes of a box's services and links as requests give them: a
//! service's mode, a link, and a change of a running box's wiring
//! (`POST /v1/boxes/{id}/wire`, `sandbox_wire`; `sandbox_start` and
//! `POST /v1/boxes` take the same links and modes). Shared by the REST
//! routes and the MCP tools, so both check a request the same way.

use super::patterns;
use crate::error::ApiError;
use psbx_actors::spec::{LinkSpec, Mode};
use psbx_actors::wiring::{ServiceChange, WireChange};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
