//! The connector sessions this replica holds, by connection, and the path of
//! a box's stream to the user's network (environments.txt, "How a box
//! reaches an address"; DESIGN.md §3, §5, §8).
//!
//! [`Hub`] keeps, per connection, the wire sessions of every connector copy
//! connected here, the box streams open through each environment address,
//! and each environment's address table ([`tables`]: its connections, read
//! again after [`tables::ADDRESS_TABLE_TTL`] or at once when this replica
//! changes them). It is shared state behind a mutex rather than an actor
//! per environment: every operation is a short lookup or insertion with no
//! ordering between messages to keep, and routing a stream must not wait
//! behind a mailbox.
//! (Sessions on other replicas and the replica-to-replica path are not here
//! yet; the choice of a session is made in [`Hub::open`] alone.)
//!
//! [`Router`] answers a box's `env:<host>:<port>` stream: the connection that
//! lists that exact address now (by name, first), a session of it, and a
//! stream to the connector; 403 when no connection lists it, 503 when none
//! of its connectors is online (naming it), the connector's own code (502)
//! when it could not reach the target. [`egress`] counts what boxes send.

pub mod egress;
pub mod limits;
pub mod route;
pub mod session;
pub mod tables;

pub use limits::{Full, HubLimits};
pub use route::Router;
pub use tables::AddressTables;

use crate::ids::{AccountId, ConnectionId, EnvironmentId};
use chrono::{DateTime, Utc};
use psbx_wire::Endpoint;
pub use psbx_wire::frame::Refusal;
use psbx_wire::frame::code;
use psbx_wire::mux::{OpenError, Session, Stream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A connection's live state, as reads show it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionStatus {
    pub online: bool,
    pub sessions: u32,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub connector_version: Option<String>,
    pub rtt_ms: Option<f64>,
}

struct Entry {
    id: u64,
    session: Session,
    version: String,
}

/// A box stream open through an address, so that it can be closed when the
/// address stops being listed.
struct OpenStream {
    id: u64,
    reset: tokio::sync::oneshot::Sender<&'static str>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Connection id → the sessions of its connectors here.
    sessions: HashMap<ConnectionId, Vec<Entry>>,
    /// Connection id → when a connector of it was last connected here.
    last_seen: HashMap<ConnectionId, DateTime<Utc>>,
    /// (environment id, address) → box streams open through it.
    streams: HashMap<(EnvironmentId, Endpoint), Vec<OpenStream>>,
    /// Sessions held (upgraded, registered or not yet) per connection and
    /// per account, against [`HubLimits`].
    held: limits::Held,
    /// How many kicks there were, and the count at each connection's last:
    /// a session authenticated before its connection's last kick is refused
    /// at registration (its token may be the one rotated away).
    kicks: u64,
    kicked_at: HashMap<ConnectionId, u64>,
}

/// Cheap to clone; one per replica.
#[derive(Clone, Default)]
pub struct Hub {
    state: Arc<Mutex<State>>,
    tables: Arc<AddressTables>,
    egress: egress::Egress,
    limits: HubLimits,
}

/// A connector session's place in the hub, taken before its WebSocket
/// upgrade (so sessions still in their handshake count against the limits)
/// and given back when dropped; once registered, its session is used for
/// box streams until then.
pub struct Slot {
    hub: Hub,
    account: AccountId,
    connection: ConnectionId,
    /// [`Hub::epoch`] before the connector's token was checked.
    epoch: u64,
    registered: Option<u64>,
}

/// A session whose connection was kicked (token rotated, connection
/// deleted) after its token was checked: it is not registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the connection's token was rotated or the connection deleted after this session's token was checked"
)]
pub struct Kicked;

impl Slot {
    /// Adds the connector's session to its connection, unless the
    /// connection was kicked since the token was checked (checked under the
    /// hub's lock, so a kick is either seen here or closes the session).
    pub fn register(&mut self, session: Session, version: &str) -> Result<(), Kicked> {
        let mut state = self.hub.lock();
        if state.kicked_at.get(&self.connection).copied().unwrap_or(0) > self.epoch {
            return Err(Kicked);
        }
        state.next += 1;
        let id = state.next;
        state
            .sessions
            .entry(self.connection.clone())
            .or_default()
            .push(Entry {
                id,
                session,
                version: version.to_owned(),
            });
        state.last_seen.insert(self.connection.clone(), Utc::now());
        self.registered = Some(id);
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        state.held.release(&self.account, &self.connection);
        if let Some(id) = self.registered {
            if let Some(list) = state.sessions.get_mut(&self.connection) {
                list.retain(|e| e.id != id);
                if list.is_empty() {
                    state.sessions.remove(&self.connection);
                }
            }
            state.last_seen.insert(self.connection.clone(), Utc::now());
        }
    }
}

