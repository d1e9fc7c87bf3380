//! libvirt hosts: each named, leased by the node supervising it, and
//! publishing what it has room for (issue 33, DESIGN.md §8).
//!
//! The lease is PostgreSQL's: a node takes a host's row ([`Store::take_host`])
//! when nobody holds it or the holder's lease has run out, renews it with
//! its heartbeat ([`Store::renew_host`]) and gives it back when it stops
//! cleanly ([`Store::release_host`]). Times are the database's `now()`, so
//! the nodes' clocks never have to agree. Placement reads the figures each
//! renewal publishes and takes its share of them in one statement
//! ([`Store::place_box`], placements taking turns), so two nodes placing at
//! once never both count the same room.

use super::schema::{boxes, hosts, servers};
use super::{Store, StoreError};
use crate::ids::{BoxId, ServerId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// A host and what runs on it.
#[derive(Debug, Clone)]
pub struct HostRecord {
    pub name: String,
    pub uri: String,
    /// The node holding its lease (or the last one that did).
    pub server_id: Option<ServerId>,
    /// That node's machine name and peer address.
    pub node_hostname: Option<String>,
    pub advertise: Option<String>,
    pub lease_epoch: i64,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Whether the lease is held now (by the database's clock).
    pub leased: bool,
    pub draining: bool,
    pub accel: String,
    pub cpus: u32,
    pub memory_mib: u64,
    pub free_cpus: f64,
    pub free_memory_mib: u64,
    /// Clean boxes in its pool, by size.
    pub pool: BTreeMap<u32, u64>,
    pub updated_at: DateTime<Utc>,
    /// Boxes on it by state, live states only (`pooled`, `running`, ...).
    pub boxes: Vec<(String, i64)>,
}

/// What a node asks for when it takes a host.
#[derive(Debug, Clone)]
pub struct HostClaim<'a> {
    pub name: &'a str,
    pub uri: &'a str,
    pub server_id: &'a ServerId,
    /// The node's key (`<data_dir>/node.key`): a holder with the same key is
    /// this node's previous life (the data directory's lock says no other
    /// process uses it), whose lease is taken over at once.
    pub node_key: &'a str,
    pub accel: &'a str,
    pub cpus: u32,
    pub memory_mib: u64,
    pub lease: Duration,
}

/// A host's lease, as taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenHost {
    pub epoch: i64,
    /// The mark on the host's domains, its nftables table and uid range.
    pub owner: String,
}

/// Why a host could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHeld {
    pub server_id: Option<ServerId>,
    pub hostname: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a host's node publishes at each renewal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Room {
    pub free_cpus: f64,
    pub free_memory_mib: u64,
    /// Clean boxes in the pool, by size.
    pub pool: BTreeMap<u32, u64>,
}

/// Where a box is, for the node that received a call naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxPlace {
    pub host: String,
    /// The node holding the host's lease now; `None` when nobody does (its
    /// node stopped, or died and its lease ran out).
    pub holder: Option<(ServerId, Option<String>)>,
}

/// A host chosen for a new box: its name and the node that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub host: String,
    pub server_id: ServerId,
    pub advertise: Option<String>,
}

