//! Control messages between the server and boxd.

use serde::{Deserialize, Serialize};

/// What the server sends to boxd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToBoxd {
    /// Say hello (again): sent whenever the server (re)connects to the channel.
    HelloRequest,
    /// Are you alive, and how are you? boxd answers [`FromBoxd::Pong`].
    Ping { seq: u64 },
}

/// What boxd sends to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromBoxd {
    Hello(Hello),
    Pong { seq: u64, health: Health },
}

/// boxd introduces itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    pub protocol: u32,
    pub version: String,
    /// The kernel's boot id: unchanged across a freeze and thaw (memory kept),
    /// new after a reboot.
    pub boot_id: String,
    /// What this boxd can do beyond the protocol version's baseline.
    pub features: Vec<String>,
}

/// boxd's view of the box, sent with every pong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub uptime_s: f64,
    pub load1: f64,
    pub mem_total_kb: u64,
    pub mem_available_kb: u64,
    /// The box's entries for its environment's addresses (none outside an
    /// environment, and from a boxd that predates them).
    #[serde(default)]
    pub private_endpoints: Vec<crate::boxd::PrivateEndpointHealth>,
}
