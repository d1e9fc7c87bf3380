//! The live wire session to the server, for the streams boxd opens itself
//! (`env:<host>:<port>`). `serve.rs` puts each new session here as it comes up
//! and takes it away when it ends; each one gets a new generation number, so a
//! connection can tell that the session it was opened over is gone (a thaw, a
//! server restart) and reset the box's side at once instead of hanging.

use psbx_wire::mux::Session;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// One session and its generation.
#[derive(Clone)]
pub struct Live {
    pub generation: u64,
    pub session: Session,
}

/// The current session, shared by every entry (cheap to clone).
#[derive(Clone)]
pub struct Uplink {
    current: Arc<watch::Sender<Option<Live>>>,
    next: Arc<AtomicU64>,
}

impl Default for Uplink {
    fn default() -> Self {
        Self {
            current: Arc::new(watch::Sender::new(None)),
            next: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl Uplink {
    /// A new session is up: it replaces the previous one.
    pub fn set(&self, session: Session) {
        let generation = self.next.fetch_add(1, Ordering::Relaxed);
        self.current.send_replace(Some(Live {
            generation,
            session,
        }));
    }

    /// The session has ended.
    pub fn clear(&self) {
        self.current.send_replace(None);
    }

    /// The current session, waiting up to `wait` for one (between the end of
    /// one session and the next, say right after a thaw).
    pub async fn current(&self, wait: Duration) -> Option<Live> {
        let mut rx = self.current.subscribe();
        match tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await {
            Ok(Ok(live)) => live.clone(),
            _ => None,
        }
    }

    /// Resolves once session `generation` is no longer the current one.
    pub async fn gone(&self, generation: u64) {
        let mut rx = self.current.subscribe();
        let _ = rx
            .wait_for(|live| live.as_ref().map(|l| l.generation) != Some(generation))
            .await;
    }
}

/// A session pair for tests: boxd's end in an uplink, and the server's end,
/// which hands every stream boxd opens to `answer`.
#[cfg(test)]
pub async fn test_server(answer: fn(psbx_wire::mux::Incoming)) -> (Uplink, Session) {
    let (server, boxd) = psbx_wire::testing::session_pair(
        psbx_wire::mux::Config::default(),
        psbx_wire::mux::Config::default(),
        1 << 16,
    )
    .await
    .unwrap();
    let accepting = server.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            answer(incoming);
        }
    });
    let uplink = Uplink::default();
    uplink.set(boxd);
    (uplink, server)
}
