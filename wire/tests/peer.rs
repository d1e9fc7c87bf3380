//! A session against a peer that speaks frames by hand: liveness against a
//! silent peer, and every protocol violation or over-limit frame ending the
//! session with a clear error (and a GOAWAY saying why), never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use futures_util::SinkExt;
use psbx_wire::frame::{FrameError, FrameType};
use psbx_wire::mux::{INITIAL_WINDOW, ProtocolError};
use psbx_wire::{Config, Frame, Hello, Role, Session, SessionError};
use tokio::io::AsyncWriteExt;
use tokio::time::{Instant, timeout};

const LONG: Duration = Duration::from_secs(20);

async fn ended(session: &Session) -> SessionError {
    match timeout(LONG, session.closed())
        .await
        .expect("the session ended in time")
    {
        Ok(()) => panic!("the session ended cleanly"),
        Err(e) => e,
    }
}

/// The raw peer's view after the session ended: it said why in a GOAWAY.
async fn goodbye(peer: &mut RawPeer) -> String {
    loop {
        match timeout(LONG, next_frame(peer))
            .await
            .expect("goodbye in time")
        {
            Some(Frame::GoAway { reason }) => return reason,
            Some(_) => continue,
            None => panic!("the transport closed without a GOAWAY"),
        }
    }
}

