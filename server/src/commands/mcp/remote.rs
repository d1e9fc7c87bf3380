//! The connection of `psbx mcp` to the psbx server's `/mcp`: an rmcp
//! Streamable HTTP client with the API key as bearer token, made on first use
//! and made again after it broke. Progress notifications of forwarded calls
//! are relayed to the local client under the local client's progress token.

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ProgressNotificationParam,
    ProgressToken, ResultType, ServerResult, Tool,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, RoleServer, ServiceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where progress of a forwarded call goes: the local token and client.
type Routes = Arc<Mutex<HashMap<ProgressToken, (ProgressToken, Peer<RoleServer>)>>>;

/// The client side of the connection: relays progress.
#[derive(Clone, Default)]
pub struct Relay {
    routes: Routes,
}

impl ClientHandler for Relay {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let target = self
            .routes
            .lock()
            .ok()
            .and_then(|r| r.get(&params.progress_token).cloned());
        tracing::debug!(token = ?params.progress_token, routed = target.is_some(), "progress");
        if let Some((local, peer)) = target {
            let mut relayed = params;
            relayed.progress_token = local;
            if let Err(e) = peer.notify_progress(relayed).await {
                tracing::debug!(error = %e, "relaying progress");
            }
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("psbx-mcp", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A call that could not reach the server (as opposed to an answer).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot reach the psbx server at {url}: {cause}. Check that it runs, that PSBX_URL points \
     at it and that PSBX_API_KEY is a valid key; the next call connects again"
)]
pub struct Unreachable {
    url: String,
    cause: String,
}

pub struct Remote {
    /// The server's base URL (for REST) ...
    pub base: String,
    /// ... and its `/mcp` endpoint.
    endpoint: String,
    key: String,
    relay: Relay,
    client: tokio::sync::Mutex<Option<RunningService<RoleClient, Relay>>>,
}

impl Remote {
    pub fn new(base: &str, key: String) -> Self {
        let base = base.trim_end_matches('/').to_owned();
        Self {
            endpoint: format!("{base}/mcp"),
            base,
            key,
            relay: Relay::default(),
            client: tokio::sync::Mutex::new(None),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    fn unreachable(&self, cause: impl ToString) -> Unreachable {
        Unreachable {
            url: self.base.clone(),
            cause: cause.to_string(),
        }
    }

    /// The connected peer, connecting (again) when needed.
    async fn peer(&self) -> Result<Peer<RoleClient>, Unreachable> {
        let mut client = self.client.lock().await;
        if let Some(running) = client.as_ref()
            && !running.is_transport_closed()
        {
            return Ok(running.peer().clone());
        }
        let config = StreamableHttpClientTransportConfig::with_uri(self.endpoint.clone())
            .auth_header(self.key.clone());
        let transport = StreamableHttpClientTransport::from_config(config);
        let running = self
            .relay
            .clone()
            .serve(transport)
            .await
            .map_err(|e| self.unreachable(e))?;
        tracing::info!(server = %self.base, "connected");
        let peer = running.peer().clone();
        *client = Some(running);
        Ok(peer)
    }

    /// Drops a broken connection: the next call connects again.
    async fn reset(&self) {
        if let Some(running) = self.client.lock().await.take() {
            let _ = running.cancel().await;
        }
    }

    /// The server's tools.
    pub async fn tools(&self) -> Result<Vec<Tool>, Unreachable> {
        for attempt in 0..2 {
            let peer = self.peer().await?;
            match peer.list_all_tools().await {
                Ok(tools) => return Ok(tools),
                Err(e) if attempt == 0 && is_connection(&e) => self.reset().await,
                Err(e) => {
                    self.reset().await;
                    return Err(self.unreachable(e));
                }
            }
        }
        Err(self.unreachable("the connection broke twice"))
    }

    /// Forwards a tool call: arguments and result unchanged, progress relayed,
    /// a cancellation by the local client passed on.
    pub async fn call(
        &self,
        mut params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, CallFailed> {
        params.meta = None; // the server gets this connection's own progress token
        let peer = self.peer().await?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                self.reset().await;
                return Err(self.unreachable(e).into());
            }
        };
        let (id, remote_token) = (handle.id.clone(), handle.progress_token.clone());
        if let Some(local) = ctx.meta.get_progress_token()
            && let Ok(mut routes) = self.relay.routes.lock()
        {
            routes.insert(remote_token.clone(), (local, ctx.peer.clone()));
        }
        let response = handle.await_response();
        tokio::pin!(response);
        let outcome = tokio::select! {
            outcome = &mut response => Some(outcome),
            () = ctx.ct.cancelled() => None,
        };
        if let Ok(mut routes) = self.relay.routes.lock() {
            routes.remove(&remote_token);
        }
        match outcome {
            None => {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by the client".to_owned()),
                    ))
                    .await;
                Err(CallFailed::Cancelled)
            }
            Some(Ok(ServerResult::CallToolResult(mut result))) => {
                // Over 2025-11-25 results carry no resultType; 2026-07-28 clients need it.
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Ok(CallToolResponse::Complete(result))
            }
            Some(Ok(ServerResult::InputRequiredResult(result))) => {
                Ok(CallToolResponse::InputRequired(result))
            }
            Some(Ok(ServerResult::CreateTaskResult(result))) => Ok(CallToolResponse::Task(result)),
            Some(Ok(_)) => Err(CallFailed::Answer(McpError::internal_error(
                "the psbx server answered the tool call with something else than a tool result",
                None,
            ))),
            Some(Err(ServiceError::McpError(e))) => Err(CallFailed::Answer(e)),
            Some(Err(e)) => {
                self.reset().await;
                Err(self.unreachable(e).into())
            }
        }
    }
}

/// Why a forwarded call has no result.
#[derive(Debug, thiserror::Error)]
pub enum CallFailed {
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    /// The server answered with a protocol error: passed on as it is.
    #[error("{0}")]
    Answer(McpError),
    #[error("cancelled")]
    Cancelled,
}

fn is_connection(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}
