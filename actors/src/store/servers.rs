//! Server replicas (nodes): each running `psbx serve` registers a row with the
//! address its peers reach it at, heartbeats it, and marks it stopped on a
//! clean shutdown.

use super::schema::servers;
use super::{Store, StoreError};
use crate::ids::ServerId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A replica as recorded.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = servers, check_for_backend(diesel::pg::Pg))]
pub struct Server {
    pub id: ServerId,
    pub hostname: String,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
    /// Where other nodes reach its peer listener (`cluster.advertise`).
    pub advertise: Option<String>,
}

impl Store {
    /// Records a replica that has just started.
    pub fn register_server(&self, hostname: &str, version: &str) -> Result<Server, StoreError> {
        let id = ServerId::generate()?;
        Ok(diesel::insert_into(servers::table)
            .values((
                servers::id.eq(id.as_str()),
                servers::hostname.eq(hostname),
                servers::version.eq(version),
            ))
            .returning(Server::as_returning())
            .get_result(&mut self.conn()?)?)
    }

    /// Records where other nodes reach this one's peer listener.
    pub fn advertise_server(&self, id: &ServerId, advertise: &str) -> Result<(), StoreError> {
        diesel::update(servers::table.find(id.as_str()))
            .set(servers::advertise.eq(advertise))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    pub fn heartbeat_server(&self, id: &ServerId) -> Result<(), StoreError> {
        diesel::update(servers::table.find(id.as_str()))
            .set(servers::heartbeat_at.eq(diesel::dsl::now))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    pub fn stop_server(&self, id: &ServerId) -> Result<(), StoreError> {
        diesel::update(servers::table.find(id.as_str()))
            .set(servers::stopped_at.eq(diesel::dsl::now))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// Every replica that has not stopped cleanly, newest first.
    pub fn live_servers(&self) -> Result<Vec<Server>, StoreError> {
        Ok(servers::table
            .filter(servers::stopped_at.is_null())
            .order(servers::started_at.desc())
            .select(Server::as_select())
            .load(&mut self.conn()?)?
            .into_iter()
            .collect())
    }
}
