//! Two real sessions talking: streams, half-close, resets, refusals, control
//! messages, hello negotiation, GOAWAY, closing, flow control and the memory
//! budget, over both carriages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use psbx_wire::boxd::Health;
use psbx_wire::frame::code;
use psbx_wire::hello::{HelloError, Versions};
use psbx_wire::mux::{INITIAL_WINDOW, StreamError};
use psbx_wire::{Config, Hello, OpenError, Role, Session, SessionError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const LONG: Duration = Duration::from_secs(20);

/// Opens a stream from `a`, accepts it on `b`, checks the target.
async fn connected(
    a: &Session,
    b: &Session,
    target: &str,
) -> (psbx_wire::Stream, psbx_wire::Stream) {
    let accept = async {
        let incoming = b.accept().await.expect("incoming");
        assert_eq!(incoming.target(), target);
        incoming.accept()
    };
    let (opened, accepted) = tokio::join!(a.open(target), accept);
    (opened.expect("open"), accepted)
}

async fn echo_both_ways(a: Session, b: Session) {
    let (mut x, mut y) = connected(&a, &b, "tcp:db.internal:5432").await;
    let sent = pattern_bytes(1, 0, 3 * 1024 * 1024 + 17);
    let writer = async {
        x.write_all(&sent).await.expect("write");
        x.shutdown().await.expect("shutdown");
        let mut back = Vec::new();
        x.read_to_end(&mut back).await.expect("read back");
        back
    };
    let echo = async {
        let mut got = Vec::new();
        y.read_to_end(&mut got).await.expect("read");
        // Half-closed one way, the other way still works.
        y.write_all(&got).await.expect("write back");
        y.shutdown().await.expect("shutdown back");
        got
    };
    let (back, got) = timeout(LONG, async { tokio::join!(writer, echo) })
        .await
        .expect("in time");
    assert!(got == sent, "the bytes arrived changed");
    assert!(back == sent, "the echo came back changed");
    drop((x, y));
    assert_eq!(a.stats().streams, 0);
    assert_eq!(a.stats().committed, 0);
}

#[tokio::test]
async fn bytes_flow_both_ways_with_half_close_over_a_byte_stream() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 8 * 1024).await;
    assert_eq!(a.version(), 1);
    assert_eq!(b.peer().software, "test-a");
    echo_both_ways(a, b).await;
}

#[tokio::test]
async fn bytes_flow_both_ways_over_messages() {
    let (a, b) = pair_over_messages(Config::default(), Config::default(), 4).await;
    assert_eq!(a.peer().software, "test-b");
    echo_both_ways(a, b).await;
}

#[tokio::test]
async fn both_sides_open_streams_with_their_own_ids() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (x1, _x1) = connected(&a, &b, "exec").await;
    let (y1, _y1) = connected(&b, &a, "sync").await;
    let (x2, _x2) = connected(&a, &b, "exec").await;
    assert_eq!((x1.id(), x2.id()), (1, 3));
    assert_eq!(y1.id(), 2);
    assert_eq!(a.stats().streams, 3);
}

#[tokio::test]
async fn a_refusal_reaches_the_opener_with_code_and_reason() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let refuse = async {
        let incoming = b.accept().await.expect("incoming");
        incoming.refuse(
            code::BAD_GATEWAY,
            "the connector could not reach db.internal:5432",
        );
    };
    let (opened, ()) = tokio::join!(a.open("tcp:db.internal:5432"), refuse);
    match opened {
        Err(OpenError::Refused { code, reason }) => {
            assert_eq!(code, 502);
            assert_eq!(reason, "the connector could not reach db.internal:5432");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // An incoming stream dropped unanswered is refused with 503.
    let drop_it = async { drop(b.accept().await) };
    let (opened, ()) = tokio::join!(a.open("exec"), drop_it);
    assert!(
        matches!(opened, Err(OpenError::Refused { code: 503, .. })),
        "{opened:?}"
    );
    assert_eq!(a.stats().streams, 0);
    assert_eq!(b.stats().streams, 0);
}

#[tokio::test]
async fn a_peer_reset_is_a_connection_reset_after_the_bytes_before_it() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (mut x, mut y) = connected(&a, &b, "exec").await;
    x.write_all(b"last words").await.unwrap();
    x.reset("the process was killed");
    let mut buf = [0u8; 10];
    y.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"last words");
    let err = y.read(&mut buf).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    assert!(err.to_string().contains("the process was killed"), "{err}");
    let inner = err.get_ref().and_then(|e| e.downcast_ref::<StreamError>());
    assert!(
        matches!(inner, Some(StreamError::ResetByPeer(_))),
        "{inner:?}"
    );
    let err = y.write_all(b"too late").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    // The local side's own operations fail too.
    assert_eq!(
        x.read(&mut buf).await.unwrap_err().kind(),
        ErrorKind::ConnectionAborted
    );
    assert_eq!(
        x.write(b"x").await.unwrap_err().kind(),
        ErrorKind::ConnectionAborted
    );
}

