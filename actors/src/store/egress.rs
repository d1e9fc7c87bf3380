//! `box_egress`: the bytes each box sent through its environment's
//! connections, added to by each replica as it counts them, and the bytes it
//! sent to the internet, from the host's per-uid counters (`boxnet::meter`).

use super::schema::box_egress;
use super::{Store, StoreError};
use crate::ids::BoxId;
use diesel::prelude::*;

impl Store {
    /// Adds counted bytes to their boxes, all or none. A box that is gone
    /// (its row deleted) is skipped: there is nothing left to meter.
    pub fn add_box_egress(&self, counted: &[(BoxId, u64)]) -> Result<(), StoreError> {
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
                .bind::<diesel::sql_types::Text, _>(box_id.as_str())
                .bind::<diesel::sql_types::BigInt, _>(bytes)
                .execute(conn)?;
            }
            Ok(())
        })
    }

    /// Stores the host's counter figures of boxes' internet traffic (box,
    /// bytes since the counter began), all or none: what each adds over the
    /// figure stored last (all of it when the counter began again).
    pub fn add_internet_egress(&self, counted: &[(BoxId, u64)]) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            for (box_id, counter) in counted {
                let counter = i64::try_from(*counter).unwrap_or(i64::MAX);
                diesel::sql_query(
                    "INSERT INTO box_egress (box_id, internet_bytes, internet_counted) \
                     SELECT id, $2, $2 FROM boxes WHERE id = $1 \
                     ON CONFLICT (box_id) DO UPDATE \
                     SET internet_bytes = box_egress.internet_bytes + CASE \
                         WHEN EXCLUDED.internet_counted >= box_egress.internet_counted \
                         THEN EXCLUDED.internet_counted - box_egress.internet_counted \
                         ELSE EXCLUDED.internet_counted END, \
                         internet_counted = EXCLUDED.internet_counted, updated_at = now() \
                     WHERE box_egress.internet_counted <> EXCLUDED.internet_counted",
                )
                .bind::<diesel::sql_types::Text, _>(box_id.as_str())
                .bind::<diesel::sql_types::BigInt, _>(counter)
                .execute(conn)?;
            }
            Ok(())
        })
    }

    /// The bytes a box sent to the internet (0 when it never sent any).
    pub fn box_internet_egress(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        let bytes: Option<i64> = box_egress::table
            .find(box_id.as_str())
            .select(box_egress::internet_bytes)
            .first(&mut self.conn()?)
            .optional()?;
        Ok(bytes.map_or(0, |b| u64::try_from(b).unwrap_or(0)))
    }

    /// The bytes stored for a box (0 when it never sent any).
    pub fn box_egress(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        let bytes: Option<i64> = box_egress::table
            .find(box_id.as_str())
            .select(box_egress::bytes)
            .first(&mut self.conn()?)
            .optional()?;
        Ok(bytes.map_or(0, |b| u64::try_from(b).unwrap_or(0)))
    }
}
