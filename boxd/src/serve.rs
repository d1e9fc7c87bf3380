//! boxd's side of the box channel: one wire session at a time over the
//! virtio-serial port (a new one whenever the server reconnects), and a task
//! per stream that serves the service its target names (`services`).
//! Before the first session, it restores what an earlier boxd of this boot
//! took from a claim or started: the environment's addresses (`privnet`), the
//! commands' environment and the background commands (`kept`).

use crate::port;
use crate::services::{self, Boxd, health};
use crate::settings::Settings;
use psbx_wire::Hello;
use psbx_wire::boxd::{BoxInfo, Service};
use psbx_wire::mux::{Config, Role, Session};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Sets up again what an earlier boxd of this boot kept (the commands'
/// environment, the background commands, the environment's addresses), then
/// serves the channel forever.
pub async fn run(path: PathBuf) -> std::io::Result<()> {
    match crate::net::up().await {
        Ok(Some(nic)) => println!(
            "boxd: network card up: {}/{} via {}",
            nic.address, nic.prefix, nic.gateway
        ),
        Ok(None) => println!("boxd: no network card"),
        Err(e) => eprintln!("boxd: {e}"),
    }
    let info = BoxInfo {
        protocol: psbx_wire::PROTOCOL_VERSION,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        boot_id: health::boot_id(),
        features: [
            Service::Health,
            Service::Exec,
            Service::Sync,
            Service::Processes,
            Service::Logs,
            Service::Clock,
            Service::Port(1),
            Service::Pty,
            Service::Shot,
            Service::Wire,
        ]
        .map(|s| s.feature().to_owned())
        .into_iter()
        .chain([psbx_wire::boxd::TAKE_OVER_FEATURE.to_owned()])
        .collect(),
    };
    let state = Arc::new(Boxd::restored(Settings::default(), info));
    state.private.start().await;
    state.private.restore(&state.uplink, state.work()).await;
    if let Some(aws) = crate::aws::restore() {
        match crate::aws::start(&aws, &state.uplink).await {
            Ok(()) => println!("boxd: restored the AWS role from {}", crate::aws::KEPT),
            Err(e) => eprintln!("boxd: cannot restore the AWS role: {e}"),
        }
    }
    serve_channel(|| port::PortIo::open(&path), &state).await
}

/// Serves one session after another over the port `open` opens (it is busy
/// while an earlier session's driver still holds it).
///
/// The port is one byte pipe under every server connection, and boxd cannot
/// see where one connection ends and the next begins: a guest paused right
/// after the server ended a session (a pool box) reads, on resume, that
/// session's goodbye and the next connection's hello at once, on the old
/// session. So a session ends without a word (`Session::abandon`: anything
/// boxd wrote would reach the next connection before its hello), and a hello
/// that arrived on it, whether it ended the session or came in while it
/// drained, is answered by the next one instead of waited for (it will not
/// come again: the server is waiting for boxd's).
async fn serve_channel<T, F>(mut open: F, state: &Arc<Boxd>) -> std::io::Result<()>
where
    F: FnMut() -> std::io::Result<T>,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let mut ended: Option<(Session, Option<Hello>)> = None;
    loop {
        let io = match open() {
            Ok(io) => io,
            // The previous session's driver may still hold the port.
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        // The earlier session's driver let go of the port: nothing more can
        // arrive on it, so the last hello it holds is the server's latest.
        let received = ended
            .take()
            .and_then(|(session, hello)| last_hello(&session).or(hello));
        let hello = Hello::new(format!("boxd {}", env!("CARGO_PKG_VERSION")));
        match Session::over_io_after(io, Role::Server, Config::default(), hello, received).await {
            Ok(session) => {
                state.uplink.set(session.clone());
                let hello = serve_session(&session, state).await;
                state.uplink.clear();
                session.abandon();
                ended = Some((session, hello));
            }
            // No server on the other end yet: try again shortly.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The last valid hello among the control messages an ended session holds.
fn last_hello(session: &Session) -> Option<Hello> {
    use futures_util::FutureExt;
    let mut last = None;
    while let Some(Some(message)) = session.recv_control::<Hello>().now_or_never() {
        if let Ok(hello) = message
            && hello.validate().is_ok()
        {
            last = Some(hello);
        }
    }
    last
}

/// Serves the session's streams until it ends; a control message ends it
/// too (the server sends none once connected: one is a new connection's
/// hello, returned to be answered).
async fn serve_session(session: &Session, state: &Arc<Boxd>) -> Option<Hello> {
    loop {
        tokio::select! {
            incoming = session.accept() => match incoming {
                Some(incoming) => {
                    let state = state.clone();
                    tokio::spawn(services::handle(incoming, state));
                }
                None => return None,
            },
            message = session.recv_control::<Hello>() => {
                return message.and_then(Result::ok).filter(|h| h.validate().is_ok());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::testing::{fetch, state};
    use psbx_wire::boxd::{self as proto, Record, SyncDone};

    async fn pair() -> Session {
        let (client, boxd) =
            psbx_wire::testing::session_pair(Config::default(), Config::default(), 1 << 16)
                .await
                .unwrap();
        tokio::spawn(async move { serve_session(&boxd, &state()).await });
        client
    }

    /// A virtio-serial port in a test: one byte pipe kept across sessions,
    /// which one session at a time holds (`EBUSY` meanwhile).
    #[derive(Clone)]
    struct TestPort(Arc<std::sync::Mutex<Option<tokio::io::DuplexStream>>>);

    /// The port held by a session; given back when dropped.
    struct Held(TestPort, Option<tokio::io::DuplexStream>);

    impl TestPort {
        fn open(&self) -> std::io::Result<Held> {
            match self.0.lock().unwrap().take() {
                Some(io) => Ok(Held(self.clone(), Some(io))),
                None => Err(std::io::Error::from_raw_os_error(nix::libc::EBUSY)),
            }
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            *self.0.0.lock().unwrap() = self.1.take();
        }
    }

    impl tokio::io::AsyncRead for Held {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(self.1.as_mut().unwrap()).poll_read(cx, buf)
        }
    }

    impl tokio::io::AsyncWrite for Held {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            data: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(self.1.as_mut().unwrap()).poll_write(cx, data)
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(self.1.as_mut().unwrap()).poll_flush(cx)
        }
        // The port outlives every session: a session's end closes nothing.
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn hello_frame(software: &str) -> psbx_wire::Frame {
        psbx_wire::Frame::Control {
            payload: serde_json::to_vec(&Hello::new(software)).unwrap().into(),
        }
    }

    /// Issue 30 item 4, the pool claim that failed: a pool box is paused
    /// right after the server ended its session, and on resume boxd reads
    /// that session's goodbye and the next connection's hello at once, on
    /// the old session. The next session answers that hello (the server
    /// waits for boxd's, and will not say hello again), and the old one
    /// leaves without a goodbye that would reach the new connection first.
    /// Before, the new connection read a GOAWAY where boxd's hello should be
    /// and its handshake failed, and boxd's next session waited for a hello
    /// that had gone.
    #[tokio::test]
    async fn a_hello_that_lands_on_the_old_session_is_answered_by_the_next() {
        use futures_util::{SinkExt, StreamExt};
        let (boxd_end, host_end) = tokio::io::duplex(1 << 16);
        let port = TestPort(Arc::new(std::sync::Mutex::new(Some(boxd_end))));
        let boxd = state();
        tokio::spawn(async move { serve_channel(move || port.open(), &boxd).await });
        let (mut source, mut sink) =
            psbx_wire::codec::framed_io(host_end, Config::default().max_frame_size);
        // The first connection: hellos both ways.
        sink.send(hello_frame("psbx first")).await.unwrap();
        let first = source.next().await.unwrap().unwrap();
        assert!(
            matches!(first, psbx_wire::Frame::Control { .. }),
            "{first:?}"
        );
        // Its goodbye and the next connection's hello, in one write.
        sink.feed(psbx_wire::Frame::GoAway {
            reason: "the session was closed".into(),
        })
        .await
        .unwrap();
        let host = Config {
            before_hello: psbx_wire::mux::BeforeHello::Skip,
            ..Config::default()
        };
        let (session, driver) =
            Session::handshake(source, sink, Role::Client, host, Hello::new("psbx second"))
                .await
                .expect("the second connection's handshake");
        tokio::spawn(driver.run());
        let info = tokio::time::timeout(Duration::from_secs(5), fetch(&session, "info", b""))
            .await
            .expect("boxd answers the second connection");
        let info: BoxInfo = serde_json::from_slice(&info).unwrap();
        assert_eq!(info.boot_id, "b");
    }

    #[tokio::test]
    async fn answers_info_and_runs_commands_with_the_configured_env() {
        let session = pair().await;
        let info: BoxInfo = serde_json::from_slice(&fetch(&session, "info", b"").await).unwrap();
        assert_eq!(info.boot_id, "b");
        let request = serde_json::to_vec(&proto::ExecRequest {
            cmd: "echo $SECRET; echo err >&2; exit 4".into(),
            cwd: "/tmp".into(),
            env: vec![],
            timeout_s: Some(10),
            background: false,
        })
        .unwrap();
        let mut bytes = fetch(&session, "exec", &request).await;
        let mut records = Vec::new();
        while let Some(r) = Record::decode(&mut bytes).unwrap() {
            records.push(r);
        }
        assert!(
            records.contains(&Record::Stdout(b"s3cr3t-value\n".to_vec())),
            "{records:?}"
        );
        assert!(
            records.contains(&Record::Stderr(b"err\n".to_vec())),
            "{records:?}"
        );
        assert_eq!(
            records.last(),
            Some(&Record::Exit(proto::Exit {
                code: Some(4),
                signal: None,
                timed_out: false,
                private_endpoint_errors: Vec::new(),
            }))
        );
    }

    #[tokio::test]
    async fn a_target_that_names_no_service_is_refused_with_404() {
        let session = pair().await;
        match session.open("nonsense").await {
            Err(psbx_wire::OpenError::Refused { code, reason }) => {
                assert_eq!(code, 404);
                assert_eq!(reason, "boxd has no service \"nonsense\"");
            }
            other => panic!("{other:?}"),
        }
        // The session goes on serving.
        let info: BoxInfo = serde_json::from_slice(&fetch(&session, "info", b"").await).unwrap();
        assert_eq!(info.boot_id, "b");
    }

    #[tokio::test]
    async fn unpacks_a_sync_and_says_so() {
        let session = pair().await;
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        h.set_path("hello.txt").unwrap();
        h.set_cksum();
        tar.append(&h, &b"hi\n"[..]).unwrap();
        let dest = format!("psbx-sync-test-{}", std::process::id());
        let mut body = format!("{{\"dest\":\"{dest}\"}}\n").into_bytes();
        body.extend(tar.into_inner().unwrap());
        let done: SyncDone = serde_json::from_slice(&fetch(&session, "sync", &body).await).unwrap();
        assert!(done.ok, "{done:?}");
        assert_eq!(done.files, 1);
        let written = std::env::temp_dir().join(&dest).join("hello.txt");
        assert_eq!(std::fs::read(&written).unwrap(), b"hi\n");
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&dest));
        let refused: SyncDone =
            serde_json::from_slice(&fetch(&session, "sync", b"{\"dest\":\"../x\"}\n").await)
                .unwrap();
        assert!(!refused.ok && refused.error.unwrap().contains("relative path"));
    }
}
