//! L3: a box that opens streams to environment addresses as fast as it can
//! gets them refused cheaply: 10,000 refused opens from one box make one
//! database read of its environment's address table (the hub keeps it, and
//! its absence, and streams arriving together wait for one read) and at
//! most `REFUSALS_LOGGED` log lines plus a summary. Real PostgreSQL, real
//! wire sessions in memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use psbx_actors::connectors::Hub;
use psbx_actors::connectors::route::{BoxRoute, REFUSALS_LOGGED, Router};
use psbx_actors::ids::{AccountId, BoxId, ConnectionId, EnvironmentId};
use psbx_actors::store::{PoolOptions, Store};
use psbx_tests::TestDatabase;
use psbx_wire::boxd::Outbound;
use psbx_wire::{Config, OpenError};

const OPENS: usize = 10_000;

/// What the tracing subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Opens `OPENS` streams to `env:db.internal:5432` from a box of `account`
/// started in environment `env`; every one must be refused with 403.
/// Returns the router (for its read count) and the log.
async fn refused_opens(store: Store, account: AccountId, env: &str) -> (Router, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let router = Router::new(Hub::default(), store);
    let boxed = router.for_box(BoxRoute {
        box_id: BoxId::parse("box_flood").unwrap(),
        account,
        environment: Some(env.to_owned()),
    });
    let (from_box, server) =
        psbx_wire::testing::session_pair(Config::default(), Config::default(), 1 << 20)
            .await
            .unwrap();
    let accepting = tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            match Outbound::parse(incoming.target()) {
                Ok(Outbound::Env(endpoint)) => boxed.spawn(incoming, endpoint),
                _ => incoming.refuse(400, "not an env target"),
            }
        }
    });
    // In waves of 200 (the session's stream limit is 256).
    for wave in 0..OPENS / 200 {
        let opens = (0..200).map(|_| from_box.open("env:db.internal:5432"));
        for (i, result) in futures_util::future::join_all(opens)
            .await
            .into_iter()
            .enumerate()
        {
            match result {
                Err(OpenError::Refused { code: 403, .. }) => {}
                Err(other) => panic!("open {}: {other}", wave * 200 + i),
                Ok(_) => panic!("open {} was accepted", wave * 200 + i),
            }
        }
    }
    from_box.close();
    accepting.abort();
    (router, captured.text())
}

fn store(db: &TestDatabase) -> Store {
    Store::open(db.url(), PoolOptions::short_lived(2)).unwrap()
}

fn check_log(log: &str) {
    let lines = log
        .lines()
        .filter(|l| l.contains("private endpoint refused"))
        .count();
    assert!(lines >= 1, "no refusal was logged:\n{log}");
    assert!(
        lines <= REFUSALS_LOGGED as usize,
        "{lines} refusal lines for one box (at most {REFUSALS_LOGGED}):\n{}",
        &log[..log.len().min(4000)]
    );
}

#[tokio::test]
async fn refused_opens_from_a_box_cost_one_read_and_few_log_lines() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = AccountId::parse(&db.add_account("acct_flood")).unwrap();
    let env = EnvironmentId::generate().unwrap();
    store
        .insert_environment(&account, &env, "dev")
        .unwrap()
        .unwrap();
    // A connection that lists something else.
    store
        .insert_connection(
            &env,
            &ConnectionId::generate().unwrap(),
            "dc",
            "psbx_conn_t",
        )
        .unwrap()
        .unwrap();
    let (router, log) = refused_opens(store, account, "dev").await;
    assert_eq!(
        router.table_reads(),
        1,
        "the address table was read more than once"
    );
    check_log(&log);
    assert!(log.contains("is no longer listed"), "{log}");
}

#[tokio::test]
async fn refused_opens_to_a_deleted_environment_cost_one_read() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = AccountId::parse(&db.add_account("acct_flood")).unwrap();
    let (router, log) = refused_opens(store, account, "deleted").await;
    assert_eq!(
        router.table_reads(),
        1,
        "the missing environment was read more than once"
    );
    check_log(&log);
    assert!(log.contains("no longer exists"), "{log}");
}
