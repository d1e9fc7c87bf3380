//! Where the state that other users must reach lives: the embedded
//! PostgreSQL cluster (run as `postgres.user` when psbx runs as root), box
//! images and box disks (opened by libvirt's QEMU processes, which run as
//! their own users). The data directory keeps what only psbx reads (the
//! master key, TLS files, shots).
//!
//! The shared directory is, in this order:
//! 1. `shared_dir` when configured;
//! 2. `/var/lib/psbx/data-<hash of the data directory>` when it exists
//!    (made by an earlier start, below);
//! 3. the data directory when it already holds a cluster, boxes or images
//!    (an installation from before this setting);
//! 4. that `/var/lib/psbx/data-<hash>` when psbx runs as root, other users
//!    must enter the shared directory (boxes run, or the embedded cluster
//!    does), and the data directory, or a directory above it, cannot be
//!    entered by them (a clone in `/root`, a directory under any 0700 parent,
//!    or a 0700 data directory such as `mktemp -d` makes);
//! 5. else the data directory itself.
//!
//! [`check_reachable`] then stops a server whose shared directory others
//! still cannot reach, naming the directory and the command that fixes it.
//! It reads the "others" permission bits only: ACLs and group membership are
//! not consulted (a directory open to others through them is reported too).
//!
//! [`check_disk_room`] stops a server whose embedded PostgreSQL (`pg/`) and
//! box disks (`boxes/`) share a file system that has less than
//! `boxes.disk_margin_gb` free already: that margin is what keeps boxes from
//! taking the database's room (admission never promises it, and the
//! disk-pressure loop freezes boxes that write into it).

use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What the checks here need of the configuration (`Config::layout`): the
/// configuration uses this module's rule for its default, so this module does
/// not name the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    pub data_dir: &'a Path,
    pub shared_dir: &'a Path,
    /// Boxes run here (libvirt's QEMU processes open the images and disks).
    pub boxes: bool,
    /// The embedded PostgreSQL runs (no `database_url`).
    pub embedded_pg: bool,
    /// `boxes.disk_margin_gb`.
    pub disk_margin_gb: u64,
}

/// Where root's installations keep their shared state by default.
const ROOT_SHARED: &str = "/var/lib/psbx";

#[derive(Debug, thiserror::Error)]
pub enum SharedDirError {
    #[error(
        "{who} cannot enter {dir} (mode {mode:o}), where psbx keeps {what}: run \
         `chmod o+x {dir}`, or set shared_dir (PSBX_SHARED_DIR) to a directory \
         every user can enter, such as /var/lib/psbx/<name>"
    )]
    Unreachable {
        who: &'static str,
        dir: PathBuf,
        mode: u32,
        what: &'static str,
    },
    #[error(
        "the embedded PostgreSQL ({pg}) and the box disks ({boxes}) share a file system with \
         {free_mib} MiB free, under boxes.disk_margin_gb ({margin_gb} GiB), the room kept for the \
         database: free disk space there, put box disks on a file system of their own (shared_dir, or \
         a mount at {boxes}), or lower boxes.disk_margin_gb"
    )]
    DiskFull {
        pg: PathBuf,
        boxes: PathBuf,
        free_mib: u64,
        margin_gb: u64,
    },
    #[error("reading {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// The shared directory for an absolute `data_dir` (rules 2–5 above);
/// `others_enter`: boxes run, or the embedded cluster does.
pub fn default_for(data_dir: &Path, others_enter: bool) -> PathBuf {
    let relocated = relocated(data_dir);
    if relocated.is_dir() {
        return relocated;
    }
    let holds_state = ["pg", "boxes", "images"]
        .iter()
        .any(|d| data_dir.join(d).exists());
    if !holds_state
        && others_enter
        && nix::unistd::geteuid().is_root()
        && closed_ancestor(&data_dir.join("x")).is_some()
    {
        return relocated;
    }
    data_dir.to_owned()
}

/// `/var/lib/psbx/data-<16 hex digits of the data directory's SHA-256>`.
fn relocated(data_dir: &Path) -> PathBuf {
    let digest = Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
    Path::new(ROOT_SHARED).join(format!("data-{}", hex::encode(&digest[..8])))
}

/// The first existing directory above `path` (not `path` itself, which psbx
/// makes) that other users cannot enter, with its mode.
fn closed_ancestor(path: &Path) -> Option<(PathBuf, u32)> {
    path.ancestors().skip(1).find_map(|dir| {
        let mode = std::fs::metadata(dir).ok()?.permissions().mode();
        (mode & 0o001 == 0).then(|| (dir.to_owned(), mode & 0o7777))
    })
}

/// Makes the shared directory (and, when it is not the data directory, a
/// note in it naming the data directory it belongs to), then checks that the
/// users who need it can enter it: the cluster's user when psbx runs as root
/// and keeps its own database, libvirt's QEMU processes when boxes run.
pub fn prepare(layout: &Layout) -> Result<(), SharedDirError> {
    let dir = layout.shared_dir;
    std::fs::create_dir_all(dir).map_err(|e| SharedDirError::Io(dir.to_owned(), e))?;
    if dir != layout.data_dir {
        // Only psbx reads the data directory now.
        std::fs::set_permissions(layout.data_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| SharedDirError::Io(layout.data_dir.to_owned(), e))?;
        let note = dir.join("DATA_DIR");
        let text = format!(
            "This directory holds the state of the psbx installation whose data directory is\n{}\n",
            layout.data_dir.display()
        );
        std::fs::write(&note, text).map_err(|e| SharedDirError::Io(note, e))?;
    }
    check_reachable(layout)?;
    check_disk_room(layout)
}

