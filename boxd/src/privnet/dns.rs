//! boxd's DNS server on 198.18.0.1:53, UDP and TCP: A records (TTL 5 s) for
//! the environment's host names, an empty NOERROR for their other types
//! (AAAA included, so clients fall back to IPv4 at once), and every other
//! query relayed byte for byte to the box's previous upstream resolvers
//! (SERVFAIL when there are none or none answers).
//!
//! Messages are parsed and built with `hickory-proto`. `hickory-server` is not
//! used: its forwarding authority re-resolves through `hickory-resolver`
//! (caching, rewriting answers, pulling in a resolver stack), where a relay of
//! the upstream's own answer is simpler and keeps what the client asked for
//! (EDNS, DNSSEC bits, truncation) intact; what is left — a name table and
//! two socket loops — is smaller than adapting its catalog to it.

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// The TTL of the answers for environment names.
const TTL: u32 = 5;
/// How long one upstream gets to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// A TCP client idle this long is dropped.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The names boxd answers and where the rest goes.
pub struct Dns {
    names: BTreeMap<String, Ipv4Addr>,
    upstreams: Vec<SocketAddr>,
}

impl Dns {
    pub fn new(names: BTreeMap<String, Ipv4Addr>, upstreams: Vec<SocketAddr>) -> Self {
        Self { names, upstreams }
    }

    /// The answer to one query message; `None` to stay silent (garbage).
    pub async fn answer(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let message = match Message::from_vec(query) {
            Ok(m) => m,
            Err(_) => {
                // Answer FORMERR when at least the id is there.
                let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
                return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                    .to_vec()
                    .ok();
            }
        };
        if message.message_type() != MessageType::Query {
            return None;
        }
        if message.op_code() != OpCode::Query || message.queries().len() != 1 {
            return error(&message, ResponseCode::NotImp);
        }
        if let Some(local) = self.local(&message) {
            return local;
        }
        match self.forward(query, message.id(), tcp).await {
            Some(answer) => Some(answer),
            None => error(&message, ResponseCode::ServFail),
        }
    }

    /// The answer for an environment name, or `None` for names it does not
    /// hold.
    fn local(&self, message: &Message) -> Option<Option<Vec<u8>>> {
        let query = message.queries().first()?;
        let name = query.name().to_ascii().to_ascii_lowercase();
        let addr = *self.names.get(name.trim_end_matches('.'))?;
        let mut answer = reply(message, ResponseCode::NoError);
        answer.set_authoritative(true);
        let class = query.query_class();
        if matches!(class, DNSClass::IN | DNSClass::ANY)
            && matches!(query.query_type(), RecordType::A | RecordType::ANY)
        {
            answer.add_answer(Record::from_rdata(
                query.name().clone(),
                TTL,
                RData::A(A(addr)),
            ));
        }
        Some(answer.to_vec().ok())
    }

    /// The first upstream's answer to `query` (over the transport it came on).
    async fn forward(&self, query: &[u8], id: u16, tcp: bool) -> Option<Vec<u8>> {
        for upstream in &self.upstreams {
            let asked = if tcp {
                ask_tcp(*upstream, query).await
            } else {
                ask_udp(*upstream, query).await
            };
            match asked {
                Ok(answer) if answer.get(..2) == Some(&id.to_be_bytes()[..]) => {
                    return Some(answer);
                }
                _ => continue,
            }
        }
        None
    }
}

fn reply(message: &Message, code: ResponseCode) -> Message {
    let mut answer = Message::new();
    answer
        .set_id(message.id())
        .set_message_type(MessageType::Response)
        .set_op_code(message.op_code())
        .set_recursion_desired(message.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(code);
    for query in message.queries() {
        answer.add_query(query.clone());
    }
    answer
}

fn error(message: &Message, code: ResponseCode) -> Option<Vec<u8>> {
    reply(message, code).to_vec().ok()
}

async fn ask_udp(upstream: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = if upstream.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(UPSTREAM_TIMEOUT, socket.recv(&mut buf))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    buf.truncate(n);
    Ok(buf)
}

async fn ask_tcp(upstream: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    tokio::time::timeout(UPSTREAM_TIMEOUT, async {
        let mut stream = TcpStream::connect(upstream).await?;
        write_framed(&mut stream, query).await?;
        read_framed(&mut stream).await
    })
    .await
    .map_err(|_| std::io::ErrorKind::TimedOut)?
}

async fn read_framed(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let len = stream.read_u16().await?;
    let mut buf = vec![0u8; usize::from(len)];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}

async fn write_framed(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
    let len = u16::try_from(message.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut out = Vec::with_capacity(2 + message.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    stream.write_all(&out).await
}

/// Serves UDP queries forever (a task per query: forwarding waits).
pub async fn serve_udp(dns: Arc<Dns>, socket: UdpSocket) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 65535];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (dns, socket) = (dns.clone(), socket.clone());
        tokio::spawn(async move {
            if let Some(answer) = dns.answer(&query, false).await {
                let _ = socket.send_to(&answer, from).await;
            }
        });
    }
}

