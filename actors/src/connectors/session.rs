//! One connector session, from its hello to its end: registered with the
//! [`Hub`](super::Hub) under its connection in the [`Slot`] taken at the
//! upgrade (so box streams can use it, and a token rotation or deletion
//! closes it; a rotation between the token check and the hello refuses it),
//! recorded in `connector_sessions` for the operator and the other replicas,
//! its row refreshed every [`HEARTBEAT`] with the measured round trip, its
//! token checked again at each heartbeat (a rotation on another replica
//! closes it within one), and removed when the session ends. The HTTP route
//! only authenticates the connector, upgrades to WebSocket and carries frames.

use super::Slot;
use crate::blocking::blocking;
use crate::ids::{ConnectionId, ServerId, random_token};
use crate::store::Store;
use psbx_wire::mux::Session;
use std::fmt;
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
    /// The token the connector presented, checked again at each heartbeat.
    pub token: ConnectorSecret,
}

/// A connector's token held for the heartbeat's check; never shown.
pub struct ConnectorSecret(pub String);

impl fmt::Debug for ConnectorSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("psbx_conn_…")
    }
}

const ROTATED: &str = "the connection's token was rotated or the connection deleted";

/// Serves an established connector session until it ends.
pub async fn serve(mut slot: Slot, store: Store, of: SessionOf, session: Session) {
    let version = session.peer().software.clone();
    if slot.register(session.clone(), &version).is_err() {
        tracing::info!(environment = %of.environment_name, connection = %of.connection_name,
            connector = %version, "connector session refused: {ROTATED} during its handshake");
        session.goaway(ROTATED);
        session.close();
        return;
    }
    tracing::info!(environment = %of.environment_name, connection = %of.connection_name,
        connector = %version, "connector session up");
    let recorded = Recorded::new(store, &of.connection, &of.server, &version).await;
    tokio::select! {
        ended = session.closed() => {
            tracing::info!(environment = %of.environment_name, connection = %of.connection_name,
                result = ?ended.err(), "connector session down");
        }
        () = recorded.heartbeat(&session, &of) => {
            tracing::info!(environment = %of.environment_name, connection = %of.connection_name,
                "connector session closed: {ROTATED}");
            session.goaway(ROTATED);
            session.close();
        }
    }
    drop(slot);
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

    /// Refreshes the row and checks the token still belongs to the
    /// connection, every [`HEARTBEAT`]; returns when it does not (rotated
    /// or deleted, perhaps through another replica). A database that cannot
    /// answer leaves the session up.
    async fn heartbeat(&self, session: &Session, of: &SessionOf) {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            if let Some(row) = self.id.clone() {
                let rtt = session.stats().rtt.map(|d| d.as_secs_f64() * 1000.0);
                let store = self.store.clone();
                let _ = blocking(move || store.touch_connector_session(&row, rtt)).await;
            }
            let (store, token) = (self.store.clone(), of.token.0.clone());
            match blocking(move || store.connection_by_token(&token)).await {
                Ok(Some((connection, _))) if connection.id == of.connection => {}
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(connection = %of.connection_name, error = %e,
                        "cannot check the connector's token; the session stays up")
                }
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
