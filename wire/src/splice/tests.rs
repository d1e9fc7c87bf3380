//! `join` between two sessions' streams, as the server joins a box's stream
//! to the one it opened to a connector: each `FIN` and each `RST` passes on
//! in both directions, a cancellation resets both ends with its reason, and
//! the counted direction is counted while the bytes pass. And `splice_until`
//! cancelled under a live TCP connection.

use std::io::{self, ErrorKind};
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

async fn pair() -> (Session, Session) {
    session_pair(Config::default(), Config::default(), 1 << 16)
        .await
        .unwrap()
}

/// Opens a stream from `from` and accepts it on `to`.
async fn connected(from: &Session, to: &Session) -> (Stream, Stream) {
    let accept = async { to.accept().await.expect("incoming").accept() };
    let (opened, accepted) = tokio::join!(from.open("env:db.internal:5432"), accept);
    (opened.expect("open"), accepted)
}

/// A box's stream to the "server" (`near` → `a`) and the server's stream to
/// a connector (`b` → `far`), the four sessions kept alive.
struct Ends {
    near: Stream,
    a: Stream,
    b: Stream,
    far: Stream,
    sessions: [Session; 4],
}

async fn ends() -> Ends {
    let (box_end, server_box) = pair().await;
    let (server_conn, conn_end) = pair().await;
    let (near, a) = connected(&box_end, &server_box).await;
    let (b, far) = connected(&server_conn, &conn_end).await;
    Ends {
        near,
        a,
        b,
        far,
        sessions: [box_end, server_box, server_conn, conn_end],
    }
}

/// The two outer ends and the server's join between them, which ends early
/// when `cancel` sends its reason and adds what `near` sends to `sent`.
struct Joined {
    near: Stream,
    far: Stream,
    joined: JoinHandle<io::Result<Moved>>,
    cancel: oneshot::Sender<&'static str>,
    sent: Arc<AtomicU64>,
    _sessions: [Session; 4],
}

impl Joined {
    async fn new() -> Self {
        let Ends {
            near,
            a,
            b,
            far,
            sessions,
        } = ends().await;
        let (cancel, cancelled) = oneshot::channel();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let joined = tokio::spawn(async move {
            let cancel = async { cancelled.await.unwrap_or("the canceller went away") };
            join_counted(a, b, "server", &counter, cancel).await
        });
        Self {
            near,
            far,
            joined,
            cancel,
            sent,
            _sessions: sessions,
        }
    }

    /// How the join ended, when it failed.
    async fn failed(self) -> io::Error {
        timeout(LONG, self.joined)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err()
    }
}

async fn read_all(stream: &mut Stream) -> Vec<u8> {
    let mut got = Vec::new();
    timeout(LONG, stream.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    got
}

/// Reads the peer's reset off `stream` and checks it carries `reason`.
async fn reset_by_peer(stream: &mut Stream, reason: &str) {
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
    assert!(err.to_string().contains(reason), "{err}");
}

#[tokio::test]
async fn fin_passes_both_ways_and_each_half_closes_on_its_own() {
    let mut j = Joined::new().await;
    j.near.write_all(b"select 1").await.unwrap();
    j.near.shutdown().await.unwrap();
    assert_eq!(read_all(&mut j.far).await, b"select 1");
    // The box's FIN reached the far end; the other direction still works.
    j.far.write_all(b"1 row").await.unwrap();
    j.far.shutdown().await.unwrap();
    assert_eq!(read_all(&mut j.near).await, b"1 row");

    let moved = timeout(LONG, j.joined).await.unwrap().unwrap().unwrap();
    assert_eq!(
        moved,
        Moved {
            to_target: 8,
            from_target: 5
        }
    );
    assert_eq!(j.sent.load(Ordering::Relaxed), 8);
}

#[tokio::test]
async fn a_reset_at_the_near_end_reaches_the_far_end_with_its_reason() {
    let mut j = Joined::new().await;
    j.near.write_all(b"x").await.unwrap();
    j.far.read_exact(&mut [0u8; 1]).await.unwrap();
    j.near.reset("the program was killed");

    reset_by_peer(&mut j.far, "the program was killed").await;
    assert_eq!(j.failed().await.kind(), ErrorKind::ConnectionReset);
}

#[tokio::test]
async fn a_reset_at_the_far_end_reaches_the_near_end_also_after_its_fin() {
    let mut j = Joined::new().await;
    // The near end has finished its writes; the reset still reaches it.
    j.near.write_all(b"request").await.unwrap();
    j.near.shutdown().await.unwrap();
    assert_eq!(read_all(&mut j.far).await, b"request");
    j.far.reset("connector: connection reset by the target");

    reset_by_peer(&mut j.near, "connector: connection reset by the target").await;
    assert_eq!(j.failed().await.kind(), ErrorKind::ConnectionReset);
}

#[tokio::test]
async fn a_cancelled_join_resets_both_ends_with_the_reason_and_counts_as_it_goes() {
    let mut j = Joined::new().await;
    j.near.write_all(b"12345").await.unwrap();
    j.far.read_exact(&mut [0u8; 5]).await.unwrap();
    // Counted while the streams are open.
    assert_eq!(j.sent.load(Ordering::Relaxed), 5);

    let reason = "the address is no longer listed";
    let cancel = std::mem::replace(&mut j.cancel, oneshot::channel().0);
    cancel.send(reason).unwrap();
    reset_by_peer(&mut j.near, reason).await;
    reset_by_peer(&mut j.far, reason).await;
    let err = j.failed().await;
    assert_eq!(err.kind(), ErrorKind::ConnectionAborted);
    assert_eq!(err.to_string(), reason);
}

#[tokio::test]
async fn join_without_a_counter_passes_bytes_and_fin() {
    let Ends {
        mut near,
        a,
        b,
        mut far,
        sessions: _sessions,
    } = ends().await;
    let joined = tokio::spawn(join(a, b, "server", std::future::pending::<&str>()));
    // More than a window's worth, so credit must flow back through the join.
    let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let writer = async {
        near.write_all(&sent).await.unwrap();
        near.shutdown().await.unwrap();
    };
    let reader = async {
        let got = read_all(&mut far).await;
        far.shutdown().await.unwrap();
        got
    };
    let ((), got) = timeout(LONG, async { tokio::join!(writer, reader) })
        .await
        .unwrap();
    assert!(got == sent, "the bytes arrived changed");
    assert!(read_all(&mut near).await.is_empty());
    let moved = timeout(LONG, joined).await.unwrap().unwrap().unwrap();
    assert_eq!((moved.to_target, moved.from_target), (1_000_000, 0));
}

#[tokio::test]
async fn a_cancelled_splice_resets_the_stream_with_the_reason_and_the_tcp_connection() {
    let (boxd, server) = pair().await;
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
    reset_by_peer(&mut far, "the box took the address over").await;
    let read = timeout(LONG, program.read(&mut buf)).await.unwrap();
    assert_eq!(read.unwrap_err().kind(), ErrorKind::ConnectionReset);
    let err = timeout(LONG, spliced).await.unwrap().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionAborted);
}