impl Hub {
    /// A hub with these limits on connector sessions.
    pub fn with_limits(limits: HubLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn limits(&self) -> HubLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kick count now: read it before checking a connector's token and
    /// give it to [`Hub::reserve`].
    pub fn epoch(&self) -> u64 {
        self.lock().kicks
    }

    /// Takes a place for one more session of `connection` (of `account`),
    /// or says which limit is reached.
    pub fn reserve(
        &self,
        account: &AccountId,
        connection: &ConnectionId,
        epoch: u64,
    ) -> Result<Slot, Full> {
        self.lock().held.take(account, connection, &self.limits)?;
        Ok(Slot {
            hub: self.clone(),
            account: account.clone(),
            connection: connection.clone(),
            epoch,
            registered: None,
        })
    }

    /// Closes every session of a connection (its token was rotated, or it
    /// was deleted): the connectors are disconnected at once, and sessions
    /// whose token was checked before this are not registered after it.
    pub fn kick(&self, connection: &ConnectionId) {
        let sessions: Vec<Session> = {
            let mut state = self.lock();
            state.kicks += 1;
            let kicks = state.kicks;
            state.kicked_at.insert(connection.clone(), kicks);
            state
                .sessions
                .remove(connection)
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.session)
                .collect()
        };
        for session in sessions {
            session.goaway("the connection's token was rotated or the connection deleted");
            session.close();
        }
    }

    /// Sends every connector session GOAWAY and closes it (this replica is
    /// stopping): connectors open new sessions elsewhere.
    pub fn close_all(&self, reason: &str) {
        let sessions: Vec<Session> = self
            .lock()
            .sessions
            .drain()
            .flat_map(|(_, list)| list.into_iter().map(|e| e.session))
            .collect();
        for session in sessions {
            session.goaway(reason);
            session.close();
        }
    }

    /// How a connection's connectors are, here.
    pub fn status(&self, connection: &ConnectionId) -> ConnectionStatus {
        let state = self.lock();
        let live: Vec<&Entry> = state
            .sessions
            .get(connection)
            .map(|l| l.iter().filter(|e| !e.session.is_closed()).collect())
            .unwrap_or_default();
        let rtts: Vec<f64> = live
            .iter()
            .filter_map(|e| e.session.stats().rtt)
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        ConnectionStatus {
            online: !live.is_empty(),
            sessions: u32::try_from(live.len()).unwrap_or(u32::MAX),
            last_seen_at: if live.is_empty() {
                state.last_seen.get(connection).copied()
            } else {
                Some(Utc::now())
            },
            connector_version: live.first().map(|e| e.version.clone()),
            rtt_ms: rtts.into_iter().reduce(f64::min),
        }
    }

    /// Opens a stream to `target` through one of the connection's sessions:
    /// the least busy one that is not draining, else a draining one.
    pub async fn open(
        &self,
        connection: &ConnectionId,
        name: &str,
        target: &str,
    ) -> Result<Stream, Refusal> {
        let candidates: Vec<Session> = {
            let state = self.lock();
            let mut live: Vec<&Entry> = state
                .sessions
                .get(connection)
                .map(|l| l.iter().filter(|e| !e.session.is_closed()).collect())
                .unwrap_or_default();
            live.sort_by_key(|e| (e.session.peer_goaway().is_some(), e.session.stats().streams));
            live.into_iter().map(|e| e.session.clone()).collect()
        };
        let offline = || {
            Refusal::new(
                code::UNAVAILABLE,
                format!("the connector \"{name}\" of this environment is offline"),
            )
        };
        if candidates.is_empty() {
            return Err(offline());
        }
        let mut full = 0;
        for session in candidates {
            match session.open(target).await {
                Ok(stream) => return Ok(stream),
                // The connector answered: its verdict is final (another copy
                // is not tried; every copy must reach every address).
                Err(OpenError::Refused { code, reason }) => return Err(Refusal { code, reason }),
                // This session carries all the streams it may: try the next.
                Err(OpenError::TooManyStreams(_)) => full += 1,
                // This session is going away: try the next one.
                Err(_) => continue,
            }
        }
        if full > 0 {
            return Err(Refusal::new(
                code::UNAVAILABLE,
                format!(
                    "the connector \"{name}\" of this environment is online but every one of its \
                     {full} sessions carries as many connections as it may; run it with more \
                     PSBX_SESSIONS (up to 8) or run another copy"
                ),
            ));
        }
        Err(offline())
    }

