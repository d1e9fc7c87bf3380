//! Box disk keys (`machine::disk_key`): one row per box whose disk is
//! encrypted, the LUKS passphrase sealed by the master key. The row is
//! deleted with the box's end (`transition_box` to stopped or failed) and
//! with a pooled box (`ON DELETE CASCADE`): without it, the disk's file is
//! noise.

use super::schema::box_disk_keys;
use super::{Store, StoreError};
use crate::ids::BoxId;
use diesel::prelude::*;

impl Store {
    /// Records the sealed disk key of `id` (nonce, then ciphertext); a box
    /// has one key for its life, so a second one is refused.
    pub fn insert_disk_key(&self, id: &BoxId, sealed: &[u8]) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        diesel::insert_into(box_disk_keys::table)
            .values((
                box_disk_keys::box_id.eq(id.as_str()),
                box_disk_keys::key_sealed.eq(sealed),
            ))
            .execute(&mut conn)?;
        Ok(())
    }

    /// The sealed disk key of `id`, if its disk is encrypted and it has not
    /// ended.
    pub fn disk_key(&self, id: &BoxId) -> Result<Option<Vec<u8>>, StoreError> {
        let mut conn = self.conn()?;
        Ok(box_disk_keys::table
            .find(id.as_str())
            .select(box_disk_keys::key_sealed)
            .first(&mut conn)
            .optional()?)
    }
}

/// Deletes the disk key of `id` (none is fine), inside the caller's
/// transaction.
pub(super) fn delete_disk_key(
    conn: &mut diesel::PgConnection,
    id: &BoxId,
) -> Result<(), StoreError> {
    diesel::delete(box_disk_keys::table.find(id.as_str())).execute(conn)?;
    Ok(())
}
