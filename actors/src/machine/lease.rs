//! Whether this node may act on its host's boxes: it holds the host's lease
//! in PostgreSQL (`store/hosts.rs`), renewed by `host/lease.rs`. When a
//! renewal has not succeeded within the lease's time, other nodes already
//! answer for the host's boxes with 503 `host_unavailable`; this node does
//! the same, and its timers and pressure do nothing, until it holds the
//! lease again (the fence of issue 33: never two nodes acting on one box,
//! never a box acted on that its row says is elsewhere).
//!
//! A flag rather than a message to an actor: every call naming a box and
//! every timer reads it, and nothing needs ordering between them.

use crate::error::BoxError;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// The lease of one host, as this node last knew it.
#[derive(Debug)]
pub struct HostLease {
    host: String,
    held: AtomicBool,
    epoch: AtomicI64,
    /// Cleared when the node is told to stop: its renewals publish no room,
    /// so no new box is placed here while what is under way finishes.
    placing: AtomicBool,
}

impl HostLease {
    /// Held at `epoch` (just taken).
    pub fn held(host: &str, epoch: i64) -> Self {
        Self {
            host: host.to_owned(),
            held: AtomicBool::new(true),
            epoch: AtomicI64::new(epoch),
            placing: AtomicBool::new(true),
        }
    }

    /// Whether new boxes may be placed on the host.
    pub fn placing(&self) -> bool {
        self.placing.load(Ordering::Acquire)
    }

    /// No more placements here (a stop under way).
    pub fn stop_placing(&self) {
        self.placing.store(false, Ordering::Release);
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// `Ok` while the lease is held; else the error every call on the
    /// host's boxes answers (503 `host_unavailable`).
    pub fn check(&self) -> Result<(), BoxError> {
        if self.is_held() {
            Ok(())
        } else {
            Err(BoxError::HostUnavailable(self.host.clone()))
        }
    }

    /// The lease ran out before a renewal succeeded: stop acting.
    pub fn lapse(&self) -> bool {
        self.held.swap(false, Ordering::AcqRel)
    }

    /// Renewed (after a lapse: acting again).
    pub fn renewed(&self) -> bool {
        !self.held.swap(true, Ordering::AcqRel)
    }
}
