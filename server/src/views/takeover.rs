//! The shapes of takeover on the API: a one-time link to a web terminal in
//! a box ([`TakeoverView`], as `POST /v1/boxes/{id}/takeover` and MCP's
//! `sandbox_takeover` answer it) and the terminals open in a box.

use crate::server_info::ServerInfo;
use chrono::{DateTime, Utc};
use psbx_actors::boxes::TakeoverLink;
use psbx_actors::boxes::terminals;
use serde::Serialize;
use utoipa::ToSchema;

/// A takeover link, as REST and MCP answer it.
#[derive(Debug, Clone, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TakeoverView {
    /// The terminal page: open it in a browser, once, before `expiresAt`.
    pub url: String,
    pub expires_at: DateTime<Utc>,
    /// `box_...`
    pub box_id: String,
}

impl TakeoverView {
    pub fn new(link: TakeoverLink, info: &ServerInfo) -> Self {
        Self {
            url: format!("{}/takeover/{}", info.public_url, link.token),
            expires_at: link.expires_at,
            box_id: link.box_id.to_string(),
        }
    }
}

/// A takeover terminal open in a box.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalView {
    /// `term_...`
    pub id: String,
    /// `box_...`
    pub box_id: String,
    pub opened_at: DateTime<Utc>,
    /// The page's last keystroke (or the opening).
    pub last_input_at: DateTime<Utc>,
    /// When psbx closes it unless input comes first.
    pub closes_at: DateTime<Utc>,
}

impl TerminalList {
    pub fn of(open: Vec<terminals::TerminalView>) -> Self {
        let terminals = open
            .into_iter()
            .map(|t| TerminalView {
                id: t.id.to_string(),
                box_id: t.box_id.to_string(),
                opened_at: t.opened_at,
                last_input_at: t.last_input_at,
                closes_at: t.closes_at,
            })
            .collect();
        Self { terminals }
    }
}

/// The terminals open in a box.
#[derive(Debug, Serialize, ToSchema)]
pub struct TerminalList {
    /// Oldest first. Each closes by itself at `closesAt` unless input comes
    /// first (`takeover.idle_timeout` after the last input, at most
    /// `takeover.max_lifetime` after it opened).
    pub terminals: Vec<TerminalView>,
}
