//! The box network (DESIGN.md §6): what a box with a network card reaches —
//! the public internet, and nothing of the host's — enforced on the host,
//! where root in the box cannot undo it.
//!
//! The mechanism: each box's card is QEMU's user networking (slirp), so
//! every connection a box makes is a socket the QEMU process opens on the
//! host. Every QEMU process of one installation runs as a uid of its own
//! ([`BoxNetwork::run_as`], put into each domain as a DAC seclabel), and one
//! nftables table per installation (`nft.rs`) filters the host's `output`
//! hook for that uid: IPv6 dropped, the host's own addresses dropped
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
//! each tap. DNS is not on the network at all: boxd forwards through the box
//! channel to the platform's resolvers (`resolver.rs`).
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

pub mod nft;
pub mod policy;
pub mod resolver;
pub mod routes;

use policy::EgressPolicy;
use sha2::Digest;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the rules are checked while the server runs.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The box side of its card: QEMU's user network (libvirt's `<ip>` of a
/// `type='user'` interface), and what boxd reads on the kernel command line.
pub const GUEST_NETWORK: (std::net::Ipv4Addr, u8) = (std::net::Ipv4Addr::new(10, 0, 2, 0), 24);
const NIC_CMDLINE: &str = "psbx.net=10.0.2.15/24,10.0.2.2,1500";

/// libvirt's QEMU state directory: the group that owns it is the group QEMU
/// needs to run at all (it keeps each domain's files below it).
const QEMU_STATE_DIR: &str = "/var/lib/libvirt/qemu";
/// The uids psbx gives installations: 0x7000_0000 plus 24 bits of the
/// installation id's hash, far above any uid a system hands out.
const UID_BASE: u32 = 0x7000_0000;

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
    uid: u32,
    gid: u32,
    policy: EgressPolicy,
    resolvers: Arc<Vec<SocketAddr>>,
    /// The script last applied (a changed host network changes it), and the
    /// table as nft listed it right after ([`nft::snapshot`]).
    applied: Mutex<Option<(String, serde_json::Value)>>,
}

impl BoxNetwork {
    /// The network of `installation` on the libvirt host `uri` (which must be
    /// this machine's system instance: the rules are this machine's), asking
    /// `resolvers` for boxes' names (none: the host's own).
    pub fn new(
        installation: &str,
        uri: &str,
        policy: EgressPolicy,
        resolvers: Option<Vec<SocketAddr>>,
    ) -> Result<Self, NetworkError> {
        if uri != "qemu:///system" {
            return Err(NetworkError::Setup(format!(
                "boxes.network needs the libvirt host to be this machine's qemu:///system (its rules are \
                 this machine's nftables), not {uri}: run psbx on that host, or set boxes.network = false"
            )));
        }
        let gid = std::fs::metadata(QEMU_STATE_DIR)
            .map_err(|e| {
                NetworkError::Setup(format!(
                    "cannot read {QEMU_STATE_DIR} ({e}): is libvirt's QEMU driver installed?"
                ))
            })?
            .gid();
        let uid = uid_for(installation);
        if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            return Err(NetworkError::Setup(format!(
                "uid {uid}, which psbx runs the boxes of {installation} as, belongs to the user {}: \
                 psbx needs it for itself",
                user.name
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
            uid,
            gid,
            policy,
            resolvers: Arc::new(resolvers),
            applied: Mutex::new(None),
        })
    }

    /// The uid and gid every QEMU process of this installation runs as.
    pub fn run_as(&self) -> (u32, u32) {
        (self.uid, self.gid)
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
    /// host's networks; blocking (runs nft).
    pub fn ensure(&self) -> Result<(), NetworkError> {
        let attached = routes::attached()
            .map_err(|e| NetworkError::Setup(format!("cannot read the host's routes: {e}")))?;
        let denied = self.policy.denied(&attached);
        let script = nft::Ruleset {
            table: &self.table,
            installation: &self.installation,
            uid: self.uid,
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
            if *previous == script && nft::installed(&self.table, written)? {
                return Ok(());
            }
            if *previous == script {
                tracing::warn!(table = %self.table, "the box network rules were removed or changed on the host; putting them back");
            } else {
                tracing::info!(table = %self.table, "the host's networks changed; updating the box network rules");
            }
        }
        nft::apply(&script)?;
        let written = nft::snapshot(&self.table)?.ok_or_else(|| {
            NetworkError::Nft(format!(
                "the table {} is gone right after writing it",
                self.table
            ))
        })?;
        *applied = Some((script, written));
        Ok(())
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

/// The uid of an installation's QEMU processes.
pub fn uid_for(installation: &str) -> u32 {
    let hash = sha2::Sha256::digest(installation.as_bytes());
    UID_BASE | (u32::from_be_bytes([0, hash[0], hash[1], hash[2]]))
}

/// Whether any process runs as `uid` now (read from `/proc`): a QEMU
/// process of a box with a card, for an installation's box uid.
pub fn uid_runs(uid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| {
            // `Uid:` real, effective, saved, file system (the directory's
            // owner is root for a process that is not dumpable).
            std::fs::read_to_string(e.path().join("status")).is_ok_and(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|ids| ids.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(uid)
            })
        })
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
    fn installations_get_their_own_uid_and_table() {
        let (a, b) = (uid_for("inst_aaaa"), uid_for("inst_bbbb"));
        assert_ne!(a, b);
        for uid in [a, b] {
            assert!((UID_BASE..UID_BASE + (1 << 24)).contains(&uid), "{uid}");
        }
        assert_eq!(uid_for("inst_aaaa"), a, "stable across restarts");
        assert_eq!(table_for("inst_ab-c.d"), "psbx_inst_ab_c_d");
    }

    #[test]
    fn only_the_local_system_libvirt_is_accepted() {
        for uri in ["qemu+ssh://host/system", "qemu:///session"] {
            let Err(e) = BoxNetwork::new("inst_x", uri, EgressPolicy::default(), None) else {
                panic!("{uri} accepted");
            };
            assert!(e.to_string().contains("boxes.network = false"), "{e}");
        }
    }
}
