//! A host:port as psbx names it everywhere: an environment address a user
//! lists on a connection, what boxd gives an address in the box and dials
//! out as `env:<host>:<port>` or `link:<host>:<port>`, what the server
//! routes, stores and asks a connector to open. One type ([`Endpoint`]) and
//! one rule for the host ([`HostName::parse`]), so that a name one hop
//! accepts is one every other hop accepts, and each hop parses it once.
//!
//! The rule is the strictest of the four the hops had before, and it takes
//! every name the product documents (`mydb.xxxx.ap-northeast-1.rds.amazonaws.com`,
//! `internal-….elb.amazonaws.com`, compose names such as `my_db`, IPv4
//! literals such as `10.0.1.5`):
//!
//! * an IPv4 address in dotted-quad form, kept in its canonical form;
//! * otherwise a DNS name: labels of letters, digits, `-` and `_` (compose
//!   service names use it), 1 to 63 bytes, not starting or ending with `-`,
//!   253 bytes in all; a name whose labels are all digits must be an IPv4
//!   address. It is kept in lower case (DNS compares names without case)
//!   and without the root's trailing dot (`db.internal.` is `db.internal`).
//!
//! Wildcards, ranges, URLs and IPv6 are refused with a reason a person can
//! act on ([`HostNameError`]).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;

/// The longest host name DNS allows.
pub const MAX_HOST_NAME: usize = 253;
/// The longest label of a host name.
const MAX_LABEL: usize = 63;

/// [`HostName::parse`]'s rule as a regular expression (ECMA 262, for the
/// OpenAPI schema): an IPv4 address, or dot-separated labels of which at
/// least one is not all digits, with an optional trailing dot. Two things
/// are not in it: lengths (a schema's `maxLength` says 253) and the refusal
/// of a range written `a.b.c.d-e.f.g.h`, which [`HostName::parse`] makes to
/// say that ranges are not supported.
pub const HOST_NAME_PATTERN: &str = concat!(
    "^(?:",
    // IPv4
    "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}",
    "|",
    // labels, one of them with a letter, '_' or '-' in it
    "(?:[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\\.)*",
    "(?:[A-Za-z_]|[A-Za-z_][A-Za-z0-9_-]*[A-Za-z0-9_]|[0-9]+[A-Za-z_]|[0-9]+[A-Za-z_-][A-Za-z0-9_-]*[A-Za-z0-9_])",
    "(?:\\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*",
    "\\.?",
    ")$"
);

/// A checked host: a lower-case DNS name or an IPv4 address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct HostName(String);

/// Why a text is not a host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostNameError {
    #[error("the host is empty")]
    Empty,
    #[error(
        "a URL or a path is not an address: give the host name alone, such as db.internal, and \
         the port separately"
    )]
    UrlOrPath,
    #[error("wildcards are not supported: list each host name")]
    Wildcard,
    #[error(
        "IPv6 addresses are not supported (and the port goes in port, not in host): give a host \
         name or an IPv4 address"
    )]
    Ipv6,
    #[error("ranges are not supported: list each address")]
    Range,
    #[error("{0:?} is not an IPv4 address")]
    NotIpv4(String),
    #[error("the host name is longer than {MAX_HOST_NAME} characters")]
    TooLong,
    #[error(
        "{0:?} is not a host name: use letters, digits, '-', '_' and '.' (labels of 1 to 63 \
         characters, not starting or ending with '-')"
    )]
    NotHostName(String),
}

