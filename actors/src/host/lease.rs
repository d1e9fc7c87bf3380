//! The host's lease (DESIGN.md §8): taken before the host is reconciled
//! ([`take`]), renewed by the supervisor every third of its time with the
//! room the host has now ([`HostSupervisor::renew_lease`]), given back at a
//! clean stop. A renewal that has not succeeded within the lease's time
//! fences this node (`machine::HostLease`): other nodes already answer
//! `host_unavailable` for the host's boxes, so this node stops acting on
//! them until a renewal goes through. A renewal refused because the lease
//! moved to another node's epoch leaves the node fenced for good (the log
//! says so): only a restart takes the host again.

use super::HostSupervisor;
use super::start::HostIdentity;
use crate::blocking::blocking;
use crate::error::BoxError;
use crate::machine::meminfo::HostMemory;
use crate::store::{HostClaim, Room, Store, TakenHost};
use actix::prelude::*;
use std::time::{Duration, Instant};

/// How often the lease is renewed: a third of its time, so that one
/// renewal may fail and the next still comes before it runs out.
pub(super) fn renew_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(200))
}

/// Takes the host's lease for this node. A lease held by a node that has
/// stopped renewing it (killed, or cut off from the database) is waited
/// out; one its holder renews while this node waits belongs to a live node,
/// and the start fails saying so.
pub(super) async fn take(
    store: &Store,
    identity: &HostIdentity,
    uri: &str,
    accel: &str,
    (cpus, memory_mib): (u32, u64),
) -> Result<TakenHost, BoxError> {
    let mut seen = None;
    loop {
        let (s, id, uri, accel) = (
            store.clone(),
            identity.clone(),
            uri.to_owned(),
            accel.to_owned(),
        );
        let answer = blocking(move || {
            s.take_host(&HostClaim {
                name: &id.name,
                uri: &uri,
                server_id: &id.server_id,
                node_key: &id.node_key,
                accel: &accel,
                cpus,
                memory_mib,
                lease: id.lease,
            })
        })
        .await?;
        let held = match answer {
            Ok(taken) => {
                tracing::info!(host = %identity.name, epoch = taken.epoch, owner = %taken.owner, "took the host's lease");
                return Ok(taken);
            }
            Err(held) => held,
        };
        let holder = held
            .server_id
            .as_ref()
            .map_or_else(|| "another node".to_owned(), ToString::to_string);
        let on = held.hostname.as_deref().unwrap_or("an unknown machine");
        if seen.is_some() && held.expires_at > seen {
            return Err(BoxError::NoHost(format!(
                "host {} is supervised by the live node {holder} (on {on}), which renews its \
                 lease: give this node its own host name (cluster.host), or stop the other node",
                identity.name
            )));
        }
        seen = held.expires_at;
        tracing::warn!(
            host = %identity.name,
            holder = %holder,
            expires_at = ?held.expires_at,
            "the host's lease is held by a node that may have died: waiting for it to run out"
        );
        tokio::time::sleep(renew_every(identity.lease)).await;
    }
}

/// What the host has room for now: the ledger's limits less what its boxes
/// hold, memory also bounded by what the kernel has available; none once
/// the node is stopping.
fn room(machine: &crate::machine::Machine, pool: &[(u32, usize)]) -> Room {
    if !machine.lease.placing() {
        return Room::default();
    }
    let (free_cpus, free_memory_mib) = match machine.usage() {
        Some((usage, limits)) => {
            let cpus = (limits.cpus_limit() - usage.promised_vcpus as f64).max(0.0);
            let promised = (limits.memory_limit_mib() - usage.promised_mib as f64).max(0.0) as u64;
            let available = HostMemory::read()
                .map(|m| {
                    m.available_mib
                        .saturating_sub(usage.booting_mib)
                        .saturating_sub(limits.memory_margin_mib)
                })
                .unwrap_or(0);
            (cpus, promised.min(available))
        }
        None => (0.0, 0),
    };
    Room {
        free_cpus,
        free_memory_mib,
        pool: pool.iter().map(|(size, n)| (*size, *n as u64)).collect(),
    }
}

/// The renewal's state in the supervisor.
pub(super) struct Renewal {
    pub lease: Duration,
    /// When the last renewal that went through was sent.
    pub renewed_at: Instant,
    pub in_flight: bool,
    /// The lease moved to another node: no renewal will go through.
    pub lost: bool,
}

impl Renewal {
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            renewed_at: Instant::now(),
            in_flight: false,
            lost: false,
        }
    }
}

impl HostSupervisor {
    /// One tick of the renewal: fence the node when the lease has run out
    /// without a renewal, and send the next one unless one is under way.
    pub(super) fn renew_lease(&mut self, ctx: &mut Context<Self>) {
        let machine = self.parts.machine.clone();
        if self.renewal.renewed_at.elapsed() >= self.renewal.lease && machine.lease.lapse() {
            tracing::error!(
                host = %machine.name,
                "the host's lease ran out without a renewal (the database did not answer): this \
                 node acts on none of its boxes until it holds the lease again"
            );
        }
        if self.renewal.in_flight || self.renewal.lost {
            return;
        }
        self.renewal.in_flight = true;
        let sent = Instant::now();
        let room = room(&machine, &self.pool_levels());
        let lease = self.renewal.lease;
        let fut = async move {
            let m = machine.clone();
            blocking(move || {
                m.store
                    .renew_host(&m.name, &m.server_id, m.lease.epoch(), lease, &room)
                    .map_err(BoxError::from)
            })
            .await
        }
        .into_actor(self)
        .map(move |renewed, act, _| {
            act.renewal.in_flight = false;
            let machine = &act.parts.machine;
            match renewed {
                Ok(true) => {
                    act.renewal.renewed_at = sent;
                    if machine.lease.renewed() {
                        tracing::info!(host = %machine.name, "holding the host's lease again: acting on its boxes");
                    }
                }
                Ok(false) => {
                    act.renewal.lost = true;
                    machine.lease.lapse();
                    tracing::error!(
                        host = %machine.name,
                        "the host's lease was taken by another node: this node no longer acts on \
                         its boxes; restart it to take the host back"
                    );
                }
                Err(e) => tracing::warn!(host = %machine.name, error = %e, "could not renew the host's lease; trying again"),
            }
        });
        ctx.spawn(fut);
    }

    /// Gives the lease back (a clean stop).
    pub(super) fn release_lease(machine: &crate::machine::Machine) {
        let (name, epoch) = (&machine.name, machine.lease.epoch());
        if let Err(e) = machine.store.release_host(name, &machine.server_id, epoch) {
            tracing::warn!(error = %e, "could not give the host's lease back; it runs out by itself");
        }
    }
}

/// A stop is under way: no new box is placed on this host (its next
/// renewal, sent at once, publishes no room) while what is in flight here
/// finishes.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopPlacing;

impl Handler<StopPlacing> for HostSupervisor {
    type Result = ();

    fn handle(&mut self, _: StopPlacing, ctx: &mut Context<Self>) {
        self.parts.machine.lease.stop_placing();
        // A renewal in flight carries the old room: this one follows it.
        self.renewal.in_flight = false;
        self.renew_lease(ctx);
    }
}
