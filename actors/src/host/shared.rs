//! What every actor of one host shares: the libvirt connection, the store,
//! the settings, the chosen accelerator, where box files live, the capacity
//! ledger and the registry of live box actors, and the lifecycle steps they
//! all take (`transition`, `await_hello_and_run`, `fail_box`, `teardown`).
//!
//! The capacity ledger (its arithmetic in `capacity.rs`) promises three
//! things. CPU and memory are held by boxes whose VM holds host memory
//! (pooled, booting, running) and given back when a box freezes; memory is
//! admitted by what boxes use (measured by the supervisor's sampler,
//! `pressure.rs`) against the kernel's `MemAvailable`. Disk is held by every box that is not over, frozen
//! ones included, from its creation to its end: its overlay may grow to
//! `disk_gb` (unit_disk_gb × size), and its managed save takes as much as its
//! memory, so a box holds `disk_gb` GiB plus `memory_mib` MiB. Holding the
//! save's share while running means a freeze never runs out of room, and
//! a thaw needs no new disk. What boxes hold but have not written yet must
//! fit in the free space of `boxes_dir`'s file system (statvfs) above
//! `disk_margin_gb` (kept for the embedded PostgreSQL and logs on the same
//! disk), times `disk_overcommit` (1.0: no overcommit; overlays are thin, so
//! an operator may accept more). What a box has written is read from the
//! blocks its directory's files take; the managed save lives in libvirt's
//! directory and is counted as unwritten (a frozen box is counted twice for
//! its memory: on the safe side).
//!
//! The ledger and the registry are behind `std::sync::Mutex`es rather than
//! owned by the HostSupervisor: each use is a lookup or an insertion held for
//! no await, taken by the API's calls (`Boxes` finds a box's actor) and by
//! the box actors themselves; a message to the supervisor would put every
//! exec and status call behind its mailbox, and there is no order between
//! them to keep.

use crate::blocking::blocking;
use crate::box_actor::BoxActor;
use crate::box_role::{Asker, BoxRole};
use crate::box_state::BoxState;
use crate::boxd_link::{BoxdLink, StreamHandler};
use crate::boxnet::{self, BoxNetwork};
use crate::connectors::Router;
use crate::connectors::route::BoxRoute;
use crate::error::{BoxError, io_error};
use crate::exec::mask::Masker;
use crate::host::capacity::{Ledger, Limits, Usage};
use crate::host::meminfo::HostMemory;
use crate::hypervisor::Hypervisor;
use crate::ids::{AccountId, BoxId};
use crate::image::Image;
use crate::jail::Jails;
use crate::secrets::Secrets;
use crate::settings::{BoxSettings, Unit};
use crate::spec::BoxSpec;
use crate::store::{BoxRecord, Store, Transition};
use actix::Addr;
use psbx_libvirt::{Accel, Boot, Controllers, Disk, DomainSpec, Nic, Tune};
use psbx_wire::boxd::{BoxInfo, Outbound};
use psbx_wire::frame::code;
use psbx_wire::mux::Incoming;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct HostShared {
    pub host: Arc<dyn Hypervisor>,
    pub store: Store,
    pub settings: BoxSettings,
    pub accel: Accel,
    pub server_id: String,
    /// This installation's id: the owner written into every domain's metadata.
    pub installation: String,
    /// The account secrets, to rebuild a box's mask after a restart.
    pub secrets: Secrets,
    /// Where boxes' streams to environment addresses go.
    pub router: Router,
    /// The host's rules for boxes' network cards (none: boxes have no card).
    pub network: Option<Arc<BoxNetwork>>,
    /// The uid each box's QEMU runs as (none: libvirt's own user, on a host
    /// other than this machine's system instance).
    pub jails: Option<Arc<Jails>>,
    /// Signs the identity tokens of boxes whose environment names an AWS role.
    pub box_role: Option<BoxRole>,
    /// The boxes' links as last stored (`wire` replaces them).
    pub links: Arc<super::links::LinkBook>,
    capacity: Mutex<Ledger>,
    registry: Arc<Registry>,
}

/// The live box actors of this host, by box.
pub type Registry = Mutex<HashMap<BoxId, Addr<BoxActor>>>;

const GIB: u64 = 1024 * 1024 * 1024;
const MIB: u64 = 1024 * 1024;

/// The disk a box of `unit` may come to take: its overlay at full size and
/// its managed save.
fn disk_bytes(unit: Unit) -> u64 {
    unit.disk_gb
        .saturating_mul(GIB)
        .saturating_add(unit.memory_mib.saturating_mul(MIB))
}

/// Bytes the files of a box directory take on disk now.
pub(super) fn written_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.blocks().saturating_mul(512))
        .sum()
}

