//! Reaching a target inside the connector's network: DNS with
//! hickory-resolver (the system's `/etc/resolv.conf` and hosts file, so
//! private zones and `/etc/hosts` entries work as they do for the user's
//! services), then the reserved-address check on every address found
//! ([`crate::reserved`]), then a TCP connect to those addresses in order
//! within 10 s.
//!
//! Failures come back as a [`Refusal`]: the `OPEN_ERR` code and a reason a
//! person can act on (NXDOMAIN, refused, timeout, ...).

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{Hosts, ResolveError, TokioResolver};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};

use psbx_wire::frame::{Refusal, code};

use crate::allow::AllowList;
use crate::reserved;
use psbx_wire::Endpoint;

/// How long a TCP connect may take, all addresses together.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a DNS lookup may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Why DNS could not be set up at start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot read the system's DNS configuration (/etc/resolv.conf): {0}")]
    SystemConf(ResolveError),
    #[error("cannot read the hosts file {0}: {1}")]
    HostsFile(String, io::Error),
}

/// Resolves and dials targets. Cheap to share behind an `Arc`.
pub struct Dialer {
    resolver: TokioResolver,
}

impl Dialer {
    /// A dialer using the system's resolver configuration and hosts file,
    /// or `dns_server` and `hosts_file` instead when given (test aids).
    pub fn new(
        dns_server: Option<SocketAddr>,
        hosts_file: Option<&Path>,
    ) -> Result<Self, SetupError> {
        let (config, mut opts) = match dns_server {
            Some(addr) => (
                ResolverConfig::from_parts(
                    None,
                    Vec::new(),
                    NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true),
                ),
                ResolverOpts::default(),
            ),
            None => match hickory_resolver::system_conf::read_system_conf() {
                Ok(system) => system,
                // A network whose names are all in the hosts file (no name
                // server configured) is fine: only the hosts file answers.
                Err(e) if e.to_string().contains("no nameservers") => {
                    tracing::warn!(
                        "/etc/resolv.conf names no name server: names resolve from the hosts file only"
                    );
                    (
                        ResolverConfig::from_parts(None, Vec::new(), NameServerConfigGroup::new()),
                        ResolverOpts::default(),
                    )
                }
                Err(e) => return Err(SetupError::SystemConf(e)),
            },
        };
        opts.use_hosts_file = ResolveHosts::Always;
        opts.ip_strategy = LookupIpStrategy::Ipv4thenIpv6;
        let mut resolver =
            TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
                .with_options(opts)
                .build();
        if let Some(path) = hosts_file {
            let shown = path.display().to_string();
            let file = File::open(path).map_err(|e| SetupError::HostsFile(shown.clone(), e))?;
            let mut hosts = Hosts::default();
            hosts
                .read_hosts_conf(file)
                .map_err(|e| SetupError::HostsFile(shown, e))?;
            resolver.set_hosts(Arc::new(hosts));
        }
        Ok(Self { resolver })
    }

    /// Resolves `target`'s host, refuses it when an address is reserved
    /// and `allow` does not list it ([`crate::reserved`]), and connects to
    /// the addresses checked.
    pub async fn dial(
        &self,
        target: &Endpoint,
        allow: Option<&AllowList>,
    ) -> Result<TcpStream, Refusal> {
        let addresses = self.resolve(target).await?;
        reserved::check(target, &addresses, allow)?;
        connect(target, &addresses).await
    }

    async fn resolve(&self, target: &Endpoint) -> Result<Vec<IpAddr>, Refusal> {
        if let Some(ip) = target.host.ipv4() {
            return Ok(vec![IpAddr::V4(ip)]);
        }
        let host = target.host.as_str();
        // As written: the system's search domains and ndots apply, as they
        // do for the user's own services (`postgres` in a Kubernetes
        // namespace, say).
        let lookup = timeout(RESOLVE_TIMEOUT, self.resolver.lookup_ip(host))
            .await
            .map_err(|_| {
                Refusal::new(
                    code::BAD_GATEWAY,
                    format!("timeout resolving {host} in the connector's network"),
                )
            })?;
        match lookup {
            Ok(lookup) => {
                let addresses: Vec<IpAddr> = lookup.iter().collect();
                if addresses.is_empty() {
                    Err(no_address(host))
                } else {
                    Ok(addresses)
                }
            }
            Err(e) if e.is_nx_domain() => Err(Refusal::new(
                code::BAD_GATEWAY,
                format!("NXDOMAIN: {host} does not resolve in the connector's network"),
            )),
            Err(e) if e.is_no_records_found() => Err(no_address(host)),
            Err(e) => Err(Refusal::new(
                code::BAD_GATEWAY,
                format!("cannot resolve {host} in the connector's network: {e}"),
            )),
        }
    }
}