#[tokio::test]
async fn dropping_an_unfinished_stream_resets_it_and_a_finished_one_does_not() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (x, mut y) = connected(&a, &b, "exec").await;
    drop(x);
    let err = y.read_u8().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    assert!(err.to_string().contains("stream dropped"), "{err}");

    let (mut x, mut y) = connected(&a, &b, "exec").await;
    x.write_all(b"done").await.unwrap();
    x.shutdown().await.unwrap();
    y.shutdown().await.unwrap();
    let mut end = Vec::new();
    x.read_to_end(&mut end).await.unwrap();
    drop(x);
    let mut got = Vec::new();
    y.read_to_end(&mut got)
        .await
        .expect("no reset after a clean finish");
    assert_eq!(got, b"done");
}

#[tokio::test]
async fn writes_after_shutdown_fail_with_broken_pipe() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (mut x, _y) = connected(&a, &b, "exec").await;
    x.shutdown().await.unwrap();
    assert_eq!(
        x.write(b"x").await.unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

#[tokio::test]
async fn chunks_go_through_without_copies() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (mut x, mut y) = connected(&a, &b, "sync").await;
    let data = Bytes::from(pattern_bytes(3, 0, 100_000));
    x.write_chunk(data.clone()).await.unwrap();
    x.shutdown().await.unwrap();
    let mut got = Vec::new();
    while let Some(chunk) = y.read_chunk().await.unwrap() {
        assert!(chunk.len() <= Config::default().send_split);
        got.extend_from_slice(&chunk);
    }
    assert!(got == data);
}

/// A typed control message one way...
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToBoxd {
    HelloRequest,
    Ping { seq: u64 },
}

/// ... and one the other way.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum FromBoxd {
    Pong { seq: u64, health: Health },
}

#[tokio::test]
async fn typed_control_messages_go_both_ways_in_order() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    for seq in 0..10 {
        a.send_control(&ToBoxd::Ping { seq }).await.unwrap();
    }
    for seq in 0..10 {
        assert_eq!(
            b.recv_control::<ToBoxd>().await.unwrap().unwrap(),
            ToBoxd::Ping { seq }
        );
    }
    b.send_control(&FromBoxd::Pong {
        seq: 7,
        health: Health::default(),
    })
    .await
    .unwrap();
    assert!(matches!(
        a.recv_control::<FromBoxd>().await,
        Some(Ok(FromBoxd::Pong { seq: 7, .. }))
    ));
    // A message of the wrong type is reported, not fatal.
    a.send_control(&ToBoxd::HelloRequest).await.unwrap();
    assert!(matches!(b.recv_control::<FromBoxd>().await, Some(Err(_))));
    let big = "x".repeat(70_000);
    assert!(a.send_control(&big).await.is_err());
    assert!(!a.is_closed());
}

#[tokio::test]
async fn the_hello_picks_the_highest_common_version() {
    let (x, y) = tokio::io::duplex(4096);
    let newer = Hello {
        versions: Versions { min: 1, max: 3 },
        ..Hello::new("newer")
    };
    let older = Hello {
        versions: Versions { min: 1, max: 2 },
        ..Hello::new("older")
    };
    let (a, b) = tokio::join!(
        Session::over_io(x, Role::Client, Config::default(), newer),
        Session::over_io(y, Role::Server, Config::default(), older),
    );
    assert_eq!(a.unwrap().version(), 2);
    assert_eq!(b.unwrap().version(), 2);
}

