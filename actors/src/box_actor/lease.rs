//! Leases: what keeps a box awake while someone waits on it (a command's
//! stream, a followed log, a terminal, a box-URL connection), held in the
//! box's actor as a count, not by tasks that touch the box on a clock.
//!
//! A caller takes a lease with one message ([`Hold`]) and gives it back with
//! one ([`Release`], sent when its guard is dropped). The actor consults its
//! leases only when one of its own timers fires: the idle timer does not
//! freeze a held box, and the expiry timer does not stop one; each counts the
//! box active instead (its stored last activity moves, the timers re-arm). So
//! a box held for hours writes its activity once per `idle_freeze`, and a
//! lease costs no task and no periodic message (structure review 2, §6).
//!
//! A box-URL connection's lease counts only while it has traffic: it carries a
//! [`Traffic`] marker its connection sets when bytes pass, and the timer takes
//! it (a kept-alive connection without traffic stops counting within one
//! `idle_freeze`). The host's memory-pressure freeze ([`super::Freeze`]) is not
//! held off by leases: it freezes the idlest boxes by their stored activity,
//! which a held box refreshes once per `idle_freeze`.

use super::BoxActor;
use super::handlers::Flow;
use actix::fut::{ActorFutureExt, ready};
use actix::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Marks a box URL's connection as having had traffic: its lease counts at
/// the box's next timer only if it did.
#[derive(Clone, Debug, Default)]
pub struct Traffic(Arc<AtomicBool>);

impl Traffic {
    /// Bytes went one way or the other.
    pub fn saw(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether bytes went since the last call.
    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// A lease's number, unique in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct LeaseId(u64);

impl LeaseId {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A lease on a box, held until dropped: one message when taken, one when
/// dropped (to an actor that has ended meanwhile, neither matters).
pub struct Lease {
    actor: Addr<BoxActor>,
    id: LeaseId,
}

impl Lease {
    /// Takes a lease on the box of `actor`; with `traffic`, it counts only
    /// while its connection has traffic.
    pub fn take(actor: Addr<BoxActor>, traffic: Option<Traffic>) -> Self {
        let id = LeaseId::next();
        actor.do_send(Hold { lease: id, traffic });
        Self { actor, id }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.actor.do_send(Release { lease: self.id });
    }
}

/// The leases a box's actor holds: each plain, or counting only with traffic.
#[derive(Default)]
pub(super) struct Leases(HashMap<LeaseId, Option<Traffic>>);

impl Leases {
    /// Whether the box counts as active now: a plain lease is held, or a
    /// connection's lease had traffic since the last look (every marker is
    /// taken, so the next look sees only what came after this one).
    pub(super) fn active(&self) -> bool {
        // Not `any`: it would stop at the first and leave the others' marks.
        let mut active = false;
        for traffic in self.0.values() {
            active |= traffic.as_ref().is_none_or(Traffic::take);
        }
        active
    }
}

/// Take a lease on the box: it stays awake until the lease is released.
#[derive(Message)]
#[rtype(result = "()")]
struct Hold {
    lease: LeaseId,
    /// For a box-URL connection: the lease counts only while it has traffic.
    traffic: Option<Traffic>,
}

/// Give a lease back (its guard was dropped). The release counts as activity
/// when its lease was plain, or its connection had traffic since the last look.
#[derive(Message)]
#[rtype(result = "()")]
struct Release {
    lease: LeaseId,
}

impl Handler<Hold> for BoxActor {
    type Result = ();

    fn handle(&mut self, msg: Hold, _: &mut Context<Self>) {
        self.leases.0.insert(msg.lease, msg.traffic);
    }
}

impl Handler<Release> for BoxActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) -> Self::Result {
        let counted = match self.leases.0.remove(&msg.lease) {
            Some(traffic) => traffic.as_ref().is_none_or(Traffic::take),
            None => false,
        };
        let touched: Flow<()> = if counted && !self.record.state.is_terminal() {
            self.touch()
        } else {
            Box::pin(ready(Ok(())))
        };
        AtomicResponse::new(Box::pin(touched.map(|_, _, _| ())))
    }
}
