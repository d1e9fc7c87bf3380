//! One connector session, from its hello to its end: registered with the
//! [`Hub`] under its connection (so box streams can use it, and a token
//! rotation or deletion closes it), recorded in `connector_sessions` for the
//! operator and the other replicas, its row refreshed every [`HEARTBEAT`] with
//! the measured round trip, and removed when the session ends. The HTTP route
//! only authenticates the connector, upgrades to WebSocket and carries frames.

use super::Hub;
use crate::blocking::blocking;
use crate::ids::{ConnectionId, ServerId, random_token};
use crate::store::Store;
use psbx_wire::mux::Session;
use std::time::Duration;

/// How often a session's row in `connector_sessions` is refreshed.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Who the session is for, as the logs name it.
pub struct SessionOf {
    pub connection: ConnectionId,
    pub connection_name: String,
    pub environment_name: String,
    /// This replica.
    pub server: ServerId,
}

/// Serves an established connector session until it ends.
pub async fn serve(hub: Hub, store: Store, of: SessionOf, session: Session) {
    let version = session.peer().software.clone();
    let _registered = hub.register(&of.connection, session.clone(), &version);
    tracing::info!(environment = %of.environment_name, connection = %of.connection_name,
        connector = %version, "connector session up");
    let recorded = Recorded::new(store, &of.connection, &of.server, &version).await;
    tokio::select! {
        ended = session.closed() => {
            tracing::info!(environment = %of.environment_name, connection = %of.connection_name,
                result = ?ended.err(), "connector session down");
        }
        () = recorded.heartbeat(&session) => {}
    }
    recorded.remove().await;
}

/// A session's row in `connector_sessions`; removed when the session ends.
struct Recorded {
    store: Store,
    id: Option<String>,
}

impl Recorded {
    async fn new(
        store: Store,
        connection: &ConnectionId,
        server: &ServerId,
        version: &str,
    ) -> Self {
        let id = random_token(20).ok().map(|t| format!("cs_{t}"));
        if let Some(row) = id.clone() {
            let (s, c, srv, v) = (
                store.clone(),
                connection.clone(),
                server.clone(),
                version.to_owned(),
            );
            if let Err(e) = blocking(move || s.insert_connector_session(&row, &c, &srv, &v)).await {
                tracing::warn!(error = %e, "cannot record the connector session");
            }
        }
        Self { store, id }
    }

    /// Refreshes the row until the session ends (never returns on its own).
    async fn heartbeat(&self, session: &Session) {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            if let Some(row) = self.id.clone() {
                let rtt = session.stats().rtt.map(|d| d.as_secs_f64() * 1000.0);
                let store = self.store.clone();
                let _ = blocking(move || store.touch_connector_session(&row, rtt)).await;
            }
        }
    }

    async fn remove(self) {
        if let Some(row) = self.id {
            let store = self.store;
            let _ = blocking(move || store.delete_connector_session(&row)).await;
        }
    }
}
