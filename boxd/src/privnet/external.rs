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
// Until privnet wires it in (issue 18): remove then.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use psbx_wire::boxd::PrivateEndpointHealth;
use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
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

/// The external base URL, taken apart.
#[derive(Debug, Clone)]
struct Base {
    /// As it was given, for messages.
    url: String,
    scheme: Scheme,
    authority: Authority,
    /// The base's path without its trailing slash (empty for none).
    path: String,
}

impl Base {
    fn parse(url: &str) -> Result<Self, ExternalError> {
        let bad = |reason: &str| ExternalError::BadBaseUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| {
            bad(&format!("it does not parse as a URL: {e}"))
        })?;
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::HTTP,
            Some("https") => Scheme::HTTPS,
            Some(_) => return Err(bad("the scheme is neither http nor https")),
            None => return Err(bad("it has no scheme")),
        };
        let Some(authority) = uri.authority().cloned() else {
            return Err(bad("it has no host"));
        };
        if authority.as_str().contains('@') {
            return Err(bad("it has a user name or password"));
        }
        if authority.host().is_empty() {
            return Err(bad("it has no host"));
        }
        if authority.as_str().ends_with(':') {
            return Err(bad("its port is empty"));
        }
        if uri.query().is_some() || url.contains('?') {
            return Err(bad("it has a query"));
        }
        if url.contains('#') {
            return Err(bad("it has a fragment"));
        }
        Ok(Self {
            url: url.to_owned(),
            scheme,
            authority,
            path: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The upstream URL of a request for `path_and_query`: the base's path,
    /// then the request's (one slash between them), then its query.
    fn join(&self, path_and_query: Option<&PathAndQuery>) -> Result<Uri, hyper::http::Error> {
        let path = path_and_query
            .map(PathAndQuery::path)
            .filter(|p| p.starts_with('/'))
            .unwrap_or("/");
        let mut joined = format!("{}{path}", self.path);
        if let Some(query) = path_and_query.and_then(PathAndQuery::query) {
            joined.push('?');
            joined.push_str(query);
        }
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(joined)
            .build()
    }
}

type Upstream = Client<Timed, Incoming>;
type ProxyBody = BoxBody<Bytes, hyper::Error>;

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

    /// The `502` for a request the upstream did not answer; counted.
    fn failed(&self, error: &str) -> Response<ProxyBody> {
        let error = error.replace(['\n', '\r'], " ");
        self.failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_failure.lock() {
            *last = Some(format!("502 {error}"));
        }
        let body = failure_body(&self.name, self.port, &self.base.url, &error);
        let mut response = Response::new(full(body));
        *response.status_mut() = StatusCode::BAD_GATEWAY;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// The body of the `502` for `name:port` when forwarding to `base_url`
/// failed with `error`.
pub fn failure_body(name: &str, port: u16, base_url: &str, error: &str) -> String {
    format!(
        "{name}:{port} is in external mode: forwarding to {base_url} failed: {error}. Run the service in the box and switch it with sandbox_wire {{\"service\": \"{name}\", \"mode\": \"box\"}}"
    )
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

/// The system's roots (the image's ca-certificates), webpki's when the
/// system has none.
pub(crate) fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    roots
}

/// The upstream client: http and https (rustls with ring, `roots`),
/// HTTP/1.1, the system resolver, `connect_timeout` for TCP and TLS. Also
/// the client of the box's STS calls (`crate::aws`).
pub(crate) fn upstream_client<B>(
    roots: rustls::RootCertStore,
    connect_timeout: Duration,
) -> Result<Client<Timed, B>, rustls::Error>
where
    B: hyper::body::Body + Send,
    B::Data: Send,
{
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let timed = Timed {
        inner: https,
        limit: connect_timeout,
    };
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .build(timed))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The upstream connector with one time limit on the TCP connect and the
/// TLS handshake together (the HTTP connector's own covers the TCP connect
/// only: an upstream that accepts and never answers the handshake would
/// hold the request for ever).
#[derive(Clone)]
pub(crate) struct Timed {
    inner: HttpsConnector<HttpConnector>,
    limit: Duration,
}

impl tower_service::Service<Uri> for Timed {
    type Response = MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            tokio::time::timeout(limit, connecting)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "no connection within {}s (TCP connect and TLS handshake)",
                        limit.as_secs_f32()
                    )
                    .into())
                })
        })
    }
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
        hyper::service::service_fn(move |request| forward(ext.clone(), request, closed.clone()))
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

