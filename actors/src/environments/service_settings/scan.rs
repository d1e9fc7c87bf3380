//! Finding network addresses in setting values, shared by the suggested
//! endpoints (`suggest`) and the connection settings of `notable`:
//! URLs (`scheme://[user[:pass]@]host[:port][,host[:port]...]/...`, also inside
//! longer text such as `jdbc:postgresql://...`), bare `host:port` tokens, the
//! default port of a URL scheme, and whether a host belongs to a private
//! network by the spec's rule.
//!
//! Why hand-written: the `url` crate parses one whole URL, refuses the
//! comma-separated host lists of `mongodb://a:1,b:2/` and does not look for
//! URLs or `host:port` inside longer values; what is needed here is a lenient
//! scan, not a validating parser.

use std::net::Ipv4Addr;
use std::ops::Range;

/// Host suffixes that the spec counts as private, each after a dot.
pub const PRIVATE_SUFFIXES: &[&str] = &[
    ".internal",
    ".local",
    ".lan",
    ".corp",
    ".svc",
    ".cluster.local",
    ".rds.amazonaws.com",
    ".cache.amazonaws.com",
    ".es.amazonaws.com",
    ".mq.amazonaws.com",
    ".docdb.amazonaws.com",
    ".redshift.amazonaws.com",
];

/// One URL found in a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// Lowercased, as written before `://` (`jdbc:postgresql://` gives
    /// `postgresql`).
    pub scheme: String,
    /// Each valid host of the authority with its port, if written. Hosts that
    /// are IPv6 literals, not host names, or have an invalid port are left out.
    pub hosts: Vec<(String, Option<u16>)>,
    /// Bytes of the value from the scheme to the end of the authority.
    pub span: Range<usize>,
}

/// The default port of a URL scheme, `None` when unknown or when the scheme
/// names no port at all (`mongodb+srv` takes hosts and ports from DNS SRV
/// records). `base+driver` schemes (`postgresql+asyncpg`, `mysql+pymysql`)
/// use their base's port.
pub fn default_port(scheme: &str) -> Option<u16> {
    let scheme = scheme.to_ascii_lowercase();
    let base = match scheme.split_once('+') {
        Some((_, "srv")) => return None,
        Some((base, _)) => base,
        None => &scheme,
    };
    Some(match base {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        "redis" | "rediss" => 6379,
        "mongodb" => 27017,
        "amqp" => 5672,
        "amqps" => 5671,
        "http" => 80,
        "https" => 443,
        _ => return None,
    })
}

/// A port as written: digits only, 1-65535.
pub fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|&p| p != 0)
}

/// An IPv4 address, or a host name: dot-separated labels of letters, digits,
/// `-` and `_`, each starting with a letter, digit or `_`, with at least one
/// letter somewhere (so `10:30` or `1.2` are not hosts). A trailing dot is
/// allowed.
pub fn is_host(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    if text.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    !text.is_empty()
        && text.len() <= 253
        && text.bytes().any(|b| b.is_ascii_alphabetic())
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Whether the spec keeps this host as a suggestion: a private IPv4 address
/// (10/8, 172.16/12, 192.168/16) or a name ending, after a dot, in one of
/// [`PRIVATE_SUFFIXES`].
pub fn is_private_host(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return ip.is_private();
    }
    let host = host.to_ascii_lowercase();
    PRIVATE_SUFFIXES
        .iter()
        .any(|s| host.len() > s.len() && host.ends_with(s))
}

/// Characters that end a URL's authority.
fn ends_authority(c: char) -> bool {
    c.is_whitespace() || "/?#\"'<>()[]{}\\;|`".contains(c)
}

/// Every URL in `value`.
pub fn urls(value: &str) -> Vec<Url> {
    let mut out = Vec::new();
    for (at, _) in value.match_indices("://") {
        let before = &value[..at];
        let run = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+.-".contains(c)))
            .map_or(0, |i| i + 1);
        // A scheme starts with a letter.
        let Some(start) = before[run..]
            .find(|c: char| c.is_ascii_alphabetic())
            .map(|i| run + i)
        else {
            continue;
        };
        let scheme = before[start..].to_ascii_lowercase();
        let rest = &value[at + 3..];
        let len = rest.find(ends_authority).unwrap_or(rest.len());
        let authority = &rest[..len];
        let host_list = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let hosts = host_list.split(',').filter_map(url_host).collect();
        out.push(Url {
            scheme,
            hosts,
            span: start..at + 3 + len,
        });
    }
    out
}

