//! The stdio MCP server of `psbx mcp`: lists the psbx server's tools and
//! forwards every call to it, except `sandbox_sync`, which it runs itself: it
//! packs the local working tree as `psbx sync` does and uploads it into the
//! box. Stdout carries the protocol; logs go to stderr.

use super::remote::{CallFailed, Remote};
use crate::commands::sync;
use crate::mcp::{checked_dest, flatten_schema};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

const SYNC: &str = "sandbox_sync";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalSyncArgs {
    /// The box id, box_...
    pub id: String,
    /// Where under /work in the box to unpack, e.g. "repo" (default: /work itself).
    pub dest: Option<String>,
    /// Send only this commit's tree (any git revision, e.g. "HEAD"), instead of the working tree.
    pub commit: Option<String>,
    /// A directory inside the git repository to send, on this machine (default: the directory the MCP client started psbx mcp in).
    pub path: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SyncedView {
    box_id: String,
    dest: String,
    files: u64,
    bytes: u64,
    /// The top of the work tree sent.
    from: String,
}

/// The local `sandbox_sync` as listed.
fn sync_tool() -> Tool {
    let schema = serde_json::to_value(schemars::schema_for!(LocalSyncArgs))
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    Tool::new(
        SYNC,
        "Send a git working tree on this machine into a box under /work/<dest>: the files git \
         tracks plus new files .gitignore does not exclude (ignored files such as .env stay \
         here), or exactly one commit's tree. Answers the number of files and bytes sent.",
        Arc::new(flatten_schema(&schema)),
    )
}

fn failed(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

#[derive(Clone)]
struct Proxy {
    remote: Arc<Remote>,
    cwd: PathBuf,
}

impl Proxy {
    async fn sync(&self, arguments: Option<rmcp::model::JsonObject>) -> CallToolResult {
        let args: LocalSyncArgs = match serde_json::from_value(serde_json::Value::Object(
            arguments.unwrap_or_default(),
        )) {
            Ok(args) => args,
            Err(e) => {
                return failed(format!(
                    "the arguments were refused ({e}): give id (box_...) and optionally dest, \
                         commit and path"
                ));
            }
        };
        let dest = match checked_dest(args.dest.as_deref().unwrap_or_default()) {
            Ok(dest) => dest,
            Err(message) => return failed(message),
        };
        let dir = match args
            .path
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            Some(path) => self.cwd.join(path),
            None => self.cwd.clone(),
        };
        let (base, key, id) = (
            self.remote.base.clone(),
            self.remote.key().to_owned(),
            args.id.clone(),
        );
        let (to, commit) = (dest.clone(), args.commit.clone());
        let sent = tokio::task::spawn_blocking(move || {
            sync::send(&base, &key, &id, &to, &dir, commit.as_deref())
        })
        .await;
        match sent {
            Ok(Ok(sent)) => {
                let view = SyncedView {
                    box_id: args.id,
                    dest: format!("/work/{dest}").trim_end_matches('/').to_owned(),
                    files: sent.files,
                    bytes: sent.bytes,
                    from: sent.top.display().to_string(),
                };
                let summary = format!(
                    "synced {} files ({} bytes) from {} into {} of box {}",
                    view.files, view.bytes, view.from, view.dest, view.box_id
                );
                let mut result =
                    CallToolResult::structured(serde_json::to_value(&view).unwrap_or_default());
                result.content = vec![ContentBlock::text(summary)];
                result
            }
            Ok(Err(e)) => failed(format!(
                "{e:#}. Give as path a directory inside a git repository on this machine, and the \
                 id of a running box (sandbox_list, sandbox_status)."
            )),
            Err(e) => failed(format!("the sync task failed: {e}; retry")),
        }
    }
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("psbx", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "psbx sandboxes: sandbox_start a box, sandbox_sync your working tree into it, \
                 sandbox_exec commands in it, sandbox_stop it when done.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self
            .remote
            .tools()
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        tools.retain(|t| t.name != SYNC);
        tools.push(sync_tool());
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name == SYNC {
            return Ok(CallToolResponse::Complete(
                self.sync(request.arguments).await,
            ));
        }
        let name = request.name.clone();
        match self.remote.call(request, &context).await {
            Ok(response) => Ok(response),
            Err(CallFailed::Answer(e)) => Err(e),
            Err(CallFailed::Cancelled) => {
                tracing::info!(tool = %name, "cancelled by the client");
                Ok(CallToolResponse::Complete(failed("cancelled")))
            }
            Err(e @ CallFailed::Unreachable(_)) => {
                tracing::warn!(tool = %name, error = %e, "forwarding failed");
                Ok(CallToolResponse::Complete(failed(e.to_string())))
            }
        }
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
pub fn serve(url: String, key: String) -> anyhow::Result<()> {
    // reqwest 0.13 (rmcp's client) uses rustls without a built-in provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cwd = std::env::current_dir()?;
    let proxy = Proxy {
        remote: Arc::new(Remote::new(&url, key)),
        cwd,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        tracing::info!(server = %proxy.remote.base, "psbx mcp: serving MCP on stdio");
        let running = proxy.serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
        anyhow::Ok(())
    })
}
