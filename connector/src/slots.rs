//! One session slot: keeps one wire session to the server open, serving
//! the streams the server opens on it, and reconnects with jittered
//! backoff when it ends. `PSBX_SESSIONS` slots run side by side, each on
//! its own.
//!
//! When the server says `GOAWAY` (it is being redeployed), the slot opens a
//! replacement session at once and leaves the old one to finish its
//! streams, for at most an hour. On shutdown every session says `GOAWAY`
//! and closes.
//!
//! Logs one line per change of a session: connected, draining, closed
//! (with the reason and the delay before the next attempt).

use std::sync::Arc;
use std::time::Duration;

use psbx_wire::{Config, Hello, Role, Session, SessionError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::backoff::{Backoff, HEALTHY};
use crate::streams::Streams;
use crate::transport::{self, ConnectError, Connector};

/// How long a session the server is draining may keep its streams.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(3600);
/// How long a session closing at shutdown may take to flush.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What all slots share.
pub struct Slots {
    pub connector: Connector,
    pub streams: Arc<Streams>,
    pub shutdown: CancellationToken,
    /// Every task started for a session (streams, draining sessions), so
    /// that shutdown can wait for them briefly.
    pub tasks: TaskTracker,
}

/// How a served session ended.
enum End {
    /// The server sent `GOAWAY`: replace the session, let this one drain.
    GoAway(String),
    /// The session ended.
    Closed(Result<(), SessionError>),
    /// The connector is stopping.
    Shutdown,
}

/// Why a session could not be set up.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("wire session: {0}")]
    Session(#[from] SessionError),
}

impl Slots {
    /// Runs slot `slot` (numbered from 1) until shutdown.
    pub async fn run(self: Arc<Self>, slot: usize) {
        let mut backoff = Backoff::default();
        loop {
            let attempt = tokio::select! {
                r = self.open() => r,
                () = self.shutdown.cancelled() => return,
            };
            let delay = match attempt {
                Err(e) => {
                    let delay = backoff.next_delay();
                    warn!(
                        session = slot,
                        "cannot connect: {e}; retrying in {:.1}s",
                        delay.as_secs_f64()
                    );
                    delay
                }
                Ok(session) => {
                    info!(
                        session = slot,
                        server = %session.peer().software,
                        "connected to {}",
                        self.connector.server.display
                    );
                    let started = Instant::now();
                    let end = self.serve(&session, slot).await;
                    if started.elapsed() > HEALTHY {
                        backoff.reset();
                    }
                    match end {
                        End::Shutdown => {
                            session.goaway("the connector is stopping");
                            session.close();
                            let _ = tokio::time::timeout(CLOSE_GRACE, session.closed()).await;
                            info!(session = slot, "closed: the connector is stopping");
                            return;
                        }
                        End::GoAway(reason) => {
                            self.tasks.spawn(self.clone().drain(session, slot));
                            if backoff.failures() == 0 {
                                // Replace it at once, but not twice in a row
                                // without a pause.
                                let _ = backoff.next_delay();
                                info!(
                                    session = slot,
                                    "the server is draining this session (GOAWAY: {reason}); opening a replacement now"
                                );
                                continue;
                            }
                            let delay = backoff.next_delay();
                            info!(
                                session = slot,
                                "the server is draining this session (GOAWAY: {reason}); opening a replacement in {:.1}s",
                                delay.as_secs_f64()
                            );
                            delay
                        }
                        End::Closed(result) => {
                            let reason = match result {
                                Ok(()) => "the server closed it".to_owned(),
                                Err(e) => e.to_string(),
                            };
                            let delay = backoff.next_delay();
                            warn!(
                                session = slot,
                                "closed ({reason}); reconnecting in {:.1}s",
                                delay.as_secs_f64()
                            );
                            delay
                        }
                    }
                }
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Connects, upgrades and says hello.
    async fn open(&self) -> Result<Session, SetupError> {
        let ws = self.connector.connect().await?;
        let (sink, stream) = transport::into_messages(ws);
        let hello =
            Hello::new(format!("psbx-connector/{}", crate::VERSION)).with_features(["connector"]);
        Ok(Session::over_messages(sink, stream, Role::Client, Config::tunnel(), hello).await?)
    }

    /// Accepts streams until the session ends, drains or the connector
    /// stops.
    async fn serve(&self, session: &Session, slot: usize) -> End {
        let mut controls_open = true;
        loop {
            tokio::select! {
                incoming = session.accept() => match incoming {
                    Some(incoming) => {
                        self.tasks.spawn(self.streams.clone().handle(incoming, slot));
                    }
                    None => break,
                },
                // The server sends no control messages to connectors yet;
                // read them anyway so that none piles up.
                message = session.recv_control::<serde_json::Value>(), if controls_open => match message {
                    Some(message) => debug!(session = slot, ?message, "ignoring a control message"),
                    None => controls_open = false,
                },
                () = self.shutdown.cancelled() => return End::Shutdown,
            }
        }
        match session.peer_goaway() {
            Some(reason) => End::GoAway(reason),
            None => End::Closed(session.closed().await),
        }
    }

    /// Lets a session the server is draining finish its streams, for at
    /// most [`DRAIN_LIMIT`].
    async fn drain(self: Arc<Self>, session: Session, slot: usize) {
        tokio::select! {
            r = tokio::time::timeout(DRAIN_LIMIT, session.closed()) => match r {
                Ok(_) => info!(session = slot, "a drained session finished its streams and closed"),
                Err(_) => {
                    warn!(session = slot, "a draining session still had streams after an hour: closing it");
                    session.close();
                }
            },
            () = self.shutdown.cancelled() => session.close(),
        }
    }
}
