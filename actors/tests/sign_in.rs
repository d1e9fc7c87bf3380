//! Sign-in store tests on a real PostgreSQL: password checks do not hold a
//! database connection while argon2 runs, and a new password ends the
//! account's browser sessions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_actors::store::{ARGON2_SLOTS, Argon2Slots, PoolOptions, Store};
use psbx_tests::TestDatabase;
use std::time::{Duration, Instant};

const PASSWORD: &str = "correct horse battery";

/// One connection only: whoever holds it blocks every other call. The wait
/// for a connection is generous, so only a connection that is never given back
/// makes a call fail.
fn store(db: &TestDatabase) -> Store {
    Store::open(
        db.url(),
        PoolOptions {
            max_size: 1,
            min_idle: 0,
            connect_timeout: Duration::from_secs(20),
        },
    )
    .unwrap()
}

#[test]
fn a_password_check_waiting_for_argon2_holds_no_connection() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    store.set_password(&first.account.id, PASSWORD).unwrap();

    // Take every argon2 slot: a check now stops right before argon2.
    let slots = Argon2Slots::global();
    let held: Vec<_> = (0..ARGON2_SLOTS).map(|_| slots.take()).collect();
    let checking = {
        let store = store.clone();
        std::thread::spawn(move || store.check_password("default", PASSWORD))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while slots.waiting() == 0 {
        assert!(Instant::now() < deadline, "the check never reached argon2");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The check has read the hash and waits for argon2: the one connection
    // must be back in the pool (before the fix it was held through argon2).
    store
        .ping()
        .expect("a password check held the only connection while waiting for argon2");
    assert!(!checking.is_finished());
    drop(held);
    let found = checking.join().unwrap().unwrap();
    assert_eq!(found.map(|a| a.id), Some(first.account.id.clone()));
    assert!(
        store
            .check_password("default", "wrong password")
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_new_password_ends_the_accounts_sessions_and_links_are_confirmed_first() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let link = store.create_login_link(&first.account.id).unwrap();
    // Looking at a link does not spend it.
    for _ in 0..2 {
        let seen = store.login_link_account(&link).unwrap();
        assert_eq!(seen.map(|a| a.id), Some(first.account.id.clone()));
    }
    let (account, session) = store.use_login_link(&link).unwrap().unwrap();
    assert_eq!(account, first.account.id);
    assert!(store.login_link_account(&link).unwrap().is_none());
    assert!(store.use_login_link(&link).unwrap().is_none());
    assert!(store.session_account(&session).unwrap().is_some());

    store.set_password(&first.account.id, PASSWORD).unwrap();
    assert!(
        store.session_account(&session).unwrap().is_none(),
        "a session outlived set-password"
    );
}
