//! Why the box's names or its way to the environment's addresses could not
//! be set up, or a kept setup cannot be used. The text is what the server
//! gets in the claim's answer, or what boxd prints on its stderr.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{count} environment addresses: a box takes at most {max}")]
    TooManyAddresses { count: usize, max: usize },
    #[error("{0:?} is neither a host name nor an IPv4 address")]
    NotAHost(String),
    #[error("no addresses are left in 198.18.0.0/15")]
    RangeFull,
    #[error("this box's environment addresses are set already")]
    AlreadySet,
    #[error("{host}:{port} is in external mode, but the box has no external base URL")]
    NoExternalBase { host: String, port: u16 },
    #[error("cannot forward {host}:{port} to the external base URL: {reason}")]
    External {
        host: String,
        port: u16,
        reason: String,
    },
    #[error("cannot open an entry for {host}:{port}: {source}")]
    Entry {
        host: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("cannot listen for DNS on {transport} {at}: {source}")]
    DnsSocket {
        transport: &'static str,
        at: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot put {cidr} on lo: {reason}")]
    Loopback { cidr: String, reason: String },
    #[error("cannot set net.ipv4.conf.all.route_localnet: {0}")]
    RouteLocalnet(std::io::Error),
    #[error("cannot route {ip} to its entry: {reason}")]
    Route { ip: Ipv4Addr, reason: String },
    /// The kernel command line's `psbx.allow=` does not parse.
    #[error("{0}")]
    Allowed(String),
    #[error("cannot install the nftables rules: {0}")]
    Rules(String),
    #[error("cannot keep {}: {source}", path.display())]
    KeepResolv {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    WriteResolv {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A kept setup (`saved`) that boxd could not have made.
    #[error("{0}")]
    Kept(#[from] KeptError),
}

/// What is wrong with a kept setup's addresses.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error("it lists no endpoints and no wiring")]
    NoEndpoints,
    #[error("the addresses are not those of the endpoints")]
    NotTheEndpoints,
    #[error("{host} cannot be at {addr}")]
    OutOfPlace { host: String, addr: Ipv4Addr },
    #[error("{0} has two addresses")]
    TwoAddresses(String),
    #[error("{host} and {owner} have the same address {addr}")]
    SharedAddress {
        host: String,
        owner: String,
        addr: Ipv4Addr,
    },
}
