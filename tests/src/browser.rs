//! The browser side of the tests: scripts under `tests/browser/` run with
//! Node and playwright-core (installed there by `scripts/setup`) driving
//! Debian's Chromium, each taking its arguments as one JSON object and
//! printing one JSON object with what it saw.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Panics, saying what to run, when Chromium or playwright-core is missing.
pub fn require() {
    assert!(
        dir().join("node_modules/playwright-core").is_dir(),
        "tests/browser/node_modules/playwright-core is missing: run scripts/setup (npm ci in tests/browser)"
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").is_file(),
        "/usr/bin/chromium is missing: run scripts/setup (it installs Debian's chromium)"
    );
}

/// Runs `tests/browser/<script>` with `args` and parses what it printed; a
/// failing script fails the test with its stderr.
pub fn run_json(script: &str, args: &Value) -> Value {
    require();
    let out = Command::new("node")
        .arg(dir().join(script))
        .arg(args.to_string())
        .current_dir(dir())
        .output()
        .expect("running node (Node.js 20 is part of the machine)");
    assert!(
        out.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    crate::witness::assert_unseen(&format!("what the browser script {script} saw"), &printed);
    serde_json::from_str(printed.trim())
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}):\n{printed}"))
}
