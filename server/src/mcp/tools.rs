//! The `sandbox_*` tools. Each is a thin layer over the same actors the REST
//! routes use, and answers with the same shapes as structured content plus a
//! one-line summary; failures are `isError` results saying what to do next.

use super::schema;
use crate::routes::boxes::BoxView;
use crate::routes::exec::{ExecResult, OutputView};
use psbx_actors::box_::BoxSnapshot;
use psbx_actors::boxes::{Boxes, CreateRequest};
use psbx_actors::error::BoxError;
use psbx_actors::exec::bounded::Bounded;
use psbx_actors::exec::run::ExecEvent;
use psbx_actors::store::Principal;
use psbx_wire::boxd::ExecRequest;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use rmcp_actix_web::transport::on_request_extensions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Output kept per stream in a tool result: head and tail.
const KEEP: usize = 16 * 1024;
/// How often a running command reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct PsbxMcp {
    tool_router: Arc<ToolRouter<PsbxMcp>>,
    boxes: Arc<Boxes>,
}

#[derive(Debug, Deserialize, JsonSchema)]
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
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BoxArgs {
    /// The box id, box_...
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecArgs {
    /// The box id, box_...
    pub id: String,
    /// A shell command line, run with sh -lc in /work.
    pub cmd: String,
    /// Start it in the background and return its process id at once.
    pub background: Option<bool>,
    /// Kill the command (and its children) after this many seconds (default 1800).
    pub timeout_s: Option<u64>,
    /// Why the command runs, for people reading the box's history.
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
struct BoxListView {
    boxes: Vec<BoxView>,
}

fn account(ctx: &RequestContext<RoleServer>) -> Option<Principal> {
    on_request_extensions(&ctx.extensions).and_then(|e| e.get::<Principal>().cloned())
}

fn structured<T: Serialize>(summary: String, value: &T) -> CallToolResult {
    let mut result = CallToolResult::structured(serde_json::to_value(value).unwrap_or_default());
    result.content = vec![ContentBlock::text(summary)];
    result
}

/// A failure the agent can act on.
fn failed(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn box_failed(e: BoxError) -> CallToolResult {
    let next = match &e {
        BoxError::NotFound(_) => " Call sandbox_list to see this account's boxes.",
        BoxError::Over { .. } => {
            " A stopped box does not come back: start a new one with sandbox_start."
        }
        BoxError::HostFull(_) => " Stop boxes you no longer need, or ask for a smaller size.",
        BoxError::Invalid(_) => "",
        _ => " Retry in a moment; if it keeps failing, tell the operator.",
    };
    failed(format!("{e}.{next}"))
}

/// A box read, started or stopped, as a tool result.
fn box_result(result: Result<BoxSnapshot, BoxError>) -> CallToolResult {
    match result {
        Ok(snapshot) => {
            let view = BoxView::from(snapshot);
            structured(format!("box {} is {}", view.id, view.state), &view)
        }
        Err(e) => box_failed(e),
    }
}

fn unauthenticated() -> CallToolResult {
    failed(
        "this request carries no account: sign in with OAuth, or send an API key as a bearer token",
    )
}

#[tool_router]
impl PsbxMcp {
    pub fn new(boxes: Arc<Boxes>) -> Self {
        let mut router = Self::tool_router();
        for route in router.map.values_mut() {
            route.attr.input_schema = Arc::new(schema::flatten(&route.attr.input_schema));
            if let Some(out) = &route.attr.output_schema {
                route.attr.output_schema = Some(Arc::new(schema::flatten(out)));
            }
        }
        Self {
            tool_router: Arc::new(router),
            boxes,
        }
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
        let request = CreateRequest {
            name: a.name,
            goal: a.goal,
            size: a.size,
            keep: a.keep,
            spec: serde_json::json!({ "services": [], "secrets": a.secrets.unwrap_or_default(), "environment": null }),
        };
        Ok(box_result(self.boxes.create(who.account_id, request).await))
    }

    #[tool(description = "Read a box again (state, times, health); wakes a frozen box.")]
    async fn sandbox_status(
        &self,
        Parameters(a): Parameters<BoxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        Ok(box_result(
            self.boxes.get(&who.account_id, &a.id, true).await,
        ))
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
        Ok(box_result(self.boxes.stop(&who.account_id, &a.id).await))
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
                          Output is capped to its head and tail; secret values are masked."
    )]
    async fn sandbox_exec(
        &self,
        Parameters(a): Parameters<ExecArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        let background = a.background.unwrap_or(false);
        let timeout = a.timeout_s.unwrap_or(1800);
        if a.cmd.trim().is_empty() || timeout == 0 || timeout > 24 * 3600 {
            return Ok(failed(
                "cmd must not be empty and timeout_s must be between 1 and 86400",
            ));
        }
        if let Some(note) = &a.note {
            tracing::info!(box_id = %a.id, note = %note.chars().take(200).collect::<String>(), "exec (mcp)");
        }
        let request = ExecRequest {
            cmd: a.cmd,
            cwd: "/work".to_owned(),
            env: Vec::new(),
            timeout_s: (!background).then_some(timeout),
            background,
        };
        let mut events = match self.boxes.exec(&who.account_id, &a.id, request).await {
            Ok(events) => events,
            Err(e) => return Ok(box_failed(e)),
        };
        let progress = ctx.meta.get_progress_token();
        let (mut out, mut err) = (Bounded::new(KEEP, KEEP), Bounded::new(KEEP, KEEP));
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        let mut beats = 0u32;
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(Ok(ExecEvent::Started(pid))) if background => {
                        return Ok(structured(format!("started in the background as process {pid}"),
                            &serde_json::json!({ "pid": pid, "background": true })));
                    }
                    Some(Ok(ExecEvent::Started(_))) => {}
                    Some(Ok(ExecEvent::Stdout(b))) => out.push(&b),
                    Some(Ok(ExecEvent::Stderr(b))) => err.push(&b),
                    Some(Ok(ExecEvent::Exit(exit))) => {
                        let result = ExecResult {
                            pid: None,
                            background: false,
                            exit_code: exit.code,
                            signal: exit.signal,
                            timed_out: exit.timed_out,
                            stdout: Some(OutputView::from(&out)),
                            stderr: Some(OutputView::from(&err)),
                        };
                        let summary = match (exit.timed_out, exit.code) {
                            (true, _) => format!("timed out after {timeout}s and was killed"),
                            (false, Some(code)) => format!("exit code {code}\n{}", out.render()),
                            (false, None) => format!("ended by signal {:?}", exit.signal),
                        };
                        return Ok(structured(summary, &result));
                    }
                    Some(Err(e)) => return Ok(box_failed(e)),
                    None => return Ok(failed("the command's output stream ended without an exit status; retry")),
                },
                _ = tick.tick() => {
                    beats += 1;
                    if let Some(token) = &progress {
                        let tail = out.render();
                        let tail: String = tail.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
                        let _ = ctx.peer.notify_progress(
                            ProgressNotificationParam::new(token.clone(), f64::from(beats))
                                .with_message(format!("running for {}s; output so far ends with: {tail}", beats * 5)),
                        ).await;
                    }
                }
            }
        }
    }
}

#[tool_handler(router = self.tool_router, name = "psbx")]
impl ServerHandler for PsbxMcp {}
