//! The store's side of the per-account quotas ([`crate::quota`]): the
//! account row lock that serialises an account's creations, and what the
//! account holds now. Each insert that a quota limits takes the lock, counts
//! and inserts in one transaction.

use super::schema::{accounts, boxes, connections, environments};
use super::{Conn, Store, StoreError};
use crate::box_state::BoxState;
use crate::ids::AccountId;
use crate::quota::{QuotaExceeded, Quotas};
use diesel::PgConnection;
use diesel::prelude::*;

/// Locks the account's row until the transaction ends: the account's
/// quota-limited inserts run one at a time.
pub(super) fn lock_account(conn: &mut PgConnection, account: &str) -> Result<(), StoreError> {
    accounts::table
        .find(account)
        .select(accounts::id)
        .for_update()
        .first::<String>(conn)
        .optional()?;
    Ok(())
}

/// Locks the account that environment `env` belongs to, as [`lock_account`];
/// that account, or `None` when there is no such environment.
pub(super) fn lock_account_of_environment(
    conn: &mut PgConnection,
    env: &str,
) -> Result<Option<String>, StoreError> {
    let account: Option<String> = environments::table
        .find(env)
        .select(environments::account_id)
        .first(conn)
        .optional()?;
    if let Some(account) = &account {
        lock_account(conn, account)?;
    }
    Ok(account)
}

/// The account's boxes that are not over, and the sum of their sizes.
fn live_boxes(conn: &mut PgConnection, account: &str) -> Result<(u64, u64), StoreError> {
    let sizes: Vec<i32> = boxes::table
        .filter(boxes::account_id.eq(account))
        .filter(boxes::state.ne_all([BoxState::Stopped.as_str(), BoxState::Failed.as_str()]))
        .select(boxes::size)
        .load(conn)?;
    let units = sizes.iter().map(|s| u64::try_from(*s).unwrap_or(0)).sum();
    Ok((sizes.len() as u64, units))
}

const BOXES_HINT: &str = "stop boxes this account no longer needs (`DELETE /v1/boxes/{id}`; \
                          `GET /v1/boxes` lists them), or ask the operator for a higher limit";

/// Refuses a box of `size` units the account's quotas leave no room for.
pub(super) fn check_boxes(
    conn: &mut PgConnection,
    quotas: &Quotas,
    account: &str,
    size: u32,
) -> Result<(), StoreError> {
    let (count, units) = live_boxes(conn, account)?;
    QuotaExceeded::check(
        "too many boxes",
        "quotas.max_boxes",
        u64::from(quotas.max_boxes),
        count,
        1,
        BOXES_HINT,
    )?;
    QuotaExceeded::check(
        "too many box units (the sum of the live boxes' sizes)",
        "quotas.max_units",
        u64::from(quotas.max_units),
        units,
        u64::from(size),
        BOXES_HINT,
    )?;
    Ok(())
}

/// Refuses one more connection past the account's limit.
pub(super) fn check_connections(
    conn: &mut PgConnection,
    quotas: &Quotas,
    account: &str,
) -> Result<(), StoreError> {
    let count: i64 = connections::table
        .inner_join(environments::table)
        .filter(environments::account_id.eq(account))
        .count()
        .get_result(conn)?;
    QuotaExceeded::check(
        "too many connections",
        "quotas.max_connections",
        u64::from(quotas.max_connections),
        u64::try_from(count).unwrap_or(0),
        1,
        "delete connections this account no longer uses \
         (`DELETE /v1/environments/{name}/connections/{connection}`), or ask the operator for a higher limit",
    )?;
    Ok(())
}

#[derive(QueryableByName)]
struct Bytes {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    bytes: i64,
}

