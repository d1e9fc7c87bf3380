//! What the proxy of a service in external mode does with each request of
//! the box: the base URL joined with the request's path, the hop-by-hop
//! headers (RFC 9110 §7.6.1) left on their hop, `Host` and the
//! `X-Forwarded-*` headers set, the answer passed back; an upgrade
//! (WebSocket) tunnelled once both sides switched; and, when the upstream
//! does not answer, a `502` that names the service, the URL and what to do.
//!
//! Apart from the listener and its counters (`mod.rs`) because this is the
//! HTTP a reader of a proxied request needs, and nothing else.

use super::{External, OpenGuard};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

use super::ExternalError;

/// The external base URL, taken apart.
#[derive(Debug, Clone)]
pub(super) struct Base {
    /// As it was given, for messages.
    pub(super) url: String,
    scheme: Scheme,
    pub(super) authority: Authority,
    /// The base's path without its trailing slash (empty for none).
    path: String,
}

impl Base {
    pub(super) fn parse(url: &str) -> Result<Self, ExternalError> {
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
    pub(super) fn join(
        &self,
        path_and_query: Option<&PathAndQuery>,
    ) -> Result<Uri, hyper::http::Error> {
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

pub(super) type ProxyBody = BoxBody<Bytes, hyper::Error>;

impl External {
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
fn failure_body(name: &str, port: u16, base_url: &str, error: &str) -> String {
    format!(
        "{name}:{port} is in external mode: forwarding to {base_url} failed: {error}. Run the service in the box and switch it with sandbox_wire {{\"service\": \"{name}\", \"mode\": \"box\"}}"
    )
}

/// Sends one request upstream and its answer back.
pub(super) async fn forward(
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
