//! HostSupervisor: one per libvirt host. It owns the host's pool of clean,
//! pre-booted boxes (suspended in memory) and makes new boxes, from the pool
//! or cold. Start-up (`start.rs`) connects to libvirt, settles KVM or TCG,
//! reconciles libvirt with the store (`reconcile.rs`) and adopts live boxes.
//! It watches the host's memory (`pressure.rs`) and disk (`disk_pressure.rs`),
//! and keeps the box network's rules in place (`boxnet`): while the network
//! is on, and, after it was turned off, while QEMU processes of boxes started
//! with a card still run (the rules filter them by their uid).
//!
//! What the host shares with its box actors is split by who uses it: the
//! machine and each box's lifecycle steps are `crate::machine` (below the
//! actors), the live actors `registry.rs`, the switch of the streams boxd
//! opens `switch.rs` (with a box's links to other boxes, `links.rs`).
//! [`HostParts`] holds the three and is what a BoxActor knows of its host
//! (`box_actor::Hosting`).

pub mod at_rest;
mod create;
pub mod disk_pressure;
mod lease;
pub use lease::StopPlacing;
pub mod links;
mod pressure;
mod reconcile;
pub mod registry;
mod start;
pub mod switch;

pub use create::CreateBox;
pub use start::{BoxServices, Connected, HostIdentity, HostStart, start_host, supervise};

use crate::box_actor::{BoxActor, Hosting};
use crate::boxd_link::BoxdLink;
use crate::boxnet::BoxNetwork;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::machine::Machine;
use crate::spec::LinkSpec;
use crate::store::BoxRecord;
use actix::prelude::*;
use registry::Registry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switch::Switch;

/// A host's parts, as its supervisor, its box actors and the façades reach
/// them: the machine (lifecycle steps, capacity), the live actors, and the
/// switch of the streams their boxd open.
#[derive(Clone)]
pub struct HostParts {
    pub machine: Arc<Machine>,
    pub registry: Arc<Registry>,
    pub switch: Arc<Switch>,
}

impl HostParts {
    /// An actor for box `record` on this host (`BoxActor::new`), with its
    /// link to boxd and its hello when it runs.
    fn new_actor(
        &self,
        record: BoxRecord,
        link: Option<(BoxdLink, psbx_wire::boxd::BoxInfo)>,
        masker: Arc<crate::exec::mask::Masker>,
    ) -> BoxActor {
        let hosting: Arc<dyn Hosting> = Arc::new(self.clone());
        BoxActor::new(record, self.machine.clone(), hosting, link, masker)
    }
}

impl Hosting for HostParts {
    fn link(&self, record: &BoxRecord) -> BoxdLink {
        self.switch.link_of(record)
    }

    fn started(&self, id: &BoxId, actor: Addr<BoxActor>) {
        self.registry.register(id.clone(), actor);
    }

    fn rewired(&self, id: &BoxId, links: &[LinkSpec]) {
        self.switch.links.rewired(id, links);
    }

    fn stopped(&self, id: &BoxId) {
        self.registry.unregister(id);
        self.switch.links.forget(id);
    }
}

/// A pooled box: booted, said hello, suspended, owned by nobody. It keeps no
/// link while suspended: a session cannot stay alive across the pause, and
/// reconnection attempts would queue stale bytes for the guest.
struct PooledBox {
    record: BoxRecord,
}

pub struct HostSupervisor {
    parts: HostParts,
    /// Pooled boxes of the configured image, by size.
    pool: HashMap<u32, VecDeque<PooledBox>>,
    /// Sizes whose pool is being refilled right now.
    filling: HashSet<u32>,
    /// A creation waiting for the pool box of its size that is booting (at
    /// most one per booting box; others start cold).
    waiting: HashMap<u32, tokio::sync::oneshot::Sender<PooledBox>>,
    /// A measurement of the boxes and the host's memory is under way.
    sampling: bool,
    /// A reading of the host's disk is under way.
    disk_sampling: bool,
    /// What each box had written at the last reading of the disk.
    written: Arc<Mutex<disk_pressure::Written>>,
    /// With `boxes.network` off: the rules kept for the boxes that still run
    /// with a card (started while it was on).
    leftover_network: Arc<Mutex<Option<Arc<BoxNetwork>>>>,
    /// The renewal of the host's lease (`lease.rs`).
    renewal: lease::Renewal,
}

/// How long a failed pool boot waits before the next try.
const POOL_RETRY: Duration = Duration::from_secs(30);

impl HostSupervisor {
    fn new(parts: HostParts, lease: Duration) -> Self {
        Self {
            renewal: lease::Renewal::new(lease),
            parts,
            pool: HashMap::new(),
            filling: HashSet::new(),
            waiting: HashMap::new(),
            sampling: false,
            disk_sampling: false,
            written: Arc::default(),
            leftover_network: Arc::default(),
        }
    }
}

