//! Environments, their connections (connector token as a SHA-256 only, the
//! address list as JSON, read back checked) and their services' settings
//! (sealed values, variable names in clear). Every call takes the account:
//! another account's environment is simply not found.

use super::schema::{connections, environment_services, environments};
use super::{Store, StoreError};
use crate::ids::{AccountId, ConnectionId, EnvironmentId, ServerId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use psbx_wire::Endpoint;

/// An environment as stored.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = environments, check_for_backend(diesel::pg::Pg))]
pub struct EnvironmentRecord {
    pub id: EnvironmentId,
    pub account_id: AccountId,
    pub name: String,
    pub external_base_url: Option<String>,
    pub aws_role_arn: Option<String>,
    pub aws_region: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A connection as stored (never its token).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionRecord {
    pub id: ConnectionId,
    pub environment_id: EnvironmentId,
    pub name: String,
    /// The addresses it serves, as checked when they were set.
    pub endpoints: Vec<Endpoint>,
    pub created_at: DateTime<Utc>,
    pub token_rotated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = connections, check_for_backend(diesel::pg::Pg))]
struct ConnectionRow {
    id: ConnectionId,
    environment_id: EnvironmentId,
    name: String,
    /// `[{"host": ..., "port": ...}]`
    endpoints: serde_json::Value,
    created_at: DateTime<Utc>,
    token_rotated_at: Option<DateTime<Utc>>,
}

impl TryFrom<ConnectionRow> for ConnectionRecord {
    type Error = StoreError;

    fn try_from(r: ConnectionRow) -> Result<Self, StoreError> {
        let endpoints =
            serde_json::from_value(r.endpoints).map_err(|e| StoreError::Unreadable {
                what: format!("the address list of connection {}", r.id),
                why: e.to_string(),
            })?;
        Ok(Self {
            id: r.id,
            environment_id: r.environment_id,
            name: r.name,
            endpoints,
            created_at: r.created_at,
            token_rotated_at: r.token_rotated_at,
        })
    }
}

/// A service's settings as listed: names only.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = environment_services, check_for_backend(diesel::pg::Pg))]
pub struct ServiceRecord {
    pub name: String,
    /// `["KEY", ...]`
    pub variable_names: serde_json::Value,
    pub source: String,
    pub updated_at: DateTime<Utc>,
    /// Where imported settings came from (`SourceRef`), null for uploads.
    pub source_ref: Option<serde_json::Value>,
}

/// A service's sealed settings, for a box being claimed.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = environment_services, check_for_backend(diesel::pg::Pg))]
pub struct SealedService {
    pub name: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// A service's settings to store: its variable names, the sealed values,
/// and where they came from (`dotenv`, or `ecs` with its `SourceRef`).
#[derive(Debug, Clone, Copy)]
pub struct NewService<'a> {
    pub name: &'a str,
    pub names: &'a serde_json::Value,
    pub nonce: &'a [u8],
    pub ciphertext: &'a [u8],
    pub source: &'a str,
    pub source_ref: Option<&'a serde_json::Value>,
}

/// What `PUT /v1/environments/{env}` may change; `None` leaves a field as is,
/// `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct EnvironmentChange {
    pub external_base_url: Option<Option<String>>,
    pub aws_role_arn: Option<Option<String>>,
    pub aws_region: Option<Option<String>>,
}

/// A connection's token digest: what is stored and looked up.
pub fn token_digest(token: &str) -> Vec<u8> {
    super::credentials::digest(token).to_vec()
}

fn unique_violation(e: &diesel::result::Error) -> bool {
    matches!(
        e,
        diesel::result::Error::DatabaseError(diesel::result::DatabaseErrorKind::UniqueViolation, _)
    )
}