impl HostName {
    /// Checks `host` against the rule (see the module's doc); the error says
    /// what is wrong and what to give instead.
    pub fn parse(host: &str) -> Result<Self, HostNameError> {
        if host.is_empty() {
            return Err(HostNameError::Empty);
        }
        if host.contains("://") || host.contains('/') {
            return Err(HostNameError::UrlOrPath);
        }
        if host.contains('*') {
            return Err(HostNameError::Wildcard);
        }
        if host.contains(':') || host.starts_with('[') {
            return Err(HostNameError::Ipv6);
        }
        if host.contains('-') && host.split('-').all(|part| part.parse::<Ipv4Addr>().is_ok()) {
            return Err(HostNameError::Range);
        }
        let name = host.strip_suffix('.').unwrap_or(host);
        let numeric = name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
        if numeric {
            return match name.parse::<Ipv4Addr>() {
                Ok(ip) => Ok(Self(ip.to_string())),
                Err(_) => Err(HostNameError::NotIpv4(host.to_owned())),
            };
        }
        if name.len() > MAX_HOST_NAME {
            return Err(HostNameError::TooLong);
        }
        let labels_ok = name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= MAX_LABEL
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if !labels_ok {
            return Err(HostNameError::NotHostName(host.to_owned()));
        }
        Ok(Self(name.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The host as an IPv4 address, when it is one (no lookup needed).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.0.parse().ok()
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<&str> for HostName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl AsRef<str> for HostName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for HostName {
    type Err = HostNameError;

    fn from_str(host: &str) -> Result<Self, Self::Err> {
        Self::parse(host)
    }
}

/// Read through [`HostName::parse`]: what was written by an older version
/// comes back in the canonical form, and what breaks the rule is an error.
impl<'de> Deserialize<'de> for HostName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A host and a TCP port (1 to 65535): `db.internal:5432`, `10.0.1.5:8080`.
/// Read and written as `host:port` ([`std::str::FromStr`], [`fmt::Display`])
/// in stream targets, and as `{"host": …, "port": …}` in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "JsonEndpoint")]
pub struct Endpoint {
    pub host: HostName,
    pub port: u16,
}

/// An [`Endpoint`] as JSON carries it, before its port is checked.
#[derive(Deserialize)]
struct JsonEndpoint {
    host: HostName,
    port: u16,
}

impl TryFrom<JsonEndpoint> for Endpoint {
    type Error = String;

    fn try_from(json: JsonEndpoint) -> Result<Self, Self::Error> {
        if json.port == 0 {
            return Err(format!("{}:0 has no valid port (1 to 65535)", json.host));
        }
        Ok(Self {
            host: json.host,
            port: json.port,
        })
    }
}

/// Why a text is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("{0:?} is not host:port")]
    NotHostPort(String),
    #[error("{0:?} has no valid port (1 to 65535)")]
    Port(String),
    #[error("{text:?}: {why}")]
    Host {
        text: String,
        host: String,
        why: HostNameError,
    },
}

/// A port as a stream target writes it: digits only (no sign), 1 to 65535.
pub fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|p| *p != 0)
}

impl Endpoint {
    pub fn new(host: HostName, port: u16) -> Self {
        Self { host, port }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| EndpointError::NotHostPort(text.to_owned()))?;
        let port = parse_port(port).ok_or_else(|| EndpointError::Port(text.to_owned()))?;
        let host = HostName::parse(host).map_err(|why| EndpointError::Host {
            text: text.to_owned(),
            host: host.to_owned(),
            why,
        })?;
        Ok(Self { host, port })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Result<String, HostNameError> {
        HostName::parse(text).map(|h| h.to_string())
    }