/// Sends one request upstream and its answer back.
async fn forward(
    ext: Arc<External>,
    mut request: Request<Incoming>,
    closed: CancellationToken,
) -> Result<Response<ProxyBody>, Infallible> {
    let upgrade = wants_upgrade(request.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    parts.uri = match ext.base.join(parts.uri.path_and_query()) {
        Ok(uri) => uri,
        Err(e) => return Ok(ext.failed(&format!("the request's path does not fit: {e}"))),
    };
    parts.version = hyper::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers, upgrade);
    let headers = &mut parts.headers;
    match HeaderValue::from_str(ext.base.authority.as_str()) {
        Ok(host) => {
            headers.insert(header::HOST, host);
        }
        Err(e) => return Ok(ext.failed(&format!("the base's host is no header value: {e}"))),
    }
    if let Ok(forwarded) = HeaderValue::from_str(&format!("{}:{}", ext.name, ext.port)) {
        headers.insert(HeaderName::from_static("x-forwarded-host"), forwarded);
    }
    headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static("http"),
    );
    let mut response = match ext.client.request(Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(e) => return Ok(ext.failed(&upstream_error(&e))),
    };
    let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switched {
        let Some(client_side) = client_side else {
            return Ok(
                ext.failed("the upstream switched protocols for a request that asked for none")
            );
        };
        let upstream_side = hyper::upgrade::on(&mut response);
        tokio::spawn(tunnel(ext.clone(), client_side, upstream_side, closed));
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers, switched);
    Ok(Response::from_parts(parts, body.boxed()))
}

/// Copies the bytes of an upgraded connection both ways, once both sides
/// are upgraded, until either ends or `closed` is cancelled.
async fn tunnel(
    ext: Arc<External>,
    client_side: hyper::upgrade::OnUpgrade,
    upstream_side: hyper::upgrade::OnUpgrade,
    closed: CancellationToken,
) {
    let _open = OpenGuard::new(&ext);
    let (Ok(client_side), Ok(upstream_side)) = tokio::join!(client_side, upstream_side) else {
        return;
    };
    let (mut client_side, mut upstream_side) =
        (TokioIo::new(client_side), TokioIo::new(upstream_side));
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client_side, &mut upstream_side) => {}
        () = closed.cancelled() => {}
    }
}

/// Whether the request asks for an upgrade: an `Upgrade` header and
/// `upgrade` among the `Connection` options.
fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && connection_options(headers).any(|o| o.eq_ignore_ascii_case("upgrade"))
}

fn connection_options(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|o| !o.is_empty())
}

/// Removes the headers meant for this hop only (RFC 9110 §7.6.1): those
/// the `Connection` header names, and `Connection`, `Proxy-Connection`,
/// `Keep-Alive`, `TE`, `Transfer-Encoding` and `Upgrade`. For an upgrade
/// (`keep_upgrade`), `Upgrade` stays and `Connection` becomes `upgrade`.
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = connection_options(headers)
        .filter_map(|o| HeaderName::from_bytes(o.as_bytes()).ok())
        .collect();
    for name in named {
        if !(keep_upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(name);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

/// What the upstream client's error says: its causes, `cannot connect`
/// before them for a connect error (rather than hyper-util's
/// `client error (Connect)`).
fn upstream_error(error: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error as _;
    match error.source() {
        Some(cause) if error.is_connect() => format!("cannot connect: {}", error_chain(cause)),
        _ => error_chain(error),
    }
}

/// An error and its causes, `: ` between them.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let more = e.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = e.source();
    }
    text
}

