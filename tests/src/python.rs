//! The Python side of the tests: scripts under `tests/mcp/` run with the
//! project's venv (made by `scripts/setup`, with the official `mcp` SDK), each
//! printing one JSON object with what it saw.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// The venv's interpreter.
pub fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    assert!(
        venv.is_file(),
        "{} is missing: run scripts/setup (it makes the venv with the mcp package)",
        venv.display()
    );
    venv
}

/// Fails the test, naming them, unless the venv's Python imports each of
/// `modules` (a missing prerequisite is a failure that says what to do,
/// never a skip).
pub fn require_modules(modules: &[&str]) {
    let missing: Vec<&str> = modules
        .iter()
        .copied()
        .filter(|m| {
            !Command::new(python())
                .args(["-c", &format!("import {m}")])
                .output()
                .is_ok_and(|out| out.status.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the venv's Python ({}) lacks {}: run scripts/setup (it installs the test's Python packages)",
        python().display(),
        missing.join(", ")
    );
}

/// Runs `tests/mcp/<script>` with `args` and parses what it printed; a failing
/// script fails the test with its stderr.
pub fn run_json(script: &str, args: &[&str]) -> Value {
    run_json_in("mcp", script, args)
}

/// [`run_json`] for a script in another directory under `tests/` (`aws`).
pub fn run_json_in(dir: &str, script: &str, args: &[&str]) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join(script);
    let out = Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    crate::witness::assert_unseen(&format!("what {dir}/{script} printed"), &printed);
    crate::witness::tokens_in(&printed);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
