//! The boxes of an account, as the API sees them: validation of requests,
//! account scoping (another account's box is "not found"), and the route to
//! the host supervisor or the box's actor. Calls take the box as a typed
//! [`BoxId`]: the server reads ids where requests carry them
//! (`server/src/ids`), and answers a malformed one as it answers a box that
//! is not found here. Only a link's box comes as the request wrote it
//! ([`crate::spec::LinkSpec`]), and is read here the same way.
//!
//! `Boxes` is one façade over several files, one per kind of call: this one
//! holds the type and how a box is found (the registry first, then the
//! store); `lifecycle.rs` starts, reads, keeps, rewires, stops and lists
//! boxes; `work.rs` runs commands and reads their output; `urls.rs` serves
//! box URLs; `sync.rs`, `shots.rs`, `takeover.rs` and `terminals.rs` the
//! uploads, screenshots and terminals; `operator.rs` the stop an operator
//! makes without a server.

use crate::blocking::blocking;
pub use crate::box_actor::Traffic;
use crate::box_actor::{BoxActor, BoxSnapshot, ForAccount, Forget, Lease};
use crate::box_state::BoxState;
use crate::box_urls::{BoxUrls, Slot, Slots, UrlLimits};
use crate::boxd_link::LinkError;
use crate::environments::Environments;
use crate::error::BoxError;
use crate::host::{HostStart, Shutdown};
use crate::ids::{AccountId, BoxId};
use crate::secrets::Secrets;
use crate::settings::BoxSettings;
use crate::spec::BoxSpec;
use crate::store::{BoxRecord, Store};
use futures_util::stream::BoxStream;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

mod lifecycle;
mod operator;
pub mod shots;
mod sync;
mod takeover;
pub mod terminals;
mod urls;
mod work;
pub use operator::stop_directly;
pub use shots::ShotFile;
pub use sync::Synced;
pub use takeover::{DEFAULT_LINK_TTL, TakeoverError, TakeoverLink, Terminal};
pub use work::EXEC_GRACE;

/// What a caller asks for when starting a box.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    pub name: Option<String>,
    pub goal: Option<String>,
    /// Units (1, 2, 4, 8); 1 when absent.
    pub size: Option<u32>,
    /// How long to keep the box after its last use (`"3d"`); at most `max_keep`.
    pub keep: Option<String>,
    /// Services, secret names and the environment to plug the box into.
    pub spec: BoxSpec,
}

/// How long a service request to boxd may take.
const SERVICE: Duration = Duration::from_secs(30);

/// A box as the API reads it: the actor's snapshot (or one made of the
/// stored row), its URLs while it lives, and the state of each box its links
/// point at. Only `Boxes` fills the last two (it holds the box URLs and may
/// read the account's other boxes), so they are kept out of the actor's
/// [`BoxSnapshot`], which stays what the actor itself knows.
#[derive(Debug, Clone)]
pub struct BoxReading {
    pub snapshot: BoxSnapshot,
    /// The box's URLs while it lives (none on a server without box URLs).
    pub urls: Option<crate::box_urls::Urls>,
    /// The state of each box its links point at, by id (for a single box's
    /// reads; empty in lists).
    pub linked: HashMap<String, String>,
}

pub struct Boxes {
    store: Store,
    settings: BoxSettings,
    host: Result<HostStart, String>,
    secrets: Secrets,
    environments: Environments,
    /// How long a takeover link works.
    takeover_ttl: Duration,
    /// The takeover terminals open on this server, and their limits.
    terminals: terminals::Terminals,
    /// How the boxes' URLs are made, when they have any.
    urls: Option<BoxUrls>,
    /// The boxes box URLs found lately.
    url_boxes: crate::box_urls::Recent,
    /// The box-URL requests open now, and their limits.
    url_slots: Arc<Slots>,
    /// Whether starts are placed on the hosts of other nodes too (several
    /// nodes: `Boxes::placing_starts`).
    places_starts: bool,
}

/// What a command's or a followed log's reading yields, as it comes; it ends
/// when the command has ended, or at the first error.
pub type Events<T> = BoxStream<'static, Result<T, BoxError>>;

/// Which node answers for a box ([`Boxes::answered_by`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answerer {
    Here,
    /// The node holding the box's host, reached at `at`.
    Node {
        host: String,
        node: crate::ids::ServerId,
        at: String,
    },
}

/// While held, the box counts as active (a terminal, a command waited on):
/// the box does not freeze under it. It is a lease on the box's actor
/// (`box_actor/lease.rs`): no task, one message when taken and one when
/// dropped. A box URL's guard ([`Boxes::open_port`]) counts only while its
/// connection has traffic.
pub struct Awake {
    _lease: Lease,
    traffic: Option<Traffic>,
    /// The box-URL request's place among the box's ([`Slots`]).
    _slot: Option<Slot>,
}

impl Awake {
    /// The traffic marker of a box URL's guard (`None` for the others,
    /// which count as long as they are held).
    pub fn traffic(&self) -> Option<Traffic> {
        self.traffic.clone()
    }
}

