//! review-2 M4 and L11: the streams a box opens to the server are metered.
//! A box (the test's end of an in-memory wire session, standing for a
//! hostile boxd) that opens 10,000 `link:` streams or 1,000 `aws:token`
//! streams makes a handful of store reads and at most `REFUSALS_LOGGED` log
//! lines plus a summary; the links `wire` stores are the ones used, without
//! a read; a box past its DNS rate is refused before the upstream (a UDP
//! resolver on loopback that counts what reaches it); a box's `aws:token` is
//! refused once its environment no longer names the role, or was deleted and
//! made again. Real PostgreSQL, real wire sessions in memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use psbx_actors::box_role::{Asker, BoxRole};
use psbx_actors::box_state::BoxState;
use psbx_actors::boxnet::resolver::{self, Relay};
use psbx_actors::host::links::{LinkBook, Links};
use psbx_actors::ids::{AccountId, BoxId, EnvironmentId};
use psbx_actors::meter::REFUSALS_LOGGED;
use psbx_actors::oidc::Issuer;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::spec::ClaimedAws;
use psbx_actors::spec::LinkSpec;
use psbx_actors::store::{EnvironmentChange, NewBox, PoolOptions, Store};
use psbx_tests::TestDatabase;
use psbx_wire::boxd::Outbound;
use psbx_wire::dns::{Transport, read_framed, write_framed};
use psbx_wire::mux::{Incoming, Session};
use psbx_wire::{Config, OpenError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROLE: &str = "arn:aws:iam::210987654321:role/box";

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

    /// Lines that contain `what`: at least one, at most the limit.
    fn check(&self, what: &str) {
        let log = self.text();
        let lines = log.lines().filter(|l| l.contains(what)).count();
        assert!(lines >= 1, "nothing logged as {what:?}:\n{log}");
        assert!(
            lines <= REFUSALS_LOGGED as usize,
            "{lines} lines {what:?} for one box (at most {REFUSALS_LOGGED}):\n{}",
            &log[..log.len().min(4000)]
        );
    }
}

/// A subscriber writing into a buffer, for this thread.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

fn store(db: &TestDatabase) -> Store {
    Store::open(db.url(), PoolOptions::short_lived(3)).unwrap()
}

/// A running box of `account` whose spec has `links`.
fn running_box(store: &Store, account: &AccountId, links: Vec<LinkSpec>) -> BoxId {
    let mut new = NewBox {
        account_id: Some(account.clone()),
        ..NewBox::for_size(
            BoxId::generate().unwrap(),
            "test:///default",
            "test",
            BoxState::Running,
            1,
            psbx_actors::settings::Unit {
                vcpus: 1,
                memory_mib: 256,
                disk_gb: 2,
            },
        )
    };
    new.spec.links = links;
    store.insert_box(&new).unwrap().id
}

/// The box's end of a session whose server end hands every stream to `serve`.
async fn box_session(
    serve: impl Fn(Incoming) + Send + 'static,
) -> (Session, tokio::task::JoinHandle<()>) {
    let (from_box, server) =
        psbx_wire::testing::session_pair(Config::default(), Config::default(), 1 << 20)
            .await
            .unwrap();
    let accepting = tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            serve(incoming);
        }
    });
    (from_box, accepting)
}

/// Opens `count` streams to `target` in waves of 200 (the session's stream
/// limit is 256); each must be refused: the codes, counted.
async fn refused_opens(from_box: &Session, target: &str, count: usize) -> Vec<(u16, String)> {
    let mut refusals = Vec::new();
    for wave in 0..count / 200 {
        let opens = (0..200).map(|_| from_box.open(target));
        for (i, result) in futures_util::future::join_all(opens)
            .await
            .into_iter()
            .enumerate()
        {
            match result {
                Err(OpenError::Refused { code, reason }) => refusals.push((code, reason)),
                Err(other) => panic!("open {}: {other}", wave * 200 + i),
                Ok(_) => panic!("open {} of {target} was accepted", wave * 200 + i),
            }
        }
    }
    refusals
}

fn links_of(book: &Arc<LinkBook>, store: &Store, id: &BoxId, account: &AccountId) -> Links {
    Links::new(
        id.clone(),
        account.clone(),
        store.clone(),
        Arc::default(),
        book.clone(),
    )
}

fn link_handler(links: Links) -> impl Fn(Incoming) + Send + 'static {
    move |incoming: Incoming| match Outbound::parse(incoming.target()) {
        Ok(Outbound::Link(endpoint)) => links.spawn(incoming, endpoint),
        other => incoming.refuse(400, &format!("not a link target: {other:?}")),
    }
}

