//! `box_egress`: the bytes each box sent through its environment's
//! connections, added to by each replica as it counts them.

use super::schema::box_egress;
use super::{Store, StoreError};
use diesel::prelude::*;

impl Store {
    /// Adds counted bytes to their boxes, all or none. A box that is gone
    /// (its row deleted) is skipped: there is nothing left to meter.
    pub fn add_box_egress(&self, counted: &[(String, u64)]) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            for (box_id, bytes) in counted {
                let bytes = i64::try_from(*bytes).unwrap_or(i64::MAX);
                diesel::sql_query(
                    "INSERT INTO box_egress (box_id, bytes) \
                     SELECT id, $2 FROM boxes WHERE id = $1 \
                     ON CONFLICT (box_id) DO UPDATE \
                     SET bytes = box_egress.bytes + EXCLUDED.bytes, updated_at = now()",
                )
                .bind::<diesel::sql_types::Text, _>(box_id)
                .bind::<diesel::sql_types::BigInt, _>(bytes)
                .execute(conn)?;
            }
            Ok(())
        })
    }

    /// The bytes stored for a box (0 when it never sent any).
    pub fn box_egress(&self, box_id: &str) -> Result<u64, StoreError> {
        let bytes: Option<i64> = box_egress::table
            .find(box_id)
            .select(box_egress::bytes)
            .first(&mut self.conn()?)
            .optional()?;
        Ok(bytes.map_or(0, |b| u64::try_from(b).unwrap_or(0)))
    }
}
