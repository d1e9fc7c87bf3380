//! The proxy against upstreams on 127.0.0.1: base URLs checked and joined,
//! requests rewritten and answered, the 502 that says what to do, a
//! WebSocket both ways, the cancel ending keep-alive connections, https
//! checked against the roots given, and a TLS handshake that never comes.

use super::*;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
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
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
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
    let response = tokio::time::timeout(Duration::from_secs(20), test_client().request(request))
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
    let prefix = format!("api.svc.local:3000 is in external mode: forwarding to {base} failed: ");
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