/// Stops a server whose embedded cluster and box disks share a file system
/// with less than `boxes.disk_margin_gb` free.
pub fn check_disk_room(layout: &Layout) -> Result<(), SharedDirError> {
    use std::os::unix::fs::MetadataExt;
    if !layout.embedded_pg || !layout.boxes {
        return Ok(());
    }
    let shared = layout.shared_dir;
    let (pg, boxes) = (shared.join("pg"), shared.join("boxes"));
    // Each as it is, or the directory it will be made in.
    let existing = |p: &Path| -> Result<(PathBuf, u64), SharedDirError> {
        let at = p
            .ancestors()
            .find(|a| a.exists())
            .unwrap_or_else(|| Path::new("/"));
        let meta = std::fs::metadata(at).map_err(|e| SharedDirError::Io(at.to_owned(), e))?;
        Ok((at.to_owned(), meta.dev()))
    };
    let ((_, pg_dev), (boxes_at, boxes_dev)) = (existing(&pg)?, existing(&boxes)?);
    if pg_dev != boxes_dev {
        return Ok(());
    }
    let stat = nix::sys::statvfs::statvfs(&boxes_at)
        .map_err(|e| SharedDirError::Io(boxes_at.clone(), e.into()))?;
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    let margin_gb = layout.disk_margin_gb;
    if free < margin_gb.saturating_mul(1 << 30) {
        return Err(SharedDirError::DiskFull {
            pg,
            boxes,
            free_mib: free >> 20,
            margin_gb,
        });
    }
    Ok(())
}

/// Stops with the directory to open when other users cannot reach the
/// shared directory.
pub fn check_reachable(layout: &Layout) -> Result<(), SharedDirError> {
    let dir = layout.shared_dir;
    let blocked = closed_ancestor(&dir.join("x"));
    let Some((blocked, mode)) = blocked else {
        return Ok(());
    };
    if layout.boxes {
        return Err(SharedDirError::Unreachable {
            who: "libvirt's QEMU processes",
            dir: blocked,
            mode,
            what: "box images and disks",
        });
    }
    if layout.embedded_pg && nix::unistd::geteuid().is_root() {
        return Err(SharedDirError::Unreachable {
            who: "the embedded PostgreSQL's user",
            dir: blocked,
            mode,
            what: "its cluster",
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_under_a_closed_directory_moves_its_shared_state_when_root() {
        let top = tempfile::tempdir().unwrap();
        let closed = top.path().join("home");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let data = closed.join("clone/.psbx");
        assert_eq!(closed_ancestor(&data).unwrap().0, closed);
        let shared = default_for(&data, true);
        if nix::unistd::geteuid().is_root() {
            assert!(shared.starts_with(ROOT_SHARED), "{}", shared.display());
            assert_eq!(shared, default_for(&data, true), "not stable");
            assert_ne!(shared, default_for(&closed.join("other/.psbx"), true));
        } else {
            assert_eq!(shared, data);
        }
        // An installation that already keeps its cluster there stays.
        std::fs::create_dir_all(data.join("pg")).unwrap();
        assert_eq!(default_for(&data, true), data);
    }

    #[test]
    fn a_closed_data_dir_moves_its_shared_state_like_a_closed_parent() {
        // What `psbx serve --data-dir "$(mktemp -d)"` gives: a 0700 data
        // directory under an open parent.
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = top.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let shared = default_for(&data, true);
        if nix::unistd::geteuid().is_root() {
            assert!(shared.starts_with(ROOT_SHARED), "{}", shared.display());
        } else {
            assert_eq!(shared, data);
        }
        // Nobody else needs it (no boxes, an external database): it stays.
        assert_eq!(default_for(&data, false), data);
        // Open, it keeps everything itself.
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(default_for(&data, true), data);
    }

    #[test]
    fn a_shared_file_system_under_the_margin_stops_the_start() {
        let top = tempfile::tempdir().unwrap();
        let mut layout = Layout {
            data_dir: top.path(),
            shared_dir: top.path(),
            boxes: true,
            embedded_pg: true,
            disk_margin_gb: 0,
        };
        check_disk_room(&layout).unwrap();
        // More than any disk has free.
        layout.disk_margin_gb = 1 << 40;
        let e = check_disk_room(&layout).unwrap_err().to_string();
        assert!(
            e.contains("share a file system") && e.contains("boxes.disk_margin_gb"),
            "{e}"
        );
        // The database elsewhere, or no boxes: nothing to keep apart.
        check_disk_room(&Layout {
            embedded_pg: false,
            ..layout
        })
        .unwrap();
        check_disk_room(&Layout {
            boxes: false,
            ..layout
        })
        .unwrap();
    }

    #[test]
    fn an_open_data_dir_keeps_everything() {
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = top.path().join(".psbx");
        assert_eq!(closed_ancestor(&data), None);
        assert_eq!(default_for(&data, true), data);
    }
}
