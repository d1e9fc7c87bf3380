//! The settings of a service worth pointing out to an agent (spec "Use it from
//! a box", "Which settings matter"), out of the dozens a service can have.
//! Each list keeps the settings' order; a name can be in several lists.
//!
//! * **connection**: names whose value points somewhere: a URL with a host
//!   (any scheme: `postgres://`, `mysql://`, `redis://`, `mongodb+srv://`,
//!   `amqp://`, `http(s)://`, `jdbc:postgresql://`..., also inside a longer
//!   value), a `host:port` (or a list of them), or a name ending in `_HOST`,
//!   `_HOSTS`, `_HOSTNAME`, `_ADDR`, `_ADDRESS`, `_ENDPOINT`, `_DSN`, `_URL` or
//!   `_URI` whose value is a host name or IPv4 address. This is how the
//!   database variable is found when it is not `DATABASE_URL`. A value on
//!   `0.0.0.0` is a listening address, not a connection, and words such as
//!   `true` or `none` are not hosts. Names only.
//! * **mode**: names `STAGE`, `ENV`, `ENVIRONMENT`, `MODE`, `DEBUG`,
//!   `DRY_RUN`, ending in `_MODE`, `_ENV`, `_ENVIRONMENT`, `_STAGE`,
//!   `_BYPASS`, `_DISABLED`, `_ENABLED`, `_DEBUG` or `_DRY_RUN`, or starting
//!   with `SKIP_`, `BYPASS_`, `DISABLE_` or `ENABLE_` (`SERVER_MODE`,
//!   `NODE_ENV`, `AUTH_BYPASS`...). Listed with dev's value, cut to 100
//!   characters. A setting whose name or value looks like a secret (a name
//!   with `SECRET`, `PASSWORD`, `TOKEN`, `KEY`, `CREDENTIAL` or `PRIVATE`; a
//!   value with a PEM block, a URL password, or a long random-looking word) is
//!   left out of this list, so no value shown can be a secret.
//! * **permission**: names with a `_`-separated part `ADMIN`, `ADMINS`,
//!   `ADMINISTRATOR(S)`, `SUPERUSER(S)`, `ALLOW`, `ALLOWED`, `ALLOWLIST`,
//!   `WHITELIST`, `PERMISSIONS` or `ROLES`, or containing `ALLOW_LIST` or
//!   `WHITE_LIST` (admin lists, allowlists: dev's own, not production's).
//!   Names only. Whole parts, so `BADMINTON` or `SHALLOW` are not matched.
//!
//! Names are matched case-insensitively.

use super::scan;
pub use crate::spec::{Notable, NotableValue};

/// Longest value listed for a mode setting, in characters.
pub const MAX_MODE_VALUE: usize = 100;

/// Picks the notable settings out of a service's settings.
pub fn notable(vars: &[(String, String)]) -> Notable {
    let mut out = Notable::default();
    for (name, value) in vars {
        let upper = name.to_ascii_uppercase();
        if is_connection(&upper, value) {
            out.connection.push(name.clone());
        }
        if is_mode(&upper) && !looks_secret(&upper, value) {
            out.mode.push(NotableValue {
                name: name.clone(),
                value: cap(value),
            });
        }
        if is_permission(&upper) {
            out.permission.push(name.clone());
        }
    }
    out
}

const HOST_SUFFIXES: &[&str] = &[
    "_HOST",
    "_HOSTS",
    "_HOSTNAME",
    "_ADDR",
    "_ADDRESS",
    "_ENDPOINT",
    "_DSN",
    "_URL",
    "_URI",
];

const NOT_HOSTS: &[&str] = &[
    "true", "false", "yes", "no", "on", "off", "none", "null", "nil", "auto", "default",
    "disabled", "enabled",
];

