//! The box API's stories in-process: the real app (`AppState::assemble`, as
//! `psbx serve` assembles it) on the fake hypervisor, whose boxes are served
//! by boxd's real services in this process (`world.rs`): real `sh -lc`, real
//! unpacking, real logs, no VM and no box network.
//!
//! Why: each of these stories booted a box under TCG in the serial VM queue
//! (`.config/nextest.toml`, group `vm`), though what they check is the
//! server's and boxd's behaviour, not the VM's. Here they run in seconds and
//! beside each other. One short story per path stays on a real box (each
//! module says which).
//!
//! Here rather than in tests/tests/: the test crate does not depend on the
//! server, actor and boxd crates, which an in-process server with boxd's
//! services needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod exec;
mod isolation;
mod mcp;
mod sync;
mod world;
