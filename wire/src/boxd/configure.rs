//! `configure` and `wire`: what the claim pushes to boxd (the account's
//! variables, the settings files, the environment's addresses, the AWS role)
//! and the box's [`Wiring`] (declared services and links), which `wire`
//! replaces later. boxd's side: `boxd/src/services/{configure,wire}.rs`.

use super::BoxAws;
use crate::Endpoint;
use serde::{Deserialize, Serialize};

/// Account data pushed at claim time: environment variables of every command.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configure {
    pub env: Vec<(String, String)>,
    /// Files written at claim (the environment's settings files), under
    /// `/work/.sbx/`, readable by their owner only.
    #[serde(default)]
    pub files: Vec<ConfigFile>,
    /// Every address of the box's environment (at most 200): boxd gives each
    /// host name an address of its own and opens an entry per address, whose
    /// connections go out as `env:<host>:<port>` streams it opens.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// The services declared in the box and its links (empty from a server
    /// that predates them).
    #[serde(default)]
    pub wiring: Wiring,
    /// The environment's AWS role, when it names one: boxd serves its
    /// credentials and adds [`BoxAws::variables`] to every command.
    #[serde(default)]
    pub aws: Option<BoxAws>,
}

/// What the box runs itself and which names lead to other boxes: set at
/// claim ([`Configure::wiring`]) and replaced by [`super::Service::Wire`]. A host
/// here is lower-case; a declared host:port wins over an environment address
/// of the same host:port, a link over both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Wiring {
    /// Declared host:port pairs and where their connections go.
    #[serde(default)]
    pub services: Vec<Declared>,
    /// Declared names without a port: they resolve to the box's own address
    /// for them, and every port stays in the box.
    #[serde(default)]
    pub names: Vec<String>,
    /// Private ranges whose port leads to a port in the box (fixed at claim).
    #[serde(default)]
    pub ranges: Vec<DeclaredRange>,
    /// host:port pairs linked to another box: connections go out as
    /// `link:<host>:<port>` streams.
    #[serde(default)]
    pub links: Vec<Endpoint>,
    /// Where services in external mode forward HTTP to.
    #[serde(default)]
    pub external_base_url: Option<String>,
}

/// A declared host:port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Declared {
    pub host: String,
    pub port: u16,
    /// The port the box's process listens on (box mode).
    pub target_port: u16,
    pub mode: WireMode,
}

/// Where a declared service's connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireMode {
    /// To the box's own process on the target port (boxd does not hold the
    /// port).
    Box,
    /// boxd's HTTP proxy to the external base URL.
    External,
}

impl WireMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Box => "box",
            Self::External => "external",
        }
    }
}

/// A declared private range: connections to any address in it on `port`
/// lead to the box's `target_port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredRange {
    /// `a.b.c.d/n`, with no host bits set.
    pub range: String,
    pub port: u16,
    pub target_port: u16,
}

impl Wiring {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.names.is_empty()
            && self.ranges.is_empty()
            && self.links.is_empty()
    }
}

/// A file boxd writes: a path under `/work/.sbx/` and its contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigFile {
    pub path: String,
    pub contents: String,
}

impl super::Call for Configure {
    const SERVICE: super::Service = super::Service::Configure;
    type Answer = super::Done;
}

/// `wire`: the box's wiring replaced.
impl super::Call for Wiring {
    const SERVICE: super::Service = super::Service::Wire;
    type Answer = super::Done;
}
