//! The client of a service's external base URL: http and https (rustls
//! with ring, the system's roots), HTTP/1.1, the system resolver, and one
//! time limit on the TCP connect and TLS handshake together. The box's STS
//! calls (`crate::aws`) use the same client.

use hyper::Uri;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;

/// The client a proxy forwards the box's requests with.
pub(super) type Upstream = Client<Timed, Incoming>;

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
