//! The server's end of a box's channel: a task that keeps a wire session
//! (DESIGN.md §5) to boxd over the box's `boxd.sock` (libvirt's end of the
//! virtio-serial port), re-establishing it whenever it drops (server restart,
//! thaw) or boxd says hello on it again, and asks boxd for its [`BoxInfo`] on
//! every new session. Requests are streams: open a target, write a JSON
//! request, read the answer.
//!
//! It is not part of the BoxActor, which only holds one: the host makes
//! links (and answers the streams boxd opens on them), and exec, the
//! façades (`Boxes`: sync, shots, terminals) and the server open streams on
//! them.
//!
//! A boxd restarted inside the box (it crashed, was killed) does not end the
//! session by itself: the host's end of the port stays connected, and the new
//! boxd's hellos, arriving as control messages on the old session, keep it
//! alive (any frame counts), while the server's frames make each of its
//! handshakes fail. boxd sends no control messages once connected, so the
//! first one ends the session here, and the next connection meets the new
//! boxd.

use crate::hypervisor::Dial;
use psbx_wire::Hello;
use psbx_wire::boxd::{BoxInfo, Call, Done, Health, Service};
use psbx_wire::frame::code;
use psbx_wire::mux::{BeforeHello, Config, Incoming, Role, Session, Stream};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("boxd did not answer within {0:?}")]
    NoAnswer(Duration),
    #[error("the link to boxd is closed")]
    Closed,
    #[error("boxd refused {target}: {reason}")]
    Refused {
        target: String,
        reason: String,
        /// boxd's refusal code (`psbx_wire::frame::code`), when it refused.
        code: Option<u16>,
    },
    #[error("boxd's answer to {target} was not understood: {reason}")]
    BadAnswer { target: String, reason: String },
}

/// A session that is up, with what boxd said about itself on it.
#[derive(Clone)]
struct Up {
    session: Session,
    info: BoxInfo,
}

/// What the server does with a stream boxd opens (a box's connection to an
/// environment address).
pub type StreamHandler = std::sync::Arc<dyn Fn(Incoming) + Send + Sync>;

/// A live link to one box's boxd; dropping it ends the task.
pub struct BoxdLink {
    handle: LinkHandle,
    task: tokio::task::JoinHandle<()>,
}

/// What async code holds to talk over a link (cheap to clone); it stops
/// working once the [`BoxdLink`] is dropped.
#[derive(Clone)]
pub struct LinkHandle {
    up: watch::Receiver<Option<Up>>,
}

/// How soon a failed connection is retried.
const RECONNECT: Duration = Duration::from_millis(200);
/// How long a session handshake may take before the connection is retried:
/// short, because a boxd restored from a freeze may still be on its old session.
const HANDSHAKE: Duration = Duration::from_secs(3);
/// The largest JSON answer read from boxd.
const MAX_ANSWER: u64 = 4 << 20;
/// The longest `version`, `boot_id` and feature name kept from boxd's info:
/// they are stored and shown, and boxd is inside the box (untrusted).
pub const MAX_INFO_STRING: usize = 256;
/// The most feature names kept from boxd's info.
pub const MAX_FEATURES: usize = 64;

