//! The capacity ledger of a [`Machine`]: what each box is promised,
//! checked before a box is made or thawed (`reserve`) and given back when it
//! freezes or ends (`release`, `release_all`), and the disk arithmetic it
//! admits by (`check_disk`, `DiskRoom`, `free_bytes`, `written_bytes`). The
//! ledger's own sums are `capacity.rs`. It is the machine's, not the
//! supervisor's, because the box actors take and give back their share
//! themselves, in the same mailbox turn as the thaw or freeze it belongs to.
//!
//! The ledger promises three things. CPU and memory are held by boxes whose
//! VM holds host memory (pooled, booting, running) and given back when a box
//! freezes; memory is admitted by what boxes use (measured by the
//! supervisor's sampler, `host/pressure.rs`) against the kernel's
//! `MemAvailable`. Disk is held by every box that is not over, frozen
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
//! The ledger is behind a `std::sync::Mutex` rather than owned by the
//! HostSupervisor: each use is a lookup or an insertion held for no await,
//! taken by the supervisor (creations, the pressure samplers) and by the box
//! actors themselves (thaw, freeze, stop); a message to the supervisor would
//! put every thaw behind its mailbox, and there is no order between them to
//! keep.

use super::capacity::{Ledger, Limits, Usage};
use super::meminfo::HostMemory;
use super::{MIB, Machine};
use crate::error::{BoxError, io_error};
use crate::ids::BoxId;
use crate::settings::{BoxSettings, Unit};
use std::path::Path;

const GIB: u64 = 1024 * 1024 * 1024;

/// The disk a box of `unit` may come to take: its overlay at full size and
/// its managed save.
fn disk_bytes(unit: Unit) -> u64 {
    unit.disk_gb
        .saturating_mul(GIB)
        .saturating_add(unit.memory_mib.saturating_mul(MIB))
}

/// Bytes the files of a box directory take on disk now.
pub fn written_bytes(dir: &Path) -> u64 {
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

impl Machine {
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
}
