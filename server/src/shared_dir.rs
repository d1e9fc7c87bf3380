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
//! 4. that `/var/lib/psbx/data-<hash>` when psbx runs as root and a directory
//!    above the data directory cannot be entered by other users (a clone in
//!    `/root`, or under any 0700 parent);
//! 5. else the data directory itself.
//!
//! [`check_reachable`] then stops a server whose shared directory others
//! still cannot reach, naming the directory and the command that fixes it.
//! It reads the "others" permission bits only: ACLs and group membership are
//! not consulted (a directory open to others through them is reported too).

use crate::config::Config;
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
    #[error("reading {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// The shared directory for an absolute `data_dir` (rules 2–5 above).
pub fn default_for(data_dir: &Path) -> PathBuf {
    let relocated = relocated(data_dir);
    if relocated.is_dir() {
        return relocated;
    }
    let holds_state = ["pg", "boxes", "images"]
        .iter()
        .any(|d| data_dir.join(d).exists());
    if !holds_state && nix::unistd::geteuid().is_root() && closed_ancestor(data_dir).is_some() {
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
pub fn prepare(config: &Config) -> Result<(), SharedDirError> {
    let dir = config.shared_dir();
    std::fs::create_dir_all(dir).map_err(|e| SharedDirError::Io(dir.to_owned(), e))?;
    if dir != config.data_dir {
        // Only psbx reads the data directory now.
        std::fs::set_permissions(&config.data_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| SharedDirError::Io(config.data_dir.clone(), e))?;
        let note = dir.join("DATA_DIR");
        let text = format!(
            "This directory holds the state of the psbx installation whose data directory is\n{}\n",
            config.data_dir.display()
        );
        std::fs::write(&note, text).map_err(|e| SharedDirError::Io(note, e))?;
    }
    check_reachable(config)
}

/// Stops with the directory to open when other users cannot reach the
/// shared directory.
pub fn check_reachable(config: &Config) -> Result<(), SharedDirError> {
    let dir = config.shared_dir();
    let blocked = closed_ancestor(&dir.join("x"));
    let Some((blocked, mode)) = blocked else {
        return Ok(());
    };
    if config.boxes.enabled {
        return Err(SharedDirError::Unreachable {
            who: "libvirt's QEMU processes",
            dir: blocked,
            mode,
            what: "box images and disks",
        });
    }
    if config.database_url.is_none() && nix::unistd::geteuid().is_root() {
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
        let shared = default_for(&data);
        if nix::unistd::geteuid().is_root() {
            assert!(shared.starts_with(ROOT_SHARED), "{}", shared.display());
            assert_eq!(shared, default_for(&data), "not stable");
            assert_ne!(shared, default_for(&closed.join("other/.psbx")));
        } else {
            assert_eq!(shared, data);
        }
        // An installation that already keeps its cluster there stays.
        std::fs::create_dir_all(data.join("pg")).unwrap();
        assert_eq!(default_for(&data), data);
    }

    #[test]
    fn an_open_data_dir_keeps_everything() {
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = top.path().join(".psbx");
        assert_eq!(closed_ancestor(&data), None);
        assert_eq!(default_for(&data), data);
    }
}
