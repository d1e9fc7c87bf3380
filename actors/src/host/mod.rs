//! HostSupervisor: one per libvirt host. It owns the host's pool of clean,
//! pre-booted boxes (suspended in memory) and makes new boxes, from the pool
//! or cold. Start-up (`start.rs`) connects to libvirt, settles KVM or TCG,
//! reconciles libvirt with the store (`reconcile.rs`) and adopts live boxes.

pub mod capacity;
mod create;
pub mod links;
pub mod meminfo;
mod pressure;
mod reconcile;
pub mod shared;
mod start;

pub use create::CreateBox;
pub use start::{BoxServices, Connected, HostStart, start_host, supervise};

use crate::store::BoxRecord;
use actix::prelude::*;
use shared::HostShared;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// A pooled box: booted, said hello, suspended, owned by nobody. It keeps no
/// link while suspended: a session cannot stay alive across the pause, and
/// reconnection attempts would queue stale bytes for the guest.
struct PooledBox {
    record: BoxRecord,
}

pub struct HostSupervisor {
    shared: Arc<HostShared>,
    /// Pooled boxes of the configured image, by size.
    pool: HashMap<u32, VecDeque<PooledBox>>,
    /// Sizes whose pool is being refilled right now.
    filling: HashSet<u32>,
    /// A creation waiting for the pool box of its size that is booting (at
    /// most one per booting box; others start cold).
    waiting: HashMap<u32, tokio::sync::oneshot::Sender<PooledBox>>,
    /// A measurement of the boxes and the host's memory is under way.
    sampling: bool,
}

/// How long a failed pool boot waits before the next try.
const POOL_RETRY: Duration = Duration::from_secs(30);

impl HostSupervisor {
    fn new(shared: Arc<HostShared>) -> Self {
        Self {
            shared,
            pool: HashMap::new(),
            filling: HashSet::new(),
            waiting: HashMap::new(),
            sampling: false,
        }
    }
}

impl Actor for HostSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(create::Refill);
        ctx.run_interval(pressure::SAMPLE_EVERY, |act, ctx| {
            if act.sampling {
                return;
            }
            act.sampling = true;
            let shared = act.shared.clone();
            let fut =
                async move { crate::blocking::blocking(move || pressure::sample(&shared)).await }
                    .into_actor(act)
                    .map(|result, act, _| {
                        act.sampling = false;
                        match result {
                            Ok(Some(pressure)) => pressure.relieve(&act.shared),
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "could not measure the boxes' memory")
                            }
                        }
                    });
            ctx.spawn(fut);
        });
        if self.shared.network.is_some() {
            // Rules removed under the server (an `nft flush ruleset`) are put
            // back, and a change of the host's networks reaches them.
            ctx.run_interval(crate::boxnet::CHECK_EVERY, |act, _| {
                let shared = act.shared.clone();
                actix::spawn(async move {
                    if let Err(e) = crate::blocking::blocking(move || shared.network_ready()).await
                    {
                        tracing::error!(error = %e, "the box network rules are not in place");
                    }
                });
            });
        }
    }
}

/// Tear down the pool (the server is shutting down; running boxes stay,
/// and with them the box network rules; without any, the rules go too).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

impl Handler<Shutdown> for HostSupervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        // Every pooled row of this host: those waiting in the pool and those
        // still booting into it.
        self.pool.clear();
        ctx.stop();
        let shared = self.shared.clone();
        Box::pin(async move {
            let result = crate::blocking::blocking(move || {
                for row in shared.store.live_boxes_on_host(shared.host.uri())? {
                    if row.state == crate::box_actor::state::BoxState::Pooled {
                        shared.teardown(&row.id)?;
                        shared.store.delete_pooled_box(&row.id)?;
                    }
                }
                if let Some(network) = &shared.network {
                    let running = shared
                        .host
                        .list()?
                        .into_iter()
                        .filter(|d| d.owner.as_deref() == Some(shared.installation.as_str()))
                        .filter(|d| matches!(d.status, psbx_libvirt::DomainStatus::Running | psbx_libvirt::DomainStatus::Paused))
                        .count();
                    if running == 0 {
                        network.remove()?;
                        tracing::info!(table = %network.table(), "no box runs: removed the box network rules");
                    } else {
                        tracing::info!(table = %network.table(), running, "boxes keep running: the box network rules stay");
                    }
                }
                Ok::<_, crate::error::BoxError>(())
            })
            .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "could not remove the pool's boxes");
            }
        })
    }
}

/// What the pool holds, by size (read by the actor tests in `tests/lifecycle.rs`).
#[derive(Message)]
#[rtype(result = "Vec<(u32, usize)>")]
pub struct PoolLevels;

impl Handler<PoolLevels> for HostSupervisor {
    type Result = Vec<(u32, usize)>;

    fn handle(&mut self, _: PoolLevels, _: &mut Context<Self>) -> Self::Result {
        let mut levels: Vec<(u32, usize)> = self.pool.iter().map(|(s, q)| (*s, q.len())).collect();
        levels.sort_unstable();
        levels
    }
}
