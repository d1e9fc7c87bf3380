//! What the connector's tests share: a fake psbx server (WebSocket on
//! 127.0.0.1 that checks the bearer token and runs wire sessions as the
//! server side), the real connector binary as a child process, a TCP echo
//! server, a DNS server that answers NXDOMAIN to everything, and an HTTP
//! CONNECT proxy. Everything listens on 127.0.0.1 only.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::result_large_err
)]

use std::future::Future;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::ready;
use futures_util::{SinkExt, StreamExt};
use psbx_tests::log::Log;
use psbx_tests::wait;
use psbx_wire::{Config, Hello, Role, Session};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

pub const TOKEN: &str = "psbx_conn_test_5ecr3t_value";

/// A session the fake server accepted, with what the connector sent.
pub struct Accepted {
    pub session: Session,
    pub user_agent: String,
    /// Cancelling it breaks the connection under the session, like a
    /// crashed server: no GOAWAY, no WebSocket close.
    pub kill: CancellationToken,
}

/// The fake psbx server.
pub struct FakeServer {
    pub addr: SocketAddr,
    sessions: mpsc::UnboundedReceiver<Accepted>,
    /// Upgrades refused with 401.
    pub refused: Arc<AtomicUsize>,
}

impl FakeServer {
    /// Listens on 127.0.0.1 for `ws://` (or `wss://` with `tls`).
    pub async fn start(token: &str, tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, token, tls)
    }

    /// Like [`FakeServer::start`], on a listener the caller made (to know
    /// the URL before the token).
    pub fn start_on(
        listener: TcpListener,
        token: &str,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let addr = listener.local_addr().unwrap();
        let (tx, sessions) = mpsc::unbounded_channel();
        let refused = Arc::new(AtomicUsize::new(0));
        let expected = format!("Bearer {token}");
        let counter = refused.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (tx, expected, counter, tls) =
                    (tx.clone(), expected.clone(), counter.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(tls) => {
                            if let Ok(io) = tls.accept(tcp).await {
                                serve_upgrade(io, &expected, &counter, &tx).await;
                            }
                        }
                        None => serve_upgrade(tcp, &expected, &counter, &tx).await,
                    }
                });
            }
        });
        Self {
            addr,
            sessions,
            refused,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next session the connector opens, within `within`.
    pub async fn next_session(&mut self, within: Duration) -> Accepted {
        tokio::time::timeout(within, self.sessions.recv())
            .await
            .expect("no session from the connector in time")
            .expect("the fake server stopped")
    }

    /// Whether a session arrives within `within`.
    pub async fn maybe_session(&mut self, within: Duration) -> Option<Accepted> {
        tokio::time::timeout(within, self.sessions.recv())
            .await
            .ok()
            .flatten()
    }
}