/// `s` cut to at most [`MAX_INFO_STRING`] bytes, on a character boundary.
fn clip(s: &mut String) -> bool {
    if s.len() <= MAX_INFO_STRING {
        return false;
    }
    let mut end = MAX_INFO_STRING;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

/// boxd's info with its strings cut to [`MAX_INFO_STRING`] bytes and at
/// most [`MAX_FEATURES`] features, with a warning when anything was cut.
fn bounded(mut info: BoxInfo, socket: &std::path::Path) -> BoxInfo {
    let mut cut = clip(&mut info.version) | clip(&mut info.boot_id);
    if info.features.len() > MAX_FEATURES {
        info.features.truncate(MAX_FEATURES);
        cut = true;
    }
    for feature in &mut info.features {
        cut |= clip(feature);
    }
    if cut {
        tracing::warn!(socket = %socket.display(), max_bytes = MAX_INFO_STRING, max_features = MAX_FEATURES,
            "boxd's info had over-long strings or too many features: cut");
    }
    info
}

/// The session settings of the box channel: a dead boxd is noticed in seconds.
fn config() -> Config {
    Config {
        ping_interval: Duration::from_secs(2),
        liveness_timeout: Duration::from_secs(8),
        // The port may still hold what boxd wrote to the previous
        // connection (a pool box paused right after its session ended).
        before_hello: BeforeHello::Skip,
        ..Config::default()
    }
}

impl BoxdLink {
    /// Starts connecting to `socket` (it may not exist yet: the domain is
    /// still starting).
    /// Streams boxd opens go to `streams` (refused without one).
    pub fn open(socket: PathBuf, streams: Option<StreamHandler>) -> Self {
        let dial = crate::hypervisor::unix_dial(&socket);
        Self::over(socket, dial, streams)
    }

    /// [`BoxdLink::open`] over the connections `dial` makes to the channel
    /// at `socket` (the hypervisor's: see [`crate::hypervisor`]).
    pub fn over(socket: PathBuf, dial: Dial, streams: Option<StreamHandler>) -> Self {
        let (tx, up) = watch::channel(None);
        let task = tokio::spawn(run(socket, dial, tx, streams));
        Self {
            handle: LinkHandle { up },
            task,
        }
    }

    pub fn handle(&self) -> LinkHandle {
        self.handle.clone()
    }
}

impl Drop for BoxdLink {
    fn drop(&mut self) {
        self.task.abort();
        // Handles cloned out of the link keep the session object alive: close
        // it now, so the connection to QEMU is released at once (its chardev
        // takes one client at a time).
        if let Some(up) = self.handle.up.borrow().as_ref() {
            up.session.close();
        }
    }
}

async fn run(
    socket: PathBuf,
    dial: Dial,
    up: watch::Sender<Option<Up>>,
    streams: Option<StreamHandler>,
) {
    loop {
        let Ok(stream) = dial().await else {
            tokio::time::sleep(RECONNECT).await;
            continue;
        };
        let hello = Hello::new(format!("psbx {}", env!("CARGO_PKG_VERSION")));
        let session = match tokio::time::timeout(
            HANDSHAKE,
            Session::over_io(stream, Role::Client, config(), hello),
        )
        .await
        {
            Ok(Ok(session)) => session,
            Ok(Err(e)) => {
                tracing::debug!(socket = %socket.display(), error = %e, "no session with boxd yet");
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
            Err(_) => {
                tracing::debug!(socket = %socket.display(), "boxd's hello did not come; reconnecting");
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
        };
        // boxd saying hello on this session before it answers means its
        // handshake never got ours (after a resume it can lose it while
        // changing sessions): the session is half open, try again at once.
        let info = tokio::select! {
            info = tokio::time::timeout(
                HANDSHAKE,
                fetch::<BoxInfo>(&session, Service::Info, None::<&()>),
            ) => info,
            Some(_) = session.recv_control::<serde_json::Value>() => Ok(Err(LinkError::Closed)),
        };
        match info {
            Ok(Ok(info)) => {
                let info = bounded(info, &socket);
                // The box's clock follows the host's (boot, thaw, restarts).
                let clock = psbx_wire::boxd::Clock::now();
                match tokio::time::timeout(
                    HANDSHAKE,
                    fetch::<Done>(&session, Service::Clock, Some(&clock)),
                )
                .await
                {
                    Ok(Ok(done)) if done.ok => {}
                    other => {
                        tracing::debug!(socket = %socket.display(), ?other, "boxd did not set its clock")
                    }
                }
                up.send_replace(Some(Up {
                    session: session.clone(),
                    info,
                }));
                let acceptor = tokio::spawn(accept_streams(session.clone(), streams.clone()));
                tokio::select! {
                    _ = session.closed() => {}
                    _ = session.recv_control::<serde_json::Value>() => {
                        tracing::info!(socket = %socket.display(), "boxd said hello again (it restarted); reconnecting");
                        session.close();
                    }
                }
                acceptor.abort();
                up.send_replace(None);
            }
            Ok(Err(e)) => {
                tracing::debug!(socket = %socket.display(), error = %e, "boxd's info failed");
                session.close();
            }
            Err(_) => {
                tracing::debug!(socket = %socket.display(), "boxd's info did not come");
                session.close();
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Hands every stream boxd opens to the handler, or refuses it.
async fn accept_streams(session: Session, streams: Option<StreamHandler>) {
    while let Some(incoming) = session.accept().await {
        match &streams {
            Some(handler) => handler(incoming),
            None => incoming.refuse(
                code::FORBIDDEN,
                "this box was not started in an environment",
            ),
        }
    }
}

/// Opens `target`, writes `request` as JSON (if any), half-closes, and reads
/// the whole answer as JSON.
async fn fetch<R: DeserializeOwned>(
    session: &Session,
    service: Service,
    request: Option<&impl Serialize>,
) -> Result<R, LinkError> {
    let target = service.target();
    let mut stream = open(session, service).await?;
    if let Some(request) = request {
        let body = serde_json::to_vec(request).map_err(|e| LinkError::BadAnswer {
            target: target.to_string(),
            reason: e.to_string(),
        })?;
        stream
            .write_all(&body)
            .await
            .map_err(|_| LinkError::Closed)?;
    }
    stream.shutdown().await.map_err(|_| LinkError::Closed)?;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .map_err(|_| LinkError::Closed)?;
    serde_json::from_slice(&answer).map_err(|e| LinkError::BadAnswer {
        target: target.into_owned(),
        reason: e.to_string(),
    })
}

/// Opens a stream to `service`. A session that ended or is ending under the
/// open (the box stopping or freezing, boxd restarting) is [`LinkError::Closed`],
/// as when the link was down before: callers such as `sandbox_status` treat it
/// as "not now", not as boxd refusing the service.
async fn open(session: &Session, service: Service) -> Result<Stream, LinkError> {
    let target = service.target();
    session.open(&target).await.map_err(|e| match e {
        psbx_wire::OpenError::Session(_) | psbx_wire::OpenError::GoingAway => LinkError::Closed,
        e => LinkError::Refused {
            target: target.to_string(),
            code: match &e {
                psbx_wire::OpenError::Refused { code, .. } => Some(*code),
                _ => None,
            },
            reason: e.to_string(),
        },
    })
}

impl LinkHandle {
    async fn up(&self, timeout: Duration) -> Result<Up, LinkError> {
        let mut up = self.up.clone();
        match tokio::time::timeout(timeout, up.wait_for(Option::is_some)).await {
            Ok(Ok(state)) => state.clone().ok_or(LinkError::Closed),
            Ok(Err(_)) => Err(LinkError::Closed),
            Err(_) => Err(LinkError::NoAnswer(timeout)),
        }
    }

    /// Waits for a session and returns what boxd said about itself on it.
    pub async fn hello(&self, timeout: Duration) -> Result<BoxInfo, LinkError> {
        Ok(self.up(timeout).await?.info)
    }

    /// Asks boxd how the box is: it is alive when this answers. A session
    /// that ends under the question (boxd's hello again, right after a
    /// resume) is not an answer: the next one is asked, within `timeout`.
    pub async fn ping(&self, timeout: Duration) -> Result<Health, LinkError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let up = self.up(left).await?;
            match tokio::time::timeout_at(
                deadline,
                fetch(&up.session, Service::Health, None::<&()>),
            )
            .await
            {
                Ok(Err(LinkError::Closed)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(RECONNECT).await;
                }
                Ok(answer) => return answer,
                Err(_) => return Err(LinkError::NoAnswer(timeout)),
            }
        }
    }

    /// A request and its answer, within `timeout`: [`Call`] ties both to
    /// the service, so neither can be the wrong one.
    pub async fn call<C: Call>(
        &self,
        request: &C,
        timeout: Duration,
    ) -> Result<C::Answer, LinkError> {
        self.request(C::SERVICE, request, timeout).await
    }

    /// A JSON request and its JSON answer, within `timeout`.
    async fn request<R: DeserializeOwned>(
        &self,
        service: Service,
        request: &impl Serialize,
        timeout: Duration,
    ) -> Result<R, LinkError> {
        let up = self.up(timeout).await?;
        tokio::time::timeout(timeout, fetch(&up.session, service, Some(request)))
            .await
            .map_err(|_| LinkError::NoAnswer(timeout))?
    }

    /// A stream to one of boxd's services, for callers that read or write
    /// more than one JSON value (exec, sync, logs).
    pub async fn open(&self, service: Service, timeout: Duration) -> Result<Stream, LinkError> {
        let up = self.up(timeout).await?;
        open(&up.session, service).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A boxd on the link's next connection that answers `info` with
    /// `boot_id`; its session.
    async fn boxd(listener: &UnixListener, boot_id: &str) -> Session {
        boxd_saying(
            listener,
            BoxInfo {
                protocol: psbx_wire::PROTOCOL_VERSION,
                version: "test".into(),
                boot_id: boot_id.into(),
                features: vec![],
            },
        )
        .await
    }

    /// A boxd on the link's next connection that answers `info` with `info`.
    async fn boxd_saying(listener: &UnixListener, info: BoxInfo) -> Session {
        let (stream, _) = listener.accept().await.unwrap();
        let hello = Hello::new("boxd test");
        let session = Session::over_io(stream, Role::Server, Config::default(), hello)
            .await
            .unwrap();
        let serving = session.clone();
        tokio::spawn(async move {
            while let Some(incoming) = serving.accept().await {
                let mut stream = incoming.accept();
                let _ = stream.read_to_end(&mut Vec::new()).await;
                let _ = stream.write_all(&serde_json::to_vec(&info).unwrap()).await;
                let _ = stream.shutdown().await;
            }
        });
        session
    }

    #[actix_rt::test]
    async fn a_hello_on_a_live_session_means_boxd_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("boxd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let link = BoxdLink::open(socket, None);
        let first = boxd(&listener, "first").await;
        let handle = link.handle();
        let wait = Duration::from_secs(5);
        assert_eq!(handle.hello(wait).await.unwrap().boot_id, "first");

        // A new boxd says hello over the same connection (the host's end of
        // the port never closed): the link connects again and meets it.
        first
            .send_control(&Hello::new("boxd test, restarted"))
            .await
            .unwrap();
        let _second = tokio::time::timeout(wait, boxd(&listener, "second"))
            .await
            .expect("the link connects again");
        psbx_tests::wait::until_async("the link to meet the second boxd", wait, async || {
            (handle.hello(wait).await.unwrap().boot_id == "second").then_some(())
        })
        .await;
        let _ = tokio::time::timeout(wait, first.closed())
            .await
            .expect("the first session ends");
    }

    /// L6: a boxd whose info carries a version of 1 MiB, a long
    /// boot id and many long features is cut to the limits.
    #[actix_rt::test]
    async fn over_long_info_strings_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("boxd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let link = BoxdLink::open(socket, None);
        // With the features, the answer stays under its 4 MiB limit.
        let huge = "v".repeat(1 << 20);
        let _boxd = boxd_saying(
            &listener,
            BoxInfo {
                protocol: psbx_wire::PROTOCOL_VERSION,
                version: huge,
                boot_id: "é".repeat(300),
                features: vec!["f".repeat(1000); 1000],
            },
        )
        .await;
        let info = link.handle().hello(Duration::from_secs(10)).await.unwrap();
        assert_eq!(info.version, "v".repeat(MAX_INFO_STRING));
        assert_eq!(info.boot_id, "é".repeat(MAX_INFO_STRING / 2));
        assert_eq!(info.features.len(), MAX_FEATURES);
        assert!(info.features.iter().all(|f| f.len() == MAX_INFO_STRING));
    }
}
