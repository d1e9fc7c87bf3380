//! `/v1/boxes`: start, list, read (thawing a frozen box), keep and stop boxes.

use super::paging::{self, ListQuery};
use super::patterns;
use crate::auth::Auth;
use crate::error::ApiError;
use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use psbx_actors::box_actor::BoxSnapshot;
use psbx_actors::boxes::{Boxes, CreateRequest};
use psbx_actors::connectors::ConnectionStatus;
use psbx_actors::duration;
use psbx_actors::environments::Environments;
use psbx_actors::environments::address::Endpoint;
use psbx_actors::environments::claim::{Claimed, ServiceFiles};
use psbx_actors::environments::settings::Notable;
use psbx_actors::ids::BoxId;
use psbx_actors::spec::{self, BoxSpec};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use utoipa::ToSchema;

/// A service the box runs, as the caller describes it. Stored with the box and
/// shown back; psbx does not start declared services yet.
#[derive(Debug, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceSpec {
    /// The service's name, or the internal host name callers use for it (api.svc.local).
    pub name: String,
    /// The port callers dial.
    #[schema(maximum = 65535)]
    pub port: Option<u16>,
    /// The port the process in the box listens on, when not `port`.
    #[schema(maximum = 65535)]
    pub target_port: Option<u16>,
    /// A published version to run instead of a process of your own.
    pub version: Option<String>,
}

impl From<ServiceSpec> for spec::ServiceSpec {
    fn from(s: ServiceSpec) -> Self {
        Self {
            name: s.name,
            port: s.port,
            target_port: s.target_port,
            version: s.version,
        }
    }
}

