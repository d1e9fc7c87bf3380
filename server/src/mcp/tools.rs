//! The `sandbox_*` tools. Each is a thin layer over the same actors the REST
//! routes use, and answers with the same shapes as structured content plus a
//! one-line summary; failures are `isError` results saying what to do next.

use super::exec::{self, ExecArgs};
use super::reply::{account, box_failed, failed, structured, unauthenticated};
use super::schema;
use crate::ids::RequestId;
use crate::server_info::ServerInfo;
use crate::views::boxes::{BoxView, ServiceSpec, StartWiring, start_spec};
use crate::views::environments::{EnvironmentList, EnvironmentView};
use crate::views::exec::ProcessView;
use crate::views::wire::{LinkBody, ModeBody, WireBody};
use psbx_actors::box_state::BoxState;
use psbx_actors::boxd_link::LinkError;
use psbx_actors::boxes::{BoxReading, Boxes, CreateRequest};
use psbx_actors::environments::Environments;
use psbx_actors::error::BoxError;
use psbx_actors::ids::BoxId;
use psbx_actors::reviews::Reviews;
use psbx_actors::shots::Shots;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone)]
pub struct PsbxMcp {
    tool_router: Arc<ToolRouter<PsbxMcp>>,
    boxes: Arc<Boxes>,
    pub(super) sync: super::sync::SyncContext,
    environments: Environments,
    pub(super) info: ServerInfo,
    pub(super) shots: Shots,
    pub(super) reviews: Reviews,
}

