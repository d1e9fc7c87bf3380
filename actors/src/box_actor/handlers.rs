//! The messages a BoxActor answers: `Status` (thaws first when asked; asks
//! boxd how it is), `Keep`, `Stop`, `Channel` (thaws when asked and hands out
//! the link to boxd and the mask, in one turn), `Rewire` (new declared
//! services or links: boxd first, then the stored spec), each also
//! `ForAccount` (the API's, answered for the box's own account only),
//! `Forget` (ended outside the actor), `Freeze` (the host's pressure), and its
//! own timers' `Idle` and `Expire` (neither ends a box a lease holds awake:
//! `lease.rs`).

use super::{BoxActor, BoxSnapshot, PING_TIMEOUT};
use crate::blocking::blocking;
use crate::box_state::BoxState;
use crate::boxd_link::LinkHandle;
use crate::error::BoxError;
use crate::exec::mask::Masker;
use crate::ids::AccountId;
use crate::store::Transition;
use actix::fut::{ActorFutureExt, WrapFuture, ready};
use actix::prelude::*;
use std::sync::Arc;
use std::time::Duration;

type Reply<T> = AtomicResponse<BoxActor, Result<T, BoxError>>;

/// Where a failed freeze or thaw left the box: as it was (frozen, or
/// running), or in a state psbx cannot tell (then it is failed).
enum Kept {
    Frozen(BoxError),
    Running(BoxError),
    Unknown(BoxError),
}

impl From<crate::blocking::TaskFailed> for Kept {
    fn from(e: crate::blocking::TaskFailed) -> Self {
        Self::Unknown(e.into())
    }
}
pub(super) type Flow<T> = ResponseActFuture<BoxActor, Result<T, BoxError>>;

/// How often a box's actor writes its activity at most: a touch within this
/// long of the last one it wrote changes nothing.
const TOUCH_EVERY: Duration = Duration::from_secs(1);
/// Read the box (and ask boxd how it is). `thaw`: wake a frozen box first;
/// `touch`: count this as activity; `patience`: how long boxd has to answer
/// (a box just woken may be saying hello again first), else its health is
/// unknown.
#[derive(Message)]
#[rtype(result = "Result<BoxSnapshot, BoxError>")]
pub struct Status {
    pub thaw: bool,
    pub touch: bool,
    pub patience: Duration,
}

/// Keep the box this long after its last activity.
#[derive(Message)]
#[rtype(result = "Result<BoxSnapshot, BoxError>")]
pub struct Keep {
    pub keep_secs: i64,
}

/// Change the box's services and links (`crate::wiring::apply` on its spec
/// as it is now, in the mailbox's order): boxd is told first (a refusal
/// changes nothing), then the spec is stored.
#[derive(Message)]
#[rtype(result = "Result<BoxSnapshot, BoxError>")]
pub struct Rewire {
    pub change: crate::wiring::WireChange,
}

/// When a held box's activity could not be written, how long until its timers
/// look again.
const HELD_RETRY: Duration = Duration::from_secs(10);

/// How long boxd may take to rewire the box (nft, new listeners).
const REWIRE: Duration = Duration::from_secs(15);

/// Stop the box for good: domain, disk and saved memory deleted.
#[derive(Message)]
#[rtype(result = "Result<BoxSnapshot, BoxError>")]
pub struct Stop {
    pub reason: &'static str,
}

/// The box was ended outside this actor (an operator's `psbx boxes stop`):
/// stop the actor and its timers without touching the VM or the row.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Forget;

/// Freeze the box now (the host's memory or disk pressure), leases or not.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Freeze;

/// The idle timer of arming `armed` fired: freeze the box unless a lease
/// holds it awake.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Idle {
    pub armed: u64,
}

#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Expire;

impl BoxActor {
    fn over(&self) -> BoxError {
        BoxError::Over {
            id: self.record.id.to_string(),
            state: self.record.state,
            reason: self.record.failure.clone(),
        }
    }

    /// The check before a lifecycle change, made before libvirt is called: an
    /// ended box says so (`Over`), any other change its state does not allow
    /// is an `InvalidTransition`.
    fn check(&self, to: BoxState) -> Result<(), BoxError> {
        if self.record.state.is_terminal() {
            return Err(self.over());
        }
        Ok(self.record.state.check(&self.record.id, to)?)
    }

