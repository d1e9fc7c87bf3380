//! `sync`: a tar of files unpacked under `/work`, its request line and its
//! answer. boxd's side: `boxd/src/services/sync.rs`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncRequest {
    /// Under `/work`; relative, without `..`.
    pub dest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncDone {
    pub ok: bool,
    pub files: u64,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Followed by the tar's bytes; answered with one JSON [`SyncDone`].
impl super::Streamed for SyncRequest {
    const SERVICE: super::Service = super::Service::Sync;
}