fn is_connection(upper: &str, value: &str) -> bool {
    let usable = |host: &str| host != "0.0.0.0";
    if scan::urls(value)
        .iter()
        .any(|u| u.hosts.iter().any(|(h, _)| usable(h)))
    {
        return true;
    }
    if scan::host_ports(value).iter().any(|(h, _)| usable(h)) {
        return true;
    }
    let value = value.trim();
    HOST_SUFFIXES.iter().any(|s| upper.ends_with(s))
        && scan::is_host(value)
        && usable(value)
        && !NOT_HOSTS.contains(&value.to_ascii_lowercase().as_str())
}

fn is_mode(upper: &str) -> bool {
    const EXACT: &[&str] = &["STAGE", "ENV", "ENVIRONMENT", "MODE", "DEBUG", "DRY_RUN"];
    const SUFFIX: &[&str] = &[
        "_MODE",
        "_ENV",
        "_ENVIRONMENT",
        "_STAGE",
        "_BYPASS",
        "_DISABLED",
        "_ENABLED",
        "_DEBUG",
        "_DRY_RUN",
    ];
    const PREFIX: &[&str] = &["SKIP_", "BYPASS_", "DISABLE_", "ENABLE_"];
    EXACT.contains(&upper)
        || SUFFIX.iter().any(|s| upper.ends_with(s))
        || PREFIX.iter().any(|p| upper.starts_with(p))
}

fn is_permission(upper: &str) -> bool {
    const PARTS: &[&str] = &[
        "ADMIN",
        "ADMINS",
        "ADMINISTRATOR",
        "ADMINISTRATORS",
        "SUPERUSER",
        "SUPERUSERS",
        "ALLOW",
        "ALLOWED",
        "ALLOWLIST",
        "WHITELIST",
        "PERMISSIONS",
        "ROLES",
    ];
    upper.contains("ALLOW_LIST")
        || upper.contains("WHITE_LIST")
        || upper.split('_').any(|part| PARTS.contains(&part))
}

/// The secret-looking parts of settings, to be masked in what reaches a
/// caller as secrets are: a URL's password, and the whole value of a setting
/// that looks secret by its name or its value.
pub fn secret_values(vars: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in vars {
        let passwords: Vec<String> = scan::urls(value)
            .iter()
            .filter_map(|url| {
                userinfo(value, url)
                    .and_then(|u| u.split_once(':'))
                    .map(|(_, password)| password.to_owned())
            })
            .filter(|p| !p.is_empty())
            .collect();
        let upper = name.to_ascii_uppercase();
        if secret_name(&upper) || (passwords.is_empty() && looks_secret(&upper, value)) {
            out.push(value.clone());
        } else {
            out.extend(passwords);
        }
    }
    out
}

/// The `user[:password]` part of a URL found in `value`, if it has one.
fn userinfo<'a>(value: &'a str, url: &scan::Url) -> Option<&'a str> {
    value[url.span.clone()]
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .map(|(info, _)| info)
}

/// Whether a setting's name says it holds a secret.
fn secret_name(upper: &str) -> bool {
    const SECRET_NAMES: &[&str] = &[
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "TOKEN",
        "CREDENTIAL",
        "PRIVATE",
    ];
    SECRET_NAMES.iter().any(|s| upper.contains(s))
        || upper
            .split('_')
            .any(|p| p == "KEY" || p == "KEYS" || p == "PWD")
}

/// Whether a setting's value may be a secret and must not be shown.
fn looks_secret(upper: &str, value: &str) -> bool {
    if secret_name(upper) {
        return true;
    }
    if value.contains("-----BEGIN") {
        return true;
    }
    // A password in a URL: scheme://user:pass@host.
    if scan::urls(value)
        .iter()
        .any(|u| userinfo(value, u).is_some_and(|info| info.contains(':')))
    {
        return true;
    }
    value.split_whitespace().any(random_looking)
}

/// A word of 16 or more characters mixing lower case, upper case and digits,
/// or of 32 or more mixing letters and digits (hex keys).
fn random_looking(word: &str) -> bool {
    let len = word.chars().count();
    let lower = word.bytes().any(|b| b.is_ascii_lowercase());
    let upper = word.bytes().any(|b| b.is_ascii_uppercase());
    let digit = word.bytes().any(|b| b.is_ascii_digit());
    (len >= 16 && lower && upper && digit) || (len >= 32 && (lower || upper) && digit)
}