impl Boxes {
    /// answer 503 with that reason).
    pub fn new(
        store: Store,
        settings: BoxSettings,
        host: Result<HostStart, String>,
        secrets: Secrets,
        environments: Environments,
    ) -> Self {
        Self {
            store,
            settings,
            host,
            secrets,
            environments,
            takeover_ttl: DEFAULT_LINK_TTL,
            terminals: terminals::Terminals::default(),
            urls: None,
            url_boxes: crate::box_urls::Recent::default(),
            url_slots: Arc::new(Slots::new(UrlLimits::default())),
            places_starts: false,
        }
    }

    /// Says that starts this node receives are placed on any node's host
    /// first (it links to other nodes): one that reaches [`Boxes::create`]
    /// here on a node without a host found no host with room, or none that
    /// takes boxes, and is refused saying which.
    pub fn placing_starts(mut self, placing: bool) -> Self {
        self.places_starts = placing;
        self
    }

    /// The snapshot with the box's URLs, while the box lives.
    fn dressed(&self, snapshot: BoxSnapshot) -> BoxReading {
        let urls = self
            .urls
            .as_ref()
            .filter(|_| !snapshot.record.state.is_terminal())
            .map(|urls| urls.of(&snapshot.record.id, &snapshot.record.spec.services));
        BoxReading {
            snapshot,
            urls,
            linked: HashMap::new(),
        }
    }

    /// This node's host for a start. A node without one that places starts
    /// gets one only when placement found no host with room (or none at
    /// all: `cluster/forward.rs`): `host_full` when some host takes boxes,
    /// else why none does.
    async fn host_for_start(&self) -> Result<&HostStart, BoxError> {
        match &self.host {
            Ok(host) => Ok(host),
            Err(why) if self.places_starts => {
                let store = self.store.clone();
                if blocking(move || store.hosts_open()).await? {
                    Err(BoxError::HostFull(
                        "no host has room for this box: every host taking boxes is full, as \
                         their nodes last published (psbx hosts list)"
                            .to_owned(),
                    ))
                } else {
                    Err(BoxError::NoHost(format!(
                        "no host takes boxes now (none is held by a live node, or all are \
                         draining: psbx hosts list), and this node runs none: {why}"
                    )))
                }
            }
            Err(why) => Err(BoxError::NoHost(why.clone())),
        }
    }

    fn host(&self) -> Result<&HostStart, BoxError> {
        self.host
            .as_ref()
            .map_err(|why| BoxError::NoHost(why.clone()))
    }

    pub fn settings(&self) -> &BoxSettings {
        &self.settings
    }

    /// Which node answers for box `id` (DESIGN.md §8): this one when its
    /// actor lives here (no database read), when it is over or unknown
    /// (the answer comes from its row), or when its host is this node's or
    /// has no node now (the answer is `host_unavailable`); else the node
    /// holding its host's lease, and where that node listens for peers.
    pub async fn answered_by(&self, id: &BoxId) -> Result<Answerer, BoxError> {
        if let Ok(host) = &self.host
            && host.registry.actor(id).is_some()
        {
            return Ok(Answerer::Here);
        }
        let (store, owned) = (self.store.clone(), id.clone());
        let place = blocking(move || store.box_place(&owned)).await?;
        let mine = self.host.as_ref().ok().map(|h| h.machine.name.as_str());
        Ok(match place {
            Some(place) if Some(place.host.as_str()) != mine => match place.holder {
                Some((node, Some(at))) => Answerer::Node {
                    host: place.host,
                    node,
                    at,
                },
                _ => Answerer::Here,
            },
            _ => Answerer::Here,
        })
    }

    /// The account's box as stored (no actor is asked: stopped boxes too).
    pub async fn record(&self, account: &AccountId, id: &BoxId) -> Result<BoxRecord, BoxError> {
        let (store, account, box_id) = (self.store.clone(), account.clone(), id.clone());
        blocking(move || store.account_box(&account, &box_id))
            .await?
            .ok_or_else(|| BoxError::NotFound(id.to_string()))
    }

    /// The account's box a link names ([`crate::spec::LinkSpec`] holds the
    /// id as the request gave it): a malformed id names no box.
    async fn linked_record(&self, account: &AccountId, id: &str) -> Result<BoxRecord, BoxError> {
        let box_id = BoxId::parse(id).map_err(|_| BoxError::NotFound(id.to_owned()))?;
        self.record(account, &box_id).await
    }

    fn snapshot_of_row(&self, record: BoxRecord) -> BoxReading {
        self.dressed(BoxSnapshot::of(record, None, None, &self.settings))
    }

