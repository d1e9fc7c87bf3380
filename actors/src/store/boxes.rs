//! Boxes: one row per box from creation (or pooling) to its end. Transitions
//! are written here only after the lifecycle call succeeded (DESIGN.md §3), and
//! only from the state the caller expects, so a racing writer cannot move a
//! box backwards.

use super::schema::boxes;
use super::{Store, StoreError};
use crate::box_state::BoxState;
use crate::ids::{AccountId, BoxId};
use crate::settings::Unit;
use crate::spec::BoxSpec;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A box as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxRecord {
    pub id: BoxId,
    pub account_id: Option<AccountId>,
    pub host: String,
    pub state: BoxState,
    pub failure: Option<String>,
    pub name: Option<String>,
    pub goal: Option<String>,
    pub image: String,
    pub size: u32,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub disk_gb: u64,
    pub keep_secs: i64,
    pub spec: BoxSpec,
    pub boot_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub ready_at: Option<DateTime<Utc>>,
    pub last_activity_at: DateTime<Utc>,
    pub frozen_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = boxes, check_for_backend(diesel::pg::Pg))]
struct BoxRow {
    id: BoxId,
    account_id: Option<AccountId>,
    host: String,
    state: String,
    failure: Option<String>,
    name: Option<String>,
    goal: Option<String>,
    image: String,
    size: i32,
    vcpus: i32,
    memory_mib: i64,
    disk_gb: i64,
    keep_secs: i64,
    spec: serde_json::Value,
    boot_id: Option<String>,
    created_at: DateTime<Utc>,
    ready_at: Option<DateTime<Utc>>,
    last_activity_at: DateTime<Utc>,
    frozen_at: Option<DateTime<Utc>>,
    stopped_at: Option<DateTime<Utc>>,
}

impl TryFrom<BoxRow> for BoxRecord {
    type Error = StoreError;

    fn try_from(r: BoxRow) -> Result<Self, StoreError> {
        let spec = BoxSpec::from_json(r.spec).map_err(|e| StoreError::Unreadable {
            what: format!("the spec of box {}", r.id),
            why: e.to_string(),
        })?;
        // The CHECK constraint admits only the names BoxState parses.
        let state = super::read_enum(
            || format!("the state of box {}", r.id),
            &r.state,
            BoxState::parse,
        )?;
        Ok(Self {
            id: r.id,
            account_id: r.account_id,
            host: r.host,
            state,
            failure: r.failure,
            name: r.name,
            goal: r.goal,
            image: r.image,
            size: u32::try_from(r.size).unwrap_or(0),
            vcpus: u32::try_from(r.vcpus).unwrap_or(0),
            memory_mib: u64::try_from(r.memory_mib).unwrap_or(0),
            disk_gb: u64::try_from(r.disk_gb).unwrap_or(0),
            keep_secs: r.keep_secs,
            spec,
            boot_id: r.boot_id,
            created_at: r.created_at,
            ready_at: r.ready_at,
            last_activity_at: r.last_activity_at,
            frozen_at: r.frozen_at,
            stopped_at: r.stopped_at,
        })
    }
}

/// Where a listing of boxes (newest first) continues: the last box's creation
/// time and id.
pub type BoxCursor = (DateTime<Utc>, BoxId);

/// A box about to be made: who owns it (none while pooled), what it is.
#[derive(Debug, Clone)]
pub struct NewBox {
    pub id: BoxId,
    pub account_id: Option<AccountId>,
    pub host: String,
    pub state: BoxState,
    pub name: Option<String>,
    pub goal: Option<String>,
    pub image: String,
    pub size: u32,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub disk_gb: u64,
    pub keep_secs: i64,
    pub spec: BoxSpec,
}

impl BoxRecord {
    /// What the box holds of the host while its VM runs.
    pub fn unit(&self) -> Unit {
        Unit {
            vcpus: self.vcpus,
            memory_mib: self.memory_mib,
            disk_gb: self.disk_gb,
        }
    }
}

impl NewBox {
    /// A box of `size` units (`unit`: the resources of that size) of `image` on `host`,
    /// owned by nobody, with no name, goal or spec and nothing to keep it:
    /// a pool box as it is, or the start of a request's box.
    pub fn for_size(
        id: BoxId,
        host: &str,
        image: &str,
        state: BoxState,
        size: u32,
        unit: Unit,
    ) -> Self {
        Self {
            id,
            account_id: None,
            host: host.to_owned(),
            state,
            name: None,
            goal: None,
            image: image.to_owned(),
            size,
            vcpus: unit.vcpus,
            memory_mib: unit.memory_mib,
            disk_gb: unit.disk_gb,
            keep_secs: 0,
            spec: BoxSpec::default(),
        }
    }
}

