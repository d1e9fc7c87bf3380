//! A box's stream to an environment address: `env:<host>:<port>` from boxd,
//! routed through the connection listing that exact address now, to one of
//! its connectors, and spliced; the bytes the box sends are counted as its
//! egress as they pass (`egress`).

use super::Hub;
use crate::blocking::blocking;
use crate::environments::Connection;
use crate::environments::address::{Endpoint, RawEndpoint, check};
use crate::ids::{AccountId, BoxId, EnvironmentId};
use crate::store::{ConnectionRecord, Store};
use psbx_wire::boxd::PrivateEndpoint;
use psbx_wire::frame::{Refusal, code};
use psbx_wire::mux::Incoming;
use std::sync::Arc;

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
}

impl Router {
    pub fn new(hub: Hub, store: Store) -> Self {
        Self { hub, store }
    }

    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The router of one box's streams.
    pub fn for_box(&self, route: BoxRoute) -> BoxRouter {
        BoxRouter {
            router: self.clone(),
            route: Arc::new(route),
        }
    }
}

impl BoxRouter {
    /// Serves the box's stream to `endpoint` in a task of its own.
    pub fn spawn(&self, incoming: Incoming, endpoint: PrivateEndpoint) {
        let this = self.clone();
        tokio::spawn(async move {
            match address_of(endpoint) {
                Ok(address) => this.router.serve(incoming, &this.route, address).await,
                Err(refusal) => incoming.refuse(refusal.code, &refusal.reason),
            }
        });
    }
}

impl Router {
    async fn serve(&self, incoming: Incoming, route: &BoxRoute, address: Endpoint) {
        let (env_id, connection) = match self.connection_for(route, &address).await {
            Ok(found) => found,
            Err(refusal) => {
                tracing::info!(box_id = %route.box_id, %address, code = refusal.code, reason = %refusal.reason, "private endpoint refused");
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
                tracing::info!(box_id = %route.box_id, %address, connection = %connection.record.name,
                    code = refusal.code, reason = %refusal.reason, "private endpoint refused");
                return incoming.refuse(refusal.code, &refusal.reason);
            }
        };
        let mut downstream = self
            .hub
            .egress()
            .count(route.box_id.as_str(), incoming.accept());
        let mut upstream = upstream;
        let (id, closed) = self.hub.track(&env_id, &address);
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut downstream, &mut upstream) => {}
            reason = closed => {
                let reason = reason.unwrap_or("closed");
                tracing::info!(box_id = %route.box_id, %address, reason, "private endpoint stream closed");
                downstream.get_ref().reset(reason);
                upstream.reset(reason);
            }
        };
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
        let (env_id, connections) = match self.hub.address_table(&route.account, &name) {
            Some(table) => table,
            None => self.read_table(&route.account, &name).await?,
        };
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

    /// An environment's id and connections from the store, kept in the hub.
    async fn read_table(
        &self,
        account: &AccountId,
        name: &str,
    ) -> Result<(EnvironmentId, Vec<ConnectionRecord>), Refusal> {
        let (store, a, n) = (self.store.clone(), account.clone(), name.to_owned());
        let found = blocking(move || {
            let Some(env) = store.environment(&a, &n)? else {
                return Ok(None);
            };
            let connections = store.connections(&env.id)?;
            Ok::<_, crate::store::StoreError>(Some((env.id, connections)))
        })
        .await
        .map_err(|e| {
            Refusal::new(
                code::UNAVAILABLE,
                format!("the server could not read the environment: {e}"),
            )
        })?;
        let (env_id, connections) = found.ok_or_else(|| {
            Refusal::new(code::FORBIDDEN, "the box's environment no longer exists")
        })?;
        self.hub
            .keep_address_table(account, name, &env_id, &connections);
        Ok((env_id, connections))
    }
}

/// The address a box dialed, checked as connection addresses are (a host
/// name or IP, no wildcard, a port from 1 to 65535).
fn address_of(endpoint: PrivateEndpoint) -> Result<Endpoint, Refusal> {
    check(&RawEndpoint {
        host: endpoint.host,
        port: i64::from(endpoint.port),
    })
    .map_err(|why| Refusal::new(code::BAD_REQUEST, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialed(host: &str, port: u16) -> PrivateEndpoint {
        PrivateEndpoint {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn dialed_targets_are_checked_addresses() {
        assert_eq!(
            address_of(dialed("db.internal", 5432)).unwrap(),
            Endpoint {
                host: "db.internal".into(),
                port: 5432
            }
        );
        assert_eq!(address_of(dialed("*.internal", 1)).unwrap_err().code, 400);
        assert_eq!(address_of(dialed("db.internal", 0)).unwrap_err().code, 400);
    }
}
