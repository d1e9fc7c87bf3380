//! What a box was started with beyond its size and times: its services (and
//! how each is wired), its links to other boxes, the names of the secrets it
//! received, the environment it was plugged into and what that environment
//! gave it. Stored with the box as jsonb (`boxes.spec`);
//! the store converts at its boundary, everything else reads these fields.
//!
//! What an environment gave a box (`Claimed` and its parts, the `Notable`
//! settings) is defined here, not beside the claim that makes it
//! (`environments/claim.rs`): it is part of the stored spec, so the store
//! and whatever reads a box needs it without the environments façade above
//! them.

use psbx_wire::Endpoint;
use serde::{Deserialize, Serialize};

/// A box's spec. Every field has a default, so a pooled box's `{}` and the
/// specs of older rows read as they were written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxSpec {
    /// The services the caller declared (at start and with `wire`), checked
    /// and normalised (`crate::wiring`).
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
    /// Names in this box that lead to a port of another box of the account.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkSpec>,
    /// The external base URL the caller gave at start (else the
    /// environment's, `claimed.external_base_url`, is the one in effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_base_url: Option<String>,
    /// Names of the account's secrets the box received as environment variables.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The only ports of the box its URL reaches (the ports dialed in the URL,
    /// the bare URL counting as the one it serves); none: every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_ports: Option<Vec<u16>>,
    /// The environment the caller asked for, by name.
    #[serde(default)]
    pub environment: Option<String>,
    /// What that environment gave the box: a summary without secret values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<Claimed>,
    /// The values masked in the box's output as it received them (its
    /// secrets' values and the environment's secret-looking ones), sealed with
    /// the vault at the start, so a restarted server masks what the box holds
    /// even after a secret was changed or deleted. Older rows call it
    /// `environmentMask` (then it holds the environment's values only).
    #[serde(
        default,
        alias = "environmentMask",
        skip_serializing_if = "Option::is_none"
    )]
    pub mask: Option<SealedMask>,
}

/// A service a box runs, as its caller described it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The service's name, or the internal host name callers use for it.
    pub name: String,
    /// The port callers dial.
    #[serde(default)]
    pub port: Option<u16>,
    /// The port the process in the box listens on, when not `port`.
    #[serde(default)]
    pub target_port: Option<u16>,
    /// A published version to run instead of a process of the caller's own.
    #[serde(default)]
    pub version: Option<String>,
    /// Where callers' connections go: the box's process or the external
    /// base URL (none for a name without a port, and for older rows: box).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

/// Where a declared service's connections go (`box` or `external`): the
/// same values boxd is told.
pub use psbx_wire::boxd::WireMode as Mode;

/// A name:port in this box that leads to `target_port` of box `box_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkSpec {
    pub name: String,
    pub port: u16,
    pub box_id: String,
    pub target_port: u16,
}

/// The summary of a claim, as stored in the box's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claimed {
    pub name: String,
    pub external_base_url: Option<String>,
    pub connections: Vec<ClaimedConnection>,
    pub services: Vec<ClaimedService>,
    /// The environment's AWS role at the claim (`box_role`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<ClaimedAws>,
}

/// The AWS role a box took from its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedAws {
    pub role_arn: String,
    pub region: Option<String>,
    /// The id of the environment it came from (`box_role` compares it: an
    /// environment deleted and made again under the same name is another
    /// one); none in boxes started before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedConnection {
    pub name: String,
    /// The addresses that go through it (an address on two connections goes
    /// through the one whose name sorts first).
    pub addresses: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedService {
    pub name: String,
    pub keys_count: usize,
    pub files: ServiceFiles,
    pub notable: Notable,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceFiles {
    pub env: String,
    pub sh: String,
}

/// The three lists, as `sandbox_start` and `sandbox_status` show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notable {
    pub connection: Vec<String>,
    pub mode: Vec<NotableValue>,
    pub permission: Vec<String>,
}

/// A mode setting with dev's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotableValue {
    pub name: String,
    pub value: String,
}

/// Values sealed by the vault for one account (hex-encoded nonce and ciphertext).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedMask {
    pub nonce: String,
    pub ciphertext: String,
}

impl BoxSpec {
    /// The spec of a box about to be started for a caller.
    pub fn new(
        services: Vec<ServiceSpec>,
        secrets: Vec<String>,
        environment: Option<String>,
    ) -> Self {
        Self {
            services,
            secrets,
            environment,
            ..Self::default()
        }
    }

    /// The external base URL in effect: the start's own, else the
    /// environment's.
    pub fn external_base_url(&self) -> Option<&str> {
        self.external_base_url.as_deref().or_else(|| {
            self.claimed
                .as_ref()
                .and_then(|c| c.external_base_url.as_deref())
        })
    }

    /// The spec as stored.
    pub fn to_json(&self) -> serde_json::Value {
        // A struct of strings, numbers and lists always serialises.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// A stored spec, or what is wrong with it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_as_stored_before_read_back() {
        assert_eq!(
            BoxSpec::from_json(serde_json::json!({})).unwrap(),
            BoxSpec::default()
        );
        let stored = serde_json::json!({
            "services": [{"name": "api", "port": 80, "targetPort": 8080, "version": null}],
            "secrets": ["TOKEN"],
            "environment": null,
        });
        let spec = BoxSpec::from_json(stored).unwrap();
        assert_eq!(spec.secrets, ["TOKEN"]);
        assert_eq!(spec.services[0].target_port, Some(8080));
        assert_eq!(spec.environment, None);
        assert_eq!(BoxSpec::from_json(spec.to_json()).unwrap(), spec);
    }

    #[test]
    fn a_spec_of_the_wrong_shape_is_an_error() {
        assert!(BoxSpec::from_json(serde_json::json!({"secrets": "TOKEN"})).is_err());
    }
}