#[tokio::test]
async fn no_common_version_fails_clearly_on_both_sides() {
    let (x, y) = tokio::io::duplex(4096);
    let newer = Hello {
        versions: Versions { min: 3, max: 4 },
        ..Hello::new("newer")
    };
    let (a, b) = tokio::join!(
        Session::over_io(x, Role::Client, Config::default(), newer),
        Session::over_io(y, Role::Server, Config::default(), Hello::new("older")),
    );
    for result in [a, b] {
        match result {
            Err(SessionError::Hello(HelloError::NoCommonVersion { .. })) => {}
            other => panic!("expected no common version, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn goaway_refuses_new_streams_and_lets_open_ones_finish() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (mut x, mut y) = connected(&a, &b, "tcp:db.internal:5432").await;
    b.goaway("replica draining");
    // The GOAWAY reaches a; after it, neither side opens or accepts.
    timeout(LONG, async {
        while a.peer_goaway().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(a.peer_goaway().as_deref(), Some("replica draining"));
    assert!(matches!(a.open("exec").await, Err(OpenError::GoingAway)));
    assert!(matches!(b.open("exec").await, Err(OpenError::GoingAway)));
    assert!(b.accept().await.is_none());
    // The open stream still works both ways.
    let write = async {
        x.write_all(&pattern_bytes(5, 0, 600_000)).await.unwrap();
        x.shutdown().await.unwrap();
    };
    let mut got = Vec::new();
    let ((), read) = tokio::join!(write, y.read_to_end(&mut got));
    read.unwrap();
    assert!(got == pattern_bytes(5, 0, 600_000));
    y.write_all(b"bye").await.unwrap();
    y.shutdown().await.unwrap();
    let mut back = Vec::new();
    x.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"bye");
    assert!(!a.is_closed() && !b.is_closed());
    // Once it is done, both sessions close cleanly.
    drop((x, y));
    let (ra, rb) = timeout(LONG, async { tokio::join!(a.closed(), b.closed()) })
        .await
        .unwrap();
    ra.expect("a drained cleanly");
    rb.expect("b drained cleanly");
}

#[tokio::test]
async fn close_ends_both_sessions_and_fails_open_streams() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (_x, mut y) = connected(&a, &b, "exec").await;
    a.close();
    timeout(LONG, a.closed())
        .await
        .unwrap()
        .expect("a closed cleanly");
    let rb = timeout(LONG, b.closed()).await.unwrap();
    assert!(
        matches!(rb, Err(SessionError::PeerClosed { goaway: Some(_) })),
        "{rb:?}"
    );
    assert_eq!(
        y.read_u8().await.unwrap_err().kind(),
        ErrorKind::ConnectionAborted
    );
    assert!(matches!(b.open("exec").await, Err(OpenError::Session(_))));
    assert!(b.accept().await.is_none());
}

#[tokio::test]
async fn dropping_every_session_handle_closes_cleanly() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    drop(a);
    timeout(LONG, b.closed())
        .await
        .unwrap()
        .expect("b sees a clean end");
}

#[tokio::test]
async fn the_stream_limit_is_enforced_on_both_sides() {
    let small = Config {
        max_streams: 2,
        ..Config::default()
    };
    let (a, b) = pair_over_io(Config::default(), small.clone(), 64 * 1024).await;
    let _s1 = connected(&a, &b, "exec").await;
    let _s2 = connected(&a, &b, "exec").await;
    // b is at its limit: it refuses with 429 without asking its user.
    assert!(matches!(
        a.open("exec").await,
        Err(OpenError::Refused { code: 429, .. })
    ));
    // And b cannot open more itself.
    assert!(matches!(
        b.open("exec").await,
        Err(OpenError::TooManyStreams(2))
    ));
    assert!(matches!(a.open("").await, Err(OpenError::InvalidTarget(_))));
}

#[tokio::test]
async fn a_slow_reader_holds_at_most_its_window_and_the_writer_waits() {
    let (a, b) = pair_over_io(Config::default(), Config::default(), 64 * 1024).await;
    let (mut x, mut y) = connected(&a, &b, "sync").await;
    let total = 4 * 1024 * 1024;
    let writer = tokio::spawn(async move {
        x.write_all(&pattern_bytes(9, 0, total)).await.unwrap();
        x.shutdown().await.unwrap();
        x
    });
    // Nobody reads: the writer stops when the initial window is full.
    timeout(LONG, async {
        while b.stats().buffered < INITIAL_WINDOW as usize {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished());
    assert_eq!(b.stats().buffered, INITIAL_WINDOW as usize);
    let mut got = Vec::new();
    y.read_to_end(&mut got).await.unwrap();
    assert!(got == pattern_bytes(9, 0, total));
    let _x = writer.await.unwrap();
    // A reader that kept up grew the window, within the budget.
    let stats = b.stats();
    assert!(stats.committed > INITIAL_WINDOW as usize, "{stats:?}");
    assert!(stats.committed <= Config::default().memory_budget);
}

#[tokio::test]
async fn the_memory_budget_caps_window_growth() {
    let config = Config {
        max_streams: 2,
        memory_budget: 2 * INITIAL_WINDOW as usize + 100_000,
        ..Config::default()
    };
    let (a, b) = pair_over_io(config.clone(), config.clone(), 64 * 1024).await;
    let (mut x, mut y) = connected(&a, &b, "sync").await;
    let writer = async {
        x.write_all(&pattern_bytes(4, 0, 8 * 1024 * 1024))
            .await
            .unwrap();
        x.shutdown().await.unwrap();
    };
    let reader = async {
        let mut got = Vec::new();
        y.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::join!(writer, reader);
    assert_eq!(got.len(), 8 * 1024 * 1024);
    let stats = b.stats();
    assert!(stats.committed <= config.memory_budget, "{stats:?}");
    assert_eq!(
        stats.committed,
        INITIAL_WINDOW as usize + 100_000,
        "{stats:?}"
    );
}

#[tokio::test]
async fn sessions_with_an_idle_but_alive_peer_stay_up_and_measure_rtt() {
    let (a, b) = pair_over_io(quick(), quick(), 64 * 1024).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(!a.is_closed() && !b.is_closed());
    assert!(a.stats().rtt.is_some());
    let (mut x, mut y) = connected(&a, &b, "exec").await;
    x.write_all(b"still here").await.unwrap();
    let mut buf = [0u8; 10];
    y.read_exact(&mut buf).await.unwrap();
}
