//! Making boxes: claimed from the pool (a resume, tens of milliseconds) or
//! booted cold, and the pool's background refill.

use super::{HostParts, HostSupervisor, POOL_RETRY, PooledBox};
use crate::blocking::blocking;
use crate::box_actor::BoxSnapshot;
use crate::box_state::BoxState;
use crate::boxd_link::BoxdLink;
use crate::error::BoxError;
use crate::exec::mask::Masker;
use crate::ids::{AccountId, BoxId};
use crate::machine::Machine;
use crate::spec::BoxSpec;
use crate::store::{BoxRecord, NewBox, PoolClaim, Transition};
use actix::prelude::*;
use psbx_wire::Endpoint;
use psbx_wire::boxd::{BoxAws, BoxInfo, ConfigFile, Configure};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Make a box for an account (validated by the caller).
#[derive(Message)]
#[rtype(result = "Result<BoxSnapshot, BoxError>")]
pub struct CreateBox {
    pub account: AccountId,
    pub name: Option<String>,
    pub goal: Option<String>,
    pub size: u32,
    pub keep_secs: i64,
    pub spec: BoxSpec,
    /// The secrets' values, pushed to boxd once the box is up.
    pub env: Vec<(String, String)>,
    /// Files boxd writes at claim (an environment's settings files).
    pub files: Vec<ConfigFile>,
    /// The environment's addresses, for boxd's entries.
    pub endpoints: Vec<Endpoint>,
    /// Further values to mask in output (an environment's secret-looking settings).
    pub mask: Vec<String>,
    /// The environment's AWS role, for boxd.
    pub aws: Option<BoxAws>,
}

/// Top the pool up to its configured level.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Refill;

/// How long boxd may take to take the box's configuration.
const CONFIGURE: Duration = Duration::from_secs(15);

/// How long a resumed pool box may take to say hello on a new session.
const RESUME_HELLO: Duration = Duration::from_secs(15);

type Booted = (BoxRecord, BoxdLink, BoxInfo);

/// Starts a box's domain; the record moves from `creating` to `booting` on
/// the way (a pooled record stays `pooled`). The link is to wait on for boxd's hello.
async fn boot(parts: &HostParts, record: BoxRecord) -> Result<(BoxRecord, BoxdLink), BoxError> {
    let (h, r) = (parts.machine.clone(), record.clone());
    blocking(move || h.boot(&r)).await?;
    let record = if record.state == BoxState::Creating {
        parts
            .machine
            .transition(&record, BoxState::Booting, Transition::default())
            .await?
    } else {
        record
    };
    let link = parts.switch.link_of(&record);
    Ok((record, link))
}

/// Fails a box whose start went wrong ([`Machine::fail_box`]).
async fn clean_up_failed(machine: &Arc<Machine>, record: &BoxRecord, error: &BoxError) {
    let (h, r, reason) = (machine.clone(), record.clone(), error.to_string());
    if let Err(e) = blocking(move || h.fail_box(&r, &reason)).await {
        tracing::error!(box_id = %record.id, error = %e, "could not clean up after a failed start");
    }
}

/// A new box of `size` units of the configured image, in `state`, with its
/// resources promised.
fn reserve_new(machine: &Machine, size: u32, state: BoxState) -> Result<NewBox, BoxError> {
    let id = BoxId::generate()?;
    let unit = machine.settings.resources(size);
    machine.image(&machine.settings.image)?;
    machine.reserve(&id, unit)?;
    Ok(NewBox::for_size(
        id,
        &machine.name,
        &machine.settings.image,
        state,
        size,
        unit,
    ))
}

/// Writes a new box's row; a box without one holds nothing of the host.
async fn insert(machine: &Machine, new: NewBox) -> Result<BoxRecord, BoxError> {
    let (store, id) = (machine.store.clone(), new.id.clone());
    let record = blocking(move || store.insert_box(&new)).await;
    if record.is_err() {
        machine.release_all(&id);
    }
    Ok(record?)
}

/// A cold start: row, disk, domain, hello, `running`.
async fn cold(parts: &HostParts, new: NewBox) -> Result<Booted, BoxError> {
    let (started, machine) = (Instant::now(), &parts.machine);
    let inserted = insert(machine, new).await?;
    let result = async {
        let (record, link) = boot(parts, inserted.clone()).await?;
        let (record, hello) = machine
            .await_hello_and_run(record, &link, machine.settings.boot_timeout, "")
            .await?;
        Ok((record, link, hello))
    }
    .await;
    match &result {
        Ok(_) => {
            tracing::info!(box_id = %inserted.id, ms = started.elapsed().as_millis() as u64, "box started cold")
        }
        Err(e) => clean_up_failed(machine, &inserted, e).await,
    }
    result
}

