//! An entry: boxd's listener on 127.0.0.1 for one environment address, or
//! one name linked to another box (the nftables rules send the address's
//! connections to it). Each connection it accepts becomes an
//! `env:<host>:<port>` (or `link:<host>:<port>`) stream opened on the current
//! session, and spliced to it (`psbx_wire::splice::splice_until`: FIN and
//! RST pass both ways). An entry the box's wiring no longer needs is closed:
//! it stops listening and resets the connections it carries (a name taken
//! over in place). When the stream cannot be had — refused by the server (403, 503, 502, ...), no
//! session, no answer — the box's connection is reset (SO_LINGER 0), a line
//! goes to `/work/.sbx/logs/private-endpoints.log` and the failure is counted.
//! When the session the stream went over ends (a thaw, a server restart), the
//! box's connection is reset at once rather than left hanging.

use crate::uplink::Uplink;
use psbx_wire::Endpoint;
use psbx_wire::boxd::{EndpointFailure, Outbound, PrivateEndpointHealth};
use psbx_wire::frame::code;
use psbx_wire::mux::OpenError;
use psbx_wire::splice::splice_until;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long the server may take to accept or refuse a stream (it waits for
/// the connector's dial, which has its own timeout, shorter than this).
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection waits for a session when there is none (right after
/// a thaw the server reconnects within a few seconds).
const SESSION_WAIT: Duration = Duration::from_secs(10);

/// One entry and its counters.
pub struct Entry {
    pub endpoint: Endpoint,
    /// A link to another box (`link:` streams), not an environment address.
    pub link: bool,
    pub local: SocketAddr,
    /// Cancelled when the entry is no longer needed.
    pub closed: CancellationToken,
    open: AtomicU32,
    opened: AtomicU64,
    failures: AtomicU64,
    last_failure: Mutex<Option<EndpointFailure>>,
}

impl Entry {
    /// The target of the streams its connections open.
    fn target(&self) -> String {
        if self.link {
            Outbound::Link(self.endpoint.clone()).target()
        } else {
            Outbound::Env(self.endpoint.clone()).target()
        }
    }

    pub fn health(&self) -> PrivateEndpointHealth {
        PrivateEndpointHealth {
            host: self.endpoint.host.to_string(),
            port: self.endpoint.port,
            local_ip: self.local.ip().to_string(),
            local_port: self.local.port(),
            open: self.open.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_failure: self
                .last_failure
                .lock()
                .ok()
                .and_then(|l| l.as_ref().map(|f| format!("{} {}", f.code, f.reason))),
        }
    }
}

/// Opens an entry for `endpoint` on 127.0.0.1 (an ephemeral port); `link`
/// for a name linked to another box.
pub async fn bind(endpoint: Endpoint, link: bool) -> std::io::Result<(Arc<Entry>, TcpListener)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let entry = Arc::new(Entry {
        endpoint,
        link,
        closed: CancellationToken::new(),
        local: listener.local_addr()?,
        open: AtomicU32::new(0),
        opened: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        last_failure: Mutex::new(None),
    });
    Ok((entry, listener))
}

/// Serves an entry's connections until it is closed.
pub async fn serve(
    entry: Arc<Entry>,
    listener: TcpListener,
    uplink: Uplink,
    log: PathBuf,
    failures: Arc<super::Failures>,
) {
    super::accept::until_closed(&listener, &entry.closed.clone(), |tcp| {
        let (entry, uplink, log, failures) =
            (entry.clone(), uplink.clone(), log.clone(), failures.clone());
        tokio::spawn(async move { connection(&entry, tcp, &uplink, &log, &failures).await });
    })
    .await;
}

/// Counts a connection as open while it lives.
struct OpenGuard<'a>(&'a AtomicU32);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(
    entry: &Entry,
    tcp: TcpStream,
    uplink: &Uplink,
    log: &PathBuf,
    failures: &super::Failures,
) {
    entry.opened.fetch_add(1, Ordering::Relaxed);
    entry.open.fetch_add(1, Ordering::Relaxed);
    let _open = OpenGuard(&entry.open);
    let target = entry.target();
    let Some(live) = uplink.current(SESSION_WAIT).await else {
        return fail(
            entry,
            failures,
            tcp,
            log,
            code::UNAVAILABLE,
            "boxd has no session with the server",
        );
    };
    let stream = match tokio::time::timeout(OPEN_TIMEOUT, live.session.open(&target)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(OpenError::Refused { code, reason })) => {
            return fail(entry, failures, tcp, log, code, &reason);
        }
        Ok(Err(e)) => return fail(entry, failures, tcp, log, e.code(), &e.to_string()),
        Err(_) => {
            return fail(
                entry,
                failures,
                tcp,
                log,
                code::TIMEOUT,
                &format!("the server did not answer within {OPEN_TIMEOUT:?}"),
            );
        }
    };
    let ended = async {
        tokio::select! {
            () = uplink.gone(live.generation) => "the box's connection ended",
            () = entry.closed.cancelled() => "the box took the address over",
        }
    };
    let _ = splice_until(stream, tcp, "boxd", ended).await;
}

