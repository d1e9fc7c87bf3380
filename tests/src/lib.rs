//! The harness psbx's tests share, and (under `tests/`) the end-to-end tests.
//!
//! * [`TestDatabase`] — a fresh, migrated database per test on the PostgreSQL
//!   cluster `scripts/test` starts (`PSBX_TEST_DATABASE_URL`), dropped when the
//!   value is dropped, also when the test fails.
//! * [`binary`] and [`ServerProcess`] — the workspace's built binaries, and a
//!   `psbx serve` child that is stopped when dropped.
//! * [`vm`] — a server running real (TCG) boxes from the test image, with a
//!   guard that removes their libvirt domains whatever happens.
//! * [`wait`] — polling a check until a deadline, from sync and async tests.
//! * [`log`] — a child's log lines, and waits for a line to appear.
//! * [`api`] — REST calls with a bearer key.
//! * [`dev`] — the user's dev network for environment tests: the REST calls
//!   they make, the real connector in a namespace, the connections held there.
//! * [`git`] — repositories made by a shell script, and the names in a tar stream.
//! * [`python`] — the Python MCP clients under `tests/mcp/`, run with the venv.
//! * [`browser`] — the Playwright scripts under `tests/browser/`, driving
//!   Debian's Chromium.
//! * [`witness`] — the secret values and tokens tests created, and the check
//!   that no answer, log or box console shows them.
//!
//! A missing prerequisite panics with a message that says what is missing and
//! how to get it: a test never passes by skipping.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod api;
pub mod aws;
pub mod browser;
mod database;
pub mod dev;
pub mod git;
pub mod log;
pub mod netns;
mod process;
pub mod python;
pub mod vm;
pub mod wait;
pub mod witness;

pub use database::TestDatabase;
pub use process::{ServerProcess, binary};

/// A free TCP port on the host's loopback (free when asked: a test binds it
/// soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}
