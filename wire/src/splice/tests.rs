//! `join` between two sessions' streams, as the server joins a box's stream
//! to the one it opened to a connector: each `FIN` and each `RST` passes on
//! in both directions, a cancellation resets both ends with its reason, and
//! the counted direction is counted while the bytes pass. And `splice_until`
//! cancelled under a live TCP connection.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::{Moved, join, join_counted, splice_until};
use crate::mux::StreamError;
use crate::testing::session_pair;
use crate::{Config, Session, Stream};

const LONG: Duration = Duration::from_secs(10);

/// Opens a stream from `from` and accepts it on `to`.
async fn connected(from: &Session, to: &Session) -> (Stream, Stream) {
    let accept = async { to.accept().await.expect("incoming").accept() };
    let (opened, accepted) = tokio::join!(from.open("env:db.internal:5432"), accept);
    (opened.expect("open"), accepted)
}

/// The two outer ends, as the box and the connector hold them, and the
/// join between them on the "server" (both sessions kept alive).
struct Joined {
    near: Stream,
    far: Stream,
    joined: JoinHandle<std::io::Result<Moved>>,
    _sessions: [Session; 4],
}

/// `near` → server → `far`, the server's two streams joined; the join ends
/// early when `cancel` sends its reason; what `near` sends is added to `sent`.
async fn joined(cancel: oneshot::Receiver<&'static str>, sent: Arc<AtomicU64>) -> Joined {
    let (box_end, server_box) = session_pair(Config::default(), Config::default(), 1 << 16)
        .await
        .unwrap();
    let (server_conn, conn_end) = session_pair(Config::default(), Config::default(), 1 << 16)
        .await
        .unwrap();
    let (near, a) = connected(&box_end, &server_box).await;
    let (b, far) = connected(&server_conn, &conn_end).await;
    let joined = tokio::spawn(async move {
        let cancel = async { cancel.await.unwrap_or("the canceller went away") };
        join_counted(a, b, "server", &sent, cancel).await
    });
    Joined {
        near,
        far,
        joined,
        _sessions: [box_end, server_box, server_conn, conn_end],
    }
}

