//! The shapes of boxes on the API: what a start asks for ([`StartBox`],
//! [`ServiceSpec`], and [`start_spec`] turning them into the stored
//! [`BoxSpec`]), and what a box reads as ([`BoxView`] with its health,
//! services, links and environment). The REST routes (`routes::boxes`) and
//! the MCP tools (`sandbox_start`, `sandbox_status`) answer the same views.

use super::patterns;
use super::wire::{LinkBody, ModeBody};
use crate::error::ApiError;
use chrono::{DateTime, Utc};
use psbx_actors::boxes::BoxReading;
use psbx_actors::connectors::ConnectionStatus;
use psbx_actors::duration;
use psbx_actors::environments::Environments;
use psbx_actors::spec::{self, BoxSpec, Claimed, Notable, ServiceFiles};
use psbx_actors::wiring;
use psbx_wire::Endpoint;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use utoipa::ToSchema;

/// A service the box runs, as the caller describes it: a host name callers
/// dial (`api.svc.local`), which then resolves in the box to the box itself,
/// or a private address range (`172.16.0.0/16`) whose `port` leads to it.
#[derive(Debug, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceSpec {
    /// The internal host name callers use for it (`api.svc.local`), or a
    /// private IPv4 range inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or
    /// 100.64.0.0/10 (`172.16.0.0/16`; a range needs a port).
    #[schema(max_length = 253)]
    pub name: String,
    /// The port callers dial.
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub port: Option<u16>,
    /// The port the process in the box listens on, when not `port` (required
    /// when callers dial 80 and the process listens elsewhere).
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub target_port: Option<u16>,
    /// A published version to run instead of a process of your own.
    pub version: Option<String>,
    /// `box` or `external`; default `external` when the box has an external
    /// base URL (its own or its environment's), else `box`.
    pub mode: Option<ModeBody>,
}

impl From<ServiceSpec> for spec::ServiceSpec {
    fn from(s: ServiceSpec) -> Self {
        Self {
            name: s.name,
            port: s.port,
            target_port: s.target_port,
            version: s.version,
            mode: s.mode.map(Into::into),
        }
    }
}

/// What a box is started with beyond its size and times, as stored with it
/// (the services and links are checked by the start).
pub struct StartWiring {
    pub services: Vec<ServiceSpec>,
    pub links: Vec<LinkBody>,
    pub external_base_url: Option<String>,
    pub url_ports: Option<Vec<u16>>,
}

/// What a box is started with beyond its size and times, as stored with it.
pub fn start_spec(
    wiring: StartWiring,
    secrets: Vec<String>,
    environment: Option<String>,
) -> Result<BoxSpec, ApiError> {
    for service in &wiring.services {
        patterns::no_nul("services[].name", &service.name)?;
        patterns::no_nul(
            "services[].version",
            service.version.as_deref().unwrap_or_default(),
        )?;
    }
    for link in &wiring.links {
        patterns::no_nul("links[].name", &link.name)?;
    }
    let mut spec = BoxSpec::new(
        wiring.services.into_iter().map(Into::into).collect(),
        secrets,
        environment,
    );
    spec.links = wiring.links.into_iter().map(Into::into).collect();
    spec.external_base_url = wiring.external_base_url;
    if let Some(mut ports) = wiring.url_ports {
        if ports.contains(&0) || ports.len() > 50 {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!(
                    "urlPorts must list at most 50 ports from 1 to 65535; got {} ({ports:?})",
                    ports.len()
                ),
            ));
        }
        ports.sort_unstable();
        ports.dedup();
        spec.url_ports = Some(ports);
    }
    Ok(spec)
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
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub size: Option<u32>,
    /// Keep the box this long after its last use, e.g. `"3d"` (default `"24h"`, at most `"7d"`).
    pub keep: Option<String>,
    /// Services the box runs, by the names callers use (at most 50).
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
    /// Names in this box that lead to a port of another box of this account (at most 50).
    #[serde(default)]
    pub links: Vec<LinkBody>,
    /// Where services in external mode forward HTTP to (`https://dev.example.com`);
    /// default the environment's.
    pub external_base_url: Option<String>,
    /// The only ports the box's URL reaches (the ports dialed in the URL's
    /// `-<port>`; the bare URL counts as the first declared service's port,
    /// else 80); any other port gets the same 404 as a wrong key. Default:
    /// every port. At most 50.
    #[schema(max_items = 50, value_type = Option<Vec<u16>>)]
    #[serde(default, deserialize_with = "super::whole::optional_list")]
    pub url_ports: Option<Vec<u16>>,
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
    /// What boxd can do; `take-over` when a name declared later with
    /// `wire` is taken over in place.
    pub features: Vec<String>,
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
    /// the box is stopped, or when `urlPorts` leaves out the port it serves.
    #[schema(nullable)]
    pub url: Option<String>,
    /// The only ports the box's URL reaches (`urlPorts` at start); absent:
    /// every port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_ports: Option<Vec<u16>>,
    /// The services declared at start or with `wire`, each with its mode,
    /// address in the box and URL.
    pub services: Vec<DeclaredServiceView>,
    /// Names in this box that lead to a port of another box.
    pub links: Vec<LinkView>,
    /// Where services in external mode forward HTTP to (the start's own, else
    /// the environment's).
    pub external_base_url: Option<String>,
    /// The environment the box was started in, as it took it at claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<BoxEnvironmentView>,
    /// Bytes the box sent through its environment's connections (its metered
    /// outbound traffic there; what comes back is not counted): what every
    /// replica stored, plus what the one that answered counted since its last flush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_bytes: Option<u64>,
    /// Bytes the box sent to the internet through its own network card (what
    /// its QEMU process sent past the host's filter, counted per box by the
    /// host's kernel and stored every few seconds; replies are not counted).
    /// Given by a box's own view, not in lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internet_egress_bytes: Option<u64>,
}

