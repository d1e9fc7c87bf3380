//! libvirt hosts as their supervisors last reported them.

use super::schema::{boxes, hosts};
use super::{Store, StoreError};
use crate::ids::ServerId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A host and what runs on it.
#[derive(Debug, Clone)]
pub struct HostRecord {
    pub uri: String,
    pub server_id: Option<ServerId>,
    pub accel: String,
    pub cpus: u32,
    pub memory_mib: u64,
    pub updated_at: DateTime<Utc>,
    /// Boxes on it by state, live states only (`pooled`, `running`, ...).
    pub boxes: Vec<(String, i64)>,
}

impl Store {
    /// This installation's id (`inst_...`), made on first use. It marks the
    /// libvirt domains this installation owns.
    pub fn installation_id(&self) -> Result<String, StoreError> {
        let fresh = format!("inst_{}", crate::ids::random_token(16)?);
        self.meta_set_once("installation_id", &fresh)
    }

    /// Records that `server_id` supervises the host, with its resources.
    pub fn upsert_host(
        &self,
        uri: &str,
        server_id: &str,
        accel: &str,
        cpus: u32,
        memory_mib: u64,
    ) -> Result<(), StoreError> {
        let cpus = i32::try_from(cpus).unwrap_or(i32::MAX);
        let memory = i64::try_from(memory_mib).unwrap_or(i64::MAX);
        diesel::insert_into(hosts::table)
            .values((
                hosts::uri.eq(uri),
                hosts::server_id.eq(server_id),
                hosts::accel.eq(accel),
                hosts::cpus.eq(cpus),
                hosts::memory_mib.eq(memory),
            ))
            .on_conflict(hosts::uri)
            .do_update()
            .set((
                hosts::server_id.eq(server_id),
                hosts::accel.eq(accel),
                hosts::cpus.eq(cpus),
                hosts::memory_mib.eq(memory),
                hosts::updated_at.eq(diesel::dsl::now),
            ))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    pub fn list_hosts(&self) -> Result<Vec<HostRecord>, StoreError> {
        let mut conn = self.conn()?;
        #[derive(Queryable, Selectable)]
        #[diesel(table_name = hosts, check_for_backend(diesel::pg::Pg))]
        struct HostRow {
            uri: String,
            server_id: Option<ServerId>,
            accel: String,
            cpus: i32,
            memory_mib: i64,
            updated_at: DateTime<Utc>,
        }
        let rows: Vec<HostRow> = hosts::table
            .order(hosts::uri)
            .select(HostRow::as_select())
            .load(&mut conn)?;
        let counts: Vec<(String, String, i64)> = boxes::table
            .filter(boxes::state.ne_all(["stopped", "failed"]))
            .group_by((boxes::host_uri, boxes::state))
            .select((boxes::host_uri, boxes::state, diesel::dsl::count_star()))
            .load(&mut conn)?;
        Ok(rows
            .into_iter()
            .map(|h| HostRecord {
                boxes: counts
                    .iter()
                    .filter(|(u, _, _)| *u == h.uri)
                    .map(|(_, s, n)| (s.clone(), *n))
                    .collect(),
                uri: h.uri,
                server_id: h.server_id,
                accel: h.accel,
                cpus: u32::try_from(h.cpus).unwrap_or(0),
                memory_mib: u64::try_from(h.memory_mib).unwrap_or(0),
                updated_at: h.updated_at,
            })
            .collect())
    }
}