/// `host[:port]` of a URL authority; `None` when invalid.
fn url_host(entry: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) => (host, Some(parse_port(port)?)),
        None => (entry, None),
    };
    is_host(host).then(|| (host.strip_suffix('.').unwrap_or(host).to_owned(), port))
}

/// Every bare `host:port` in `value`, outside the URLs in it. Tokens are
/// separated by anything that cannot be in a host name or port (spaces, `,`,
/// `;`, `=`, `/`, `@`, quotes, brackets...); a token with more than one `:`
/// (an IPv6 address) is not an address.
pub fn host_ports(value: &str) -> Vec<(String, u16)> {
    let mut masked: Vec<char> = value.chars().collect();
    // Spans are byte ranges; map them onto char positions.
    let urls = urls(value);
    if !urls.is_empty() {
        let starts: Vec<usize> = value.char_indices().map(|(i, _)| i).collect();
        for (ci, bi) in starts.iter().enumerate() {
            if urls.iter().any(|u| u.span.contains(bi)) {
                masked[ci] = ' ';
            }
        }
    }
    let masked: String = masked.into_iter().collect();
    masked
        .split(|c: char| !(c.is_ascii_alphanumeric() || "._:-".contains(c)))
        .filter_map(|token| {
            let token = token.trim_end_matches('.');
            let (host, port) = token.split_once(':')?;
            if port.contains(':') || !is_host(host) {
                return None;
            }
            Some((
                host.strip_suffix('.').unwrap_or(host).to_owned(),
                parse_port(port)?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(value: &str) -> Vec<(String, Option<u16>)> {
        urls(value).into_iter().flat_map(|u| u.hosts).collect()
    }

    #[test]
    fn url_forms() {
        assert_eq!(
            hosts("postgres://u:p@db.internal:5433/app?sslmode=require"),
            vec![("db.internal".into(), Some(5433))]
        );
        assert_eq!(
            hosts("mongodb://a.internal:1,b.internal,c.internal:3/db"),
            vec![
                ("a.internal".into(), Some(1)),
                ("b.internal".into(), None),
                ("c.internal".into(), Some(3))
            ]
        );
        assert_eq!(hosts("user:p@ss@x"), Vec::<(String, Option<u16>)>::new());
        assert_eq!(
            hosts("postgres://u:p@ss@db.internal/app"),
            vec![("db.internal".into(), None)]
        );
        let u = urls("-Durl=jdbc:postgresql://db.internal:5432/x");
        assert_eq!(u[0].scheme, "postgresql");
        assert_eq!(hosts("http://[::1]:80/"), vec![]);
        assert_eq!(hosts("http://x.internal:0/"), vec![]);
        assert_eq!(hosts("http://x.internal:70000/"), vec![]);
        assert_eq!(hosts("file:///etc/passwd"), vec![]);
        assert_eq!(
            hosts("redis://a.internal:6379,redis://b.internal:6379"),
            vec![
                ("a.internal".into(), Some(6379)),
                ("b.internal".into(), Some(6379))
            ]
        );
    }

    #[test]
    fn default_ports() {
        assert_eq!(default_port("postgresql"), Some(5432));
        assert_eq!(default_port("postgresql+asyncpg"), Some(5432));
        assert_eq!(default_port("REDISS"), Some(6379));
        assert_eq!(default_port("amqps"), Some(5671));
        assert_eq!(default_port("mongodb+srv"), None);
        assert_eq!(default_port("kafka"), None);
    }

    #[test]
    fn bare_host_ports() {
        assert_eq!(
            host_ports("b1.internal:9092,b2.internal:9092 10.0.0.5:80."),
            vec![
                ("b1.internal".into(), 9092),
                ("b2.internal".into(), 9092),
                ("10.0.0.5".into(), 80)
            ]
        );
        assert_eq!(
            host_ports("user:pw@tcp(db.internal:3306)/app"),
            vec![("db.internal".into(), 3306)]
        );
        assert!(host_ports("10:30 1.2:3 ::1 fe80::1:80 a:b x.internal:99999").is_empty());
        assert!(host_ports("postgres://u:5432@db.internal/app").is_empty());
    }

    #[test]
    fn private_hosts() {
        for h in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "DB.Internal",
            "x.cluster.local",
            "a.b.rds.amazonaws.com",
            "db.internal.",
        ] {
            assert!(is_private_host(h), "{h}");
        }
        for h in [
            "172.32.0.1",
            "8.8.8.8",
            "internal",
            "xinternal",
            "api.stripe.com",
            "internal-x.elb.amazonaws.com",
            "rds.amazonaws.com",
        ] {
            assert!(!is_private_host(h), "{h}");
        }
    }
}
