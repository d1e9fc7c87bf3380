//! A box's stream to an environment address: `env:<host>:<port>` from boxd,
//! routed through the connection listing that exact address now, to one of
//! its connectors, and spliced; the bytes the box sends are counted as its
//! egress as they pass (`egress`).

use super::{Hub, Refusal};
use crate::environments::Connection;
use crate::environments::address::{Endpoint, RawEndpoint, check};
use crate::error::blocking;
use crate::ids::{AccountId, BoxId, EnvironmentId};
use crate::store::Store;
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

impl Router {
    pub fn new(hub: Hub, store: Store) -> Self {
        Self { hub, store }
    }

    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The handler of a box's incoming streams.
    pub fn handler(&self, route: BoxRoute) -> crate::box_::link::StreamHandler {
        let router = self.clone();
        let route = Arc::new(route);
        Arc::new(move |incoming: Incoming| {
            let (router, route) = (router.clone(), route.clone());
            tokio::spawn(async move { router.serve(incoming, &route).await });
        })
    }

    async fn serve(&self, incoming: Incoming, route: &BoxRoute) {
        let target = incoming.target().to_owned();
        let address = match parse(&target) {
            Ok(address) => address,
            Err(refusal) => return incoming.refuse(refusal.code, &refusal.reason),
        };
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
            return Err(Refusal {
                code: 403,
                reason: "this box was not started in an environment".into(),
            });
        };
        let (store, account) = (self.store.clone(), route.account.clone());
        let found = blocking(move || {
            let Some(env) = store.environment(&account, &name)? else {
                return Ok(None);
            };
            let connections = store.connections(&env.id)?;
            Ok::<_, crate::store::StoreError>(Some((env, connections)))
        })
        .await
        .map_err(|e| Refusal {
            code: 503,
            reason: format!("the server could not read the environment: {e}"),
        })?;
        let Some((env, connections)) = found else {
            return Err(Refusal {
                code: 403,
                reason: "the box's environment no longer exists".into(),
            });
        };
        // By name: when two connections list the address, the first wins.
        connections
            .into_iter()
            .map(Connection::from)
            .find(|c| c.record.endpoints.contains(address))
            .map(|c| (env.id.clone(), c))
            .ok_or_else(|| Refusal {
                code: 403,
                reason: format!(
                    "{address} is no longer listed on any connection of environment \"{}\"",
                    env.name
                ),
            })
    }
}

/// `env:<host>:<port>` → the address.
fn parse(target: &str) -> Result<Endpoint, Refusal> {
    let bad = |why: String| Refusal {
        code: 400,
        reason: why,
    };
    let rest = target
        .strip_prefix("env:")
        .ok_or_else(|| bad(format!("the server takes no stream {target:?} from a box")))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad(format!("{rest:?} is not host:port")))?;
    let port: i64 = port
        .parse()
        .map_err(|_| bad(format!("{rest:?} is not host:port")))?;
    check(&RawEndpoint {
        host: host.to_owned(),
        port,
    })
    .map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_addresses() {
        assert_eq!(
            parse("env:db.internal:5432").unwrap(),
            Endpoint {
                host: "db.internal".into(),
                port: 5432
            }
        );
        assert_eq!(parse("exec").unwrap_err().code, 400);
        assert_eq!(parse("env:db.internal").unwrap_err().code, 400);
        assert_eq!(parse("env:*.internal:1").unwrap_err().code, 400);
    }
}