/// What a box is started with beyond its size and times, as stored with it.
pub fn start_spec(
    services: Vec<ServiceSpec>,
    secrets: Vec<String>,
    environment: Option<String>,
) -> BoxSpec {
    BoxSpec::new(
        services.into_iter().map(Into::into).collect(),
        secrets,
        environment,
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartBox {
    /// A short name for people: one line, at most 100 characters.
    #[schema(max_length = 100)]
    pub name: Option<String>,
    /// What the box is for, at most 2000 characters.
    #[schema(max_length = 2000)]
    pub goal: Option<String>,
    /// Size in units: 1, 2, 4 or 8 (default 1).
    pub size: Option<u32>,
    /// Keep the box this long after its last use, e.g. `"3d"` (default `"24h"`, at most `"7d"`).
    pub keep: Option<String>,
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
    /// Names of the account's secrets the box receives.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The environment to plug the box into.
    pub environment: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeepBody {
    /// E.g. `"3d"`; at most `"7d"`.
    pub keep: String,
}

/// What boxd reports from inside the box.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxHealth {
    /// Whether boxd answered just now.
    pub answering: bool,
    pub boot_id: Option<String>,
    pub boxd_version: Option<String>,
    pub protocol: Option<u32>,
    pub uptime_s: Option<f64>,
    pub load1: Option<f64>,
    pub mem_total_kb: Option<u64>,
    pub mem_available_kb: Option<u64>,
    /// Per environment address, boxd's entry for it (`localIp`, `localPort`),
    /// connections open and opened, failures and the last one's reason.
    #[schema(value_type = Vec<Object>)]
    pub private_endpoints: Vec<psbx_wire::boxd::PrivateEndpointHealth>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxView {
    /// `box_...`
    pub id: String,
    pub name: Option<String>,
    pub goal: Option<String>,
    /// `creating`, `booting`, `running`, `frozen`, `stopped` or `failed`.
    pub state: String,
    /// Why the box failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub size: u32,
    pub image: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub disk_gb: u64,
    /// How long the box is kept after its last use.
    pub keep: String,
    pub created_at: DateTime<Utc>,
    pub ready_at: Option<DateTime<Utc>>,
    pub last_activity_at: DateTime<Utc>,
    /// When it freezes if nothing happens (running boxes).
    pub freezes_at: Option<DateTime<Utc>>,
    /// When it stops for good if nothing happens.
    pub expires_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub health: BoxHealth,
    /// The box's URL, `<scheme>://box-<id>-<key>.<box_domain>/` (the `_` of
    /// the id written `-`): it serves the first declared service's port (its
    /// `targetPort`), or port 80 when none is declared; `...-<key>-<port>.`
    /// serves another port. Anyone with the URL can open it (unless the
    /// account's allowlist, `PUT /v1/box-access`, says otherwise); null once
    /// the box is stopped.
    #[schema(nullable)]
    pub url: Option<String>,
    /// The services declared at start, each with its URL.
    pub services: Vec<ServiceView>,
    /// The environment the box was started in, as it took it at claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<BoxEnvironmentView>,
    /// Bytes the box sent through its environment's connections (its metered
    /// outbound traffic there; what comes back is not counted): what every
    /// replica stored, plus what the one that answered counted since its last flush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_bytes: Option<u64>,
}

/// A service declared at start.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    pub name: String,
    /// The port callers dial.
    pub port: Option<u16>,
    /// The port the process in the box listens on, when not `port`.
    pub target_port: Option<u16>,
    /// A published version run instead of a process of the caller's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `<box url with -<port>>`: the service's port from outside (null
    /// without a port, or once the box is stopped).
    #[schema(nullable)]
    pub url: Option<String>,
}

/// A box's environment: what it can reach through which connection, and its
/// services' settings files.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxEnvironmentView {
    pub name: String,
    /// The addresses the box can reach now (through online connections).
    #[schema(value_type = Vec<Object>)]
    pub reachable: Vec<Endpoint>,
    /// Whether any connection has a connector online.
    pub connector_online: bool,
    pub connections: Vec<BoxConnectionView>,
    /// What to do about offline connections, when there are any.
    pub next: Option<String>,
    pub external_base_url: Option<String>,
    pub services: Vec<BoxServiceView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxConnectionView {
    pub name: String,
    pub online: bool,
    pub sessions: u32,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub connector_version: Option<String>,
    pub rtt_ms: Option<f64>,
    /// The addresses that go through it.
    #[schema(value_type = Vec<Object>)]
    pub reachable: Vec<Endpoint>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxServiceView {
    pub name: String,
    pub keys_count: usize,
    /// `env`: docker `--env-file` format; `sh`: `export KEY='VALUE'` lines to source.
    #[schema(value_type = Object)]
    pub files: ServiceFiles,
    /// Connection, mode and permission settings worth knowing about.
    #[schema(value_type = Object)]
    pub notable: Notable,
}

impl BoxEnvironmentView {
    /// The claim, with the connections' status now (by connection name;
    /// unknown ones are offline).
    fn new(c: Claimed, status: &HashMap<String, ConnectionStatus>) -> Self {
        let connections: Vec<BoxConnectionView> = c
            .connections
            .into_iter()
            .map(|conn| {
                let now = status.get(&conn.name).cloned().unwrap_or_default();
                BoxConnectionView {
                    name: conn.name,
                    online: now.online,
                    sessions: now.sessions,
                    last_seen_at: now.last_seen_at,
                    connector_version: now.connector_version,
                    rtt_ms: now.rtt_ms,
                    reachable: conn.addresses,
                }
            })
            .collect();
        let offline: Vec<String> = connections
            .iter()
            .filter(|c| !c.online && !c.reachable.is_empty())
            .map(|c| {
                let addresses: Vec<String> = c.reachable.iter().map(ToString::to_string).collect();
                format!(
                    "the connector \"{}\" is offline ({})",
                    c.name,
                    addresses.join(", ")
                )
            })
            .collect();
        let next = (!offline.is_empty()).then(|| {
            format!(
                "{}: run its runCommand (POST /v1/environments/{}/connections/{{id}}/token gives a new one) \
                 on a machine in that network",
                offline.join("; "),
                c.name
            )
        });
        Self {
            reachable: connections
                .iter()
                .filter(|c| c.online)
                .flat_map(|c| c.reachable.iter().cloned())
                .collect(),
            connector_online: connections.iter().any(|c| c.online),
            name: c.name,
            connections,
            next,
            external_base_url: c.external_base_url,
            services: c
                .services
                .into_iter()
                .map(|s| BoxServiceView {
                    name: s.name,
                    keys_count: s.keys_count,
                    files: s.files,
                    notable: s.notable,
                })
                .collect(),
        }
    }
}

impl BoxView {
    /// The box, its environment's connections read again now.
    pub async fn live(snapshot: BoxSnapshot, envs: &Environments) -> Self {
        let claimed = snapshot.record.spec.claimed.clone();
        let account = snapshot.record.account_id.clone();
        let mut view = Self::from(snapshot);
        if let (Some(claimed), Some(account)) = (claimed, account) {
            // A deleted environment leaves its connections offline.
            let status: HashMap<String, ConnectionStatus> = envs
                .connections(&account, &claimed.name)
                .await
                .map(|connections| {
                    connections
                        .into_iter()
                        .map(|c| (c.record.name, c.status))
                        .collect()
                })
                .unwrap_or_default();
            view.environment = Some(BoxEnvironmentView::new(claimed, &status));
            view.egress_bytes = envs.egress_bytes(&view.id).await.ok();
        }
        view
    }
}

impl From<BoxSnapshot> for BoxView {
    fn from(s: BoxSnapshot) -> Self {
        let r = s.record;
        let over = r.state.is_terminal();
        let (url, service_urls) = s
            .urls
            .map_or((None, Vec::new()), |u| (Some(u.url), u.services));
        let services = r
            .spec
            .services
            .iter()
            .enumerate()
            .map(|(i, svc)| ServiceView {
                name: svc.name.clone(),
                port: svc.port,
                target_port: svc.target_port,
                version: svc.version.clone(),
                url: service_urls.get(i).cloned().flatten(),
            })
            .collect();
        let environment = r
            .spec
            .claimed
            .clone()
            .map(|c| BoxEnvironmentView::new(c, &HashMap::new()));
        Self {
            url,
            services,
            environment,
            egress_bytes: None,
            id: r.id.to_string(),
            name: r.name,
            goal: r.goal,
            state: r.state.to_string(),
            failure: r.failure,
            size: r.size,
            image: r.image,
            vcpus: r.vcpus,
            memory_mib: r.memory_mib,
            disk_gb: r.disk_gb,
            keep: duration::format(std::time::Duration::from_secs(
                r.keep_secs.max(0).unsigned_abs(),
            )),
            created_at: r.created_at,
            ready_at: r.ready_at,
            last_activity_at: r.last_activity_at,
            freezes_at: s.freezes_at,
            expires_at: (!over).then_some(s.expires_at),
            stopped_at: r.stopped_at,
            health: BoxHealth {
                answering: s.health.is_some(),
                boot_id: s.hello.as_ref().map(|h| h.boot_id.clone()).or(r.boot_id),
                boxd_version: s.hello.as_ref().map(|h| h.version.clone()),
                protocol: s.hello.as_ref().map(|h| h.protocol),
                uptime_s: s.health.as_ref().map(|h| h.uptime_s),
                load1: s.health.as_ref().map(|h| h.load1),
                mem_total_kb: s.health.as_ref().map(|h| h.mem_total_kb),
                mem_available_kb: s.health.as_ref().map(|h| h.mem_available_kb),
                private_endpoints: s
                    .health
                    .as_ref()
                    .map(|h| h.private_endpoints.clone())
                    .unwrap_or_default(),
            },
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxList {
    pub boxes: Vec<BoxView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "startBox",
    request_body = StartBox,
    security(("api_key" = [])),
    responses(
        (status = 201, body = BoxView),
        (status = 404, description = "A secret or the environment the box is to receive is not in this account (`secret_not_found`, `environment_not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The environment lists more addresses than a box takes (`environment_too_large`)", body = crate::error::ErrorBody),
        (status = 429, description = "An account quota (boxes, units) is used up (`quota_exceeded`)", body = crate::error::ErrorBody),
        (status = 503, description = "The host is full: CPU, memory or disk (`host_full`), this server runs no boxes (`boxes_unavailable`), or its box network rules are not in place (`box_network_unavailable`)", body = crate::error::ErrorBody),
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
    for service in &body.services {
        patterns::no_nul("services[].name", &service.name)?;
        patterns::no_nul(
            "services[].version",
            service.version.as_deref().unwrap_or_default(),
        )?;
    }
    let spec = start_spec(body.services, body.secrets, body.environment);
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
    params(("id" = String, Path, description = "`box_...`")),
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
    id: web::Path<String>,
) -> Result<web::Json<BoxView>, ApiError> {
    let snapshot = boxes.get(&who.account_id, &id, true).await?;
    Ok(web::Json(BoxView::live(snapshot, &envs).await))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "keepBox",
    params(("id" = String, Path, description = "`box_...`")),
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
    id: web::Path<String>,
    body: web::Json<KeepBody>,
) -> Result<web::Json<BoxView>, ApiError> {
    Ok(web::Json(
        boxes.keep(&who.account_id, &id, &body.keep).await?.into(),
    ))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "stopBox",
    params(("id" = String, Path, description = "`box_...`")),
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
    id: web::Path<String>,
) -> Result<web::Json<BoxView>, ApiError> {
    Ok(web::Json(boxes.stop(&who.account_id, &id).await?.into()))
}
