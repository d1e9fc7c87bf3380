//! A box's connections to names linked to another box of its account:
//! boxd opens `link:<host>:<port>` for each, and the server splices it to a
//! `port:<n>` stream of the linked box's boxd — over psbx's channels, never
//! the host network. The link is read from the box's spec on every
//! connection (`wire` may have changed it), the linked box is woken when it
//! is frozen and kept awake while the connection lasts. A refusal says which
//! name, port and box were involved: 404 when the name is not linked (any
//! more) or the linked box is stopped, 503 when it cannot be woken, 502 when
//! nothing listens on its port.

use super::shared::Registry;
use crate::blocking::blocking;
use crate::box_actor::link::LinkError;
use crate::box_actor::{BoxActor, Channel, Touch};
use crate::ids::{AccountId, BoxId};
use crate::store::Store;
use actix::Addr;
use psbx_wire::boxd::{PrivateEndpoint, Service};
use psbx_wire::frame::{Refusal, code};
use psbx_wire::mux::Incoming;
use std::sync::Arc;
use std::time::Duration;

/// How long the linked box's boxd may take to accept the stream.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a link's open connection counts as activity of the linked box.
const KEEP_AWAKE: Duration = Duration::from_secs(10);

/// One box's links; cheap to clone.
#[derive(Clone)]
pub struct Links(Arc<Inner>);

struct Inner {
    box_id: BoxId,
    account: AccountId,
    store: Store,
    registry: Arc<Registry>,
}

/// The far end of a link.
struct Target {
    actor: Addr<BoxActor>,
    box_id: String,
    port: u16,
}

impl Links {
    pub fn new(box_id: BoxId, account: AccountId, store: Store, registry: Arc<Registry>) -> Self {
        Self(Arc::new(Inner {
            box_id,
            account,
            store,
            registry,
        }))
    }

    /// Serves the box's stream to `endpoint` in a task of its own.
    pub fn spawn(&self, incoming: Incoming, endpoint: PrivateEndpoint) {
        let this = self.clone();
        tokio::spawn(async move { this.serve(incoming, endpoint).await });
    }

    async fn serve(&self, incoming: Incoming, endpoint: PrivateEndpoint) {
        let target = match self.target(&endpoint).await {
            Ok(target) => target,
            Err(refusal) => return self.refuse(incoming, &endpoint, &refusal),
        };
        let link = match target
            .actor
            .send(Channel {
                thaw: true,
                touch: true,
            })
            .await
        {
            Ok(Ok((link, _))) => link,
            Ok(Err(e)) => {
                let refusal = Refusal::new(
                    code::UNAVAILABLE,
                    format!(
                        "the box {} that {}:{} links to cannot be reached: {e}",
                        target.box_id, endpoint.host, endpoint.port
                    ),
                );
                return self.refuse(incoming, &endpoint, &refusal);
            }
            Err(_) => {
                return self.refuse(
                    incoming,
                    &endpoint,
                    &stopped(&target.box_id, &endpoint, "stopped"),
                );
            }
        };
        let mut upstream = match link.open(Service::Port(target.port), OPEN_TIMEOUT).await {
            Ok(stream) => stream,
            Err(e) => {
                let code = match &e {
                    LinkError::Refused { code, .. } => code.unwrap_or(code::BAD_GATEWAY),
                    _ => code::BAD_GATEWAY,
                };
                let refusal = Refusal::new(
                    code,
                    format!(
                        "{}:{} links to port {} of box {}, which did not take the connection: {e}",
                        endpoint.host, endpoint.port, target.port, target.box_id
                    ),
                );
                return self.refuse(incoming, &endpoint, &refusal);
            }
        };
        let mut downstream = incoming.accept();
        let mut awake = tokio::time::interval(KEEP_AWAKE);
        let copy = tokio::io::copy_bidirectional(&mut downstream, &mut upstream);
        tokio::pin!(copy);
        loop {
            tokio::select! {
                _ = &mut copy => break,
                _ = awake.tick() => target.actor.do_send(Touch),
            }
        }
    }

    /// The box and port `endpoint` is linked to now, or why there is none.
    async fn target(&self, endpoint: &PrivateEndpoint) -> Result<Target, Refusal> {
        let (store, id) = (self.0.store.clone(), self.0.box_id.clone());
        let unreadable = |e: crate::store::StoreError| {
            Refusal::new(
                code::UNAVAILABLE,
                format!("the server could not read the box's links: {e}"),
            )
        };
        let record = blocking(move || store.box_by_id(&id))
            .await
            .map_err(unreadable)?;
        let link = record
            .and_then(|r| {
                r.spec
                    .links
                    .into_iter()
                    .find(|l| l.name == endpoint.host && l.port == endpoint.port)
            })
            .ok_or_else(|| {
                Refusal::new(
                    code::NOT_FOUND,
                    format!(
                        "{}:{} is not linked to another box (any more)",
                        endpoint.host, endpoint.port
                    ),
                )
            })?;
        let not_here = || stopped(&link.box_id, endpoint, "not in this account");
        let other = BoxId::parse(&link.box_id).map_err(|_| not_here())?;
        let store = self.0.store.clone();
        let linked = blocking(move || store.box_by_id(&other))
            .await
            .map_err(unreadable)?
            .filter(|r| r.account_id.as_ref() == Some(&self.0.account))
            .ok_or_else(not_here)?;
        if linked.state.is_terminal() {
            return Err(stopped(&link.box_id, endpoint, linked.state.as_str()));
        }
        let actor = self
            .0
            .registry
            .lock()
            .ok()
            .and_then(|r| r.get(&linked.id).cloned())
            .ok_or_else(|| {
                Refusal::new(
                    code::UNAVAILABLE,
                    format!(
                        "the box {} that {}:{} links to does not run on this server's host",
                        link.box_id, endpoint.host, endpoint.port
                    ),
                )
            })?;
        Ok(Target {
            actor,
            box_id: link.box_id,
            port: link.target_port,
        })
    }

    fn refuse(&self, incoming: Incoming, endpoint: &PrivateEndpoint, refusal: &Refusal) {
        tracing::info!(box_id = %self.0.box_id, host = %endpoint.host, port = endpoint.port,
            code = refusal.code, reason = %refusal.reason, "link refused");
        incoming.refuse(refusal.code, &refusal.reason);
    }
}

/// The refusal for a linked box that is gone (`how`: stopped, failed, not
/// in this account).
fn stopped(box_id: &str, endpoint: &PrivateEndpoint, how: &str) -> Refusal {
    Refusal::new(
        code::NOT_FOUND,
        format!(
            "the box {box_id} that {}:{} links to is {how}: link the name to a box that runs \
             (sandbox_wire links)",
            endpoint.host, endpoint.port
        ),
    )
}
