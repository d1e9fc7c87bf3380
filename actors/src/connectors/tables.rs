//! Each environment's address table (its id and connections, with the
//! addresses each lists), as the router reads it for every `env:` stream a
//! box opens: kept for [`ADDRESS_TABLE_TTL`], dropped at once when this
//! replica changes the environment ([`AddressTables::forget`], from
//! `Hub::unlisted`), and read from the database by one stream at a time
//! while the others arriving with it wait for its result.
//!
//! Why one place: a box may open streams as fast as it likes, so a warm
//! table must cost no query and a burst of streams one; the cache, its
//! lifetime, its invalidation and the single-flight reads are one policy,
//! and were split between the router and the hub before. The hub holds the
//! tables (the environments façade drops them through it when addresses
//! change); the router asks them with its store.
//!
//! Behind `std::sync::Mutex`es, like the hub: every operation is a short
//! lookup or insertion; only the read waits, on a per-table async lock.

use crate::blocking::blocking;
use crate::ids::{AccountId, EnvironmentId};
use crate::store::{ConnectionRecord, Store, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a table read here is used. This replica's own changes (addresses
/// set, a connection or the environment deleted) drop it at once; another
/// replica's reach this one within this time.
pub const ADDRESS_TABLE_TTL: Duration = Duration::from_secs(5);

/// An environment's id and connections.
pub type Table = (EnvironmentId, Vec<ConnectionRecord>);

/// (account, environment name): what a box's spec names its environment by.
type Key = (AccountId, String);

/// An environment's connections as last read.
struct Kept {
    read_at: Instant,
    /// `None`: the environment does not exist (also kept, so that streams
    /// of a box whose environment was deleted cost no query each).
    found: Option<Table>,
}

/// This replica's address tables; one per hub.
#[derive(Default)]
pub struct AddressTables {
    kept: Mutex<HashMap<Key, Kept>>,
    /// One lock per table being read, so that streams arriving together
    /// wait for one read instead of each making their own.
    reading: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// Tables read from the database (what tests count).
    reads: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AddressTables {
    /// The account's environment `name` (`None`: there is none): as kept,
    /// or read by one caller while the others arriving with it wait for its
    /// result.
    pub async fn get(
        &self,
        store: &Store,
        account: &AccountId,
        name: &str,
    ) -> Result<Option<Table>, StoreError> {
        if let Some(found) = self.kept(account, name) {
            return Ok(found);
        }
        let key = (account.clone(), name.to_owned());
        let reader = lock(&self.reading).entry(key.clone()).or_default().clone();
        let result = {
            let _reading = reader.lock().await;
            match self.kept(account, name) {
                Some(found) => Ok(found),
                None => self.read(store, account, name).await,
            }
        };
        let mut reading = lock(&self.reading);
        // The last one out removes the lock (the map holds one reference).
        if Arc::strong_count(&reader) <= 2 {
            reading.remove(&key);
        }
        result
    }

    /// How many tables were read from the database.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Drops the table of environment `env` (read again at the next
    /// stream), and every environment kept as missing (it may be the one
    /// just made).
    pub fn forget(&self, env: &EnvironmentId) {
        lock(&self.kept).retain(|_, table| table.found.as_ref().is_some_and(|(id, _)| id != env));
    }

    /// The table as read less than [`ADDRESS_TABLE_TTL`] ago, if it was
    /// (`Some(None)`: the environment did not exist then).
    fn kept(&self, account: &AccountId, name: &str) -> Option<Option<Table>> {
        let kept = lock(&self.kept);
        let table = kept.get(&(account.clone(), name.to_owned()))?;
        (table.read_at.elapsed() < ADDRESS_TABLE_TTL).then(|| table.found.clone())
    }

    /// Keeps a table as just read (`None`: the environment does not exist).
    fn keep(&self, account: &AccountId, name: &str, found: Option<Table>) {
        lock(&self.kept).insert(
            (account.clone(), name.to_owned()),
            Kept {
                read_at: Instant::now(),
                found,
            },
        );
    }

    /// An environment's id and connections from the store, kept (its
    /// absence too).
    async fn read(
        &self,
        store: &Store,
        account: &AccountId,
        name: &str,
    ) -> Result<Option<Table>, StoreError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let (store, a, n) = (store.clone(), account.clone(), name.to_owned());
        let found = blocking(move || {
            let Some(env) = store.environment(&a, &n)? else {
                return Ok(None);
            };
            let connections = store.connections(&env.id)?;
            Ok::<_, StoreError>(Some((env.id, connections)))
        })
        .await?;
        self.keep(account, name, found.clone());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ConnectionId;
    use chrono::Utc;
    use psbx_wire::Endpoint;

    #[test]
    fn an_address_table_is_kept_until_its_environment_changes_here() {
        let hub = super::super::Hub::default();
        let tables = hub.tables();
        let account = AccountId::parse("acct_a").unwrap();
        let (env, other) = (
            EnvironmentId::parse("env_dev").unwrap(),
            EnvironmentId::parse("env_other").unwrap(),
        );
        let connection = ConnectionRecord {
            id: ConnectionId::parse("conn_office").unwrap(),
            environment_id: env.clone(),
            name: "office".into(),
            endpoints: vec!["db.internal:5432".parse::<Endpoint>().unwrap()],
            created_at: Utc::now(),
            token_rotated_at: None,
        };
        assert!(tables.kept(&account, "dev").is_none());
        tables.keep(
            &account,
            "dev",
            Some((env.clone(), vec![connection.clone()])),
        );
        assert_eq!(
            tables.kept(&account, "dev"),
            Some(Some((env.clone(), vec![connection])))
        );
        tables.keep(&account, "gone", None);
        assert_eq!(tables.kept(&account, "gone"), Some(None));
        assert!(tables.kept(&account, "staging").is_none());
        let stranger = AccountId::parse("acct_b").unwrap();
        assert!(tables.kept(&stranger, "dev").is_none());
        // Another environment's change leaves it; its own drops it.
        hub.unlisted(&other, &[]);
        assert!(tables.kept(&account, "dev").is_some());
        hub.unlisted(&env, &[]);
        assert!(tables.kept(&account, "dev").is_none());
    }
}
