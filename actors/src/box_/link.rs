//! The server's end of a box's channel: a task that keeps a connection to the
//! box's `boxd.sock` (libvirt's end of the virtio-serial port), asks for boxd's
//! hello whenever it (re)connects, and carries pings. The actor reads what the
//! task learned through a watch channel and never blocks on the socket itself.

use psbx_wire::control::{FromBoxd, Health, Hello, ToBoxd};
use psbx_wire::lines;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};

/// What the link knows right now.
#[derive(Debug, Clone, Default)]
pub struct LinkState {
    pub connected: bool,
    pub hello: Option<Hello>,
    /// The last pong: its sequence number and the health it carried.
    pub pong: Option<(u64, Health)>,
    /// Why the last connection ended, for diagnostics.
    pub last_error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("boxd did not say hello within {0:?}")]
    NoHello(Duration),
    #[error("boxd did not answer a ping within {0:?}")]
    NoPong(Duration),
    #[error("the link to boxd is closed")]
    Closed,
}

/// A live link to one box's boxd; dropping it ends the task.
pub struct BoxdLink {
    handle: LinkHandle,
    task: tokio::task::JoinHandle<()>,
}

/// What async code holds to talk over a link (cheap to clone); it stops
/// working once the [`BoxdLink`] is dropped.
#[derive(Clone)]
pub struct LinkHandle {
    state: watch::Receiver<LinkState>,
    outbox: mpsc::Sender<ToBoxd>,
    next_seq: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How often a connected link re-asks for a hello it has not had yet.
const HELLO_RETRY: Duration = Duration::from_millis(300);
/// How soon a failed connection is retried.
const RECONNECT: Duration = Duration::from_millis(200);

impl BoxdLink {
    /// Starts connecting to `socket` (it may not exist yet: the domain is
    /// still starting).
    pub fn open(socket: PathBuf) -> Self {
        let (state_tx, state) = watch::channel(LinkState::default());
        let (outbox, inbox) = mpsc::channel(16);
        let task = tokio::spawn(run(socket, state_tx, inbox));
        Self {
            handle: LinkHandle {
                state,
                outbox,
                next_seq: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1)),
            },
            task,
        }
    }

    pub fn handle(&self) -> LinkHandle {
        self.handle.clone()
    }
}

impl LinkHandle {
    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    /// Forgets the last hello, so [`Self::hello`] waits for a fresh one (after a
    /// thaw or a resume).
    pub async fn ask_hello(&self) -> Result<(), LinkError> {
        self.outbox
            .send(ToBoxd::HelloRequest)
            .await
            .map_err(|_| LinkError::Closed)
    }

    /// Waits for boxd's hello (a hello already received counts).
    pub async fn hello(&self, timeout: Duration) -> Result<Hello, LinkError> {
        let mut state = self.state.clone();
        let wait = state.wait_for(|s| s.hello.is_some());
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(s)) => s.hello.clone().ok_or(LinkError::Closed),
            Ok(Err(_)) => Err(LinkError::Closed),
            Err(_) => Err(LinkError::NoHello(timeout)),
        }
    }

    /// Sends a ping and waits for its pong: boxd is alive, here is its health.
    pub async fn ping(&self, timeout: Duration) -> Result<Health, LinkError> {
        let seq = self
            .next_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.outbox
            .send(ToBoxd::Ping { seq })
            .await
            .map_err(|_| LinkError::Closed)?;
        let mut state = self.state.clone();
        let wait = state.wait_for(|s| s.pong.as_ref().is_some_and(|(n, _)| *n >= seq));
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(s)) => s
                .pong
                .as_ref()
                .map(|(_, h)| h.clone())
                .ok_or(LinkError::Closed),
            Ok(Err(_)) => Err(LinkError::Closed),
            Err(_) => Err(LinkError::NoPong(timeout)),
        }
    }
}

impl Drop for BoxdLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(socket: PathBuf, state: watch::Sender<LinkState>, mut inbox: mpsc::Receiver<ToBoxd>) {
    loop {
        let stream = match UnixStream::connect(&socket).await {
            Ok(stream) => stream,
            Err(e) => {
                state.send_modify(|s| s.last_error = Some(format!("connect: {e}")));
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
        };
        state.send_modify(|s| {
            s.connected = true;
            s.hello = None;
        });
        let ended = serve(stream, &state, &mut inbox).await;
        state.send_modify(|s| {
            s.connected = false;
            s.last_error = Some(ended.clone());
        });
        if ended == "closed by the actor" {
            return;
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Runs one connection until it ends; returns why.
async fn serve(
    stream: UnixStream,
    state: &watch::Sender<LinkState>,
    inbox: &mut mpsc::Receiver<ToBoxd>,
) -> String {
    let (mut reader, mut writer) = stream.into_split();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut retry = tokio::time::interval(HELLO_RETRY);
    loop {
        tokio::select! {
            _ = retry.tick(), if state.borrow().hello.is_none() => {
                if let Err(e) = writer.write_all(&lines::encode(&ToBoxd::HelloRequest)).await {
                    return format!("write: {e}");
                }
            }
            message = inbox.recv() => {
                let Some(message) = message else { return "closed by the actor".to_owned() };
                if matches!(message, ToBoxd::HelloRequest) {
                    state.send_modify(|s| s.hello = None);
                }
                if let Err(e) = writer.write_all(&lines::encode(&message)).await {
                    return format!("write: {e}");
                }
            }
            read = reader.read(&mut chunk) => {
                let n = match read {
                    Ok(0) => return "boxd's channel closed".to_owned(),
                    Ok(n) => n,
                    Err(e) => return format!("read: {e}"),
                };
                buf.extend_from_slice(&chunk[..n]);
                match lines::decode_all::<FromBoxd>(&mut buf) {
                    Ok(messages) => {
                        for message in messages {
                            match message {
                                FromBoxd::Hello(hello) => state.send_modify(|s| s.hello = Some(hello)),
                                FromBoxd::Pong { seq, health } => {
                                    state.send_modify(|s| s.pong = Some((seq, health)))
                                }
                            }
                        }
                    }
                    Err(e) => return format!("boxd sent garbage: {e}"),
                }
            }
        }
    }
}
