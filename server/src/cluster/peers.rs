//! The links between nodes: one mutual-TLS connection per pair of nodes,
//! made by whichever of the two needs it first (and used both ways), carrying
//! psbx's wire multiplexer. A stream named `http` is one HTTP/1.1 connection
//! to the receiving node's own application: it is joined to the node's
//! private socket (`peer.sock` in its data directory, served by the same
//! actix application as its public listener), so a forwarded request is
//! answered exactly as a local one, streams, WebSockets and all.
//!
//! The peer's node id comes in its hello (`psbx-node <id> <version>`); the
//! certificate it presented proves only that it holds the master key, which
//! is what every node is trusted for.

use super::identity::ClusterIdentity;
use psbx_actors::ids::ServerId;
use psbx_wire::hello::Hello;
use psbx_wire::mux::{Config, Role, Session, Stream};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// How long dialing a peer (TCP and TLS) may take.
const DIAL: Duration = Duration::from_secs(5);
/// The stream target of a forwarded HTTP connection.
pub const HTTP: &str = "http";
/// The hello's software prefix of a node.
const SOFTWARE: &str = "psbx-node";

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("node {peer} at {at} did not answer: {why}")]
    Unreachable {
        peer: ServerId,
        at: String,
        why: String,
    },
    #[error("node {peer} refused the stream: {why}")]
    Refused { peer: ServerId, why: String },
}

/// This node's links to its peers.
pub struct Peers {
    me: ServerId,
    identity: ClusterIdentity,
    /// This node's private HTTP socket, where `http` streams go.
    local_http: PathBuf,
    sessions: Mutex<HashMap<ServerId, Session>>,
    /// One dial at a time: two requests needing the same new link wait for
    /// one connection instead of making two.
    dialing: tokio::sync::Mutex<()>,
}

impl Peers {
    pub fn new(me: ServerId, identity: ClusterIdentity, local_http: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            me,
            identity,
            local_http,
            sessions: Mutex::default(),
            dialing: tokio::sync::Mutex::new(()),
        })
    }

    pub fn me(&self) -> &ServerId {
        &self.me
    }

    fn hello(&self) -> Hello {
        Hello::new(format!(
            "{SOFTWARE} {} {}",
            self.me,
            env!("CARGO_PKG_VERSION")
        ))
    }

    fn live(&self, peer: &ServerId) -> Option<Session> {
        let mut sessions = self.sessions.lock().ok()?;
        match sessions.get(peer) {
            Some(s) if !s.is_closed() && s.peer_goaway().is_none() => Some(s.clone()),
            Some(_) => {
                sessions.remove(peer);
                None
            }
            None => None,
        }
    }

    fn keep(self: &Arc<Self>, peer: ServerId, session: Session) {
        // Nodes of two versions side by side are a rolling upgrade's
        // moment; said once per link, so that one left behind shows.
        let theirs = session
            .peer()
            .software
            .split(' ')
            .nth(2)
            .unwrap_or("unknown");
        if theirs != env!("CARGO_PKG_VERSION") {
            tracing::warn!(
                %peer,
                theirs,
                ours = env!("CARGO_PKG_VERSION"),
                "linked to a node of another psbx version (fine while a new version rolls through the nodes)"
            );
        }
        if let Ok(mut sessions) = self.sessions.lock() {
            let stale = sessions
                .get(&peer)
                .is_none_or(|s| s.is_closed() || s.peer_goaway().is_some());
            if stale {
                sessions.insert(peer, session.clone());
            }
        }
        let me = self.clone();
        actix_web::rt::spawn(async move { me.serve_streams(session).await });
    }

    /// A stream to `target` on node `peer` (reached at `at`), over the link
    /// to it, made first when there is none.
    pub async fn open(
        self: &Arc<Self>,
        peer: &ServerId,
        at: &str,
        target: &str,
    ) -> Result<Stream, PeerError> {
        let session = match self.live(peer) {
            Some(session) => session,
            None => {
                let _turn = self.dialing.lock().await;
                match self.live(peer) {
                    Some(session) => session,
                    None => {
                        let session = self.dial(peer, at).await?;
                        self.keep(peer.clone(), session.clone());
                        session
                    }
                }
            }
        };
        session.open(target).await.map_err(|e| PeerError::Refused {
            peer: peer.clone(),
            why: e.to_string(),
        })
    }

    async fn dial(&self, peer: &ServerId, at: &str) -> Result<Session, PeerError> {
        let fail = |why: String| PeerError::Unreachable {
            peer: peer.clone(),
            at: at.to_owned(),
            why,
        };
        let name = ClusterIdentity::server_name(peer).map_err(|e| fail(e.to_string()))?;
        let connector = TlsConnector::from(self.identity.client_config());
        let tls = tokio::time::timeout(DIAL, async {
            let tcp = TcpStream::connect(at).await?;
            tcp.set_nodelay(true)?;
            connector.connect(name, tcp).await
        })
        .await
        .map_err(|_| fail(format!("no answer within {DIAL:?}")))?
        .map_err(|e| fail(e.to_string()))?;
        Session::over_io(tls, Role::Client, Config::default(), self.hello())
            .await
            .map_err(|e| fail(e.to_string()))
    }

    /// Takes the links other nodes make, until the listener fails.
    pub async fn listen(self: Arc<Self>, listener: TcpListener) {
        let acceptor = TlsAcceptor::from(self.identity.server_config());
        loop {
            let (tcp, from) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "the peer listener failed to accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (me, acceptor) = (self.clone(), acceptor.clone());
            actix_web::rt::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let session = tokio::time::timeout(DIAL, async {
                    let tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
                    Session::over_io(tls, Role::Server, Config::default(), me.hello())
                        .await
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|_| "no hello in time".to_owned())
                .and_then(|r| r);
                match session {
                    Ok(session) => match peer_of(session.peer()) {
                        Some(peer) => {
                            tracing::debug!(%peer, %from, "a node linked to this one");
                            me.keep(peer, session);
                        }
                        None => {
                            tracing::warn!(%from, software = %session.peer().software, "a peer link without a node's hello");
                            session.close();
                        }
                    },
                    Err(why) => tracing::warn!(%from, %why, "a peer link that did not open"),
                }
            });
        }
    }

    /// Serves the streams a peer opens on `session`: each `http` stream is
    /// an HTTP connection to this node's own application.
    async fn serve_streams(self: Arc<Self>, session: Session) {
        while let Some(incoming) = session.accept().await {
            if incoming.target() != HTTP {
                let target = incoming.target().to_owned();
                incoming.refuse(
                    psbx_wire::frame::code::BAD_REQUEST,
                    &format!("no such target {target:?}"),
                );
                continue;
            }
            let path = self.local_http.clone();
            let mut stream = incoming.accept();
            actix_web::rt::spawn(async move {
                match UnixStream::connect(&path).await {
                    Ok(mut local) => {
                        let _ = tokio::io::copy_bidirectional(&mut stream, &mut local).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, path = %path.display(), "this node's peer socket does not answer")
                    }
                }
            });
        }
    }
}