    /// Notes a box stream open through `address` of environment `env`; the
    /// receiver fires when the address stops being listed.
    pub fn track(
        &self,
        env: &EnvironmentId,
        address: &Endpoint,
    ) -> (u64, tokio::sync::oneshot::Receiver<&'static str>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut state = self.lock();
        state.next += 1;
        let id = state.next;
        state
            .streams
            .entry((env.clone(), address.clone()))
            .or_default()
            .push(OpenStream { id, reset: tx });
        (id, rx)
    }

    pub fn untrack(&self, env: &EnvironmentId, address: &Endpoint, id: u64) {
        let mut state = self.lock();
        let key = (env.clone(), address.clone());
        if let Some(list) = state.streams.get_mut(&key) {
            list.retain(|s| s.id != id);
            if list.is_empty() {
                state.streams.remove(&key);
            }
        }
    }

    /// Each environment's address table, as routing reads it.
    pub fn tables(&self) -> &AddressTables {
        &self.tables
    }

    /// Closes the open box streams of environment `env` whose address is not
    /// in `listed` any more, and drops its address table (read again at the
    /// next stream).
    pub fn unlisted(&self, env: &EnvironmentId, listed: &[Endpoint]) {
        self.tables.forget(env);
        let mut state = self.lock();
        let gone: Vec<(EnvironmentId, Endpoint)> = state
            .streams
            .keys()
            .filter(|(e, a)| e == env && !listed.contains(a))
            .cloned()
            .collect();
        tracing::debug!(
            %env,
            open = state.streams.len(),
            closing = gone.len(),
            "addresses changed"
        );
        for key in gone {
            for stream in state.streams.remove(&key).unwrap_or_default() {
                let _ = stream.reset.send("the address is no longer listed");
            }
        }
    }

    /// What boxes sent through connections, counted on this replica.
    pub fn egress(&self) -> &egress::Egress {
        &self.egress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (AccountId, ConnectionId) {
        (
            AccountId::parse("acct_a").unwrap(),
            ConnectionId::parse("conn_office").unwrap(),
        )
    }

    /// A live session (its peer kept alive for the test's length).
    async fn session() -> Session {
        let (client, server) = psbx_wire::testing::session_pair(
            psbx_wire::Config::default(),
            psbx_wire::Config::default(),
            1 << 16,
        )
        .await
        .unwrap();
        tokio::spawn(async move { server.closed().await });
        client
    }

    /// M1: a session whose token was checked before a kick of its
    /// connection is not registered after it; one checked after is.
    #[tokio::test]
    async fn a_kick_between_the_token_check_and_registration_refuses_the_session() {
        let hub = Hub::default();
        let (account, connection) = ids();
        let epoch = hub.epoch();
        let mut slot = hub.reserve(&account, &connection, epoch).unwrap();
        hub.kick(&connection);
        assert_eq!(slot.register(session().await, "c"), Err(Kicked));
        assert!(!hub.status(&connection).online);
        // Another connection's kick does not matter.
        let other = ConnectionId::parse("conn_other").unwrap();
        let mut slot = hub.reserve(&account, &connection, hub.epoch()).unwrap();
        hub.kick(&other);
        slot.register(session().await, "c").unwrap();
        assert!(hub.status(&connection).online);
        drop(slot);
        assert!(!hub.status(&connection).online);
    }

    /// H1: sessions are capped per connection and per account, counting
    /// those not registered yet; a dropped slot frees its place.
    #[test]
    fn sessions_are_capped_per_connection_and_per_account() {
        let hub = Hub::with_limits(HubLimits {
            sessions_per_connection: 2,
            sessions_per_account: 3,
        });
        let (account, connection) = ids();
        let a = hub.reserve(&account, &connection, 0).unwrap();
        let _b = hub.reserve(&account, &connection, 0).unwrap();
        assert_eq!(
            hub.reserve(&account, &connection, 0).err(),
            Some(Full::Connection(2))
        );
        let other = ConnectionId::parse("conn_other").unwrap();
        let _c = hub.reserve(&account, &other, 0).unwrap();
        assert_eq!(
            hub.reserve(&account, &other, 0).err(),
            Some(Full::Account(3))
        );
        let stranger = AccountId::parse("acct_b").unwrap();
        let _d = hub
            .reserve(&stranger, &ConnectionId::parse("conn_x").unwrap(), 0)
            .unwrap();
        drop(a);
        hub.reserve(&account, &connection, 0).unwrap();
    }
}
