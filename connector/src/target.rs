//! A stream's target as the server names it: `host:port`, where host is an
//! exact DNS name or an IPv4 address (the spec's addresses: no wildcards,
//! no ranges, no IPv6) and port is 1 to 65535.

use std::fmt;
use std::net::Ipv4Addr;

/// The longest host name DNS allows.
const MAX_HOST_LEN: usize = 253;

/// A parsed `host:port`. Host names are kept in lower case, so that
/// comparisons follow DNS (case-insensitive).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    host: String,
    port: u16,
}

impl Target {
    /// Parses `host:port`; the error says what is wrong.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (host, port) = raw
            .rsplit_once(':')
            .ok_or_else(|| format!("{raw:?} is not host:port"))?;
        let port = match port.parse::<u16>() {
            Ok(p) if p != 0 && !port.starts_with('+') => p,
            _ => return Err(format!("{raw:?} has no valid port (1 to 65535)")),
        };
        if host.parse::<Ipv4Addr>().is_err() && !is_host_name(host) {
            return Err(format!(
                "{raw:?}: {host:?} is not a host name or an IPv4 address"
            ));
        }
        Ok(Self {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as an IPv4 address, when it is one (no lookup needed).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.host.parse().ok()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Letters, digits, `-` and `_` in dot-separated labels of 1 to 63 bytes,
/// at most 253 bytes in all, optionally ending with the root dot.
fn is_host_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= MAX_HOST_LEN
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ipv4_addresses_parse() {
        let t = Target::parse("DB.Internal:5432").unwrap();
        assert_eq!((t.host(), t.port()), ("db.internal", 5432));
        assert_eq!(t.to_string(), "db.internal:5432");
        assert_eq!(t.ipv4(), None);
        let t = Target::parse("10.0.0.5:6379").unwrap();
        assert_eq!(t.ipv4(), Some(Ipv4Addr::new(10, 0, 0, 5)));
        assert!(Target::parse("my_svc.local:80").is_ok());
        assert!(Target::parse("localhost:1").is_ok());
    }

    #[test]
    fn malformed_targets_are_refused() {
        for bad in [
            "",
            "db.internal",
            "db.internal:",
            "db.internal:0",
            "db.internal:65536",
            "db.internal:+80",
            ":5432",
            "tcp:db.internal:5432",
            "[::1]:80",
            "::1:80",
            "-bad.example:80",
            "a..b:80",
            "exa mple.com:80",
            "*.example.com:443",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?}");
        }
        let long = format!("{}.com:80", "a".repeat(64));
        assert!(Target::parse(&long).is_err());
    }
}