fn no_address(host: &str) -> Refusal {
    Refusal::new(
        code::BAD_GATEWAY,
        format!("{host} has no address records in the connector's network"),
    )
}

/// Connects to `addresses` in order, all within [`CONNECT_TIMEOUT`].
async fn connect(target: &Endpoint, addresses: &[IpAddr]) -> Result<TcpStream, Refusal> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut refused: Option<IpAddr> = None;
    let mut other: Option<(IpAddr, io::Error)> = None;
    for &ip in addresses {
        match timeout_at(deadline, TcpStream::connect((ip, target.port))).await {
            Ok(Ok(stream)) => {
                // Streams carry request/response protocols: no Nagle delay.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                refused.get_or_insert(ip);
            }
            Ok(Err(e)) => other = Some((ip, e)),
            Err(_) => break,
        }
    }
    let reason = match (refused, other) {
        (Some(ip), _) => format!("connection refused by {target} ({ip})"),
        (None, Some((ip, e))) => format!("cannot connect to {target} ({ip}): {e}"),
        (None, None) => format!("timeout connecting to {target}"),
    };
    Err(Refusal::new(code::BAD_GATEWAY, reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn dialer(hosts: &str) -> (Dialer, tempfile::NamedTempFile) {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(hosts.as_bytes()).unwrap();
        // A DNS server address where nothing answers: these tests must
        // never reach DNS.
        let dns = "127.0.0.1:9".parse().ok();
        (Dialer::new(dns, Some(file.path())).unwrap(), file)
    }

    #[tokio::test]
    async fn hosts_file_names_and_ipv4_literals_dial() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (dialer, _f) = dialer("127.0.0.1 db.test\n");
        let listed = AllowList::parse(&format!("db.test:{port} 127.0.0.1:{port}")).unwrap();
        for target in [format!("db.test:{port}"), format!("127.0.0.1:{port}")] {
            let target = target.parse::<Endpoint>().unwrap();
            dialer.dial(&target, Some(&listed)).await.unwrap();
        }
    }

    /// M5: a name the hosts file maps to 127.0.0.1 is refused after the
    /// lookup and before any connect: the listener there never accepts.
    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_before_connecting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (dialer, _f) = dialer("127.0.0.1 db.test\n");
        for raw in [format!("db.test:{port}"), format!("127.0.0.1:{port}")] {
            let target = raw.parse::<Endpoint>().unwrap();
            let err = dialer.dial(&target, None).await.unwrap_err();
            assert_eq!(err.code, 502);
            assert!(err.reason.contains("not allowed"), "{}", err.reason);
            assert!(err.reason.contains("PSBX_ALLOW"), "{}", err.reason);
        }
        let nothing = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(nothing.is_err(), "the connector connected: {nothing:?}");
        // Listed, the same target is dialed.
        let listed = AllowList::parse(&format!("db.test:{port}")).unwrap();
        let target = format!("db.test:{port}").parse::<Endpoint>().unwrap();
        dialer.dial(&target, Some(&listed)).await.unwrap();
        listener.accept().await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_port_is_refused_with_the_address() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (dialer, _f) = dialer("127.0.0.1 db.test\n");
        let target = format!("db.test:{port}").parse::<Endpoint>().unwrap();
        let listed = AllowList::parse(&format!("db.test:{port}")).unwrap();
        let err = dialer.dial(&target, Some(&listed)).await.unwrap_err();
        assert_eq!(err.code, 502);
        assert_eq!(
            err.reason,
            format!("connection refused by db.test:{port} (127.0.0.1)")
        );
    }

    #[test]
    fn a_missing_hosts_file_fails_setup() {
        let err = Dialer::new(None, Some(Path::new("/nonexistent/hosts"))).err();
        assert!(matches!(
            err,
            Some(SetupError::HostsFile(..)) | Some(SetupError::SystemConf(_))
        ));
    }
}
