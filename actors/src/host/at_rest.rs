//! Whether what boxes keep on the host's disk is encrypted at rest. Their
//! disks psbx encrypts itself, each under a key of its own (`disk_key`); a
//! frozen box's memory is libvirt's managed save, a file in libvirt's save
//! directory ([`MANAGED_SAVE_DIR`]) that libvirt writes in clear, so only
//! the volume under it can encrypt it. The spec promises both "in
//! encrypted storage": psbx checks the volumes under that directory (and
//! under the boxes' directory when it is told not to encrypt disks) when it
//! starts, and says clearly when one is not encrypted; with
//! `boxes.require_encryption` it refuses to start then ([`to_check`]).
//!
//! Encrypted means: the file system's block device is a dm-crypt (LUKS)
//! mapping, or stands on dm-crypt mappings only (LVM over LUKS), read from
//! `/proc/self/mountinfo` and `/sys/dev/block`; or the directory is an
//! fscrypt one (ext4 or f2fs native encryption: `lsattr` shows its `E`
//! flag). Nothing else counts (a tmpfs, a plain disk, an unknown device).
//! Written here because no crate reads a device-mapper stack: `lsblk` is
//! what people use by hand, and its output is no simpler to read than sysfs.

use std::path::{Path, PathBuf};

/// Where libvirt's system instance (`qemu:///system`, the one psbx drives)
/// writes a domain's managed save: a frozen box's memory. libvirt has no
/// setting to move it.
pub const MANAGED_SAVE_DIR: &str = "/var/lib/libvirt/qemu/save";

/// The directories whose volumes must be encrypted for what boxes keep to
/// be, each with what it holds: libvirt's save directory always, and the
/// boxes' directory when their disks are not encrypted by psbx.
pub fn to_check(boxes_dir: &Path, disks_encrypted: bool) -> Vec<(PathBuf, &'static str)> {
    let mut dirs = vec![(
        PathBuf::from(MANAGED_SAVE_DIR),
        "frozen boxes' memory (libvirt's managed saves)",
    )];
    if !disks_encrypted {
        dirs.push((
            boxes_dir.to_owned(),
            "boxes' disks (boxes.encrypt_disks is off)",
        ));
    }
    dirs
}

/// What the check found of a directory's storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtRest {
    /// Encrypted: how (the dm-crypt device, or fscrypt).
    Encrypted(String),
    /// Not encrypted: what it is on (the file system and its device).
    Clear(String),
}

/// The check of `dir` (or, when it does not exist yet, of the nearest
/// directory above it that does) on this machine.
pub fn check(dir: &Path) -> AtRest {
    let existing = dir
        .ancestors()
        .find(|d| d.is_dir())
        .unwrap_or(Path::new("/"));
    if fscrypt(existing) {
        return AtRest::Encrypted(format!("{} is an fscrypt directory", existing.display()));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let canonical = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_owned());
    check_in(&canonical, &mountinfo, Path::new("/sys/dev/block"))
}

/// [`check`] with the mount table's text and the `/sys/dev/block` directory
/// given (tests give their own).
fn check_in(dir: &Path, mountinfo: &str, sys_dev_block: &Path) -> AtRest {
    let Some(mount) = mount_of(dir, mountinfo) else {
        return AtRest::Clear(format!("{}: no mount found for it", dir.display()));
    };
    let on = format!(
        "{} ({}, from {}, device {})",
        mount.point.display(),
        mount.fstype,
        mount.source,
        mount.device
    );
    match crypt_device(&sys_dev_block.join(&mount.device), 0) {
        Some(name) => AtRest::Encrypted(format!("{on} is on dm-crypt device {name}")),
        None => AtRest::Clear(on),
    }
}

/// One line of the mount table.
struct Mount {
    /// `major:minor` of the file system's device.
    device: String,
    point: PathBuf,
    fstype: String,
    source: String,
}

/// The mount whose mount point is the longest one above `dir` (the last of
/// equal ones: it is mounted over the others).
fn mount_of(dir: &Path, mountinfo: &str) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let (Some(device), Some(point)) = (fields.get(2), fields.get(4)) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        if !dir.starts_with(&point) {
            continue;
        }
        let mut rest = after.split(' ');
        let fstype = rest.next().unwrap_or_default().to_owned();
        let source = rest.next().unwrap_or_default().to_owned();
        let longer = best
            .as_ref()
            .is_none_or(|b| point.components().count() >= b.point.components().count());
        if longer {
            best = Some(Mount {
                device: (*device).to_owned(),
                point,
                fstype,
                source,
            });
        }
    }
    best
}