/// A pool box for an account: resume it, check boxd answers, hand it over.
async fn claim(parts: &HostParts, pooled: PooledBox, claim: PoolClaim) -> Result<Booted, BoxError> {
    let PooledBox { record } = pooled;
    let (started, machine) = (Instant::now(), &parts.machine);
    let result = async {
        let (h, name) = (machine.clone(), Machine::domain_name(&record.id));
        blocking(move || {
            h.network_ready()?;
            h.host.resume(&name).map_err(BoxError::from)
        })
        .await?;
        let link = parts
            .switch
            .link(&record.id, Some(&claim.account_id), &claim.spec);
        let hello = link
            .handle()
            .hello(RESUME_HELLO)
            .await
            .map_err(|e| BoxError::Boot(format!("the pooled box did not wake: {e}")))?;
        let (store, id, boot_id) = (
            machine.store.clone(),
            record.id.clone(),
            hello.boot_id.clone(),
        );
        let record = blocking(move || store.claim_pooled_box(&id, &claim, &boot_id))
            .await?
            .ok_or_else(|| BoxError::Internal("the pooled box was taken twice".into()))?;
        Ok((record, link, hello))
    }
    .await;
    match result {
        Ok(booted) => {
            tracing::info!(box_id = %booted.0.id, ms = started.elapsed().as_millis() as u64, "box started from the pool");
            Ok(booted)
        }
        Err(e) => {
            clean_up_failed(machine, &record, &e).await;
            Err(e)
        }
    }
}

/// Boots one box into the pool and suspends it.
async fn pool_boot(parts: HostParts, size: u32) -> Result<PooledBox, BoxError> {
    let machine = &parts.machine;
    let new = reserve_new(machine, size, BoxState::Pooled)?;
    let inserted = insert(machine, new).await?;
    let result = async {
        let (record, link) = boot(&parts, inserted.clone()).await?;
        link.handle()
            .hello(machine.settings.boot_timeout)
            .await
            .map_err(|e| BoxError::Boot(e.to_string()))?;
        machine.settle(&record.id);
        // The session ends before the pause, not during it.
        drop(link);
        let (h, name) = (machine.clone(), Machine::domain_name(&record.id));
        blocking(move || h.host.suspend(&name).map_err(BoxError::from)).await?;
        Ok(PooledBox { record })
    }
    .await;
    if let Err(e) = &result {
        clean_up_failed(machine, &inserted, e).await;
    }
    result
}

impl Handler<CreateBox> for HostSupervisor {
    type Result = ResponseActFuture<Self, Result<BoxSnapshot, BoxError>>;

    fn handle(&mut self, mut msg: CreateBox, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.parts.machine.lease.check() {
            return Box::pin(fut::ready(Err(e)));
        }
        let pooled = self.pool.get_mut(&msg.size).and_then(|q| q.pop_front());
        if pooled.is_some() {
            ctx.notify(Refill);
        }
        // No pooled box yet, but one is booting (the pool is still filling,
        // right after the server started): it is ready sooner than a cold
        // boot started now would be, and the host may have no room for both.
        let booting = (pooled.is_none()
            && self.filling.contains(&msg.size)
            && !self.waiting.contains_key(&msg.size))
        .then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.waiting.insert(msg.size, tx);
            rx
        });
        let parts = self.parts.clone();
        let configure_with = Configure {
            env: std::mem::take(&mut msg.env),
            files: std::mem::take(&mut msg.files),
            endpoints: std::mem::take(&mut msg.endpoints),
            wiring: crate::wiring::boxd_wiring(&msg.spec),
            aws: msg.aws.take(),
        };
        let mask = std::mem::take(&mut msg.mask);
        Box::pin(
            async move {
                let pooled = match booting {
                    // A failed pool boot drops the sender: start cold.
                    Some(rx) => rx.await.ok(),
                    None => pooled,
                };
                make(&parts, pooled, msg, configure_with, mask).await
            }
            .into_actor(self)
            .map(|result, act, _| {
                let ((record, link, hello), masker) = result?;
                let snapshot = BoxSnapshot::of(
                    record.clone(),
                    Some(hello.clone()),
                    None,
                    &act.parts.machine.settings,
                );
                act.parts
                    .new_actor(record, Some((link, hello)), masker)
                    .start();
                Ok(snapshot)
            }),
        )
    }
}

