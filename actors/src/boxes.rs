//! The boxes of an account, as the API sees them: validation of requests,
//! account scoping (another account's box is "not found"), and the route to
//! the host supervisor or the box's actor.

use crate::box_::state::BoxState;
use crate::box_::{BoxSnapshot, Forget, Keep, Status, Stop};
use crate::duration;
use crate::error::{BoxError, blocking};
use crate::host::{CreateBox, HostStart, PoolLevels, Shutdown};
use crate::ids::{AccountId, BoxId};
use crate::settings::{BoxSettings, SIZES};
use crate::store::{BoxCursor, BoxRecord, Store};

/// What a caller asks for when starting a box.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    pub name: Option<String>,
    pub goal: Option<String>,
    /// Units (1, 2, 4, 8); 1 when absent.
    pub size: Option<u32>,
    /// How long to keep the box after its last use (`"3d"`); at most `max_keep`.
    pub keep: Option<String>,
    /// What later issues use (services, secret names, environment), stored as is.
    pub spec: serde_json::Value,
}

const MAX_NAME: usize = 100;
const MAX_GOAL: usize = 2000;

pub struct Boxes {
    store: Store,
    settings: BoxSettings,
    host: Result<HostStart, String>,
}

impl Boxes {
    /// `host` is the supervised host, or why there is none (boxes calls then
    /// answer 503 with that reason).
    pub fn new(store: Store, settings: BoxSettings, host: Result<HostStart, String>) -> Self {
        Self {
            store,
            settings,
            host,
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
    ) -> Result<BoxSnapshot, BoxError> {
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
        let host = self.host()?;
        let made = host
            .supervisor
            .send(CreateBox {
                account: account.clone(),
                name,
                goal,
                size,
                keep_secs,
                spec: req.spec,
            })
            .await
            .map_err(|e| BoxError::Internal(format!("the host supervisor is gone: {e}")))??;
        // Read it back through its actor: the answer carries boxd's health.
        match host.ctx.actor(&made.record.id) {
            Some(addr) => send(
                addr.send(Status {
                    thaw: false,
                    touch: false,
                })
                .await,
            )?,
            None => Ok(made),
        }
    }

    async fn row(&self, account: &AccountId, id: &str) -> Result<BoxRecord, BoxError> {
        let not_found = || BoxError::NotFound(id.to_owned());
        let id = BoxId::parse(id).map_err(|_| not_found())?;
        let (store, account) = (self.store.clone(), account.clone());
        blocking(move || store.account_box(&account, &id))
            .await?
            .ok_or_else(not_found)
    }

    fn snapshot_of_row(&self, record: BoxRecord) -> BoxSnapshot {
        BoxSnapshot::of(record, None, None, self.settings.idle_freeze)
    }

    /// The actor of a live box, or the stored record when the box is over.
    async fn actor(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<Result<actix::Addr<crate::box_::BoxActor>, BoxRecord>, BoxError> {
        let record = self.row(account, id).await?;
        if record.state.is_terminal() {
            // Ended behind the actor's back (an operator's stop): let it go.
            if let Ok(host) = &self.host
                && let Some(addr) = host.ctx.actor(&record.id)
            {
                addr.do_send(Forget);
            }
            return Ok(Err(record));
        }
        let host = self.host()?;
        host.ctx.actor(&record.id).map(Ok).ok_or_else(|| {
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
    ) -> Result<BoxSnapshot, BoxError> {
        match self.actor(account, id).await? {
            Err(record) => Ok(self.snapshot_of_row(record)),
            Ok(addr) => send(addr.send(Status { thaw, touch: true }).await)?,
        }
    }

    pub async fn keep(
        &self,
        account: &AccountId,
        id: &str,
        keep: &str,
    ) -> Result<BoxSnapshot, BoxError> {
        let keep_secs = self.keep_secs(keep)?;
        match self.actor(account, id).await? {
            Err(record) => Err(over(&record)),
            Ok(addr) => send(addr.send(Keep { keep_secs }).await)?,
        }
    }

    /// Stops a box for good. Stopping a box that is over answers its record.
    pub async fn stop(&self, account: &AccountId, id: &str) -> Result<BoxSnapshot, BoxError> {
        match self.actor(account, id).await? {
            Err(record) => Ok(self.snapshot_of_row(record)),
            Ok(addr) => send(
                addr.send(Stop {
                    reason: "stopped by request",
                })
                .await,
            )?,
        }
    }

    /// The account's boxes, newest first (from the store: nothing is thawed).
    pub async fn list(
        &self,
        account: &AccountId,
        before: Option<BoxCursor>,
        limit: u32,
    ) -> Result<(Vec<BoxSnapshot>, Option<BoxCursor>), BoxError> {
        let (store, account) = (self.store.clone(), account.clone());
        let (rows, next) =
            blocking(move || store.list_boxes(Some(&account), before.as_ref(), limit)).await?;
        Ok((
            rows.into_iter().map(|r| self.snapshot_of_row(r)).collect(),
            next,
        ))
    }

    /// Pool levels by size, when a host is supervised.
    pub async fn pool_levels(&self) -> Vec<(u32, usize)> {
        match &self.host {
            Ok(host) => host.supervisor.send(PoolLevels).await.unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Removes the pool's boxes before the server exits; running boxes stay.
    pub async fn shutdown(&self) {
        if let Ok(host) = &self.host {
            let _ = host.supervisor.send(Shutdown).await;
        }
    }
}

fn send<T>(
    result: Result<Result<T, BoxError>, actix::MailboxError>,
) -> Result<Result<T, BoxError>, BoxError> {
    result.map_err(|e| BoxError::Internal(format!("the box actor is gone: {e}")))
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
    host.remove(&crate::host::context::HostContext::domain_name(&id))?;
    let dir = settings.boxes_dir.join(id.as_str());
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        return Err(BoxError::Internal(format!(
            "deleting {}: {e}",
            dir.display()
        )));
    }
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