/// What an account asks for when it claims a pooled box.
#[derive(Debug, Clone)]
pub struct PoolClaim {
    pub account_id: AccountId,
    pub name: Option<String>,
    pub goal: Option<String>,
    pub keep_secs: i64,
    pub spec: BoxSpec,
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn i32_of(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl Store {
    /// Writes a new box's row; a box for an account is refused (`QuotaExceeded`)
    /// when it would pass the account's box quotas, checked under the account
    /// lock in the same transaction.
    pub fn insert_box(&self, new: &NewBox) -> Result<BoxRecord, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            if let Some(account) = &new.account_id {
                super::quota::lock_account(conn, account.as_str())?;
                super::quota::check_boxes(conn, &self.quotas, account.as_str(), new.size)?;
            }
            insert_box_row(conn, new)
        })
    }
}

fn insert_box_row(conn: &mut diesel::PgConnection, new: &NewBox) -> Result<BoxRecord, StoreError> {
    diesel::insert_into(boxes::table)
        .values((
            boxes::id.eq(new.id.as_str()),
            boxes::account_id.eq(new.account_id.as_ref().map(AccountId::as_str)),
            boxes::host.eq(&new.host),
            boxes::state.eq(new.state.as_str()),
            boxes::name.eq(&new.name),
            boxes::goal.eq(&new.goal),
            boxes::image.eq(&new.image),
            boxes::size.eq(i32_of(new.size)),
            boxes::vcpus.eq(i32_of(new.vcpus)),
            boxes::memory_mib.eq(i64_of(new.memory_mib)),
            boxes::disk_gb.eq(i64_of(new.disk_gb)),
            boxes::keep_secs.eq(new.keep_secs),
            boxes::spec.eq(new.spec.to_json()),
        ))
        .returning(BoxRow::as_returning())
        .get_result(conn)?
        .try_into()
}

impl Store {
    /// One of the account's boxes (another account's is `None`, as if absent).
    pub fn account_box(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<Option<BoxRecord>, StoreError> {
        boxes::table
            .find(id.as_str())
            .filter(boxes::account_id.eq(account.as_str()))
            .select(BoxRow::as_select())
            .first(&mut self.conn()?)
            .optional()?
            .map(BoxRecord::try_from)
            .transpose()
    }

    /// Any box by id (operators and the supervisor).
    pub fn box_by_id(&self, id: &BoxId) -> Result<Option<BoxRecord>, StoreError> {
        boxes::table
            .find(id.as_str())
            .select(BoxRow::as_select())
            .first(&mut self.conn()?)
            .optional()?
            .map(BoxRecord::try_from)
            .transpose()
    }

    /// The account's boxes, newest first, `limit` at a time.
    pub fn list_boxes(
        &self,
        account: Option<&AccountId>,
        before: Option<&BoxCursor>,
        limit: u32,
    ) -> Result<(Vec<BoxRecord>, Option<BoxCursor>), StoreError> {
        let mut query = boxes::table
            .filter(boxes::state.ne(BoxState::Pooled.as_str()))
            .into_boxed();
        if let Some(account) = account {
            query = query.filter(boxes::account_id.eq(account.as_str()));
        }
        if let Some((created_at, id)) = before {
            query = query.filter(
                boxes::created_at.lt(created_at).or(boxes::created_at
                    .eq(created_at)
                    .and(boxes::id.lt(id.as_str()))),
            );
        }
        let mut rows: Vec<BoxRecord> = query
            .order((boxes::created_at.desc(), boxes::id.desc()))
            .limit(i64::from(limit) + 1)
            .select(BoxRow::as_select())
            .load(&mut self.conn()?)?
            .into_iter()
            .map(BoxRecord::try_from)
            .collect::<Result<_, _>>()?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|b| (b.created_at, b.id.clone()))
        } else {
            None
        };
        Ok((rows, next))
    }

    /// Boxes of a host that are not over (pooled included), for reconciliation.
    pub fn live_boxes_on_host(&self, host: &str) -> Result<Vec<BoxRecord>, StoreError> {
        boxes::table
            .filter(boxes::host.eq(host))
            .filter(boxes::state.ne_all([BoxState::Stopped.as_str(), BoxState::Failed.as_str()]))
            .select(BoxRow::as_select())
            .load(&mut self.conn()?)?
            .into_iter()
            .map(BoxRecord::try_from)
            .collect()
    }

    /// Moves a box from `from` to `to`, setting the timestamps that go with `to`.
    /// Returns the new record, or `None` when the box was not in `from` (someone
    /// else moved it first). Illegal transitions are refused.
    pub fn transition_box(
        &self,
        id: &BoxId,
        from: BoxState,
        to: BoxState,
        detail: Transition,
    ) -> Result<Option<BoxRecord>, StoreError> {
        from.check(id, to)?;
        let target = boxes::table
            .filter(boxes::id.eq(id.as_str()))
            .filter(boxes::state.eq(from.as_str()));
        let now = Utc::now();
        let mut conn = self.conn()?;
        let updated = match to {
            BoxState::Running => diesel::update(target)
                .set((
                    boxes::state.eq(to.as_str()),
                    boxes::boot_id.eq(detail.boot_id),
                    boxes::ready_at.eq(diesel::dsl::sql::<
                        diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
                    >("coalesce(ready_at, now())")),
                    boxes::last_activity_at.eq(now),
                    boxes::frozen_at.eq(None::<DateTime<Utc>>),
                ))
                .returning(BoxRow::as_returning())
                .get_result(&mut conn)
                .optional()?,
            BoxState::Frozen => diesel::update(target)
                .set((boxes::state.eq(to.as_str()), boxes::frozen_at.eq(now)))
                .returning(BoxRow::as_returning())
                .get_result(&mut conn)
                .optional()?,
            // The sealed values of the box's secrets go with it (the spec:
            // secrets "disappear with the box"), and so does its disk's key;
            // what else it was started with stays for its record.
            BoxState::Stopped | BoxState::Failed => conn.transaction(|conn| {
                let ended = diesel::update(target)
                    .set((
                        boxes::state.eq(to.as_str()),
                        boxes::stopped_at.eq(now),
                        boxes::failure.eq(detail.failure),
                        boxes::spec.eq(diesel::dsl::sql::<diesel::sql_types::Jsonb>(
                            "spec - 'mask' - 'environmentMask'",
                        )),
                    ))
                    .returning(BoxRow::as_returning())
                    .get_result(conn)
                    .optional()?;
                if ended.is_some() {
                    super::disk_keys::delete_disk_key(conn, id)?;
                }
                Ok::<_, StoreError>(ended)
            })?,
            _ => diesel::update(target)
                .set(boxes::state.eq(to.as_str()))
                .returning(BoxRow::as_returning())
                .get_result(&mut conn)
                .optional()?,
        };
        updated.map(BoxRecord::try_from).transpose()
    }

    /// Hands a pooled box to an account (it becomes running); refused
    /// (`QuotaExceeded`) when the box would pass the account's box quotas,
    /// checked under the account lock in the same transaction.
    pub fn claim_pooled_box(
        &self,
        id: &BoxId,
        claim: &PoolClaim,
        boot_id: &str,
    ) -> Result<Option<BoxRecord>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            super::quota::lock_account(conn, claim.account_id.as_str())?;
            let size: Option<i32> = boxes::table
                .find(id.as_str())
                .select(boxes::size)
                .first(conn)
                .optional()?;
            let size = size.and_then(|s| u32::try_from(s).ok()).unwrap_or(0);
            super::quota::check_boxes(conn, &self.quotas, claim.account_id.as_str(), size)?;
            claim_pooled_row(conn, id, claim, boot_id)
        })
    }
}