    #[test]
    fn the_documented_names_and_ipv4_addresses_pass() {
        for (text, want) in [
            (
                "mydb.xxxx.ap-northeast-1.rds.amazonaws.com",
                "mydb.xxxx.ap-northeast-1.rds.amazonaws.com",
            ),
            (
                "internal-api-123.eu-west-1.elb.amazonaws.com",
                "internal-api-123.eu-west-1.elb.amazonaws.com",
            ),
            ("Cache.Internal", "cache.internal"),
            ("db.internal.", "db.internal"),
            ("10.0.1.5", "10.0.1.5"),
            ("api.partner.example", "api.partner.example"),
            ("my_db", "my_db"),
            ("db_1.svc-2", "db_1.svc-2"),
            ("localhost", "localhost"),
            ("1password.internal", "1password.internal"),
            ("a.1b", "a.1b"),
        ] {
            assert_eq!(host(text).as_deref(), Ok(want), "{text}");
        }
        assert_eq!(
            HostName::parse("10.0.0.5").unwrap().ipv4(),
            Some(Ipv4Addr::new(10, 0, 0, 5))
        );
        assert_eq!(HostName::parse("db.internal").unwrap().ipv4(), None);
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        let long = format!("{}.com", "a".repeat(64));
        let longer = vec!["a".repeat(63); 5].join(".");
        for (text, why) in [
            ("", "empty"),
            ("*.internal", "wildcards"),
            ("10.0.0.0/16", "URL or a path"),
            ("postgres://db.internal", "URL"),
            ("10.0.0.1-10.0.0.9", "ranges"),
            ("fd00::1", "IPv6"),
            ("[fd00::1]", "IPv6"),
            ("db.internal:5432", "IPv6"),
            ("10.0.0.256", "not an IPv4"),
            ("1.2.3", "not an IPv4"),
            ("-bad.internal", "not a host name"),
            ("bad-.internal", "not a host name"),
            ("bad..internal", "not a host name"),
            ("a b", "not a host name"),
            ("a\nb", "not a host name"),
            ("é.internal", "not a host name"),
            (".", "not a host name"),
            (long.as_str(), "not a host name"),
            (longer.as_str(), "longer than 253"),
        ] {
            let e = HostName::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn endpoints_read_and_write_host_port() {
        let e: Endpoint = "DB.Internal:5432".parse().unwrap();
        assert_eq!((e.host.as_str(), e.port), ("db.internal", 5432));
        assert_eq!(e.to_string(), "db.internal:5432");
        assert!("my_svc.local:80".parse::<Endpoint>().is_ok());
        assert!("localhost:1".parse::<Endpoint>().is_ok());
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
            assert!(bad.parse::<Endpoint>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "db.internal".parse::<Endpoint>().unwrap_err().to_string(),
            "\"db.internal\" is not host:port"
        );
        assert_eq!(
            "db:0".parse::<Endpoint>().unwrap_err().to_string(),
            "\"db:0\" has no valid port (1 to 65535)"
        );
    }

    #[test]
    fn json_goes_through_the_rule() {
        let e: Endpoint =
            serde_json::from_str(r#"{"host": "DB.internal.", "port": 5432}"#).unwrap();
        assert_eq!(e.to_string(), "db.internal:5432");
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"host":"db.internal","port":5432}"#
        );
        for bad in [
            r#"{"host": "*.internal", "port": 5432}"#,
            r#"{"host": "db.internal", "port": 0}"#,
            r#"{"host": "db.internal", "port": 70000}"#,
        ] {
            assert!(serde_json::from_str::<Endpoint>(bad).is_err(), "{bad}");
        }
    }

    /// The pattern published in the OpenAPI document takes what the rule
    /// takes (lengths aside) and refuses what it refuses.
    #[test]
    fn the_pattern_is_the_rule() {
        let pattern = regex::Regex::new(HOST_NAME_PATTERN).unwrap();
        for text in [
            "mydb.xxxx.ap-northeast-1.rds.amazonaws.com",
            "Cache.Internal",
            "db.internal.",
            "10.0.1.5",
            "my_db",
            "db_1.svc-2",
            "1password.internal",
            "a.1b",
            "1-a",
            "1.a.2",
            "a",
            "_",
        ] {
            assert!(HostName::parse(text).is_ok(), "{text}");
            assert!(pattern.is_match(text), "{text}");
        }
        for text in [
            "",
            "*.internal",
            "10.0.0.0/16",
            "10.0.0.256",
            "1.2.3",
            "12",
            "-bad.internal",
            "bad-.internal",
            "bad..internal",
            "a b",
            "fd00::1",
            ".",
            "a-",
            "1-",
        ] {
            assert!(HostName::parse(text).is_err(), "{text}");
            assert!(!pattern.is_match(text), "{text}");
        }
    }
}