/// Counts the failure, logs it, then resets the box's connection: a program
/// that reads the log after its connection failed finds the line there.
fn fail(
    entry: &Entry,
    failures: &super::Failures,
    tcp: TcpStream,
    log: &PathBuf,
    code: u16,
    reason: &str,
) {
    let failure = EndpointFailure {
        endpoint: entry.endpoint.clone(),
        code,
        reason: reason.replace(['\n', '\r'], " "),
    };
    // While the program still holds its side of the connection.
    let lineage = tcp.peer_addr().ok().and_then(super::owner::lineage_of);
    failures.push(failure.clone(), lineage);
    entry.failures.fetch_add(1, Ordering::Relaxed);
    let line = log_line(chrono::Utc::now(), &failure);
    if let Ok(mut last) = entry.last_failure.lock() {
        *last = Some(failure);
    }
    if let Err(e) = append(log, &line) {
        eprintln!("boxd: cannot write {}: {e}", log.display());
    }
    let _ = tcp.set_zero_linger();
    drop(tcp);
}

/// `<RFC 3339 time> <host>:<port> <code> <reason>` and a newline.
pub fn log_line(at: chrono::DateTime<chrono::Utc>, failure: &EndpointFailure) -> String {
    format!(
        "{} {failure}\n",
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

fn append(path: &PathBuf, line: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uplink::test_server;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn log_lines_have_time_address_code_and_reason() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-03-04T05:06:07.089Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            log_line(
                at,
                &EndpointFailure {
                    endpoint: "db.internal:5432".parse().unwrap(),
                    code: 503,
                    reason: "the connector \"aws\" of this environment is offline".into(),
                }
            ),
            "2026-03-04T05:06:07.089Z db.internal:5432 503 the connector \"aws\" of this environment is offline\n"
        );
    }

    async fn entry_for(uplink: &Uplink, log: &std::path::Path) -> Arc<Entry> {
        let endpoint: Endpoint = "db.internal:5432".parse().unwrap();
        let (entry, listener) = bind(endpoint, false).await.unwrap();
        tokio::spawn(serve(
            entry.clone(),
            listener,
            uplink.clone(),
            log.to_owned(),
            Arc::default(),
        ));
        entry
    }

    #[tokio::test]
    async fn a_refused_stream_resets_the_connection_logs_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/private-endpoints.log");
        let (uplink, _server) = test_server(|incoming| {
            assert_eq!(incoming.target(), "env:db.internal:5432");
            incoming.refuse(
                code::UNAVAILABLE,
                "the connector \"aws\" of this environment is offline",
            );
        })
        .await;
        let entry = entry_for(&uplink, &log).await;
        let mut tcp = TcpStream::connect(entry.local).await.unwrap();
        let mut buf = [0u8; 16];
        let read = tcp.read(&mut buf).await;
        assert_eq!(
            read.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionReset
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.ends_with(
                " db.internal:5432 503 the connector \"aws\" of this environment is offline\n"
            ),
            "{text}"
        );
        let health = entry.health();
        assert_eq!((health.opened, health.failures, health.open), (1, 1, 0));
        assert_eq!(
            health.last_failure.as_deref(),
            Some("503 the connector \"aws\" of this environment is offline")
        );
        assert_eq!(health.local_ip, "127.0.0.1");
    }

    #[tokio::test]
    async fn an_accepted_stream_copies_both_ways_and_a_new_session_resets_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("private-endpoints.log");
        // The server's end echoes what it gets, upper-cased.
        let (uplink, _server) = test_server(|incoming| {
            let mut stream = incoming.accept();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        let _ = stream.shutdown().await;
                        return;
                    }
                    let _ = stream.write_all(&buf[..n].to_ascii_uppercase()).await;
                }
            });
        })
        .await;
        let entry = entry_for(&uplink, &log).await;
        let mut tcp = TcpStream::connect(entry.local).await.unwrap();
        tcp.write_all(b"select 1").await.unwrap();
        let mut buf = [0u8; 8];
        tcp.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"SELECT 1");
        // Half-close: the far end finishes, the box's side sees EOF.
        tcp.shutdown().await.unwrap();
        assert_eq!(tcp.read(&mut buf).await.unwrap(), 0);

        // A connection open when the session is replaced is reset at once.
        let mut tcp = TcpStream::connect(entry.local).await.unwrap();
        tcp.write_all(b"x").await.unwrap();
        tcp.read_exact(&mut buf[..1]).await.unwrap();
        assert_eq!(entry.health().open, 1);
        uplink.clear();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(
            read.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionReset
        );
        assert!(!log.exists());
        let health = entry.health();
        assert_eq!((health.opened, health.failures), (2, 0));
    }

    #[tokio::test]
    async fn a_closed_entry_resets_its_connections_and_stops_listening() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("private-endpoints.log");
        let (uplink, _server) = test_server(|incoming| {
            assert_eq!(incoming.target(), "env:db.internal:5432");
            let mut stream = incoming.accept();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        })
        .await;
        let entry = entry_for(&uplink, &log).await;
        let mut tcp = TcpStream::connect(entry.local).await.unwrap();
        tcp.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        tcp.read_exact(&mut buf).await.unwrap();
        entry.closed.cancel();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(
            read.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionReset
        );
        // The listener goes with the serving task.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(TcpStream::connect(entry.local).await.is_err());
        assert!(!log.exists(), "a take-over is not a failure");
    }
}