/// The node id a peer's hello names.
fn peer_of(hello: &Hello) -> Option<ServerId> {
    let mut words = hello.software.split(' ');
    (words.next() == Some(SOFTWARE))
        .then(|| words.next())
        .flatten()
        .and_then(|id| ServerId::parse(id).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use psbx_actors::secrets::vault::Vault;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn node(key: u8, dir: &std::path::Path) -> Arc<Peers> {
        let vault = Vault::from_key(&[key; 32]);
        let me = ServerId::generate().unwrap();
        let identity = ClusterIdentity::new(&vault, &me).unwrap();
        Peers::new(me, identity, dir.join(format!("peer-{key}.sock")))
    }

    /// A node's private socket that answers each connection's first line
    /// with "echo: <line>".
    fn echo_socket(path: &std::path::Path) {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        actix_web::rt::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                actix_web::rt::spawn(async move {
                    let mut buf = [0u8; 64];
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    let _ = conn.write_all(b"echo: ").await;
                    let _ = conn.write_all(&buf[..n]).await;
                });
            }
        });
    }

    #[actix_web::test]
    async fn nodes_of_one_master_key_link_and_a_stranger_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (node(7, dir.path()), node(7, dir.path()));
        echo_socket(&dir.path().join("peer-7.sock"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap().to_string();
        actix_web::rt::spawn(b.clone().listen(listener));

        let mut stream = a.open(b.me(), &at, HTTP).await.unwrap();
        stream.write_all(b"hello\n").await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"echo: hello\n");
        // The link is kept, and B knows it as A's.
        assert!(a.live(b.me()).is_some());
        for _ in 0..50 {
            if b.live(a.me()).is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            b.live(a.me()).is_some(),
            "the listener did not keep the link"
        );

        // Another master key: another CA, and no link either way.
        let stranger = node(8, dir.path());
        let refused = stranger.open(b.me(), &at, HTTP).await;
        assert!(
            matches!(refused, Err(PeerError::Unreachable { .. })),
            "{:?}",
            refused.err()
        );
        // A name other than the peer's own is refused too (A asking for B at
        // B's address under a third node's id).
        let other = ServerId::generate().unwrap();
        let wrong = a.open(&other, &at, HTTP).await;
        assert!(
            matches!(wrong, Err(PeerError::Unreachable { .. })),
            "{:?}",
            wrong.err()
        );
    }

    #[test]
    fn a_peers_id_is_read_from_its_hello_only_when_it_is_a_node() {
        let id = ServerId::generate().unwrap();
        let hello = Hello::new(format!("{SOFTWARE} {id} 0.1.0"));
        assert_eq!(peer_of(&hello), Some(id));
        assert_eq!(peer_of(&Hello::new("boxd 0.1.0")), None);
        assert_eq!(peer_of(&Hello::new(format!("{SOFTWARE} srv_"))), None);
    }
}
