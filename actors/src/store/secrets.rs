//! Secrets as stored: sealed values only; reads for people list names and times.

use super::schema::{meta, secrets};
use super::{Store, StoreError};
use crate::ids::AccountId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A sealed secret value.
pub struct SealedRow {
    pub name: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl Store {
    /// Stores (or replaces) a secret; true when it is new. Refused
    /// (`QuotaExceeded`) past the account's secrets or stored bytes.
    pub fn put_secret(
        &self,
        account: &AccountId,
        name: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<(bool, DateTime<Utc>), StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let existed = diesel::select(diesel::dsl::exists(
                secrets::table.find((account.as_str(), name)),
            ))
            .get_result::<bool>(conn)?;
            super::quota::lock_account(conn, account.as_str())?;
            if !existed {
                super::quota::check_secrets(conn, &self.quotas, account.as_str())?;
            }
            super::quota::check_stored_bytes(
                conn,
                &self.quotas,
                account.as_str(),
                Some(name),
                None,
                ciphertext.len(),
            )?;
            let updated_at: DateTime<Utc> = diesel::insert_into(secrets::table)
                .values((
                    secrets::account_id.eq(account.as_str()),
                    secrets::name.eq(name),
                    secrets::nonce.eq(nonce),
                    secrets::ciphertext.eq(ciphertext),
                ))
                .on_conflict((secrets::account_id, secrets::name))
                .do_update()
                .set((
                    secrets::nonce.eq(nonce),
                    secrets::ciphertext.eq(ciphertext),
                    secrets::updated_at.eq(diesel::dsl::now),
                ))
                .returning(secrets::updated_at)
                .get_result(conn)?;
            Ok((!existed, updated_at))
        })
    }

    /// The account's secret names with when each was last set, by name.
    pub fn list_secrets(
        &self,
        account: &AccountId,
    ) -> Result<Vec<(String, DateTime<Utc>)>, StoreError> {
        Ok(secrets::table
            .filter(secrets::account_id.eq(account.as_str()))
            .order(secrets::name)
            .select((secrets::name, secrets::updated_at))
            .load(&mut self.conn()?)?)
    }

    pub fn delete_secret(&self, account: &AccountId, name: &str) -> Result<bool, StoreError> {
        Ok(
            diesel::delete(secrets::table.find((account.as_str(), name)))
                .execute(&mut self.conn()?)?
                == 1,
        )
    }

    /// The sealed values of the named secrets that exist.
    pub fn sealed_secrets(
        &self,
        account: &AccountId,
        names: &[String],
    ) -> Result<Vec<SealedRow>, StoreError> {
        Ok(secrets::table
            .filter(secrets::account_id.eq(account.as_str()))
            .filter(secrets::name.eq_any(names))
            .select((secrets::name, secrets::nonce, secrets::ciphertext))
            .load::<(String, Vec<u8>, Vec<u8>)>(&mut self.conn()?)?
            .into_iter()
            .map(|(name, nonce, ciphertext)| SealedRow {
                name,
                nonce,
                ciphertext,
            })
            .collect())
    }

    /// A value of the `meta` table.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(meta::table
            .find(key)
            .select(meta::value)
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// Sets a `meta` value unless one is there; returns the value that stays.
    pub fn meta_set_once(&self, key: &str, value: &str) -> Result<String, StoreError> {
        let mut conn = self.conn()?;
        diesel::insert_into(meta::table)
            .values((meta::key.eq(key), meta::value.eq(value)))
            .on_conflict_do_nothing()
            .execute(&mut conn)?;
        Ok(meta::table.find(key).select(meta::value).first(&mut conn)?)
    }
}