#[tokio::test]
async fn a_box_opening_link_streams_as_fast_as_it_can_costs_a_handful_of_reads() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = AccountId::parse(&db.add_account("acct_links")).unwrap();
    let stranger = AccountId::parse(&db.add_account("acct_stranger")).unwrap();
    let theirs = running_box(&store, &stranger, vec![]);
    let link = |name: &str, port: u16| LinkSpec {
        name: name.into(),
        port,
        box_id: theirs.to_string(),
        target_port: 8080,
    };
    let id = running_box(&store, &account, vec![link("api", 80)]);
    let book = Arc::new(LinkBook::default());
    let (log, _logging) = capture();

    let (from_box, accepting) =
        box_session(link_handler(links_of(&book, &store, &id, &account))).await;
    // One of each first, while the box's burst lasts (the bucket starts full,
    // whatever the machine's speed), then the flood past it.
    let mut refusals = Vec::new();
    for target in ["link:api:80", "link:nope:1"] {
        match from_box.open(target).await {
            Err(OpenError::Refused { code, reason }) => refusals.push((code, reason)),
            Err(other) => panic!("open {target}: {other}"),
            Ok(_) => panic!("{target} was accepted"),
        }
    }
    refusals.extend(refused_opens(&from_box, "link:nope:1", 10_000).await);
    refusals.extend(refused_opens(&from_box, "link:api:80", 1_000).await);
    from_box.close();
    accepting.abort();

    let count = |code: u16, says: &str| {
        refusals
            .iter()
            .filter(|(c, r)| *c == code && r.contains(says))
            .count()
    };
    assert!(count(404, "is not linked") >= 1, "{:?}", &refusals[..3]);
    assert!(
        count(404, "not in this account") >= 1,
        "{:?}",
        &refusals[..3]
    );
    assert!(count(429, "faster than") >= 1, "{:?}", &refusals[..3]);
    assert_eq!(
        count(404, "") + count(429, ""),
        refusals.len(),
        "{refusals:?}"
    );
    // The box's spec once, the stranger's box once.
    assert!(book.reads() <= 2, "{} box reads", book.reads());
    log.check("link refused");

    // `wire` gives the book the new links: used without a read (another
    // session: a fresh rate).
    book.rewired(&id, &[link("nope", 1)]);
    let (from_box, accepting) =
        box_session(link_handler(links_of(&book, &store, &id, &account))).await;
    let refused = refused_opens(&from_box, "link:nope:1", 200).await;
    from_box.close();
    accepting.abort();
    assert!(
        refused
            .iter()
            .all(|(code, r)| *code == 404 && r.contains("not in this account")),
        "{:?}",
        &refused[..3]
    );
    assert!(book.reads() <= 2, "{} box reads", book.reads());
}

async fn environment_with_role(store: &Store, account: &AccountId, name: &str) -> EnvironmentId {
    let env = EnvironmentId::generate().unwrap();
    store
        .insert_environment(account, &env, name)
        .unwrap()
        .unwrap();
    let change = EnvironmentChange {
        aws_role_arn: Some(Some(ROLE.into())),
        ..EnvironmentChange::default()
    };
    store
        .update_environment(account, name, &change)
        .unwrap()
        .unwrap();
    env
}

fn box_role(db: &TestDatabase, store: &Store) -> BoxRole {
    let issuer = Issuer::new(
        store.clone(),
        Arc::new(Vault::from_key(&[7u8; 32])),
        "https://psbx.example",
        std::time::Duration::from_secs(3600),
    );
    let _ = db;
    BoxRole::new(issuer, store.clone(), None, 3600)
}

fn asker(account: &AccountId, env: &EnvironmentId) -> Arc<Asker> {
    Arc::new(Asker::new(
        BoxId::generate().unwrap(),
        account.clone(),
        "dev".into(),
        ClaimedAws {
            role_arn: ROLE.into(),
            region: Some("us-east-1".into()),
            environment_id: Some(env.to_string()),
        },
    ))
}

fn token_handler(role: BoxRole, asker: Arc<Asker>) -> impl Fn(Incoming) + Send + 'static {
    move |incoming: Incoming| {
        let (role, asker) = (role.clone(), asker.clone());
        tokio::spawn(async move { role.serve(incoming, &asker).await });
    }
}

/// One `aws:token` as boxd asks for it: the token, or the refusal's code and
/// reason.
async fn ask_token(from_box: &Session) -> Result<serde_json::Value, (u16, String)> {
    match from_box.open("aws:token").await {
        Ok(mut stream) => {
            stream.shutdown().await.unwrap();
            let mut body = Vec::new();
            stream.read_to_end(&mut body).await.unwrap();
            Ok(serde_json::from_slice(&body).unwrap())
        }
        Err(OpenError::Refused { code, reason }) => Err((code, reason)),
        Err(other) => panic!("aws:token: {other}"),
    }
}