    /// Wakes a frozen box: start from its managed save, wait for boxd's hello.
    /// A running box is awake already.
    fn thaw(&mut self) -> Flow<()> {
        if self.record.state == BoxState::Running {
            return Box::pin(ready(Ok(())));
        }
        if let Err(e) = self.check(BoxState::Running) {
            return Box::pin(ready(Err(e)));
        }
        if let Err(e) = self.machine.reserve(&self.record.id, self.record.unit()) {
            return Box::pin(ready(Err(e)));
        }
        let (machine, hosting) = (self.machine.clone(), self.hosting.clone());
        let (record, name) = (self.record.clone(), self.name());
        let started = std::time::Instant::now();
        Box::pin(
            async move {
                let (h, record_id) = (machine.clone(), record.id.clone());
                // Refused before the domain moved (the network rules, the
                // hypervisor's start with the saved domain left as it was):
                // the box stays frozen.
                blocking(move || {
                    h.network_ready()?;
                    // libvirt forgets the disk's key when libvirtd restarts.
                    h.give_disk_key(&record_id).map_err(|e| BoxError::StepFailed {
                        step: "thaw",
                        source: Box::new(e),
                    })?;
                    if let Err(source) = h.host.start(&name) {
                        let saved = psbx_libvirt::DomainStatus::ShutOff { saved: true };
                        return Err(if h.domain_is(&record_id, saved) {
                            BoxError::StepFailed {
                                step: "thaw",
                                source: Box::new(source.into()),
                            }
                        } else {
                            source.into()
                        });
                    }
                    h.prefer_for_oom(&record_id);
                    Ok::<_, BoxError>(())
                })
                .await
                .map_err(Kept::Frozen)?;
                let restored_ms = started.elapsed().as_millis() as u64;
                let link = hosting.link(&record);
                let (record, hello) = machine
                    .await_hello_and_run(record, &link, machine.settings.boot_timeout, "after thawing: ")
                    .await
                    .map_err(Kept::Unknown)?;
                tracing::debug!(box_id = %record.id, restored_ms, "boxd answered after the restore");
                Ok((record, link, hello))
            }
            .into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok((record, link, hello)) => {
                    if act.hello.as_ref().is_some_and(|h| h.boot_id != hello.boot_id) {
                        tracing::warn!(box_id = %record.id, "the box rebooted while frozen");
                    }
                    tracing::info!(box_id = %record.id, ms = started.elapsed().as_millis() as u64, "thawed");
                    act.record = record;
                    act.link = Some(link);
                    act.hello = Some(hello);
                    act.arm_timers(ctx);
                    Ok(())
                }
                Err(Kept::Frozen(e)) if e.keeps_the_box() => {
                    tracing::warn!(box_id = %act.record.id, error = %e, "the box could not be thawed; it stays frozen");
                    act.machine.release(&act.record.id);
                    Err(e)
                }
                Err(Kept::Frozen(e) | Kept::Running(e) | Kept::Unknown(e)) => {
                    act.fail(ctx, format!("could not be thawed: {e}"));
                    Err(e)
                }
            }),
        )
    }

    /// Counts activity now: the stored last activity moves and the timers
    /// restart. boxd is not asked.
    pub(super) fn touch(&mut self) -> Flow<()> {
        if self.record.state.is_terminal() {
            return Box::pin(ready(Err(self.over())));
        }
        // A box answering requests (its URL's small GETs) would write its
        // activity once per request, each write holding the mailbox: within
        // [`TOUCH_EVERY`] of the last write the stored time is close enough.
        // Timed on tokio's clock, as the idle timer is.
        let now = tokio::time::Instant::now();
        if self
            .touched_at
            .is_some_and(|at| now.duration_since(at) < TOUCH_EVERY)
        {
            return Box::pin(ready(Ok(())));
        }
        self.touched_at = Some(now);
        let (store, id) = (self.machine.store.clone(), self.record.id.clone());
        Box::pin(
            async move { blocking(move || store.touch_box(&id)).await }
                .into_actor(self)
                .map(|result, act, ctx| {
                    act.record.last_activity_at = result?;
                    act.arm_timers(ctx);
                    Ok(())
                }),
        )
    }

    /// Counts activity now when `touch`, and pings boxd when running, waiting
    /// `patience` for its answer.
    fn refresh(&mut self, touch: bool, patience: Duration) -> Flow<BoxSnapshot> {
        if self.record.state.is_terminal() {
            return Box::pin(ready(Err(self.over())));
        }
        let touched = if touch {
            self.touch()
        } else {
            Box::pin(ready(Ok(())))
        };
        Box::pin(touched.then(move |result, act, _| -> Flow<BoxSnapshot> {
            if let Err(e) = result {
                return Box::pin(ready(Err(e)));
            }
            let link = (act.record.state == BoxState::Running)
                .then(|| act.link_handle())
                .flatten();
            let box_id = act.record.id.clone();
            Box::pin(
                async move {
                    match link {
                        Some(link) => match link.ping(patience).await {
                            // The hello of the session that answered: a boxd
                            // restarted since the last one says hello again.
                            Ok(health) => (Some(health), link.hello(patience).await.ok()),
                            Err(e) => {
                                tracing::warn!(%box_id, error = %e, "boxd did not answer the health read");
                                (None, None)
                            }
                        },
                        None => (None, None),
                    }
                }
                .into_actor(act)
                .map(|(health, hello), act, _| {
                    if hello.is_some() {
                        act.hello = hello;
                    }
                    Ok(act.snapshot(health))
                }),
            )
        }))
    }

    /// Saves a running box's memory and disk (libvirt's managed save).
    fn freeze(&mut self, ctx: &mut Context<Self>) -> Flow<()> {
        if let Err(e) = self.check(BoxState::Frozen) {
            return Box::pin(ready(Err(e)));
        }
        self.cancel_timers(ctx);
        // No call takes the link while the box freezes; it comes back if
        // the box stays running.
        let link = self.link.take();
        let (machine, record, name) = (self.machine.clone(), self.record.clone(), self.name());
        let started = std::time::Instant::now();
        Box::pin(
            async move {
                let (h, id) = (machine.clone(), record.id.clone());
                blocking(move || match h.host.managed_save(&name) {
                    Ok(()) => Ok(()),
                    // A save libvirt gave up with the domain still running
                    // leaves the box running.
                    Err(source) if h.domain_is(&id, psbx_libvirt::DomainStatus::Running) => {
                        Err(Kept::Running(BoxError::StepFailed {
                            step: "freeze",
                            source: Box::new(source.into()),
                        }))
                    }
                    Err(e) => Err(Kept::Unknown(e.into())),
                })
                .await?;
                machine
                    .transition(&record, BoxState::Frozen, Transition::default())
                    .await
                    .map_err(Kept::Unknown)
            }
            .into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok(record) => {
                    tracing::info!(box_id = %record.id, ms = started.elapsed().as_millis() as u64, "frozen");
                    act.record = record;
                    act.machine.release(&act.record.id);
                    act.arm_timers(ctx);
                    Ok(())
                }
                Err(Kept::Running(e)) if e.keeps_the_box() => {
                    tracing::warn!(box_id = %act.record.id, error = %e, "the box could not be frozen; it goes on running");
                    act.link = link;
                    act.arm_timers(ctx);
                    Err(e)
                }
                Err(Kept::Frozen(e) | Kept::Running(e) | Kept::Unknown(e)) => {
                    act.fail(ctx, format!("could not be frozen: {e}"));
                    Err(e)
                }
            }),
        )
    }

    /// Ends the box for good: domain, disk and saved memory deleted.
    fn stop(&mut self, ctx: &mut Context<Self>, reason: &'static str) -> Flow<BoxSnapshot> {
        if let Err(e) = self.check(BoxState::Stopped) {
            return Box::pin(ready(Err(e)));
        }
        self.cancel_timers(ctx);
        self.link = None;
        let (machine, record) = (self.machine.clone(), self.record.clone());
        Box::pin(
            async move {
                let (h, id) = (machine.clone(), record.id.clone());
                blocking(move || h.teardown(&id)).await?;
                machine
                    .transition(&record, BoxState::Stopped, Transition::default())
                    .await
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                let record = result?;
                tracing::info!(box_id = %record.id, reason, "stopped");
                // Its files are gone: the next box may have its room at once
                // (the actor's end releases it too, later).
                act.machine.release_all(&record.id);
                act.record = record;
                ctx.stop();
                Ok(act.snapshot(None))
            }),
        )
    }
}

