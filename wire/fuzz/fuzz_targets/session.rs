//! A session against a peer that sends arbitrary frames (valid or not, and
//! raw garbage), while the local side opens, accepts, reads, writes, shuts
//! down, resets and drops streams. Nothing may panic or hang; buffered bytes
//! stay within the windows and the memory budget; a broken rule ends the
//! session with an error.
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::{BufMut, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use psbx_wire::frame::Frame;
use psbx_wire::mux::INITIAL_WINDOW;
use psbx_wire::{Config, Hello, Role, Session, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Arbitrary)]
enum PeerFrame {
    Open {
        stream: u8,
        target: String,
    },
    OpenOk {
        stream: u8,
    },
    OpenErr {
        stream: u8,
        code: u16,
        reason: String,
    },
    Data {
        stream: u8,
        len: u16,
    },
    Credit {
        stream: u8,
        bytes: u32,
    },
    Fin {
        stream: u8,
    },
    Rst {
        stream: u8,
        reason: String,
    },
    Ping(u64),
    Pong(u64),
    GoAway(String),
    Control(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
enum Step {
    Peer(PeerFrame),
    Garbage(Vec<u8>),
    Accept { refuse: bool },
    Open(String),
    Write { stream: u8, len: u16 },
    Read { stream: u8 },
    Shutdown { stream: u8 },
    Reset { stream: u8 },
    Drop { stream: u8 },
    SendControl,
    RecvControl,
    GoAway,
    Idle { millis: u16 },
}

const MAX: usize = 4096;

fn config() -> Config {
    Config {
        max_frame_size: MAX,
        send_split: 1024,
        max_streams: 4,
        max_window: 512 * 1024,
        memory_budget: 4 * INITIAL_WINDOW as usize + 256 * 1024,
        send_queue: 8 * 1024,
        control_queue: 4,
        ..Config::default()
    }
}

fn peer_frame(frame: PeerFrame) -> Frame {
    let id = |s: u8| u32::from(s);
    match frame {
        PeerFrame::Open { stream, target } => Frame::Open {
            stream: id(stream),
            target,
        },
        PeerFrame::OpenOk { stream } => Frame::OpenOk { stream: id(stream) },
        PeerFrame::OpenErr {
            stream,
            code,
            reason,
        } => Frame::OpenErr {
            stream: id(stream),
            code,
            reason,
        },
        PeerFrame::Data { stream, len } => Frame::Data {
            stream: id(stream),
            data: Bytes::from(vec![7u8; usize::from(len) % (MAX + 2)]),
        },
        PeerFrame::Credit { stream, bytes } => Frame::Credit {
            stream: id(stream),
            bytes,
        },
        PeerFrame::Fin { stream } => Frame::Fin { stream: id(stream) },
        PeerFrame::Rst { stream, reason } => Frame::Rst {
            stream: id(stream),
            reason,
        },
        PeerFrame::Ping(opaque) => Frame::Ping { opaque },
        PeerFrame::Pong(opaque) => Frame::Pong { opaque },
        PeerFrame::GoAway(reason) => Frame::GoAway { reason },
        PeerFrame::Control(payload) => Frame::Control {
            payload: Bytes::from(payload),
        },
    }
}

/// Length-prefixed, without the encoder's checks: invalid frames go out too.
fn prefixed(frame: &Frame) -> BytesMut {
    let mut body = BytesMut::new();
    frame.encode(&mut body);
    let mut out = BytesMut::new();
    out.put_u32(body.len() as u32);
    out.put_slice(&body);
    out
}

fn check(session: &Session) {
    let stats = session.stats();
    let budget = config().memory_budget;
    assert!(
        stats.buffered <= stats.committed && stats.committed <= budget,
        "{stats:?}"
    );
    assert!(stats.streams <= config().max_streams, "{stats:?}");
}

async fn run(steps: Vec<Step>) {
    let (x, y) = tokio::io::duplex(16 * 1024);
    let (mut peer_read, mut peer_write) = tokio::io::split(y);
    let hello = Bytes::from(
        b"{\"type\":\"hello\",\"versions\":{\"min\":1,\"max\":1},\"software\":\"fuzz\"}".to_vec(),
    );
    peer_write
        .write_all(&prefixed(&Frame::Control { payload: hello }))
        .await
        .expect("hello");
    // Whatever the session sends is read and dropped, so it never blocks.
    tokio::spawn(async move {
        let mut sink = vec![0u8; 64 * 1024];
        while matches!(peer_read.read(&mut sink).await, Ok(n) if n > 0) {}
    });
    let session = Session::over_io(x, Role::Client, config(), Hello::new("fuzz-local"))
        .await
        .expect("handshake");
    let mut streams: Vec<Stream> = Vec::new();
    let wait = Duration::from_millis(1);
    let pick = |streams: &Vec<Stream>, i: u8| {
        if streams.is_empty() {
            None
        } else {
            Some(usize::from(i) % streams.len())
        }
    };
    for step in steps.into_iter().take(64) {
        match step {
            Step::Peer(frame) => {
                let _ = peer_write.write_all(&prefixed(&peer_frame(frame))).await;
            }
            Step::Garbage(bytes) => {
                let _ = peer_write.write_all(&bytes).await;
            }
            Step::Accept { refuse } => {
                if let Ok(Some(incoming)) = tokio::time::timeout(wait, session.accept()).await {
                    if refuse {
                        incoming.refuse(502, "fuzz");
                    } else {
                        streams.push(incoming.accept());
                    }
                }
            }
            Step::Open(target) => {
                if let Ok(Ok(stream)) = tokio::time::timeout(wait, session.open(&target)).await {
                    streams.push(stream);
                }
            }
            Step::Write { stream, len } => {
                if let Some(i) = pick(&streams, stream) {
                    let data = vec![1u8; usize::from(len)];
                    let _ = tokio::time::timeout(wait, streams[i].write(&data)).await;
                }
            }
            Step::Read { stream } => {
                if let Some(i) = pick(&streams, stream) {
                    let mut buf = [0u8; 3000];
                    let _ = tokio::time::timeout(wait, streams[i].read(&mut buf)).await;
                }
            }
            Step::Shutdown { stream } => {
                if let Some(i) = pick(&streams, stream) {
                    let _ = streams[i].shutdown().await;
                }
            }
            Step::Reset { stream } => {
                if let Some(i) = pick(&streams, stream) {
                    streams[i].reset("fuzz");
                }
            }
            Step::Drop { stream } => {
                if let Some(i) = pick(&streams, stream) {
                    drop(streams.swap_remove(i));
                }
            }
            Step::SendControl => {
                let _ = tokio::time::timeout(wait, session.send_control(&"fuzz")).await;
            }
            Step::RecvControl => {
                let _ = tokio::time::timeout(wait, session.recv_control::<String>()).await;
            }
            Step::GoAway => session.goaway("fuzz"),
            Step::Idle { millis } => {
                tokio::time::sleep(Duration::from_millis(u64::from(millis))).await
            }
        }
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        check(&session);
    }
    drop(streams);
    check(&session);
}

fuzz_target!(|steps: Vec<Step>| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(run(steps));
});