/// Free bytes (for unprivileged users) on the file system holding `path`, or
/// its nearest existing ancestor.
pub fn free_bytes(path: &Path) -> Result<u64, BoxError> {
    let existing = path
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or_else(|| Path::new("/"));
    let stat = nix::sys::statvfs::statvfs(existing).map_err(|e| {
        io_error(format!("reading the free space of {}", existing.display()))(e.into())
    })?;
    Ok(stat.blocks_available().saturating_mul(stat.fragment_size()))
}

/// The disk of `boxes_dir` as admission sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskRoom {
    /// Free bytes of its file system (statvfs).
    pub free: u64,
    /// Bytes the boxes holding disk were promised and have not written yet.
    pub unwritten: u64,
    /// MiB the managed saves of the boxes holding memory would take.
    pub saves_mib: u64,
}

/// Refuses a box of `unit` whose disk (its overlay at full size and its
/// managed save) does not fit next to what the boxes holding disk may still
/// write, in the free space above `disk_margin_gb` times `disk_overcommit`
/// (1.0 by default: nothing is promised that does not exist); or whose
/// managed save, with those of the boxes holding memory, does not fit above
/// the margin now.
pub fn check_disk(settings: &BoxSettings, disk: &DiskRoom, unit: Unit) -> Result<(), BoxError> {
    let DiskRoom {
        free,
        unwritten,
        saves_mib,
    } = *disk;
    let margin = settings.disk_margin_gb.saturating_mul(GIB);
    let room = free.saturating_sub(margin) as f64 * settings.disk_overcommit;
    let wanted = disk_bytes(unit);
    let gib = |b: u64| b as f64 / GIB as f64;
    // Now: the saves of every box holding memory, and this box's, fit
    // in what is free above the margin.
    let saves = saves_mib
        .saturating_add(unit.memory_mib)
        .saturating_mul(MIB);
    if saves.saturating_add(margin) > free {
        return Err(BoxError::HostFull(format!(
            "this host's disk has no room for the saved memory of one more box: {:.1} GiB are free in {}, \
             {} GiB of it kept free (boxes.disk_margin_gb), and the boxes holding memory may save {:.1} GiB \
             when they freeze (this box {} MiB); free disk space, stop boxes, or lower boxes.unit_memory_mib",
            gib(free),
            settings.boxes_dir.display(),
            settings.disk_margin_gb,
            gib(saves),
            unit.memory_mib
        )));
    }
    if (unwritten.saturating_add(wanted)) as f64 > room {
        return Err(BoxError::HostFull(format!(
            "this host's disk cannot fit a box of {} GB of disk and {} MiB of saved memory ({:.1} GiB): \
             {:.1} GiB are free in {}, {} GiB of it kept free (boxes.disk_margin_gb), and boxes may still \
             write {:.1} GiB (times boxes.disk_overcommit {}); free disk space, stop boxes, or raise \
             boxes.disk_overcommit (boxes that then fill their disks are frozen by the disk-pressure check)",
            unit.disk_gb,
            unit.memory_mib,
            gib(wanted),
            gib(free),
            settings.boxes_dir.display(),
            settings.disk_margin_gb,
            gib(unwritten),
            settings.disk_overcommit
        )));
    }
    Ok(())
}

/// What start-up learned about the host and this installation.
pub struct HostFacts {
    pub accel: Accel,
    pub server_id: String,
    pub installation: String,
    pub cpus: u32,
    pub memory_mib: u64,
    pub network: Option<Arc<BoxNetwork>>,
    pub jails: Option<Arc<Jails>>,
}

