//! The connector reaching an https server through an HTTP CONNECT proxy
//! with credentials, trusting the server's self-signed CA from
//! PSBX_CA_FILE. Loopback only: the proxy tunnels every CONNECT to
//! 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use common::{ConnectProxy, Connector, Echo, FakeServer, TOKEN, round_trip};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

const WAIT: Duration = Duration::from_secs(15);

fn tls_acceptor() -> (tokio_rustls::TlsAcceptor, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        cert.cert.pem(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_a_connect_proxy_with_credentials() {
    let (acceptor, ca_pem) = tls_acceptor();
    let mut server = FakeServer::start(TOKEN, Some(acceptor)).await;
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(ca_pem.as_bytes()).unwrap();
    // base64("proxy user:p@ss")
    let proxy = ConnectProxy::start(Some("cHJveHkgdXNlcjpwQHNz")).await;
    let echo = Echo::start().await;
    let url = format!("https://localhost:{}", server.addr.port());
    let connector = Connector::start(&[
        ("PSBX_URL", url),
        ("PSBX_CONNECTOR_TOKEN", TOKEN.into()),
        ("PSBX_SESSIONS", "1".into()),
        ("PSBX_CA_FILE", ca.path().display().to_string()),
        (
            "HTTPS_PROXY",
            format!("http://proxy%20user:p%40ss@127.0.0.1:{}", proxy.port),
        ),
        ("NO_PROXY", "example.com,10.0.0.0/8".into()),
        ("PSBX_ALLOW", format!("db.test:{}", echo.port)),
    ]);
    let session = server.next_session(WAIT).await.session;

    let requests = proxy.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let target = format!("localhost:{}", server.addr.port());
    assert!(
        requests[0].starts_with(&format!("CONNECT {target} HTTP/1.1\r\n")),
        "{requests:?}"
    );
    assert!(requests[0].contains(&format!("Host: {target}\r\n")));

    let stream = session
        .open(&format!("db.test:{}", echo.port))
        .await
        .unwrap();
    let back = round_trip(stream, b"via the proxy".to_vec()).await;
    assert!(back.starts_with(b"via the proxy"));

    let logs = connector.logs();
    assert!(
        logs.contains(&format!(
            "through the proxy http://127.0.0.1:{}",
            proxy.port
        )),
        "{logs}"
    );
    assert!(!logs.contains("p@ss") && !logs.contains("p%40ss"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_refusing_the_credentials_is_reported() {
    let (acceptor, ca_pem) = tls_acceptor();
    let mut server = FakeServer::start(TOKEN, Some(acceptor)).await;
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(ca_pem.as_bytes()).unwrap();
    let proxy = ConnectProxy::start(Some("c29tZW9uZTplbHNl")).await;
    let connector = Connector::start(&[
        (
            "PSBX_URL",
            format!("https://localhost:{}", server.addr.port()),
        ),
        ("PSBX_CONNECTOR_TOKEN", TOKEN.into()),
        ("PSBX_SESSIONS", "1".into()),
        ("PSBX_CA_FILE", ca.path().display().to_string()),
        (
            "https_proxy",
            format!("http://wrong:creds@127.0.0.1:{}", proxy.port),
        ),
    ]);
    connector
        .wait_for_log(
            "the proxy refused the credentials in the proxy URL (407)",
            2,
            WAIT,
        )
        .await;
    assert!(
        server
            .maybe_session(Duration::from_millis(300))
            .await
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_refused() {
    let (acceptor, _) = tls_acceptor();
    let mut server = FakeServer::start(TOKEN, Some(acceptor)).await;
    let proxy = ConnectProxy::start(None).await;
    let connector = Connector::start(&[
        (
            "PSBX_URL",
            format!("https://localhost:{}", server.addr.port()),
        ),
        ("PSBX_CONNECTOR_TOKEN", TOKEN.into()),
        ("PSBX_SESSIONS", "1".into()),
        ("HTTPS_PROXY", format!("127.0.0.1:{}", proxy.port)),
    ]);
    connector
        .wait_for_log("TLS handshake with https://localhost", 1, WAIT)
        .await;
    assert!(
        server
            .maybe_session(Duration::from_millis(300))
            .await
            .is_none()
    );
}
