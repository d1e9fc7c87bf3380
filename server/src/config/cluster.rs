//! `[cluster]`: what a node needs to run beside others on one database
//! (DESIGN.md §8): the name of the host it supervises, where it listens for
//! its peers and the address they dial, and how long its host's lease lasts.
//! A one-node installation sets none of it.

use super::ConfigError;
use super::sections::between;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The name of the libvirt host this node supervises (its row in
    /// `psbx hosts list`); default: the machine's host name. Two nodes
    /// whose boxes share one libvirtd need names of their own. Letters,
    /// digits, `.`, `-` and `_`, at most 63.
    pub host: Option<String>,
    /// Where this node listens for other nodes (mutual TLS under the
    /// cluster's certificate); unset: no peer listener (one node).
    pub listen: Option<SocketAddr>,
    /// The `host:port` other nodes dial to reach `listen`; default: the
    /// address `listen` names, when it is not a wildcard.
    pub advertise: Option<String>,
    /// How long a host's lease lasts without a renewal (`"30s"`; 2s to 10m).
    /// A node that cannot renew it for this long stops acting on its boxes,
    /// and other nodes answer for them with 503 `host_unavailable`.
    pub lease: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            host: None,
            listen: None,
            advertise: None,
            lease: "30s".to_owned(),
        }
    }
}

impl ClusterConfig {
    /// The host's name, checked: `cluster.host`, else the machine's name.
    pub fn host_name(&self) -> Result<String, ConfigError> {
        let name = match &self.host {
            Some(name) => name.clone(),
            None => nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "localhost".to_owned()),
        };
        let fine = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if fine {
            Ok(name)
        } else {
            Err(ConfigError::Invalid(format!(
                "cluster.host {name:?} must be 1 to 63 letters, digits, '.', '-' or '_' (set \
                 cluster.host when the machine's own name is not)"
            )))
        }
    }

    /// The lease's time, checked.
    pub fn lease(&self) -> Result<Duration, ConfigError> {
        between("cluster.lease", &self.lease, (2, "2s"), (600, "10m"))
    }

    /// The address peers dial: `advertise`, else `listen` when it names one
    /// interface. `None` without a peer listener.
    pub fn advertised(&self) -> Result<Option<String>, ConfigError> {
        let Some(listen) = self.listen else {
            return match &self.advertise {
                Some(_) => Err(ConfigError::Invalid(
                    "cluster.advertise is set but cluster.listen is not: set the address this \
                     node listens for other nodes on"
                        .to_owned(),
                )),
                None => Ok(None),
            };
        };
        match &self.advertise {
            Some(advertise) => advertise
                .parse::<psbx_wire::endpoint::Endpoint>()
                .map(|_| Some(advertise.clone()))
                .map_err(|e| {
                    ConfigError::Invalid(format!(
                        "cluster.advertise {advertise:?} is not a host:port: {e}"
                    ))
                }),
            None if listen.ip().is_unspecified() => Err(ConfigError::Invalid(format!(
                "cluster.listen {listen} listens on every address: set cluster.advertise to the \
                 host:port other nodes reach this one at"
            ))),
            None => Ok(Some(listen.to_string())),
        }
    }
}
