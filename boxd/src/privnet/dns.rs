//! boxd's DNS server on 198.18.0.1:53, UDP and TCP, from boot: A records (TTL
//! 5 s) for the environment's host names (none until a claim brings them), an
//! empty NOERROR for their other types (AAAA included, so clients fall back
//! to IPv4 at once), and every other query relayed byte for byte to the
//! platform's resolvers through the box channel (a `dns:udp`/`dns:tcp`
//! stream, `psbx_wire::dns`): the box's network card never reaches a
//! resolver of the host's. SERVFAIL when the server does not answer.
//!
//! Messages are parsed and built with `hickory-proto`. `hickory-server` is not
//! used: its forwarding authority re-resolves through `hickory-resolver`
//! (caching, rewriting answers, pulling in a resolver stack), where a relay of
//! the upstream's own answer is simpler and keeps what the client asked for
//! (EDNS, DNSSEC bits, truncation) intact; what is left — a name table and
//! two socket loops — is smaller than adapting its catalog to it.

use crate::uplink::Uplink;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use psbx_wire::dns::{Transport, read_framed, write_framed};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, UdpSocket};

/// The TTL of the answers for environment names.
const TTL: u32 = 5;
/// How long the server gets to answer a relayed query (it tries its
/// resolvers in turn, 3 s each).
const RELAY_TIMEOUT: Duration = Duration::from_secs(8);
/// How long a query waits for a session when there is none (right after a
/// thaw, or before the server first connects).
const SESSION_WAIT: Duration = Duration::from_secs(2);
/// A TCP client idle this long is dropped.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The names boxd answers, and the channel the rest goes through.
pub struct Dns {
    names: RwLock<BTreeMap<String, Ipv4Addr>>,
    uplink: Uplink,
}

impl Dns {
    pub fn new(uplink: Uplink) -> Self {
        Self {
            names: RwLock::default(),
            uplink,
        }
    }

    /// The environment's names, from now on.
    pub fn set_names(&self, names: BTreeMap<String, Ipv4Addr>) {
        if let Ok(mut held) = self.names.write() {
            *held = names;
        }
    }

    /// The names it answers now.
    pub fn names(&self) -> BTreeMap<String, Ipv4Addr> {
        self.names.read().map(|n| n.clone()).unwrap_or_default()
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
        let transport = if tcp { Transport::Tcp } else { Transport::Udp };
        match self.forward(query, message.id(), transport).await {
            Some(answer) => Some(answer),
            None => error(&message, ResponseCode::ServFail),
        }
    }

    /// The answer for an environment name, or `None` for names it does not
    /// hold.
    fn local(&self, message: &Message) -> Option<Option<Vec<u8>>> {
        let query = message.queries().first()?;
        let name = query.name().to_ascii().to_ascii_lowercase();
        let addr = *self.names.read().ok()?.get(name.trim_end_matches('.'))?;
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

    /// The platform resolvers' answer to `query`, through the server.
    async fn forward(&self, query: &[u8], id: u16, transport: Transport) -> Option<Vec<u8>> {
        let live = self.uplink.current(SESSION_WAIT).await?;
        let asked = tokio::time::timeout(RELAY_TIMEOUT, async {
            let mut stream = live.session.open(transport.target()).await.ok()?;
            write_framed(&mut stream, query).await.ok()?;
            tokio::io::AsyncWriteExt::shutdown(&mut stream).await.ok()?;
            read_framed(&mut stream).await.ok()
        })
        .await
        .ok()??;
        (asked.get(..2) == Some(&id.to_be_bytes()[..])).then_some(asked)
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
    use crate::uplink::test_server;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use psbx_wire::Session;
    use psbx_wire::dns::{ask_tcp, ask_udp};
    use std::net::SocketAddr;

    fn query(name: &str, kind: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(4242)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        m.to_vec().unwrap()
    }

    /// The platform's resolver as the server is for the tests: every name
    /// is 203.0.113.9, TTL 60.
    fn resolve(incoming: psbx_wire::mux::Incoming) {
        assert!(Transport::of_target(incoming.target()).is_some());
        tokio::spawn(async move {
            let mut stream = incoming.accept();
            let q = Message::from_vec(&read_framed(&mut stream).await.unwrap()).unwrap();
            let mut a = reply(&q, ResponseCode::NoError);
            a.add_answer(Record::from_rdata(
                q.queries()[0].name().clone(),
                60,
                RData::A(A(Ipv4Addr::new(203, 0, 113, 9))),
            ));
            write_framed(&mut stream, &a.to_vec().unwrap())
                .await
                .unwrap();
        });
    }

    /// boxd's DNS on loopback with an environment name, its uplink to a
    /// server session answering `dns:` streams ([`resolve`]), or to none.
    async fn serve(with_server: bool) -> (SocketAddr, Option<Session>) {
        let (uplink, server) = if with_server {
            let (uplink, session) = test_server(resolve).await;
            (uplink, Some(session))
        } else {
            (Uplink::default(), None)
        };
        let dns = Arc::new(Dns::new(uplink));
        dns.set_names(BTreeMap::from([(
            "db.internal".to_owned(),
            Ipv4Addr::new(198, 18, 0, 2),
        )]));
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).await.unwrap();
        tokio::spawn(serve_udp(dns.clone(), udp));
        tokio::spawn(serve_tcp(dns, tcp));
        (addr, server)
    }

    async fn ask(server: SocketAddr, q: &[u8]) -> Message {
        Message::from_vec(&ask_udp(server, q).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn answers_environment_names_and_servfails_without_a_server() {
        let (server, _) = serve(false).await;
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
    async fn relays_other_names_through_the_channel() {
        let (server, _session) = serve(true).await;
        for answer in [
            ask(server, &query("example.com.", RecordType::A)).await,
            Message::from_vec(
                &ask_tcp(server, &query("example.com.", RecordType::A))
                    .await
                    .unwrap(),
            )
            .unwrap(),
        ] {
            assert_eq!(answer.response_code(), ResponseCode::NoError);
            assert_eq!(
                answer.answers()[0].data(),
                &RData::A(A(Ipv4Addr::new(203, 0, 113, 9)))
            );
            assert_eq!(answer.answers()[0].ttl(), 60);
        }
        // Environment names are still boxd's own.
        let a = ask(server, &query("db.internal.", RecordType::A)).await;
        assert_eq!(a.answers()[0].ttl(), TTL);
    }
}