    /// The actor of a live box, or the stored record when the box is over.
    ///
    /// A box with an actor on this host is found in the registry without
    /// reading its row: its actor answers for the account itself (every
    /// message is sent [`ForAccount`], and another account's box is not
    /// found). Only a box without one here (stopped, still being made, or not
    /// supervised now) is read from the store. A box stopped outside its actor
    /// (an operator's `psbx boxes stop` removes its VM) is noticed when its
    /// link reports closed ([`Boxes::settled`]).
    async fn actor(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<Result<actix::Addr<BoxActor>, BoxRecord>, BoxError> {
        if let Ok(host) = &self.host
            && let Some(addr) = host.registry.actor(id)
        {
            host.machine.lease.check()?;
            return Ok(Ok(addr));
        }
        let record = self.record(account, id).await?;
        if record.state.is_terminal() {
            return Ok(Err(record));
        }
        // Another host's box: its node answers for it (the server forwards
        // the call there); here, only that its host is not this one.
        let host = match &self.host {
            Ok(host) if host.machine.name == record.host => host,
            _ => return Err(BoxError::HostUnavailable(record.host)),
        };
        host.machine.lease.check()?;
        host.registry.actor(&record.id).map(Ok).ok_or_else(|| {
            // Its actor starts once boxd has said hello.
            if matches!(record.state, BoxState::Creating | BoxState::Booting) {
                return BoxError::Starting {
                    id: record.id.clone(),
                    state: record.state,
                };
            }
            BoxError::NoHost(format!(
                "box {} is {} but this server does not supervise it right now; retry shortly",
                record.id, record.state
            ))
        })
    }

    /// The box's row when it has ended outside its actor (an operator's
    /// `psbx boxes stop`): its actor is let go, and the caller answers as for
    /// any box that is over. `None` while the row says it lives.
    async fn settled(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<Option<BoxRecord>, BoxError> {
        let record = self.record(account, id).await?;
        if !record.state.is_terminal() {
            return Ok(None);
        }
        if let Ok(host) = &self.host
            && let Some(addr) = host.registry.actor(&record.id)
        {
            addr.do_send(Forget);
        }
        Ok(Some(record))
    }

    /// A call's error, once a closed link is looked into: the link of a box
    /// stopped outside its actor is closed, and the call answers as for any
    /// box that is over ([`Boxes::settled`]).
    async fn noticed(&self, account: &AccountId, id: &BoxId, e: BoxError) -> BoxError {
        if !matches!(e, BoxError::Boxd(LinkError::Closed)) {
            return e;
        }
        match self.settled(account, id).await {
            Ok(Some(record)) => over(&record),
            _ => e,
        }
    }

    /// The box as stored now, once its actor's mailbox closed between finding
    /// it and asking it (the box stopped meanwhile): the record of a box that
    /// is over, for the caller to answer as it answers any stopped box;
    /// otherwise 503 `box_channel_lost` (retry). Never a 500: the race is the
    /// caller's timing, not a fault.
    async fn after_gone(
        &self,
        account: &AccountId,
        id: &BoxId,
        e: actix::MailboxError,
    ) -> Result<BoxRecord, BoxError> {
        tracing::debug!(box_id = %id, error = %e, "the box actor went away while asked");
        self.settled(account, id)
            .await?
            .ok_or(BoxError::Boxd(LinkError::Closed))
    }

    /// The reading with the state of each box its links point at (`gone`
    /// for one that is no longer the account's).
    async fn with_linked(&self, mut reading: BoxReading) -> BoxReading {
        let record = &reading.snapshot.record;
        let Some(account) = record.account_id.clone() else {
            return reading;
        };
        for link in &record.spec.links {
            if reading.linked.contains_key(&link.box_id) {
                continue;
            }
            let state = match self.linked_record(&account, &link.box_id).await {
                Ok(record) => record.state.to_string(),
                Err(BoxError::NotFound(_)) => "gone".to_owned(),
                Err(_) => "unknown".to_owned(),
            };
            reading.linked.insert(link.box_id.clone(), state);
        }
        reading
    }

    /// Keeps the box awake until the guard is dropped.
    pub fn awake(&self, addr: actix::Addr<BoxActor>) -> Awake {
        Awake {
            _lease: Lease::take(addr, None),
            traffic: None,
            _slot: None,
        }
    }

    /// Removes the pool's boxes before the server exits; running boxes stay.
    /// A stop is under way: no new box is placed on this node's host.
    pub async fn stop_placing(&self) {
        if let Ok(host) = &self.host {
            let _ = host.supervisor.send(crate::host::StopPlacing).await;
        }
    }

    pub async fn shutdown(&self) {
        if let Ok(host) = &self.host {
            let _ = host.supervisor.send(Shutdown).await;
        }
    }
}

/// `message` to a box's actor on behalf of `account` ([`ForAccount`]).
fn for_account<M>(account: &AccountId, message: M) -> ForAccount<M> {
    ForAccount {
        account: account.clone(),
        message,
    }
}

fn send<T>(
    result: Result<Result<T, BoxError>, actix::MailboxError>,
) -> Result<Result<T, BoxError>, BoxError> {
    result.map_err(|e| BoxError::Gone("box actor", e))
}

fn over(record: &BoxRecord) -> BoxError {
    BoxError::Over {
        id: record.id.to_string(),
        state: record.state,
        reason: record.failure.clone(),
    }
}