impl Store {
    /// Creates an environment; `None` when the account already has one by that name.
    pub fn insert_environment(
        &self,
        account: &AccountId,
        id: &EnvironmentId,
        name: &str,
    ) -> Result<Option<EnvironmentRecord>, StoreError> {
        let inserted = diesel::insert_into(environments::table)
            .values((
                environments::id.eq(id.as_str()),
                environments::account_id.eq(account.as_str()),
                environments::name.eq(name),
            ))
            .returning(EnvironmentRecord::as_returning())
            .get_result(&mut self.conn()?);
        match inserted {
            Ok(record) => Ok(Some(record)),
            Err(e) if unique_violation(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub fn list_environments(
        &self,
        account: &AccountId,
    ) -> Result<Vec<EnvironmentRecord>, StoreError> {
        Ok(environments::table
            .filter(environments::account_id.eq(account.as_str()))
            .order(environments::name)
            .select(EnvironmentRecord::as_select())
            .load(&mut self.conn()?)?)
    }

    pub fn environment(
        &self,
        account: &AccountId,
        name: &str,
    ) -> Result<Option<EnvironmentRecord>, StoreError> {
        Ok(environments::table
            .filter(environments::account_id.eq(account.as_str()))
            .filter(environments::name.eq(name))
            .select(EnvironmentRecord::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    pub fn update_environment(
        &self,
        account: &AccountId,
        name: &str,
        change: &EnvironmentChange,
    ) -> Result<Option<EnvironmentRecord>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let target = environments::table
                .filter(environments::account_id.eq(account.as_str()))
                .filter(environments::name.eq(name));
            if let Some(v) = &change.external_base_url {
                diesel::update(target)
                    .set(environments::external_base_url.eq(v))
                    .execute(conn)?;
            }
            if let Some(v) = &change.aws_role_arn {
                diesel::update(target)
                    .set(environments::aws_role_arn.eq(v))
                    .execute(conn)?;
            }
            if let Some(v) = &change.aws_region {
                diesel::update(target)
                    .set(environments::aws_region.eq(v))
                    .execute(conn)?;
            }
            Ok(diesel::update(target)
                .set(environments::updated_at.eq(diesel::dsl::now))
                .returning(EnvironmentRecord::as_returning())
                .get_result(conn)
                .optional()?)
        })
    }

    pub fn delete_environment(&self, account: &AccountId, name: &str) -> Result<bool, StoreError> {
        Ok(diesel::delete(
            environments::table
                .filter(environments::account_id.eq(account.as_str()))
                .filter(environments::name.eq(name)),
        )
        .execute(&mut self.conn()?)?
            == 1)
    }

    /// The connections of an environment, by name.
    pub fn connections(&self, env: &EnvironmentId) -> Result<Vec<ConnectionRecord>, StoreError> {
        connections::table
            .filter(connections::environment_id.eq(env))
            .order(connections::name)
            .select(ConnectionRow::as_select())
            .load(&mut self.conn()?)?
            .into_iter()
            .map(ConnectionRecord::try_from)
            .collect()
    }

    /// Adds a connection; `None` when the environment has one by that name.
    /// Refused (`QuotaExceeded`) past the account's connections, checked under
    /// the account lock.
    pub fn insert_connection(
        &self,
        env: &EnvironmentId,
        id: &ConnectionId,
        name: &str,
        token: &str,
    ) -> Result<Option<ConnectionRecord>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            if let Some(account) = super::quota::lock_account_of_environment(conn, env.as_str())? {
                super::quota::check_connections(conn, &self.quotas, &account)?;
            }
            let inserted = conn.transaction(|conn| {
                diesel::insert_into(connections::table)
                    .values((
                        connections::id.eq(id),
                        connections::environment_id.eq(env),
                        connections::name.eq(name),
                        connections::token_sha256.eq(token_digest(token)),
                    ))
                    .returning(ConnectionRow::as_returning())
                    .get_result(conn)
            });
            match inserted {
                Ok(row) => Ok(Some(row.try_into()?)),
                Err(e) if unique_violation(&e) => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
    }

    pub fn set_connection_endpoints(
        &self,
        env: &EnvironmentId,
        id: &ConnectionId,
        endpoints: &[Endpoint],
    ) -> Result<Option<ConnectionRecord>, StoreError> {
        let endpoints = serde_json::to_value(endpoints).map_err(|e| StoreError::Unreadable {
            what: format!("the address list for connection {id}"),
            why: e.to_string(),
        })?;
        diesel::update(
            connections::table
                .filter(connections::environment_id.eq(env))
                .filter(connections::id.eq(id)),
        )
        .set(connections::endpoints.eq(endpoints))
        .returning(ConnectionRow::as_returning())
        .get_result(&mut self.conn()?)
        .optional()?
        .map(ConnectionRecord::try_from)
        .transpose()
    }

    /// Replaces a connection's token: the old one stops working at once.
    pub fn rotate_connection_token(
        &self,
        env: &EnvironmentId,
        id: &ConnectionId,
        token: &str,
    ) -> Result<Option<ConnectionRecord>, StoreError> {
        diesel::update(
            connections::table
                .filter(connections::environment_id.eq(env))
                .filter(connections::id.eq(id)),
        )
        .set((
            connections::token_sha256.eq(token_digest(token)),
            connections::token_rotated_at.eq(diesel::dsl::now),
        ))
        .returning(ConnectionRow::as_returning())
        .get_result(&mut self.conn()?)
        .optional()?
        .map(ConnectionRecord::try_from)
        .transpose()
    }

    pub fn delete_connection(
        &self,
        env: &EnvironmentId,
        id: &ConnectionId,
    ) -> Result<bool, StoreError> {
        Ok(diesel::delete(
            connections::table
                .filter(connections::environment_id.eq(env))
                .filter(connections::id.eq(id)),
        )
        .execute(&mut self.conn()?)?
            == 1)
    }

    /// The connection (and its environment) a connector token belongs to.
    pub fn connection_by_token(
        &self,
        token: &str,
    ) -> Result<Option<(ConnectionRecord, EnvironmentRecord)>, StoreError> {
        let found: Option<(ConnectionRow, EnvironmentRecord)> = connections::table
            .inner_join(environments::table)
            .filter(connections::token_sha256.eq(token_digest(token)))
            .select((ConnectionRow::as_select(), EnvironmentRecord::as_select()))
            .first(&mut self.conn()?)
            .optional()?;
        found.map(|(c, e)| Ok((c.try_into()?, e))).transpose()
    }

    /// Stores (or replaces) a service's settings; true when it is new. Refused
    /// (`QuotaExceeded`) past the account's stored bytes.
    pub fn put_service(
        &self,
        env: &EnvironmentId,
        service: &NewService<'_>,
    ) -> Result<(bool, ServiceRecord), StoreError> {
        let NewService {
            name,
            names,
            nonce,
            ciphertext,
            source,
            source_ref,
        } = *service;
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let existed = diesel::select(diesel::dsl::exists(
                environment_services::table.find((env, name)),
            ))
            .get_result::<bool>(conn)?;
            if let Some(account) = super::quota::lock_account_of_environment(conn, env.as_str())? {
                super::quota::check_stored_bytes(
                    conn,
                    &self.quotas,
                    &account,
                    None,
                    Some((env.as_str(), name)),
                    ciphertext.len(),
                )?;
            }
            let record = diesel::insert_into(environment_services::table)
                .values((
                    environment_services::environment_id.eq(env),
                    environment_services::name.eq(name),
                    environment_services::variable_names.eq(names),
                    environment_services::nonce.eq(nonce),
                    environment_services::ciphertext.eq(ciphertext),
                    environment_services::source.eq(source),
                    environment_services::source_ref.eq(source_ref),
                ))
                .on_conflict((
                    environment_services::environment_id,
                    environment_services::name,
                ))
                .do_update()
                .set((
                    environment_services::variable_names.eq(names),
                    environment_services::nonce.eq(nonce),
                    environment_services::ciphertext.eq(ciphertext),
                    environment_services::source.eq(source),
                    environment_services::source_ref.eq(source_ref),
                    environment_services::updated_at.eq(diesel::dsl::now),
                ))
                .returning(ServiceRecord::as_returning())
                .get_result(conn)?;
            Ok((!existed, record))
        })
    }

    pub fn services(&self, env: &EnvironmentId) -> Result<Vec<ServiceRecord>, StoreError> {
        Ok(environment_services::table
            .filter(environment_services::environment_id.eq(env))
            .order(environment_services::name)
            .select(ServiceRecord::as_select())
            .load(&mut self.conn()?)?)
    }

    pub fn service(
        &self,
        env: &EnvironmentId,
        name: &str,
    ) -> Result<Option<ServiceRecord>, StoreError> {
        Ok(environment_services::table
            .find((env, name))
            .select(ServiceRecord::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    pub fn sealed_services(&self, env: &EnvironmentId) -> Result<Vec<SealedService>, StoreError> {
        Ok(environment_services::table
            .filter(environment_services::environment_id.eq(env))
            .order(environment_services::name)
            .select(SealedService::as_select())
            .load(&mut self.conn()?)?)
    }

    pub fn delete_service(&self, env: &EnvironmentId, name: &str) -> Result<bool, StoreError> {
        Ok(
            diesel::delete(environment_services::table.find((env, name)))
                .execute(&mut self.conn()?)?
                == 1,
        )
    }
}

impl Store {
    /// Records a connector session this replica holds.
    pub fn insert_connector_session(
        &self,
        id: &str,
        connection: &ConnectionId,
        server: &ServerId,
        version: &str,
    ) -> Result<(), StoreError> {
        use super::schema::connector_sessions as cs;
        diesel::insert_into(cs::table)
            .values((
                cs::id.eq(id),
                cs::connection_id.eq(connection),
                cs::server_id.eq(server),
                cs::connector_version.eq(version),
            ))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// A connector session was heard from (its round trip, if measured).
    pub fn touch_connector_session(&self, id: &str, rtt_ms: Option<f64>) -> Result<(), StoreError> {
        use super::schema::connector_sessions as cs;
        diesel::update(cs::table.find(id))
            .set((cs::last_seen_at.eq(diesel::dsl::now), cs::rtt_ms.eq(rtt_ms)))
            .execute(&mut self.conn()?)?;
        Ok(())
    }

    pub fn delete_connector_session(&self, id: &str) -> Result<(), StoreError> {
        use super::schema::connector_sessions as cs;
        diesel::delete(cs::table.find(id)).execute(&mut self.conn()?)?;
        Ok(())
    }

    /// Forgets the sessions of replicas that stopped or stopped heartbeating.
    pub fn prune_connector_sessions(&self) -> Result<usize, StoreError> {
        Ok(diesel::sql_query(
            "DELETE FROM connector_sessions WHERE server_id NOT IN \
             (SELECT id FROM servers WHERE stopped_at IS NULL AND heartbeat_at > now() - interval '2 minutes')",
        )
        .execute(&mut self.conn()?)?)
    }
}