async fn serve_upgrade<S>(
    io: S,
    expected: &str,
    refused: &AtomicUsize,
    sessions: &mpsc::UnboundedSender<Accepted>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let kill = CancellationToken::new();
    let io = Killable {
        inner: io,
        killed: Box::pin(kill.clone().cancelled_owned()),
    };
    let user_agent = Arc::new(Mutex::new(String::new()));
    let seen = user_agent.clone();
    let check = move |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
        let headers = request.headers();
        *seen.lock().unwrap() = headers
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if request.uri().path() != "/v1/connect" {
            let mut refusal = ErrorResponse::new(Some("not found".into()));
            *refusal.status_mut() = StatusCode::NOT_FOUND;
            return Err(refusal);
        }
        if auth != expected {
            let mut refusal = ErrorResponse::new(Some("bad token".into()));
            *refusal.status_mut() = StatusCode::UNAUTHORIZED;
            return Err(refusal);
        }
        Ok(response)
    };
    let ws = match tokio_tungstenite::accept_hdr_async(io, check).await {
        Ok(ws) => ws,
        Err(_) => {
            refused.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    let (sink, stream) = ws.split();
    let sink = sink.with(|payload: Bytes| {
        ready(Ok::<_, tokio_tungstenite::tungstenite::Error>(
            Message::Binary(payload),
        ))
    });
    let stream = stream.filter_map(|m| {
        ready(match m {
            Ok(Message::Binary(payload)) => Some(Ok(payload)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
    });
    let hello = Hello::new("fake-psbx 0.0.0");
    if let Ok(session) =
        Session::over_messages(sink, stream, Role::Server, Config::tunnel(), hello).await
    {
        let user_agent = user_agent.lock().unwrap().clone();
        let _ = sessions.send(Accepted {
            session,
            user_agent,
            kill,
        });
    }
}

/// A connection that fails every read and write once killed.
struct Killable<S> {
    inner: S,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<S> Killable<S> {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.killed.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(io::ErrorKind::ConnectionReset, "killed")),
            Poll::Pending => Ok(()),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Killable<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Killable<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The real connector binary, killed when dropped. Its stderr is kept for
/// assertions (and echoed to the test's output).
pub struct Connector {
    child: Child,
    logs: Log,
    _files: Vec<tempfile::NamedTempFile>,
}

/// A hosts file mapping `db.test` to 127.0.0.1.
pub const HOSTS: &str = "127.0.0.1 db.test\n";

impl Connector {
    /// Starts the connector with only `vars` in its environment (nothing
    /// inherited: no proxy settings of the machine leak in). A hosts file
    /// (`HOSTS`) and the given DNS server are added unless `vars` set them.
    pub fn start(vars: &[(&str, String)]) -> Self {
        let mut files = Vec::new();
        let mut command = Command::new(env!("CARGO_BIN_EXE_psbx-connector"));
        command
            .env_clear()
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !vars.iter().any(|(k, _)| *k == "PSBX_HOSTS_FILE") {
            let mut hosts = tempfile::NamedTempFile::new().unwrap();
            hosts.write_all(HOSTS.as_bytes()).unwrap();
            command.env("PSBX_HOSTS_FILE", hosts.path());
            files.push(hosts);
        }
        if !vars.iter().any(|(k, _)| *k == "PSBX_DNS_SERVER") {
            // Nothing answers there: a test that reached DNS would fail
            // rather than query the machine's resolver.
            command.env("PSBX_DNS_SERVER", "127.0.0.1:9");
        }
        for (k, v) in vars {
            command.env(k, v);
            if *k == "PSBX_CONNECTOR_TOKEN" {
                psbx_tests::witness::secret(v);
            }
        }
        let mut child = command.spawn().unwrap();
        let logs = Log::capture(child.stderr.take().unwrap(), Some("[connector]"));
        Self {
            child,
            logs,
            _files: files,
        }
    }

    /// The usual variables for `server` with `token`, plus `extra`.
    pub fn for_server(server: &FakeServer, token: &str, extra: &[(&str, String)]) -> Self {
        let mut vars = vec![
            ("PSBX_URL", server.url()),
            ("PSBX_CONNECTOR_TOKEN", token.to_owned()),
        ];
        vars.extend(extra.iter().cloned());
        Self::start(&vars)
    }

    /// One session to `server`, dialing only what `allow` (PSBX_ALLOW) lists
    /// besides what is not reserved (loopback targets need listing).
    pub fn one_session_allowing(server: &FakeServer, token: &str, allow: String) -> Self {
        Self::for_server(
            server,
            token,
            &[("PSBX_SESSIONS", "1".into()), ("PSBX_ALLOW", allow)],
        )
    }

    pub fn logs(&self) -> String {
        self.logs.text()
    }

    /// Waits until the logs contain `needle` `times` times.
    pub async fn wait_for_log(&self, needle: &str, times: usize, within: Duration) {
        self.logs.wait_for_count(needle, times, within).await;
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn send_sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let child = &mut self.child;
        wait::until_async("the connector to exit", within, async || {
            child.try_wait().unwrap()
        })
        .await
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its token is in its environment, never in what it logs.
        self.logs.finish(Duration::from_secs(2));
        psbx_tests::witness::assert_unseen("the connector's log", &self.logs.text());
    }
}

/// A TCP echo server on 127.0.0.1: echoes until the client's EOF, then
/// writes `ECHO_TAIL`, shuts its write side down and reports the EOF.
pub struct Echo {
    pub port: u16,
    pub eofs: mpsc::UnboundedReceiver<usize>,
}

pub const ECHO_TAIL: &[u8] = b"|eof seen";

impl Echo {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, eofs) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut total = 0usize;
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match tcp.read(&mut buf).await {
                            Ok(0) => break,
                            Ok(n) => {
                                total += n;
                                if tcp.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                            Err(_) => return,
                        }
                    }
                    let _ = tx.send(total);
                    let _ = tcp.write_all(ECHO_TAIL).await;
                    let _ = tcp.shutdown().await;
                });
            }
        });
        Self { port, eofs }
    }
}

