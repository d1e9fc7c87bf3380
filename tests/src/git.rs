//! Git repositories made by tests: a shell script run in a directory with a
//! fixed author (so commits work on a machine without git configuration), a
//! copy of a directory of the project to make one from, and the file names of
//! a tar stream, for comparing what a sync packed.

use std::path::Path;
use std::process::Command;

/// Runs `script` with `sh -c` in `dir`; fails the test when it fails. Its stdout.
pub fn sh(dir: &Path, script: &str) -> Vec<u8> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("running sh");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Copies the directory `from` to `to` (made), without Python's caches.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("making the copy's directory");
    for entry in std::fs::read_dir(from).expect("reading the directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), target).expect("copying a file");
        }
    }
}

/// The sorted names of the files (not directories) in a tar stream.
pub fn tar_names(tar_bytes: &[u8]) -> Vec<String> {
    let mut archive = tar::Archive::new(tar_bytes);
    let mut names: Vec<String> = archive
        .entries()
        .expect("a tar stream")
        .map(|e| e.expect("a tar entry"))
        .filter(|e| !e.header().entry_type().is_pax_global_extensions())
        .map(|e| e.path().expect("a path").display().to_string())
        .filter(|n| !n.ends_with('/'))
        .collect();
    names.sort();
    names
}