fn cap(value: &str) -> String {
    if value.chars().count() <= MAX_MODE_VALUE {
        return value.to_owned();
    }
    let mut out: String = value.chars().take(MAX_MODE_VALUE - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn connection(name: &str, value: &str) -> bool {
        notable(&vars(&[(name, value)])).connection == vec![name.to_string()]
    }

    #[test]
    fn connection_settings() {
        for (name, value) in [
            ("DATABASE_URL", "postgres://u:p@db.internal:5432/app"),
            (
                "MAIN_DB",
                "postgresql://u@mydb.abc.ap-northeast-1.rds.amazonaws.com/app",
            ),
            ("PRIMARY", "mysql://root@10.0.1.5/shop"),
            ("CACHE", "rediss://:pw@cache.internal"),
            ("DOCS", "mongodb+srv://u:p@cluster0.abcd.mongodb.net/db"),
            (
                "REPLICA",
                "mongodb://a.internal:27017,b.internal:27017/db?replicaSet=rs0",
            ),
            ("QUEUE", "amqps://u:p@mq.internal/vhost"),
            ("BILLING", "http://billing.svc.local:8080"),
            ("PAYMENTS_API", "https://payments.example.com/v2"),
            (
                "JAVA_OPTS",
                "-Xmx1g -Dspring.datasource.url=jdbc:postgresql://db.internal:5432/x",
            ),
            (
                "KAFKA_BROKERS",
                "b-1.kafka.internal:9092,b-2.kafka.internal:9092",
            ),
            ("MEMCACHE", "10.0.2.7:11211"),
            ("PG_HOST", "pg.internal"),
            ("DB_HOSTNAME", "postgres"),
            ("STATSD_ADDR", "172.17.0.1"),
            ("SEARCH_ENDPOINT", "search-x.es.amazonaws.com"),
            ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/2"),
            ("redis_uri", "cache.internal"),
        ] {
            assert!(connection(name, value), "{name}={value}");
        }
    }

    #[test]
    fn not_connection_settings() {
        for (name, value) in [
            ("PORT", "8080"),
            ("HOST", "0.0.0.0"),
            ("BIND_ADDR", "0.0.0.0:8080"),
            ("LISTEN_ADDR", ":8080"),
            ("LOG_LEVEL", "info"),
            ("CRON", "0 12:30 * * *"),
            ("VERSION", "1.2:3"),
            ("TZ", "Asia/Tokyo"),
            ("API_URL", ""),
            ("ASSETS_URL", "/static/"),
            ("USE_HOST", "true"),
            ("GREETING", "hello world"),
            ("DATA_DIR", "/var/lib/app"),
            ("UNIX_SOCKET_URL", "unix:///var/run/app.sock"),
            ("DEFAULT_URI", "none"),
        ] {
            assert!(!connection(name, value), "{name}={value}");
        }
    }

    fn mode(name: &str, value: &str) -> Option<String> {
        notable(&vars(&[(name, value)]))
            .mode
            .into_iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }

    #[test]
    fn mode_settings() {
        for name in [
            "SERVER_MODE",
            "STAGE",
            "ENV",
            "ENVIRONMENT",
            "APP_ENV",
            "NODE_ENV",
            "RAILS_ENV",
            "CUBELV_ENV",
            "MAINTENANCE_MODE",
            "AUTH_BYPASS",
            "CAPTCHA_DISABLED",
            "RATE_LIMIT_ENABLED",
            "SKIP_EMAIL_VERIFICATION",
            "DEBUG",
            "SQL_DEBUG",
            "APP_STAGE",
            "DISABLE_AUTH",
            "ENABLE_MOCKS",
            "BYPASS_PAYMENTS",
            "DRY_RUN",
            "node_env",
        ] {
            assert_eq!(mode(name, "dev").as_deref(), Some("dev"), "{name}");
        }
        assert_eq!(mode("STAGE", "").as_deref(), Some(""));
    }

    #[test]
    fn mode_values_are_capped() {
        let long = "x".repeat(150);
        let shown = mode("SERVER_MODE", &long).unwrap();
        assert_eq!(shown.chars().count(), MAX_MODE_VALUE);
        assert!(shown.ends_with('…'));
        let exact = "y".repeat(MAX_MODE_VALUE);
        assert_eq!(mode("SERVER_MODE", &exact).unwrap(), exact);
    }

    #[test]
    fn mode_never_shows_secrets() {
        for (name, value) in [
            ("AUTH_BYPASS", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
            ("DEBUG", "d41d8cd98f00b204e9800998ecf8427e"),
            (
                "SERVER_MODE",
                "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----",
            ),
            ("APP_ENV", "postgres://admin:hunter2@db.internal/app"),
            ("BYPASS_TOKEN", "letmein"),
            ("SECRET_MODE", "on"),
            ("DEBUG_API_KEY", "abc"),
        ] {
            assert_eq!(mode(name, value), None, "{name}={value}");
        }
        // Ordinary flags are shown.
        assert_eq!(
            mode("APP_ENV", "production-eu-west-1").as_deref(),
            Some("production-eu-west-1")
        );
        assert_eq!(mode("LOG_FORMAT_MODE", "json").as_deref(), Some("json"));
    }

    #[test]
    fn not_mode_settings() {
        for name in [
            "MODEL_NAME",
            "ENV_FILE",
            "DEBUGGER_PORT",
            "ENVOY_PORT",
            "DOTENV_PATH",
            "SKIPPER",
            "STAGED_FILES",
        ] {
            assert_eq!(mode(name, "x"), None, "{name}");
        }
    }

    fn permission(name: &str) -> bool {
        notable(&vars(&[(name, "x")])).permission == vec![name.to_string()]
    }

    #[test]
    fn permission_settings() {
        for name in [
            "ADMIN_EMAILS",
            "ADMINS",
            "SUPERUSER_IDS",
            "IP_ALLOWLIST",
            "EMAIL_ALLOW_LIST",
            "IP_WHITELIST",
            "ALLOWED_ORIGINS",
            "CORS_ALLOW_ORIGIN",
            "USER_PERMISSIONS",
            "DEFAULT_ROLES",
            "ADMINISTRATORS",
            "allowed_hosts",
            "DOMAIN_WHITE_LIST",
        ] {
            assert!(permission(name), "{name}");
        }
    }

    #[test]
    fn not_permission_settings() {
        for name in [
            "BADMINTON_URL",
            "GIT_SHALLOW",
            "SWALLOW_ERRORS",
            "CONTROLES",
            "AWS_ROLE_ARN",
            "LOG_LEVEL",
        ] {
            assert!(!permission(name), "{name}");
        }
    }

    #[test]
    fn secret_values_are_what_gets_masked() {
        let got = secret_values(&vars(&[
            ("DATABASE_URL", "postgres://app:s3cretpass@db.internal/app"),
            ("STRIPE_API_KEY", "sk_test_abcdefgh"),
            (
                "SIGNING",
                "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----",
            ),
            ("STAGE", "dev"),
            ("DB_HOST", "db.internal"),
        ]));
        assert_eq!(
            got,
            [
                "s3cretpass",
                "sk_test_abcdefgh",
                "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----"
            ]
        );
    }

    #[test]
    fn order_and_overlap() {
        let n = notable(&vars(&[
            ("LOG_LEVEL", "info"),
            ("ADMIN_URL", "http://admin.internal"),
            ("APP_ENV", "dev"),
            ("DATABASE_URL", "postgres://db.internal/app"),
        ]));
        assert_eq!(n.connection, vec!["ADMIN_URL", "DATABASE_URL"]);
        assert_eq!(n.permission, vec!["ADMIN_URL"]);
        assert_eq!(
            n.mode,
            vec![NotableValue {
                name: "APP_ENV".into(),
                value: "dev".into()
            }]
        );
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["mode"][0]["name"], "APP_ENV");
        assert!(json.get("connection").is_some() && json.get("permission").is_some());
        assert_eq!(notable(&[]), Notable::default());
    }
}
