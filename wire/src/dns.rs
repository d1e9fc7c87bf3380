//! DNS through the box channel: the `dns:udp` and `dns:tcp` streams boxd
//! opens for every query its resolver does not answer itself (names that are
//! not the environment's), and the server's side, which asks the platform's
//! resolvers ([`ask`]). A box has no other way to a resolver: its network
//! card reaches the public internet only, never the host's resolvers.
//!
//! One stream carries one query and its answer, each framed as DNS over TCP
//! (RFC 1035 §4.2.2: a two-byte length, then the message). The transport in
//! the target is the one the box's client used: a `udp` query is asked over
//! UDP and its answer relayed as it is (a truncated answer stays truncated, so
//! the client asks again over TCP), a `tcp` query over TCP. Messages are
//! relayed byte for byte (EDNS, DNSSEC bits and ids as the client sent them),
//! so no DNS library is needed here.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The target of a query asked over UDP by the box's client.
pub const UDP_TARGET: &str = "dns:udp";
/// The target of a query asked over TCP.
pub const TCP_TARGET: &str = "dns:tcp";

/// How long one upstream resolver gets to answer.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

/// The transport of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    /// The stream target for a query over this transport.
    pub fn target(self) -> &'static str {
        match self {
            Self::Udp => UDP_TARGET,
            Self::Tcp => TCP_TARGET,
        }
    }

    /// The transport a stream target names, if it is a DNS target.
    pub fn of_target(target: &str) -> Option<Self> {
        match target {
            UDP_TARGET => Some(Self::Udp),
            TCP_TARGET => Some(Self::Tcp),
            _ => None,
        }
    }
}

/// Reads one framed message.
pub async fn read_framed<R: AsyncRead + Unpin>(io: &mut R) -> std::io::Result<Vec<u8>> {
    let len = io.read_u16().await?;
    let mut buf = vec![0u8; usize::from(len)];
    io.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Writes one framed message (at most 65,535 bytes).
pub async fn write_framed<W: AsyncWrite + Unpin>(
    io: &mut W,
    message: &[u8],
) -> std::io::Result<()> {
    let len = u16::try_from(message.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut out = Vec::with_capacity(2 + message.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    io.write_all(&out).await
}

/// The first answer to `query` from `upstreams`, in order, over `transport`:
/// an upstream that does not answer in time, answers with another id or
/// cannot be reached is passed over. `None` when none answered.
pub async fn ask(upstreams: &[SocketAddr], query: &[u8], transport: Transport) -> Option<Vec<u8>> {
    let id = query.get(..2)?;
    for upstream in upstreams {
        let answer = match transport {
            Transport::Udp => ask_udp(*upstream, query).await,
            Transport::Tcp => ask_tcp(*upstream, query).await,
        };
        match answer {
            Ok(answer) if answer.get(..2) == Some(id) => return Some(answer),
            _ => continue,
        }
    }
    None
}

/// One query over UDP, from a fresh socket (a random source port each time).
pub async fn ask_udp(upstream: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = if upstream.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(UPSTREAM_TIMEOUT, socket.recv(&mut buf))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    buf.truncate(n);
    Ok(buf)
}

/// One query over TCP.
pub async fn ask_tcp(upstream: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    tokio::time::timeout(UPSTREAM_TIMEOUT, async {
        let mut stream = tokio::net::TcpStream::connect(upstream).await?;
        write_framed(&mut stream, query).await?;
        read_framed(&mut stream).await
    })
    .await
    .map_err(|_| std::io::ErrorKind::TimedOut)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn framing_round_trips_and_refuses_oversized_messages() {
        let (mut a, mut b) = tokio::io::duplex(1 << 17);
        write_framed(&mut a, b"\x12\x34hello").await.unwrap();
        assert_eq!(read_framed(&mut b).await.unwrap(), b"\x12\x34hello");
        let big = vec![0u8; 70_000];
        assert!(write_framed(&mut a, &big).await.is_err());
    }

    #[tokio::test]
    async fn ask_skips_silent_and_mismatched_upstreams() {
        // One upstream answers with the wrong id, the next with the right one.
        let wrong = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let right = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let (wrong_at, right_at) = (wrong.local_addr().unwrap(), right.local_addr().unwrap());
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (_, from) = wrong.recv_from(&mut buf).await.unwrap();
            wrong.send_to(b"\x00\x00wrong", from).await.unwrap();
        });
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = right.recv_from(&mut buf).await.unwrap();
            let mut answer = buf[..2].to_vec();
            answer.extend_from_slice(&buf[2..n]);
            answer.extend_from_slice(b"-answered");
            right.send_to(&answer, from).await.unwrap();
        });
        let answer = ask(&[wrong_at, right_at], b"\xab\xcdquery", Transport::Udp)
            .await
            .unwrap();
        assert_eq!(answer, b"\xab\xcdquery-answered");
        assert_eq!(ask(&[], b"\xab\xcd", Transport::Tcp).await, None);
        assert_eq!(Transport::of_target("dns:udp"), Some(Transport::Udp));
        assert_eq!(Transport::of_target("env:x:1"), None);
    }
}
