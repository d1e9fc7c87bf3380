//! Installs the takeover page's npm packages (`web/package.json`, locked by
//! `web/package-lock.json`: xterm.js and its fit addon) into
//! `$OUT_DIR/web/node_modules` with `npm ci`, for `include_bytes!` in
//! `src/routes/takeover/assets.rs`. npm runs only when the lock file
//! changed since the last install (a stamp file holds the lock it
//! installed): the packages are bundled at build time, and no CDN is asked
//! at run time.

use std::path::Path;
use std::process::Command;

const FILES: [&str; 2] = ["package.json", "package-lock.json"];
/// A file every install has; missing, npm runs again.
const WITNESS: &str = "node_modules/@xterm/xterm/lib/xterm.js";

fn main() {
    for file in FILES {
        println!("cargo:rerun-if-changed=web/{file}");
    }
    if let Err(e) = install() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn install() -> Result<(), String> {
    let out = std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?;
    let web = Path::new(&out).join("web");
    std::fs::create_dir_all(&web).map_err(|e| format!("making {}: {e}", web.display()))?;
    let lock = std::fs::read("web/package-lock.json")
        .map_err(|e| format!("reading server/web/package-lock.json: {e}"))?;
    let stamp = web.join("installed.stamp");
    if std::fs::read(&stamp).ok().as_deref() == Some(&lock[..]) && web.join(WITNESS).is_file() {
        return Ok(());
    }
    for file in FILES {
        std::fs::copy(Path::new("web").join(file), web.join(file))
            .map_err(|e| format!("copying server/web/{file}: {e}"))?;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&web)
        .status()
        .map_err(|e| {
            format!(
                "cannot run npm ({e}): building psbx needs Node.js and npm to bundle the \
                 takeover terminal (xterm.js); install them (Debian: apt-get install npm) \
                 and build again"
            )
        })?;
    if !status.success() {
        return Err(format!(
            "npm ci in {} failed ({status}): the takeover page's packages could not be \
             installed; check that the npm registry is reachable",
            web.display()
        ));
    }
    if !web.join(WITNESS).is_file() {
        return Err(format!("npm ci did not install {WITNESS}"));
    }
    std::fs::write(&stamp, &lock).map_err(|e| format!("writing {}: {e}", stamp.display()))
}
