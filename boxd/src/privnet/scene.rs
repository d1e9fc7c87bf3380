//! The port-80 scene entry: boxd's listener on 127.0.0.1 for a name that is
//! declared (or listed, or linked) on another port and dialed on 80. Every
//! connection gets one fixed answer, `502 Bad Gateway` with a text body that
//! says nothing listens there, and is closed.
//!
//! Written by hand on a plain socket: the answer is one fixed response, so
//! an HTTP server would add nothing but weight. The request head is read
//! (bounded in size and time) only so that the client has sent it before
//! the answer comes; what it holds does not matter, garbage and EOF get the
//! same answer.
// Until privnet wires it in (issue 18): remove then.

use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The most of a request head that is read before answering.
const HEAD_LIMIT: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long what the client still sends after the answer is read and
/// dropped, so that closing does not reset the connection before the client
/// read the answer.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// The answer's body for `name`.
pub fn body(name: &str) -> String {
    format!("nothing listens on {name}:80 in this box: that name is declared on another port")
}

/// The whole answer for `name`: status line, headers and body.
fn answer(name: &str) -> String {
    let body = body(name);
    format!(
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Opens a scene entry on 127.0.0.1 (an ephemeral port).
pub async fn bind() -> std::io::Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await
}

/// Answers every connection to `listener` for `name` until `closed` is
/// cancelled.
pub async fn serve(name: String, listener: TcpListener, closed: CancellationToken) {
    let answer: std::sync::Arc<str> = answer(&name).into();
    super::accept::until_closed(&listener, &closed, |tcp| {
        let answer = answer.clone();
        tokio::spawn(async move { connection(tcp, &answer).await });
    })
    .await;
}

/// Reads the head (or what comes of it), answers, closes.
async fn connection(mut tcp: TcpStream, answer: &str) {
    let _ = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut tcp)).await;
    if tcp.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let _ = tcp.shutdown().await;
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain(&mut tcp)).await;
}

/// Reads until the end of a request head, EOF, an error or [`HEAD_LIMIT`].
async fn read_head(tcp: &mut TcpStream) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    while head.len() < HEAD_LIMIT {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return;
        }
    }
}

/// Reads and drops until EOF or an error.
async fn drain(tcp: &mut TcpStream) {
    let mut buf = [0u8; 2048];
    while let Ok(n) = tcp.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPECTED_BODY: &str =
        "nothing listens on api.svc.local:80 in this box: that name is declared on another port";

    async fn scene() -> (std::net::SocketAddr, CancellationToken) {
        let listener = bind().await.unwrap();
        let at = listener.local_addr().unwrap();
        let closed = CancellationToken::new();
        tokio::spawn(serve("api.svc.local".into(), listener, closed.clone()));
        (at, closed)
    }

    async fn exchange(at: std::net::SocketAddr, send: &[u8], close_write: bool) -> String {
        let mut tcp = TcpStream::connect(at).await.unwrap();
        tcp.write_all(send).await.unwrap();
        if close_write {
            tcp.shutdown().await.unwrap();
        }
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8(got).unwrap()
    }

    fn expected() -> String {
        format!(
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{EXPECTED_BODY}",
            EXPECTED_BODY.len()
        )
    }

    #[test]
    fn the_body_names_the_name_and_port_80() {
        assert_eq!(body("api.svc.local"), EXPECTED_BODY);
    }

    #[tokio::test]
    async fn a_request_gets_the_502_and_the_connection_is_closed() {
        let (at, _closed) = scene().await;
        let got = exchange(at, b"GET /x HTTP/1.1\r\nHost: api.svc.local\r\n\r\n", false).await;
        assert_eq!(got, expected());
    }

    #[tokio::test]
    async fn garbage_and_eof_get_the_same_answer() {
        let (at, _closed) = scene().await;
        assert_eq!(exchange(at, b"\x16\x03\x01garbage", true).await, expected());
        assert_eq!(exchange(at, b"", true).await, expected());
        // More than a head's limit without an end of head.
        let long = vec![b'a'; HEAD_LIMIT + 10];
        assert_eq!(exchange(at, &long, false).await, expected());
    }

    #[tokio::test]
    async fn a_cancelled_scene_stops_accepting() {
        let (at, closed) = scene().await;
        closed.cancel();
        // The listener is dropped once the loop sees the cancel.
        let refused = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if TcpStream::connect(at).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(refused.is_ok(), "the scene still accepts after the cancel");
    }
}
