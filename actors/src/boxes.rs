//! The boxes of an account, as the API sees them: validation of requests,
//! account scoping (another account's box is "not found"), and the route to
//! the host supervisor or the box's actor.

use crate::blocking::blocking;
pub use crate::box_actor::Traffic;
use crate::box_actor::{
    BoxActor, BoxSnapshot, Channel, ForAccount, Forget, Keep, Lease, PING_TIMEOUT, Rewire, Status,
    Stop, WOKEN_PATIENCE,
};
use crate::box_state::BoxState;
use crate::box_urls::{Admitted, BoxAddress, BoxUrls, Crowded, Found, Slot, Slots, UrlLimits};
use crate::boxd_link::{LinkError, LinkHandle};
use crate::duration;
use crate::environments::Environments;
use crate::environments::claim::{EnvironmentClaim, seal_mask};
use crate::error::BoxError;
use crate::exec::bounded::Bounded;
use crate::exec::mask::{MaskStream, Masker};
use crate::exec::run::{Command, ExecEvent};
use crate::host::{CreateBox, HostStart, Shutdown};
use crate::ids::{AccountId, BoxId};
use crate::secrets::{SecretError, Secrets};
use crate::settings::{BoxSettings, SIZES};
use crate::spec::BoxSpec;
use crate::store::{BoxCursor, BoxRecord, Store};
use crate::wiring::{self, WireChange};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use psbx_wire::boxd::{ExecRequest, Logs, Process, ProcessesRequest, Service, Signal, Streamed};
use psbx_wire::mux::Stream;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub mod shots;
mod sync;
mod takeover;
pub mod terminals;
pub use shots::ShotFile;
pub use sync::Synced;
pub use takeover::{DEFAULT_LINK_TTL, TakeoverError, TakeoverLink, Terminal};

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

const MAX_NAME: usize = 100;
/// How long a service request to boxd may take.
const SERVICE: Duration = Duration::from_secs(30);
/// How long past a command's own time limit the server waits for boxd to say
/// it ended (boxd kills it at the limit; this is for a boxd that does not).
pub const EXEC_GRACE: Duration = Duration::from_secs(30);

const MAX_GOAL: usize = 2000;

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
}

