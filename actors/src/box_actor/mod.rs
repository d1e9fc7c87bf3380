//! BoxActor: one per live box (running or frozen). It owns the box's state
//! machine, its link to boxd, and its idle-freeze and expiry timers, re-armed
//! from the stored last-activity time whenever the actor starts.
//!
//! Every lifecycle message is answered atomically: while a freeze, thaw or
//! stop runs, no other message of this box is handled, so the box never sees
//! two lifecycle calls at once.
//!
//! **A failed step keeps the box** (issue 30). A step is checked first,
//! acted on, and written last. Refused before any side effect (the state
//! does not allow it, capacity, a quota, the network rules, its disk's key
//! not handed to libvirt), it returns its error and the box is as it was. A hypervisor call that failed with the
//! domain as it was (a restore refused with the managed save still there, a
//! save given up with the domain still running; `BoxError::StepFailed`, 503
//! `box_step_failed`) leaves the box frozen or running, its capacity, link
//! and timers as they were. Only a VM whose state psbx cannot tell (started,
//! but no hello from boxd; the domain gone or moved by a failed call; the
//! record not written after the domain moved) fails the box, which deletes
//! it.
//!
//! The actor names no part of the host. It takes its lifecycle steps and
//! its share of the capacity ledger from the [`Machine`] below it, and what
//! only the host has (its link to boxd, whose inbound streams the host
//! switches; the registry it enters; the host's book of its links) through
//! [`Hosting`], which the host implements: so the supervisor, which starts
//! actors and finds them, sits above the actor, and nothing here reaches back
//! up to it.

mod handlers;
mod lease;

pub use handlers::{Channel, ForAccount, Forget, Freeze, Keep, Rewire, Status, Stop};
pub use lease::{Lease, Traffic};

use crate::blocking::blocking;
use crate::box_state::BoxState;
use crate::boxd_link::{BoxdLink, LinkHandle};
use crate::exec::mask::Masker;
use crate::ids::BoxId;
use crate::machine::Machine;
use crate::spec::LinkSpec;
use crate::store::BoxRecord;
use actix::prelude::*;
use chrono::{DateTime, Utc};
use psbx_wire::boxd::{BoxInfo, Health};
use std::sync::Arc;
use std::time::Duration;

/// A box as its actor knows it: the record plus what boxd says (what the
/// API adds, its URLs and linked boxes, is `boxes::BoxReading`'s).
#[derive(Debug, Clone)]
pub struct BoxSnapshot {
    pub record: BoxRecord,
    pub hello: Option<BoxInfo>,
    pub health: Option<Health>,
    pub freezes_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
}

impl BoxSnapshot {
    /// The snapshot of `record` with what boxd said; the deadlines follow from
    /// the last activity, and for a frozen box from when it froze too: its
    /// saved memory is kept at most `settings.max_frozen`, whatever its
    /// `keep` says (a row may hold a longer one from an older configuration).
    pub fn of(
        record: BoxRecord,
        hello: Option<BoxInfo>,
        health: Option<Health>,
        settings: &crate::settings::BoxSettings,
    ) -> Self {
        let span = |d: Duration| {
            chrono::Duration::from_std(d).unwrap_or_else(|_| chrono::Duration::days(1))
        };
        let freezes_at = (record.state == BoxState::Running)
            .then(|| record.last_activity_at + span(settings.idle_freeze));
        let kept = record.last_activity_at + chrono::Duration::seconds(record.keep_secs);
        let expires_at = match record.frozen_at {
            Some(at) if record.state == BoxState::Frozen => {
                kept.min(at + span(settings.max_frozen))
            }
            _ => kept,
        };
        Self {
            record,
            hello,
            health,
            freezes_at,
            expires_at,
        }
    }
}

/// How long a status call waits for boxd's pong.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the status read right after a start waits for it: a pooled box
/// was resumed a moment ago, and a busy host may take seconds to run it.
pub const WOKEN_PATIENCE: Duration = Duration::from_secs(15);

/// What a box's actor needs from the host it runs on, beyond the machine:
/// implemented by the host (`host::HostParts`), so that the actor never
/// names it.
pub trait Hosting: Send + Sync {
    /// A link to the box's boxd, the streams boxd opens on it answered by
    /// the host (`host/switch.rs`).
    fn link(&self, record: &BoxRecord) -> BoxdLink;
    /// The box's actor started: the host finds it from now on.
    fn started(&self, id: &BoxId, actor: Addr<BoxActor>);
    /// The box's links are now `links` (it stored a new spec).
    fn rewired(&self, id: &BoxId, links: &[LinkSpec]);
    /// The box's actor ended: the host forgets it, and the box's links.
    fn stopped(&self, id: &BoxId);
}

