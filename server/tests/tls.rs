//! HTTPS as `psbx serve` binds it (`tls::server_config` on actix-web's rustls
//! listener), on loopback: the self-signed certificate is valid for a box
//! URL's name, HTTP/2 is offered by ALPN, and an operator's box pair is
//! chosen by SNI for names under `box_domain` only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use actix_web::HttpServer;
use psbx_actors::secrets::Secrets;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::app::{self, AppState};
use psbx_server::config::Config;
use psbx_server::tls;
use psbx_tests::TestDatabase;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

/// A server of the real app over TLS on 127.0.0.1; stopped on drop.
struct Running {
    _db: TestDatabase,
    addr: SocketAddr,
    handle: actix_web::dev::ServerHandle,
}

impl Running {
    async fn start(config: &Config) -> Self {
        let db = TestDatabase::new();
        let store = Store::open(db.url(), PoolOptions::short_lived(2)).unwrap();
        store.bootstrap().unwrap();
        let secrets = Secrets::new(store.clone(), Vault::from_key(&[9u8; 32])).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let id = psbx_actors::ids::ServerId::parse("srv_test").unwrap();
        let url = format!("https://localhost:{}", addr.port());
        let parts = app::Parts::new(store, secrets, Default::default(), &url, id);
        let state =
            AppState::assemble(config, parts, Err("no libvirt host in this test".into())).unwrap();
        let tls = tls::server_config(config)
            .unwrap()
            .expect("a TLS configuration");
        let server = HttpServer::new(move || app::build(state.clone()))
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
            handle,
        }
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
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    config.tls.self_signed = true;
    let server = Running::start(&config).await;
    let pem = std::fs::read(dir.path().join("tls/self-signed.crt")).unwrap();
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