#[tokio::test]
async fn a_silent_peer_is_detected_within_the_liveness_timeout() {
    let config = quick();
    let (session, _peer) = raw_peer(config.clone()).await;
    let start = Instant::now();
    let err = ended(&session).await;
    let took = start.elapsed();
    assert!(
        matches!(err, SessionError::Timeout(t) if t == config.liveness_timeout),
        "{err}"
    );
    assert!(
        took >= config.liveness_timeout - Duration::from_millis(50),
        "{took:?}"
    );
    assert!(
        took < config.liveness_timeout + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(err.to_string().contains("it is gone"), "{err}");
}

#[tokio::test]
async fn a_silent_peer_fails_open_streams_and_pending_opens() {
    let (session, mut peer) = raw_peer(quick()).await;
    peer.send(Frame::Open {
        stream: 2,
        target: "exec".into(),
    })
    .await
    .unwrap();
    let incoming = session.accept().await.unwrap();
    let mut stream = incoming.accept();
    let open = session.open("exec");
    let (opened, read) = tokio::join!(open, tokio::io::AsyncReadExt::read_u8(&mut stream));
    assert!(
        matches!(
            opened,
            Err(psbx_wire::OpenError::Session(SessionError::Timeout(_)))
        ),
        "{opened:?}"
    );
    assert_eq!(
        read.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionAborted
    );
}

#[tokio::test]
async fn a_peer_that_answers_pings_stays_alive() {
    let config = quick();
    let (session, mut peer) = raw_peer(config.clone()).await;
    let answer = async {
        let until = Instant::now() + 3 * config.liveness_timeout;
        while Instant::now() < until {
            match timeout(
                config.liveness_timeout,
                futures_util::StreamExt::next(&mut peer),
            )
            .await
            {
                Ok(Some(Ok(Frame::Ping { opaque }))) => {
                    peer.send(Frame::Pong { opaque }).await.unwrap()
                }
                Ok(other) => panic!("unexpected {other:?}"),
                Err(_) => panic!("no ping within the liveness timeout"),
            }
        }
    };
    answer.await;
    assert!(!session.is_closed());
    assert!(session.stats().rtt.is_some());
}

#[tokio::test]
async fn a_hello_that_never_comes_times_out() {
    let (x, _y) = tokio::io::duplex(4096);
    let result = Session::over_io(x, Role::Client, quick(), Hello::new("test")).await;
    assert!(
        matches!(result, Err(SessionError::Timeout(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_first_frame_that_is_not_a_hello_is_refused() {
    let (x, y) = tokio::io::duplex(4096);
    let mut peer = RawPeer::new(y, psbx_wire::codec::FrameCodec::new(MAX));
    peer.send(Frame::Ping { opaque: 1 }).await.unwrap();
    let result = Session::over_io(x, Role::Client, quick(), Hello::new("test")).await;
    assert!(
        matches!(
            result,
            Err(SessionError::Protocol(ProtocolError::NoHello(
                FrameType::Ping
            )))
        ),
        "{result:?}"
    );

    let (x, y) = tokio::io::duplex(4096);
    let mut peer = RawPeer::new(y, psbx_wire::codec::FrameCodec::new(MAX));
    peer.send(Frame::Control {
        payload: Bytes::from_static(br#"{"type":"exec"}"#),
    })
    .await
    .unwrap();
    let result = Session::over_io(x, Role::Client, quick(), Hello::new("test")).await;
    assert!(matches!(result, Err(SessionError::Hello(_))), "{result:?}");
}

/// A box's port carries leftovers of an earlier connection: with
/// `BeforeHello::Skip` they are skipped up to the hello; by default they
/// are refused (the test above).
#[tokio::test]
async fn frames_before_the_hello_are_skipped_when_the_pipe_may_hold_leftovers() {
    use psbx_wire::mux::BeforeHello;
    let (x, y) = tokio::io::duplex(4096);
    let mut peer = RawPeer::new(y, psbx_wire::codec::FrameCodec::new(MAX));
    peer.feed(Frame::GoAway {
        reason: "the session was closed".into(),
    })
    .await
    .unwrap();
    peer.feed(Frame::Ping { opaque: 1 }).await.unwrap();
    peer.send(hello_frame(&Hello::new("peer"))).await.unwrap();
    let config = Config {
        before_hello: BeforeHello::Skip,
        ..quick()
    };
    let session = Session::over_io(x, Role::Client, config, Hello::new("test"))
        .await
        .unwrap();
    assert_eq!(session.peer().software, "peer");
}

#[tokio::test]
async fn data_beyond_the_credit_ends_the_session() {
    let (session, mut peer) = raw_peer(Config::default()).await;
    peer.send(Frame::Open {
        stream: 2,
        target: "sync".into(),
    })
    .await
    .unwrap();
    let _stream = session.accept().await.unwrap().accept();
    assert_eq!(
        next_frame(&mut peer).await,
        Some(Frame::OpenOk { stream: 2 })
    );
    let chunk = Bytes::from(vec![1u8; 16 * 1024]);
    for _ in 0..INITIAL_WINDOW / (16 * 1024) {
        peer.feed(Frame::Data {
            stream: 2,
            data: chunk.clone(),
        })
        .await
        .unwrap();
    }
    peer.send(Frame::Data {
        stream: 2,
        data: Bytes::from_static(b"!"),
    })
    .await
    .unwrap();
    let err = ended(&session).await;
    assert!(
        matches!(
            err,
            SessionError::Protocol(ProtocolError::FlowControl {
                stream: 2,
                len: 1,
                credit: 0
            })
        ),
        "{err}"
    );
    assert!(goodbye(&mut peer).await.contains("credit"));
    // Memory held for the stream stayed within its window.
    assert!(session.stats().buffered <= INITIAL_WINDOW as usize);
}

#[tokio::test]
async fn an_oversize_length_ends_the_session() {
    let (session, peer) = raw_peer(Config::default()).await;
    let mut io = peer.into_inner();
    io.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 4])
        .await
        .unwrap();
    let err = ended(&session).await;
    assert!(
        matches!(err, SessionError::Frame(FrameError::TooLarge { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn a_frame_just_over_the_configured_maximum_ends_the_session() {
    let config = Config {
        max_frame_size: 2048,
        send_split: 1024,
        ..Config::default()
    };
    let (session, mut peer) = raw_peer(config).await;
    peer.send(Frame::Control {
        payload: Bytes::from(vec![b'1'; 2049]),
    })
    .await
    .unwrap();
    let err = ended(&session).await;
    assert!(
        matches!(
            err,
            SessionError::Frame(FrameError::TooLarge {
                len: 2049,
                max: 2048,
                ..
            })
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_malformed_frame_ends_the_session() {
    let (session, peer) = raw_peer(Config::default()).await;
    let mut io = peer.into_inner();
    let mut raw = BytesMut::new();
    raw.put_u32(6);
    raw.put_slice(&[0, 0, 0, 2, 42, 0]);
    io.write_all(&raw).await.unwrap();
    let err = ended(&session).await;
    assert!(
        matches!(err, SessionError::Frame(FrameError::UnknownType(42))),
        "{err}"
    );
}

#[tokio::test]
async fn a_transport_cut_inside_a_frame_ends_the_session() {
    let (session, peer) = raw_peer(Config::default()).await;
    let mut io = peer.into_inner();
    io.write_all(&[0, 0, 0, 20, 0, 0]).await.unwrap();
    drop(io);
    let err = ended(&session).await;
    assert!(matches!(err, SessionError::Transport(_)), "{err}");
}

async fn violation(frames: Vec<Frame>) -> SessionError {
    let (session, mut peer) = raw_peer(Config::default()).await;
    for frame in frames {
        peer.send(frame).await.unwrap();
    }
    let err = ended(&session).await;
    let reason = goodbye(&mut peer).await;
    assert!(reason.contains("protocol"), "{reason}");
    err
}

#[tokio::test]
async fn protocol_violations_end_the_session_with_a_clear_error() {
    let open = || Frame::Open {
        stream: 2,
        target: "exec".into(),
    };
    let cases: Vec<(Vec<Frame>, ProtocolError)> = vec![
        (
            vec![Frame::Data {
                stream: 4,
                data: Bytes::from_static(b"x"),
            }],
            ProtocolError::UnknownStream {
                stream: 4,
                kind: FrameType::Data,
            },
        ),
        (
            vec![Frame::Open {
                stream: 3,
                target: "exec".into(),
            }],
            ProtocolError::BadStreamId { stream: 3 },
        ),
        (
            vec![open(), open()],
            ProtocolError::BadStreamId { stream: 2 },
        ),
        (
            vec![
                open(),
                Frame::Fin { stream: 2 },
                Frame::Data {
                    stream: 2,
                    data: Bytes::from_static(b"x"),
                },
            ],
            ProtocolError::AfterEnd {
                stream: 2,
                kind: FrameType::Data,
            },
        ),
        (
            vec![open(), Frame::Fin { stream: 2 }, Frame::Fin { stream: 2 }],
            ProtocolError::AfterEnd {
                stream: 2,
                kind: FrameType::Fin,
            },
        ),
        (
            vec![
                open(),
                Frame::Credit {
                    stream: 2,
                    bytes: u32::MAX,
                },
            ],
            ProtocolError::CreditOverflow { stream: 2 },
        ),
        (
            vec![Frame::OpenOk { stream: 2 }],
            ProtocolError::Unexpected {
                stream: 2,
                kind: FrameType::OpenOk,
            },
        ),
        (
            vec![Frame::OpenOk { stream: 1 }],
            ProtocolError::UnknownStream {
                stream: 1,
                kind: FrameType::OpenOk,
            },
        ),
    ];
    for (frames, expected) in cases {
        match violation(frames).await {
            SessionError::Protocol(got) => assert_eq!(got, expected),
            other => panic!("expected {expected}, got {other}"),
        }
    }
}

#[tokio::test]
async fn unread_control_messages_beyond_the_queue_end_the_session() {
    let config = Config {
        control_queue: 4,
        ..Config::default()
    };
    let (session, mut peer) = raw_peer(config).await;
    for _ in 0..5 {
        peer.feed(Frame::Control {
            payload: Bytes::from_static(b"{}"),
        })
        .await
        .unwrap();
    }
    peer.flush().await.unwrap();
    let err = ended(&session).await;
    assert!(
        matches!(
            err,
            SessionError::Protocol(ProtocolError::ControlOverflow(4))
        ),
        "{err}"
    );
}

#[tokio::test]
async fn opens_beyond_the_stream_limit_are_refused_with_429() {
    let config = Config {
        max_streams: 1,
        ..Config::default()
    };
    let (session, mut peer) = raw_peer(config).await;
    peer.send(Frame::Open {
        stream: 2,
        target: "exec".into(),
    })
    .await
    .unwrap();
    peer.send(Frame::Open {
        stream: 4,
        target: "exec".into(),
    })
    .await
    .unwrap();
    match next_frame(&mut peer).await {
        Some(Frame::OpenErr {
            stream: 4,
            code: 429,
            ..
        }) => {}
        other => panic!("expected a 429, got {other:?}"),
    }
    let incoming = session.accept().await.unwrap();
    assert_eq!(incoming.id(), 2);
    // Frames for the refused stream are ignored: it was opened and is gone.
    peer.send(Frame::Data {
        stream: 4,
        data: Bytes::from_static(b"late"),
    })
    .await
    .unwrap();
    peer.send(Frame::Ping { opaque: 5 }).await.unwrap();
    assert_eq!(next_frame(&mut peer).await, Some(Frame::Pong { opaque: 5 }));
    assert!(!session.is_closed());
}

#[tokio::test]
async fn a_peer_reset_before_accepting_withdraws_the_stream() {
    let (session, mut peer) = raw_peer(Config::default()).await;
    peer.send(Frame::Open {
        stream: 2,
        target: "exec".into(),
    })
    .await
    .unwrap();
    peer.send(Frame::Rst {
        stream: 2,
        reason: "changed my mind".into(),
    })
    .await
    .unwrap();
    peer.send(Frame::Open {
        stream: 4,
        target: "sync".into(),
    })
    .await
    .unwrap();
    let incoming = session.accept().await.unwrap();
    assert_eq!(incoming.target(), "sync");
    assert_eq!(session.stats().streams, 1);
}

#[tokio::test]
async fn a_peer_that_floods_without_reading_ends_the_session() {
    let config = Config {
        max_streams: 1,
        send_queue: 16 * 1024,
        ..Config::default()
    };
    let (x, y) = tokio::io::duplex(4096);
    let mut peer = RawPeer::new(y, psbx_wire::codec::FrameCodec::new(MAX));
    peer.send(hello_frame(&Hello::new("raw"))).await.unwrap();
    let session = Session::over_io(x, Role::Client, config, Hello::new("test"))
        .await
        .unwrap();
    // Opens beyond the limit, each answered with an OPEN_ERR the peer never
    // reads: the answers pile up until the session gives up on the peer.
    let flood = async {
        let mut stream = 2;
        while !session.is_closed() {
            if peer
                .send(Frame::Open {
                    stream,
                    target: "exec".into(),
                })
                .await
                .is_err()
            {
                break;
            }
            stream += 2;
        }
    };
    timeout(LONG, flood)
        .await
        .expect("the session gave up in time");
    let err = ended(&session).await;
    assert!(matches!(err, SessionError::Stalled(_)), "{err}");
}

/// H1: with `peer_may_open: false` (the server's end of a connector
/// session) every OPEN is refused with 403 at once, and the 200 KiB sent
/// right after each OPEN is dropped: nothing is buffered or committed.
#[tokio::test]
async fn a_peer_that_may_not_open_streams_is_refused_and_nothing_is_buffered() {
    let config = Config::tunnel_server();
    let (session, mut peer) = raw_peer(config).await;
    let chunk = Bytes::from(vec![0x5a_u8; 50 * 1024]);
    for i in 0..10u32 {
        let stream = 2 + 2 * i;
        peer.send(Frame::Open {
            stream,
            target: "env:db.internal:5432".into(),
        })
        .await
        .unwrap();
        // 200 KiB, within the initial window, before any answer.
        for _ in 0..4 {
            peer.send(Frame::Data {
                stream,
                data: chunk.clone(),
            })
            .await
            .unwrap();
        }
    }
    for i in 0..10u32 {
        match timeout(LONG, next_frame(&mut peer)).await.unwrap() {
            Some(Frame::OpenErr {
                stream, code: 403, ..
            }) if stream == 2 + 2 * i => {}
            other => panic!(
                "expected OPEN_ERR 403 for stream {}, got {other:?}",
                2 + 2 * i
            ),
        }
    }
    // Everything was taken (a PING after it is answered) and none of it kept.
    peer.send(Frame::Ping { opaque: 9 }).await.unwrap();
    assert_eq!(next_frame(&mut peer).await, Some(Frame::Pong { opaque: 9 }));
    let stats = session.stats();
    assert_eq!(stats.buffered, 0, "{stats:?}");
    assert_eq!(stats.committed, 0, "{stats:?}");
    assert_eq!(stats.streams, 0, "{stats:?}");
    assert!(!session.is_closed());
    // Nothing waits to be accepted.
    assert!(
        timeout(Duration::from_millis(100), session.accept())
            .await
            .is_err()
    );
    // This end still opens streams itself.
    let open = session.open("exec");
    let answer = async {
        match next_frame(&mut peer).await {
            Some(Frame::Open { stream, .. }) => {
                peer.send(Frame::OpenOk { stream }).await.unwrap();
            }
            other => panic!("expected an OPEN, got {other:?}"),
        }
    };
    let (opened, ()) = tokio::join!(open, answer);
    opened.unwrap();
}