impl Handler<Status> for BoxActor {
    type Result = Reply<BoxSnapshot>;

    fn handle(&mut self, msg: Status, _: &mut Context<Self>) -> Self::Result {
        let thaw = if msg.thaw {
            self.thaw()
        } else {
            Box::pin(ready(Ok(())))
        };
        AtomicResponse::new(Box::pin(thaw.then(move |result, act, _| match result {
            Ok(()) => act.refresh(msg.touch, msg.patience),
            Err(e) => Box::pin(ready(Err(e))),
        })))
    }
}

impl Handler<Keep> for BoxActor {
    type Result = Reply<BoxSnapshot>;

    fn handle(&mut self, msg: Keep, _: &mut Context<Self>) -> Self::Result {
        let thaw = self.thaw();
        AtomicResponse::new(Box::pin(thaw.then(
            move |result, act, _| -> Flow<BoxSnapshot> {
                // Thawed, or refused (an ended box among them).
                if let Err(e) = result {
                    return Box::pin(ready(Err(e)));
                }
                let (store, id) = (act.machine.store.clone(), act.record.id.clone());
                Box::pin(
                    async move { blocking(move || store.set_box_keep(&id, msg.keep_secs)).await }
                        .into_actor(act)
                        .then(move |result, act, _| match result {
                            Ok(()) => {
                                act.record.keep_secs = msg.keep_secs;
                                act.refresh(true, PING_TIMEOUT)
                            }
                            Err(e) => Box::pin(ready(Err(e.into()))),
                        }),
                )
            },
        )))
    }
}

