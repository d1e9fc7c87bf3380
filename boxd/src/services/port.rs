//! `port:<n>`: a raw byte pipe to a program listening on port n of the box's
//! loopback (box URLs). boxd dials `127.0.0.1:n`, then `[::1]:n` when v4 is
//! refused (a server that listens on ::1 only); when neither answers within
//! [`DIAL_TIMEOUT`] the stream is refused with 502 ([`nothing_listens`]).
//! Otherwise the stream is accepted and spliced to the connection
//! ([`psbx_wire::splice`]: half-close and resets passed on both ways).

use psbx_wire::Incoming;
use psbx_wire::boxd::nothing_listens;
use psbx_wire::frame::code;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a dial to one address may take before the port counts as
/// nothing listening.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a dial failed.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("{0}: {1}")]
    Io(SocketAddr, std::io::Error),
    #[error("{0}: no answer within {DIAL_TIMEOUT:?}")]
    Timeout(SocketAddr),
}

pub async fn serve(incoming: Incoming, port: u16) {
    let tcp = match dial(port).await {
        Ok(tcp) => tcp,
        Err(_) => return incoming.refuse(code::BAD_GATEWAY, &nothing_listens(port)),
    };
    // Box URL traffic is interactive (WebSocket frames, SSE events).
    let _ = tcp.set_nodelay(true);
    let stream = incoming.accept();
    let _ = psbx_wire::splice::splice(stream, tcp, "boxd").await;
}

/// The connection to the port, over IPv4 first, then IPv6.
async fn dial(port: u16) -> Result<TcpStream, DialError> {
    match dial_one(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await {
        Ok(tcp) => Ok(tcp),
        Err(_) => dial_one(SocketAddr::from((Ipv6Addr::LOCALHOST, port))).await,
    }
}

async fn dial_one(addr: SocketAddr) -> Result<TcpStream, DialError> {
    match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => Ok(tcp),
        Ok(Err(e)) => Err(DialError::Io(addr, e)),
        Err(_) => Err(DialError::Timeout(addr)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::session;
    use psbx_wire::OpenError;
    use psbx_wire::boxd::nothing_listens;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A listener that echoes each connection, then half-closes once the
    /// client has.
    async fn echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut tcp, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = tcp.split();
                    tokio::io::copy(&mut r, &mut w).await.unwrap();
                    w.shutdown().await.unwrap();
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn round_trips_bytes_with_half_close_both_ways() {
        let session = session().await;
        let port = echo().await;
        let mut stream = session.open(&format!("port:{port}")).await.unwrap();
        stream.write_all(b"hello ").await.unwrap();
        let mut got = [0u8; 6];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello ");
        stream.write_all(b"box").await.unwrap();
        // Our FIN reaches the program (its copy ends), its FIN reaches us.
        stream.shutdown().await.unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"box");
    }

    #[tokio::test]
    async fn the_programs_half_close_reaches_the_stream_while_it_still_reads() {
        let session = session().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let program = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            tcp.write_all(b"greeting").await.unwrap();
            tcp.shutdown().await.unwrap();
            let mut got = Vec::new();
            tcp.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut stream = session.open(&format!("port:{port}")).await.unwrap();
        let mut greeting = Vec::new();
        stream.read_to_end(&mut greeting).await.unwrap();
        assert_eq!(greeting, b"greeting");
        stream.write_all(b"still writing").await.unwrap();
        stream.shutdown().await.unwrap();
        assert_eq!(program.await.unwrap(), b"still writing");
    }

    #[tokio::test]
    async fn a_port_with_nothing_listening_is_refused_with_502() {
        let session = session().await;
        // A port that was just free.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().port()
        };
        match session.open(&format!("port:{port}")).await {
            Err(OpenError::Refused { code, reason }) => {
                assert_eq!(code, 502);
                assert_eq!(reason, nothing_listens(port));
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_program_listening_on_ipv6_loopback_only_is_reached() {
        let session = session().await;
        let listener = TcpListener::bind("[::1]:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            tcp.write_all(b"v6").await.unwrap();
            tcp.shutdown().await.unwrap();
        });
        let mut stream = session.open(&format!("port:{port}")).await.unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"v6");
    }

    #[tokio::test]
    async fn a_reset_by_the_program_resets_the_stream() {
        let session = session().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            // Reset once the stream is open (a reset before boxd's dial
            // completes fails the dial).
            let mut byte = [0u8; 1];
            tcp.read_exact(&mut byte).await.unwrap();
            tcp.set_zero_linger().unwrap();
            drop(tcp);
        });
        let mut stream = session.open(&format!("port:{port}")).await.unwrap();
        stream.write_all(b"x").await.unwrap();
        let mut got = Vec::new();
        let err = stream.read_to_end(&mut got).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    }

    #[tokio::test]
    async fn fifty_megabytes_stream_both_ways() {
        const LEN: usize = 50 << 20;
        let session = session().await;
        let port = echo().await;
        let stream = session.open(&format!("port:{port}")).await.unwrap();
        let (mut r, mut w) = tokio::io::split(stream);
        let writer = tokio::spawn(async move {
            let chunk: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
            let mut sent = 0;
            while sent < LEN {
                w.write_all(&chunk).await.unwrap();
                sent += chunk.len();
            }
            w.shutdown().await.unwrap();
        });
        let mut buf = vec![0u8; 64 * 1024];
        let mut at = 0usize;
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            for (i, b) in buf[..n].iter().enumerate() {
                assert_eq!(
                    *b,
                    (((at + i) % (64 * 1024)) % 251) as u8,
                    "byte {}",
                    at + i
                );
            }
            at += n;
        }
        writer.await.unwrap();
        assert_eq!(at, LEN);
    }
}
