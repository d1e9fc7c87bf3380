//! The client's address of a request: the TCP peer's, or, when the peer is
//! one of the operator's `trusted_proxies`, the address that proxy (and the
//! trusted proxies before it) forwarded in `X-Forwarded-For`.
//!
//! A request another node forwarded (on this node's private peer socket,
//! `cluster::forward`) names its client in the one entry that node wrote.
//!
//! [`client_ip`] walks `X-Forwarded-For` from the right and takes the first
//! address that is not itself a trusted proxy; entries left of it are what
//! the client claimed and are never believed. All of them trusted: the
//! leftmost. An unreadable entry on the way makes the client unknown
//! (`None`) rather than letting a proxy's own address stand for it. The walk
//! is a few lines over `ipnet`'s containment, written here because
//! actix-web's `realip_remote_addr` believes the leftmost entry from any
//! peer. `Forwarded` (RFC 7239) is not read.

use ipnet::IpNet;
use std::net::IpAddr;

#[derive(Debug, thiserror::Error)]
pub enum ClientAddrError {
    #[error(
        "trusted_proxies: {0:?} is not an address or network (such as 10.0.0.5 or 10.1.0.0/16)"
    )]
    Malformed(String),
    #[error(
        "trusted_proxies: {entry} has bits set past its prefix length: did you mean {network}?"
    )]
    HostBits { entry: String, network: IpNet },
}

/// The proxies whose `X-Forwarded-For` is believed (config `trusted_proxies`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Reads the configured entries: addresses (`10.0.0.5`, `::1`) and
    /// networks in CIDR form (`10.1.0.0/16`), IPv4 or IPv6.
    pub fn parse(entries: &[String]) -> Result<Self, ClientAddrError> {
        let nets = entries
            .iter()
            .map(|entry| {
                let net = entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| ClientAddrError::Malformed(entry.clone()))?;
                if net.trunc() == net {
                    Ok(net)
                } else {
                    Err(ClientAddrError::HostBits {
                        entry: entry.clone(),
                        network: net.trunc(),
                    })
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { nets })
    }

    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy (IPv4-mapped IPv6 as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = unmapped(ip);
        self.nets.iter().any(|net| net.contains(&ip))
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// One `X-Forwarded-For` entry: an address, or one with a port as some
/// proxies write it (`203.0.113.7:5123`, `[2001:db8::1]:443`).
fn forwarded_entry(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
        .map(unmapped)
}

/// The client's address (see the module doc): `None` when the request has no
/// peer (in-process tests) or a trusted proxy forwarded something unreadable.
pub fn client_ip(req: &actix_web::HttpRequest, trusted: &TrustedProxies) -> Option<IpAddr> {
    // Forwarded by another node (its private socket has no peer address):
    // the client is the entry that node wrote, last.
    if req
        .conn_data::<crate::cluster::forward::PeerConnection>()
        .is_some()
    {
        let last = req.headers().get_all("x-forwarded-for").last()?;
        return forwarded_entry(last.to_str().ok()?.rsplit(',').next()?);
    }
    let peer = unmapped(req.peer_addr()?.ip());
    if !trusted.contains(peer) {
        return Some(peer);
    }
    let mut chain: Vec<&str> = Vec::new();
    for value in req.headers().get_all("x-forwarded-for") {
        let Ok(value) = value.to_str() else {
            return None;
        };
        chain.extend(value.split(','));
    }
    let mut client = peer;
    for entry in chain.iter().rev() {
        client = forwarded_entry(entry)?;
        if !trusted.contains(client) {
            return Some(client);
        }
    }
    Some(client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn trusted(entries: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&entries.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn from(peer: &str, forwarded: &[&str]) -> actix_web::HttpRequest {
        let mut req = TestRequest::get().peer_addr(peer.parse().unwrap());
        for value in forwarded {
            req = req.append_header(("X-Forwarded-For", *value));
        }
        req.to_http_request()
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client_whatever_it_forwards() {
        let none = TrustedProxies::default();
        let req = from("198.51.100.7:5000", &["203.0.113.1"]);
        assert_eq!(client_ip(&req, &none), Some(ip("198.51.100.7")));
        let mapped = from("[::ffff:198.51.100.7]:5000", &[]);
        assert_eq!(client_ip(&mapped, &none), Some(ip("198.51.100.7")));
        assert_eq!(
            client_ip(&TestRequest::get().to_http_request(), &none),
            None
        );
    }

    #[test]
    fn an_untrusted_peer_is_the_client_even_with_trusted_proxies_configured() {
        let t = trusted(&["10.0.0.5", "10.1.0.0/16"]);
        let req = from("198.51.100.7:5000", &["10.0.0.5"]);
        assert_eq!(client_ip(&req, &t), Some(ip("198.51.100.7")));
    }

    #[test]
    fn behind_trusted_proxies_the_first_untrusted_from_the_right_is_the_client() {
        let t = trusted(&["10.0.0.5", "10.1.0.0/16"]);
        // The client claimed 198.51.100.66 itself; the first proxy saw 203.0.113.9.
        let req = from("10.0.0.5:443", &["198.51.100.66, 203.0.113.9, 10.1.2.3"]);
        assert_eq!(client_ip(&req, &t), Some(ip("203.0.113.9")));
        // The same chain over several headers, with ports and a mapped address.
        let req = from(
            "[::ffff:10.0.0.5]:443",
            &["198.51.100.66", "[::ffff:203.0.113.9]:8443,10.1.2.3:80"],
        );
        assert_eq!(client_ip(&req, &t), Some(ip("203.0.113.9")));
        // No header: the proxy connected for itself.
        assert_eq!(
            client_ip(&from("10.0.0.5:443", &[]), &t),
            Some(ip("10.0.0.5"))
        );
    }

    #[test]
    fn a_chain_of_trusted_proxies_only_gives_the_leftmost() {
        let t = trusted(&["10.0.0.0/8", "::1"]);
        let req = from("[::1]:443", &["10.9.9.9, 10.0.0.5"]);
        assert_eq!(client_ip(&req, &t), Some(ip("10.9.9.9")));
    }

    #[test]
    fn an_unreadable_entry_makes_the_client_unknown_not_the_proxy() {
        let t = trusted(&["10.0.0.5"]);
        for chain in ["203.0.113.9, unknown", "", "203.0.113.9,,"] {
            let req = from("10.0.0.5:443", &[chain]);
            assert_eq!(client_ip(&req, &t), None, "{chain:?}");
        }
        // Left of the client, garbage is never read.
        let req = from("10.0.0.5:443", &["garbage, 203.0.113.9"]);
        assert_eq!(client_ip(&req, &t), Some(ip("203.0.113.9")));
    }

    #[test]
    fn configured_entries_are_checked() {
        assert!(trusted(&["10.0.0.5", "fd00::/8", "::1"]).contains(ip("::ffff:10.0.0.5")));
        let e = TrustedProxies::parse(&["proxy.internal".to_owned()]).unwrap_err();
        assert!(e.to_string().contains("\"proxy.internal\""), "{e}");
        let e = TrustedProxies::parse(&["10.1.2.3/16".to_owned()]).unwrap_err();
        assert!(e.to_string().contains("did you mean 10.1.0.0/16?"), "{e}");
    }
}