impl Handler<Rewire> for BoxActor {
    type Result = Reply<BoxSnapshot>;

    fn handle(&mut self, msg: Rewire, _: &mut Context<Self>) -> Self::Result {
        // Checked against the declarations first: a refused change thaws
        // nothing (the spec changes only here, one message at a time).
        let spec = match crate::wiring::apply(&self.record.spec, &msg.change) {
            Ok(spec) => spec,
            Err(refused) => {
                let e = match refused {
                    crate::wiring::Refused::Invalid(why) => BoxError::Invalid(why),
                    crate::wiring::Refused::Conflict(why) => BoxError::WireConflict(why),
                };
                return AtomicResponse::new(Box::pin(ready(Err(e)).into_actor(self)));
            }
        };
        let thaw = self.thaw();
        AtomicResponse::new(Box::pin(thaw.then(
            move |result, act, _| -> Flow<BoxSnapshot> {
                let link = match result.and_then(|()| act.channel()) {
                    Ok((link, _)) => link,
                    Err(e) => return Box::pin(ready(Err(e))),
                };
                let (store, id) = (act.machine.store.clone(), act.record.id.clone());
                let wiring = crate::wiring::boxd_wiring(&spec);
                Box::pin(
                    async move {
                        let done = link.call(&wiring, REWIRE).await?;
                        if !done.ok {
                            return Err(BoxError::CannotRun(format!(
                                "boxd could not rewire the box: {}",
                                done.error.unwrap_or_default()
                            )));
                        }
                        let stored = spec.clone();
                        blocking(move || store.set_box_spec(&id, &stored)).await?;
                        Ok(spec)
                    }
                    .into_actor(act)
                    .then(move |result, act, _| match result {
                        Ok(spec) => {
                            act.hosting.rewired(&act.record.id, &spec.links);
                            act.record.spec = spec;
                            act.refresh(true, PING_TIMEOUT)
                        }
                        Err(e) => Box::pin(ready(Err(e))),
                    }),
                )
            },
        )))
    }
}

impl Handler<Stop> for BoxActor {
    type Result = Reply<BoxSnapshot>;

    fn handle(&mut self, msg: Stop, ctx: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(self.stop(ctx, msg.reason))
    }
}

impl Handler<Freeze> for BoxActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Freeze, ctx: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(Box::pin(self.freeze(ctx).map(|result, act, _| {
            match result {
                Ok(()) => {}
                // The message crossed a change that left the box not running
                // (frozen or ended already): nothing to freeze.
                Err(e @ (BoxError::InvalidTransition(_) | BoxError::Over { .. })) => {
                    tracing::debug!(box_id = %act.record.id, error = %e, "no freeze")
                }
                Err(e) => tracing::error!(box_id = %act.record.id, error = %e, "freeze failed"),
            }
        })))
    }
}

impl Handler<Idle> for BoxActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Idle, ctx: &mut Context<Self>) -> Self::Result {
        if msg.armed != self.armed {
            // Re-armed since this timer fired (activity crossed it).
            return AtomicResponse::new(Box::pin(ready(())));
        }
        if let Some(later) = self.fenced(ctx) {
            return later;
        }
        if self.leases.active() {
            return AtomicResponse::new(self.held_awake());
        }
        self.handle(Freeze, ctx)
    }
}

impl Handler<Expire> for BoxActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Expire, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(later) = self.fenced(ctx) {
            return later;
        }
        if self.leases.active() {
            return AtomicResponse::new(self.held_awake());
        }
        AtomicResponse::new(Box::pin(self.stop(ctx, "expired").map(|result, act, _| {
            if let Err(e) = result {
                tracing::error!(box_id = %act.record.id, error = %e, "expiry failed");
            }
        })))
    }
}

