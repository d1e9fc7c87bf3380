//! Sessions of the real connector binary: a refused token, PSBX_SESSIONS,
//! reconnection, GOAWAY replacement, SIGTERM and bad configuration.
//! Loopback only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Connector, Echo, FakeServer, TOKEN, round_trip};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_logged_and_retried_without_showing_it() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let wrong = "psbx_conn_wrong_but_well_formed_token";
    // At trace level too: no library may log the Authorization header.
    let mut connector = Connector::for_server(
        &server,
        wrong,
        &[
            ("PSBX_SESSIONS", "1".into()),
            ("RUST_LOG", "trace,tungstenite=trace".into()),
        ],
    );
    connector
        .wait_for_log(
            "the server refused the connector token (rotated or deleted?)",
            3,
            WAIT,
        )
        .await;
    assert!(server.refused.load(Ordering::SeqCst) >= 3);
    assert!(connector.is_running(), "the connector gave up");
    assert!(
        server
            .maybe_session(Duration::from_millis(200))
            .await
            .is_none()
    );
    let logs = connector.logs();
    assert!(logs.contains("retrying in"), "{logs}");
    assert!(
        !logs.contains("wrong_but_well_formed"),
        "the token was logged:\n{logs}"
    );
    assert!(logs.contains(&format!("server {}", server.url())), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_kept_open_and_reconnected() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let connector = Connector::for_server(&server, TOKEN, &[("PSBX_SESSIONS", "2".into())]);
    let first = server.next_session(WAIT).await;
    let second = server.next_session(WAIT).await;
    // Two at once, no more.
    assert!(server.maybe_session(Duration::from_secs(1)).await.is_none());
    connector.wait_for_log("connected to", 2, WAIT).await;

    // Kill one on the server's side (its connection breaks, as when a
    // server crashes): the connector opens another after a short backoff.
    first.kill.cancel();
    let third = server.next_session(WAIT).await;
    connector.wait_for_log("reconnecting in", 1, WAIT).await;
    // Closing one with GOAWAY gets it replaced at once (the other one:
    // the slot that just failed waits a little even after a GOAWAY, so
    // that a server saying GOAWAY to every new session is not hammered).
    second.session.close();
    let fourth = server.next_session(Duration::from_secs(3)).await;
    connector
        .wait_for_log("opening a replacement now", 1, WAIT)
        .await;
    assert!(server.maybe_session(Duration::from_secs(1)).await.is_none());
    assert!(!third.session.is_closed());
    assert!(!fourth.session.is_closed());
    assert!(!connector.logs().contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_opens_a_replacement_and_lets_old_streams_finish() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let echo = Echo::start().await;
    let connector = Connector::for_server(
        &server,
        TOKEN,
        &[
            ("PSBX_SESSIONS", "1".into()),
            ("PSBX_ALLOW", format!("127.0.0.1:{}", echo.port)),
        ],
    );
    let old = server.next_session(WAIT).await.session;
    let stream = old.open(&format!("127.0.0.1:{}", echo.port)).await.unwrap();

    old.goaway("redeploying");
    // The replacement comes at once, not after a backoff.
    let new = server.next_session(Duration::from_secs(3)).await.session;
    connector.wait_for_log("GOAWAY: redeploying", 1, WAIT).await;

    // The old stream still works; new streams use the new session.
    let back = round_trip(stream, b"still here".to_vec()).await;
    assert!(back.starts_with(b"still here"));
    let stream = new.open(&format!("127.0.0.1:{}", echo.port)).await.unwrap();
    assert!(
        round_trip(stream, b"new".to_vec())
            .await
            .starts_with(b"new")
    );
    // With its streams done, the old session closes.
    tokio::time::timeout(WAIT, old.closed()).await.unwrap().ok();
    assert!(old.is_closed());
    assert!(!new.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_says_goaway_and_exits() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let mut connector = Connector::for_server(&server, TOKEN, &[("PSBX_SESSIONS", "2".into())]);
    let a = server.next_session(WAIT).await.session;
    let b = server.next_session(WAIT).await.session;
    connector.wait_for_log("connected to", 2, WAIT).await;
    connector.send_sigterm();
    let status = connector.wait_exit(Duration::from_secs(8)).await;
    assert!(status.success(), "{status}");
    for session in [a, b] {
        tokio::time::timeout(WAIT, session.closed())
            .await
            .unwrap()
            .ok();
        assert_eq!(
            session.peer_goaway().as_deref(),
            Some("the connector is stopping")
        );
    }
    assert!(connector.logs().contains("SIGTERM: stopping"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_exits_with_a_clear_message() {
    let url = ("PSBX_URL", "http://127.0.0.1:9".to_owned());
    let token = ("PSBX_CONNECTOR_TOKEN", TOKEN.to_owned());
    for (vars, message) in [
        (
            vec![url.clone(), token.clone(), ("PSBX_SESSIONS", "9".into())],
            "PSBX_SESSIONS \"9\" is not valid",
        ),
        (vec![url.clone()], "PSBX_CONNECTOR_TOKEN is not set"),
        (vec![token.clone()], "PSBX_URL is not set"),
        (
            vec![("PSBX_URL", "ftp://x".into()), token.clone()],
            "PSBX_URL \"ftp://x\" is not valid",
        ),
        (
            vec![url.clone(), ("PSBX_CONNECTOR_TOKEN", "psbx_abc".into())],
            "must start with psbx_conn_",
        ),
    ] {
        let mut connector = Connector::start(&vars);
        let status = connector.wait_exit(WAIT).await;
        assert_eq!(status.code(), Some(2));
        connector.wait_for_log(message, 1, WAIT).await;
    }
}

/// A token as psbx issues it names its server: the connector needs no
/// `PSBX_URL` (the spec's `docker run` line has only the token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_alone_names_the_server() {
    use base64::Engine as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let issuer = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&url);
    let token = format!("psbx_conn_{issuer}.s3cret");
    let mut server = FakeServer::start_on(listener, &token, None);
    let echo = Echo::start().await;
    let _connector = Connector::start(&[
        ("PSBX_CONNECTOR_TOKEN", token.clone()),
        ("PSBX_SESSIONS", "1".into()),
        ("PSBX_ALLOW", format!("127.0.0.1:{}", echo.port)),
    ]);
    let session = server.next_session(WAIT).await.session;
    let stream = session
        .open(&format!("127.0.0.1:{}", echo.port))
        .await
        .unwrap();
    assert!(
        round_trip(stream, b"by the token".to_vec())
            .await
            .starts_with(b"by the token")
    );
}