/// The advisory lock placements take turns on ("psbxplac").
const PLACEMENT_LOCK: i64 = 0x7073_6278_706c_6163;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Store {
    /// This installation's id (`inst_...`), made on first use. Its first
    /// host marks its libvirt domains with it (later hosts get marks of
    /// their own: [`Store::take_host`]).
    pub fn installation_id(&self) -> Result<String, StoreError> {
        let fresh = format!("inst_{}", crate::ids::random_token(16)?);
        self.meta_set_once("installation_id", &fresh)
    }

    /// Takes the lease of host `claim.name` for `claim.server_id` when
    /// nobody holds it, the holder's lease has run out, or the holder is
    /// this node; records its resources. A host recorded before hosts had
    /// names (named by its URI) takes this name first. A new host's mark is
    /// the installation's id when no host has it yet (the one-node case,
    /// and domains made before), else a fresh one.
    pub fn take_host(
        &self,
        claim: &HostClaim<'_>,
    ) -> Result<Result<TakenHost, HostHeld>, StoreError> {
        let installation = self.installation_id()?;
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let exists: i64 = hosts::table
                .filter(hosts::name.eq(claim.name))
                .count()
                .get_result(conn)?;
            if exists == 0 {
                let legacy: Option<String> = hosts::table
                    .filter(hosts::name.eq(claim.uri).and(hosts::uri.eq(claim.uri)))
                    .select(hosts::name)
                    .for_update()
                    .first(conn)
                    .optional()?;
                if legacy.is_some() {
                    diesel::update(hosts::table.find(claim.uri))
                        .set(hosts::name.eq(claim.name))
                        .execute(conn)?;
                    diesel::update(boxes::table.filter(boxes::host.eq(claim.uri)))
                        .set(boxes::host.eq(claim.name))
                        .execute(conn)?;
                } else {
                    let taken: i64 = hosts::table
                        .filter(hosts::owner.eq(&installation))
                        .count()
                        .get_result(conn)?;
                    let owner = if taken == 0 {
                        installation.clone()
                    } else {
                        format!("{installation}h{}", crate::ids::random_token(6)?)
                    };
                    diesel::insert_into(hosts::table)
                        .values((
                            hosts::name.eq(claim.name),
                            hosts::uri.eq(claim.uri),
                            hosts::owner.eq(owner),
                            hosts::accel.eq(claim.accel),
                            hosts::cpus.eq(i32::try_from(claim.cpus).unwrap_or(i32::MAX)),
                            hosts::memory_mib
                                .eq(i64::try_from(claim.memory_mib).unwrap_or(i64::MAX)),
                        ))
                        .execute(conn)?;
                }
            }
            let taken: Option<(i64, String)> = diesel::sql_query(
                "UPDATE hosts SET server_id = $2, lease_epoch = lease_epoch + 1, \
                 lease_expires_at = now() + make_interval(secs => $3), uri = $4, accel = $5, \
                 cpus = $6, memory_mib = $7, holder_key = $8, updated_at = now() \
                 WHERE name = $1 AND (server_id IS NULL OR server_id = $2 OR holder_key = $8 \
                   OR lease_expires_at IS NULL OR lease_expires_at < now()) \
                 RETURNING lease_epoch, owner",
            )
            .bind::<diesel::sql_types::Text, _>(claim.name)
            .bind::<diesel::sql_types::Text, _>(claim.server_id.as_str())
            .bind::<diesel::sql_types::Double, _>(secs(claim.lease))
            .bind::<diesel::sql_types::Text, _>(claim.uri)
            .bind::<diesel::sql_types::Text, _>(claim.accel)
            .bind::<diesel::sql_types::Integer, _>(i32::try_from(claim.cpus).unwrap_or(i32::MAX))
            .bind::<diesel::sql_types::BigInt, _>(
                i64::try_from(claim.memory_mib).unwrap_or(i64::MAX),
            )
            .bind::<diesel::sql_types::Text, _>(claim.node_key)
            .get_result::<LeaseRow>(conn)
            .optional()?
            .map(|r| (r.lease_epoch, r.owner));
            if let Some((epoch, owner)) = taken {
                return Ok(Ok(TakenHost { epoch, owner }));
            }
            let (server_id, expires_at): (Option<ServerId>, Option<DateTime<Utc>>) = hosts::table
                .find(claim.name)
                .select((hosts::server_id, hosts::lease_expires_at))
                .first(conn)?;
            let hostname = match &server_id {
                Some(id) => servers::table
                    .find(id.as_str())
                    .select(servers::hostname)
                    .first(conn)
                    .optional()?,
                None => None,
            };
            Ok(Err(HostHeld {
                server_id,
                hostname,
                expires_at,
            }))
        })
    }

    /// Renews the lease `epoch` of host `name` held by `server_id` for
    /// `lease` more, and publishes its room; false when the lease is no
    /// longer this node's (another node took the host after it ran out, or
    /// this node gave it back: a renewal still in flight at a clean stop
    /// does not take it again).
    pub fn renew_host(
        &self,
        name: &str,
        server_id: &ServerId,
        epoch: i64,
        lease: Duration,
        room: &Room,
    ) -> Result<bool, StoreError> {
        let pool = serde_json::to_value(
            room.pool
                .iter()
                .map(|(size, n)| (size.to_string(), *n))
                .collect::<BTreeMap<String, u64>>(),
        )
        .unwrap_or_default();
        let n = diesel::sql_query(
            "UPDATE hosts SET lease_expires_at = now() + make_interval(secs => $4), \
             free_cpus = $5, free_memory_mib = $6, pool = $7, updated_at = now() \
             WHERE name = $1 AND server_id = $2 AND lease_epoch = $3 \
               AND lease_expires_at IS NOT NULL",
        )
        .bind::<diesel::sql_types::Text, _>(name)
        .bind::<diesel::sql_types::Text, _>(server_id.as_str())
        .bind::<diesel::sql_types::BigInt, _>(epoch)
        .bind::<diesel::sql_types::Double, _>(secs(lease))
        .bind::<diesel::sql_types::Double, _>(room.free_cpus)
        .bind::<diesel::sql_types::BigInt, _>(
            i64::try_from(room.free_memory_mib).unwrap_or(i64::MAX),
        )
        .bind::<diesel::sql_types::Jsonb, _>(pool)
        .execute(&mut self.conn()?)?;
        Ok(n == 1)
    }

    /// Gives the lease back (a clean stop): other nodes answer for the
    /// host's boxes with `host_unavailable` until a node takes it again.
    pub fn release_host(
        &self,
        name: &str,
        server_id: &ServerId,
        epoch: i64,
    ) -> Result<(), StoreError> {
        diesel::update(
            hosts::table
                .filter(hosts::name.eq(name))
                .filter(hosts::server_id.eq(server_id.as_str()))
                .filter(hosts::lease_epoch.eq(epoch)),
        )
        // No room either: a stop's last word, which no renewal in flight
        // can overwrite (a released lease is not renewed).
        .set((
            hosts::lease_expires_at.eq(None::<DateTime<Utc>>),
            hosts::free_cpus.eq(0.0),
            hosts::free_memory_mib.eq(0),
            hosts::pool.eq(serde_json::json!({})),
        ))
        .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// Marks host `name` draining (or not): no placement there.
    pub fn set_host_draining(&self, name: &str, draining: bool) -> Result<bool, StoreError> {
        Ok(diesel::update(hosts::table.find(name))
            .set(hosts::draining.eq(draining))
            .execute(&mut self.conn()?)?
            == 1)
    }

    /// Where box `id` lives: its host and that host's lease holder now.
    /// `None` when the box is over or unknown (the node asked answers from
    /// the row, as for a box of its own).
    pub fn box_place(&self, id: &BoxId) -> Result<Option<BoxPlace>, StoreError> {
        let row: Option<PlaceRow> = diesel::sql_query(
            "SELECT b.host, h.server_id, s.advertise, \
                    (h.lease_expires_at IS NOT NULL AND h.lease_expires_at > now()) AS leased \
             FROM boxes b LEFT JOIN hosts h ON h.name = b.host \
             LEFT JOIN servers s ON s.id = h.server_id \
             WHERE b.id = $1 AND b.state NOT IN ('stopped', 'failed')",
        )
        .bind::<diesel::sql_types::Text, _>(id.as_str())
        .get_result(&mut self.conn()?)
        .optional()?;
        Ok(row.map(|r| BoxPlace {
            host: r.host,
            holder: match (r.leased, r.server_id) {
                (true, Some(id)) => ServerId::parse(&id).ok().map(|id| (id, r.advertise)),
                _ => None,
            },
        }))
    }

    /// Chooses a host for a box of `size` (`vcpus`, `memory_mib`) and takes
    /// its share of the host's published room, in one statement: among the
    /// leased hosts that are not draining and not in `except` (tried
    /// already), first one with a clean pooled box of that size (the start
    /// is a resume, and takes one of its pool), then the one with the most
    /// free memory that fits the box cold, then by name. `None`: no host
    /// has room. Placements take turns, so two never count the same room.
    pub fn place_box(
        &self,
        size: u32,
        vcpus: u32,
        memory_mib: u64,
        except: &[String],
    ) -> Result<Option<Placed>, StoreError> {
        // A claim from a pool takes a clean box the host holds already; a
        // cold start takes its vCPUs and memory. Placements take turns (a
        // transaction's advisory lock, held for one statement): row locks
        // alone would let a placement that waited on a row find it full and
        // give up while another host had room.
        let mut conn = self.conn()?;
        let row: Option<PlacedRow> = conn.transaction(|conn| {
            diesel::sql_query(format!("SELECT pg_advisory_xact_lock({PLACEMENT_LOCK})"))
                .execute(conn)?;
            diesel::sql_query(
                "WITH pick AS ( \
                 SELECT name, COALESCE((pool->>$1)::bigint, 0) > 0 AS pooled FROM hosts \
                 WHERE lease_expires_at > now() AND server_id IS NOT NULL AND NOT draining \
                   AND NOT (name = ANY($4)) \
                   AND (COALESCE((pool->>$1)::bigint, 0) > 0 \
                        OR (free_cpus >= $2 AND free_memory_mib >= $3)) \
                 ORDER BY 2 DESC, free_memory_mib DESC, name \
                 LIMIT 1) \
             UPDATE hosts h SET \
                 free_cpus = h.free_cpus - CASE WHEN pick.pooled THEN 0 ELSE $2 END, \
                 free_memory_mib = h.free_memory_mib - CASE WHEN pick.pooled THEN 0 ELSE $3 END, \
                 pool = CASE WHEN pick.pooled \
                        THEN jsonb_set(h.pool, ARRAY[$1], to_jsonb((h.pool->>$1)::bigint - 1)) \
                        ELSE h.pool END \
             FROM pick WHERE h.name = pick.name \
             RETURNING h.name, h.server_id, \
                 (SELECT advertise FROM servers s WHERE s.id = h.server_id) AS advertise",
            )
            .bind::<diesel::sql_types::Text, _>(size.to_string())
            .bind::<diesel::sql_types::Double, _>(f64::from(vcpus))
            .bind::<diesel::sql_types::BigInt, _>(i64::try_from(memory_mib).unwrap_or(i64::MAX))
            .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(except)
            .get_result(conn)
            .optional()
        })?;
        Ok(row.and_then(|r| {
            Some(Placed {
                host: r.name,
                server_id: ServerId::parse(&r.server_id?).ok()?,
                advertise: r.advertise,
            })
        }))
    }

    /// Whether any host takes placements now (leased by a live node, not
    /// draining): when [`Store::place_box`] found none with room, whether
    /// that is because every such host is full.
    pub fn hosts_open(&self) -> Result<bool, StoreError> {
        Ok(diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(
            "EXISTS (SELECT 1 FROM hosts WHERE lease_expires_at > now() \
             AND server_id IS NOT NULL AND NOT draining)",
        ))
        .get_result(&mut self.conn()?)?)
    }

    pub fn list_hosts(&self) -> Result<Vec<HostRecord>, StoreError> {
        let mut conn = self.conn()?;
        let rows: Vec<HostListRow> = diesel::sql_query(
            "SELECT h.name, h.uri, h.server_id, s.hostname, s.advertise, h.lease_epoch, \
                    h.lease_expires_at, \
                    (h.lease_expires_at IS NOT NULL AND h.lease_expires_at > now()) AS leased, \
                    h.draining, h.accel, h.cpus, h.memory_mib, h.free_cpus, h.free_memory_mib, \
                    h.pool, h.updated_at \
             FROM hosts h LEFT JOIN servers s ON s.id = h.server_id ORDER BY h.name",
        )
        .load(&mut conn)?;
        let counts: Vec<(String, String, i64)> = boxes::table
            .filter(boxes::state.ne_all(["stopped", "failed"]))
            .group_by((boxes::host, boxes::state))
            .select((boxes::host, boxes::state, diesel::dsl::count_star()))
            .load(&mut conn)?;
        Ok(rows
            .into_iter()
            .map(|h| HostRecord {
                boxes: counts
                    .iter()
                    .filter(|(n, _, _)| *n == h.name)
                    .map(|(_, s, n)| (s.clone(), *n))
                    .collect(),
                pool: h
                    .pool
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_u64()?)))
                            .collect()
                    })
                    .unwrap_or_default(),
                name: h.name,
                uri: h.uri,
                server_id: h.server_id.and_then(|id| ServerId::parse(&id).ok()),
                node_hostname: h.hostname,
                advertise: h.advertise,
                lease_epoch: h.lease_epoch,
                lease_expires_at: h.lease_expires_at,
                leased: h.leased,
                draining: h.draining,
                accel: h.accel,
                cpus: u32::try_from(h.cpus).unwrap_or(0),
                memory_mib: u64::try_from(h.memory_mib).unwrap_or(0),
                free_cpus: h.free_cpus,
                free_memory_mib: u64::try_from(h.free_memory_mib).unwrap_or(0),
                updated_at: h.updated_at,
            })
            .collect())
    }
}

#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    lease_epoch: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    owner: String,
}

#[derive(QueryableByName)]
struct PlaceRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    host: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    server_id: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    advertise: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    leased: bool,
}

#[derive(QueryableByName)]
struct PlacedRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    server_id: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    advertise: Option<String>,
}

#[derive(QueryableByName)]
struct HostListRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    uri: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    server_id: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    hostname: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    advertise: Option<String>,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    lease_epoch: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    lease_expires_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    leased: bool,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    draining: bool,
    #[diesel(sql_type = diesel::sql_types::Text)]
    accel: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    cpus: i32,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    memory_mib: i64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    free_cpus: f64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    free_memory_mib: i64,
    #[diesel(sql_type = diesel::sql_types::Jsonb)]
    pool: serde_json::Value,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    updated_at: DateTime<Utc>,
}
