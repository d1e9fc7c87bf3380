//! The suggested endpoints of an environment
//! (`GET /v1/environments/{env}/suggested-endpoints`, spec "Set it up" item
//! 3): the addresses found in its services' settings that look like the
//! environment's own network.
//!
//! Found:
//! * every `host:port` in a value (also several in one value, and inside
//!   longer text such as a Go DSN's `tcp(db.internal:3306)`);
//! * every URL `scheme://[user[:pass]@]host[:port][,host[:port]...]/...`, each
//!   host of a comma-separated list on its own; without a port, the scheme's
//!   default (postgres/postgresql 5432, mysql/mariadb 3306, redis/rediss 6379,
//!   mongodb 27017, amqp 5672, amqps 5671, http 80, https 443, and
//!   `base+driver` schemes such as `postgresql+asyncpg` like their base); a URL
//!   of another scheme without a port gives nothing, and neither does
//!   `mongodb+srv` (or any `+srv`) without a port: its host is a DNS SRV name
//!   whose records hold the real hosts and ports, which only the connector's
//!   network can resolve, so those are added by hand;
//! * every `<P>_HOST` variable whose value is a host name or IPv4 address,
//!   with a `<P>_PORT` variable of the same service holding a port (the source
//!   named is the `_HOST` variable; `<p>_host` pairs with `<p>_port`).
//!
//! Kept only when the host is a private IPv4 address or ends in one of the
//! private suffixes (`scan::is_private_host`); ports are 1-65535; IPv6
//! literals are never suggested. Deduplicated by (host lowercased, port),
//! each with every service and variable it came from (sorted, no duplicates),
//! sorted by host then port.

use super::scan;
use std::collections::{BTreeMap, BTreeSet};

/// One suggested endpoint.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Suggestion {
    /// Lowercased.
    pub host: String,
    pub port: u16,
    pub sources: Vec<Source>,
}

/// Where a suggestion was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    pub service: String,
    pub variable: String,
}

/// The suggestions for services given as `(service, settings)`.
pub fn suggest(services: &[(String, Vec<(String, String)>)]) -> Vec<Suggestion> {
    let mut found: BTreeMap<(String, u16), BTreeSet<Source>> = BTreeMap::new();
    for (service, vars) in services {
        let mut add = |variable: &str, host: &str, port: u16| {
            if scan::is_private_host(host) {
                let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
                found.entry((host, port)).or_default().insert(Source {
                    service: service.clone(),
                    variable: variable.to_owned(),
                });
            }
        };
        for (name, value) in vars {
            for (host, port) in in_value(value) {
                add(name, &host, port);
            }
            if let Some((host, port)) = host_with_port(name, value, vars) {
                add(name, host, port);
            }
        }
    }
    found
        .into_iter()
        .map(|((host, port), sources)| Suggestion {
            host,
            port,
            sources: sources.into_iter().collect(),
        })
        .collect()
}

/// The URLs' hosts and the bare `host:port`s of one value.
fn in_value(value: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for url in scan::urls(value) {
        for (host, port) in url.hosts {
            if let Some(port) = port.or_else(|| scan::default_port(&url.scheme)) {
                out.push((host, port));
            }
        }
    }
    out.extend(scan::host_ports(value));
    out
}

