//! The machine a host's boxes run on, and each box's lifecycle steps on it:
//! the hypervisor, the store, the settings, the chosen accelerator, where box
//! files live, the box network's rules and uids, the capacity ledger
//! (`ledger.rs`, its arithmetic in `capacity.rs`), each box's disk key
//! (`disk_key.rs`), and the steps every start, thaw, freeze, stop and
//! adoption takes, written once: `boot`, `transition`,
//! `await_hello_and_run`, `fail_box`, `teardown`.
//!
//! It sits below both actors, and names neither: the HostSupervisor
//! (`host/`) and each BoxActor (`box_actor/`) hold an `Arc<Machine>` and
//! call these steps; what needs the live actors (the registry, the switch of
//! the streams boxd opens, a box's links to other boxes) is the host's
//! (`host/registry.rs`, `host/switch.rs`, `host/links.rs`). That keeps one
//! owner for a box's lifecycle, its actor, and one place for how each step
//! is done.

pub mod capacity;
pub mod disk_key;
pub mod lease;
pub mod ledger;
pub mod meminfo;

use crate::blocking::blocking;
use crate::box_state::BoxState;
use crate::boxd_link::BoxdLink;
use crate::boxnet::{self, BoxNetwork};
use crate::error::{BoxError, io_error};
use crate::hypervisor::Hypervisor;
use crate::ids::BoxId;
use crate::image::Image;
use crate::jail::Jails;
use crate::secrets::Secrets;
use crate::settings::BoxSettings;
use crate::store::{BoxRecord, Store, Transition};
use capacity::{Ledger, Limits};
pub use lease::HostLease;
use psbx_libvirt::{Accel, Boot, Controllers, Disk, DomainSpec, Nic, Tune};
use psbx_wire::boxd::BoxInfo;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One host's machine, shared by its supervisor and its box actors.
pub struct Machine {
    pub host: Arc<dyn Hypervisor>,
    pub store: Store,
    pub settings: BoxSettings,
    pub accel: Accel,
    pub server_id: crate::ids::ServerId,
    /// The host's name: its row in `hosts`, the `host` of its boxes' rows.
    pub name: String,
    /// The host's mark (`hosts.owner`), written into every domain's
    /// metadata; it also names the box network's table and picks the uid
    /// range, so hosts sharing one libvirtd never touch each other's boxes.
    pub owner: String,
    /// Whether this node holds the host's lease (`lease.rs`).
    pub lease: Arc<HostLease>,
    /// The account secrets: the vault that seals each box's disk key.
    pub secrets: Secrets,
    /// The host's rules for boxes' network cards (none: boxes have no card).
    pub network: Option<Arc<BoxNetwork>>,
    /// The uid each box's QEMU runs as (none: libvirt's own user, on a host
    /// other than this machine's system instance).
    pub jails: Option<Arc<Jails>>,
    /// The capacity ledger (`ledger.rs`).
    capacity: Mutex<Ledger>,
}

/// MiB, in bytes.
const MIB: u64 = 1024 * 1024;

/// What start-up learned about the host and this installation.
pub struct HostFacts {
    pub accel: Accel,
    pub server_id: crate::ids::ServerId,
    pub name: String,
    pub owner: String,
    pub lease: Arc<HostLease>,
    pub cpus: u32,
    pub memory_mib: u64,
    pub network: Option<Arc<BoxNetwork>>,
    pub jails: Option<Arc<Jails>>,
}

impl Machine {
    pub fn new(
        host: Arc<dyn Hypervisor>,
        store: Store,
        settings: BoxSettings,
        facts: HostFacts,
        secrets: Secrets,
    ) -> Arc<Self> {
        let capacity = Ledger::new(Limits {
            cpus: facts.cpus,
            total_mib: facts.memory_mib,
            cpu_overcommit: settings.cpu_overcommit,
            memory_overcommit: settings.memory_overcommit,
            memory_margin_mib: settings.memory_margin_mib,
        });
        Arc::new(Self {
            host,
            store,
            settings,
            accel: facts.accel,
            server_id: facts.server_id,
            name: facts.name,
            owner: facts.owner,
            lease: facts.lease,
            secrets,
            network: facts.network,
            jails: facts.jails,
            capacity: Mutex::new(capacity),
        })
    }

    pub fn box_dir(&self, id: &BoxId) -> PathBuf {
        self.settings.boxes_dir.join(id.as_str())
    }

    pub fn domain_name(id: &BoxId) -> String {
        format!("{}{}", psbx_libvirt::DOMAIN_PREFIX, id)
    }

    pub fn socket(&self, id: &BoxId) -> PathBuf {
        self.box_dir(id).join("boxd.sock")
    }

    pub fn image(&self, name: &str) -> Result<Image, BoxError> {
        Image::load(&self.settings.images_dir, name).map_err(|e| BoxError::NoHost(e.to_string()))
    }