/// Bytes of sealed values stored for the account (secrets and environment
/// settings), leaving out the row being replaced: `(secret name)` or
/// `(environment id, service name)`.
fn stored_bytes(
    conn: &mut PgConnection,
    account: &str,
    replacing_secret: Option<&str>,
    replacing_service: Option<(&str, &str)>,
) -> Result<u64, StoreError> {
    use diesel::sql_types::{Nullable, Text};
    let (env, service) = replacing_service.unzip();
    let found: Bytes = diesel::sql_query(
        "SELECT (coalesce((SELECT sum(octet_length(ciphertext)) FROM secrets \
                   WHERE account_id = $1 AND name IS DISTINCT FROM $2), 0) \
               + coalesce((SELECT sum(octet_length(s.ciphertext)) FROM environment_services s \
                   JOIN environments e ON e.id = s.environment_id \
                   WHERE e.account_id = $1 \
                     AND NOT (s.environment_id IS NOT DISTINCT FROM $3 AND s.name IS NOT DISTINCT FROM $4)), 0) \
               )::bigint AS bytes",
    )
    .bind::<Text, _>(account)
    .bind::<Nullable<Text>, _>(replacing_secret)
    .bind::<Nullable<Text>, _>(env)
    .bind::<Nullable<Text>, _>(service)
    .get_result(conn)?;
    Ok(u64::try_from(found.bytes).unwrap_or(0))
}

const STORED_HINT: &str = "delete secrets (`DELETE /v1/secrets/{name}`) or environment settings \
                           this account no longer needs, or ask the operator for a higher limit";

/// Refuses storing `adding` bytes in place of the named row past the
/// account's limit.
pub(super) fn check_stored_bytes(
    conn: &mut PgConnection,
    quotas: &Quotas,
    account: &str,
    replacing_secret: Option<&str>,
    replacing_service: Option<(&str, &str)>,
    adding: usize,
) -> Result<(), StoreError> {
    let held = stored_bytes(conn, account, replacing_secret, replacing_service)?;
    QuotaExceeded::check(
        "too many bytes stored (sealed secret values and environment settings)",
        "quotas.max_stored_bytes",
        quotas.max_stored_bytes,
        held,
        adding as u64,
        STORED_HINT,
    )?;
    Ok(())
}

/// Refuses one more secret past the account's limit.
pub(super) fn check_secrets(
    conn: &mut PgConnection,
    quotas: &Quotas,
    account: &str,
) -> Result<(), StoreError> {
    use super::schema::secrets;
    let count: i64 = secrets::table
        .filter(secrets::account_id.eq(account))
        .count()
        .get_result(conn)?;
    QuotaExceeded::check(
        "too many secrets",
        "quotas.max_secrets",
        u64::from(quotas.max_secrets),
        u64::try_from(count).unwrap_or(0),
        1,
        "delete secrets this account no longer needs (`DELETE /v1/secrets/{name}`; \
         `GET /v1/secrets` lists them), or ask the operator for a higher limit",
    )?;
    Ok(())
}

const SHOTS_HINT: &str = "delete shots this account no longer needs (`DELETE /v1/boxes/{id}/shots/{shot}`, \
                          or all of a box's: `DELETE /v1/boxes/{id}/shots`), or ask the operator for a higher limit";

/// Refuses `adding` bytes of shots past the account's limit.
pub(super) fn check_shot_bytes(
    conn: &mut PgConnection,
    quotas: &Quotas,
    account: &str,
    adding: u64,
) -> Result<(), StoreError> {
    let held = super::shots::account_shot_bytes_on(conn, account)?;
    QuotaExceeded::check(
        "too many bytes of shots stored (screenshots, recordings, reviewers' images)",
        "quotas.max_shot_bytes",
        quotas.max_shot_bytes,
        u64::try_from(held).unwrap_or(0),
        adding,
        SHOTS_HINT,
    )?;
    Ok(())
}

impl Store {
    /// Refuses `adding` bytes of shots for `account` when its quota leaves
    /// no room now: a quick answer before any work. The insert checks again
    /// under the account lock, which is what holds.
    pub fn check_shot_quota(&self, account: &AccountId, adding: u64) -> Result<(), StoreError> {
        let mut conn: Conn = self.conn()?;
        check_shot_bytes(&mut conn, &self.quotas, account.as_str(), adding)
    }

    /// Refuses a box of `size` units for `account` when its quotas leave no
    /// room now: a quick answer before any work. The insert checks again
    /// under the account lock, which is what holds.
    pub fn check_box_quota(&self, account: &AccountId, size: u32) -> Result<(), StoreError> {
        let mut conn: Conn = self.conn()?;
        check_boxes(&mut conn, &self.quotas, account.as_str(), size)
    }
}