/// `<P>_HOST` with a `<P>_PORT` in the same settings.
fn host_with_port<'a>(
    name: &str,
    value: &'a str,
    vars: &[(String, String)],
) -> Option<(&'a str, u16)> {
    let port_name = match (name.strip_suffix("_HOST"), name.strip_suffix("_host")) {
        (Some(prefix), _) => format!("{prefix}_PORT"),
        (_, Some(prefix)) => format!("{prefix}_port"),
        _ => return None,
    };
    let (_, port) = vars.iter().rev().find(|(n, _)| *n == port_name)?;
    let host = value.trim();
    if !scan::is_host(host) {
        return None;
    }
    Some((host, scan::parse_port(port.trim())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::service_settings::dotenv;

    const FIXTURE: &str = include_str!("testdata/suggest.env");

    /// The fixture as two services: lines up to `# --- service worker` are
    /// `api`, the rest `worker`.
    fn fixture() -> Vec<(String, Vec<(String, String)>)> {
        let (api, worker) = FIXTURE.split_once("# --- service worker").unwrap();
        vec![
            ("api".to_string(), dotenv::parse(api).unwrap()),
            ("worker".to_string(), dotenv::parse(worker).unwrap()),
        ]
    }

    fn src(service: &str, variable: &str) -> Source {
        Source {
            service: service.into(),
            variable: variable.into(),
        }
    }

    #[test]
    fn fixture_parses_as_one_file_too() {
        assert!(dotenv::parse(FIXTURE).is_ok());
    }

    #[test]
    fn every_rule_on_the_fixture() {
        let got = suggest(&fixture());
        let expected: Vec<(&str, u16, Vec<Source>)> = vec![
            ("10.0.1.5", 8080, vec![src("api", "LEGACY_API")]),
            ("10.0.3.9", 5432, vec![src("api", "REPORTS_DB")]),
            ("172.16.0.10", 80, vec![src("api", "INVENTORY_URL")]),
            ("172.31.255.254", 9200, vec![src("worker", "SEARCH_HOST")]),
            ("192.168.10.20", 25, vec![src("api", "SMTP_SERVER")]),
            ("a.mongo.internal", 27017, vec![src("worker", "MONGO_URL")]),
            ("b.mongo.internal", 27018, vec![src("worker", "MONGO_URL")]),
            (
                "billing.svc.cluster.local",
                80,
                vec![src("api", "BILLING_URL")],
            ),
            (
                "broker-1.kafka.internal",
                9092,
                vec![src("worker", "KAFKA_BROKERS")],
            ),
            (
                "broker-2.kafka.internal",
                9092,
                vec![src("worker", "KAFKA_BROKERS")],
            ),
            (
                "cache.abc123.0001.apne1.cache.amazonaws.com",
                6379,
                vec![src("api", "CACHE_URL")],
            ),
            ("cache.internal", 6380, vec![src("worker", "SESSION_REDIS")]),
            (
                "docs.cluster-abc.ap-northeast-1.docdb.amazonaws.com",
                27017,
                vec![src("worker", "DOCS_URI")],
            ),
            (
                "dwh.abc.ap-northeast-1.redshift.amazonaws.com",
                5439,
                vec![src("worker", "WAREHOUSE_URL")],
            ),
            (
                "mydb.xxxx.ap-northeast-1.rds.amazonaws.com",
                5432,
                vec![
                    src("api", "DATABASE_URL"),
                    src("api", "READ_REPLICA_URL"),
                    src("worker", "DATABASE_URL"),
                ],
            ),
            ("mysql.corp", 3306, vec![src("api", "LEGACY_MYSQL")]),
            ("orders-db.internal", 3306, vec![src("api", "ORDERS_DSN")]),
            ("pg.internal", 5433, vec![src("worker", "PG_HOST")]),
            ("printer.lan", 631, vec![src("api", "PRINTER")]),
            ("queue.internal", 5671, vec![src("worker", "AMQP_URL")]),
            ("rabbit.local", 5672, vec![src("worker", "EVENTS_AMQP")]),
            (
                "search-logs-abc.ap-northeast-1.es.amazonaws.com",
                443,
                vec![src("worker", "LOGS_ES")],
            ),
            ("sessions.internal", 6379, vec![src("api", "SESSION_STORE")]),
            ("shop.mysql.internal", 3306, vec![src("api", "SHOP_DB")]),
            ("users.svc", 8443, vec![src("api", "USERS_API")]),
            (
                "b-1.mq.ap-northeast-1.mq.amazonaws.com",
                5671,
                vec![src("worker", "MQ_URL")],
            ),
        ];
        let mut expected: Vec<Suggestion> = expected
            .into_iter()
            .map(|(host, port, sources)| Suggestion {
                host: host.into(),
                port,
                sources,
            })
            .collect();
        expected.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
        for s in &expected {
            assert!(
                got.contains(s),
                "missing or different: {s:?}\n got: {got:#?}"
            );
        }
        for s in &got {
            assert!(expected.contains(s), "unexpected: {s:?}");
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn negatives_of_the_fixture() {
        let got = suggest(&fixture());
        let hosts: Vec<&str> = got.iter().map(|s| s.host.as_str()).collect();
        for host in [
            "api.stripe.com",
            "internal-foo-123.ap-northeast-1.elb.amazonaws.com",
            "db.acme-private.net",
            "172.32.0.1",
            "8.8.8.8",
            "lonely.internal",
            "kafka.internal",
            "srv.mongo.internal",
            "cluster0.abcd.mongodb.net",
            "localhost",
            "127.0.0.1",
            "::1",
            "big.internal",
            "zero.internal",
            "nohostport.internal",
            "cross.internal",
        ] {
            assert!(!hosts.contains(&host), "{host} must not be suggested");
        }
        // Every source variable of the fixture that must give nothing.
        let sources: Vec<&str> = got
            .iter()
            .flat_map(|s| s.sources.iter().map(|x| x.variable.as_str()))
            .collect();
        for v in sources {
            assert!(!v.starts_with("NOT_"), "{v} is a negative");
        }
    }

    #[test]
    fn host_and_port_pairs() {
        let services = vec![(
            "s".to_string(),
            vec![
                ("DB_HOST".to_string(), "db.internal".to_string()),
                ("DB_PORT".to_string(), "6543".to_string()),
                ("X_HOST".to_string(), "x.internal".to_string()),
                ("Y_HOST".to_string(), "y.internal".to_string()),
                ("Y_PORT".to_string(), "http".to_string()),
                ("cache_host".to_string(), "10.0.0.9".to_string()),
                ("cache_port".to_string(), "6379".to_string()),
            ],
        )];
        let got = suggest(&services);
        assert_eq!(
            got,
            vec![
                Suggestion {
                    host: "10.0.0.9".into(),
                    port: 6379,
                    sources: vec![src("s", "cache_host")],
                },
                Suggestion {
                    host: "db.internal".into(),
                    port: 6543,
                    sources: vec![src("s", "DB_HOST")],
                }
            ]
        );
    }

    #[test]
    fn dedup_is_case_insensitive_and_sources_unique() {
        let services = vec![
            (
                "b".to_string(),
                vec![(
                    "U".to_string(),
                    "DB.Internal:5432 db.internal:5432".to_string(),
                )],
            ),
            (
                "a".to_string(),
                vec![("U".to_string(), "postgres://db.internal/x".to_string())],
            ),
        ];
        assert_eq!(
            suggest(&services),
            vec![Suggestion {
                host: "db.internal".into(),
                port: 5432,
                sources: vec![src("a", "U"), src("b", "U")],
            }]
        );
    }

    #[test]
    fn serializes_camel_case() {
        let s = &suggest(&[(
            "api".to_string(),
            vec![("A".to_string(), "10.0.0.1:80".to_string())],
        )])[0];
        assert_eq!(
            serde_json::to_value(s).unwrap(),
            serde_json::json!({"host": "10.0.0.1", "port": 80, "sources": [{"service": "api", "variable": "A"}]})
        );
    }
}
