//! Starting, reading, keeping, rewiring, stopping and listing the boxes of an
//! account: the checks a request passes before the host supervisor or the
//! box's actor is asked.

use super::{BoxReading, Boxes, CreateRequest, for_account, over, send};
use crate::blocking::blocking;
use crate::box_actor::{Keep, PING_TIMEOUT, Rewire, Status, Stop, WOKEN_PATIENCE};
use crate::box_state::BoxState;
use crate::duration;
use crate::environments::claim::{EnvironmentClaim, seal_mask};
use crate::error::BoxError;
use crate::host::CreateBox;
use crate::ids::{AccountId, BoxId};
use crate::secrets::SecretError;
use crate::settings::SIZES;
use crate::spec::BoxSpec;
use crate::store::{BoxCursor, BoxRecord};
use crate::wiring::{self, WireChange};

const MAX_NAME: usize = 100;
const MAX_GOAL: usize = 2000;

impl Boxes {
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
        let record = self.linked_record(account, id).await?;
        if record.state.is_terminal() {
            return Err(BoxError::Invalid(format!(
                "box {id} is {}: a link must point at a box that runs",
                record.state
            )));
        }
        Ok(record)
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
        let host = self.host_for_start().await?;
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

    /// Reads a box; a frozen one is thawed first when `thaw`.
    pub async fn get(
        &self,
        account: &AccountId,
        id: &BoxId,
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

    pub async fn keep(
        &self,
        account: &AccountId,
        id: &BoxId,
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
        id: &BoxId,
        change: WireChange,
    ) -> Result<BoxReading, BoxError> {
        crate::wiring::check_change(&change).map_err(BoxError::Invalid)?;
        for link in &change.links {
            if link.box_id == id.as_str() {
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
    pub async fn stop(&self, account: &AccountId, id: &BoxId) -> Result<BoxReading, BoxError> {
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
