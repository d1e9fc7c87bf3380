//! `psbx-box-web`: a small web server that end-to-end tests copy into a box
//! and open through a box URL (in a real browser too). It listens on
//! `--host` (0.0.0.0 unless told) on every `--port` given (0 picks a free
//! one), prints `psbx-box-web listening on <addr>` for each, and one line
//! per request (`<method> <path and query> <status>`) on stdout. With
//! `--unix PATH` it serves the same on a Unix socket too (its directory made
//! first): a test stands it for a program that only has to accept there,
//! such as an X server on `/tmp/.X11-unix/X99` for a box image without Xvfb.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | a page (inline JS) that echoes `hello-<random>` over `/ws` into `#echo` and appends the `/sse` events into `#events` |
//! | `GET /ws` | WebSocket echo, text and binary |
//! | `GET /sse?count=5&every_ms=500` | `text/event-stream`, events `data: 1` .. `data: <count>`, one every `every_ms`, each flushed, then the end |
//! | `GET /bytes?n=N[&chunked=1]` | N bytes, byte i is `i % 251`, streamed in 64 KiB chunks, `content-length: N` unless chunked |
//! | `POST /upload` | reads the body as it comes, answers `{"bytes": N, "sha256": "<hex>"}` |
//! | `GET /headers` | `{"method", "path", "query", "headers": {name: value}}` (repeated headers joined with `, `) |
//! | `GET /status/<code>` | that status, with a small body |
//!
//! hyper 1 serves HTTP/1.1 (with upgrades, for the WebSocket); bodies are
//! streams, so memory stays bounded whatever their size.

use bytes::Bytes;
use clap::Parser;
use futures_util::{SinkExt, StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Message, Role};

/// The size of one `/bytes` chunk.
const CHUNK: usize = 64 * 1024;
/// The `/bytes` pattern's period.
const PERIOD: usize = 251;

#[derive(Parser)]
#[command(name = "psbx-box-web", about = "A test web server for psbx boxes")]
struct Args {
    /// A port to listen on (several allowed; 0 picks a free one).
    #[arg(long = "port", required_unless_present = "unix")]
    ports: Vec<u16>,
    /// A Unix socket to listen on as well (replaced if it exists).
    #[arg(long)]
    unix: Option<std::path::PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    host: IpAddr,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("cannot listen on {path}: {1}", path = .0.display())]
    ListenUnix(std::path::PathBuf, std::io::Error),
}

type Body = BoxBody<Bytes, std::io::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match serve(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("psbx-box-web: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), StartError> {
    let mut listeners = Vec::new();
    for port in args.ports {
        let addr = SocketAddr::new(args.host, port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| StartError::Listen(addr, e))?;
        let local = listener
            .local_addr()
            .map_err(|e| StartError::Listen(addr, e))?;
        println!("psbx-box-web listening on {local}");
        listeners.push(listener);
    }
    let mut tasks: Vec<_> = listeners
        .into_iter()
        .map(|l| tokio::spawn(accept(l)))
        .collect();
    if let Some(path) = args.unix {
        let fail = |e| StartError::ListenUnix(path.clone(), e);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(fail)?;
        println!("psbx-box-web listening on {}", path.display());
        tasks.push(tokio::spawn(accept_unix(listener)));
    }
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

async fn accept(listener: TcpListener) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                eprintln!("psbx-box-web: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve_connection(tcp));
    }
}

/// Serves one HTTP/1.1 connection (with upgrades).
async fn serve_connection<S>(io: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(|req| async { Ok::<_, Infallible>(route(req).await) });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
}

async fn accept_unix(listener: UnixListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                eprintln!("psbx-box-web: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(serve_connection(stream));
    }
}

async fn route(req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let path = req.uri().path().to_owned();
    let response = match (&method, path.as_str()) {
        (&Method::GET, "/") => html(PAGE),
        (&Method::GET, "/ws") => websocket(req),
        (&Method::GET, "/sse") => sse(&query(&req)),
        (&Method::GET, "/bytes") => bytes(&query(&req)),
        (&Method::POST, "/upload") => upload(req).await,
        (&Method::GET, "/headers") => headers(&req),
        (&Method::GET, p) if p.starts_with("/status/") => status(&p["/status/".len()..]),
        _ => text(StatusCode::NOT_FOUND, format!("no route {method} {path}\n")),
    };
    println!("{method} {target} {}", response.status().as_u16());
    response
}

fn query(req: &Request<Incoming>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn param<T: std::str::FromStr>(
    query: &[(String, String)],
    name: &str,
    default: T,
) -> Result<T, String> {
    match query.iter().find(|(k, _)| k == name) {
        None => Ok(default),
        Some((_, v)) => v.parse().map_err(|_| format!("bad {name}: {v:?}\n")),
    }
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed()
}

fn response(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    response(status, "text/plain; charset=utf-8", full(body))
}

fn html(page: &'static str) -> Response<Body> {
    response(StatusCode::OK, "text/html; charset=utf-8", full(page))
}

fn json(value: &serde_json::Value) -> Response<Body> {
    response(
        StatusCode::OK,
        "application/json",
        full(serde_json::to_vec(value).unwrap_or_default()),
    )
}

/// A WebSocket echo: the 101 answer, then the echo on the upgraded connection.
fn websocket(mut req: Request<Incoming>) -> Response<Body> {
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            "a WebSocket request needs Sec-WebSocket-Key\n".into(),
        );
    };
    if !upgrade {
        return text(
            StatusCode::BAD_REQUEST,
            "a WebSocket request needs Upgrade: websocket\n".into(),
        );
    }
    let upgrading = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrading.await else {
            return;
        };
        let mut ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        while let Some(Ok(message)) = ws.next().await {
            let echo = match message {
                Message::Text(_) | Message::Binary(_) => message,
                Message::Close(_) => break,
                _ => continue,
            };
            if ws.send(echo).await.is_err() {
                break;
            }
        }
        let _ = ws.close(None).await;
    });
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

