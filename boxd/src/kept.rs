//! What a claim leaves under `/run/psbx/` for a boxd restarted in the same
//! boot (it crashed, was killed): `/run` is a tmpfs, so a file there outlives
//! boxd but not the box's boot. Each file is JSON, written whole through a
//! file beside it renamed over it, readable by root only — it holds what boxd
//! holds in memory anyway (the environment of commands, secrets included; the
//! background commands; the environment's addresses, `privnet/saved.rs`).
//! Where the first two are is `crate::settings`'s (`env_file`,
//! `processes_file`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// Writes `value` to `path`, mode 0600, replacing it whole.
pub fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".psbx-new");
    let temporary = PathBuf::from(temporary);
    let _ = std::fs::remove_file(&temporary);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    out.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
    out.sync_all()?;
    std::fs::rename(&temporary, path)
}

/// Writes `value` to `path` like [`write`]; a failure is reported on stderr
/// as `what` that could not be kept: what boxd was doing goes on either way,
/// only a restarted boxd would miss it.
pub fn keep<T: Serialize>(path: &Path, value: &T, what: &str) {
    if let Err(e) = write(path, value) {
        eprintln!("boxd: cannot keep {what} in {}: {e}", path.display());
    }
}

/// What [`read`] (or a reader built on it) found at `path`, with a file that
/// cannot be used reported on stderr and taken as none: boxd serves without
/// it rather than stopping over it.
pub fn usable<T>(path: &Path, found: Result<Option<T>, String>) -> Option<T> {
    found.unwrap_or_else(|e| {
        eprintln!("boxd: ignoring {}: {e}", path.display());
        None
    })
}

/// What is kept at `path`: `Ok(None)` when nothing is, an error when the
/// file cannot be read or parsed.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_kept_value_reads_back_and_only_root_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/psbx/env.json");
        assert_eq!(read::<Vec<(String, String)>>(&path), Ok(None));
        let env = vec![("TOKEN".to_owned(), "s3cret\nline".to_owned())];
        write(&path, &env).unwrap();
        assert_eq!(read(&path), Ok(Some(env.clone())));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Written again (replaced whole), nothing is left beside it.
        write(&path, &env).unwrap();
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["env.json"]);
        std::fs::write(&path, b"[[").unwrap();
        assert!(read::<Vec<(String, String)>>(&path).is_err());
    }
}