/// What a command's or a followed log's reading yields, as it comes; it ends
/// when the command has ended, or at the first error.
pub type Events<T> = BoxStream<'static, Result<T, BoxError>>;

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
    /// `host` is the supervised host, or why there is none (boxes calls then
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
        }
    }

    /// Gives the boxes URLs (`url` in their snapshots, and the box URL proxy),
    /// with the stored keys of the boxes that are not over (a blocking read:
    /// at start-up). A failed read is logged: those boxes' URLs answer the
    /// constant 404 until the server restarts or their keys are rotated (a
    /// box whose stored key is unknown here is taken to have none, and its
    /// derived key is refused once the database says it has one).
    pub fn with_urls(mut self, urls: BoxUrls) -> Self {
        match self.store.live_url_keys() {
            Ok(rows) => {
                let unreadable = urls.load(rows);
                if unreadable > 0 {
                    tracing::warn!(
                        boxes = unreadable,
                        "box URL keys the master key cannot open: those boxes' URLs still work \
                         but cannot be shown until their keys are rotated \
                         (POST /v1/boxes/{{id}}/url-key)"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the boxes' URL keys"),
        }
        self.urls = Some(urls);
        self
    }

    /// Sets the limits of box-URL requests per box and per client.
    pub fn with_url_limits(mut self, limits: UrlLimits) -> Self {
        self.url_slots = Arc::new(Slots::new(limits));
        self
    }

    /// The limits of box-URL requests.
    pub fn url_limits(&self) -> UrlLimits {
        self.url_slots.limits()
    }

    /// A place for one more box-URL request of `client` to box `id`, unless
    /// the box or the client has as many open as allowed.
    pub fn url_slot(&self, id: &BoxId, client: std::net::IpAddr) -> Result<Slot, Crowded> {
        self.url_slots.take(id, client)
    }

    /// Gives box `id` a new random URL key (stored hashed and sealed, then
    /// taken by this server); its former key stops working.
    async fn new_url_key(&self, id: &BoxId) -> Result<(), BoxError> {
        let Some(urls) = &self.urls else {
            return Ok(());
        };
        let new = urls.new_key(id).map_err(BoxError::Internal)?;
        let (store, box_id, stored) = (self.store.clone(), id.clone(), new.stored.clone());
        blocking(move || store.set_url_key(&box_id, &stored)).await?;
        urls.remember(id, &new.key);
        self.url_boxes.drop_box(id);
        Ok(())
    }

    /// Rotates the URL key of the account's live box: its URLs change, and
    /// the old ones answer the constant 404 (requests open now go on to
    /// their end). Answers the box with its new URLs.
    pub async fn rotate_url_key(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<BoxReading, BoxError> {
        if self.urls.is_none() {
            return Err(BoxError::NoHost(
                "this server gives boxes no URLs".to_owned(),
            ));
        }
        let record = match self.actor(account, id).await? {
            Err(record) => return Err(over(&record)),
            Ok(_) => self.record(account, id).await?,
        };
        self.new_url_key(&record.id).await?;
        self.get(account, id, false).await
    }

    pub fn urls(&self) -> Option<&BoxUrls> {
        self.urls.as_ref()
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

    /// The live box a box URL names, if its key is right (checked first,
    /// without reading anything) and the box is neither over nor pooled.
    /// A box found is remembered for [`URL_BOXES_FOR`]: a box stopped
    /// meanwhile is refused by its actor ([`Boxes::open_port`]).
    pub async fn for_url(&self, address: &BoxAddress) -> Result<Option<BoxRecord>, BoxError> {
        let Some(urls) = &self.urls else {
            return Ok(None);
        };
        let admitted = urls.check(address);
        if admitted == Admitted::No {
            return Ok(None);
        }
        let found = match self.url_boxes.get(&address.id) {
            Some(found) => found,
            None => {
                let (store, id) = (self.store.clone(), address.id.clone());
                let (record, stored_key) = blocking(move || {
                    let record = store.box_by_id(&id)?;
                    let stored = store.url_key(&id)?.is_some();
                    Ok::<_, BoxError>((record, stored))
                })
                .await?;
                let Some(record) =
                    record.filter(|r| r.account_id.is_some() && !r.state.is_terminal())
                else {
                    urls.forget(&address.id);
                    return Ok(None);
                };
                let found = Found { record, stored_key };
                self.url_boxes.put(found.clone());
                found
            }
        };
        // A derived key is the box's only while it has no stored one.
        if admitted == Admitted::Derived && found.stored_key {
            return Ok(None);
        }
        Ok(Some(found.record))
    }

    /// A byte pipe to `port` on the loopback of a box [`Boxes::for_url`]
    /// found, thawing it first (this counts as activity), and a guard that
    /// keeps the box awake while its connection has traffic ([`Traffic`])
    /// and holds the request's `slot`. boxd refuses with 502 when nothing
    /// listens there. The box's actor says whether it is still live.
    pub async fn open_port(
        &self,
        record: &BoxRecord,
        port: u16,
        slot: Slot,
    ) -> Result<(Stream, Awake), BoxError> {
        let gone = || BoxError::NotFound(record.id.to_string());
        let addr = self.host()?.registry.actor(&record.id).ok_or_else(gone)?;
        let (link, _) = send(
            addr.send(Channel {
                thaw: true,
                touch: true,
            })
            .await,
        )??;
        let stream = link.open(Service::Port(port), SERVICE).await?;
        let traffic = Traffic::default();
        Ok((
            stream,
            Awake {
                _lease: Lease::take(addr, Some(traffic.clone())),
                traffic: Some(traffic),
                _slot: Some(slot),
            },
        ))
    }

    /// Keeps the box awake until the guard is dropped.
    pub fn awake(&self, addr: actix::Addr<BoxActor>) -> Awake {
        Awake {
            _lease: Lease::take(addr, None),
            traffic: None,
            _slot: None,
        }
    }

    /// What a box started in environment `name` takes with it; the summary
    /// goes into its spec.
    async fn claim(
        &self,
        account: &AccountId,
        name: &str,
        spec: &mut BoxSpec,
    ) -> Result<EnvironmentClaim, BoxError> {
        // Kept as the environment's error: the API answers a missing
        // environment named in the request as a bad request, not a 404.
        let env = self.environments.for_box(account, name).await?;
        let authorization = crate::ids::random_token(32).map_err(|e| {
            BoxError::Internal(format!("no randomness for the box's AWS token: {e}"))
        })?;
        let claim = EnvironmentClaim::new(env, authorization);
        spec.claimed = Some(claim.summary.clone());
        Ok(claim)
    }

    /// Checks and normalises a start's services, external base URL and
    /// links (`crate::wiring`): each linked box must be one of the account's
    /// that is not over.
    async fn check_wiring(&self, account: &AccountId, spec: &mut BoxSpec) -> Result<(), BoxError> {
        if let Some(url) = spec.external_base_url.take() {
            spec.external_base_url =
                Some(wiring::check_external_base_url(&url).map_err(BoxError::Invalid)?);
        }
        spec.services =
            wiring::check_services(std::mem::take(&mut spec.services), spec.external_base_url())
                .map_err(BoxError::Invalid)?;
        wiring::check_links(&mut spec.links, &spec.services).map_err(BoxError::Invalid)?;
        for link in &spec.links {
            self.linkable(account, &link.box_id).await?;
        }
        Ok(())
    }

    /// A box a link may point at: the account's, not over.
    async fn linkable(&self, account: &AccountId, id: &str) -> Result<BoxRecord, BoxError> {
        let record = self.record(account, id).await?;
        if record.state.is_terminal() {
            return Err(BoxError::Invalid(format!(
                "box {id} is {}: a link must point at a box that runs",
                record.state
            )));
        }
        Ok(record)
    }

    fn host(&self) -> Result<&HostStart, BoxError> {
        self.host
            .as_ref()
            .map_err(|why| BoxError::NoHost(why.clone()))
    }

    pub fn settings(&self) -> &BoxSettings {
        &self.settings
    }

    /// Parses a `keep` duration and checks it against the maximum.
    pub fn keep_secs(&self, keep: &str) -> Result<i64, BoxError> {
        let d = duration::parse(keep).map_err(BoxError::Invalid)?;
        if d > self.settings.max_keep {
            return Err(BoxError::Invalid(format!(
                "keep {keep:?} is longer than the {} a box may be kept",
                duration::format(self.settings.max_keep)
            )));
        }
        if d.is_zero() {
            return Err(BoxError::Invalid("keep must be longer than 0s".into()));
        }
        i64::try_from(d.as_secs()).map_err(|_| BoxError::Invalid("keep is too long".into()))
    }

    pub async fn create(
        &self,
        account: AccountId,
        req: CreateRequest,
    ) -> Result<BoxReading, BoxError> {
        let size = req.size.unwrap_or(1);
        if !SIZES.contains(&size) {
            return Err(BoxError::Invalid(format!(
                "size {size} is not a box size: choose 1, 2, 4 or 8 units (a unit is {} vCPU, {} MiB, {} GB)",
                self.settings.unit.vcpus, self.settings.unit.memory_mib, self.settings.unit.disk_gb
            )));
        }
        let keep_secs = match &req.keep {
            Some(keep) => self.keep_secs(keep)?,
            None => i64::try_from(self.settings.default_keep.as_secs()).unwrap_or(i64::MAX),
        };
        let name = checked_text("name", req.name, MAX_NAME)?;
        let goal = checked_text("goal", req.goal, MAX_GOAL)?;
        let names = &req.spec.secrets;
        let env = if names.is_empty() {
            Vec::new()
        } else {
            self.secrets
                .values(&account, names)
                .await
                .map_err(|e| match e {
                    // `secret_not_found` (404): a start refers to secrets by name.
                    SecretError::Invalid(message) => BoxError::Invalid(message),
                    other => BoxError::Secrets(other),
                })?
        };
        // A quick refusal before any work; the row's insert checks again
        // under the account lock, which is what holds against a race.
        let (store, a) = (self.store.clone(), account.clone());
        blocking(move || store.check_box_quota(&a, size)).await?;
        let mut spec = req.spec;
        let claim = match spec.environment.clone() {
            Some(name) => Some(self.claim(&account, &name, &mut spec).await?),
            None => None,
        };
        self.check_wiring(&account, &mut spec).await?;
        let (files, mask, endpoints, aws) = claim
            .map(|c| (c.files, c.mask, c.endpoints, c.aws))
            .unwrap_or_default();
        // What the box receives, sealed into its spec: the values masked after a restart.
        let masked: Vec<String> = env
            .iter()
            .map(|(_, v)| v.clone())
            .chain(mask.iter().cloned())
            .collect();
        if !masked.is_empty() {
            spec.mask = Some(
                seal_mask(&self.secrets.vault(), account.as_str(), &masked)
                    .ok_or_else(|| BoxError::Internal("cannot seal the box's mask".into()))?,
            );
        }
        let host = self.host()?;
        let made = host
            .supervisor
            .send(CreateBox {
                account: account.clone(),
                name,
                goal,
                size,
                keep_secs,
                spec,
                env,
                files,
                mask,
                endpoints,
                aws,
            })
            .await
            .map_err(|e| BoxError::Gone("host supervisor", e))??;
        // Its URL key, before anyone is shown its URLs. Without one (a
        // failed write) the box keeps the key derived from its id.
        if let Err(e) = self.new_url_key(&made.record.id).await {
            tracing::warn!(box_id = %made.record.id, error = %e,
                "storing a box's URL key; it keeps the key derived from its id");
        }
        // Read it back through its actor: the answer carries boxd's health.
        let snapshot = match host.registry.actor(&made.record.id) {
            Some(addr) => send(
                addr.send(Status {
                    thaw: false,
                    touch: false,
                    // A pooled box is just resumed: boxd may be starting
                    // its session again.
                    patience: WOKEN_PATIENCE,
                })
                .await,
            )?
            .map(|s| self.dressed(s))?,
            None => self.dressed(made),
        };
        Ok(self.with_linked(snapshot).await)
    }

    /// The account's box as stored (no actor is asked: stopped boxes too).
    pub async fn record(&self, account: &AccountId, id: &str) -> Result<BoxRecord, BoxError> {
        let not_found = || BoxError::NotFound(id.to_owned());
        let id = BoxId::parse(id).map_err(|_| not_found())?;
        let (store, account) = (self.store.clone(), account.clone());
        blocking(move || store.account_box(&account, &id))
            .await?
            .ok_or_else(not_found)
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
        id: &str,
    ) -> Result<Result<actix::Addr<BoxActor>, BoxRecord>, BoxError> {
        let box_id = BoxId::parse(id).map_err(|_| BoxError::NotFound(id.to_owned()))?;
        if let Ok(host) = &self.host
            && let Some(addr) = host.registry.actor(&box_id)
        {
            return Ok(Ok(addr));
        }
        let record = self.record(account, id).await?;
        if record.state.is_terminal() {
            return Ok(Err(record));
        }
        let host = self.host()?;
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

    /// Reads a box; a frozen one is thawed first when `thaw`.
    pub async fn get(
        &self,
        account: &AccountId,
        id: &str,
        thaw: bool,
    ) -> Result<BoxReading, BoxError> {
        let snapshot = match self.actor(account, id).await {
            // Still being made: what is stored says so (`creating`, `booting`).
            Err(BoxError::Starting { .. }) => self.snapshot_of_row(self.record(account, id).await?),
            Err(e) => return Err(e),
            Ok(Err(record)) => self.snapshot_of_row(record),
            Ok(Ok(addr)) => {
                let status = Status {
                    thaw,
                    touch: true,
                    patience: PING_TIMEOUT,
                };
                match addr.send(for_account(account, status)).await {
                    // boxd did not answer: the box may have been stopped
                    // outside its actor.
                    Ok(Ok(s)) if s.record.state == BoxState::Running && s.health.is_none() => {
                        match self.settled(account, id).await? {
                            Some(record) => self.snapshot_of_row(record),
                            None => self.dressed(s),
                        }
                    }
                    Ok(Ok(s)) => self.dressed(s),
                    // Ended as it was asked (its actor was on its way out).
                    Ok(Err(BoxError::Over { .. })) => {
                        self.snapshot_of_row(self.record(account, id).await?)
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(e) => self.snapshot_of_row(self.after_gone(account, id, e).await?),
                }
            }
        };
        Ok(self.with_linked(snapshot).await)
    }

    /// The box's row when it has ended outside its actor (an operator's
    /// `psbx boxes stop`): its actor is let go, and the caller answers as for
    /// any box that is over. `None` while the row says it lives.
    async fn settled(&self, account: &AccountId, id: &str) -> Result<Option<BoxRecord>, BoxError> {
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
    async fn noticed(&self, account: &AccountId, id: &str, e: BoxError) -> BoxError {
        if !matches!(e, BoxError::Boxd(LinkError::Closed)) {
            return e;
        }
        match self.settled(account, id).await {
            Ok(Some(record)) => over(&record),
            _ => e,
        }
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
            let state = match self.record(&account, &link.box_id).await {
                Ok(record) => record.state.to_string(),
                Err(BoxError::NotFound(_)) => "gone".to_owned(),
                Err(_) => "unknown".to_owned(),
            };
            reading.linked.insert(link.box_id.clone(), state);
        }
        reading
    }

    pub async fn keep(
        &self,
        account: &AccountId,
        id: &str,
        keep: &str,
    ) -> Result<BoxReading, BoxError> {
        let keep_secs = self.keep_secs(keep)?;
        match self.actor(account, id).await? {
            Err(record) => Err(over(&record)),
            Ok(addr) => match addr.send(for_account(account, Keep { keep_secs })).await {
                Ok(answer) => answer.map(|s| self.dressed(s)),
                Err(e) => Err(over(&self.after_gone(account, id, e).await?)),
            },
        }
    }

    /// Changes a box's declared services or links (`crate::wiring::apply`):
    /// each linked box must be another of the account's boxes that runs.
    pub async fn wire(
        &self,
        account: &AccountId,
        id: &str,
        change: WireChange,
    ) -> Result<BoxReading, BoxError> {
        crate::wiring::check_change(&change).map_err(BoxError::Invalid)?;
        for link in &change.links {
            if link.box_id == id {
                return Err(BoxError::Invalid(format!(
                    "box {id} cannot link to itself: declare the name as a service instead"
                )));
            }
            self.linkable(account, &link.box_id).await?;
        }
        match self.actor(account, id).await? {
            Err(record) => Err(over(&record)),
            Ok(addr) => {
                let snapshot = match addr.send(for_account(account, Rewire { change })).await {
                    Ok(answer) => answer?,
                    Err(e) => return Err(over(&self.after_gone(account, id, e).await?)),
                };
                Ok(self.with_linked(self.dressed(snapshot)).await)
            }
        }
    }

    /// Stops a box for good. Stopping a box that is over answers its record.
    pub async fn stop(&self, account: &AccountId, id: &str) -> Result<BoxReading, BoxError> {
        match self.actor(account, id).await? {
            Err(record) => Ok(self.snapshot_of_row(record)),
            Ok(addr) => match addr
                .send(for_account(
                    account,
                    Stop {
                        reason: "stopped by request",
                    },
                ))
                .await
            {
                // Over: no URLs.
                Ok(Ok(s)) => Ok(self.dressed(s)),
                // Ended meanwhile, by its actor or outside it: its record.
                Ok(Err(e)) => match self.settled(account, id).await? {
                    Some(record) => Ok(self.snapshot_of_row(record)),
                    None => Err(e),
                },
                // Stopped by something else meanwhile: as stopping a box
                // that is over, its record.
                Err(e) => Ok(self.snapshot_of_row(self.after_gone(account, id, e).await?)),
            },
        }
    }

    /// The account's boxes, newest first (from the store: nothing is thawed).
    pub async fn list(
        &self,
        account: &AccountId,
        before: Option<BoxCursor>,
        limit: u32,
    ) -> Result<(Vec<BoxReading>, Option<BoxCursor>), BoxError> {
        let (store, account) = (self.store.clone(), account.clone());
        let (rows, next) =
            blocking(move || store.list_boxes(Some(&account), before.as_ref(), limit)).await?;
        Ok((
            rows.into_iter().map(|r| self.snapshot_of_row(r)).collect(),
            next,
        ))
    }

    /// The link and mask of a running box, thawing it first; counts as activity.
    pub async fn channel(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<
        (
            actix::Addr<crate::box_actor::BoxActor>,
            LinkHandle,
            Arc<Masker>,
        ),
        BoxError,
    > {
        let addr = match self.actor(account, id).await? {
            Err(record) => return Err(over(&record)),
            Ok(addr) => addr,
        };
        let channel = Channel {
            thaw: true,
            touch: true,
        };
        let asked = addr.send(for_account(account, channel)).await;
        let (link, masker) = match asked {
            Ok(answer) => answer?,
            Err(e) => return Err(over(&self.after_gone(account, id, e).await?)),
        };
        Ok((addr, link, masker))
    }

    /// The box as stored now, once its actor's mailbox closed between finding
    /// it and asking it (the box stopped meanwhile): the record of a box that
    /// is over, for the caller to answer as it answers any stopped box;
    /// otherwise 503 `box_channel_lost` (retry). Never a 500: the race is the
    /// caller's timing, not a fault.
    async fn after_gone(
        &self,
        account: &AccountId,
        id: &str,
        e: actix::MailboxError,
    ) -> Result<BoxRecord, BoxError> {
        tracing::debug!(box_id = id, error = %e, "the box actor went away while asked");
        let record = self.record(account, id).await?;
        if record.state.is_terminal() {
            Ok(record)
        } else {
            Err(BoxError::Boxd(LinkError::Closed))
        }
    }

    /// Runs a command: its events (output masked), as they come. A command
    /// that cannot start is an error here; a foreground command keeps the box
    /// awake while it runs and its caller holds the stream. Dropping the
    /// stream ends the reading (the command runs on in the box, and no longer
    /// counts as activity). The server does not take boxd's word for the
    /// command's time limit: past `timeout_s` and [`EXEC_GRACE`] without an
    /// exit, the stream yields [`BoxError::Overran`] and ends. No task and no
    /// channel: the caller's polling reads boxd's stream.
    pub async fn exec(
        &self,
        account: &AccountId,
        id: &str,
        request: ExecRequest,
    ) -> Result<Events<ExecEvent>, BoxError> {
        let (addr, link, masker) = self.channel(account, id).await?;
        let mut command = match Command::start(&link, &request, masker).await {
            Ok(command) => command,
            Err(e) => return Err(self.noticed(account, id, e).await),
        };
        let limit = request
            .timeout_s
            .filter(|_| !request.background)
            .map(Duration::from_secs);
        // The first event says whether the command started at all.
        let first = command
            .next()
            .await?
            .ok_or_else(|| BoxError::Internal("the command's stream ended at once".into()))?;
        let reading = Reading {
            command,
            _link: link,
            _awake: self.awake(addr),
            overran_at: limit.map(|l| (tokio::time::Instant::now() + l + EXEC_GRACE, l)),
        };
        let rest = futures_util::stream::unfold(Some(reading), |reading| async move {
            let mut reading = reading?;
            let overran = async {
                match reading.overran_at {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = reading.command.next() => match event {
                    Ok(Some(event)) => Some((Ok(event), Some(reading))),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), None)),
                },
                () = overran => {
                    let limit = reading.overran_at.map(|(_, l)| l).unwrap_or_default();
                    Some((Err(BoxError::Overran { limit, grace: EXEC_GRACE }), None))
                }
            }
        });
        Ok(futures_util::stream::once(std::future::ready(Ok(first)))
            .chain(rest)
            .boxed())
    }

    /// The box's background commands.
    pub async fn processes(&self, account: &AccountId, id: &str) -> Result<Vec<Process>, BoxError> {
        let (_, link, masker) = self.channel(account, id).await?;
        let mut processes = match link.call(&ProcessesRequest, SERVICE).await {
            Ok(processes) => processes,
            Err(e) => return Err(self.noticed(account, id, e.into()).await),
        };
        for p in &mut processes {
            p.cmd = masker.mask(&p.cmd);
            if let Some(exit) = &mut p.exit {
                masker.mask_failures(&mut exit.private_endpoint_errors);
            }
        }
        Ok(processes)
    }

    /// Signals a background command's process group.
    pub async fn signal(
        &self,
        account: &AccountId,
        id: &str,
        pid: u32,
        signal: i32,
    ) -> Result<(), BoxError> {
        let (_, link, _) = self.channel(account, id).await?;
        let done = match link.call(&Signal { pid, signal }, SERVICE).await {
            Ok(done) => done,
            Err(e) => return Err(self.noticed(account, id, e.into()).await),
        };
        if done.ok {
            Ok(())
        } else {
            Err(BoxError::ProcessNotFound {
                id: id.to_owned(),
                pid,
            })
        }
    }

    /// A background command's output so far: head and tail, masked.
    pub async fn logs(
        &self,
        account: &AccountId,
        id: &str,
        pid: u32,
        keep: usize,
    ) -> Result<Bounded, BoxError> {
        let (_, link, masker) = self.channel(account, id).await?;
        let mut stream = match open_log(&link, id, pid, 0, false).await {
            Ok(stream) => stream,
            Err(e) => return Err(self.noticed(account, id, e).await),
        };
        let mut kept = Bounded::new(keep, keep);
        let mut mask = MaskStream::new(masker);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| no_process(id, pid, e))?;
            if n == 0 {
                break;
            }
            kept.push(&mask.push(&chunk[..n]));
        }
        kept.push(&mask.finish());
        Ok(kept)
    }

    /// Follows a background command's output (masked) from `offset` while it
    /// runs; the stream ends once the command has exited and all its output
    /// arrived. Following keeps the box awake while the caller holds the
    /// stream; once it is dropped, following ends (the command runs on and
    /// its output stays in its log, but it no longer counts as activity: a
    /// box nobody waits on freezes and expires on time).
    pub async fn follow(
        &self,
        account: &AccountId,
        id: &str,
        pid: u32,
        offset: u64,
    ) -> Result<Events<Vec<u8>>, BoxError> {
        let (addr, link, masker) = self.channel(account, id).await?;
        let stream = match open_log(&link, id, pid, offset, true).await {
            Ok(stream) => stream,
            Err(e) => return Err(self.noticed(account, id, e).await),
        };
        let following = Following {
            stream,
            mask: MaskStream::new(masker),
            chunk: vec![0u8; 64 * 1024],
            id: id.to_owned(),
            pid,
            _awake: self.awake(addr),
        };
        Ok(
            futures_util::stream::unfold(Some(following), |following| async move {
                let mut f = following?;
                match f.stream.read(&mut f.chunk).await {
                    Ok(0) => Some((Ok(f.mask.finish()), None)),
                    Ok(n) => {
                        let masked = f.mask.push(&f.chunk[..n]);
                        Some((Ok(masked), Some(f)))
                    }
                    Err(e) => Some((Err(no_process(&f.id, f.pid, e)), None)),
                }
            })
            .boxed(),
        )
    }

    /// One background command of the box.
    pub async fn process(
        &self,
        account: &AccountId,
        id: &str,
        pid: u32,
    ) -> Result<Process, BoxError> {
        self.processes(account, id)
            .await?
            .into_iter()
            .find(|p| p.pid == pid)
            .ok_or_else(|| BoxError::ProcessNotFound {
                id: id.to_owned(),
                pid,
            })
    }

    /// Removes the pool's boxes before the server exits; running boxes stay.
    pub async fn shutdown(&self) {
        if let Ok(host) = &self.host {
            let _ = host.supervisor.send(Shutdown).await;
        }
    }
}

/// A command being read ([`Boxes::exec`]): its stream from boxd, the link
/// it runs on, the box's lease, and when it has overrun (with its limit).
struct Reading {
    command: Command,
    _link: LinkHandle,
    _awake: Awake,
    overran_at: Option<(tokio::time::Instant, Duration)>,
}

/// A background command's log being followed ([`Boxes::follow`]).
struct Following {
    stream: Stream,
    mask: MaskStream,
    chunk: Vec<u8>,
    id: String,
    pid: u32,
    _awake: Awake,
}

/// `message` to a box's actor on behalf of `account` ([`ForAccount`]).
fn for_account<M>(account: &AccountId, message: M) -> ForAccount<M> {
    ForAccount {
        account: account.clone(),
        message,
    }
}

/// A stream of a background command's log from boxd.
async fn open_log(
    link: &LinkHandle,
    id: &str,
    pid: u32,
    offset: u64,
    follow: bool,
) -> Result<Stream, BoxError> {
    let mut stream = link.open(Logs::SERVICE, SERVICE).await?;
    let body = serde_json::to_vec(&Logs {
        pid,
        offset,
        follow,
    })?;
    stream
        .write_all(&body)
        .await
        .map_err(|e| no_process(id, pid, e))?;
    stream
        .shutdown()
        .await
        .map_err(|e| no_process(id, pid, e))?;
    Ok(stream)
}

/// boxd resets the log stream of a process it does not know; any other
/// failure is the channel's.
fn no_process(id: &str, pid: u32, e: std::io::Error) -> BoxError {
    if e.kind() == std::io::ErrorKind::ConnectionReset {
        BoxError::ProcessNotFound {
            id: id.to_owned(),
            pid,
        }
    } else {
        crate::error::io_error(format!("reading the log of process {pid} in box {id}"))(e)
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

fn checked_text(
    field: &str,
    value: Option<String>,
    max: usize,
) -> Result<Option<String>, BoxError> {
    let Some(value) = value else { return Ok(None) };
    let value = value.trim().to_owned();
    if value.chars().count() > max {
        return Err(BoxError::Invalid(format!(
            "{field} is longer than {max} characters"
        )));
    }
    if field == "name" && value.chars().any(char::is_control) {
        return Err(BoxError::Invalid(
            "name must be one line without control characters".into(),
        ));
    }
    Ok((!value.is_empty()).then_some(value))
}

/// `psbx boxes stop` without a server: removes the box's VM and files through
/// libvirt directly and records it stopped. A server supervising the box
/// notices on its next call.
pub fn stop_directly(
    store: &Store,
    settings: &BoxSettings,
    libvirt_uri: &str,
    id: &str,
) -> Result<BoxRecord, BoxError> {
    let id = BoxId::parse(id).map_err(|e| BoxError::Invalid(e.to_string()))?;
    let record = store
        .box_by_id(&id)?
        .ok_or_else(|| BoxError::NotFound(id.to_string()))?;
    if record.state.is_terminal() {
        return Ok(record);
    }
    let host = psbx_libvirt::Host::connect(libvirt_uri)?;
    crate::machine::teardown(&host, &settings.boxes_dir, &id)?;
    if record.state == BoxState::Pooled {
        store.delete_pooled_box(&id)?;
        return Ok(record);
    }
    let to = if matches!(record.state, BoxState::Running | BoxState::Frozen) {
        BoxState::Stopped
    } else {
        BoxState::Failed
    };
    let detail = crate::store::Transition {
        failure: (to == BoxState::Failed)
            .then(|| "stopped by an operator while starting".to_owned()),
        ..Default::default()
    };
    store
        .transition_box(&id, record.state, to, detail)?
        .ok_or_else(|| BoxError::Internal("the box changed state meanwhile; try again".into()))
}