/// A declared service.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredServiceView {
    pub name: String,
    /// `name` (a host name) or `range` (an address range).
    pub kind: &'static str,
    /// The port callers dial.
    pub port: Option<u16>,
    /// The port the process in the box listens on, when not `port`.
    pub target_port: Option<u16>,
    /// `box` or `external` (null for a name without a port).
    pub mode: Option<&'static str>,
    /// The address the name resolves to in the box (null for a range, or
    /// while boxd does not answer).
    pub address: Option<String>,
    /// A published version run instead of a process of the caller's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `<box url with -<port>>`: the service's port from outside (null
    /// without a port, or once the box is stopped).
    #[schema(nullable)]
    pub url: Option<String>,
}

/// A name in the box that leads to a port of another box.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkView {
    pub name: String,
    pub port: u16,
    /// The linked box.
    #[serde(rename = "box")]
    pub box_id: String,
    pub target_port: u16,
    /// The linked box's state (`running`, `frozen`, `stopped`, ...; null in lists).
    pub state: Option<String>,
    /// The address the name resolves to in the box.
    pub address: Option<String>,
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
    /// The environment's AWS role, when it named one at the start: SDKs and
    /// the CLI in the box (and containers started with a settings file) use
    /// it through `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
    pub aws: Option<BoxAwsView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoxAwsView {
    pub role_arn: String,
    pub region: Option<String>,
    /// `psbx-<box id>`: what `aws sts get-caller-identity` shows after `assumed-role/<role>/`.
    pub session_name: String,
    /// Where boxd serves the role's credentials in the box.
    pub credentials_uri: String,
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
    fn new(
        c: Claimed,
        status: &HashMap<String, ConnectionStatus>,
        spec: &BoxSpec,
        box_id: &str,
    ) -> Self {
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
                    // Less what the box runs itself or links elsewhere.
                    reachable: conn
                        .addresses
                        .into_iter()
                        .filter(|a| !wiring::takes(spec, a))
                        .collect(),
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
            aws: c.aws.map(|role| BoxAwsView {
                role_arn: role.role_arn,
                region: role.region,
                session_name: psbx_actors::box_role::session_name(box_id),
                credentials_uri: psbx_wire::boxd::aws_credentials_uri(),
            }),
        }
    }
}

impl BoxView {
    /// The box, its environment's connections read again now.
    pub async fn live(reading: BoxReading, envs: &Environments) -> Self {
        let record = &reading.snapshot.record;
        let claimed = record.spec.claimed.clone();
        let spec = record.spec.clone();
        let (id, account) = (record.id.clone(), record.account_id.clone());
        let mut view = Self::from(reading);
        let egress = envs.egress_bytes(&id).await.ok();
        view.internet_egress_bytes = egress.map(|(_, internet)| internet);
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
            view.environment = Some(BoxEnvironmentView::new(claimed, &status, &spec, &view.id));
            view.egress_bytes = egress.map(|(connections, _)| connections);
        }
        view
    }
}

impl From<BoxReading> for BoxView {
    fn from(reading: BoxReading) -> Self {
        let BoxReading {
            snapshot: s,
            urls,
            linked,
        } = reading;
        let r = s.record;
        let over = r.state.is_terminal();
        let (url, service_urls) = urls.map_or((None, Vec::new()), |u| (Some(u.url), u.services));
        // A URL the box's `urlPorts` do not reach is not shown.
        let reached = |port: u16| {
            r.spec
                .url_ports
                .as_ref()
                .is_none_or(|ports| ports.contains(&port))
        };
        let url = url.filter(|_| reached(psbx_actors::box_urls::bare_port(&r.spec.services)));
        let names = s.health.as_ref().map(|h| &h.names);
        let address = |name: &str| names.and_then(|n| n.get(name)).map(ToString::to_string);
        let services = r
            .spec
            .services
            .iter()
            .enumerate()
            .map(|(i, svc)| {
                let range = matches!(
                    wiring::parse_name("", &svc.name),
                    Ok(wiring::Name::Range(_))
                );
                DeclaredServiceView {
                    name: svc.name.clone(),
                    kind: if range { "range" } else { "name" },
                    port: svc.port,
                    target_port: svc.target_port,
                    // Older rows have no mode: box.
                    mode: svc
                        .port
                        .map(|_| svc.mode.unwrap_or(spec::Mode::Box).as_str()),
                    address: (!range).then(|| address(&svc.name)).flatten(),
                    version: svc.version.clone(),
                    url: service_urls
                        .get(i)
                        .cloned()
                        .flatten()
                        .filter(|_| svc.port.is_some_and(reached)),
                }
            })
            .collect();
        let links = r
            .spec
            .links
            .iter()
            .map(|l| LinkView {
                name: l.name.clone(),
                port: l.port,
                box_id: l.box_id.clone(),
                target_port: l.target_port,
                state: linked.get(&l.box_id).cloned(),
                address: address(&l.name),
            })
            .collect();
        let external_base_url = r.spec.external_base_url().map(str::to_owned);
        let environment = r
            .spec
            .claimed
            .clone()
            .map(|c| BoxEnvironmentView::new(c, &HashMap::new(), &r.spec, r.id.as_str()));
        Self {
            url,
            url_ports: r.spec.url_ports.clone(),
            services,
            links,
            external_base_url,
            environment,
            egress_bytes: None,
            internet_egress_bytes: None,
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
                features: s
                    .hello
                    .as_ref()
                    .map(|h| h.features.clone())
                    .unwrap_or_default(),
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
