//! `/mcp`: the `sandbox_*` tools over MCP's Streamable HTTP transport, with
//! rmcp (the official Rust SDK) and its actix adapter. Both protocol revisions
//! clients use are served on the one endpoint (2025-11-25 with `initialize`,
//! 2026-07-28 session-free with `server/discover`); operation is stateless, so
//! a client keeping a stale session id after a restart is not stranded. Origin
//! and Host headers are validated against the configured public host names.
//! Callers authenticate with an API key or an OAuth access token as a bearer
//! token ([`crate::auth::require_mcp_credential`]); the principal reaches the
//! tools through the request extensions.

mod exec;
mod reply;
mod review;
mod schema;
mod sync;
mod tools;

use crate::server_info::ServerInfo;
use psbx_actors::boxes::Boxes;
use psbx_actors::environments::Environments;
use psbx_actors::reviews::Reviews;
use psbx_actors::shots::Shots;
use psbx_actors::store::{Principal, Store};
use rmcp_actix_web::transport::{LocalSessionManager, StreamableHttpService};
use std::sync::Arc;
use std::time::Duration;

pub use schema::flatten as flatten_schema;
pub use sync::{SyncContext, checked_dest, pack_command, shell_quote, upload_command};
pub use tools::PsbxMcp;

/// The tools `/mcp` serves, as `tools/list` answers them.
pub fn tool_list() -> Vec<rmcp::model::Tool> {
    PsbxMcp::tools()
}

pub type McpService = StreamableHttpService<PsbxMcp, LocalSessionManager>;

/// Builds the service once, for every worker to share. `origins` are the
/// allowed `Origin` values (scheme://host:port), `hosts` the allowed `Host`
/// names; neither may be empty (empty would turn the check off). `info`
/// has the server's base URL as clients reach it (for `sandbox_sync`'s upload
/// URLs) and what environment reads show.
pub fn service(
    boxes: Arc<Boxes>,
    (shots, reviews): (Shots, Reviews),
    store: Store,
    environments: Environments,
    info: ServerInfo,
    hosts: Vec<String>,
    origins: Vec<String>,
) -> McpService {
    let sync = SyncContext {
        boxes: boxes.clone(),
        store,
        public_url: info.public_url.clone(),
    };
    let server = PsbxMcp::new(boxes, sync, environments, info, (shots, reviews));
    StreamableHttpService::builder()
        .service_factory(Arc::new(move || Ok(server.clone())))
        .session_manager(Arc::new(LocalSessionManager::default()))
        .stateful_mode(false)
        .allowed_hosts(hosts)
        .allowed_origins(origins)
        .sse_keep_alive(Duration::from_secs(15))
        .on_request_fn(|req, extensions| {
            if let Some(p) = actix_web::HttpMessage::extensions(req).get::<Principal>() {
                extensions.insert(p.clone());
            }
        })
        .build()
}