/// Serves TCP clients forever, each for as many queries as it sends.
pub async fn serve_tcp(dns: Arc<Dns>, listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let dns = dns.clone();
        tokio::spawn(async move {
            while let Ok(Ok(query)) = tokio::time::timeout(TCP_IDLE, read_framed(&mut stream)).await
            {
                let Some(answer) = dns.answer(&query, true).await else {
                    return;
                };
                if write_framed(&mut stream, &answer).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;

    fn query(name: &str, kind: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(4242)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        m.to_vec().unwrap()
    }

    async fn serve(upstreams: Vec<SocketAddr>) -> SocketAddr {
        let names = BTreeMap::from([("db.internal".to_owned(), Ipv4Addr::new(198, 18, 0, 2))]);
        let dns = Arc::new(Dns::new(names, upstreams));
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).await.unwrap();
        tokio::spawn(serve_udp(dns.clone(), udp));
        tokio::spawn(serve_tcp(dns, tcp));
        addr
    }

    async fn ask(server: SocketAddr, q: &[u8]) -> Message {
        Message::from_vec(&ask_udp(server, q).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn answers_environment_names_and_servfails_without_upstream() {
        let server = serve(vec![]).await;
        let a = ask(server, &query("DB.internal.", RecordType::A)).await;
        assert_eq!(a.id(), 4242);
        assert_eq!(a.response_code(), ResponseCode::NoError);
        assert_eq!(a.answers().len(), 1);
        assert_eq!(a.answers()[0].ttl(), TTL);
        assert_eq!(
            a.answers()[0].data(),
            &RData::A(A(Ipv4Addr::new(198, 18, 0, 2)))
        );
        let aaaa = ask(server, &query("db.internal.", RecordType::AAAA)).await;
        assert_eq!(aaaa.response_code(), ResponseCode::NoError);
        assert!(aaaa.answers().is_empty());
        let other = ask(server, &query("example.com.", RecordType::A)).await;
        assert_eq!(other.response_code(), ResponseCode::ServFail);
        assert_eq!(other.id(), 4242);
        // The same over TCP.
        let tcp = ask_tcp(server, &query("db.internal.", RecordType::A))
            .await
            .unwrap();
        assert_eq!(Message::from_vec(&tcp).unwrap().answers().len(), 1);
        // Garbage with an id gets FORMERR.
        let bad = ask_udp(server, &[0x12, 0x34, 0xff]).await.unwrap();
        let bad = Message::from_vec(&bad).unwrap();
        assert_eq!(
            (bad.id(), bad.response_code()),
            (0x1234, ResponseCode::FormErr)
        );
    }

    #[tokio::test]
    async fn relays_other_names_to_the_upstream() {
        // A fake upstream answering every query with one fixed A record.
        let upstream = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let (n, from) = upstream.recv_from(&mut buf).await.unwrap();
                let q = Message::from_vec(&buf[..n]).unwrap();
                let mut a = reply(&q, ResponseCode::NoError);
                a.add_answer(Record::from_rdata(
                    q.queries()[0].name().clone(),
                    60,
                    RData::A(A(Ipv4Addr::new(203, 0, 113, 9))),
                ));
                upstream.send_to(&a.to_vec().unwrap(), from).await.unwrap();
            }
        });
        // A dead upstream first (nothing listens: refused): the next one is asked.
        let dead = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let server = serve(vec![dead_addr, upstream_addr]).await;
        let a = ask(server, &query("example.com.", RecordType::A)).await;
        assert_eq!(a.response_code(), ResponseCode::NoError);
        assert_eq!(
            a.answers()[0].data(),
            &RData::A(A(Ipv4Addr::new(203, 0, 113, 9)))
        );
        assert_eq!(a.answers()[0].ttl(), 60);
    }
}