/// Field names are camelCase like every other tool's and the REST body's (the
/// snake_case names earlier schemas showed are still accepted).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartArgs {
    /// A short name for people.
    pub name: Option<String>,
    /// What the box is for.
    pub goal: Option<String>,
    /// Size in units: 1, 2, 4 or 8 (default 1).
    pub size: Option<u32>,
    /// Keep the box this long after its last use, e.g. "3d" (default "24h", at most "7d").
    pub keep: Option<String>,
    /// Names of the account's secrets the box receives as environment variables.
    pub secrets: Option<Vec<String>>,
    /// Services the box runs: the host names other programs call them by
    /// (api.svc.local resolves to the box itself; with targetPort when the
    /// process listens on another port than callers dial), or a private range
    /// (172.16.0.0/16 with a port). mode: box or external (default external
    /// when there is an externalBaseUrl).
    pub services: Option<Vec<ServiceSpec>>,
    /// Names in this box that lead to a port of another box of this account:
    /// [{name, port, box, targetPort?}].
    pub links: Option<Vec<LinkBody>>,
    /// Where services in external mode forward HTTP to (default: the environment's).
    #[serde(alias = "external_base_url")]
    pub external_base_url: Option<String>,
    /// The only ports the box's URL reaches (the port in the URL's -<port>;
    /// the bare URL counts as the first declared service's port, else 80);
    /// others get a 404. Default: every port. Give it when sharing a URL, so
    /// the box's databases and admin ports stay out of reach.
    #[serde(alias = "url_ports")]
    pub url_ports: Option<Vec<u16>>,
    /// The environment (see sandbox_environments) to plug the box into.
    pub environment: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WireArgs {
    /// The box id, box_...
    pub id: String,
    /// A declared service to change, or a name to declare now (taken over
    /// in place: it keeps its address, connections through the connector
    /// are closed).
    pub service: Option<String>,
    /// box: the box's own process on targetPort; external: forward HTTP to the externalBaseUrl.
    pub mode: Option<ModeBody>,
    /// The port callers dial (which declaration, or a new one).
    pub port: Option<u16>,
    /// The port the box's process listens on.
    pub target_port: Option<u16>,
    /// A published version to run instead of a process of your own.
    pub version: Option<String>,
    /// Links to add: [{name, port, box, targetPort?}].
    pub links: Option<Vec<LinkBody>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BoxArgs {
    /// The box id, box_...
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct StatusArgs {
    /// The box id, box_...
    pub id: String,
    /// Also make a one-time link to a web terminal in the box for a person
    /// (it expires in minutes; give it to them as is). Default false.
    pub takeover: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoArgs {}

/// `sandbox_status`: the box, and the commands run in it through MCP or in the background.
#[derive(Debug, Serialize)]
struct StatusView {
    #[serde(flatten)]
    view: BoxView,
    processes: Vec<ProcessView>,
    /// Why `processes` is empty for a running box: boxd did not answer (the
    /// box is stopping, freezing, or its boxd restarting).
    #[serde(
        rename = "processesUnavailable",
        skip_serializing_if = "Option::is_none"
    )]
    processes_unavailable: Option<String>,
    /// A takeover link, when asked for (the shape `POST /v1/boxes/{id}/takeover` answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    takeover: Option<crate::views::takeover::TakeoverView>,
    /// The box's latest review (`sandbox_review`), with the person's feedback.
    #[serde(skip_serializing_if = "Option::is_none")]
    review: Option<crate::views::reviews::ReviewView>,
}

#[derive(Debug, Serialize)]
struct BoxListView {
    boxes: Vec<BoxView>,
}

/// A box read, started or stopped, as a tool result.
async fn box_result(result: Result<BoxReading, BoxError>, envs: &Environments) -> CallToolResult {
    match result {
        Ok(reading) => {
            let view = BoxView::live(reading, envs).await;
            let url = view
                .url
                .as_ref()
                .map(|u| format!("; its URL is {u}"))
                .unwrap_or_default();
            structured(format!("box {} is {}{url}", view.id, view.state), &view)
        }
        Err(e) => box_failed(e),
    }
}

#[tool_router]
impl PsbxMcp {
    pub fn new(
        boxes: Arc<Boxes>,
        sync: super::sync::SyncContext,
        environments: Environments,
        info: ServerInfo,
        (shots, reviews): (Shots, Reviews),
    ) -> Self {
        Self {
            tool_router: Arc::new(Self::router()),
            boxes,
            sync,
            environments,
            info,
            shots,
            reviews,
        }
    }

    /// Every tool, each schema flattened (the module doc of [`schema`]).
    fn router() -> ToolRouter<Self> {
        let mut router = Self::tool_router() + Self::sync_router() + Self::review_router();
        for route in router.map.values_mut() {
            route.attr.input_schema = Arc::new(schema::flatten(&route.attr.input_schema));
            if let Some(out) = &route.attr.output_schema {
                route.attr.output_schema = Some(Arc::new(schema::flatten(out)));
            }
        }
        router
    }

    /// The tools as `tools/list` answers them (for the skill's checks).
    pub fn tools() -> Vec<rmcp::model::Tool> {
        Self::router().list_all()
    }

    #[tool(
        description = "List this account's environments (read-only): per environment which \
                       addresses boxes can reach (reachable), whether a connector is online \
                       (connectorOnline), each connection's online, sessions, lastSeenAt, \
                       connectorVersion and the addresses it carries, and each service's \
                       variable names. Creating and changing environments is REST (/v1/environments)."
    )]
    async fn sandbox_environments(
        &self,
        Parameters(_): Parameters<NoArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        Ok(match self.environments.list(&who.account_id).await {
            Ok(all) => {
                let list = EnvironmentList {
                    environments: all
                        .iter()
                        .map(|e| EnvironmentView::new(e, &self.info))
                        .collect(),
                };
                let summary = list
                    .environments
                    .iter()
                    .map(|e| {
                        let online = e.connections.iter().filter(|c| c.online).count();
                        format!(
                            "{}: {online} of {} connections online",
                            e.name,
                            e.connections.len()
                        )
                    })
                    .collect::<Vec<_>>();
                let summary = if summary.is_empty() {
                    "no environments: create one with POST /v1/environments".to_owned()
                } else {
                    summary.join("; ")
                };
                structured(summary, &list)
            }
            Err(e) => failed(format!("{e}. Retry in a moment.")),
        })
    }

    #[tool(
        description = "Start a box: a Linux VM for one piece of work. Returns its id and state."
    )]
    async fn sandbox_start(
        &self,
        Parameters(a): Parameters<StartArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        let spec = match start_spec(
            StartWiring {
                services: a.services.unwrap_or_default(),
                links: a.links.unwrap_or_default(),
                external_base_url: a.external_base_url,
                url_ports: a.url_ports,
            },
            a.secrets.unwrap_or_default(),
            a.environment,
        ) {
            Ok(spec) => spec,
            Err(e) => return Ok(failed(e.message())),
        };
        let request = CreateRequest {
            name: a.name,
            goal: a.goal,
            size: a.size,
            keep: a.keep,
            spec,
        };
        Ok(box_result(
            self.boxes.create(who.account_id, request).await,
            &self.environments,
        )
        .await)
    }

    #[tool(
        description = "Read a box again (state, times, health, and its commands started in the \
                       background or still running, with their exit codes); wakes a frozen box. \
                       With takeover: true, also a one-time link (takeover.url, valid for minutes) \
                       to a web terminal in the box, for a person to take over. Once the box was handed \
                       over (sandbox_review), also its latest review: state and the person's feedback."
    )]
    async fn sandbox_status(
        &self,
        Parameters(a): Parameters<StatusArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        // A malformed id fails as an unknown box does (`crate::ids`).
        let id = match BoxId::read(&a.id) {
            Ok(id) => id,
            Err(e) => return Ok(box_failed(e)),
        };
        let reading = match self.boxes.get(&who.account_id, &id, true).await {
            Ok(reading) => reading,
            Err(e) => return Ok(box_failed(e)),
        };
        let running = reading.snapshot.record.state == BoxState::Running;
        let view = BoxView::live(reading, &self.environments).await;
        // A box stopping or freezing under the call still has a status: its
        // commands are then said to be unlisted, not the call failed.
        let (processes, processes_unavailable) = if running {
            match self.boxes.processes(&who.account_id, &id).await {
                Ok(list) => (list.into_iter().map(ProcessView::from).collect(), None),
                Err(
                    e @ (BoxError::Boxd(LinkError::Closed | LinkError::NoAnswer(_))
                    | BoxError::ChannelLost(_)
                    | BoxError::Over { .. }
                    | BoxError::InvalidTransition(_)),
                ) => (Vec::new(), Some(e.to_string())),
                Err(e) => return Ok(box_failed(e)),
            }
        } else {
            (Vec::new(), None)
        };
        let takeover = if a.takeover.unwrap_or(false) {
            match self.boxes.takeover_link(&who.account_id, &id).await {
                Ok(link) => Some(crate::views::takeover::TakeoverView::new(link, &self.info)),
                Err(e) => return Ok(box_failed(e)),
            }
        } else {
            None
        };
        let review = match self.reviews.latest(&who.account_id, &id).await {
            Ok(review) => review,
            Err(e) => return Ok(super::review::review_failed(e)),
        };
        let mut summary = format!(
            "box {} is {}; {} of its commands running",
            view.id,
            view.state,
            processes.iter().filter(|p| p.running).count()
        );
        if let Some(why) = &processes_unavailable {
            summary.push_str(&format!(" (its commands could not be listed: {why})"));
        }
        if let Some(link) = &takeover {
            summary.push_str(&format!(
                "; takeover link (one use, until {}): {}",
                link.expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                link.url
            ));
        }
        let review_view = review
            .as_ref()
            .map(|r| crate::views::reviews::ReviewView::new(r, &self.info));
        let review_content = match (&review, &review_view) {
            (Some(review), Some(view)) => self.review_content(&who.account_id, review, view).await,
            _ => Vec::new(),
        };
        let mut result = structured(
            summary,
            &StatusView {
                view,
                processes,
                processes_unavailable,
                takeover,
                review: review_view,
            },
        );
        result.content.extend(review_content);
        Ok(result)
    }

    #[tool(
        description = "Change how a box's declared services are wired, or link it to other boxes. \
                     {service, mode: \"box\"|\"external\"} switches a service (in box mode boxd does not \
                     hold the port: it does not matter whether its process runs yet); {service, port, \
                     targetPort?} declares a name later, taken over in place on boxes whose \
                     health.features has take-over (it keeps its address, connections open through the \
                     connector are closed, new ones reach the box); {links: [{name, port, box, \
                     targetPort?}]} makes name:port in this box lead to a port of another box of this \
                     account. Returns the box as sandbox_status does."
    )]
    async fn sandbox_wire(
        &self,
        Parameters(a): Parameters<WireArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        // A malformed id fails as an unknown box does (`crate::ids`).
        let id = match BoxId::read(&a.id) {
            Ok(id) => id,
            Err(e) => return Ok(box_failed(e)),
        };
        let change = WireBody {
            service: a.service,
            mode: a.mode,
            port: a.port,
            target_port: a.target_port,
            version: a.version,
            links: a.links.unwrap_or_default(),
        }
        .change();
        let change = match change {
            Ok(change) => change,
            Err(e) => return Ok(failed(e.message())),
        };
        Ok(box_result(
            self.boxes.wire(&who.account_id, &id, change).await,
            &self.environments,
        )
        .await)
    }

    #[tool(description = "Stop a box for good: its disk is deleted.")]
    async fn sandbox_stop(
        &self,
        Parameters(a): Parameters<BoxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        // A malformed id fails as an unknown box does (`crate::ids`).
        let id = match BoxId::read(&a.id) {
            Ok(id) => id,
            Err(e) => return Ok(box_failed(e)),
        };
        Ok(box_result(
            self.boxes.stop(&who.account_id, &id).await,
            &self.environments,
        )
        .await)
    }

    #[tool(description = "List this account's boxes, newest first.")]
    async fn sandbox_list(
        &self,
        Parameters(_): Parameters<NoArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        Ok(match self.boxes.list(&who.account_id, None, 200).await {
            Ok((page, _)) => {
                let view = BoxListView {
                    boxes: page.into_iter().map(BoxView::from).collect(),
                };
                structured(format!("{} boxes", view.boxes.len()), &view)
            }
            Err(e) => box_failed(e),
        })
    }

    #[tool(
        description = "Run a shell command in a box (sh -lc, in /work, with the box's secrets as environment). \
                       Waits up to wait_s (default 240) for it to end; a command still running then keeps \
                       running and the result gives its pid: call again with that pid to wait for it. \
                       Output (stdout and stderr together) is capped to its head and tail; the whole output \
                       stays in the log file the result names. Secret values are masked."
    )]
    async fn sandbox_exec(
        &self,
        Parameters(a): Parameters<ExecArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        Ok(exec::call(&self.boxes, who, a, ctx).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PsbxMcp {
    /// psbx's name and version, and `instructions` pointing at the skill.
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
        .with_server_info(rmcp::model::Implementation::new(
            "psbx",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(crate::skill::instructions(&self.info.public_url))
    }
}
