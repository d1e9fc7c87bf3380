//! What boxes may reach (DESIGN.md §6a): the public internet, and nothing of
//! the host's. The built-in deny list ([`DENIED`]), the operator's own extra
//! denied ranges, the ranges they let boxes reach after all (`allow`, say an
//! internal package mirror), and the allow-list mode (`only`: boxes reach
//! those ranges and nothing else; the test suite runs in it). IPv4 only: IPv6
//! is switched off for boxes.
//!
//! Besides the private and special ranges, [`DENIED`] holds the public
//! addresses of cloud host agents that trust a caller by the host's source
//! address (Azure's WireServer); every box connection is a socket of the
//! host's QEMU process, so it would come from that address. Providers whose
//! agents sit on names that resolve to changing public addresses (Equinix
//! Metal's `metadata.platformequinix.com`) cannot be listed here: the README
//! lists them per cloud, for `boxes.egress.deny`, and the optional source
//! NAT ([`EgressPolicy::snat`]) makes box traffic leave from an address of
//! its own, so nothing that trusts the host's address trusts the boxes.

use ipnet::Ipv4Net;
use std::net::Ipv4Addr;

/// Ranges no box reaches, whatever else is configured, with why.
pub const DENIED: &[(&str, &str)] = &[
    ("0.0.0.0/8", "\"this network\""),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local: cloud metadata services"),
    (
        "168.63.129.16/32",
        "Azure WireServer, DNS and HostGAPlugin: they trust the host's address",
    ),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.168.0.0/16", "private"),
    (
        "198.18.0.0/15",
        "benchmarking; boxd's environment addresses",
    ),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved, and the broadcast address"),
];

/// Ranges `allow` may not open: the host's own loopback, and "this network".
const NEVER: &[&str] = &["0.0.0.0/8", "127.0.0.0/8"];

/// The operator's egress settings, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Denied on top of [`DENIED`] and the host's own networks.
    pub deny: Vec<Ipv4Net>,
    /// Reachable although [`DENIED`] (or the host's networks) cover them.
    pub allow: Vec<Ipv4Net>,
    /// Non-empty: the allow-list mode, boxes reach these ranges (and
    /// `allow`) only.
    pub only: Vec<Ipv4Net>,
    /// The host address boxes' traffic leaves from (source NAT of their
    /// uid); `None`: the address the host's route picks.
    pub snat: Option<Ipv4Addr>,
}

impl EgressPolicy {
    /// Checks the configured lists; `key` prefixes the messages
    /// (`boxes.egress`).
    pub fn parse(
        key: &str,
        deny: &[String],
        allow: &[String],
        only: &[String],
    ) -> Result<Self, String> {
        let policy = Self {
            deny: ranges(&format!("{key}.deny"), deny)?,
            allow: ranges(&format!("{key}.allow"), allow)?,
            only: ranges(&format!("{key}.only"), only)?,
            snat: None,
        };
        for range in &policy.allow {
            if let Some(never) = builtin(NEVER).iter().find(|n| overlaps(n, range)) {
                return Err(format!(
                    "{key}.allow: {range} overlaps {never}, which boxes never reach (the host's loopback \
                     and \"this network\"); allow the address of the service itself instead"
                ));
            }
        }
        Ok(policy)
    }

    /// The policy with boxes' traffic leaving from `snat` (the setting
    /// `key`): an IPv4 address, not one boxes are denied to reach anyway
    /// (loopback, "this network", multicast, broadcast).
    pub fn with_snat(mut self, key: &str, snat: Option<&str>) -> Result<Self, String> {
        let Some(text) = snat.map(str::trim) else {
            return Ok(self);
        };
        let addr: Ipv4Addr = text.parse().map_err(|_| {
            format!("{key}: {text:?} is not an IPv4 address (an address of this host, such as 203.0.113.9)")
        })?;
        if addr.is_unspecified()
            || addr.is_loopback()
            || addr.is_multicast()
            || addr.is_broadcast()
            || addr.octets()[0] == 0
        {
            return Err(format!(
                "{key}: {addr} cannot be a source address; name an address of this host that \
                 its network routes back to it"
            ));
        }
        self.snat = Some(addr);
        Ok(self)
    }

