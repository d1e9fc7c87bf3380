//! Box URL keys (`crate::box_urls`): one row per box whose key is random,
//! with the key's SHA-256 (what requests are checked against) and the key
//! sealed by the master key (to show the box's URLs to its owner). A box
//! without a row has the key derived from its id (boxes started before keys
//! were stored). Rows go with their box (`ON DELETE CASCADE`).

use super::schema::{box_url_keys, boxes};
use super::{Store, StoreError};
use crate::ids::BoxId;
use diesel::prelude::*;

/// A box's stored key: its SHA-256 and its sealed form (nonce, then ciphertext).
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct StoredUrlKey {
    pub hash: Vec<u8>,
    pub sealed: Vec<u8>,
}

impl Store {
    /// Sets (or replaces) the key of `id`.
    pub fn set_url_key(&self, id: &BoxId, key: &StoredUrlKey) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        diesel::insert_into(box_url_keys::table)
            .values((
                box_url_keys::box_id.eq(id.as_str()),
                box_url_keys::key_hash.eq(&key.hash),
                box_url_keys::key_sealed.eq(&key.sealed),
            ))
            .on_conflict(box_url_keys::box_id)
            .do_update()
            .set((
                box_url_keys::key_hash.eq(&key.hash),
                box_url_keys::key_sealed.eq(&key.sealed),
                box_url_keys::created_at.eq(diesel::dsl::now),
            ))
            .execute(&mut conn)?;
        Ok(())
    }

    /// The stored key of `id`, if it has one.
    pub fn url_key(&self, id: &BoxId) -> Result<Option<StoredUrlKey>, StoreError> {
        let mut conn = self.conn()?;
        Ok(box_url_keys::table
            .find(id.as_str())
            .select((box_url_keys::key_hash, box_url_keys::key_sealed))
            .first::<StoredUrlKey>(&mut conn)
            .optional()?)
    }

    /// The stored keys of every box that is not over (read at start-up).
    pub fn live_url_keys(&self) -> Result<Vec<(BoxId, StoredUrlKey)>, StoreError> {
        let mut conn = self.conn()?;
        let rows: Vec<(String, Vec<u8>, Vec<u8>)> = box_url_keys::table
            .inner_join(boxes::table)
            .filter(boxes::state.ne_all(["stopped", "failed"]))
            .select((
                box_url_keys::box_id,
                box_url_keys::key_hash,
                box_url_keys::key_sealed,
            ))
            .load(&mut conn)?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, hash, sealed)| {
                Some((BoxId::parse(&id).ok()?, StoredUrlKey { hash, sealed }))
            })
            .collect())
    }
}
