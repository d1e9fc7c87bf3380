//! Accounts, and the first start of an empty database: one default account with
//! one API key.

use super::api_keys::{self, NewApiKey};
use super::schema::accounts;
use super::{Store, StoreError};
use crate::ids::AccountId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// An account: the owner of keys, boxes, environments and secrets.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = accounts, check_for_backend(diesel::pg::Pg))]
pub struct Account {
    pub id: AccountId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// What the first start of an empty database created.
#[derive(Debug)]
pub struct Bootstrap {
    pub account: Account,
    pub key: NewApiKey,
}

/// Serialises first starts of several replicas on one empty database.
const BOOTSTRAP_LOCK: i64 = 0x7073_6278_626f_6f74; // "psbxboot"

impl Store {
    /// On an empty database, creates the default account and its first API key and
    /// returns them (the only time the key's secret exists outside its holder).
    /// Returns `None` when an account already exists: nothing is re-initialised.
    pub fn bootstrap(&self) -> Result<Option<Bootstrap>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            diesel::sql_query(format!("SELECT pg_advisory_xact_lock({BOOTSTRAP_LOCK})"))
                .execute(conn)?;
            let existing: i64 = accounts::table.count().get_result(conn)?;
            if existing > 0 {
                return Ok(None);
            }
            let row = Account {
                id: AccountId::generate()?,
                name: "default".to_owned(),
                created_at: Utc::now(),
            };
            let account: Account = diesel::insert_into(accounts::table)
                .values(&row)
                .returning(Account::as_returning())
                .get_result(conn)?;
            let key = api_keys::insert(conn, &account.id, "first key")?;
            Ok(Some(Bootstrap { account, key }))
        })
    }

    /// The account operators' commands act on when none is named: the oldest one.
    pub fn default_account(&self) -> Result<Option<Account>, StoreError> {
        Ok(accounts::table
            .order((accounts::created_at, accounts::id))
            .select(Account::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    pub fn account(&self, id: &AccountId) -> Result<Option<Account>, StoreError> {
        Ok(accounts::table
            .find(id.as_str())
            .select(Account::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }
}