pub struct BoxActor {
    record: BoxRecord,
    machine: Arc<Machine>,
    hosting: Arc<dyn Hosting>,
    link: Option<BoxdLink>,
    hello: Option<BoxInfo>,
    idle_timer: Option<SpawnHandle>,
    /// How many times the timers were armed: the idle timer's message names
    /// its arming, so one that crossed a re-arming in the mailbox is ignored.
    armed: u64,
    expiry_timer: Option<SpawnHandle>,
    /// What keeps the box awake while someone waits on it.
    leases: lease::Leases,
    /// The box's secret values, masked in output returned to callers.
    masker: Arc<Masker>,
    /// When this actor last wrote the box's activity (tokio's clock, which
    /// the timers run on).
    touched_at: Option<tokio::time::Instant>,
}

impl BoxActor {
    /// An actor for a box that is running (with its link, hello received) or
    /// frozen (no link).
    pub fn new(
        record: BoxRecord,
        machine: Arc<Machine>,
        hosting: Arc<dyn Hosting>,
        link: Option<(BoxdLink, BoxInfo)>,
        masker: Arc<Masker>,
    ) -> Self {
        let (link, hello) = match link {
            Some((l, h)) => (Some(l), Some(h)),
            None => (None, None),
        };
        Self {
            record,
            machine,
            hosting,
            link,
            hello,
            idle_timer: None,
            armed: 0,
            expiry_timer: None,
            leases: lease::Leases::default(),
            masker,
            touched_at: None,
        }
    }

    fn name(&self) -> String {
        Machine::domain_name(&self.record.id)
    }

    fn snapshot(&self, mut health: Option<Health>) -> BoxSnapshot {
        for endpoint in health.iter_mut().flat_map(|h| &mut h.private_endpoints) {
            if let Some(failure) = &mut endpoint.last_failure {
                *failure = self.masker.mask(failure);
            }
        }
        BoxSnapshot::of(
            self.record.clone(),
            self.hello.clone(),
            health,
            &self.machine.settings,
        )
    }

    /// (Re)arms the timers from the record: idle freeze while running, expiry
    /// always. A deadline already past fires at once.
    fn arm_timers(&mut self, ctx: &mut Context<Self>) {
        self.cancel_timers(ctx);
        let until = |at: DateTime<Utc>| (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        let deadlines = self.snapshot(None);
        self.armed += 1;
        let armed = self.armed;
        if let Some(at) = deadlines.freezes_at {
            self.idle_timer = Some(ctx.run_later(until(at), move |_, ctx| {
                ctx.notify(handlers::Idle { armed })
            }));
        }
        self.expiry_timer = Some(ctx.run_later(until(deadlines.expires_at), |_, ctx| {
            ctx.notify(handlers::Expire)
        }));
    }

    fn cancel_timers(&mut self, ctx: &mut Context<Self>) {
        for handle in [self.idle_timer.take(), self.expiry_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(handle);
        }
    }

    fn link_handle(&self) -> Option<LinkHandle> {
        self.link.as_ref().map(BoxdLink::handle)
    }

    /// Fails the box after its VM was found broken or gone
    /// ([`Machine::fail_box`]), and ends the actor.
    fn fail(&mut self, ctx: &mut Context<Self>, reason: String) {
        self.cancel_timers(ctx);
        self.link = None;
        let (machine, record) = (self.machine.clone(), self.record.clone());
        ctx.wait(
            async move {
                let id = record.id.clone();
                let result = blocking(move || machine.fail_box(&record, &reason)).await;
                match result {
                    Ok(failed) => failed,
                    Err(e) => {
                        tracing::error!(box_id = %id, error = %e, "could not record a failed box");
                        None
                    }
                }
            }
            .into_actor(self)
            .map(|record, act, ctx| {
                if let Some(record) = record {
                    act.record = record;
                }
                ctx.stop();
            }),
        );
    }
}

impl Actor for BoxActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.hosting.started(&self.record.id, ctx.address());
        if self.record.state == BoxState::Running
            && let Err(e) = self.machine.reserve(&self.record.id, self.record.unit())
        {
            // Adopted after a restart onto a host that shrank: keep it running.
            tracing::warn!(box_id = %self.record.id, error = %e, "running box exceeds capacity");
        }
        if self.record.state == BoxState::Running {
            // boxd has said hello: what its QEMU process uses is what counts.
            self.machine.settle(&self.record.id);
        }
        if matches!(self.record.state, BoxState::Running | BoxState::Frozen) {
            // Its files are on disk already, whatever the ledger said above.
            self.machine.hold_disk(&self.record.id, self.record.unit());
        }
        self.arm_timers(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.hosting.stopped(&self.record.id);
        self.machine.release_all(&self.record.id);
    }
}
