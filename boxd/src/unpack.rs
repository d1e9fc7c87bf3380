//! Unpacking a sync's tar stream under `/work/<dest>`: entries with absolute
//! paths or `..`, links whose target leaves the destination, and special files
//! are refused (the whole sync stops with an error naming the entry). Writing
//! through a link planted earlier in the archive is refused by the tar crate's
//! `unpack_in`, which checks every parent directory stays inside.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

#[derive(Debug)]
pub struct Unpacked {
    pub files: u64,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("refused {entry:?}: {why}")]
    Refused { entry: String, why: &'static str },
    #[error("the destination {0:?} must be a relative path inside /work without '..'")]
    BadDest(String),
    #[error("reading the archive: {0}")]
    Io(#[from] std::io::Error),
}

/// A relative path without `..`, `.` prefixes or roots, or `None`.
fn clean_relative(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Where a link at `entry` pointing at `target` lands, relative to the
/// destination; `None` when it leaves it.
fn link_inside(entry: &Path, target: &Path) -> Option<PathBuf> {
    if target.is_absolute() {
        return None;
    }
    let mut at: Vec<std::ffi::OsString> = entry
        .parent()
        .map(|p| p.components().map(|c| c.as_os_str().to_owned()).collect())
        .unwrap_or_default();
    for part in target.components() {
        match part {
            Component::Normal(p) => at.push(p.to_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(at.iter().collect())
}

/// Unpacks `archive` under `root/dest` (created if needed).
pub fn unpack(archive: impl Read, root: &Path, dest: &str) -> Result<Unpacked, UnpackError> {
    let rel =
        clean_relative(Path::new(dest)).ok_or_else(|| UnpackError::BadDest(dest.to_owned()))?;
    let target = root.join(rel);
    std::fs::create_dir_all(&target)?;
    let mut archive = tar::Archive::new(archive);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut done = Unpacked { files: 0, bytes: 0 };
    for entry in archive.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        let path = entry.path()?.into_owned();
        let name = path.display().to_string();
        let refuse = |why| UnpackError::Refused {
            entry: name.clone(),
            why,
        };
        if clean_relative(&path).is_none() {
            return Err(refuse("absolute paths and '..' are not allowed"));
        }
        if kind.is_symlink() || kind.is_hard_link() {
            let link = entry
                .link_name()?
                .ok_or_else(|| refuse("a link without a target"))?
                .into_owned();
            let lands = if kind.is_hard_link() {
                clean_relative(&link)
            } else {
                link_inside(&path, &link)
            };
            if lands.is_none() {
                return Err(refuse("the link points outside the destination"));
            }
        } else if !(kind.is_file() || kind.is_dir() || kind.is_contiguous()) {
            return Err(refuse("only files, directories and links are synced"));
        }
        if !entry.unpack_in(&target)? {
            return Err(refuse("it would be written outside the destination"));
        }
        if kind.is_file() || kind.is_contiguous() {
            done.files += 1;
            done.bytes += entry.header().size()?;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, body: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // set_path refuses '..'; write the raw name to test hostile archives.
        h.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, body).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str, kind: tar::EntryType) {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_entry_type(kind);
        h.set_path(path).unwrap();
        h.set_link_name(target).unwrap();
        h.set_cksum();
        b.append(&h, &[][..]).unwrap();
    }

    #[test]
    fn unpacks_files_under_the_destination() {
        let root = tempfile::tempdir().unwrap();
        let tar = archive(|b| {
            file(b, "a.txt", b"hello");
            file(b, "src/main.rs", b"fn main() {}");
            link(b, "src/alias", "main.rs", tar::EntryType::Symlink);
        });
        let done = unpack(tar.as_slice(), root.path(), "repo").unwrap();
        assert_eq!((done.files, done.bytes), (2, 17));
        assert_eq!(
            std::fs::read(root.path().join("repo/a.txt")).unwrap(),
            b"hello"
        );
        assert_eq!(
            std::fs::read(root.path().join("repo/src/alias")).unwrap(),
            b"fn main() {}"
        );
    }

    #[test]
    fn refuses_escapes() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("dotdot", archive(|b| file(b, "../evil", b"x"))),
            ("absolute", archive(|b| file(b, "/etc/evil", b"x"))),
            (
                "symlink out",
                archive(|b| link(b, "out", "../../etc", tar::EntryType::Symlink)),
            ),
            (
                "absolute symlink",
                archive(|b| link(b, "out", "/etc/passwd", tar::EntryType::Symlink)),
            ),
            (
                "hardlink out",
                archive(|b| link(b, "h", "../x", tar::EntryType::Link)),
            ),
        ];
        for (what, tar) in cases {
            let root = tempfile::tempdir().unwrap();
            let err = unpack(tar.as_slice(), &root.path().join("work"), "repo").unwrap_err();
            assert!(matches!(err, UnpackError::Refused { .. }), "{what}: {err}");
            assert!(!root.path().join("evil").exists() && !root.path().join("work/out").exists());
        }
        let root = tempfile::tempdir().unwrap();
        for bad in ["../x", "/abs", "a/../../b"] {
            assert!(
                matches!(
                    unpack(&[][..], root.path(), bad),
                    Err(UnpackError::BadDest(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn links_inside_are_resolved_lexically() {
        assert_eq!(
            link_inside(Path::new("a/b/l"), Path::new("../c")),
            Some(PathBuf::from("a/c"))
        );
        assert_eq!(link_inside(Path::new("l"), Path::new("../c")), None);
        assert_eq!(link_inside(Path::new("a/l"), Path::new("/c")), None);
    }
}
