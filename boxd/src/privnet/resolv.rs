//! `/etc/resolv.conf`, rewritten at boot to name boxd's DNS only, keeping the
//! `search`, `domain` and `options` lines of the image's version (kept in
//! `/run/psbx/resolv.conf.orig` the first time, so a restarted boxd still
//! finds them). Its `nameserver`s are dropped: the box reaches no resolver
//! but through boxd.

use super::addresses::DNS_ADDR;
use super::error::SetupError;
use std::path::{Path, PathBuf};

/// Where the file is, and where its first version is kept.
#[derive(Debug, Clone)]
pub struct ResolvPaths {
    pub conf: PathBuf,
    pub saved: PathBuf,
}

impl Default for ResolvPaths {
    fn default() -> Self {
        Self {
            conf: PathBuf::from("/etc/resolv.conf"),
            saved: PathBuf::from("/run/psbx/resolv.conf.orig"),
        }
    }
}

/// The resolv.conf that names boxd's DNS only.
pub fn rewritten(text: &str) -> String {
    let mut out = format!(
        "# Written by psbx's boxd: {DNS_ADDR} answers the environment's host names\n\
         # and forwards every other name to psbx's resolvers.\n\
         nameserver {DNS_ADDR}\n"
    );
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or_default();
        if matches!(first, "search" | "domain" | "options") {
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    out
}

/// Rewrites the file from its first version (replacing it, not writing
/// through a symlink such as systemd-resolved's).
pub fn take_over(paths: &ResolvPaths) -> Result<(), SetupError> {
    let original = match std::fs::read_to_string(&paths.saved) {
        Ok(text) => text,
        Err(_) => {
            let text = std::fs::read_to_string(&paths.conf).unwrap_or_default();
            write_replacing(&paths.saved, &text).map_err(|source| SetupError::KeepResolv {
                path: paths.saved.clone(),
                source,
            })?;
            text
        }
    };
    write_replacing(&paths.conf, &rewritten(&original)).map_err(|source| SetupError::WriteResolv {
        path: paths.conf.clone(),
        source,
    })
}

/// Writes `path` through a file beside it renamed over it.
fn write_replacing(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".psbx-new");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, text)?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN: &str = "# from dhcp\ndomain corp.example\nsearch corp.example lan\n\
                          nameserver 10.0.0.2\nnameserver 2001:db8::53\nnameserver fe80::1%eth0\n\
                          options edns0 timeout:2\n";

    #[test]
    fn the_rewrite_names_boxd_and_keeps_search_and_options() {
        let text = rewritten(DEBIAN);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "nameserver 198.18.0.1",
                "domain corp.example",
                "search corp.example lan",
                "options edns0 timeout:2"
            ]
        );
    }

    #[test]
    fn taking_over_keeps_the_first_version_and_replaces_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let stub = dir.path().join("stub-resolv.conf");
        std::fs::write(&stub, "nameserver 127.0.0.53\nsearch lan\n").unwrap();
        let conf = dir.path().join("resolv.conf");
        std::os::unix::fs::symlink(&stub, &conf).unwrap();
        let paths = ResolvPaths {
            conf: conf.clone(),
            saved: dir.path().join("run/resolv.conf.orig"),
        };
        take_over(&paths).unwrap();
        assert!(!conf.is_symlink());
        assert!(
            std::fs::read_to_string(&conf)
                .unwrap()
                .contains("nameserver 198.18.0.1\nsearch lan\n")
        );
        assert_eq!(
            std::fs::read_to_string(&stub).unwrap(),
            "nameserver 127.0.0.53\nsearch lan\n"
        );
        // Again (a restarted boxd, the file already rewritten): from the kept copy.
        take_over(&paths).unwrap();
        assert!(
            std::fs::read_to_string(&conf)
                .unwrap()
                .contains("nameserver 198.18.0.1\nsearch lan\n")
        );
    }
}
