//! Box images as the image scripts leave them: a directory with a
//! `manifest.json` naming the kernel, initrd, base disk and kernel command line.

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Image {
    pub name: String,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub disk: PathBuf,
    pub cmdline: String,
}

#[derive(Deserialize)]
struct Manifest {
    kernel: String,
    initrd: String,
    disk: String,
    cmdline: String,
}

#[derive(Debug, thiserror::Error)]
#[error("image {name:?} in {dir}: {reason}")]
pub struct ImageError {
    pub name: String,
    pub dir: PathBuf,
    pub reason: String,
}

impl Image {
    /// Reads `<images_dir>/<name>/manifest.json` and checks its files exist.
    pub fn load(images_dir: &Path, name: &str) -> Result<Self, ImageError> {
        let dir = images_dir.join(name);
        let fail = |reason: String| ImageError {
            name: name.to_owned(),
            dir: dir.clone(),
            reason,
        };
        if name.is_empty() || name.contains(['/', '.']) {
            return Err(fail(
                "an image name is a plain word such as `test` or `debian`".into(),
            ));
        }
        let text = std::fs::read_to_string(dir.join("manifest.json")).map_err(|e| {
            fail(format!(
                "cannot read manifest.json ({e}); build it with scripts/image/{name} {} <boxd>",
                dir.display()
            ))
        })?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| fail(format!("bad manifest.json: {e}")))?;
        let image = Self {
            name: name.to_owned(),
            kernel: dir.join(manifest.kernel),
            initrd: dir.join(manifest.initrd),
            disk: dir.join(manifest.disk),
            cmdline: manifest.cmdline,
        };
        for file in [&image.kernel, &image.initrd, &image.disk] {
            if !file.is_file() {
                return Err(fail(format!("{} is missing", file.display())));
            }
        }
        Ok(image)
    }
}
