//! What a tool call answers, for every tool file: a structured result with its
//! one-line summary ([`structured`]), a failure the agent can act on ([`failed`],
//! [`box_failed`]: the error's text and the next step to take), the account a call
//! carries ([`account`]). Apart from the tool router (`tools.rs`), so the tool files
//! (`exec.rs`, `review.rs`, `sync.rs`) import them from below instead of from the
//! dispatcher that imports them.

use psbx_actors::boxd_link::LinkError;
use psbx_actors::environments::EnvError;
use psbx_actors::error::BoxError;
use psbx_actors::store::Principal;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp_actix_web::transport::on_request_extensions;
use serde::Serialize;

pub(crate) fn account(ctx: &RequestContext<RoleServer>) -> Option<Principal> {
    on_request_extensions(&ctx.extensions).and_then(|e| e.get::<Principal>().cloned())
}

pub(crate) fn structured<T: Serialize>(summary: String, value: &T) -> CallToolResult {
    let mut result = CallToolResult::structured(serde_json::to_value(value).unwrap_or_default());
    result.content = vec![ContentBlock::text(summary)];
    result
}

/// A failure the agent can act on.
pub(crate) fn failed(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

pub(crate) fn box_failed(e: BoxError) -> CallToolResult {
    let next = match &e {
        BoxError::NotFound(_) => " Call sandbox_list to see this account's boxes.",
        BoxError::ProcessNotFound { .. } => " sandbox_status lists the box's commands.",
        BoxError::ChannelLost(_) => {
            " Run it again once the box answers; sandbox_status lists its commands."
        }
        BoxError::Over { .. } => {
            " A stopped box does not come back: start a new one with sandbox_start."
        }
        BoxError::HostFull(_) => " Stop boxes you no longer need, or ask for a smaller size.",
        BoxError::Store(psbx_actors::store::StoreError::QuotaExceeded(_)) => {
            " Stop boxes this account no longer needs with sandbox_stop (sandbox_list lists them)."
        }
        BoxError::InvalidTransition(_) => {
            " sandbox_status shows the box's state; ask again once the state allows it."
        }
        BoxError::Overran { .. } => {
            " sandbox_status shows whether it still runs; end it with sandbox_exec running `kill -- -<pid>`."
        }
        BoxError::Boxd(LinkError::NoAnswer(_)) => {
            " The box is busy or stuck: retry in a moment; sandbox_status shows its health."
        }
        BoxError::Boxd(LinkError::Closed) => {
            " boxd is restarting, or the box froze or stopped: retry once the box answers."
        }
        BoxError::Invalid(_)
        | BoxError::CannotRun(_)
        | BoxError::Secrets(psbx_actors::secrets::SecretError::NotFound(_))
        | BoxError::Environment(
            EnvError::NotFound(_) | EnvError::Invalid(_) | EnvError::Conflict(_),
        ) => "",
        _ => " Retry in a moment; if it keeps failing, tell the operator.",
    };
    failed(format!("{e}.{next}"))
}

pub(crate) fn unauthenticated() -> CallToolResult {
    failed(
        "this request carries no account: sign in with OAuth, or send an API key as a bearer token",
    )
}
