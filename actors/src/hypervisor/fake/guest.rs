//! The hook through which a test puts a real boxd's services behind the fake
//! domains ([`FakeHypervisor::serve_guests_with`](super::FakeHypervisor::serve_guests_with)):
//! a [`GuestBoxd`] makes a [`Guest`] for each boot of a domain, and the
//! fake's boxd hands it every stream it does not answer itself (it keeps
//! `info` with the domain's boot id, `health`, `clock`, `port:<n>` and
//! `shot`, and a `configure` refused on purpose).
//!
//! Why a hook: the server's in-process tests run the box API's stories
//! (exec, sync, logs, what another account may not touch) against boxd's real
//! service dispatcher (`boxd::in_process`), but the actors crate must not
//! depend on boxd. The tests wire one to the other.
//!
//! A guest lives for one boot: made at the first connection to a domain in a
//! new boot, kept across pauses and managed saves (the memory, and so the
//! processes, are kept), halted when the domain shuts off without a save or
//! is removed, or when the next boot begins.

use psbx_wire::mux::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A stream being served, to its end.
pub type Serving = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What serves the streams of one boot of a domain.
pub trait Guest: Send + Sync {
    /// Serves one stream of a session with the domain.
    fn serve(&self, incoming: Incoming) -> Serving;
    /// The boot ended: ends what still runs in it.
    fn halt(&self);
}

/// What makes a [`Guest`] for each boot of a domain.
pub trait GuestBoxd: Send + Sync {
    /// Domain `domain` begins boot `boot_id`: its services.
    fn boot(&self, domain: &str, boot_id: &str) -> Arc<dyn Guest>;
}

/// The guest of one domain's boot.
#[derive(Clone)]
pub(super) struct Booted {
    pub boot_id: String,
    pub guest: Arc<dyn Guest>,
}

/// The services the fake's own boxd keeps when a guest serves the rest.
pub(super) fn fake_answers(target: &str) -> bool {
    matches!(target, "info" | "health" | "clock" | "shot") || target.starts_with("port:")
}