    /// The `only` ranges that overlap a network the host is attached to
    /// (`host`), each with that network: boxes do not reach the overlap,
    /// since the host's networks are denied before `only` is looked at, unless
    /// `allow` covers it. Pairs in `only`'s order; an overlap `allow` covers
    /// whole is left out.
    pub fn only_hidden_by_host(&self, host: &[Ipv4Net]) -> Vec<(Ipv4Net, Ipv4Net)> {
        let allowed = Ipv4Net::aggregate(&self.allow);
        self.only
            .iter()
            .flat_map(|only| host.iter().map(move |net| (*only, *net)))
            .filter(|(only, net)| {
                if !overlaps(only, net) {
                    return false;
                }
                // Two CIDR ranges that overlap: one holds the other.
                let overlap = if only.prefix_len() >= net.prefix_len() {
                    only
                } else {
                    net
                };
                !allowed.iter().any(|a| a.contains(overlap))
            })
            .collect()
    }

    /// Every denied range: the built-in list, the operator's, and `host`
    /// (the host's own networks), merged.
    pub fn denied(&self, host: &[Ipv4Net]) -> Vec<Ipv4Net> {
        let mut all = builtin(&DENIED.iter().map(|(r, _)| *r).collect::<Vec<_>>());
        all.extend(&self.deny);
        all.extend(host);
        Ipv4Net::aggregate(&all)
    }
}

fn builtin(list: &[&str]) -> Vec<Ipv4Net> {
    list.iter().filter_map(|r| r.parse().ok()).collect()
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(b) || b.contains(a)
}