impl HostShared {
    pub fn new(
        host: Arc<dyn Hypervisor>,
        store: Store,
        settings: BoxSettings,
        facts: HostFacts,
        secrets: Secrets,
        router: Router,
        box_role: Option<BoxRole>,
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
            installation: facts.installation,
            secrets,
            router,
            network: facts.network,
            jails: facts.jails,
            box_role,
            links: Arc::default(),
            capacity: Mutex::new(capacity),
            registry: Arc::default(),
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
                    .then(|| super::disk_key::secret_uuid(&record.id)),
            }),
            channel_socket: dir.join("boxd.sock"),
            console_log: Some(dir.join("console.log")),
            nic,
            run_as,
            owner: self.installation.clone(),
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

    /// The periodic check of `network`'s rules (this host's, or those kept
    /// for boxes started before `boxes.network` was turned off): put back if
    /// they are not in place, and each box's bytes stored, those whose
    /// figure changed, for the boxes holding those uids.
    pub fn check_network(&self, network: &BoxNetwork) -> Result<(), BoxError> {
        let counts = network.ensure()?;
        let Some(jails) = &self.jails else {
            return Ok(());
        };
        let owners = jails.owners()?;
        let changed = network.meter.changed(&counts, &owners);
        if !changed.is_empty() {
            let rows: Vec<(String, u64)> = changed
                .iter()
                .map(|(_, id, bytes)| (id.as_str().to_owned(), *bytes))
                .collect();
            self.store.add_internet_egress(&rows)?;
        }
        network.meter.stored(changed, &owners);
        Ok(())
    }

    /// The link to a box's boxd: the DNS queries it forwards go to the
    /// platform's resolvers, its environment streams are routed for the
    /// account that holds it (none while pooled) and the environment its
    /// spec names.
    pub fn link(&self, id: &BoxId, account: Option<&AccountId>, spec: &BoxSpec) -> BoxdLink {
        let environment = account.map(|account| {
            self.router.for_box(BoxRoute {
                box_id: id.clone(),
                account: account.clone(),
                environment: spec.environment.clone(),
            })
        });
        let relay = self.network.as_ref().map(|n| n.relay());
        let links = account.map(|account| {
            super::links::Links::new(
                id.clone(),
                account.clone(),
                self.store.clone(),
                self.registry.clone(),
                self.links.clone(),
            )
        });
        let role = match (&self.box_role, account, &spec.environment, &spec.claimed) {
            (Some(signer), Some(account), Some(environment), Some(claimed)) => {
                claimed.aws.clone().map(|role| {
                    let asker = Asker::new(id.clone(), account.clone(), environment.clone(), role);
                    (signer.clone(), Arc::new(asker))
                })
            }
            _ => None,
        };
        let streams: StreamHandler = Arc::new(move |incoming: Incoming| {
            match (Outbound::parse(incoming.target()), &relay, &environment) {
                (Ok(Outbound::Dns(transport)), Some(relay), _) => {
                    let relay = relay.clone();
                    tokio::spawn(async move { relay.serve(incoming, transport).await });
                }
                (Ok(Outbound::Dns(_)), None, _) => incoming.refuse(
                    code::UNAVAILABLE,
                    "this box has no network: psbx answers no names for it",
                ),
                (Ok(Outbound::Env(endpoint)), _, Some(environment)) => {
                    environment.spawn(incoming, endpoint)
                }
                (Ok(Outbound::Env(_)), _, None) => incoming.refuse(
                    code::FORBIDDEN,
                    "this box was not started in an environment",
                ),
                (Ok(Outbound::Link(endpoint)), _, _) => match &links {
                    Some(links) => links.spawn(incoming, endpoint),
                    None => incoming.refuse(code::NOT_FOUND, "a pooled box has no links"),
                },
                (Ok(Outbound::AwsToken), _, _) => match &role {
                    Some((signer, asker)) => {
                        let (signer, asker) = (signer.clone(), asker.clone());
                        tokio::spawn(async move { signer.serve(incoming, &asker).await });
                    }
                    None => incoming.refuse(
                        code::NOT_FOUND,
                        "this box's environment named no AWS role when the box started",
                    ),
                },
                (Err(e), _, _) => incoming.refuse(code::BAD_REQUEST, &e.to_string()),
            }
        });
        let socket = self.socket(id);
        let dial = self.host.channel(&socket);
        BoxdLink::over(socket, dial, Some(streams))
    }

    /// [`HostShared::link`] for a box as stored.
    pub fn link_of(&self, record: &BoxRecord) -> BoxdLink {
        self.link(&record.id, record.account_id.as_ref(), &record.spec)
    }

    /// The mask of a box's output after a server restart: the values sealed
    /// into its spec at the start (what boxd still holds, also of a secret
    /// changed or deleted since), and the current values of the secrets it
    /// names (boxes started before the values were sealed).
    pub async fn masker_for(&self, record: &BoxRecord) -> Arc<Masker> {
        let (secrets, Some(account)) = (&self.secrets, &record.account_id) else {
            return Arc::new(Masker::default());
        };
        let mut values = Vec::new();
        for name in &record.spec.secrets {
            // A secret deleted since the start is simply no longer known here.
            if let Ok(mut v) = secrets.values(account, std::slice::from_ref(name)).await {
                values.append(&mut v);
            }
        }
        let sealed = crate::environments::claim::open_mask(
            &secrets.vault(),
            account.as_str(),
            record.spec.mask.as_ref(),
        );
        Arc::new(Masker::new(
            values
                .iter()
                .map(|(_, v)| v.as_str())
                .chain(sealed.iter().map(String::as_str)),
        ))
    }

    /// Promises `unit` to box `id` (its CPU and memory, and its disk unless
    /// it holds that already), or says why the host cannot
    /// ([`Ledger::admit`]: promises capped by the overcommits, memory by what
    /// the host has available now).
    pub fn reserve(&self, id: &BoxId, unit: Unit) -> Result<(), BoxError> {
        let mut cap = self.ledger()?;
        if !cap.holds(id) {
            let available = HostMemory::read()
                .map_err(|e| BoxError::NoHost(e.to_string()))?
                .available_mib;
            cap.admit(unit, available)
                .map_err(|e| BoxError::HostFull(e.to_string()))?;
        }
        if !cap.disk.contains_key(id) {
            self.check_disk(&cap, unit)?;
            cap.disk.insert(id.clone(), disk_bytes(unit));
        }
        cap.hold(id, unit);
        Ok(())
    }

    fn ledger(&self) -> Result<std::sync::MutexGuard<'_, Ledger>, BoxError> {
        self.capacity
            .lock()
            .map_err(|_| BoxError::Internal("capacity ledger poisoned".into()))
    }

    /// boxd of box `id` said hello: its measured use counts from now on.
    pub fn settle(&self, id: &BoxId) {
        if let Ok(mut cap) = self.capacity.lock() {
            cap.settle(id);
        }
    }

    /// The boxes holding host memory, to measure.
    pub fn held_boxes(&self) -> Vec<BoxId> {
        self.capacity
            .lock()
            .map(|cap| cap.held_ids())
            .unwrap_or_default()
    }

    /// The boxes holding disk (every box not over), to watch what they write.
    pub fn disk_holders(&self) -> Vec<BoxId> {
        self.capacity
            .lock()
            .map(|cap| cap.disk.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Records what box `id`'s QEMU process uses.
    pub fn measured(&self, id: &BoxId, rss_mib: u64) {
        if let Ok(mut cap) = self.capacity.lock() {
            cap.measure(id, rss_mib);
        }
    }

    /// What the boxes holding host memory add up to, and the limits.
    pub fn usage(&self) -> Option<(Usage, Limits)> {
        let cap = self.capacity.lock().ok()?;
        Some((cap.usage(), cap.limits()))
    }

    /// The last measurement of box `id`'s QEMU process.
    pub fn rss_mib(&self, id: &BoxId) -> Option<u64> {
        self.capacity.lock().ok()?.rss_mib(id)
    }

    /// Refuses a box of `unit` whose disk does not fit next to what the
    /// boxes holding disk may still write ([`check_disk`]).
    fn check_disk(&self, cap: &Ledger, unit: Unit) -> Result<(), BoxError> {
        let unwritten: u64 = cap
            .disk
            .iter()
            .map(|(id, promised)| promised.saturating_sub(written_bytes(&self.box_dir(id))))
            .sum();
        let room = DiskRoom {
            free: free_bytes(&self.settings.boxes_dir)?,
            unwritten,
            saves_mib: cap.saves_to_come_mib(),
        };
        check_disk(&self.settings, &room, unit)
    }

    /// Records the disk of a box that holds it already (a box adopted after
    /// a restart), without a check: its files are there.
    pub fn hold_disk(&self, id: &BoxId, unit: Unit) {
        if let Ok(mut cap) = self.capacity.lock() {
            cap.disk
                .entry(id.clone())
                .or_insert_with(|| disk_bytes(unit));
        }
    }

    /// Gives back a box's CPU and memory (it froze); its disk stays held.
    pub fn release(&self, id: &BoxId) {
        if let Ok(mut cap) = self.capacity.lock() {
            cap.release(id);
        }
    }

    /// Gives back everything a box held (it is over, or was never made).
    pub fn release_all(&self, id: &BoxId) {
        if let Ok(mut cap) = self.capacity.lock() {
            cap.release(id);
            cap.disk.remove(id);
        }
    }

    pub fn register(&self, id: BoxId, addr: Addr<BoxActor>) {
        if let Ok(mut r) = self.registry.lock() {
            r.insert(id, addr);
        }
    }

    pub fn unregister(&self, id: &BoxId) {
        if let Ok(mut r) = self.registry.lock() {
            r.remove(id);
        }
        self.release_all(id);
    }

    pub fn actor(&self, id: &BoxId) -> Option<Addr<BoxActor>> {
        self.registry.lock().ok()?.get(id).cloned()
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
/// `host`, and its directory under `boxes_dir`: [`HostShared::teardown`], and `psbx boxes
/// stop` without a server.
pub fn teardown(host: &dyn Hypervisor, boxes_dir: &Path, id: &BoxId) -> Result<(), BoxError> {
    host.remove(&HostShared::domain_name(id))?;
    host.remove_disk_secret(&super::disk_key::secret_uuid(id))?;
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
pub(super) fn allow_qemu(dir: &Path) -> Result<(), BoxError> {
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
