//! Several nodes on one database (issue 33, DESIGN.md §8): this node's
//! identity among its peers (`identity.rs`: mutual TLS under a CA derived
//! from the master key), its links to them (`peers.rs`: one wire session per
//! pair, an `http` stream per forwarded connection), and the middleware that
//! forwards a request for a box another node holds (`forward.rs`).
//!
//! A node with `cluster.listen` set listens for its peers there and for
//! their forwarded requests on a private socket in its data directory
//! (`peer.sock`, mode 0600, served by the same application as the public
//! listener), and records where peers reach it (`servers.advertise`).

pub mod forward;
pub mod identity;
pub mod peers;

use crate::config::Config;
use anyhow::Context;
use identity::ClusterIdentity;
use peers::Peers;
use psbx_actors::ids::ServerId;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::store::Store;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

/// The private socket's file name in the data directory.
const PEER_SOCKET: &str = "peer.sock";

/// A node's listeners for its peers, bound, and its links.
pub struct Node {
    pub peers: Arc<Peers>,
    /// Where peers link to this node (mutual TLS).
    pub listener: std::net::TcpListener,
    /// Where their forwarded requests are served.
    pub socket: std::os::unix::net::UnixListener,
}

/// Binds this node's peer listeners and records its address, when
/// `cluster.listen` is set.
pub fn bind(
    config: &Config,
    store: &Store,
    vault: &Vault,
    me: &ServerId,
) -> anyhow::Result<Option<Node>> {
    let Some(listen) = config.cluster.listen else {
        return Ok(None);
    };
    let advertise = config
        .cluster
        .advertised()?
        .unwrap_or_else(|| listen.to_string());
    let identity = ClusterIdentity::new(vault, me)?;
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen for other nodes on {listen} (cluster.listen)"))?;
    listener.set_nonblocking(true)?;
    let path = config.data_dir.join(PEER_SOCKET);
    // Left by a node that did not stop cleanly; the data directory's lock
    // says no other node uses it.
    let _ = std::fs::remove_file(&path);
    let socket = std::os::unix::net::UnixListener::bind(&path)
        .with_context(|| format!("cannot make this node's peer socket {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    socket.set_nonblocking(true)?;
    store.advertise_server(me, &advertise)?;
    tracing::info!(%listen, %advertise, "listening for other nodes");
    Ok(Some(Node {
        peers: Peers::new(me.clone(), identity, path),
        listener,
        socket,
    }))
}
