//! Streams through the real connector binary: bytes both ways with
//! half-close, and each way a stream is refused (refused port, NXDOMAIN,
//! PSBX_ALLOW, a malformed target). Loopback only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{
    Connector, ECHO_TAIL, Echo, FakeServer, TOKEN, closed_port, nxdomain_dns, round_trip,
};
use psbx_wire::OpenError;

const WAIT: Duration = Duration::from_secs(15);

fn refusal(result: Result<psbx_wire::Stream, OpenError>) -> (u16, String) {
    match result {
        Err(OpenError::Refused { code, reason }) => (code, reason),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the stream was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_flow_both_ways_with_half_close() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let mut echo = Echo::start().await;
    // The echo server is on loopback, which the connector dials only when
    // PSBX_ALLOW lists the target.
    let allow = format!("db.test:{0} 127.0.0.1:{0}", echo.port);
    let connector = Connector::one_session_allowing(&server, TOKEN, allow);
    let accepted = server.next_session(WAIT).await;
    assert_eq!(
        accepted.user_agent,
        format!("psbx-connector/{}", env!("CARGO_PKG_VERSION"))
    );
    let peer = accepted.session.peer();
    assert_eq!(
        peer.software,
        format!("psbx-connector/{}", env!("CARGO_PKG_VERSION"))
    );
    assert!(peer.has_feature("connector"));

    // A name from the connector's hosts file, then an IPv4 literal; one
    // small payload and one that needs flow control.
    let payloads = [
        b"hello through the connector".to_vec(),
        vec![7u8; 3 * 1024 * 1024 + 5],
    ];
    for (target, data) in [
        (format!("db.test:{}", echo.port), payloads[0].clone()),
        (format!("127.0.0.1:{}", echo.port), payloads[1].clone()),
    ] {
        let stream = accepted.session.open(&target).await.unwrap();
        let back = round_trip(stream, data.clone()).await;
        // The echo server saw our EOF (the FIN became a TCP shutdown)...
        let seen = tokio::time::timeout(WAIT, echo.eofs.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, data.len());
        // ...and what it wrote after it still reached us, then its EOF.
        let mut expected = data;
        expected.extend_from_slice(ECHO_TAIL);
        assert_eq!(back.len(), expected.len());
        assert!(back == expected, "the echoed bytes differ");
    }
    // Working streams are not logged at info.
    assert!(!connector.logs().contains("stream"), "{}", connector.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_targets_are_refused_with_the_reason() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let (dns, queries) = nxdomain_dns().await;
    let port = closed_port();
    let connector = Connector::for_server(
        &server,
        TOKEN,
        &[
            ("PSBX_SESSIONS", "1".into()),
            ("PSBX_DNS_SERVER", dns.to_string()),
            ("PSBX_ALLOW", format!("db.test:{port} nowhere.test:5432")),
        ],
    );
    let session = server.next_session(WAIT).await.session;

    let (code, reason) = refusal(session.open(&format!("db.test:{port}")).await);
    assert_eq!(code, 502);
    assert_eq!(
        reason,
        format!("connection refused by db.test:{port} (127.0.0.1)")
    );

    let (code, reason) = refusal(session.open("nowhere.test:5432").await);
    assert_eq!(code, 502);
    assert_eq!(
        reason,
        "NXDOMAIN: nowhere.test does not resolve in the connector's network"
    );
    // The answer came from the DNS server, the hosts file having no entry.
    assert!(queries.load(std::sync::atomic::Ordering::SeqCst) >= 1);

    let (code, reason) = refusal(session.open("not a target").await);
    assert_eq!(code, 400);
    assert!(reason.starts_with("bad target"), "{reason}");

    // One log line per refused stream, naming target, code and reason.
    connector.wait_for_log("stream refused", 3, WAIT).await;
    let logs = connector.logs();
    assert!(
        logs.contains("target=nowhere.test:5432 code=502 reason=NXDOMAIN"),
        "{logs}"
    );
    assert_eq!(logs.matches("stream refused").count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psbx_allow_refuses_what_it_does_not_list() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let echo = Echo::start().await;
    let other = Echo::start().await;
    let allow = format!("db.test:{} ,  10.9.9.9:5432", echo.port);
    let _connector = Connector::one_session_allowing(&server, TOKEN, allow);
    let session = server.next_session(WAIT).await.session;

    let stream = session
        .open(&format!("db.test:{}", echo.port))
        .await
        .unwrap();
    let back = round_trip(stream, b"allowed".to_vec()).await;
    assert!(back.starts_with(b"allowed"));

    // The same server by another name, and another port: both refused,
    // even though they are reachable.
    for target in [
        format!("127.0.0.1:{}", echo.port),
        format!("db.test:{}", other.port),
    ] {
        let (code, reason) = refusal(session.open(&target).await);
        assert_eq!(code, 502);
        assert_eq!(
            reason,
            format!("not allowed: {target} is not in PSBX_ALLOW")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_never_answers_times_out() {
    // A listener whose accept queue is full drops further SYNs, so a
    // connect to it hangs like one to a filtered port.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let _listener = socket.listen(0).unwrap();
    let mut fillers = Vec::new();
    for _ in 0..3 {
        let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
        if let Ok(Ok(tcp)) = tokio::time::timeout(Duration::from_millis(500), connect).await {
            fillers.push(tcp);
        }
    }

    let mut server = FakeServer::start(TOKEN, None).await;
    let _connector = Connector::one_session_allowing(&server, TOKEN, format!("127.0.0.1:{port}"));
    let session = server.next_session(WAIT).await.session;
    let started = std::time::Instant::now();
    let (code, reason) = refusal(session.open(&format!("127.0.0.1:{port}")).await);
    assert_eq!(code, 502);
    assert_eq!(reason, format!("timeout connecting to 127.0.0.1:{port}"));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(14),
        "{took:?}"
    );
}

/// One session carries `TUNNEL_STREAMS` connections open at once (a
/// connector serves every box of an account), each still working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_holds_a_thousand_streams() {
    use psbx_wire::mux::TUNNEL_STREAMS;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut server = FakeServer::start(TOKEN, None).await;
    let echo = Echo::start().await;
    let target = format!("127.0.0.1:{}", echo.port);
    let _connector = Connector::one_session_allowing(&server, TOKEN, target.clone());
    let session = server.next_session(WAIT).await.session;
    let mut streams = Vec::with_capacity(TUNNEL_STREAMS);
    for i in 0..TUNNEL_STREAMS {
        let stream = tokio::time::timeout(WAIT, session.open(&target))
            .await
            .unwrap_or_else(|_| panic!("stream {i} took over {WAIT:?} to open"))
            .unwrap_or_else(|e| panic!("stream {i} of {TUNNEL_STREAMS}: {e}"));
        streams.push(stream);
    }
    // All are open at once; each answers on its own.
    for (i, stream) in streams.iter_mut().enumerate() {
        let ping = format!("stream {i}");
        stream.write_all(ping.as_bytes()).await.unwrap();
        let mut back = vec![0u8; ping.len()];
        tokio::time::timeout(WAIT, stream.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, ping.as_bytes());
    }
    // The next one is refused by this end's own limit, not by a hang.
    match session.open(&target).await {
        Err(OpenError::TooManyStreams(n)) => assert_eq!(n, TUNNEL_STREAMS),
        Err(other) => panic!("expected TooManyStreams, got {other}"),
        Ok(_) => panic!("stream {} was accepted", TUNNEL_STREAMS + 1),
    }
}

/// M5: without PSBX_ALLOW the real connector refuses a name that resolves
/// to its own loopback (502 "not allowed" naming PSBX_ALLOW) before any
/// connect: the listener there never sees a connection. The cloud metadata
/// addresses (link-local) are refused by the same check (its unit test in
/// `reserved.rs` decides without sending anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_is_not_dialed_unless_listed() {
    let mut server = FakeServer::start(TOKEN, None).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connector = Connector::for_server(&server, TOKEN, &[("PSBX_SESSIONS", "1".into())]);
    let session = server.next_session(WAIT).await.session;
    for target in [format!("db.test:{port}"), format!("127.0.0.1:{port}")] {
        let (code, reason) = refusal(session.open(&target).await);
        assert_eq!(code, 502);
        assert!(
            reason.starts_with(&format!("not allowed: {target} resolves to 127.0.0.1")),
            "{reason}"
        );
        assert!(reason.contains("PSBX_ALLOW"), "{reason}");
    }
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(accepted.is_err(), "the connector connected: {accepted:?}");
    drop(connector);
    drop(session);

    // Listed, the same target is dialed.
    let mut server = FakeServer::start(TOKEN, None).await;
    let echo = Echo::start().await;
    let target = format!("db.test:{}", echo.port);
    let _connector = Connector::one_session_allowing(&server, TOKEN, target.clone());
    let session = server.next_session(WAIT).await.session;
    let stream = session.open(&target).await.unwrap();
    assert!(
        round_trip(stream, b"listed".to_vec())
            .await
            .starts_with(b"listed")
    );
}