/// A port on 127.0.0.1 where nothing listens.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A DNS server on 127.0.0.1 (UDP) answering NXDOMAIN to every query,
/// and the count of queries it answered.
pub async fn nxdomain_dns() -> (SocketAddr, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let queries = Arc::new(AtomicUsize::new(0));
    let counter = queries.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 1500];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            if let Some(answer) = nxdomain(&buf[..n]) {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = socket.send_to(&answer, from).await;
            }
        }
    });
    (addr, queries)
}

/// The NXDOMAIN answer to a query: its header with QR, RA and RCODE 3,
/// and its question; no records (the OPT record of EDNS is dropped).
fn nxdomain(query: &[u8]) -> Option<Vec<u8>> {
    if query.len() < 12 || u16::from_be_bytes([query[4], query[5]]) != 1 {
        return None;
    }
    let mut end = 12;
    loop {
        let len = *query.get(end)? as usize;
        end += 1;
        if len == 0 {
            break;
        }
        end += len;
    }
    end += 4; // QTYPE, QCLASS
    if end > query.len() {
        return None;
    }
    let mut answer = query[..end].to_vec();
    answer[2] = 0x80 | (query[2] & 0x01); // QR, keep RD
    answer[3] = 0x80 | 0x03; // RA, NXDOMAIN
    answer[6..12].fill(0); // no answers, authorities or additionals
    Some(answer)
}

/// An HTTP CONNECT proxy on 127.0.0.1 that records each request header,
/// optionally requires Basic credentials, and tunnels to 127.0.0.1 on the
/// requested port whatever the host (so names need no DNS).
pub struct ConnectProxy {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub async fn start(basic: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let basic = basic.map(|b| format!("proxy-authorization: basic {b}"));
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (seen, basic) = (seen.clone(), basic.clone());
                tokio::spawn(async move {
                    let mut header = Vec::new();
                    let mut byte = [0u8; 1];
                    while !header.ends_with(b"\r\n\r\n") {
                        if client.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        header.push(byte[0]);
                    }
                    let header = String::from_utf8_lossy(&header).into_owned();
                    seen.lock().unwrap().push(header.clone());
                    if let Some(basic) = basic
                        && !header
                            .to_ascii_lowercase()
                            .contains(&basic.to_ascii_lowercase())
                    {
                        let _ = client
                            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                            .await;
                        return;
                    }
                    let port = header
                        .split_whitespace()
                        .nth(1)
                        .and_then(|t| t.rsplit_once(':'))
                        .and_then(|(_, p)| p.parse::<u16>().ok());
                    let Some(port) = port else { return };
                    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", port)).await else {
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .is_ok()
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Self { port, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Writes `data` to `stream`, shuts its write side down, and reads
/// everything back until EOF, concurrently.
pub async fn round_trip(stream: psbx_wire::Stream, data: Vec<u8>) -> Vec<u8> {
    let (mut read, mut write) = tokio::io::split(stream);
    let writer = async move {
        write.write_all(&data).await.unwrap();
        write.shutdown().await.unwrap();
        write
    };
    let reader = async move {
        let mut back = Vec::new();
        read.read_to_end(&mut back).await.unwrap();
        (read, back)
    };
    let (write, (read, back)) = tokio::join!(writer, reader);
    drop(read.unsplit(write));
    back
}
