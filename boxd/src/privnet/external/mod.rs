//! A declared service in external mode: boxd's HTTP proxy on 127.0.0.1 for
//! one `name:port` (the nftables rules send the name's connections on that
//! port to it). Every connection is served as HTTP/1.1 with keep-alive, and
//! each request goes to the box's external base URL (the user's own
//! deployment, `https://dev.example.com` or `http://203.0.113.5:8000/base`)
//! with the base's path put before the request's: method, headers and body
//! as they came, except `Host` (the base's authority), `X-Forwarded-Host`
//! (`name:port`), `X-Forwarded-Proto` (`http`) and the hop-by-hop headers
//! (RFC 9110 §7.6.1), which stay on their hop. An upgrade (WebSocket) goes
//! through: when the upstream answers `101`, both sides are upgraded and the
//! bytes are copied both ways.
//!
//! The upstream is reached over the box's own internet (plain sockets, the
//! system resolver), https with the system's roots (the image's
//! ca-certificates; webpki's when there are none). When it cannot be
//! reached the client gets a `502` that says which service, which URL and
//! what to do, and the failure is counted. Cancelling `closed` ends every
//! open connection at once, so that after a switch to box mode the clients
//! reconnect to the box's own process.
//!
//! Here: the service (`External`, its counters for health), `bind` and
//! `serve`, one task per connection of the box; `proxy.rs` what happens to
//! each request (the base URL joined, headers rewritten, the upgrade
//! tunnel, the 502 that says what to do); `client.rs` the upstream client,
//! which the box's STS calls use too (`crate::aws`).

mod client;
mod proxy;
#[cfg(test)]
mod tests;

pub(crate) use client::{Timed, system_roots, upstream_client};

use client::Upstream;
use hyper_util::rt::TokioIo;
use proxy::Base;
use psbx_wire::boxd::PrivateEndpointHealth;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long the upstream's connect (TCP, then TLS for https) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong setting up an external service.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error(
        "the external base URL {url:?} is not http(s)://host[:port][/path] ({reason}): give one like https://dev.example.com or http://203.0.113.5:8000/base"
    )]
    BadBaseUrl { url: String, reason: String },
    #[error("cannot open the proxy of {name}:{port} on 127.0.0.1: {source}")]
    Bind {
        name: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("cannot set up TLS for the external base URL: {0}")]
    Tls(#[source] rustls::Error),
}

/// One service in external mode, its proxy and its counters.
pub struct External {
    pub name: String,
    pub port: u16,
    /// The proxy's listener.
    pub local: SocketAddr,
    base: Base,
    client: Upstream,
    open: AtomicU32,
    opened: AtomicU64,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
}

impl External {
    /// What health reports: open and opened count the box's connections
    /// (an upgraded one counts as open while its tunnel lasts), failures the
    /// requests the upstream did not answer.
    pub fn health(&self) -> PrivateEndpointHealth {
        PrivateEndpointHealth {
            host: self.name.clone(),
            port: self.port,
            local_ip: self.local.ip().to_string(),
            local_port: self.local.port(),
            open: self.open.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_failure: self.last_failure.lock().ok().and_then(|l| l.clone()),
        }
    }
}

/// Opens the proxy of `name:port` on 127.0.0.1 (an ephemeral port), towards
/// `base_url`.
pub async fn bind(
    name: String,
    port: u16,
    base_url: &str,
) -> Result<(Arc<External>, TcpListener), ExternalError> {
    bind_with(name, port, base_url, system_roots(), CONNECT_TIMEOUT).await
}

/// [`bind`] with the roots https upstreams are checked against and the
/// connect timeout given.
async fn bind_with(
    name: String,
    port: u16,
    base_url: &str,
    roots: rustls::RootCertStore,
    connect_timeout: Duration,
) -> Result<(Arc<External>, TcpListener), ExternalError> {
    let base = Base::parse(base_url)?;
    let client = upstream_client(roots, connect_timeout).map_err(ExternalError::Tls)?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .and_then(|l| Ok((l.local_addr()?, l)));
    let (local, listener) = listener.map_err(|source| ExternalError::Bind {
        name: name.clone(),
        port,
        source,
    })?;
    let external = Arc::new(External {
        name,
        port,
        local,
        base,
        client,
        open: AtomicU32::new(0),
        opened: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        last_failure: Mutex::new(None),
    });
    Ok((external, listener))
}

/// Serves the proxy's connections until `closed` is cancelled, which also
/// ends every open connection and tunnel at once.
pub async fn serve(ext: Arc<External>, listener: TcpListener, closed: CancellationToken) {
    super::accept::until_closed(&listener, &closed, |tcp| {
        tokio::spawn(connection(ext.clone(), tcp, closed.clone()));
    })
    .await;
}

/// Counts a connection (or tunnel) as open while it lives.
struct OpenGuard(Arc<External>);

impl OpenGuard {
    fn new(ext: &Arc<External>) -> Self {
        ext.open.fetch_add(1, Ordering::Relaxed);
        Self(ext.clone())
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection of the box: HTTP/1.1 requests until either side ends it
/// or `closed` is cancelled.
async fn connection(ext: Arc<External>, tcp: TcpStream, closed: CancellationToken) {
    ext.opened.fetch_add(1, Ordering::Relaxed);
    let _open = OpenGuard::new(&ext);
    let _ = tcp.set_nodelay(true);
    let service = {
        let (ext, closed) = (ext.clone(), closed.clone());
        hyper::service::service_fn(move |request| {
            proxy::forward(ext.clone(), request, closed.clone())
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), service)
        .with_upgrades();
    tokio::select! {
        _ = served => {}
        () = closed.cancelled() => {}
    }
}
