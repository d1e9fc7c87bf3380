//! Where shot files are kept: the [`ShotStorage`] interface (put, get,
//! delete by key) and its one implementation so far, [`DirStorage`], files
//! under a directory (`<data_dir>/shots` by default). An S3-compatible store
//! is another implementation of the same three calls.
//!
//! Keys are `<account>/<box>/<shot>.<part>`: letters, digits, `_`, `-`, `.`
//! and `/`, never `..`, so a key can never name a path outside the root.
//!
//! A shot's file arrives from the box in pieces and is written to a file
//! in the storage's spool ([`ShotStorage::spool`]) as it comes, never held
//! in memory whole; [`ShotStorage::put_file`] then takes it in (for
//! [`DirStorage`], a rename on the same file system).

use std::path::{Path, PathBuf};

/// What can go wrong storing or reading a file.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("no stored file {0}")]
    NotFound(String),
    #[error("{0:?} is not a storage key")]
    BadKey(String),
    #[error("shot storage {what} {key}: {source}")]
    Io {
        what: &'static str,
        key: String,
        #[source]
        source: std::io::Error,
    },
}

/// A place that keeps files by key.
#[async_trait::async_trait]
pub trait ShotStorage: Send + Sync + 'static {
    /// Stores `bytes` under `key`, replacing what was there; when it returns,
    /// the file is whole (never half written).
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StorageError>;
    /// The file under `key`.
    async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError>;
    /// The file under `key` to read in pieces (a recording is up to 200
    /// MiB: never held whole to be served), and its length.
    async fn open(&self, key: &str) -> Result<(u64, FileReader), StorageError>;
    /// Deletes the file under `key`; a missing file is not an error.
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
    /// A private directory for files on their way in, made when missing.
    async fn spool(&self) -> Result<PathBuf, StorageError>;
    /// Stores the file at `path` (written in [`ShotStorage::spool`], which
    /// it may move) under `key`, replacing what was there; whole or not at all.
    async fn put_file(&self, key: &str, path: &Path) -> Result<(), StorageError>;
    /// Deletes the spool's files older than `age` (left by a server that
    /// stopped mid-shot: a shot's files live there for minutes); how many.
    async fn clean_spool(&self, age: std::time::Duration) -> Result<usize, StorageError>;
}

/// A stored file being read.
pub type FileReader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// The spool's folder under a [`DirStorage`]'s root (no key starts with a dot).
const SPOOL: &str = ".spool";

/// Files under a directory, written to a temporary name and renamed.
pub struct DirStorage {
    root: PathBuf,
}

impl DirStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        let fine = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b))
            && key
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..");
        if !fine {
            return Err(StorageError::BadKey(key.to_owned()));
        }
        Ok(self.root.join(key))
    }
}

fn io<'k>(what: &'static str, key: &'k str) -> impl FnOnce(std::io::Error) -> StorageError + 'k {
    move |source| StorageError::Io {
        what,
        key: key.to_owned(),
        source,
    }
}

/// Makes `dir` and its parents, readable by this user only.
async fn private_dirs(dir: &Path) -> std::io::Result<()> {
    let mut builder = tokio::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    builder.create(dir).await
}

#[async_trait::async_trait]
impl ShotStorage for DirStorage {
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

    async fn spool(&self) -> Result<PathBuf, StorageError> {
        let dir = self.root.join(SPOOL);
        private_dirs(&dir)
            .await
            .map_err(io("making the folder of", SPOOL))?;
        Ok(dir)
    }

    async fn clean_spool(&self, age: std::time::Duration) -> Result<usize, StorageError> {
        let dir = self.root.join(SPOOL);
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io("listing", SPOOL)(e)),
        };
        let mut deleted = 0;
        while let Some(entry) = entries.next_entry().await.map_err(io("listing", SPOOL))? {
            let old = entry
                .metadata()
                .await
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|e| e >= age));
            if old && tokio::fs::remove_file(entry.path()).await.is_ok() {
                deleted += 1;
            }
        }
        Ok(deleted)
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

    #[tokio::test]
    async fn stores_reads_and_deletes_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(dir.path().join("shots"));
        storage
            .put("acct_a/box_b/shot_c.full", b"png".to_vec())
            .await
            .unwrap();
        assert_eq!(
            storage.get("acct_a/box_b/shot_c.full").await.unwrap(),
            b"png"
        );
        let (len, mut reader) = storage.open("acct_a/box_b/shot_c.full").await.unwrap();
        let mut read = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut read)
            .await
            .unwrap();
        assert_eq!((len, read.as_slice()), (3, b"png".as_slice()));
        let mode = std::fs::metadata(dir.path().join("shots/acct_a/box_b/shot_c.full"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        storage.delete("acct_a/box_b/shot_c.full").await.unwrap();
        storage.delete("acct_a/box_b/shot_c.full").await.unwrap();
        assert!(matches!(
            storage.get("acct_a/box_b/shot_c.full").await,
            Err(StorageError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn the_spool_keeps_files_on_their_way_in_and_loses_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(dir.path().join("shots"));
        let spool = storage.spool().await.unwrap();
        assert_eq!(spool, dir.path().join("shots/.spool"));
        std::fs::write(spool.join(".shot-a"), b"png").unwrap();
        std::fs::write(spool.join(".shot-b"), b"png").unwrap();
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(storage.clean_spool(day).await.unwrap(), 0);
        storage
            .put_file("acct_a/box_b/shot_c.full", &spool.join(".shot-a"))
            .await
            .unwrap();
        assert_eq!(
            storage.get("acct_a/box_b/shot_c.full").await.unwrap(),
            b"png"
        );
        assert_eq!(
            storage
                .clean_spool(std::time::Duration::ZERO)
                .await
                .unwrap(),
            1
        );
        assert!(std::fs::read_dir(&spool).unwrap().next().is_none());
    }

    #[tokio::test]
    async fn refuses_keys_that_leave_the_root() {
        let storage = DirStorage::new("/nonexistent/shots");
        for key in [
            "",
            "../x",
            "a/../../x",
            "/etc/passwd",
            "a//b",
            "a/./b",
            "a b",
            "a\\b",
        ] {
            assert!(
                matches!(storage.get(key).await, Err(StorageError::BadKey(_))),
                "{key:?}"
            );
        }
    }
}
