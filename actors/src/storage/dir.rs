//! Files under a directory on this machine: the storage of one node, and
//! the default (`<data_dir>/shots`, or `shots_dir`). Each file is written to
//! a temporary name beside its place and renamed, so a reader never sees
//! half a file; the spool is `.spool` under the same root, so a spooled
//! file is taken in by a rename on the same file system.

use super::{FileReader, Storage, StorageError, check_key, io, private_dirs};
use std::path::{Path, PathBuf};

/// The spool's folder under a [`DirStorage`]'s root (no key starts with a dot).
const SPOOL: &str = ".spool";

/// Files under a directory, written to a temporary name and renamed.
pub struct DirStorage {
    root: PathBuf,
    spool: PathBuf,
}

impl DirStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            spool: root.join(SPOOL),
            root,
        }
    }

    fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        Ok(self.root.join(check_key(key)?))
    }
}

#[async_trait::async_trait]
impl Storage for DirStorage {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StorageError> {
        use tokio::io::AsyncWriteExt;
        let path = self.path(key)?;
        if let Some(dir) = path.parent() {
            private_dirs(dir)
                .await
                .map_err(io("making the folder of", key))?;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let partial = path.with_file_name(format!(".{name}.partial"));
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .await
            .map_err(io("creating", key))?;
        file.write_all(&bytes).await.map_err(io("writing", key))?;
        file.sync_all().await.map_err(io("syncing", key))?;
        drop(file);
        tokio::fs::rename(&partial, &path)
            .await
            .map_err(io("renaming", key))
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        let path = self.path(key)?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(StorageError::NotFound(key.to_owned()))
            }
            Err(e) => Err(io("reading", key)(e)),
        }
    }

    async fn open(&self, key: &str) -> Result<(u64, FileReader), StorageError> {
        let path = self.path(key)?;
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StorageError::NotFound(key.to_owned()));
            }
            Err(e) => return Err(io("opening", key)(e)),
        };
        let len = file.metadata().await.map_err(io("reading", key))?.len();
        Ok((len, Box::new(file)))
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path(key)?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("deleting", key)(e)),
        }
    }

    fn spool_dir(&self) -> &Path {
        &self.spool
    }

    async fn put_file(&self, key: &str, from: &Path) -> Result<(), StorageError> {
        let path = self.path(key)?;
        if let Some(dir) = path.parent() {
            private_dirs(dir)
                .await
                .map_err(io("making the folder of", key))?;
        }
        let file = tokio::fs::File::open(from)
            .await
            .map_err(io("opening the spooled", key))?;
        file.sync_all().await.map_err(io("syncing", key))?;
        drop(file);
        // The spool is under the root: one file system, so a rename.
        tokio::fs::rename(from, &path)
            .await
            .map_err(io("moving in", key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The rest of the contract is actors/tests/storage.rs's, for both storages.
    #[tokio::test]
    async fn files_are_this_users_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(dir.path().join("shots"));
        storage
            .put("acct_a/box_b/shot_c.full", b"png".to_vec())
            .await
            .unwrap();
        let mode = |path: &str| {
            std::fs::metadata(dir.path().join(path))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        storage.spool().await.unwrap();
        assert_eq!(mode("shots/acct_a/box_b/shot_c.full"), 0o600);
        assert_eq!(mode("shots/acct_a/box_b"), 0o700);
        assert_eq!(mode("shots/.spool"), 0o700);
    }

    #[tokio::test]
    async fn the_spool_is_under_the_root_for_a_rename() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(dir.path().join("shots"));
        assert_eq!(
            storage.spool().await.unwrap(),
            dir.path().join("shots/.spool")
        );
    }
}