/// A box for the request, configured: from the pool when one was taken,
/// else cold. A pooled box that cannot be claimed or will not take its
/// configuration is failed and replaced by a cold start: the user's start is
/// not lost with it.
async fn make(
    parts: &HostParts,
    pooled: Option<PooledBox>,
    msg: CreateBox,
    with: Configure,
    mask: Vec<String>,
) -> Result<(Booted, Arc<Masker>), BoxError> {
    let claimed = PoolClaim {
        account_id: msg.account.clone(),
        name: msg.name.clone(),
        goal: msg.goal.clone(),
        keep_secs: msg.keep_secs,
        spec: msg.spec.clone(),
    };
    if let Some(pooled) = pooled {
        let pooled_id = pooled.record.id.clone();
        match claim(parts, pooled, claimed).await {
            Ok(booted) => match configure(&parts.machine, booted, with.clone(), mask.clone()).await
            {
                Ok(done) => return Ok(done),
                Err(e) => {
                    tracing::warn!(box_id = %pooled_id, error = %e, "pooled box did not take its claim; starting one cold")
                }
            },
            // Another creation for the account got there first: a cold
            // start would be refused too.
            Err(e @ BoxError::Store(crate::store::StoreError::QuotaExceeded(_))) => return Err(e),
            Err(e) => {
                tracing::warn!(box_id = %pooled_id, error = %e, "pooled box unusable; starting one cold")
            }
        }
    }
    let new = NewBox {
        account_id: Some(msg.account),
        name: msg.name,
        goal: msg.goal,
        keep_secs: msg.keep_secs,
        spec: msg.spec,
        ..reserve_new(&parts.machine, msg.size, BoxState::Creating)?
    };
    let booted = cold(parts, new).await?;
    configure(&parts.machine, booted, with, mask).await
}

/// Pushes the account data (the secrets, the environment's files) to boxd; a
/// box that cannot take it is removed (`NotConfigured`: nothing of the start
/// is kept, and the caller may retry). Returns the mask of the secrets and of
/// the further `mask` values.
async fn configure(
    machine: &Arc<Machine>,
    booted: Booted,
    configure: Configure,
    mask: Vec<String>,
) -> Result<(Booted, Arc<Masker>), BoxError> {
    let masker = Arc::new(Masker::new(
        configure
            .env
            .iter()
            .map(|(_, v)| v.as_str())
            .chain(mask.iter().map(String::as_str)),
    ));
    let answer = booted.1.handle().call(&configure, CONFIGURE).await;
    let failure = match answer {
        Ok(done) if done.ok => return Ok((booted, masker)),
        Ok(done) => masker.mask(&done.error.unwrap_or_default()),
        Err(e) => e.to_string(),
    };
    let error = BoxError::NotConfigured(failure);
    let record = booted.0.clone();
    drop(booted);
    clean_up_failed(machine, &record, &error).await;
    Err(error)
}

impl Handler<Refill> for HostSupervisor {
    type Result = ();

    fn handle(&mut self, _: Refill, ctx: &mut Context<Self>) {
        // Not without the host's lease: the next renewal's refill comes
        // with the pool boot's retry.
        if !self.parts.machine.lease.is_held() {
            ctx.notify_later(Refill, POOL_RETRY);
            return;
        }
        let settings = &self.parts.machine.settings;
        for size in settings.pool_unit_sizes.clone() {
            let have = self.pool.get(&size).map_or(0, |q| q.len());
            if have >= settings.pool_size || self.filling.contains(&size) {
                continue;
            }
            self.filling.insert(size);
            let fut = pool_boot(self.parts.clone(), size).into_actor(self).map(
                move |result, act, ctx| {
                    act.filling.remove(&size);
                    match result {
                        Ok(pooled) => {
                            tracing::info!(box_id = %pooled.record.id, size, "pool box ready");
                            let pooled = match act.waiting.remove(&size) {
                                Some(waiter) => waiter.send(pooled).err(),
                                None => Some(pooled),
                            };
                            if let Some(pooled) = pooled {
                                act.pool.entry(size).or_default().push_back(pooled);
                            }
                            ctx.notify(Refill);
                        }
                        Err(e) => {
                            // A creation waiting for this box starts cold.
                            act.waiting.remove(&size);
                            match e {
                                BoxError::HostFull(_) => {
                                    tracing::debug!(size, "pool waits for room")
                                }
                                e => tracing::warn!(size, error = %e, "could not boot a pool box"),
                            }
                            ctx.run_later(POOL_RETRY, |_, ctx| ctx.notify(Refill));
                        }
                    }
                },
            );
            ctx.spawn(fut);
        }
    }
}
