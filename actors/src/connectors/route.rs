//! A box's stream to an environment address: `env:<host>:<port>` from boxd,
//! routed through the connection listing that exact address now, to one of
//! its connectors, and joined to the stream opened there
//! (`psbx_wire::splice::join_counted`: FIN and RST pass both ways); the
//! bytes the box sends are counted as its egress as they pass (`egress`).
//!
//! A box may open streams as fast as it likes, so a refused one costs
//! little: the environment's address table (or the fact that it is gone)
//! comes from the hub's [`AddressTables`](super::AddressTables), read from
//! the database by one stream at a time while others wait for it, and
//! refusals are logged per box at most [`REFUSALS_LOGGED`] per
//! [`REFUSAL_LOG_INTERVAL`], then one summary line.

use super::Hub;
use super::tables::Table;
use crate::environments::Connection;
use crate::ids::{AccountId, BoxId, EnvironmentId};
use crate::meter::RefusalLog;
use crate::store::Store;
use psbx_wire::Endpoint;
use psbx_wire::frame::{Refusal, code};
use psbx_wire::mux::Incoming;
use psbx_wire::splice::join_counted;
use std::sync::{Arc, Mutex};

pub use crate::meter::{REFUSAL_LOG_INTERVAL, REFUSALS_LOGGED};

/// Routes box streams; cheap to clone.
#[derive(Clone)]
pub struct Router {
    hub: Hub,
    store: Store,
}

/// What the router needs to know about a box.
#[derive(Debug, Clone)]
pub struct BoxRoute {
    pub box_id: BoxId,
    pub account: AccountId,
    /// The environment it was started in, by name.
    pub environment: Option<String>,
}

/// A box's router: what its `env:` streams go through.
#[derive(Clone)]
pub struct BoxRouter {
    router: Router,
    route: Arc<BoxRoute>,
    refusals: Arc<Mutex<RefusalLog>>,
}

impl Router {
    pub fn new(hub: Hub, store: Store) -> Self {
        Self { hub, store }
    }

    /// How many address tables were read from the database.
    pub fn table_reads(&self) -> u64 {
        self.hub.tables().reads()
    }

    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The router of one box's streams.
    pub fn for_box(&self, route: BoxRoute) -> BoxRouter {
        BoxRouter {
            router: self.clone(),
            route: Arc::new(route),
            refusals: Arc::new(Mutex::new(RefusalLog::new())),
        }
    }
}

impl BoxRouter {
    /// Serves the box's stream to `address` in a task of its own. The
    /// address was checked when the target was read (`Outbound::parse`, by
    /// the rule connection addresses follow), so it is compared as it is.
    pub fn spawn(&self, incoming: Incoming, address: Endpoint) {
        let this = self.clone();
        tokio::spawn(async move { this.router.serve(incoming, &this, address).await });
    }

    /// Logs a refused stream, unless this box's refusals are over
    /// [`REFUSALS_LOGGED`] in this interval (then a summary comes with the
    /// first one logged after it).
    fn log_refusal(&self, address: &Endpoint, connection: Option<&str>, refusal: &Refusal) {
        let (log, quiet) = self
            .refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit();
        let box_id = &self.route.box_id;
        if quiet > 0 {
            tracing::info!(%box_id, refused = quiet, interval = ?REFUSAL_LOG_INTERVAL,
                "private endpoint refusals not logged (over {REFUSALS_LOGGED} per interval)");
        }
        if log {
            tracing::info!(%box_id, %address, connection, code = refusal.code, reason = %refusal.reason, "private endpoint refused");
        }
    }
}

impl Router {
    async fn serve(&self, incoming: Incoming, of: &BoxRouter, address: Endpoint) {
        let route = &*of.route;
        let (env_id, connection) = match self.connection_for(route, &address).await {
            Ok(found) => found,
            Err(refusal) => {
                of.log_refusal(&address, None, &refusal);
                return incoming.refuse(refusal.code, &refusal.reason);
            }
        };
        let upstream = match self
            .hub
            .open(
                &connection.record.id,
                &connection.record.name,
                &address.to_string(),
            )
            .await
        {
            Ok(stream) => stream,
            Err(refusal) => {
                of.log_refusal(&address, Some(&connection.record.name), &refusal);
                return incoming.refuse(refusal.code, &refusal.reason);
            }
        };
        let sent = self.hub.egress().counter(&route.box_id);
        let (id, closed) = self.hub.track(&env_id, &address);
        let unlisted = async {
            let reason = closed.await.unwrap_or("closed");
            tracing::info!(box_id = %route.box_id, %address, reason, "private endpoint stream closed");
            reason
        };
        let _ = join_counted(incoming.accept(), upstream, "psbx", &sent, unlisted).await;
        self.hub.untrack(&env_id, &address, id);
    }

    /// The environment's id and the connection that lists `address` now.
    async fn connection_for(
        &self,
        route: &BoxRoute,
        address: &Endpoint,
    ) -> Result<(EnvironmentId, Connection), Refusal> {
        let Some(name) = route.environment.clone() else {
            return Err(Refusal::new(
                code::FORBIDDEN,
                "this box was not started in an environment",
            ));
        };
        let (env_id, connections) = self.table(&route.account, &name).await?;
        // By name: when two connections list the address, the first wins.
        connections
            .into_iter()
            .map(Connection::from)
            .find(|c| c.record.endpoints.contains(address))
            .map(|c| (env_id, c))
            .ok_or_else(|| {
                Refusal::new(
                    code::FORBIDDEN,
                    format!(
                        "{address} is no longer listed on any connection of environment \"{name}\""
                    ),
                )
            })
    }

    /// The environment's address table, from the hub's tables.
    async fn table(&self, account: &AccountId, name: &str) -> Result<Table, Refusal> {
        self.hub
            .tables()
            .get(&self.store, account, name)
            .await
            .map_err(|e| {
                Refusal::new(
                    code::UNAVAILABLE,
                    format!("the server could not read the environment: {e}"),
                )
            })?
            .ok_or_else(gone)
    }
}

fn gone() -> Refusal {
    Refusal::new(code::FORBIDDEN, "the box's environment no longer exists")
}