/// IPv4 ranges (`a.b.c.d/n`, or one address) from configuration text.
pub fn ranges(key: &str, texts: &[String]) -> Result<Vec<Ipv4Net>, String> {
    texts
        .iter()
        .map(|text| {
            let text = text.trim();
            if text.contains(':') {
                return Err(format!(
                    "{key}: {text:?} is an IPv6 range; IPv6 is switched off for boxes, list IPv4 ranges"
                ));
            }
            if let Ok(addr) = text.parse::<Ipv4Addr>() {
                return Ok(Ipv4Net::from(addr));
            }
            text.parse::<Ipv4Net>().map(|n| n.trunc()).map_err(|_| {
                format!("{key}: {text:?} is not an IPv4 address or range (such as 203.0.113.0/24)")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_ranges_and_single_addresses() {
        let p = EgressPolicy::parse(
            "boxes.egress",
            &strings(&["203.0.113.7"]),
            &strings(&["10.1.2.0/24"]),
            &strings(&["198.51.100.9/24"]),
        )
        .unwrap();
        assert_eq!(p.deny, vec!["203.0.113.7/32".parse::<Ipv4Net>().unwrap()]);
        assert_eq!(p.allow, vec!["10.1.2.0/24".parse::<Ipv4Net>().unwrap()]);
        // Host bits are dropped.
        assert_eq!(p.only, vec!["198.51.100.0/24".parse::<Ipv4Net>().unwrap()]);
    }

    #[test]
    fn refuses_ipv6_garbage_and_allowing_loopback() {
        let e = EgressPolicy::parse("boxes.egress", &strings(&["2001:db8::/32"]), &[], &[])
            .unwrap_err();
        assert!(e.contains("boxes.egress.deny") && e.contains("IPv6"), "{e}");
        let e = EgressPolicy::parse("boxes.egress", &[], &[], &strings(&["mirror.internal"]))
            .unwrap_err();
        assert!(
            e.contains("boxes.egress.only") && e.contains("not an IPv4"),
            "{e}"
        );
        let e =
            EgressPolicy::parse("boxes.egress", &[], &strings(&["127.0.0.1"]), &[]).unwrap_err();
        assert!(e.contains("127.0.0.0/8"), "{e}");
        let e =
            EgressPolicy::parse("boxes.egress", &[], &strings(&["0.0.0.0/0"]), &[]).unwrap_err();
        assert!(e.contains("never reach"), "{e}");
    }

    #[test]
    fn cloud_host_agents_on_public_addresses_are_denied_by_default() {
        let denied = EgressPolicy::default().denied(&[]);
        let wireserver: Ipv4Addr = "168.63.129.16".parse().unwrap();
        assert!(denied.iter().any(|n| n.contains(&wireserver)), "{denied:?}");
        // Its neighbours are ordinary internet.
        let next: Ipv4Addr = "168.63.129.17".parse().unwrap();
        assert!(!denied.iter().any(|n| n.contains(&next)), "{denied:?}");
        // Each built-in range parses and says why.
        for (range, why) in DENIED {
            assert!(
                range.parse::<Ipv4Net>().is_ok() && !why.is_empty(),
                "{range}"
            );
        }
    }

    #[test]
    fn the_source_address_is_checked() {
        let p = EgressPolicy::default();
        assert_eq!(
            p.clone().with_snat("boxes.egress.snat", None).unwrap().snat,
            None
        );
        assert_eq!(
            p.clone()
                .with_snat("boxes.egress.snat", Some("203.0.113.9"))
                .unwrap()
                .snat,
            Some(Ipv4Addr::new(203, 0, 113, 9))
        );
        for bad in ["127.0.0.1", "0.0.0.0", "224.0.0.1", "2001:db8::1", "host"] {
            let e = p
                .clone()
                .with_snat("boxes.egress.snat", Some(bad))
                .unwrap_err();
            assert!(e.contains("boxes.egress.snat"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_ranges_the_host_is_attached_to_are_named_unless_allowed() {
        let net = |s: &str| s.parse::<Ipv4Net>().unwrap();
        let host = vec![net("192.0.2.0/24"), net("10.233.4.0/30")];
        let p = EgressPolicy::parse(
            "boxes.egress",
            &[],
            &[],
            &strings(&["198.51.100.0/24", "192.0.2.128/25", "10.0.0.0/8"]),
        )
        .unwrap();
        assert_eq!(
            p.only_hidden_by_host(&host),
            vec![
                (net("192.0.2.128/25"), net("192.0.2.0/24")),
                (net("10.0.0.0/8"), net("10.233.4.0/30")),
            ]
        );
        // Allowed whole (here by two adjacent ranges): reachable, not named.
        let p = EgressPolicy::parse(
            "boxes.egress",
            &[],
            &strings(&["192.0.2.0/25", "192.0.2.128/25"]),
            &strings(&["192.0.2.0/24", "10.0.0.0/8"]),
        )
        .unwrap();
        assert_eq!(
            p.only_hidden_by_host(&host),
            vec![(net("10.0.0.0/8"), net("10.233.4.0/30"))]
        );
        // Allowed in part: still named.
        let p = EgressPolicy::parse(
            "boxes.egress",
            &[],
            &strings(&["192.0.2.0/25"]),
            &strings(&["192.0.2.0/24"]),
        )
        .unwrap();
        assert_eq!(
            p.only_hidden_by_host(&host),
            vec![(net("192.0.2.0/24"), net("192.0.2.0/24"))]
        );
        // No allow-list mode, or no network of the host's: nothing to say.
        assert!(
            EgressPolicy::default()
                .only_hidden_by_host(&host)
                .is_empty()
        );
        assert!(p.only_hidden_by_host(&[]).is_empty());
    }

    #[test]
    fn the_denied_ranges_cover_the_builtin_list_and_the_hosts_networks_merged() {
        let p =
            EgressPolicy::parse("boxes.egress", &strings(&["203.0.113.0/25"]), &[], &[]).unwrap();
        let host: Vec<Ipv4Net> = vec![
            "192.0.2.0/24".parse().unwrap(),
            "10.9.0.0/30".parse().unwrap(),
        ];
        let denied = p.denied(&host);
        let has = |a: &str| {
            let a: Ipv4Addr = a.parse().unwrap();
            denied.iter().any(|n| n.contains(&a))
        };
        for a in [
            "10.1.2.3",
            "127.0.0.1",
            "169.254.169.254",
            "169.254.170.2",
            "172.31.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "224.0.0.251",
            "255.255.255.255",
            "192.0.2.1",
            "203.0.113.5",
            "198.18.0.1",
            "168.63.129.16",
        ] {
            assert!(has(a), "{a} is not denied: {denied:?}");
        }
        for a in ["198.51.100.7", "203.0.113.200", "8.8.8.8", "1.1.1.1"] {
            assert!(!has(a), "{a} is denied: {denied:?}");
        }
        // 10.9.0.0/30 is inside 10/8: merged away.
        assert!(!denied.contains(&"10.9.0.0/30".parse().unwrap()));
    }
}