    /// The domain of a box record, its QEMU run as `run_as` (the box's uid
    /// and QEMU's group; none: libvirt's user): with a network card (which
    /// the host's rules filter by that uid) when the box network is on.
    pub fn domain_spec(
        &self,
        record: &BoxRecord,
        image: &Image,
        run_as: Option<(u32, u32)>,
    ) -> DomainSpec {
        let dir = self.box_dir(&record.id);
        let (nic, cmdline) = match &self.network {
            Some(network) => (
                Some(Nic::User {
                    network: boxnet::GUEST_NETWORK.0,
                    prefix: boxnet::GUEST_NETWORK.1,
                }),
                format!("{} {}", image.cmdline, network.cmdline()),
            ),
            None => (None, image.cmdline.clone()),
        };
        DomainSpec {
            name: Self::domain_name(&record.id),
            accel: self.accel,
            vcpus: record.vcpus,
            memory_mib: record.memory_mib,
            tune: Some(Tune::for_units(
                record.size,
                record.memory_mib,
                Controllers::here(),
            )),
            boot: Boot::Kernel {
                kernel: image.kernel.clone(),
                initrd: image.initrd.clone(),
                cmdline,
            },
            disk: Some(Disk {
                overlay: dir.join("disk.qcow2"),
                base: image.disk.clone(),
                write_bytes_sec: self
                    .settings
                    .unit_write_mib_per_sec
                    .saturating_mul(u64::from(record.size))
                    .saturating_mul(MIB),
                write_iops: self
                    .settings
                    .unit_write_iops
                    .saturating_mul(u64::from(record.size)),
                key_secret: self
                    .settings
                    .encrypt_disks
                    .then(|| disk_key::secret_uuid(&record.id)),
            }),
            channel_socket: dir.join("boxd.sock"),
            console_log: Some(dir.join("console.log")),
            nic,
            run_as,
            owner: self.owner.clone(),
        }
    }

    /// Checks the host's rules for boxes' cards are in place (putting them
    /// back if they are not) before a box starts or wakes; a box is not
    /// started without them.
    pub fn network_ready(&self) -> Result<(), BoxError> {
        match &self.network {
            Some(network) => network.ensure().map(drop).map_err(BoxError::from),
            None => Ok(()),
        }
    }

    /// Removes a box's domain (with its managed save) and its files.
    pub fn teardown(&self, id: &BoxId) -> Result<(), BoxError> {
        teardown(self.host.as_ref(), &self.settings.boxes_dir, id)
    }

    /// Moves the stored state of `record` (compare-and-set from its state);
    /// `None` from the store means someone else moved it first, which is
    /// reported as an internal error.
    pub async fn transition(
        &self,
        record: &BoxRecord,
        to: BoxState,
        detail: Transition,
    ) -> Result<BoxRecord, BoxError> {
        let (store, id, from) = (self.store.clone(), record.id.clone(), record.state);
        blocking(move || store.transition_box(&id, from, to, detail))
            .await?
            .ok_or_else(|| BoxError::Internal(format!("box {} changed state under us", record.id)))
    }

    /// Waits up to `wait` for boxd's hello on `link`, then records the box
    /// running with the boot id the hello carries (after a boot, a thaw or an
    /// adoption; a record that says running already stays as it is). `after`
    /// opens the error of a box that did not answer.
    pub async fn await_hello_and_run(
        &self,
        record: BoxRecord,
        link: &BoxdLink,
        wait: Duration,
        after: &str,
    ) -> Result<(BoxRecord, BoxInfo), BoxError> {
        let hello = link
            .handle()
            .hello(wait)
            .await
            .map_err(|e| BoxError::Boot(format!("{after}{e}")))?;
        self.settle(&record.id);
        if record.state == BoxState::Running {
            return Ok((record, hello));
        }
        let detail = Transition {
            boot_id: Some(hello.boot_id.clone()),
            ..Transition::default()
        };
        let record = self.transition(&record, BoxState::Running, detail).await?;
        Ok((record, hello))
    }

    /// Fails a box: its VM and files are removed, all its capacity is released
    /// and its row records `reason` (a pooled row, which belongs to nobody, is
    /// deleted instead). The row moves from the state it holds now, which may
    /// be past `record`'s (a start that failed after `booting` was recorded).
    /// Returns the failed record, or `None` when there is none (a pooled box,
    /// or one that had ended already). The row is written even when the
    /// teardown failed; that error is returned after.
    pub fn fail_box(
        &self,
        record: &BoxRecord,
        reason: &str,
    ) -> Result<Option<BoxRecord>, BoxError> {
        tracing::warn!(box_id = %record.id, %reason, "box failed");
        let removed = self.teardown(&record.id);
        self.release_all(&record.id);
        let failed = if record.state == BoxState::Pooled {
            self.store.delete_pooled_box(&record.id)?;
            None
        } else {
            let detail = || Transition {
                failure: Some(reason.to_owned()),
                ..Transition::default()
            };
            let id = &record.id;
            match self
                .store
                .transition_box(id, record.state, BoxState::Failed, detail())?
            {
                Some(failed) => Some(failed),
                None => match self.store.box_by_id(id)? {
                    Some(row) if !row.state.is_terminal() => {
                        self.store
                            .transition_box(id, row.state, BoxState::Failed, detail())?
                    }
                    _ => None,
                },
            }
        };
        removed?;
        Ok(failed)
    }

