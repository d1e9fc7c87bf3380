//! The box network (DESIGN.md §6a): what a box with a network card reaches —
//! the public internet, and nothing of the host's — enforced on the host,
//! where root in the box cannot undo it.
//!
//! The mechanism: each box's card is QEMU's user networking (slirp), so
//! every connection a box makes is a socket the QEMU process opens on the
//! host. Every box's QEMU process runs as a uid of its own from the
//! installation's range (`jail.rs`, put into each domain as a DAC seclabel),
//! and one nftables table per installation (`nft.rs`) filters the host's
//! `output` hook for that range: IPv6 dropped, the host's own addresses dropped
//! (`fib daddr type local`: loopback, what slirp's 10.0.2.2 leads to, and
//! every address of the host), then the deny list (`policy.rs`: private,
//! CGNAT, link-local with the metadata services, multicast, reserved; the
//! operator's extra ranges; the host's attached networks, `routes.rs`), the
//! operator's exceptions, and the allow-list mode. Boxes share no network
//! with each other or with the host: there is no bridge, no tap, no IP
//! forwarding, no address to hand out, and slirp takes no connection in.
//! Chosen over a tap per box on a bridge with forward-chain rules, which
//! needs the host to route and NAT for boxes (a global `ip_forward`), an
//! address per box, port isolation between boxes, and rules that follow
//! each tap. What passes is counted per uid, so per box (`meter.rs`), for
//! the box's `internetEgressBytes`. DNS is not on the network at all: boxd
//! forwards through the box channel to the platform's resolvers
//! (`resolver.rs`).
//!
//! The table is put in place before the first box with a card starts, and
//! checked (and put back, with a warning) before each box starts or wakes
//! and every [`CHECK_EVERY`]; a box is refused when it cannot be. The check
//! compares the whole table with what psbx wrote (`nft.rs`), so a flushed
//! chain is put back like a deleted table. It polls rather than following
//! `nft monitor`: a monitor is one more long-lived process to keep alive and
//! to parse, and would still leave a window between an event and the
//! rewrite; one `nft -j list` every two seconds costs a few milliseconds.
//! The table stays while boxes of the installation run (a restarted psbx
//! finds it), and is kept checked while any domain of the installation has a
//! card, also after `boxes.network` was turned off (`host/mod.rs`); it is
//! removed when the last one has stopped ([`BoxNetwork::remove`]).

pub mod meter;
pub mod nft;
pub mod policy;
pub mod resolver;
pub mod routes;

use crate::jail::UidRange;
use policy::EgressPolicy;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the rules are checked while the server runs.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The box side of its card: QEMU's user network (libvirt's `<ip>` of a
/// `type='user'` interface), and what boxd reads on the kernel command line.
pub const GUEST_NETWORK: (std::net::Ipv4Addr, u8) = (std::net::Ipv4Addr::new(10, 0, 2, 0), 24);
const NIC_CMDLINE: &str = "psbx.net=10.0.2.15/24,10.0.2.2,1500";

#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("{0}")]
    NoNft(String),
    #[error("the box network rules could not be put in place: {0}")]
    Nft(String),
    #[error("{0}")]
    Setup(String),
}

/// The box network of one installation on the local libvirt host.
pub struct BoxNetwork {
    installation: String,
    table: String,
    uids: UidRange,
    policy: EgressPolicy,
    resolvers: Arc<Vec<SocketAddr>>,
    /// The script last applied (a changed host network changes it), and the
    /// table as nft listed it right after ([`nft::normalized`]).
    applied: Mutex<Option<(String, serde_json::Value)>>,
    /// Each box's bytes as last stored.
    pub meter: meter::Meter,
}

impl BoxNetwork {
    /// The network of `installation` on the libvirt host `uri` (which must be
    /// this machine's system instance: the rules are this machine's), for
    /// the QEMU processes of its boxes (`uids`), asking `resolvers` for
    /// boxes' names (none: the host's own).
    pub fn new(
        installation: &str,
        uri: &str,
        uids: UidRange,
        policy: EgressPolicy,
        resolvers: Option<Vec<SocketAddr>>,
    ) -> Result<Self, NetworkError> {
        if uri != "qemu:///system" {
            return Err(NetworkError::Setup(format!(
                "boxes.network needs the libvirt host to be this machine's qemu:///system (its rules are \
                 this machine's nftables), not {uri}: run psbx on that host, or set boxes.network = false"
            )));
        }
        let resolvers = match resolvers {
            Some(list) => list,
            None => resolver::from_resolv_conf(
                &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
            ),
        };
        if resolvers.is_empty() {
            return Err(NetworkError::Setup(
                "no resolver for boxes: /etc/resolv.conf names none; set boxes.egress.resolvers"
                    .into(),
            ));
        }
        Ok(Self {
            installation: installation.to_owned(),
            table: table_for(installation),
            uids,
            policy,
            resolvers: Arc::new(resolvers),
            applied: Mutex::new(None),
            meter: meter::Meter::default(),
        })
    }

