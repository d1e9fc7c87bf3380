//! A box's connections to names linked to another box of its account:
//! boxd opens `link:<host>:<port>` for each, and the server joins it to a
//! `port:<n>` stream of the linked box's boxd (`psbx_wire::splice::join`:
//! FIN and RST pass both ways) — over psbx's channels, never the host
//! network. The linked box is woken when it is frozen and kept
//! awake while the connection lasts. A refusal says which name, port and box
//! were involved: 404 when the name is not linked (any more) or the linked
//! box is stopped, 503 when it cannot be woken, 502 when nothing listens on
//! its port, 429 past the box's rate.
//!
//! A box may open `link:` streams as fast as its channel allows (review-2
//! M4), so one costs no database read when nothing changed: the host's
//! [`LinkBook`] keeps each box's spec links (read once, replaced by `wire`
//! through the box's actor, forgotten when the actor ends) and what was read
//! of each linked box (its account never changes and an ended box stays
//! ended; one whose actor was here and is gone is read again at once, one
//! that is not among this host's actors at most every [`RECHECK`]). Each box has a [`Bucket`] of [`BURST`] streams and
//! [`PER_SECOND`] more each second, and its refusals go through a
//! [`RefusalLog`]. boxd's target parsing (`Outbound::parse`) refuses a host
//! that is not a host name, so what is logged here is one.

use super::registry::Registry;
use crate::blocking::blocking;
use crate::box_actor::{BoxActor, Channel, Lease};
use crate::boxd_link::LinkError;
use crate::ids::{AccountId, BoxId};
use crate::meter::{Bucket, RefusalLog};
use crate::spec::LinkSpec;
use crate::store::Store;
use actix::Addr;
use psbx_wire::Endpoint;
use psbx_wire::boxd::Service;
use psbx_wire::frame::{Refusal, code};
use psbx_wire::mux::Incoming;
use psbx_wire::splice::join;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long the linked box's boxd may take to accept the stream.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// `link:` streams a box may open at once.
pub const BURST: u32 = 200;
/// `link:` streams a box may open each second after its burst.
pub const PER_SECOND: f64 = 100.0;
/// How long a linked box that is not among this host's actors is taken as
/// read (then it is read again: it may have ended).
pub const RECHECK: Duration = Duration::from_secs(5);
/// Linked boxes kept in a book at most (then it starts over).
const LINKED_KEPT: usize = 10_000;

/// What the host knows of its boxes' links; shared by its actors.
#[derive(Default)]
pub struct LinkBook {
    /// Each box's spec links, by box.
    links: Mutex<HashMap<BoxId, Arc<[LinkSpec]>>>,
    /// What was read of each linked box, by its id.
    linked: Mutex<HashMap<BoxId, Linked>>,
    /// Boxes read from the store (what tests count).
    reads: AtomicU64,
}

/// A linked box as read.
#[derive(Clone)]
struct Linked {
    account: Option<AccountId>,
    /// Its state when it had ended (it stays ended).
    over: Option<&'static str>,
    read_at: Instant,
    /// Its actor was found on this host since it was read: once the actor
    /// is gone, the box is read again at once (it has most likely ended).
    seen_live: bool,
}