fn claim_pooled_row(
    conn: &mut diesel::PgConnection,
    id: &BoxId,
    claim: &PoolClaim,
    boot_id: &str,
) -> Result<Option<BoxRecord>, StoreError> {
    let now = Utc::now();
    diesel::update(
        boxes::table
            .filter(boxes::id.eq(id.as_str()))
            .filter(boxes::state.eq(BoxState::Pooled.as_str())),
    )
    .set((
        boxes::account_id.eq(claim.account_id.as_str()),
        boxes::state.eq(BoxState::Running.as_str()),
        boxes::name.eq(&claim.name),
        boxes::goal.eq(&claim.goal),
        boxes::keep_secs.eq(claim.keep_secs),
        boxes::spec.eq(claim.spec.to_json()),
        boxes::boot_id.eq(boot_id),
        boxes::created_at.eq(now),
        boxes::ready_at.eq(now),
        boxes::last_activity_at.eq(now),
    ))
    .returning(BoxRow::as_returning())
    .get_result(conn)
    .optional()?
    .map(BoxRecord::try_from)
    .transpose()
}

impl Store {
    /// Records activity: the idle and expiry clocks start again from now.
    pub fn touch_box(&self, id: &BoxId) -> Result<DateTime<Utc>, StoreError> {
        let now = Utc::now();
        diesel::update(boxes::table.find(id.as_str()))
            .set(boxes::last_activity_at.eq(now))
            .execute(&mut self.conn()?)?;
        Ok(now)
    }

    pub fn set_box_keep(&self, id: &BoxId, keep_secs: i64) -> Result<(), StoreError> {
        diesel::update(boxes::table.find(id.as_str()))
            .set(boxes::keep_secs.eq(keep_secs))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// Stores a box's spec as changed after its start (its services and
    /// links, `wire`).
    pub fn set_box_spec(&self, id: &BoxId, spec: &BoxSpec) -> Result<(), StoreError> {
        diesel::update(boxes::table.find(id.as_str()))
            .set(boxes::spec.eq(spec.to_json()))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// Forgets a pooled box entirely (it never belonged to anyone).
    pub fn delete_pooled_box(&self, id: &BoxId) -> Result<(), StoreError> {
        diesel::delete(
            boxes::table
                .filter(boxes::id.eq(id.as_str()))
                .filter(boxes::state.eq(BoxState::Pooled.as_str())),
        )
        .execute(&mut self.conn()?)?;
        Ok(())
    }
}

/// What a transition records besides the state.
#[derive(Debug, Default, Clone)]
pub struct Transition {
    /// For `running`: the boot id boxd reported.
    pub boot_id: Option<String>,
    /// For `failed` (and a stop's cause): why.
    pub failure: Option<String>,
}
