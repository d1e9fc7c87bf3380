//! Making boxes: claimed from the pool (a resume, tens of milliseconds) or
//! booted cold, and the pool's background refill.

use super::{HostSupervisor, POOL_RETRY, PooledBox};
use crate::box_::link::BoxdLink;
use crate::box_::state::BoxState;
use crate::box_::{BoxActor, BoxSnapshot};
use crate::error::{BoxError, blocking};
use crate::exec::mask::Masker;
use crate::host::context::HostContext;
use crate::ids::{AccountId, BoxId};
use crate::spec::BoxSpec;
use crate::store::{BoxRecord, Claim, NewBox, Transition};
use actix::prelude::*;
use psbx_wire::boxd::BoxInfo;
use psbx_wire::boxd::{ConfigFile, Configure, Done, PrivateEndpoint};
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
    pub endpoints: Vec<PrivateEndpoint>,
    /// Further values to mask in output (an environment's secret-looking settings).
    pub mask: Vec<String>,
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

/// Starts a box's domain and waits for boxd's hello; the record moves from
/// `creating` to `booting` on the way (a pooled record stays `pooled`).
async fn boot(hctx: &Arc<HostContext>, record: BoxRecord) -> Result<Booted, BoxError> {
    let (h, r) = (hctx.clone(), record.clone());
    blocking(move || h.boot(&r)).await?;
    let record = if record.state == BoxState::Creating {
        let (store, id) = (hctx.store.clone(), record.id.clone());
        blocking(move || {
            store.transition_box(
                &id,
                BoxState::Creating,
                BoxState::Booting,
                Transition::default(),
            )
        })
        .await?
        .ok_or_else(|| BoxError::Internal("the new box changed state under us".into()))?
    } else {
        record
    };
    let link = hctx.link_of(&record);
    let hello = link
        .handle()
        .hello(hctx.settings.boot_timeout)
        .await
        .map_err(|e| BoxError::Boot(e.to_string()))?;
    Ok((record, link, hello))
}

/// Removes what a failed start left and records why.
async fn clean_up_failed(hctx: &Arc<HostContext>, id: &BoxId, error: &BoxError, pooled: bool) {
    let (h, bid) = (hctx.clone(), id.clone());
    let reason = error.to_string();
    let result = blocking(move || {
        h.teardown(&bid)?;
        if pooled {
            return h.store.delete_pooled_box(&bid).map_err(BoxError::from);
        }
        if let Some(row) = h.store.box_by_id(&bid)?
            && !row.state.is_terminal()
        {
            let detail = Transition {
                failure: Some(reason),
                ..Transition::default()
            };
            h.store
                .transition_box(&bid, row.state, BoxState::Failed, detail)?;
        }
        Ok::<_, BoxError>(())
    })
    .await;
    hctx.release(id);
    if let Err(e) = result {
        tracing::error!(box_id = %id, error = %e, "could not clean up after a failed start");
    }
}

/// A cold start: row, disk, domain, hello, `running`.
async fn cold(hctx: Arc<HostContext>, new: NewBox) -> Result<Booted, BoxError> {
    let id = new.id.clone();
    let started = Instant::now();
    let store = hctx.store.clone();
    let record = blocking(move || store.insert_box(&new)).await;
    let record = match record {
        Ok(r) => r,
        Err(e) => {
            hctx.release(&id);
            return Err(e);
        }
    };
    let result = async {
        let (record, link, hello) = boot(&hctx, record).await?;
        let detail = Transition {
            boot_id: Some(hello.boot_id.clone()),
            ..Transition::default()
        };
        let (store, bid) = (hctx.store.clone(), record.id.clone());
        let record = blocking(move || {
            store.transition_box(&bid, BoxState::Booting, BoxState::Running, detail)
        })
        .await?
        .ok_or_else(|| BoxError::Internal("the new box changed state under us".into()))?;
        Ok((record, link, hello))
    }
    .await;
    match &result {
        Ok(_) => {
            tracing::info!(box_id = %id, ms = started.elapsed().as_millis() as u64, "box started cold")
        }
        Err(e) => clean_up_failed(&hctx, &id, e, false).await,
    }
    result
}

/// A pool box for an account: resume it, check boxd answers, hand it over.
async fn claim(
    hctx: Arc<HostContext>,
    pooled: PooledBox,
    claim: Claim,
) -> Result<Booted, BoxError> {
    let PooledBox { record } = pooled;
    let started = Instant::now();
    let result = async {
        let (h, name) = (hctx.clone(), HostContext::domain_name(&record.id));
        blocking(move || {
            h.network_ready()?;
            h.host.resume(&name).map_err(BoxError::from)
        })
        .await?;
        let link = hctx.link(&record.id, Some(&claim.account_id), &claim.spec);
        let hello = link
            .handle()
            .hello(RESUME_HELLO)
            .await
            .map_err(|e| BoxError::Boot(format!("the pooled box did not wake: {e}")))?;
        let (store, id, boot_id) = (hctx.store.clone(), record.id.clone(), hello.boot_id.clone());
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
            clean_up_failed(&hctx, &record.id, &e, true).await;
            Err(e)
        }
    }
}

