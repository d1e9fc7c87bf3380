//! One libvirt host: its connection (re-opened after libvirtd restarts) and the
//! lifecycle calls on box domains. Every method blocks.

use crate::state::{self, DomainStatus};
use crate::{DiskKey, DomainSpec, LibvirtError};
use std::sync::{Once, RwLock};
use virt::connect::Connect;
use virt::domain::Domain;
use virt::sys;

/// Every domain psbx owns is named `psbx-<box id>`; others are left alone.
pub const DOMAIN_PREFIX: &str = "psbx-";

/// A psbx domain as libvirt lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainInfo {
    pub name: String,
    pub status: DomainStatus,
    /// The installation recorded in its metadata (None: not made by psbx).
    pub owner: Option<String>,
}

/// What the host has, for capacity decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostResources {
    pub cpus: u32,
    pub memory_mib: u64,
}

/// A connection to one libvirt URI. libvirt connections are thread-safe, so
/// calls from several threads run at once; the lock only guards replacing a
/// dead connection.
pub struct Host {
    uri: String,
    conn: RwLock<Option<Connect>>,
}

static SILENCE: Once = Once::new();

impl Host {
    /// Connects to `uri` (e.g. `qemu:///system`).
    pub fn connect(uri: &str) -> Result<Self, LibvirtError> {
        // libvirt prints every error to stderr by default; ours go through
        // LibvirtError instead.
        SILENCE.call_once(virt::error::clear_error_callback);
        let host = Self {
            uri: uri.to_owned(),
            conn: RwLock::new(None),
        };
        host.with_conn(|_| Ok(()))?;
        Ok(host)
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Runs `f` on a live connection, opening one first if there is none or the
    /// last one died (libvirtd restarted). A call that fails because the
    /// connection dropped is retried once on a new connection.
    fn with_conn<T>(
        &self,
        f: impl Fn(&Connect) -> Result<T, LibvirtError>,
    ) -> Result<T, LibvirtError> {
        for attempt in 0..2 {
            let conn = self.live_connection(attempt > 0)?;
            match f(&conn) {
                // Whatever libvirt called the failure, a dead connection is
                // worth one retry on a new one (libvirtd restarted).
                Err(e)
                    if attempt == 0
                        && (e.is_disconnected() || !conn.is_alive().unwrap_or(false)) =>
                {
                    tracing::warn!(uri = %self.uri, error = %e, "libvirt connection lost; reconnecting");
                }
                other => return other,
            }
        }
        Err(LibvirtError::Disconnected(format!(
            "libvirt at {} does not answer",
            self.uri
        )))
    }

    /// A clone of the current connection (a new reference on it), opening a new
    /// one when there is none, it is dead, or `renew` asks for it.
    fn live_connection(&self, renew: bool) -> Result<Connect, LibvirtError> {
        let poisoned = || LibvirtError::Call("the libvirt connection lock is poisoned".into());
        if !renew {
            let current = self.conn.read().map_err(|_| poisoned())?;
            if let Some(conn) = current.as_ref().filter(|c| c.is_alive().unwrap_or(false)) {
                return Ok(conn.clone());
            }
        }
        let mut slot = self.conn.write().map_err(|_| poisoned())?;
        if !renew && let Some(conn) = slot.as_ref().filter(|c| c.is_alive().unwrap_or(false)) {
            return Ok(conn.clone());
        }
        let conn = Connect::open(Some(&self.uri)).map_err(|e| {
            LibvirtError::Disconnected(format!("cannot connect to {}: {}", self.uri, e.message()))
        })?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn domain(conn: &Connect, name: &str) -> Result<Domain, LibvirtError> {
        conn.lookup_domain_by_name(name)
            .map_err(|e| LibvirtError::from_virt(&e, Some(name)))
    }

    /// Defines a persistent domain (persistent: managed save needs it).
    pub fn define(&self, spec: &DomainSpec) -> Result<(), LibvirtError> {
        let xml = spec.to_xml();
        self.with_conn(|c| {
            c.define_domain_xml(&xml)
                .map(drop)
                .map_err(|e| LibvirtError::from_virt(&e, Some(&spec.name)))
        })
    }

    /// Starts a defined domain; one with a managed save resumes from it (thaw).
    pub fn start(&self, name: &str) -> Result<(), LibvirtError> {
        self.on_domain(name, |d| d.create())
    }

    /// Pauses the vCPUs; memory stays in the QEMU process.
    pub fn suspend(&self, name: &str) -> Result<(), LibvirtError> {
        self.on_domain(name, |d| d.suspend())
    }

    pub fn resume(&self, name: &str) -> Result<(), LibvirtError> {
        self.on_domain(name, |d| d.resume())
    }

    /// Saves memory to disk and stops the domain (freeze); `start` restores it.
    pub fn managed_save(&self, name: &str) -> Result<(), LibvirtError> {
        self.on_domain(name, |d| d.managed_save(0))
    }

    /// Stops the domain at once, if it runs. A domain that is gone is fine.
    pub fn destroy(&self, name: &str) -> Result<(), LibvirtError> {
        match self.status(name)? {
            None | Some(DomainStatus::ShutOff { .. }) => Ok(()),
            Some(_) => match self.on_domain(name, |d| d.destroy()) {
                Err(LibvirtError::NoDomain(_)) => Ok(()),
                other => other,
            },
        }
    }

    /// The resident memory of a running (or paused) domain's QEMU process, in
    /// MiB: what it really takes of the host. `None` when it does not run.
    pub fn memory_rss_mib(&self, name: &str) -> Result<Option<u64>, LibvirtError> {
        self.with_conn(|c| {
            let d = match Self::domain(c, name) {
                Ok(d) => d,
                Err(LibvirtError::NoDomain(_)) => return Ok(None),
                Err(e) => return Err(e),
            };
            if !d
                .is_active()
                .map_err(|e| LibvirtError::from_virt(&e, Some(name)))?
            {
                return Ok(None);
            }
            let stats = d
                .memory_stats(0)
                .map_err(|e| LibvirtError::from_virt(&e, Some(name)))?;
            Ok(stats
                .iter()
                .find(|s| s.tag == sys::VIR_DOMAIN_MEMORY_STAT_RSS)
                .map(|s| s.val / 1024))
        })
    }

    /// Destroys and undefines the domain with its managed save. A domain that
    /// is gone is fine. Disk files are the caller's to delete.
    pub fn remove(&self, name: &str) -> Result<(), LibvirtError> {
        self.destroy(name)?;
        let flags = sys::VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
            | sys::VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
            | sys::VIR_DOMAIN_UNDEFINE_NVRAM;
        match self.on_domain(name, |d| d.undefine_flags(flags)) {
            Err(LibvirtError::NoDomain(_)) => Ok(()),
            other => other,
        }
    }

    /// The domain's status, or `None` when libvirt has no such domain.
    pub fn status(&self, name: &str) -> Result<Option<DomainStatus>, LibvirtError> {
        self.with_conn(|c| match Self::domain(c, name) {
            Ok(d) => Self::status_of(&d, name).map(Some),
            Err(LibvirtError::NoDomain(_)) => Ok(None),
            Err(e) => Err(e),
        })
    }

    fn status_of(d: &Domain, name: &str) -> Result<DomainStatus, LibvirtError> {
        let (state, _) = d
            .state()
            .map_err(|e| LibvirtError::from_virt(&e, Some(name)))?;
        let saved = d
            .has_managed_save(0)
            .map_err(|e| LibvirtError::from_virt(&e, Some(name)))?;
        Ok(state::map(
            state.unwrap_or(virt::domain::DomainState::NoState),
            saved,
        ))
    }

    /// Every `psbx-` domain, defined or running.
    pub fn list(&self) -> Result<Vec<DomainInfo>, LibvirtError> {
        self.with_conn(|c| {
            let domains = c
                .list_all_domains(0)
                .map_err(|e| LibvirtError::from_virt(&e, None))?;
            let mut out = Vec::new();
            for d in domains {
                let name = d.name().map_err(|e| LibvirtError::from_virt(&e, None))?;
                if !name.starts_with(DOMAIN_PREFIX) {
                    continue;
                }
                let owner = d
                    .metadata(
                        sys::VIR_DOMAIN_METADATA_ELEMENT as i32,
                        Some(crate::METADATA_URI),
                        0,
                    )
                    .ok()
                    .and_then(|xml| crate::xml::owner_of(&xml));
                match Self::status_of(&d, &name) {
                    Ok(status) => out.push(DomainInfo {
                        name,
                        status,
                        owner,
                    }),
                    // Undefined between the listing and the query.
                    Err(LibvirtError::NoDomain(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        })
    }

    /// CPUs and memory of the host.
    pub fn resources(&self) -> Result<HostResources, LibvirtError> {
        self.with_conn(|c| {
            let info = c
                .node_info()
                .map_err(|e| LibvirtError::from_virt(&e, None))?;
            Ok(HostResources {
                cpus: info.cpus,
                memory_mib: info.memory / 1024,
            })
        })
    }

    /// Whether libvirt offers the `kvm` domain type on this host.
    pub fn offers_kvm(&self) -> Result<bool, LibvirtError> {
        self.with_conn(|c| {
            let caps = c
                .capabilities()
                .map_err(|e| LibvirtError::from_virt(&e, None))?;
            Ok(caps.contains("<domain type='kvm'"))
        })
    }

    /// The security drivers libvirt confines QEMU with on this host (its
    /// capabilities' `<secmodel>`s: `dac`, and `apparmor` or `selinux` where
    /// one is active; `none` is left out).
    pub fn security_models(&self) -> Result<Vec<String>, LibvirtError> {
        self.with_conn(|c| {
            let caps = c
                .capabilities()
                .map_err(|e| LibvirtError::from_virt(&e, None))?;
            Ok(security_models(&caps))
        })
    }

    /// Defines (or replaces) the libvirt secret `uuid` holding a box disk's
    /// key, for QEMU to open the disk with. Ephemeral (never written to
    /// libvirt's disk: gone when libvirtd restarts, so psbx defines it again
    /// before every start and restore) and private (libvirt gives its value
    /// to QEMU only, never to a client).
    pub fn set_disk_secret(&self, uuid: &str, key: &DiskKey) -> Result<(), LibvirtError> {
        let xml = format!(
            "<secret ephemeral='yes' private='yes'><uuid>{uuid}</uuid>\
             <description>psbx box disk key</description></secret>"
        );
        self.with_conn(|c| {
            let secret = c
                .define_secret_xml(&xml, 0)
                .map_err(|e| LibvirtError::from_virt(&e, None))?;
            secret
                .set_value(key.as_bytes(), 0)
                .map_err(|e| LibvirtError::from_virt(&e, None))
        })
    }

    /// Undefines the secret `uuid`; one that is gone is fine.
    pub fn remove_disk_secret(&self, uuid: &str) -> Result<(), LibvirtError> {
        self.with_conn(|c| match c.lookup_secret_by_uuid_string(uuid) {
            Ok(secret) => secret
                .undefine()
                .map_err(|e| LibvirtError::from_virt(&e, None)),
            Err(e) if e.code().known() == Some(virt::error::ErrorNumber::NoSecret) => Ok(()),
            Err(e) => Err(LibvirtError::from_virt(&e, None)),
        })
    }

    /// Starts a transient domain (gone once destroyed): the KVM probe.
    pub(crate) fn create_transient(&self, spec: &DomainSpec) -> Result<(), LibvirtError> {
        let xml = spec.to_xml();
        self.with_conn(|c| {
            c.create_domain_xml(&xml, 0)
                .map(drop)
                .map_err(|e| LibvirtError::from_virt(&e, Some(&spec.name)))
        })
    }

    fn on_domain(
        &self,
        name: &str,
        f: impl Fn(&Domain) -> Result<(), virt::error::Error>,
    ) -> Result<(), LibvirtError> {
        self.with_conn(|c| {
            let d = Self::domain(c, name)?;
            f(&d).map_err(|e| LibvirtError::from_virt(&e, Some(name)))
        })
    }
}

/// The `<host><secmodel><model>`s of a capabilities document, but `none`.
fn security_models(caps: &str) -> Vec<String> {
    let Ok(doc) = roxmltree::Document::parse(caps) else {
        return Vec::new();
    };
    doc.descendants()
        .filter(|n| n.has_tag_name("secmodel"))
        .filter(|n| n.parent().is_some_and(|p| p.has_tag_name("host")))
        .filter_map(|n| n.children().find(|c| c.has_tag_name("model"))?.text())
        .map(str::trim)
        .filter(|m| *m != "none")
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn security_models_are_read_from_the_hosts_capabilities() {
        let caps = "<capabilities><host><cpu/><secmodel><model>none</model><doi>0</doi></secmodel>\
                    <secmodel><model>dac</model><doi>0</doi></secmodel></host>\
                    <guest><secmodel><model>selinux</model></secmodel></guest></capabilities>";
        assert_eq!(super::security_models(caps), vec!["dac"]);
        let caps = "<capabilities><host><secmodel><model>apparmor</model></secmodel>\
                    <secmodel><model>dac</model></secmodel></host></capabilities>";
        assert_eq!(super::security_models(caps), vec!["apparmor", "dac"]);
    }
}
