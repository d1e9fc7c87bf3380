//! HTTPS as `psbx serve` binds it (`tls::server_config` on actix-web's rustls
//! listener), on loopback: the self-signed certificate is valid for a box
//! URL's name, HTTP/2 is offered by ALPN, and an operator's box pair is
//! chosen by SNI for names under `box_domain` only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use actix_web::HttpServer;
use bytes::Bytes;
use psbx_actors::secrets::Secrets;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::app::{self, AppState};
use psbx_server::config::Config;
use psbx_server::host::HostChoice;
use psbx_server::tls;
use psbx_tests::TestDatabase;
use rustls::pki_types::pem::PemObject;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;

/// A server of the real app over TLS on 127.0.0.1; stopped on drop.
struct Running {
    _db: TestDatabase,
    addr: SocketAddr,
    /// The first account's API key.
    key: String,
    /// The data directory of a self-signed server.
    _dir: Option<tempfile::TempDir>,
    handle: actix_web::dev::ServerHandle,
}

impl Running {
    async fn start(config: &Config) -> Self {
        let db = TestDatabase::new();
        let store = Store::open(db.url(), PoolOptions::short_lived(2)).unwrap();
        let key = store
            .bootstrap()
            .unwrap()
            .unwrap()
            .key
            .secret
            .expose()
            .to_owned();
        let secrets = Secrets::new(store.clone(), Vault::from_key(&[9u8; 32])).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let id = psbx_actors::ids::ServerId::parse("srv_test").unwrap();
        let url = format!("https://localhost:{}", addr.port());
        let parts = app::Parts::new(store, secrets, Default::default(), &url, id)
            .with_host(HostChoice::Off("no libvirt host in this test".into()));
        let state = AppState::assemble(config, parts).await.unwrap();
        let tls = tls::server_config(config)
            .unwrap()
            .expect("a TLS configuration");
        let server = HttpServer::new(move || app::build(state.clone()))
            .on_connect(psbx_server::limits::streams::on_connect)
            .workers(1)
            .disable_signals()
            .listen_rustls_0_23(listener, tls)
            .unwrap()
            .run();
        let handle = server.handle();
        actix_rt::spawn(server);
        Self {
            _db: db,
            addr,
            key,
            _dir: None,
            handle,
        }
    }

    /// A server with a self-signed certificate (under a data directory of
    /// its own, kept as long as the server), and that certificate's PEM.
    async fn self_signed() -> (Self, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        config.tls.self_signed = true;
        let mut server = Self::start(&config).await;
        let pem = std::fs::read(dir.path().join("tls/self-signed.crt")).unwrap();
        server._dir = Some(dir);
        (server, pem)
    }

    /// A client that trusts only `root_pem` and finds every name on this server.
    fn client(&self, root_pem: &[u8], names: &[&str]) -> reqwest::Client {
        let mut builder = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(root_pem).unwrap())
            .no_proxy();
        for name in names {
            builder = builder.resolve(name, self.addr);
        }
        builder.build().unwrap()
    }

    fn url(&self, name: &str, path: &str) -> String {
        format!("https://{name}:{}{path}", self.addr.port())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Stop accepting at once; the runtime ends the workers with the test.
        drop(self.handle.stop(false));
    }
}

