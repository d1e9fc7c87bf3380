//! A jail per box (DESIGN.md §6a), the way Firecracker's jailer gives each
//! microVM a uid of its own: every box's QEMU process runs as a uid no other
//! box has, so a box whose QEMU (or slirp in it) is escaped can neither read
//! nor write another box's disk, saved memory, console or channel socket, nor
//! trace or signal its QEMU.
//!
//! - **The uids.** An installation owns a range of [`SLOTS`] uids,
//!   `0x6000_0000 | hash(installation) << 12 | slot` ([`UidRange`]), far above
//!   any uid a system hands out and checked against `/etc/passwd` at start. A
//!   box takes the lowest free slot when its directory is made
//!   ([`Jails::assign`]); the slot is free again once the box's directory is
//!   gone. The directory's owner is the record of who holds which uid: it
//!   lives as long as the box on this host and survives a restart of psbx,
//!   with no table to keep in step (one node supervises one host).
//! - **The files.** The box's directory is `0700` and its disk `0600`, both
//!   owned by the box's uid: nothing in them is open to any other uid but
//!   root (psbx, libvirt, virtlogd). The group every box's QEMU runs with is
//!   the group of libvirt's QEMU state directory, which QEMU needs to enter
//!   it; it opens nothing of a box's own.
//! - **The host's rules** (`boxnet`) filter the whole range with one
//!   `meta skuid` match and count each uid's bytes on their own, so each box
//!   has its own egress counter.
//! - **Memory.** When the host runs out anyway, the kernel's OOM killer takes
//!   a box's QEMU first: each gets `oom_score_adj` [`QEMU_OOM_SCORE_ADJ`]
//!   when it starts or is restored ([`prefer_for_oom`]), while psbx and its
//!   PostgreSQL ask for -900 (`psbx serve`).
//! - Boxes started before psbx gave each box a uid run as the installation's
//!   one uid ([`UidRange::legacy`], `0x7000_0000 | 24 bits of the hash`) until
//!   they stop; the rules cover it too.
//!
//! Only for libvirt's system instance on this machine (`qemu:///system`):
//! elsewhere (a session instance, the fake hypervisor) QEMU runs as whoever
//! libvirt runs it as, and psbx cannot hand out uids.

use crate::ids::BoxId;
use sha2::Digest;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How many boxes of one installation one host can hold at once.
pub const SLOTS: u32 = 4096;
/// The first uid of the ranges; the ranges fill `0x6000_0000..0x7000_0000`.
const UID_BASE: u32 = 0x6000_0000;
/// Where the one uid per installation of earlier versions started.
const LEGACY_BASE: u32 = 0x7000_0000;
/// libvirt's QEMU state directory: the group that owns it is the group QEMU
/// needs to run at all (it keeps each domain's files below it).
const QEMU_STATE_DIR: &str = "/var/lib/libvirt/qemu";

/// The `oom_score_adj` of every box's QEMU process: killed before anything
/// of the host's own (0) and long before psbx and PostgreSQL (-900).
pub const QEMU_OOM_SCORE_ADJ: i32 = 500;
/// Where libvirt's system instance writes each domain's QEMU pid.
const QEMU_PID_DIR: &str = "/run/libvirt/qemu";

/// Gives the QEMU process of `domain` (just started or restored) the
/// `oom_score_adj` of boxes. Raising a process's score needs no privilege
/// beyond reaching it, which root has.
pub fn prefer_for_oom(domain: &str) -> Result<(), JailError> {
    let pidfile = Path::new(QEMU_PID_DIR).join(format!("{domain}.pid"));
    let pid = std::fs::read_to_string(&pidfile)
        .map_err(|e| JailError::Io(format!("reading {}: {e}", pidfile.display())))?;
    let file = format!("/proc/{}/oom_score_adj", pid.trim());
    std::fs::write(&file, QEMU_OOM_SCORE_ADJ.to_string())
        .map_err(|e| JailError::Io(format!("writing {file}: {e}")))
}

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    Io(String),
    #[error(
        "this host already holds {SLOTS} boxes of this installation, the most it gives uids to: \
         stop one, or start the box on another host"
    )]
    Full,
}

/// The uids of one installation's boxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
    /// The one uid every box of the installation ran as before boxes had
    /// their own.
    pub legacy: u32,
}

impl UidRange {
    /// The range of `installation`.
    pub fn of(installation: &str) -> Self {
        let hash = sha2::Sha256::digest(installation.as_bytes());
        let first = UID_BASE | (u32::from_be_bytes([0, 0, hash[0], hash[1]]) << 12);
        Self {
            first,
            last: first + (SLOTS - 1),
            legacy: LEGACY_BASE | u32::from_be_bytes([0, hash[0], hash[1], hash[2]]),
        }
    }

    /// Whether `uid` is one of the installation's box uids.
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid) || uid == self.legacy
    }

    /// The range as an nft set expression (`{ first-last, legacy }`).
    pub fn nft(&self) -> String {
        format!("{{ {}-{}, {} }}", self.first, self.last, self.legacy)
    }

    /// Whether any process runs as one of these uids now (read from
    /// `/proc`): a QEMU process of a box of the installation.
    pub fn runs(&self) -> bool {
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
                        .is_some_and(|uid| self.contains(uid))
                })
            })
    }
}

/// The uids handed to the boxes of one installation on this host.
pub struct Jails {
    range: UidRange,
    gid: u32,
    boxes_dir: PathBuf,
    /// Held while a slot is chosen and its directory given to it.
    assigning: Mutex<()>,
}