fn full(text: String) -> ProxyBody {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::Message;

    /// What the test upstream saw of a request, as its answer's body.
    #[derive(serde::Deserialize, Debug)]
    struct Seen {
        method: String,
        uri: String,
        host: Option<String>,
        forwarded_host: Option<String>,
        forwarded_proto: Option<String>,
        keep_alive: Option<String>,
        custom: Option<String>,
        body: String,
    }

    /// An upstream on 127.0.0.1 that answers every request with what it
    /// saw, status 201 and an `x-upstream` header. Stops with the token.
    async fn upstream(stop: CancellationToken) -> SocketAddr {
        serve_upstream(stop, None).await
    }

    /// The same upstream over https, with a self-signed certificate for
    /// 127.0.0.1, and the roots that trust it.
    async fn tls_upstream(stop: CancellationToken) -> (SocketAddr, rustls::RootCertStore) {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let cert = certified.cert.der().clone();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        (serve_upstream(stop, Some(acceptor)).await, roots)
    }

    async fn serve_upstream(
        stop: CancellationToken,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    () = stop.cancelled() => return,
                    a = listener.accept() => a.unwrap(),
                };
                let serving = hyper::server::conn::http1::Builder::new();
                let service = hyper::service::service_fn(echo);
                match &tls {
                    None => {
                        tokio::spawn(serving.serve_connection(TokioIo::new(tcp), service));
                    }
                    Some(acceptor) => {
                        let accepting = acceptor.accept(tcp);
                        tokio::spawn(async move {
                            // A client that refuses the certificate ends here.
                            if let Ok(tls) = accepting.await {
                                let _ = serving.serve_connection(TokioIo::new(tls), service).await;
                            }
                        });
                    }
                }
            }
        });
        at
    }

    /// Answers with what it saw of the request, status 201 and an
    /// `x-upstream` header.
    async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        let mut seen = serde_json::json!({
            "method": request.method().as_str(),
            "uri": request.uri().to_string(),
            "host": header("host"),
            "forwarded_host": header("x-forwarded-host"),
            "forwarded_proto": header("x-forwarded-proto"),
            "keep_alive": header("keep-alive"),
            "custom": header("x-custom"),
        });
        let body = request.into_body().collect().await?.to_bytes();
        seen["body"] = String::from_utf8(body.to_vec()).unwrap().into();
        Ok(Response::builder()
            .status(201)
            .header("x-upstream", "yes")
            .body(Full::new(Bytes::from(seen.to_string())))
            .unwrap())
    }

    /// A proxy for api.svc.local:3000 towards `base`, served until the
    /// returned token is cancelled (the guard cancels it on drop).
    async fn proxy(
        base: &str,
    ) -> (
        Arc<External>,
        tokio_util::sync::DropGuard,
        CancellationToken,
    ) {
        serve_proxy(bind("api.svc.local".into(), 3000, base).await.unwrap())
    }

    fn serve_proxy(
        (ext, listener): (Arc<External>, TcpListener),
    ) -> (
        Arc<External>,
        tokio_util::sync::DropGuard,
        CancellationToken,
    ) {
        let closed = CancellationToken::new();
        tokio::spawn(serve(ext.clone(), listener, closed.clone()));
        (ext, closed.clone().drop_guard(), closed)
    }

    fn test_client() -> Client<HttpConnector, Full<Bytes>> {
        Client::builder(TokioExecutor::new()).build(HttpConnector::new())
    }

    async fn send(
        ext: &External,
        method: &str,
        path: &str,
        body: &str,
    ) -> (StatusCode, HeaderMap, String) {
        let request = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", ext.local))
            .header("host", "api.svc.local:3000")
            .header("x-custom", "kept")
            .header("connection", "keep-alive, x-custom")
            .header("keep-alive", "timeout=5")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response =
            tokio::time::timeout(Duration::from_secs(20), test_client().request(request))
                .await
                .unwrap()
                .unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[test]
    fn base_urls_are_checked() {
        for good in [
            "https://dev.example.com",
            "http://203.0.113.5:8000/base",
            "http://203.0.113.5:8000/base/",
        ] {
            Base::parse(good).unwrap();
        }
        for bad in [
            "dev.example.com",
            "ftp://dev.example.com",
            "https://user:pw@dev.example.com",
            "https://dev.example.com/?q=1",
            "https://dev.example.com/#top",
            "https://dev.example.com:/",
            "/base",
            "",
        ] {
            let e = Base::parse(bad).unwrap_err();
            assert!(
                e.to_string()
                    .contains("is not http(s)://host[:port][/path]"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn paths_join_with_one_slash_and_keep_the_query() {
        let join = |base: &str, pq: &str| {
            Base::parse(base)
                .unwrap()
                .join(Some(&PathAndQuery::try_from(pq).unwrap()))
                .unwrap()
                .to_string()
        };
        assert_eq!(
            join("http://h:8000/base/", "/a/b?x=1&y"),
            "http://h:8000/base/a/b?x=1&y"
        );
        assert_eq!(join("http://h:8000/base", "/"), "http://h:8000/base/");
        assert_eq!(join("https://h", "/a"), "https://h/a");
        assert_eq!(join("https://h/", "/?q"), "https://h/?q");
    }

    #[tokio::test]
    async fn requests_go_to_the_base_with_host_rewritten_and_answers_come_back() {
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let up = upstream(stop).await;
        let base = format!("http://{up}/base/");
        let (ext, _guard, _) = proxy(&base).await;

        let (status, headers, body) = send(&ext, "POST", "/items/7?full=1&x=%20", "the body").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(headers.get("x-upstream").unwrap(), "yes");
        let seen: Seen = serde_json::from_str(&body).unwrap();
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.uri, "/base/items/7?full=1&x=%20");
        assert_eq!(seen.host.as_deref(), Some(up.to_string().as_str()));
        assert_eq!(seen.forwarded_host.as_deref(), Some("api.svc.local:3000"));
        assert_eq!(seen.forwarded_proto.as_deref(), Some("http"));
        // Hop-by-hop: Keep-Alive and the headers Connection names stay here.
        assert_eq!(seen.keep_alive, None);
        assert_eq!(seen.custom, None);
        assert_eq!(seen.body, "the body");

        let (status, _, body) = send(&ext, "GET", "/", "").await;
        assert_eq!(status, StatusCode::CREATED);
        let seen: Seen = serde_json::from_str(&body).unwrap();
        assert_eq!((seen.method.as_str(), seen.uri.as_str()), ("GET", "/base/"));

        let health = ext.health();
        assert_eq!((health.host.as_str(), health.port), ("api.svc.local", 3000));
        assert_eq!(health.local_ip, "127.0.0.1");
        assert_eq!(health.local_port, ext.local.port());
        assert_eq!((health.opened, health.failures), (2, 0));
    }

    #[tokio::test]
    async fn an_unreachable_upstream_gets_a_502_that_says_what_to_do() {
        // A port nothing listens on: bound, then closed.
        let gone = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let at = gone.local_addr().unwrap();
        drop(gone);
        let base = format!("http://{at}/base");
        let (ext, _guard, _) = proxy(&base).await;
        let (status, headers, body) = send(&ext, "GET", "/x", "").await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(
            headers.get("content-type").unwrap(),
            "text/plain; charset=utf-8"
        );
        let prefix =
            format!("api.svc.local:3000 is in external mode: forwarding to {base} failed: ");
        let suffix = ". Run the service in the box and switch it with sandbox_wire {\"service\": \"api.svc.local\", \"mode\": \"box\"}";
        assert!(body.starts_with(&prefix), "{body}");
        assert!(body.ends_with(suffix), "{body}");
        assert!(body.contains("Connection refused"), "{body}");
        let health = ext.health();
        assert_eq!(health.failures, 1);
        assert!(
            health.last_failure.as_deref().unwrap().starts_with("502 "),
            "{health:?}"
        );
    }

    // The handshake callback's type is tungstenite's, large error and all.
    #[allow(clippy::result_large_err)]
    #[tokio::test]
    async fn a_websocket_goes_through_both_ways() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let up = listener.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let seen = Arc::new(Mutex::new(None));
            let saw = seen.clone();
            let mut ws = tokio_tungstenite::accept_hdr_async(
                tcp,
                move |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                      response| {
                    *saw.lock().unwrap() = Some((
                        request.uri().to_string(),
                        request.headers().get("host").cloned(),
                        request.headers().get("x-forwarded-host").cloned(),
                    ));
                    Ok(response)
                },
            )
            .await
            .unwrap();
            while let Some(Ok(message)) = ws.next().await {
                if message.is_text() && ws.send(message).await.is_err() {
                    break;
                }
            }
            seen.lock().unwrap().clone()
        });
        let (ext, _guard, closed) = proxy(&format!("http://{up}/base")).await;

        let tcp = TcpStream::connect(ext.local).await.unwrap();
        let (mut ws, response) =
            tokio_tungstenite::client_async("ws://api.svc.local:3000/ws?room=1", tcp)
                .await
                .unwrap();
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        for text in ["hello", "again"] {
            ws.send(Message::text(text)).await.unwrap();
            let back = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert_eq!(back, Message::text(text));
        }
        assert!(ext.health().open >= 1);

        // The cancel ends the tunnel too.
        closed.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap();
        assert!(!matches!(ended, Some(Ok(Message::Text(_)))), "{ended:?}");
        let (uri, host, forwarded) = tokio::time::timeout(Duration::from_secs(5), echo)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(uri, "/base/ws?room=1");
        assert_eq!(host.unwrap(), up.to_string().as_str());
        assert_eq!(forwarded.unwrap(), "api.svc.local:3000");
    }

    #[tokio::test]
    async fn the_cancel_ends_an_open_keep_alive_connection() {
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let up = upstream(stop).await;
        let (ext, _guard, closed) = proxy(&format!("http://{up}")).await;

        let mut tcp = TcpStream::connect(ext.local).await.unwrap();
        tcp.write_all(b"GET /one HTTP/1.1\r\nHost: api.svc.local:3000\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // The whole answer: its head and its body (a JSON object).
        while !got.ends_with(b"}") {
            let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_ne!(n, 0, "the proxy closed a keep-alive connection");
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 201 Created\r\n"));
        assert_eq!(ext.health().open, 1);

        closed.cancel();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("the connection is still open after the cancel");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        tokio::time::timeout(Duration::from_secs(5), async {
            while ext.health().open != 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
        // And nothing is accepted any more.
        tokio::time::timeout(Duration::from_secs(5), async {
            while TcpStream::connect(ext.local).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
    }
    #[tokio::test]
    async fn an_https_upstream_is_checked_against_the_roots() {
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let (up, roots) = tls_upstream(stop).await;
        let base = format!("https://{up}/base");

        // Trusted: the request goes through, Host and path as for http.
        let bound = bind_with("api.svc.local".into(), 3000, &base, roots, CONNECT_TIMEOUT).await;
        let (ext, _guard, _) = serve_proxy(bound.unwrap());
        let (status, _, body) = send(&ext, "PUT", "/a?b=c", "over tls").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let seen: Seen = serde_json::from_str(&body).unwrap();
        assert_eq!(seen.uri, "/base/a?b=c");
        assert_eq!(seen.host.as_deref(), Some(up.to_string().as_str()));
        assert_eq!(seen.body, "over tls");

        // The system's roots do not know the certificate: a 502 that says so.
        let (ext, _guard, _) = proxy(&base).await;
        let (status, _, body) = send(&ext, "GET", "/", "").await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(
            body.contains(&format!("forwarding to {base} failed: ")),
            "{body}"
        );
        assert!(body.contains("certificate"), "{body}");
        assert_eq!(ext.health().failures, 1);
    }

    #[tokio::test]
    async fn a_handshake_that_never_comes_times_out_as_a_502() {
        // Accepts and never answers.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let up = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        let base = format!("https://{up}");
        let bound = bind_with(
            "api.svc.local".into(),
            3000,
            &base,
            rustls::RootCertStore::empty(),
            Duration::from_millis(300),
        )
        .await;
        let (ext, _guard, _) = serve_proxy(bound.unwrap());
        let (status, _, body) = send(&ext, "GET", "/", "").await;
        held.abort();
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(
            body.contains("no connection within 0.3s (TCP connect and TLS handshake)"),
            "{body}"
        );
    }
}