#[actix_rt::test]
async fn the_self_signed_certificate_covers_box_urls_and_http2_is_offered() {
    let (server, pem) = Running::self_signed().await;
    let box_name = "box_0123456789abcdefghij-k3y.box.localhost";
    let client = server.client(&pem, &[box_name, "box.localhost", "localhost"]);
    for name in [box_name, "box.localhost", "localhost"] {
        let res = client
            .get(server.url(name, "/v1/health"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET https://{name}/v1/health: {e:?}"));
        // A box host never reaches psbx's own routes: no box has this key,
        // so it is the box URLs' 404, over the same certificate.
        let expected = if name == box_name {
            reqwest::StatusCode::NOT_FOUND
        } else {
            reqwest::StatusCode::OK
        };
        assert_eq!(res.status(), expected, "{name}");
        // ALPN chose h2: browsers get HTTP/2 too.
        assert_eq!(res.version(), reqwest::Version::HTTP_2, "{name}");
    }
    // A name under another domain is not covered.
    let other = server.client(&pem, &["x.elsewhere.localhost"]);
    let refused = other
        .get(server.url("x.elsewhere.localhost", "/v1/health"))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // HTTP/1.1 is still offered.
    let h1 = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .resolve(box_name, server.addr)
        .http1_only()
        .build()
        .unwrap();
    let res = h1
        .get(server.url(box_name, "/v1/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.version(), reqwest::Version::HTTP_11);
}

/// review-2 L7: actix-http sets no HTTP/2 stream limit, so psbx caps the
/// requests in flight per connection: with 128 held open on one connection
/// (bodies never finished), the next is answered 503 `too_many_streams` at
/// once, another connection is served, and the first serves again once its
/// requests are cancelled. A raw h2 client: reqwest's holds itself to 100
/// streams when the server names no limit.
#[actix_rt::test]
async fn one_http2_connection_has_at_most_128_requests_in_flight() {
    use psbx_server::limits::streams::PER_CONNECTION;
    let (server, pem) = Running::self_signed().await;
    let connect = || async {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(name, tcp)
            .await
            .unwrap();
        let (client, connection) = h2::client::Builder::new()
            .initial_max_send_streams(1000)
            .handshake::<_, Bytes>(stream)
            .await
            .unwrap();
        actix_rt::spawn(async move {
            let _ = connection.await;
        });
        client
    };
    let request = |method: &str, path: &str, key: Option<&str>| {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"));
        if let Some(key) = key {
            builder = builder
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json");
        }
        builder.body(()).unwrap()
    };
    async fn status(
        client: &mut h2::client::SendRequest<Bytes>,
        req: http::Request<()>,
    ) -> (u16, String) {
        let mut ready = client.clone().ready().await.unwrap();
        let (response, _) = ready.send_request(req, true).unwrap();
        let response = response.await.unwrap();
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            text.extend_from_slice(&chunk);
        }
        (status, String::from_utf8_lossy(&text).into_owned())
    }
    let mut client = connect().await;
    let mut held = Vec::new();
    for n in 0..PER_CONNECTION {
        let req = request("PUT", &format!("/v1/secrets/held{n}"), Some(&server.key));
        let mut ready = client.clone().ready().await.unwrap();
        let (response, body) = ready.send_request(req, false).unwrap();
        held.push((response, body));
    }
    // The held requests reach the server in their time: until they all have,
    // the next may still be served; another connection always is.
    let mut other = connect().await;
    let mut refused = (0, String::new());
    for _ in 0..100 {
        assert_eq!(
            status(&mut other, request("GET", "/v1/health", None))
                .await
                .0,
            200
        );
        refused = status(&mut client, request("GET", "/v1/health", None)).await;
        if refused.0 == 503 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(refused.0, 503, "{}", refused.1);
    assert!(refused.1.contains("too_many_streams"), "{}", refused.1);
    for (_, mut body) in held.drain(..) {
        body.send_reset(h2::Reason::CANCEL);
    }
    let mut again = (0, String::new());
    for _ in 0..100 {
        again = status(&mut client, request("GET", "/v1/health", None)).await;
        if again.0 == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(again.0, 200, "the places were not given back: {}", again.1);
}

/// A self-signed pair for `names`, written as `<stem>.crt`/`<stem>.key`;
/// returns the certificate's PEM.
fn pair(dir: &Path, stem: &str, names: &[&str]) -> Vec<u8> {
    let made = rcgen::generate_simple_self_signed(
        names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{stem}.key")),
        made.signing_key.serialize_pem(),
    )
    .unwrap();
    std::fs::write(dir.join(format!("{stem}.crt")), made.cert.pem()).unwrap();
    made.cert.pem().into_bytes()
}

#[actix_rt::test]
async fn an_operator_box_pair_is_served_by_sni_for_box_names_only() {
    let dir = tempfile::tempdir().unwrap();
    let main = pair(dir.path(), "main", &["localhost", "psbx.example.test"]);
    let boxes = pair(dir.path(), "boxes", &["*.box.example.test"]);
    let mut config = Config {
        data_dir: dir.path().to_owned(),
        box_domain: "box.example.test".to_owned(),
        ..Config::default()
    };
    config.tls.cert = Some(dir.path().join("main.crt"));
    config.tls.key = Some(dir.path().join("main.key"));
    config.tls.box_cert = Some(dir.path().join("boxes.crt"));
    config.tls.box_key = Some(dir.path().join("boxes.key"));
    let server = Running::start(&config).await;
    let box_name = "box_0123456789abcdefghij-k3y.box.example.test";

    // Trusting only the box pair: box names work, the API's name does not.
    let box_client = server.client(&boxes, &[box_name, "psbx.example.test"]);
    let res = box_client
        .get(server.url(box_name, "/v1/health"))
        .send()
        .await
        .unwrap();
    // The box URLs' 404 (no box has this key), over the box pair.
    assert_eq!(res.status(), reqwest::StatusCode::NOT_FOUND);
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
    assert!(
        box_client
            .get(server.url("psbx.example.test", "/v1/health"))
            .send()
            .await
            .is_err(),
        "the box pair was served for the API's name"
    );
    // Trusting only the main pair: the opposite.
    let main_client = server.client(&main, &[box_name, "psbx.example.test"]);
    let res = main_client
        .get(server.url("psbx.example.test", "/v1/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK);
    assert!(
        main_client
            .get(server.url(box_name, "/v1/health"))
            .send()
            .await
            .is_err(),
        "the main pair was served for a box name"
    );

    // Box pair files that do not belong together are refused at start.
    config.tls.box_key = Some(dir.path().join("main.key"));
    let err = tls::server_config(&config).unwrap_err();
    assert!(err.to_string().contains("do not go together"), "{err}");
}
