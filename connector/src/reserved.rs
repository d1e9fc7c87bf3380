//! The addresses the connector does not dial unless `PSBX_ALLOW` lists the
//! target: its own loopback, link-local addresses (among them the cloud
//! metadata and credential endpoints 169.254.169.254 and 169.254.170.2,
//! and AWS's IPv6 fd00:ec2::254), and unspecified addresses, in IPv4,
//! IPv6 and IPv4-mapped or -compatible IPv6 forms. Without this, whoever
//! sets a connection's addresses (an agent, over REST) could reach the
//! connector host's own services and cloud credentials, which are not
//! "the user's dev services".
//!
//! The check runs on every address a name resolved to, after DNS, and the
//! connector then connects to exactly the addresses it checked (no second
//! lookup a rebinding name could answer differently).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use psbx_wire::frame::{Refusal, code};

use crate::allow::AllowList;
use psbx_wire::Endpoint;

/// AWS's IPv6 instance metadata address.
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// What kind of reserved address `ip` is, if it is one.
pub fn reserved(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => reserved_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return reserved_v4(v4);
            }
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if (v6.segments()[0] & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if v6 == AWS_METADATA_V6 {
                Some("cloud metadata")
            } else if v6.segments()[..6] == [0; 6] {
                // IPv4-compatible (::a.b.c.d, deprecated) forms.
                reserved_v4(Ipv4Addr::from(v6.to_bits() as u32))
            } else {
                None
            }
        }
    }
}

fn reserved_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.octets()[0] == 0 {
        // 0.0.0.0/8, "this network": 0.0.0.0 reaches the local host.
        Some("unspecified")
    } else {
        None
    }
}

/// Refuses `target` when one of its resolved `addresses` is reserved and
/// `PSBX_ALLOW` does not list the target itself. One reserved answer is
/// enough to refuse: a name that resolves partly to loopback is not dialed.
pub fn check(
    target: &Endpoint,
    addresses: &[IpAddr],
    allow: Option<&AllowList>,
) -> Result<(), Refusal> {
    if allow.is_some_and(|list| list.contains(target)) {
        return Ok(());
    }
    for &ip in addresses {
        if let Some(kind) = reserved(ip) {
            return Err(Refusal::new(
                code::BAD_GATEWAY,
                format!(
                    "not allowed: {target} resolves to {ip}, a {kind} address, which the \
                     connector dials only when PSBX_ALLOW lists {target}"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(raw: &str) -> Endpoint {
        raw.parse::<Endpoint>().unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn loopback_link_local_and_unspecified_are_reserved_in_every_form() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("169.254.170.2", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fd00:ec2::254", "cloud metadata"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:7f00:1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("::127.0.0.1", "loopback"),
            ("::169.254.170.2", "link-local"),
        ] {
            assert_eq!(reserved(ip.parse().unwrap()), Some(kind), "{ip}");
        }
        for ip in [
            "10.0.0.5",
            "192.168.1.1",
            "172.16.0.1",
            "8.8.8.8",
            "169.253.255.255",
            "169.255.0.1",
            "fd00::1",
            "2001:db8::1",
            "::ffff:10.0.0.5",
        ] {
            assert_eq!(reserved(ip.parse().unwrap()), None, "{ip}");
        }
    }

    /// M5: the decision that comes before any connect. 169.254.169.254 is
    /// never dialed by a test: this function is all that runs.
    #[test]
    fn reserved_targets_are_refused_unless_listed() {
        let metadata = t("169.254.169.254:80");
        let err = check(&metadata, &ips(&["169.254.169.254"]), None).unwrap_err();
        assert_eq!(err.code, 502);
        assert!(
            err.reason.contains("not allowed") && err.reason.contains("PSBX_ALLOW"),
            "{}",
            err.reason
        );
        // A name resolving to several addresses: one reserved is enough.
        let name = t("db.test:5432");
        let err = check(&name, &ips(&["10.0.0.5", "::ffff:127.0.0.1"]), None).unwrap_err();
        assert!(err.reason.contains("loopback"), "{}", err.reason);
        assert!(check(&name, &ips(&["10.0.0.5"]), None).is_ok());
        // Listed targets pass; another listed target does not lift it.
        let listed = AllowList::parse("db.test:5432 169.254.169.254:80").unwrap();
        assert!(check(&name, &ips(&["127.0.0.1"]), Some(&listed)).is_ok());
        assert!(check(&metadata, &ips(&["169.254.169.254"]), Some(&listed)).is_ok());
        let other = AllowList::parse("db.test:5433").unwrap();
        assert!(check(&name, &ips(&["127.0.0.1"]), Some(&other)).is_err());
    }
}