/// Server-sent events `data: 1` .. `data: <count>`, one every `every_ms`.
fn sse(query: &[(String, String)]) -> Response<Body> {
    let (count, every_ms) = match (
        param(query, "count", 5u64),
        param(query, "every_ms", 500u64),
    ) {
        (Ok(c), Ok(e)) => (c, e),
        (Err(e), _) | (_, Err(e)) => return text(StatusCode::BAD_REQUEST, e),
    };
    let events = futures_util::stream::unfold(1u64, move |n| async move {
        if n > count {
            return None;
        }
        if n > 1 {
            tokio::time::sleep(Duration::from_millis(every_ms)).await;
        }
        let event = Bytes::from(format!("data: {n}\n\n"));
        Some((Ok::<_, std::io::Error>(Frame::data(event)), n + 1))
    });
    let mut response = response(
        StatusCode::OK,
        "text/event-stream",
        BodyExt::boxed(StreamBody::new(events)),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `n` bytes of the pattern, in chunks sliced from one buffer (no copies).
fn bytes(query: &[(String, String)]) -> Response<Body> {
    let (n, chunked) = match (param(query, "n", 0u64), param(query, "chunked", 0u8)) {
        (Ok(n), Ok(c)) => (n, c == 1),
        (Err(e), _) | (_, Err(e)) => return text(StatusCode::BAD_REQUEST, e),
    };
    let pattern: Bytes = (0..CHUNK + PERIOD)
        .map(|i| (i % PERIOD) as u8)
        .collect::<Vec<_>>()
        .into();
    let chunks = futures_util::stream::unfold(0u64, move |at| {
        let pattern = pattern.clone();
        async move {
            if at >= n {
                return None;
            }
            let len = usize::try_from((n - at).min(CHUNK as u64)).unwrap_or(CHUNK);
            let start = usize::try_from(at % PERIOD as u64).unwrap_or(0);
            let chunk = pattern.slice(start..start + len);
            Some((Ok::<_, std::io::Error>(Frame::data(chunk)), at + len as u64))
        }
    });
    let mut response = response(
        StatusCode::OK,
        "application/octet-stream",
        BodyExt::boxed(StreamBody::new(chunks)),
    );
    if !chunked {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    response
}

/// Counts and hashes the body as it comes.
async fn upload(req: Request<Incoming>) -> Response<Body> {
    let mut body = req.into_body().into_data_stream();
    let mut hash = Sha256::new();
    let mut count = 0u64;
    loop {
        match body.try_next().await {
            Ok(Some(data)) => {
                count += data.len() as u64;
                hash.update(&data);
            }
            Ok(None) => break,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("the body broke: {e}\n")),
        }
    }
    json(&serde_json::json!({"bytes": count, "sha256": hex::encode(hash.finalize())}))
}

/// The request's method, path, query and headers.
fn headers(req: &Request<Incoming>) -> Response<Body> {
    let mut headers = serde_json::Map::new();
    for name in req.headers().keys() {
        let values: Vec<String> = req
            .headers()
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        headers.insert(name.as_str().to_owned(), values.join(", ").into());
    }
    json(&serde_json::json!({
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "query": req.uri().query(),
        "headers": headers,
    }))
}

fn status(code: &str) -> Response<Body> {
    match code
        .parse::<u16>()
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
    {
        Some(status) => text(status, format!("status {}\n", status.as_u16())),
        None => text(
            StatusCode::BAD_REQUEST,
            format!("{code:?} is not a status code\n"),
        ),
    }
}

/// The page `GET /` serves: no external resources.
const PAGE: &str = r#"<!doctype html>
<html>
<head><meta charset="utf-8"><title>psbx box web</title></head>
<body>
<h1 id="title">psbx box web</h1>
<h2>WebSocket echo</h2>
<pre id="echo"></pre>
<h2>Server-sent events</h2>
<pre id="events"></pre>
<script>
(function () {
  var scheme = location.protocol === "https:" ? "wss:" : "ws:";
  var hello = "hello-" + Math.random().toString(36).slice(2);
  var ws = new WebSocket(scheme + "//" + location.host + "/ws");
  ws.onopen = function () { ws.send(hello); };
  ws.onmessage = function (e) { document.getElementById("echo").textContent = e.data; };
  ws.onerror = function () { document.getElementById("echo").textContent = "websocket error"; };
  var events = document.getElementById("events");
  var source = new EventSource("/sse");
  source.onmessage = function (e) { events.textContent += e.data + "\n"; };
  source.onerror = function () { source.close(); };
})();
</script>
</body>
</html>
"#;