impl LinkBook {
    /// Box records read from the store for links.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// The box's links are now `links` (its actor stored a new spec).
    pub fn rewired(&self, id: &BoxId, links: &[LinkSpec]) {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), links.into());
    }

    /// The box's actor ended: its links are read again if it comes back.
    pub fn forget(&self, id: &BoxId) {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    fn links_of(&self, id: &BoxId) -> Option<Arc<[LinkSpec]>> {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn linked(&self, id: &BoxId) -> Option<Linked> {
        self.linked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn keep_linked(&self, id: &BoxId, linked: Linked) {
        let mut kept = self.linked.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= LINKED_KEPT {
            kept.clear();
        }
        kept.insert(id.clone(), linked);
    }
}

/// One box's links; cheap to clone.
#[derive(Clone)]
pub struct Links(Arc<Inner>);

struct Inner {
    box_id: BoxId,
    account: AccountId,
    store: Store,
    registry: Arc<Registry>,
    book: Arc<LinkBook>,
    /// One store read at a time for this box (streams arriving together
    /// wait for it instead of each making their own).
    reading: tokio::sync::Mutex<()>,
    bucket: Mutex<Bucket>,
    refusals: Mutex<RefusalLog>,
}

/// The far end of a link.
struct Target {
    actor: Addr<BoxActor>,
    box_id: String,
    port: u16,
}

impl Links {
    pub fn new(
        box_id: BoxId,
        account: AccountId,
        store: Store,
        registry: Arc<Registry>,
        book: Arc<LinkBook>,
    ) -> Self {
        Self(Arc::new(Inner {
            box_id,
            account,
            store,
            registry,
            book,
            reading: tokio::sync::Mutex::new(()),
            bucket: Mutex::new(Bucket::new(BURST, PER_SECOND)),
            refusals: Mutex::new(RefusalLog::new()),
        }))
    }

    /// Serves the box's stream to `endpoint` in a task of its own (refused
    /// at once past the box's rate).
    pub fn spawn(&self, incoming: Incoming, endpoint: Endpoint) {
        let admitted = {
            let mut bucket = self.0.bucket.lock().unwrap_or_else(PoisonError::into_inner);
            bucket.take().then_some(()).ok_or_else(|| bucket.rate())
        };
        if let Err(rate) = admitted {
            let refusal = Refusal::new(
                code::TOO_MANY_STREAMS,
                format!(
                    "this box opens link streams faster than {rate} (after {BURST} at once): \
                     open fewer connections, or keep them open"
                ),
            );
            return self.refuse(incoming, &endpoint, &refusal);
        }
        let this = self.clone();
        tokio::spawn(async move { this.serve(incoming, endpoint).await });
    }

    async fn serve(&self, incoming: Incoming, endpoint: Endpoint) {
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
        let upstream = match link.open(Service::Port(target.port), OPEN_TIMEOUT).await {
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
        // The linked box stays awake while the connection lasts.
        let _lease = Lease::take(target.actor.clone(), None);
        let _ = join(
            incoming.accept(),
            upstream,
            "psbx",
            std::future::pending::<&str>(),
        )
        .await;
    }

    /// The box and port `endpoint` is linked to now, or why there is none.
    async fn target(&self, endpoint: &Endpoint) -> Result<Target, Refusal> {
        let links = self.links().await?;
        let link = links
            .iter()
            .find(|l| l.name == endpoint.host.as_str() && l.port == endpoint.port)
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
        let actor = || self.0.registry.actor(&other);
        let mut linked = self.0.book.linked(&other);
        // Its account never changes, and an ended box stays ended.
        let fresh = |l: &Linked| {
            l.account.as_ref() != Some(&self.0.account)
                || l.over.is_some()
                || l.read_at.elapsed() < RECHECK
        };
        let known_here = linked.is_some() && actor().is_some();
        if let Some(l) = linked.as_mut().filter(|l| known_here && !l.seen_live) {
            l.seen_live = true;
            self.0.book.keep_linked(&other, l.clone());
        }
        let seen_live = linked.as_ref().is_some_and(|l| l.seen_live);
        if !known_here && (seen_live || !linked.as_ref().is_some_and(fresh)) {
            linked = Some(self.read_linked(&other).await?);
        }
        let Some(linked) = linked else {
            return Err(not_here());
        };
        if linked.account.as_ref() != Some(&self.0.account) {
            return Err(not_here());
        }
        if let Some(state) = linked.over {
            return Err(stopped(&link.box_id, endpoint, state));
        }
        let actor = actor().ok_or_else(|| {
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
            box_id: link.box_id.clone(),
            port: link.target_port,
        })
    }

    /// The box's spec links: the book's, or read once (by one stream while
    /// the others arriving with it wait).
    async fn links(&self) -> Result<Arc<[LinkSpec]>, Refusal> {
        if let Some(links) = self.0.book.links_of(&self.0.box_id) {
            return Ok(links);
        }
        let _one = self.0.reading.lock().await;
        if let Some(links) = self.0.book.links_of(&self.0.box_id) {
            return Ok(links);
        }
        self.0.book.reads.fetch_add(1, Ordering::Relaxed);
        let (store, id) = (self.0.store.clone(), self.0.box_id.clone());
        let record = blocking(move || store.box_by_id(&id))
            .await
            .map_err(unreadable)?;
        let links: Arc<[LinkSpec]> = record.map(|r| r.spec.links).unwrap_or_default().into();
        self.0.book.rewired(&self.0.box_id, &links);
        Ok(links)
    }

    /// A linked box read from the store (one read at a time for this box),
    /// kept in the book; `None` when there is no such box.
    async fn read_linked(&self, other: &BoxId) -> Result<Linked, Refusal> {
        let _one = self.0.reading.lock().await;
        if let Some(linked) = self.0.book.linked(other)
            && linked.read_at.elapsed() < RECHECK
            && !linked.seen_live
        {
            return Ok(linked);
        }
        self.0.book.reads.fetch_add(1, Ordering::Relaxed);
        let (store, id) = (self.0.store.clone(), other.clone());
        let record = blocking(move || store.box_by_id(&id))
            .await
            .map_err(unreadable)?;
        let linked = Linked {
            account: record.as_ref().and_then(|r| r.account_id.clone()),
            over: record
                .as_ref()
                .filter(|r| r.state.is_terminal())
                .map(|r| r.state.as_str()),
            read_at: Instant::now(),
            seen_live: false,
        };
        self.0.book.keep_linked(other, linked.clone());
        Ok(linked)
    }

    /// Refuses the stream, logging it unless this box's refusals are over
    /// the [`RefusalLog`]'s limit (then a summary comes with the next one
    /// logged).
    fn refuse(&self, incoming: Incoming, endpoint: &Endpoint, refusal: &Refusal) {
        let (log, quiet) = self
            .0
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit();
        let box_id = &self.0.box_id;
        if quiet > 0 {
            tracing::info!(%box_id, refused = quiet, "link refusals not logged (over {} per {:?})",
                crate::meter::REFUSALS_LOGGED, crate::meter::REFUSAL_LOG_INTERVAL);
        }
        if log {
            tracing::info!(%box_id, host = %endpoint.host, port = endpoint.port,
                code = refusal.code, reason = %refusal.reason, "link refused");
        }
        incoming.refuse(refusal.code, &refusal.reason);
    }
}

fn unreadable(e: crate::store::StoreError) -> Refusal {
    Refusal::new(
        code::UNAVAILABLE,
        format!("the server could not read the box's links: {e}"),
    )
}

/// The refusal for a linked box that is gone (`how`: stopped, failed, not
/// in this account).
fn stopped(box_id: &str, endpoint: &Endpoint, how: &str) -> Refusal {
    Refusal::new(
        code::NOT_FOUND,
        format!(
            "the box {box_id} that {}:{} links to is {how}: link the name to a box that runs \
             (sandbox_wire links)",
            endpoint.host, endpoint.port
        ),
    )
}