/// Mount points escape space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match octal {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The name of the dm-crypt device that `device` (a sysfs block device
/// directory) is, or that every device under it is, if any.
fn crypt_device(device: &Path, depth: usize) -> Option<String> {
    if depth > 8 {
        return None;
    }
    let uuid = std::fs::read_to_string(device.join("dm/uuid")).unwrap_or_default();
    let name = std::fs::read_to_string(device.join("dm/name"))
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|_| device.display().to_string());
    if uuid.starts_with("CRYPT-") {
        return Some(name);
    }
    // A mapping over others (LVM): encrypted when every one below it is.
    let below: Vec<PathBuf> = std::fs::read_dir(device.join("slaves"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if below.is_empty() {
        return None;
    }
    let crypts: Option<Vec<String>> = below.iter().map(|d| crypt_device(d, depth + 1)).collect();
    crypts.map(|c| format!("{name} (over {})", c.join(", ")))
}

/// Whether `dir` is an fscrypt directory (`lsattr -d` shows `E`).
fn fscrypt(dir: &Path) -> bool {
    std::process::Command::new("lsattr")
        .arg("-d")
        .arg(dir)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()
                .map(|flags| flags.contains('E'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
22 1 254:0 / / rw,relatime - ext4 /dev/mapper/root_crypt rw
23 22 0:21 / /proc rw - proc proc rw
30 22 8:1 / /boot rw - ext4 /dev/sda1 rw
31 22 254:2 / /var/lib/psbx rw - xfs /dev/mapper/vg-psbx rw
32 22 0:40 / /srv/my\\040boxes rw - tmpfs tmpfs rw
";

    /// A sysfs `/sys/dev/block` with: 254:0 a LUKS mapping, 254:1 another,
    /// 254:2 an LVM volume over 254:1, 254:3 an LVM volume over a plain disk
    /// partition 8:2, 8:1 a plain partition.
    fn sysfs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let dm = |mm: &str, name: &str, uuid: &str| {
            std::fs::create_dir_all(root.join(mm).join("dm")).unwrap();
            std::fs::write(root.join(mm).join("dm/name"), format!("{name}\n")).unwrap();
            std::fs::write(root.join(mm).join("dm/uuid"), format!("{uuid}\n")).unwrap();
        };
        dm("254:0", "root_crypt", "CRYPT-LUKS2-aaaa-root_crypt");
        dm("254:1", "pv_crypt", "CRYPT-LUKS2-bbbb-pv_crypt");
        dm("254:2", "vg-psbx", "LVM-xyz");
        dm("254:3", "vg-plain", "LVM-abc");
        std::fs::create_dir_all(root.join("8:1")).unwrap();
        std::fs::create_dir_all(root.join("8:2")).unwrap();
        std::fs::create_dir_all(root.join("254:2/slaves")).unwrap();
        std::os::unix::fs::symlink(root.join("254:1"), root.join("254:2/slaves/dm-1")).unwrap();
        std::fs::create_dir_all(root.join("254:3/slaves")).unwrap();
        std::os::unix::fs::symlink(root.join("8:2"), root.join("254:3/slaves/sda2")).unwrap();
        dir
    }

    #[test]
    fn luks_directly_or_under_lvm_is_encrypted_and_anything_else_is_not() {
        let sys = sysfs();
        let at = |dir: &str, mounts: &str| check_in(Path::new(dir), mounts, sys.path());
        assert!(
            matches!(at("/var/lib/psbx/boxes", MOUNTS), AtRest::Encrypted(how) if how.contains("vg-psbx (over pv_crypt)"))
        );
        assert!(
            matches!(at("/home/x", MOUNTS), AtRest::Encrypted(how) if how.contains("root_crypt"))
        );
        assert!(matches!(at("/boot/boxes", MOUNTS), AtRest::Clear(on) if on.contains("/dev/sda1")));
        // Mount points with a space; a tmpfs is not encrypted storage.
        assert!(matches!(at("/srv/my boxes/b", MOUNTS), AtRest::Clear(on) if on.contains("tmpfs")));
        let plain_lvm = "22 1 254:3 / / rw - ext4 /dev/mapper/vg-plain rw\n";
        assert!(matches!(at("/var/lib/psbx", plain_lvm), AtRest::Clear(_)));
        assert!(matches!(at("/x", ""), AtRest::Clear(_)));
    }

    #[test]
    fn this_machine_is_read_without_failing() {
        // Whatever it is, the check names the mount it found.
        match check(Path::new("/var/lib/psbx/no/such/dir")) {
            AtRest::Encrypted(how) | AtRest::Clear(how) => assert!(how.contains('/'), "{how}"),
        }
    }
}
