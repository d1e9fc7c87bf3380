//! What `psbx sync` sends from a working tree, as a tar stream: the files git
//! tracks plus new files `.gitignore` does not exclude (what `git ls-files
//! --cached --others --exclude-standard` lists, minus tracked files deleted
//! from disk), or exactly one commit's tree (`git archive`). Nothing else:
//! ignored files such as `.env` and `node_modules` stay on the machine.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error(
        "{0} is not inside a git work tree: sync sends what git tracks, so run it in a repository"
    )]
    NotARepo(String),
    #[error("git {args} failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error("packing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>, PackError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| PackError::Git {
            args: args.join(" "),
            stderr: format!("cannot run git: {e}"),
        })?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(PackError::Git {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// The top of the work tree `dir` is in.
pub fn work_tree(dir: &Path) -> Result<std::path::PathBuf, PackError> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])
        .map_err(|_| PackError::NotARepo(dir.display().to_string()))?;
    Ok(String::from_utf8_lossy(&top).trim().into())
}

/// The paths sync sends from the work tree (relative, in git's order).
pub fn selected_paths(top: &Path) -> Result<Vec<String>, PackError> {
    let listed = git(
        top,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?;
    let mut paths: Vec<String> = listed
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    paths.dedup();
    // Tracked files deleted from disk are listed by --cached but cannot be sent.
    paths.retain(|p| top.join(p).symlink_metadata().is_ok());
    Ok(paths)
}

/// Writes the tar of the work tree's selected files to `out`.
pub fn pack_work_tree(top: &Path, out: impl Write) -> Result<u64, PackError> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut count = 0;
    for path in selected_paths(top)? {
        let full = top.join(&path);
        let io = |source| PackError::Io {
            path: path.clone(),
            source,
        };
        // Submodules appear as directories: their own sync is their business.
        if full.is_dir()
            && !full
                .symlink_metadata()
                .map_err(io)?
                .file_type()
                .is_symlink()
        {
            continue;
        }
        builder.append_path_with_name(&full, &path).map_err(io)?;
        count += 1;
    }
    builder.finish().map_err(|source| PackError::Io {
        path: "(end of archive)".into(),
        source,
    })?;
    Ok(count)
}

/// Writes the tar of one commit's tree to `out`.
pub fn pack_commit(top: &Path, rev: &str, mut out: impl Write) -> Result<(), PackError> {
    if rev.starts_with('-') {
        return Err(PackError::Git {
            args: format!("archive {rev}"),
            stderr: "a revision cannot start with '-'".into(),
        });
    }
    let tar = git(top, &["archive", "--format=tar", rev])?;
    out.write_all(&tar).map_err(|source| PackError::Io {
        path: rev.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use psbx_tests::git::{sh, tar_names as names};

    #[test]
    fn sends_tracked_and_new_unignored_files_but_not_ignored_ones() {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q . && printf '.env\\nnode_modules/\\n' > .gitignore && echo tracked > a.txt \
             && mkdir -p src && echo code > src/main.rs && git add . && git commit -qm one \
             && echo new > untracked.txt && echo SECRET=1 > .env && mkdir node_modules \
             && echo x > node_modules/m.js && echo gone > gone.txt && git add gone.txt \
             && git commit -qm two && rm gone.txt",
        );
        let top = work_tree(&dir.path().join("src")).unwrap();
        let mut tar = Vec::new();
        let count = pack_work_tree(&top, &mut tar).unwrap();
        assert_eq!(
            names(&tar),
            [".gitignore", "a.txt", "src/main.rs", "untracked.txt"]
        );
        assert_eq!(count, 4);
    }

    #[test]
    fn a_commit_sends_exactly_its_tree() {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q . && echo one > a.txt && git add . && git commit -qm one \
             && echo two > b.txt && git add . && git commit -qm two && echo dirty > a.txt \
             && echo new > c.txt",
        );
        let mut tar = Vec::new();
        pack_commit(dir.path(), "HEAD~1", &mut tar).unwrap();
        assert_eq!(names(&tar), ["a.txt"]);
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut entry = archive
            .entries()
            .unwrap()
            .find(|e| e.as_ref().unwrap().path().unwrap().ends_with("a.txt"))
            .unwrap()
            .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
        assert_eq!(
            text, "one\n",
            "the commit's content, not the dirty work tree"
        );
        assert!(pack_commit(dir.path(), "--output=/tmp/x", Vec::new()).is_err());
        assert!(pack_commit(dir.path(), "nosuchrev", Vec::new()).is_err());
    }

    #[test]
    fn outside_a_repository_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let err = work_tree(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("not inside a git work tree"),
            "{err}"
        );
    }
}
