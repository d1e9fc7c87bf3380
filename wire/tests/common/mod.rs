//! Helpers shared by the multiplexer tests: connected session pairs over
//! both carriages, and a raw peer that speaks frames by hand.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use psbx_wire::codec::FrameCodec;
use psbx_wire::{Config, Frame, Hello, Role, Session};
use tokio::io::DuplexStream;
use tokio_util::codec::Framed;

/// Two connected sessions (client `a`, server `b`) over an in-memory byte
/// stream of `capacity` bytes each way.
pub async fn pair_over_io(a: Config, b: Config, capacity: usize) -> (Session, Session) {
    psbx_wire::testing::session_pair(a, b, capacity)
        .await
        .expect("a session pair")
}

/// Two connected sessions over channels of binary messages, standing in for
/// a WebSocket.
pub async fn pair_over_messages(a: Config, b: Config, buffer: usize) -> (Session, Session) {
    let (to_b, from_a) = futures_channel::mpsc::channel::<Bytes>(buffer);
    let (to_a, from_b) = futures_channel::mpsc::channel::<Bytes>(buffer);
    let (a, b) = tokio::join!(
        Session::over_messages(
            to_b,
            from_b.map(Ok::<_, std::io::Error>),
            Role::Client,
            a,
            Hello::new("test-a")
        ),
        Session::over_messages(
            to_a,
            from_a.map(Ok::<_, std::io::Error>),
            Role::Server,
            b,
            Hello::new("test-b")
        ),
    );
    (a.expect("session a"), b.expect("session b"))
}

/// Short timers, for liveness tests.
pub fn quick() -> Config {
    Config {
        ping_interval: Duration::from_millis(200),
        liveness_timeout: Duration::from_millis(1000),
        ..Config::default()
    }
}

pub const MAX: usize = 64 * 1024;

/// The far end of a session, speaking frames by hand over the length-prefixed
/// carriage.
pub type RawPeer = Framed<DuplexStream, FrameCodec>;

pub fn hello_frame(hello: &Hello) -> Frame {
    Frame::Control {
        payload: Bytes::from(serde_json::to_vec(hello).expect("hello json")),
    }
}

/// A client session and a raw server peer that has exchanged hellos with it.
pub async fn raw_peer(config: Config) -> (Session, RawPeer) {
    let (x, y) = tokio::io::duplex(1 << 20);
    let mut peer = Framed::new(y, FrameCodec::new(MAX));
    let greet = async {
        peer.send(hello_frame(&Hello::new("raw")))
            .await
            .expect("send hello");
        match peer.next().await {
            Some(Ok(Frame::Control { payload })) => {
                Hello::from_json(&payload).expect("session hello")
            }
            other => panic!("expected the session's hello, got {other:?}"),
        }
    };
    let (session, _) = tokio::join!(
        Session::over_io(x, Role::Client, config, Hello::new("test")),
        greet
    );
    (session.expect("session"), peer)
}

/// The next frame from the session that is not a `PING`.
pub async fn next_frame(peer: &mut RawPeer) -> Option<Frame> {
    loop {
        match peer.next().await {
            Some(Ok(Frame::Ping { .. })) => continue,
            Some(Ok(frame)) => return Some(frame),
            Some(Err(e)) => panic!("raw peer: {e}"),
            None => return None,
        }
    }
}

/// Byte `offset` of the test pattern `seed`: every offset differs enough
/// that a lost, duplicated or reordered chunk shows.
pub fn pattern(seed: u64, offset: usize) -> u8 {
    (seed
        .wrapping_mul(0x2545_F491_4F6C_DD1D)
        .wrapping_add(offset as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 56) as u8
}

pub fn pattern_bytes(seed: u64, offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len).map(|i| pattern(seed, i)).collect()
}