impl Actor for HostSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(create::Refill);
        // The first renewal at once: it publishes the room placement reads.
        self.renew_lease(ctx);
        ctx.run_interval(lease::renew_every(self.renewal.lease), |act, ctx| {
            act.renew_lease(ctx);
        });
        ctx.run_interval(pressure::SAMPLE_EVERY, |act, ctx| {
            // A node without the host's lease acts on none of its boxes.
            if act.sampling || !act.parts.machine.lease.is_held() {
                return;
            }
            act.sampling = true;
            let machine = act.parts.machine.clone();
            let fut =
                async move { crate::blocking::blocking(move || pressure::sample(&machine)).await }
                    .into_actor(act)
                    .map(|result, act, _| {
                        act.sampling = false;
                        match result {
                            Ok(Some(pressure)) => pressure.relieve(&act.parts),
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "could not measure the boxes' memory")
                            }
                        }
                    });
            ctx.spawn(fut);
        });
        ctx.run_interval(disk_pressure::SAMPLE_EVERY, |act, ctx| {
            if act.disk_sampling || !act.parts.machine.lease.is_held() {
                return;
            }
            act.disk_sampling = true;
            let (machine, written) = (act.parts.machine.clone(), act.written.clone());
            let fut = async move {
                crate::blocking::blocking(move || {
                    let mut written = written
                        .lock()
                        .map_err(|_| BoxError::Internal("disk readings poisoned".into()))?;
                    disk_pressure::sample(&machine, &mut written)
                })
                .await
            }
            .into_actor(act)
            .map(|result, act, _| {
                act.disk_sampling = false;
                match result {
                    Ok(Some(pressure)) => pressure.relieve(&act.parts),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "could not read the host's disk"),
                }
            });
            ctx.spawn(fut);
        });
        // Rules removed or emptied under the server (an `nft flush ruleset`,
        // a flushed chain) are put back, and a change of the host's networks
        // reaches them; with the network off, as long as boxes with a card
        // still run. Each box's bytes are stored from the same listing.
        ctx.run_interval(crate::boxnet::CHECK_EVERY, |act, _| {
            let (machine, leftover) = (act.parts.machine.clone(), act.leftover_network.clone());
            actix::spawn(async move {
                let checked = crate::blocking::blocking(move || match &machine.network {
                    Some(network) => check_network(&machine, network),
                    None => keep_leftover_rules(&machine, &leftover),
                })
                .await;
                if let Err(e) = checked {
                    tracing::error!(error = %e, "the box network rules are not in place");
                }
            });
        });
    }
}

/// With `boxes.network` off: while a QEMU process runs as one of the
/// installation's box uids (a box started with a card while the network was
/// on: boxes without a card run as them too, so this keeps the rules until
/// the last box of the installation stops), its rules are kept in place;
/// when none is left, they go.
fn keep_leftover_rules(
    machine: &Machine,
    leftover: &Mutex<Option<Arc<BoxNetwork>>>,
) -> Result<(), BoxError> {
    let uids = crate::jail::UidRange::of(&machine.owner);
    let mut kept = leftover
        .lock()
        .map_err(|_| BoxError::Internal("leftover network poisoned".into()))?;
    if !uids.runs() {
        if let Some(network) = kept.take() {
            network.remove()?;
            tracing::info!(table = %network.table(), "the last box with a network card has stopped: removed its rules");
        }
        return Ok(());
    }
    if kept.is_none() {
        let network = BoxNetwork::new(
            &machine.owner,
            machine.host.uri(),
            uids,
            machine.settings.egress.clone(),
            machine.settings.resolvers.clone(),
        )?;
        tracing::warn!(
            table = %network.table(),
            "boxes.network is off, but boxes started with a network card still run: their rules stay \
             in place and checked until the last of them stops"
        );
        *kept = Some(Arc::new(network));
    }
    match kept.as_ref() {
        Some(network) => check_network(machine, network),
        None => Ok(()),
    }
}

/// The periodic check of `network`'s rules (this host's, or those kept
/// for boxes started before `boxes.network` was turned off): put back if
/// they are not in place, and each box's bytes stored, those whose
/// figure changed, for the boxes holding those uids.
fn check_network(machine: &Machine, network: &BoxNetwork) -> Result<(), BoxError> {
    let counts = network.ensure()?;
    let Some(jails) = &machine.jails else {
        return Ok(());
    };
    let owners = jails.owners()?;
    let changed = network.meter.changed(&counts, &owners);
    if !changed.is_empty() {
        let rows: Vec<(BoxId, u64)> = changed
            .iter()
            .map(|(_, id, bytes)| (id.clone(), *bytes))
            .collect();
        machine.store.add_internet_egress(&rows)?;
    }
    network.meter.stored(changed, &owners);
    Ok(())
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
        let machine = self.parts.machine.clone();
        let machine_after = machine.clone();
        Box::pin(async move {
            let result = crate::blocking::blocking(move || {
                for row in machine.store.live_boxes_on_host(&machine.name)? {
                    if row.state == crate::box_state::BoxState::Pooled {
                        machine.teardown(&row.id)?;
                        machine.store.delete_pooled_box(&row.id)?;
                    }
                }
                if let Some(network) = &machine.network {
                    let running = machine
                        .host
                        .list()?
                        .into_iter()
                        .filter(|d| d.owner.as_deref() == Some(machine.owner.as_str()))
                        .filter(|d| matches!(d.status, psbx_libvirt::DomainStatus::Running | psbx_libvirt::DomainStatus::Paused))
                        .count();
                    if running == 0 {
                        network.remove()?;
                        tracing::info!(table = %network.table(), "no box runs: removed the box network rules");
                    } else {
                        tracing::info!(table = %network.table(), running, "boxes keep running: the box network rules stay");
                    }
                }
                Ok::<_, BoxError>(())
            })
            .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "could not remove the pool's boxes");
            }
            // Other nodes answer `host_unavailable` for the boxes left
            // running until this node (or its successor) takes the host.
            let m = machine_after.clone();
            let _ = crate::blocking::blocking(move || {
                HostSupervisor::release_lease(&m);
                Ok::<_, BoxError>(())
            })
            .await;
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
        self.pool_levels()
    }
}

impl HostSupervisor {
    /// Clean boxes in the pool, by size.
    fn pool_levels(&self) -> Vec<(u32, usize)> {
        let mut levels: Vec<(u32, usize)> = self.pool.iter().map(|(s, q)| (*s, q.len())).collect();
        levels.sort_unstable();
        levels
    }
}