async fn reset_by_peer(stream: &mut Stream) -> std::io::Error {
    let mut buf = [0u8; 16];
    let err = timeout(LONG, stream.read(&mut buf))
        .await
        .expect("in time")
        .expect_err("a reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    let inner = err.get_ref().and_then(|e| e.downcast_ref::<StreamError>());
    assert!(
        matches!(inner, Some(StreamError::ResetByPeer(_))),
        "{inner:?}"
    );
    err
}

#[tokio::test]
async fn fin_passes_both_ways_and_each_half_closes_on_its_own() {
    let (_cancel, cancelled) = oneshot::channel();
    let sent = Arc::new(AtomicU64::new(0));
    let Joined {
        mut near,
        mut far,
        joined,
        _sessions,
    } = joined(cancelled, sent.clone()).await;

    near.write_all(b"select 1").await.unwrap();
    near.shutdown().await.unwrap();
    let mut got = Vec::new();
    timeout(LONG, far.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"select 1");
    // The box's FIN reached the far end; the other direction still works.
    far.write_all(b"1 row").await.unwrap();
    far.shutdown().await.unwrap();
    let mut back = Vec::new();
    timeout(LONG, near.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, b"1 row");

    let moved = timeout(LONG, joined).await.unwrap().unwrap().unwrap();
    assert_eq!(
        moved,
        Moved {
            to_target: 8,
            from_target: 5
        }
    );
    assert_eq!(sent.load(Ordering::Relaxed), 8);
    // Finished both ways: dropping the ends resets nothing.
    drop((near, far));
}

#[tokio::test]
async fn a_reset_at_the_near_end_reaches_the_far_end_with_its_reason() {
    let (_cancel, cancelled) = oneshot::channel();
    let Joined {
        mut near,
        mut far,
        joined,
        _sessions,
    } = joined(cancelled, Arc::default()).await;
    near.write_all(b"x").await.unwrap();
    let mut buf = [0u8; 1];
    far.read_exact(&mut buf).await.unwrap();
    near.reset("the program was killed");

    let err = reset_by_peer(&mut far).await;
    assert!(err.to_string().contains("the program was killed"), "{err}");
    let err = timeout(LONG, joined).await.unwrap().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

#[tokio::test]
async fn a_reset_at_the_far_end_reaches_the_near_end_also_after_its_fin() {
    let (_cancel, cancelled) = oneshot::channel();
    let Joined {
        mut near,
        mut far,
        joined,
        _sessions,
    } = joined(cancelled, Arc::default()).await;
    // The near end has finished its writes; the reset still reaches it.
    near.write_all(b"request").await.unwrap();
    near.shutdown().await.unwrap();
    let mut got = Vec::new();
    timeout(LONG, far.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"request");
    far.reset("connector: connection reset by the target");

    let err = reset_by_peer(&mut near).await;
    assert!(
        err.to_string()
            .contains("connector: connection reset by the target"),
        "{err}"
    );
    let err = timeout(LONG, joined).await.unwrap().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

#[tokio::test]
async fn a_cancelled_join_resets_both_ends_with_the_reason_and_counts_as_it_goes() {
    let (cancel, cancelled) = oneshot::channel();
    let sent = Arc::new(AtomicU64::new(0));
    let Joined {
        mut near,
        mut far,
        joined,
        _sessions,
    } = joined(cancelled, sent.clone()).await;
    near.write_all(b"12345").await.unwrap();
    let mut buf = [0u8; 5];
    far.read_exact(&mut buf).await.unwrap();
    // Counted while the streams are open.
    assert_eq!(sent.load(Ordering::Relaxed), 5);

    cancel.send("the address is no longer listed").unwrap();
    for end in [&mut near, &mut far] {
        let err = reset_by_peer(end).await;
        assert!(
            err.to_string().contains("the address is no longer listed"),
            "{err}"
        );
    }
    let err = timeout(LONG, joined).await.unwrap().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionAborted);
    assert_eq!(err.to_string(), "the address is no longer listed");
}

#[tokio::test]
async fn join_without_a_counter_passes_bytes_and_fin() {
    let (box_end, server_box) = session_pair(Config::default(), Config::default(), 1 << 16)
        .await
        .unwrap();
    let (server_conn, conn_end) = session_pair(Config::default(), Config::default(), 1 << 16)
        .await
        .unwrap();
    let (mut near, a) = connected(&box_end, &server_box).await;
    let (b, mut far) = connected(&server_conn, &conn_end).await;
    let joined = tokio::spawn(join(a, b, "server", std::future::pending::<&str>()));
    // More than a window's worth, so credit must flow back through the join.
    let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let writer = async {
        near.write_all(&sent).await.unwrap();
        near.shutdown().await.unwrap();
    };
    let reader = async {
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        far.shutdown().await.unwrap();
        got
    };
    let ((), got) = timeout(LONG, async { tokio::join!(writer, reader) })
        .await
        .unwrap();
    assert!(got == sent, "the bytes arrived changed");
    let mut end = Vec::new();
    near.read_to_end(&mut end).await.unwrap();
    assert!(end.is_empty());
    let moved = timeout(LONG, joined).await.unwrap().unwrap().unwrap();
    assert_eq!((moved.to_target, moved.from_target), (1_000_000, 0));
}

#[tokio::test]
async fn a_cancelled_splice_resets_the_stream_with_the_reason_and_the_tcp_connection() {
    let (boxd, server) = session_pair(Config::default(), Config::default(), 1 << 16)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut program = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (tcp, _) = listener.accept().await.unwrap();
    let (stream, mut far) = connected(&boxd, &server).await;
    let (cancel, cancelled) = oneshot::channel::<&'static str>();
    let spliced = tokio::spawn(async move {
        let cancel = async { cancelled.await.unwrap_or("gone") };
        splice_until(stream, tcp, "boxd", cancel).await
    });
    program.write_all(b"x").await.unwrap();
    let mut buf = [0u8; 1];
    far.read_exact(&mut buf).await.unwrap();

    cancel.send("the box took the address over").unwrap();
    let err = reset_by_peer(&mut far).await;
    assert!(
        err.to_string().contains("the box took the address over"),
        "{err}"
    );
    let read = timeout(LONG, program.read(&mut buf)).await.unwrap();
    assert_eq!(read.unwrap_err().kind(), ErrorKind::ConnectionReset);
    let err = timeout(LONG, spliced).await.unwrap().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionAborted);
}
