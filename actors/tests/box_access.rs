//! The box-URL allowlist on a real PostgreSQL: set and read back, another
//! account's list apart, and the per-replica cache (in force at once on the
//! replica that set it, on another within its lifetime).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_actors::box_access::{BoxAccess, BoxAccessError};
use psbx_actors::ids::AccountId;
use psbx_actors::store::{PoolOptions, Store};
use psbx_tests::TestDatabase;
use std::net::IpAddr;
use std::time::Duration;

fn store(db: &TestDatabase) -> Store {
    Store::open(db.url(), PoolOptions::short_lived(3)).unwrap()
}

fn account(db: &TestDatabase, name: &str) -> AccountId {
    use diesel::{Connection, RunQueryDsl};
    let id = AccountId::generate().unwrap();
    let mut conn = diesel::PgConnection::establish(db.url()).unwrap();
    diesel::sql_query(format!(
        "INSERT INTO accounts (id, name) VALUES ('{id}', '{name}')"
    ))
    .execute(&mut conn)
    .unwrap();
    id
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_list_is_set_read_back_canonical_and_kept_per_account() {
    let db = TestDatabase::new();
    let access = BoxAccess::new(store(&db));
    let (a, b) = (account(&db, "a"), account(&db, "b"));
    assert_eq!(access.get(&a).await.unwrap(), (Vec::new(), None));
    assert!(access.allows(&a, ip("198.51.100.1")).await.unwrap());

    let (stored, at) = access
        .set(
            &a,
            strings(&["203.0.113.0/24", "198.51.100.9/32", "198.51.100.9"]),
        )
        .await
        .unwrap();
    assert_eq!(stored, ["203.0.113.0/24", "198.51.100.9"]);
    let (read, read_at) = access.get(&a).await.unwrap();
    assert_eq!((read, read_at), (stored, Some(at)));
    assert!(access.allows(&a, ip("203.0.113.77")).await.unwrap());
    assert!(access.allows(&a, ip("::ffff:198.51.100.9")).await.unwrap());
    assert!(!access.allows(&a, ip("198.51.100.1")).await.unwrap());
    assert!(!access.allows(&a, ip("2001:db8::1")).await.unwrap());
    // Another account's list is its own.
    assert!(access.allows(&b, ip("198.51.100.1")).await.unwrap());
    assert_eq!(access.get(&b).await.unwrap(), (Vec::new(), None));

    // A refused list changes nothing.
    let refused = access
        .set(&a, strings(&["203.0.113.0/24", "2001:db8::/32"]))
        .await
        .unwrap_err();
    assert!(matches!(refused, BoxAccessError::Ipv6 { .. }), "{refused}");
    assert_eq!(access.get(&a).await.unwrap().0.len(), 2);

    // An empty list turns it off, and says when.
    let (stored, off_at) = access.set(&a, Vec::new()).await.unwrap();
    assert!(stored.is_empty());
    assert!(off_at >= at);
    assert_eq!(access.get(&a).await.unwrap(), (Vec::new(), Some(off_at)));
    assert!(access.allows(&a, ip("198.51.100.1")).await.unwrap());
}

#[tokio::test]
async fn a_change_on_one_replica_reaches_another_within_the_cache_lifetime() {
    let db = TestDatabase::new();
    let ttl = Duration::from_secs(1);
    let here = BoxAccess::with_ttl(store(&db), ttl);
    let there = BoxAccess::with_ttl(store(&db), ttl);
    let a = account(&db, "a");
    let visitor = ip("198.51.100.1");

    // Both replicas read the open list and keep it.
    assert!(here.allows(&a, visitor).await.unwrap());
    assert!(there.allows(&a, visitor).await.unwrap());
    let started = std::time::Instant::now();
    here.set(&a, strings(&["203.0.113.0/24"])).await.unwrap();
    // In force at once where it was set...
    assert!(!here.allows(&a, visitor).await.unwrap());
    // ...while the other replica still answers from its copy...
    if started.elapsed() < ttl / 2 {
        assert!(
            there.allows(&a, visitor).await.unwrap(),
            "the other replica read the store again before its copy expired"
        );
    }
    // ...until the copy expires.
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    assert!(!there.allows(&a, visitor).await.unwrap());
    assert!(there.allows(&a, ip("203.0.113.9")).await.unwrap());
}
