//! Rebuilds when a migration changes and hashes `sql/` into `PSBX_MIGRATIONS_FINGERPRINT`.

use sha2::{Digest, Sha256};
use std::path::Path;

fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=sql");
    let mut files = Vec::new();
    collect(Path::new("sql"), &mut files)?;
    files.sort();
    let mut hash = Sha256::new();
    for file in files {
        hash.update(file.to_string_lossy().as_bytes());
        hash.update(std::fs::read(&file)?);
    }
    println!(
        "cargo:rustc-env=PSBX_MIGRATIONS_FINGERPRINT={}",
        hex::encode(&hash.finalize()[..8])
    );
    Ok(())
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}