/// Boots one box into the pool and suspends it.
async fn pool_boot(hctx: Arc<HostContext>, size: u32) -> Result<PooledBox, BoxError> {
    let id = BoxId::generate().map_err(|e| BoxError::Internal(e.to_string()))?;
    let unit = hctx.settings.resources(size);
    hctx.image(&hctx.settings.image)?;
    hctx.reserve(&id, unit)?;
    let new = NewBox {
        id: id.clone(),
        account_id: None,
        host_uri: hctx.host.uri().to_owned(),
        state: BoxState::Pooled,
        name: None,
        goal: None,
        image: hctx.settings.image.clone(),
        size,
        vcpus: unit.vcpus,
        memory_mib: unit.memory_mib,
        disk_gb: unit.disk_gb,
        keep_secs: 0,
        spec: BoxSpec::default(),
    };
    let result = async {
        let store = hctx.store.clone();
        let record = blocking(move || store.insert_box(&new)).await?;
        let (record, link, _) = boot(&hctx, record).await?;
        // The session ends before the pause, not during it.
        drop(link);
        let (h, name) = (hctx.clone(), HostContext::domain_name(&record.id));
        blocking(move || h.host.suspend(&name)).await?;
        Ok(PooledBox { record })
    }
    .await;
    if let Err(e) = &result {
        clean_up_failed(&hctx, &id, e, true).await;
    }
    result
}

impl Handler<CreateBox> for HostSupervisor {
    type Result = ResponseActFuture<Self, Result<BoxSnapshot, BoxError>>;

    fn handle(&mut self, mut msg: CreateBox, ctx: &mut Context<Self>) -> Self::Result {
        let pooled = self.pool.get_mut(&msg.size).and_then(|q| q.pop_front());
        if pooled.is_some() {
            ctx.notify(Refill);
        }
        let hctx = self.ctx.clone();
        let configure_with = Configure {
            env: std::mem::take(&mut msg.env),
            files: std::mem::take(&mut msg.files),
            endpoints: std::mem::take(&mut msg.endpoints),
        };
        let mask = std::mem::take(&mut msg.mask);
        Box::pin(
            async move {
                let booted = make(hctx.clone(), pooled, msg).await?;
                configure(&hctx, booted, configure_with, mask).await
            }
            .into_actor(self)
            .map(|result, act, _| {
                let ((record, link, hello), masker) = result?;
                let snapshot = BoxSnapshot::of(
                    record.clone(),
                    Some(hello.clone()),
                    None,
                    act.ctx.settings.idle_freeze,
                );
                BoxActor::new(record, act.ctx.clone(), Some((link, hello)), masker).start();
                Ok(snapshot)
            }),
        )
    }
}

/// A box for the request: from the pool when one was taken, else cold.
async fn make(
    hctx: Arc<HostContext>,
    pooled: Option<PooledBox>,
    msg: CreateBox,
) -> Result<Booted, BoxError> {
    let claimed = Claim {
        account_id: msg.account.clone(),
        name: msg.name.clone(),
        goal: msg.goal.clone(),
        keep_secs: msg.keep_secs,
        spec: msg.spec.clone(),
    };
    if let Some(pooled) = pooled {
        match claim(hctx.clone(), pooled, claimed).await {
            Ok(booted) => return Ok(booted),
            Err(e) => {
                tracing::warn!(error = %e, "pooled box unusable; starting one cold")
            }
        }
    }
    let id = BoxId::generate().map_err(|e| BoxError::Internal(e.to_string()))?;
    let unit = hctx.settings.resources(msg.size);
    hctx.image(&hctx.settings.image)?;
    hctx.reserve(&id, unit)?;
    let new = NewBox {
        id,
        account_id: Some(msg.account),
        host_uri: hctx.host.uri().to_owned(),
        state: BoxState::Creating,
        name: msg.name,
        goal: msg.goal,
        image: hctx.settings.image.clone(),
        size: msg.size,
        vcpus: unit.vcpus,
        memory_mib: unit.memory_mib,
        disk_gb: unit.disk_gb,
        keep_secs: msg.keep_secs,
        spec: msg.spec,
    };
    cold(hctx, new).await
}

/// Pushes the account data (the secrets, the environment's files) to boxd; a
/// box that cannot take it is removed. Returns the mask of the secrets and of
/// the further `mask` values.
async fn configure(
    hctx: &Arc<HostContext>,
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
    let answer: Result<Done, _> = booted
        .1
        .handle()
        .request("configure", &configure, CONFIGURE)
        .await;
    let failure = match answer {
        Ok(done) if done.ok => return Ok((booted, masker)),
        Ok(done) => done.error.unwrap_or_default(),
        Err(e) => e.to_string(),
    };
    let error = BoxError::Boot(format!(
        "boxd did not take the box's configuration: {failure}"
    ));
    let id = booted.0.id.clone();
    drop(booted);
    clean_up_failed(hctx, &id, &error, false).await;
    Err(error)
}

impl Handler<Refill> for HostSupervisor {
    type Result = ();

    fn handle(&mut self, _: Refill, ctx: &mut Context<Self>) {
        let settings = &self.ctx.settings;
        for size in settings.pool_unit_sizes.clone() {
            let have = self.pool.get(&size).map_or(0, |q| q.len());
            if have >= settings.pool_size || self.filling.contains(&size) {
                continue;
            }
            self.filling.insert(size);
            let fut = pool_boot(self.ctx.clone(), size).into_actor(self).map(
                move |result, act, ctx| {
                    act.filling.remove(&size);
                    match result {
                        Ok(pooled) => {
                            tracing::info!(box_id = %pooled.record.id, size, "pool box ready");
                            act.pool.entry(size).or_default().push_back(pooled);
                            ctx.notify(Refill);
                        }
                        Err(e) => {
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
