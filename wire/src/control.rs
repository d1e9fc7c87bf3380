//! The old home of [`Health`], kept only as a path: it is boxd's answer to
//! the `health` service and lives in [`crate::boxd`]. The server's
//! `actors` crate still imports it from here.

pub use crate::boxd::Health;