    /// What boxd reads on the kernel command line: the card's settings, and
    /// the operator's `allow` ranges (`psbx.allow=`), which its own filter of
    /// private ranges lets through too.
    pub fn cmdline(&self) -> String {
        if self.policy.allow.is_empty() {
            return NIC_CMDLINE.to_owned();
        }
        let allow: Vec<String> = self.policy.allow.iter().map(ToString::to_string).collect();
        format!("{NIC_CMDLINE} psbx.allow={}", allow.join(","))
    }

    /// The nftables table (`inet <name>`).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The upstreams boxes' names are asked of.
    pub fn resolvers(&self) -> &[SocketAddr] {
        &self.resolvers
    }

    /// A DNS relay for one box.
    pub fn relay(&self) -> resolver::Relay {
        resolver::Relay::new(self.resolvers.clone())
    }

    /// Puts the rules in place, or back, or brings them up to date with the
    /// host's networks; blocking (runs nft). Returns what each box uid has
    /// sent since its counter began (`nft::egress`).
    pub fn ensure(&self) -> Result<Vec<(u32, u64)>, NetworkError> {
        let attached = routes::attached()
            .map_err(|e| NetworkError::Setup(format!("cannot read the host's routes: {e}")))?;
        let denied = self.policy.denied(&attached);
        let script = nft::Ruleset {
            table: &self.table,
            installation: &self.installation,
            uids: self.uids,
            denied: &denied,
            allowed: &self.policy.allow,
            only: &self.policy.only,
            snat: self.policy.snat,
        }
        .script();
        let mut applied = self
            .applied
            .lock()
            .map_err(|_| NetworkError::Setup("the box network's lock is poisoned".into()))?;
        if let Some((previous, written)) = applied.as_ref() {
            let now = nft::listed(&self.table)?;
            if *previous == script
                && let Some(now) = now.as_ref()
                && nft::same_rules(now, written)
            {
                return Ok(nft::egress(now));
            }
            if *previous == script {
                tracing::warn!(table = %self.table, "the box network rules were removed or changed on the host; putting them back");
            } else {
                tracing::info!(table = %self.table, "the host's networks changed; updating the box network rules");
            }
        }
        nft::apply(&script)?;
        let now = nft::listed(&self.table)?.ok_or_else(|| {
            NetworkError::Nft(format!(
                "the table {} is gone right after writing it",
                self.table
            ))
        })?;
        *applied = Some((script, nft::normalized(&now)));
        Ok(nft::egress(&now))
    }

    /// Starts the byte counter of `uid` again from zero: its box is new.
    pub fn forget(&self, uid: u32) -> Result<(), NetworkError> {
        nft::forget(&self.table, uid)
    }

    /// Removes the rules (the last box of the installation has stopped).
    pub fn remove(&self) -> Result<(), NetworkError> {
        nft::delete(&self.table)?;
        if let Ok(mut applied) = self.applied.lock() {
            *applied = None;
        }
        Ok(())
    }
}

/// The nftables table of an installation.
pub fn table_for(installation: &str) -> String {
    let name: String = installation
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("psbx_{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installations_get_their_own_table() {
        assert_eq!(table_for("inst_ab-c.d"), "psbx_inst_ab_c_d");
    }

    #[test]
    fn only_the_local_system_libvirt_is_accepted() {
        for uri in ["qemu+ssh://host/system", "qemu:///session"] {
            let Err(e) = BoxNetwork::new(
                "inst_x",
                uri,
                UidRange::of("inst_x"),
                EgressPolicy::default(),
                None,
            ) else {
                panic!("{uri} accepted");
            };
            assert!(e.to_string().contains("boxes.network = false"), "{e}");
        }
    }
}
