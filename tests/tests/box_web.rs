//! `psbx-box-web`, the web server end-to-end tests run in boxes, on loopback:
//! each route answers what tests through box URLs will rely on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures_util::{SinkExt, StreamExt};
use psbx_tests::log::Log;
use sha2::{Digest, Sha256};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// The server on two free loopback ports, killed when dropped, and what it
/// printed.
struct Web {
    child: Child,
    ports: Vec<u16>,
    log: Log,
}

impl Web {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_psbx-box-web"))
            .args(["--host", "127.0.0.1", "--port", "0", "--port", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("psbx-box-web starts");
        let log = Log::capture(child.stdout.take().unwrap(), Some("[box-web]"));
        let mut web = Self {
            child,
            ports: Vec::new(),
            log,
        };
        let mut from = 0;
        for _ in 0..2 {
            let (at, line) = web
                .log
                .wait_for_line(from, "listening on", Duration::from_secs(10));
            web.ports
                .push(line.rsplit(':').next().unwrap().parse().unwrap());
            from = at + 1;
        }
        web
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports[0])
    }

    /// Waits up to 5 s for a request's log line.
    fn wait_for_line(&self, line: &str) {
        self.log.wait_for_line(0, line, Duration::from_secs(5));
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pattern(at: usize) -> u8 {
    (at % 251) as u8
}

#[tokio::test]
async fn serves_the_page_and_logs_each_request() {
    let web = Web::start();
    let page = reqwest::get(web.url("/")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let body = page.text().await.unwrap();
    for part in [
        "<h1 id=\"title\">psbx box web</h1>",
        "<pre id=\"echo\">",
        "<pre id=\"events\">",
        "new WebSocket(",
        "new EventSource(\"/sse\")",
        "\"hello-\"",
        "location.protocol === \"https:\" ? \"wss:\" : \"ws:\"",
    ] {
        assert!(body.contains(part), "no {part} in the page");
    }
    assert!(
        !body.contains("src=\"http"),
        "the page loads nothing from elsewhere"
    );
    web.wait_for_line("GET / 200");
    // The second port serves too.
    let other = format!("http://127.0.0.1:{}/status/204", web.ports[1]);
    assert_eq!(reqwest::get(other).await.unwrap().status(), 204);
    web.wait_for_line("GET /status/204 204");
}

#[tokio::test]
async fn echoes_websocket_text_and_binary() {
    let web = Web::start();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", web.ports[0]))
        .await
        .unwrap();
    let (mut ws, answer) =
        tokio_tungstenite::client_async(format!("ws://127.0.0.1:{}/ws", web.ports[0]), tcp)
            .await
            .unwrap();
    assert_eq!(answer.status(), 101);
    ws.send(Message::text("hello-é1")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello-é1"));
    let binary: Vec<u8> = (0..=255).collect();
    ws.send(Message::binary(binary.clone())).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(binary));
    ws.close(None).await.unwrap();
    web.wait_for_line("GET /ws 101");
    // Not a WebSocket request.
    assert_eq!(reqwest::get(web.url("/ws")).await.unwrap().status(), 400);
}

#[tokio::test]
async fn sends_server_sent_events_spaced_in_time_then_ends() {
    let web = Web::start();
    let started = Instant::now();
    let mut answer = reqwest::get(web.url("/sse?count=3&every_ms=400"))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-type"], "text/event-stream");
    assert!(answer.headers().get("content-length").is_none());
    let mut text = String::new();
    let mut arrivals = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), answer.chunk())
        .await
        .expect("the events come within 10 s")
        .unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        arrivals.push((text.matches("data: ").count(), started.elapsed()));
    }
    assert_eq!(text, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
    let first = arrivals.iter().find(|(n, _)| *n >= 1).unwrap().1;
    let last = arrivals.iter().find(|(n, _)| *n >= 3).unwrap().1;
    assert!(
        last - first >= Duration::from_millis(700),
        "events 1 and 3 arrived {:?} apart: {arrivals:?}",
        last - first
    );
    // The default is 5 events.
    let five = reqwest::get(web.url("/sse?every_ms=1"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(five.matches("data: ").count(), 5);
}

#[tokio::test]
async fn streams_bytes_with_a_length_or_chunked() {
    let web = Web::start();
    const N: usize = 1_000_003;
    for (query, length) in [("", Some(N)), ("&chunked=1", None)] {
        let mut answer = reqwest::get(web.url(&format!("/bytes?n={N}{query}")))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let header = answer
            .headers()
            .get("content-length")
            .map(|v| v.to_str().unwrap().parse::<usize>().unwrap());
        assert_eq!(header, length, "{query}");
        if length.is_none() {
            assert_eq!(answer.headers()["transfer-encoding"], "chunked");
        }
        let mut at = 0;
        while let Some(chunk) = answer.chunk().await.unwrap() {
            for (i, b) in chunk.iter().enumerate() {
                assert_eq!(*b, pattern(at + i), "byte {}", at + i);
            }
            at += chunk.len();
        }
        assert_eq!(at, N);
    }
    let empty = reqwest::get(web.url("/bytes?n=0")).await.unwrap();
    assert_eq!(empty.bytes().await.unwrap().len(), 0);
    assert_eq!(
        reqwest::get(web.url("/bytes?n=x")).await.unwrap().status(),
        400
    );
}

#[tokio::test]
async fn counts_and_hashes_an_upload() {
    let web = Web::start();
    let body: Vec<u8> = (0..3_000_017usize).map(|i| (i * 7 % 256) as u8).collect();
    let answer: serde_json::Value = reqwest::Client::new()
        .post(web.url("/upload"))
        .body(body.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"bytes": body.len(), "sha256": hex::encode(Sha256::digest(&body))})
    );
    web.wait_for_line("POST /upload 200");
}

#[tokio::test]
async fn shows_the_request_headers_and_any_status() {
    let web = Web::start();
    let seen: serde_json::Value = reqwest::Client::new()
        .get(web.url("/headers?a=1"))
        .header("X-Forwarded-Proto", "https")
        .header("X-Forwarded-For", "10.9.8.7")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(seen["method"], "GET");
    assert_eq!(seen["path"], "/headers");
    assert_eq!(seen["query"], "a=1");
    assert_eq!(seen["headers"]["x-forwarded-proto"], "https");
    assert_eq!(seen["headers"]["x-forwarded-for"], "10.9.8.7");
    assert_eq!(
        seen["headers"]["host"],
        format!("127.0.0.1:{}", web.ports[0])
    );
    for code in [200u16, 404, 418, 503] {
        let answer = reqwest::get(web.url(&format!("/status/{code}")))
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), code);
        assert_eq!(answer.text().await.unwrap(), format!("status {code}\n"));
    }
    assert_eq!(
        reqwest::get(web.url("/status/abc")).await.unwrap().status(),
        400
    );
    assert_eq!(
        reqwest::get(web.url("/nowhere")).await.unwrap().status(),
        404
    );
}

#[tokio::test]
async fn serves_on_a_unix_socket_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    // Its directory is made first, as /tmp/.X11-unix may not be there.
    let path = dir.path().join("x11/X99");
    let mut child = Command::new(env!("CARGO_BIN_EXE_psbx-box-web"))
        .arg("--unix")
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("psbx-box-web starts");
    let log = Log::capture(child.stdout.take().unwrap(), Some("[box-web]"));
    log.wait_for_line(0, "listening on", Duration::from_secs(10));
    let mut conn = tokio::net::UnixStream::connect(&path).await.unwrap();
    conn.write_all(b"GET /status/204 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
}