impl BoxActor {
    /// A timer fired while this node does not hold the host's lease: it
    /// acts on nothing and looks again later (`machine::HostLease`).
    fn fenced(&mut self, ctx: &mut Context<Self>) -> Option<AtomicResponse<Self, ()>> {
        if self.machine.lease.is_held() {
            return None;
        }
        tracing::info!(box_id = %self.record.id, "a timer fired without the host's lease: looking again later");
        ctx.run_later(HELD_RETRY, |act, ctx| act.arm_timers(ctx));
        Some(AtomicResponse::new(Box::pin(ready(()))))
    }

    /// A timer fired on a box a lease holds: it counts as active now (its
    /// stored activity moves and the timers re-arm from it).
    fn held_awake(&mut self) -> ResponseActFuture<Self, ()> {
        Box::pin(self.touch().map(|result, act, ctx| {
            if let Err(e) = result {
                // Its timers are spent: look again a little later.
                tracing::warn!(box_id = %act.record.id, error = %e, "a held box's activity was not written");
                ctx.run_later(HELD_RETRY, |act, ctx| act.arm_timers(ctx));
            }
        }))
    }
}

impl Handler<Forget> for BoxActor {
    type Result = ();

    fn handle(&mut self, _: Forget, ctx: &mut Context<Self>) {
        self.cancel_timers(ctx);
        self.link = None;
        ctx.stop();
    }
}

/// What exec and the other box services need: the link to boxd and the mask
/// for the box's secrets, in one turn of the mailbox (no other lifecycle
/// message runs between the thaw and the answer). `thaw`: wake a frozen box
/// first (else a frozen box is refused); `touch`: count this as activity.
/// boxd is not asked how it is.
#[derive(Message)]
#[rtype(result = "Result<(LinkHandle, Arc<Masker>), BoxError>")]
pub struct Channel {
    pub thaw: bool,
    pub touch: bool,
}

impl Handler<Channel> for BoxActor {
    type Result = Reply<(LinkHandle, Arc<Masker>)>;

    fn handle(&mut self, msg: Channel, _: &mut Context<Self>) -> Self::Result {
        let thaw = if msg.thaw {
            self.thaw()
        } else {
            Box::pin(ready(Ok(())))
        };
        AtomicResponse::new(Box::pin(thaw.then(
            move |result, act, _| -> Flow<(LinkHandle, Arc<Masker>)> {
                let channel = result.and_then(|()| act.channel());
                match (channel, msg.touch) {
                    (Ok(channel), true) => Box::pin(
                        act.touch()
                            .map(move |touched, _, _| touched.map(|()| channel)),
                    ),
                    (channel, _) => Box::pin(ready(channel)),
                }
            },
        )))
    }
}

impl BoxActor {
    /// The link and mask of the box as it is now: it must be running.
    fn channel(&self) -> Result<(LinkHandle, Arc<Masker>), BoxError> {
        if self.record.state.is_terminal() {
            return Err(self.over());
        }
        match (&self.link, self.record.state) {
            (Some(link), BoxState::Running) => Ok((link.handle(), self.masker.clone())),
            _ => Err(BoxError::Invalid(format!(
                "box {} is {}: read it (GET) to wake it first",
                self.record.id, self.record.state
            ))),
        }
    }
}

/// A message of the API's on behalf of `account`: answered only when the box
/// is that account's. Another account's box (or a pooled one, which is no
/// one's) is not found, as when its row is read for that account: so a call
/// naming a live box asks its actor without reading the row first.
pub struct ForAccount<M> {
    pub account: AccountId,
    pub message: M,
}

impl<M: Message> Message for ForAccount<M> {
    type Result = M::Result;
}

/// Each API message, answered for its account only (one impl per message: a
/// blanket one over every `Handler<M>` sends the trait solver in circles).
macro_rules! for_account {
    ($($message:ty => $answer:ty),* $(,)?) => {$(
        impl Handler<ForAccount<$message>> for BoxActor {
            type Result = Reply<$answer>;

            fn handle(&mut self, msg: ForAccount<$message>, ctx: &mut Context<Self>) -> Self::Result {
                if self.record.account_id.as_ref() != Some(&msg.account) {
                    let not_found = BoxError::NotFound(self.record.id.to_string());
                    return AtomicResponse::new(Box::pin(ready(Err(not_found))));
                }
                self.handle(msg.message, ctx)
            }
        }
    )*};
}

for_account! {
    Status => BoxSnapshot,
    Keep => BoxSnapshot,
    Rewire => BoxSnapshot,
    Stop => BoxSnapshot,
    Channel => (LinkHandle, Arc<Masker>),
}
