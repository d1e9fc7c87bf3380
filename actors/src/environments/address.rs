//! The addresses a connection carries, as a caller sends them: exact host
//! names or IPv4 addresses with a port (environments.txt, "Limits"), checked
//! into [`Endpoint`]s (the one host:port type, `psbx_wire::endpoint`, whose
//! host rule refuses wildcards, ranges, URLs and IPv6 with a reason). This
//! module adds what only a caller's list needs: the port read wide so that 0
//! or 70000 get a message of ours, the entry named in every message,
//! duplicates and lists over the limit.

use psbx_wire::{Endpoint, HostName};
use serde::Deserialize;

/// Most addresses one connection carries.
pub const MAX_PER_CONNECTION: usize = 100;
/// Most addresses one box takes, across all the connections of its environment.
pub const MAX_PER_BOX: usize = 200;

/// One address as a caller sends it; the port is read wide so that 0 or 70000
/// gets a message of ours, not a JSON type error.
#[derive(Debug, Clone, Deserialize)]
pub struct RawEndpoint {
    pub host: String,
    #[serde(deserialize_with = "wide_port")]
    pub port: i64,
}

/// A port as JSON Schema's `integer` counts it: `5432.0` is `5432` (a whole
/// number, saturated at i64's bounds so that [`check`] refuses it with its
/// message); a fraction is refused as before.
fn wide_port<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(deserializer)?;
    if let Some(port) = n.as_i64() {
        return Ok(port);
    }
    match n.as_f64() {
        // `as` saturates (u64 past i64::MAX, or a huge whole float).
        Some(f) if f.fract() == 0.0 => Ok(f as i64),
        _ => Err(serde::de::Error::invalid_value(
            serde::de::Unexpected::Other(&n.to_string()),
            &"a whole number (a TCP port, 1 to 65535)",
        )),
    }
}

/// Checks a whole list (as `PUT .../endpoints` replaces it); the first
/// problem, naming its entry, is the error.
pub fn check_list(list: &[RawEndpoint]) -> Result<Vec<Endpoint>, String> {
    if list.len() > MAX_PER_CONNECTION {
        return Err(format!(
            "{} addresses given: a connection carries at most {MAX_PER_CONNECTION}; split them over \
             connections, one per network",
            list.len()
        ));
    }
    let mut out: Vec<Endpoint> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let shown = format!("endpoints[{i}] ({}:{})", raw.host, raw.port);
        let endpoint = check(raw).map_err(|why| format!("{shown}: {why}"))?;
        if let Some(j) = out.iter().position(|e| e == &endpoint) {
            return Err(format!(
                "{shown}: {endpoint} is listed twice (also endpoints[{j}]); list each address once"
            ));
        }
        out.push(endpoint);
    }
    Ok(out)
}

/// Checks one address: the port here (read wide, for a message of ours),
/// the host by the one rule every hop follows ([`HostName::parse`]).
pub fn check(raw: &RawEndpoint) -> Result<Endpoint, String> {
    let port = u16::try_from(raw.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port {} is not a TCP port: give 1 to 65535", raw.port))?;
    let host = HostName::parse(raw.host.trim()).map_err(|e| e.to_string())?;
    Ok(Endpoint::new(host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(host: &str, port: i64) -> RawEndpoint {
        RawEndpoint {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn names_and_ipv4_addresses_pass() {
        for (host, port, want) in [
            (
                "mydb.xxxx.ap-northeast-1.rds.amazonaws.com",
                5432,
                "mydb.xxxx.ap-northeast-1.rds.amazonaws.com",
            ),
            ("Cache.Internal", 6379, "cache.internal"),
            ("10.0.1.5", 8080, "10.0.1.5"),
            ("api.partner.example", 443, "api.partner.example"),
            ("my_db", 5432, "my_db"),
            ("db", 1, "db"),
            ("db", 65535, "db"),
        ] {
            let e = check(&raw(host, port)).unwrap();
            assert_eq!((e.host.as_str(), i64::from(e.port)), (want, port));
        }
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        for (host, port, why) in [
            ("*.internal", 5432, "wildcards"),
            ("10.0.0.0/16", 80, "URL or a path"),
            ("10.0.0.1-10.0.0.9", 80, "ranges"),
            ("postgres://db.internal", 5432, "URL"),
            ("fd00::1", 80, "IPv6"),
            ("[fd00::1]", 80, "IPv6"),
            ("db.internal:5432", 5432, "IPv6"),
            ("10.0.0.256", 80, "not an IPv4"),
            ("-bad.internal", 80, "not a host name"),
            ("bad..internal", 80, "not a host name"),
            ("", 80, "empty"),
            ("db", 0, "not a TCP port"),
            ("db", 65536, "not a TCP port"),
            ("db", -1, "not a TCP port"),
        ] {
            let e = check(&raw(host, port)).unwrap_err();
            assert!(e.contains(why), "{host}:{port}: {e}");
        }
    }

    #[test]
    fn ports_are_read_as_json_schema_integers() {
        let port = |json: &str| serde_json::from_str::<RawEndpoint>(json).map(|r| r.port);
        assert_eq!(port(r#"{"host": "db", "port": 5432.0}"#).unwrap(), 5432);
        assert_eq!(port(r#"{"host": "db", "port": 70000}"#).unwrap(), 70000);
        assert_eq!(port(r#"{"host": "db", "port": 1e300}"#).unwrap(), i64::MAX);
        assert!(port(r#"{"host": "db", "port": 80.5}"#).is_err());
        assert!(port(r#"{"host": "db", "port": "80"}"#).is_err());
    }

    #[test]
    fn lists_refuse_duplicates_and_overflow_naming_the_entry() {
        let e = check_list(&[
            raw("a.internal", 1),
            raw("b.internal", 2),
            raw("A.internal", 1),
        ])
        .unwrap_err();
        assert!(
            e.starts_with("endpoints[2]") && e.contains("endpoints[0]"),
            "{e}"
        );
        let e = check_list(&[raw("a.internal", 1), raw("*.x", 2)]).unwrap_err();
        assert!(e.starts_with("endpoints[1] (*.x:2)"), "{e}");
        let many: Vec<_> = (1..=101).map(|p| raw("a.internal", p)).collect();
        assert!(check_list(&many).unwrap_err().contains("at most 100"));
        assert_eq!(check_list(&many[..100]).unwrap().len(), 100);
    }
}