    /// Makes the box's directory and disk (encrypted under a new key of its
    /// own: `disk_key`), defines and starts its domain.
    pub fn boot(&self, record: &BoxRecord) -> Result<(), BoxError> {
        let image = self.image(&record.image)?;
        let dir = self.box_dir(&record.id);
        std::fs::create_dir_all(&dir).map_err(io_error(format!("making {}", dir.display())))?;
        let run_as = match &self.jails {
            Some(jails) => {
                let (uid, new) = jails.assign(&dir)?;
                if new && let Some(network) = &self.network {
                    // The uid's byte counter may still hold its last box's.
                    network.forget(uid)?;
                }
                Some((uid, jails.gid()))
            }
            None => {
                allow_qemu(&dir)?;
                None
            }
        };
        self.network_ready()?;
        let overlay = dir.join("disk.qcow2");
        let key = match self.settings.encrypt_disks {
            true => Some(self.new_disk_key(&record.id)?),
            false => None,
        };
        self.host
            .create_overlay(&image.disk, &overlay, record.disk_gb, key.as_ref())?;
        if let (Some(jails), Some((uid, _))) = (&self.jails, run_as) {
            // QEMU runs as the box's uid and libvirt relabels nothing for
            // it: the overlay it writes must be that uid's, and only its.
            jails.give(&overlay, uid)?;
        }
        self.host
            .define(&self.domain_spec(record, &image, run_as))?;
        self.host.start(&Self::domain_name(&record.id))?;
        self.prefer_for_oom(&record.id);
        Ok(())
    }

    /// Whether box `id`'s domain is in `status` now, as the hypervisor lists
    /// it (after a failed call: whether the call left it as it was).
    pub fn domain_is(&self, id: &BoxId, status: psbx_libvirt::DomainStatus) -> bool {
        let name = Self::domain_name(id);
        self.host
            .list()
            .is_ok_and(|list| list.iter().any(|d| d.name == name && d.status == status))
    }

    /// After box `id`'s QEMU started or was restored: the kernel's OOM
    /// killer takes it before psbx and PostgreSQL (`jail::prefer_for_oom`).
    /// A failure is logged: the box runs either way.
    pub fn prefer_for_oom(&self, id: &BoxId) {
        if self.jails.is_some()
            && let Err(e) = crate::jail::prefer_for_oom(&Self::domain_name(id))
        {
            tracing::warn!(box_id = %id, error = %e, "could not raise the OOM score of the box's QEMU");
        }
    }
}

/// Removes box `id`'s domain (with its managed save) and its disk's key on
/// `host`, and its directory under `boxes_dir`: [`Machine::teardown`], and `psbx boxes
/// stop` without a server.
pub fn teardown(host: &dyn Hypervisor, boxes_dir: &Path, id: &BoxId) -> Result<(), BoxError> {
    host.remove(&Machine::domain_name(id))?;
    host.remove_disk_secret(&disk_key::secret_uuid(id))?;
    let dir = boxes_dir.join(id.as_str());
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(format!("deleting {}", dir.display()))(e)),
    }
}

/// Where boxes have no uid of their own (`jail.rs`), and for the KVM
/// probe, libvirt's QEMU runs as its own user (`libvirt-qemu`): it must reach
/// the directory, and nobody else may read what is in it (the console log,
/// the disk): the directory is 0750 with QEMU's group. Where that group is
/// not known (no `libvirt-qemu` user), it is 0755.
pub fn allow_qemu(dir: &Path) -> Result<(), BoxError> {
    use std::os::unix::fs::PermissionsExt;
    let group = nix::unistd::User::from_name(QEMU_USER)
        .ok()
        .flatten()
        .map(|u| u.gid.as_raw());
    let mode = match group {
        Some(gid) => {
            std::os::unix::fs::chown(dir, None, Some(gid)).map_err(io_error(format!(
                "giving {} to QEMU's group",
                dir.display()
            )))?;
            0o750
        }
        None => 0o755,
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(io_error(format!("opening {} to QEMU", dir.display())))?;
    Ok(())
}

/// The user libvirt runs QEMU as (Debian's qemu.conf default).
const QEMU_USER: &str = "libvirt-qemu";
