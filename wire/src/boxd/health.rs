//! `info`, `health` and `clock`: what the server asks on every new session
//! (boxd's introduction, the box's clock set to the server's) and when it
//! checks that the box is alive. boxd's side:
//! `boxd/src/services/{info,health,clock}.rs`.

use serde::{Deserialize, Serialize};

/// boxd's introduction, asked for after every (re)connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxInfo {
    pub protocol: u32,
    pub version: String,
    /// The kernel's boot id: the same after a freeze and thaw.
    pub boot_id: String,
    pub features: Vec<String>,
}

/// The server's clock, sent on every new session (boot, thaw, a server
/// restart): boxd sets the box's clock to it, so no box runs NTP or asks the
/// internet for the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clock {
    /// Nanoseconds since the Unix epoch.
    pub unix_nanos: u64,
}

impl Clock {
    /// This machine's clock now.
    pub fn now() -> Self {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            unix_nanos: u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// The [`BoxInfo`] feature of a boxd that takes a name over in place
/// ([`super::Service::Wire`]).
pub const TAKE_OVER_FEATURE: &str = "take-over";

/// boxd's view of the box, the answer of [`super::Service::Health`].
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
    pub private_endpoints: Vec<PrivateEndpointHealth>,
    /// The host names boxd's DNS answers (environment, declared and linked
    /// names) and the address each has in the box.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub names: std::collections::BTreeMap<String, std::net::Ipv4Addr>,
}

/// How one environment address fares in the box, in boxd's health.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrivateEndpointHealth {
    pub host: String,
    pub port: u16,
    /// The entry boxd opened for it (a listener on loopback).
    pub local_ip: String,
    pub local_port: u16,
    /// Connections through the entry now.
    pub open: u32,
    /// Connections the entry accepted since the claim.
    pub opened: u64,
    /// Connections whose stream was refused or could not be opened.
    pub failures: u64,
    /// `<code> <reason>` of the last failure.
    pub last_failure: Option<String>,
}

/// The question of `info` (no body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoRequest;

impl super::Call for InfoRequest {
    const SERVICE: super::Service = super::Service::Info;
    type Answer = BoxInfo;
}

/// The question of `health` (no body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthRequest;

impl super::Call for HealthRequest {
    const SERVICE: super::Service = super::Service::Health;
    type Answer = Health;
}

impl super::Call for Clock {
    const SERVICE: super::Service = super::Service::Clock;
    type Answer = super::Done;
}