#[tokio::test]
async fn a_box_asking_for_aws_tokens_as_fast_as_it_can_costs_a_handful_of_reads() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = AccountId::parse(&db.add_account("acct_tokens")).unwrap();
    let env = environment_with_role(&store, &account, "dev").await;
    let role = box_role(&db, &store);
    let (log, _logging) = capture();
    let (from_box, accepting) =
        box_session(token_handler(role.clone(), asker(&account, &env))).await;
    // In waves of 200 (the session's stream limit is 256).
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers
            .extend(futures_util::future::join_all((0..200).map(|_| ask_token(&from_box))).await);
    }
    from_box.close();
    accepting.abort();
    let tokens = answers.iter().filter(|a| a.is_ok()).count();
    assert!(tokens >= 1, "no token: {:?}", &answers[..3]);
    assert!(
        tokens <= psbx_actors::box_role::BURST as usize + 1,
        "{tokens} tokens"
    );
    assert!(
        answers
            .iter()
            .filter_map(|a| a.as_ref().err())
            .all(|(code, reason)| *code == 429 && reason.contains("faster than")),
        "{answers:?}"
    );
    assert!(role.reads() <= 6, "{} environment reads", role.reads());
    log.check("no AWS token for the box");
}

#[tokio::test]
async fn a_box_gets_no_aws_token_once_its_role_is_removed_or_its_environment_remade() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = AccountId::parse(&db.add_account("acct_revoke")).unwrap();
    let env = environment_with_role(&store, &account, "dev").await;
    let role = box_role(&db, &store);

    let first = asker(&account, &env);
    let (from_box, accepting) = box_session(token_handler(role.clone(), first.clone())).await;
    let token = ask_token(&from_box).await.unwrap();
    assert_eq!(token["roleArn"], ROLE, "{token}");
    // PUT /v1/environments/dev {awsRoleArn: null}
    let cleared = EnvironmentChange {
        aws_role_arn: Some(None),
        ..EnvironmentChange::default()
    };
    store
        .update_environment(&account, "dev", &cleared)
        .unwrap()
        .unwrap();
    let (code, reason) = ask_token(&from_box).await.unwrap_err();
    assert_eq!(code, 403, "{reason}");
    assert!(reason.contains("no longer names an AWS role"), "{reason}");
    from_box.close();
    accepting.abort();

    // Deleted, and made again under the same name with the same role: a
    // box of the old one gets nothing.
    assert!(store.delete_environment(&account, "dev").unwrap());
    let remade = environment_with_role(&store, &account, "dev").await;
    assert_ne!(remade, env);
    let (from_box, accepting) =
        box_session(token_handler(role.clone(), asker(&account, &env))).await;
    let (code, reason) = ask_token(&from_box).await.unwrap_err();
    assert_eq!(code, 404, "{reason}");
    assert!(reason.contains("made again"), "{reason}");
    from_box.close();
    accepting.abort();
    // A box of the new one gets its token.
    let (from_box, accepting) = box_session(token_handler(role, asker(&account, &remade))).await;
    assert_eq!(ask_token(&from_box).await.unwrap()["roleArn"], ROLE);
    from_box.close();
    accepting.abort();
}

/// A resolver on loopback: answers every query (its id kept, QR set) and
/// counts them.
async fn counting_resolver() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            counted.fetch_add(1, Ordering::Relaxed);
            let mut answer = buf[..n].to_vec();
            answer[2] |= 0x80;
            let _ = socket.send_to(&answer, from).await;
        }
    });
    (addr, seen)
}

/// A query for `example.com A` with id `id`.
fn query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
    q
}

#[tokio::test]
async fn a_box_past_its_dns_rate_is_refused_before_the_upstream() {
    const QUERIES: u64 = 5_000;
    let (upstream, seen) = counting_resolver().await;
    let relay = Relay::new(Arc::new(vec![upstream]));
    let (from_box, accepting) = box_session(move |incoming: Incoming| {
        let relay = relay.clone();
        tokio::spawn(async move { relay.serve(incoming, Transport::Udp).await });
    })
    .await;
    let started = Instant::now();
    let (mut answered, mut refused) = (0u64, 0u64);
    // In waves under the box's limit of queries under way.
    for wave in 0..QUERIES / 50 {
        let asks = (0..50).map(|i| {
            let from_box = &from_box;
            async move {
                match from_box.open("dns:udp").await {
                    Ok(mut stream) => {
                        write_framed(&mut stream, &query((wave * 50 + i) as u16))
                            .await
                            .unwrap();
                        read_framed(&mut stream)
                            .await
                            .map(|_| true)
                            .unwrap_or(false)
                    }
                    Err(OpenError::Refused { code: 429, .. }) => false,
                    Err(other) => panic!("dns:udp: {other}"),
                }
            }
        });
        for ok in futures_util::future::join_all(asks).await {
            if ok {
                answered += 1;
            } else {
                refused += 1;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    from_box.close();
    accepting.abort();
    // What the bucket allows in the time the queries took, at most.
    let allowed =
        u64::from(resolver::BURST) + (f64::from(resolver::PER_SECOND) * elapsed.ceil()) as u64;
    let upstream = seen.load(Ordering::Relaxed);
    assert!(answered >= 1, "no query was answered");
    assert!(
        upstream <= allowed,
        "the upstream saw {upstream} queries in {elapsed:.1} s (at most {allowed})"
    );
    assert_eq!(answered + refused, QUERIES);
    assert!(
        refused >= QUERIES - allowed,
        "{refused} refused in {elapsed:.1} s"
    );
}
