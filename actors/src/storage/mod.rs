//! Where psbx keeps files: the [`Storage`] interface (put, get, open,
//! delete by key, and a spool for files on their way in) and its two
//! implementations. [`DirStorage`] keeps files under a directory on this
//! machine (`<data_dir>/shots` by default): right for one node.
//! [`S3Storage`] keeps them in a bucket of S3-compatible object storage
//! (`storage.s3`), so that every node of an installation reads what any
//! node stored (issue 33: a shot taken through one node is read through
//! another). Shots, recordings, previews, posters and reviewers' images go
//! through it (`crate::shots`); nothing above this module knows which
//! implementation it has.
//!
//! Keys are `<account>/<box>/<shot>.<part>` for shots: letters, digits, `_`,
//! `-`, `.` and `/`, in non-empty parts none of which starts with a dot
//! ([`check_key`]), so a key never names a path outside a directory's root
//! (no `..`) nor the storage's own files there (the spool, a file being
//! written), and reads the same as an object name in a bucket.
//!
//! A file that arrives in pieces (a shot's file from the box, up to 200 MiB)
//! is written to a file in the storage's spool ([`Storage::spool`], always a
//! directory on this machine) as it comes, never held in memory whole;
//! [`Storage::put_file`] then takes it in: for [`DirStorage`] a rename on
//! the same file system, for [`S3Storage`] an upload streamed from the file.

mod dir;
mod s3;

pub use dir::DirStorage;
pub use s3::{S3Settings, S3Storage};

use std::path::{Path, PathBuf};

/// What can go wrong storing or reading a file.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("no stored file {0}")]
    NotFound(String),
    #[error("{0:?} is not a storage key")]
    BadKey(String),
    #[error("storage {what} {key}: {source}")]
    Io {
        what: &'static str,
        key: String,
        #[source]
        source: std::io::Error,
    },
    /// The object storage refused or could not be reached (`reason` as the
    /// SDK tells it: the service's code and message, never a credential).
    #[error("object storage {what} {key}: {reason}")]
    Service {
        what: &'static str,
        key: String,
        reason: String,
    },
}

/// A place that keeps files by key.
#[async_trait::async_trait]
pub trait Storage: Send + Sync + 'static {
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
    /// The directory on this machine where files on their way in wait.
    fn spool_dir(&self) -> &Path;
    /// [`Storage::spool_dir`], made (private) when missing.
    async fn spool(&self) -> Result<PathBuf, StorageError> {
        private_dirs(self.spool_dir())
            .await
            .map_err(io("making the folder of", "the spool"))?;
        Ok(self.spool_dir().to_owned())
    }
    /// Stores the file at `path` (written in [`Storage::spool`]) under
    /// `key`, replacing what was there; whole or not at all. The file is
    /// gone from the spool once it is stored.
    async fn put_file(&self, key: &str, path: &Path) -> Result<(), StorageError>;
    /// Deletes the spool's files older than `age` (left by a server that
    /// stopped mid-shot: a shot's files live there for minutes); how many.
    async fn clean_spool(&self, age: std::time::Duration) -> Result<usize, StorageError> {
        let mut entries = match tokio::fs::read_dir(self.spool_dir()).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io("listing", "the spool")(e)),
        };
        let mut deleted = 0;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(io("listing", "the spool"))?
        {
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
}

/// A stored file being read.
pub type FileReader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// `key` when it is a storage key: ASCII letters, digits, `_`, `-`, `.` and
/// `/`, in non-empty parts none of which starts with a dot (so never `.`
/// or `..`); else [`StorageError::BadKey`].
pub fn check_key(key: &str) -> Result<&str, StorageError> {
    let fine = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b))
        && key
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.'));
    if fine {
        Ok(key)
    } else {
        Err(StorageError::BadKey(key.to_owned()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_leave_their_root() {
        // What every storage refuses is actors/tests/storage.rs's; more shapes here.
        for key in ["a/./b", "a/", "a/.b.partial", "a\\b", "a%2f..", "é"] {
            assert!(
                matches!(check_key(key), Err(StorageError::BadKey(_))),
                "{key:?}"
            );
        }
        for key in ["acct_a/box_b/shot_c.full", "a/b.preview.png", "a..b"] {
            assert_eq!(check_key(key).unwrap(), key);
        }
    }
}