impl Jails {
    /// The jails of `installation`'s boxes, whose directories are under
    /// `boxes_dir`; refused when a user of this host has one of its uids.
    pub fn new(installation: &str, boxes_dir: &Path) -> Result<Self, JailError> {
        let gid = std::fs::metadata(QEMU_STATE_DIR)
            .map_err(|e| {
                JailError::Setup(format!(
                    "cannot read {QEMU_STATE_DIR} ({e}): is libvirt's QEMU driver installed?"
                ))
            })?
            .gid();
        let range = UidRange::of(installation);
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let taken = passwd.lines().find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let uid: u32 = fields.nth(1)?.parse().ok()?;
            range.contains(uid).then(|| (name.to_owned(), uid))
        });
        if let Some((name, uid)) = taken {
            return Err(JailError::Setup(format!(
                "uid {uid} belongs to the user {name}, but psbx runs the boxes of {installation} as \
                 uids {}-{} and {}: remove that user or give it another uid",
                range.first, range.last, range.legacy
            )));
        }
        Ok(Self {
            range,
            gid,
            boxes_dir: boxes_dir.to_owned(),
            assigning: Mutex::new(()),
        })
    }

    pub fn range(&self) -> UidRange {
        self.range
    }

    /// The group every box's QEMU runs with.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// Gives the box directory `dir` (made already, under the boxes
    /// directory) a uid of its own: the one it has when it holds one already
    /// (a box booted again), else the lowest free one. The directory becomes
    /// that uid's, mode 0700. Returns the uid and whether it is new to this
    /// box (its counters start from zero).
    pub fn assign(&self, dir: &Path) -> Result<(u32, bool), JailError> {
        let _held = self
            .assigning
            .lock()
            .map_err(|_| JailError::Io("the jails' lock is poisoned".into()))?;
        let meta = std::fs::metadata(dir)
            .map_err(|e| JailError::Io(format!("reading {}: {e}", dir.display())))?;
        if (self.range.first..=self.range.last).contains(&meta.uid()) {
            return Ok((meta.uid(), false));
        }
        let taken = self.owners()?;
        let uid = (self.range.first..=self.range.last)
            .find(|uid| !taken.contains_key(uid))
            .ok_or(JailError::Full)?;
        std::os::unix::fs::chown(dir, Some(uid), Some(self.gid))
            .map_err(|e| JailError::Io(format!("giving {} to uid {uid}: {e}", dir.display())))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| JailError::Io(format!("closing {}: {e}", dir.display())))?;
        Ok((uid, true))
    }

    /// Makes `file` (in a box's directory) the box's alone: its uid's, 0600.
    pub fn give(&self, file: &Path, uid: u32) -> Result<(), JailError> {
        std::os::unix::fs::chown(file, Some(uid), Some(self.gid))
            .map_err(|e| JailError::Io(format!("giving {} to uid {uid}: {e}", file.display())))?;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| JailError::Io(format!("closing {}: {e}", file.display())))
    }

    /// Which box holds each uid of the range now: the owners of the box
    /// directories.
    pub fn owners(&self) -> Result<HashMap<u32, BoxId>, JailError> {
        let entries = match std::fs::read_dir(&self.boxes_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => {
                return Err(JailError::Io(format!(
                    "reading {}: {e}",
                    self.boxes_dir.display()
                )));
            }
        };
        Ok(entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let uid = entry.metadata().ok()?.uid();
                let id = BoxId::parse(&entry.file_name().to_string_lossy()).ok()?;
                (self.range.first..=self.range.last)
                    .contains(&uid)
                    .then_some((uid, id))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installations_get_ranges_of_their_own_apart_from_the_legacy_uids() {
        let (a, b) = (UidRange::of("inst_aaaa"), UidRange::of("inst_bbbb"));
        assert_ne!(a.first, b.first);
        for r in [a, b] {
            assert_eq!(r.last - r.first + 1, SLOTS);
            assert!(r.first >= UID_BASE && r.last < LEGACY_BASE, "{r:?}");
            assert!((LEGACY_BASE..LEGACY_BASE + (1 << 24)).contains(&r.legacy));
            assert_eq!(r.first % SLOTS, 0);
        }
        assert!(!a.contains(b.first) && !a.contains(b.legacy));
        assert_eq!(UidRange::of("inst_aaaa"), a, "stable across restarts");
        assert_eq!(
            a.nft(),
            format!("{{ {}-{}, {} }}", a.first, a.last, a.legacy)
        );
    }

    #[test]
    fn each_box_directory_gets_the_lowest_free_uid_and_keeps_it() {
        let top = tempfile::tempdir().unwrap();
        let jails = Jails {
            range: UidRange::of("inst_jail_test"),
            gid: 0,
            boxes_dir: top.path().to_owned(),
            assigning: Mutex::new(()),
        };
        let first = jails.range().first;
        let dir = |id: &str| {
            let d = top.path().join(id);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let (a, b) = (dir("box_aaaaaaaaaaaa"), dir("box_bbbbbbbbbbbb"));
        assert_eq!(jails.assign(&a).unwrap(), (first, true));
        assert_eq!(jails.assign(&b).unwrap(), (first + 1, true));
        assert_eq!(
            jails.assign(&a).unwrap(),
            (first, false),
            "a box keeps its uid"
        );
        let meta = std::fs::metadata(&a).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (first, 0o700));
        std::fs::remove_dir(&a).unwrap();
        let c = dir("box_cccccccccccc");
        assert_eq!(
            jails.assign(&c).unwrap(),
            (first, true),
            "a stopped box's uid is free again"
        );
        let owners = jails.owners().unwrap();
        assert_eq!(owners.len(), 2);
        assert_eq!(owners[&(first + 1)].as_str(), "box_bbbbbbbbbbbb");
        let disk = c.join("disk.qcow2");
        std::fs::write(&disk, b"x").unwrap();
        jails.give(&disk, first).unwrap();
        let meta = std::fs::metadata(&disk).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (first, 0o600));
    }
}
