//! The connector's configuration, read once at start from environment
//! variables only (there is no file and no flag: the connector runs as a
//! container, configured with `-e`).
//!
//! Everything is checked here, so that a typo stops the connector at once
//! with a message naming the variable instead of failing on every stream.
//! The token is kept in a [`Token`] whose `Debug` hides it.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::allow::AllowList;
use crate::proxy::{NoProxy, Proxy};

/// The prefix every connector token has.
pub const TOKEN_PREFIX: &str = "psbx_conn_";
/// Sessions kept open when `PSBX_SESSIONS` is not set.
pub const DEFAULT_SESSIONS: usize = 2;
/// The most sessions one copy may keep open.
pub const MAX_SESSIONS: usize = 8;

/// Why the configuration was refused; printed as is before exiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("PSBX_CONNECTOR_TOKEN is not a connector token: it must start with {TOKEN_PREFIX}")]
    BadToken,
    #[error(
        "PSBX_URL is not set and the token names no server (it comes from an older psbx): set PSBX_URL to the server's URL, or rotate the token to get one that names it"
    )]
    NoServer,
    #[error("the server the token names, {0:?}, is not a valid URL ({1}): set PSBX_URL")]
    BadIssuer(String, String),
    #[error("PSBX_URL {0:?} is not valid: {1}")]
    BadUrl(String, String),
    #[error("PSBX_SESSIONS {0:?} is not valid: it must be a whole number from 1 to {MAX_SESSIONS}")]
    BadSessions(String),
    #[error("PSBX_ALLOW is not valid: {0}")]
    BadAllow(String),
    #[error("{0} is not valid: {1}")]
    BadProxy(&'static str, String),
    #[error("{0} {1:?} is not valid: {2}")]
    BadValue(&'static str, String, String),
    #[error(
        "the server {0} is plain http on a host that is not loopback: the token and every stream would cross the network unencrypted; use its https URL (PSBX_URL), or set PSBX_ALLOW_INSECURE=1 if the path to it is trusted"
    )]
    Insecure(String),
}

/// A connector token. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The token itself, for the `Authorization` header only.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// The server that issued the token: `psbx_conn_<issuer>.<secret>`, the
    /// issuer being its public URL in unpadded base64url. `None` for a token
    /// without one (from a server older than this format).
    pub fn issuer(&self) -> Option<String> {
        use base64::Engine as _;
        let (issuer, _) = self.0.strip_prefix(TOKEN_PREFIX)?.split_once('.')?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(issuer)
            .ok()?;
        String::from_utf8(bytes).ok()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TOKEN_PREFIX}…")
    }
}

/// Where the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// `ws://` or `wss://` URL of `/v1/connect`.
    pub connect_url: String,
    /// Whether the connection is TLS (`https` / `wss`).
    pub tls: bool,
    /// The host as written in the URL (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// The URL for logs: scheme, host, port and path, no credentials.
    pub display: String,
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub token: Token,
    pub server: ServerUrl,
    pub sessions: usize,
    pub allow: Option<AllowList>,
    pub ca_file: Option<PathBuf>,
    /// The HTTP CONNECT proxy for the server connection, after `NO_PROXY`.
    pub proxy: Option<Proxy>,
    /// Test and debugging aid: a hosts file read instead of `/etc/hosts`.
    pub hosts_file: Option<PathBuf>,
    /// Test and debugging aid: the DNS server (ip:port) used instead of
    /// those in `/etc/resolv.conf`.
    pub dns_server: Option<SocketAddr>,
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the configuration from `get` (the environment, or a map in
    /// tests). Empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let token =
            get("PSBX_CONNECTOR_TOKEN").ok_or(ConfigError::Missing("PSBX_CONNECTOR_TOKEN"))?;
        if !token.starts_with(TOKEN_PREFIX)
            || token.len() == TOKEN_PREFIX.len()
            || token.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ConfigError::BadToken);
        }
        let token = Token(token);
        // PSBX_URL wins (say, a different name for the server inside this
        // network); the token's issuer is the default.
        let server = match get("PSBX_URL") {
            Some(url) => parse_server_url(&url)?,
            None => {
                let url = token.issuer().ok_or(ConfigError::NoServer)?;
                parse_server_url(&url).map_err(|e| match e {
                    ConfigError::BadUrl(url, why) => ConfigError::BadIssuer(url, why),
                    other => other,
                })?
            }
        };
        let insecure = match get("PSBX_ALLOW_INSECURE").as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(ConfigError::BadValue(
                    "PSBX_ALLOW_INSECURE",
                    other.to_owned(),
                    "expected 1 (or 0)".into(),
                ));
            }
        };
        if !server.tls && !insecure && !is_loopback_host(&server.host) {
            return Err(ConfigError::Insecure(server.display));
        }
        let sessions = match get("PSBX_SESSIONS") {
            None => DEFAULT_SESSIONS,
            Some(raw) => match raw.parse::<usize>() {
                Ok(n) if (1..=MAX_SESSIONS).contains(&n) => n,
                _ => return Err(ConfigError::BadSessions(raw)),
            },
        };
        let allow = get("PSBX_ALLOW")
            .map(|raw| AllowList::parse(&raw).map_err(ConfigError::BadAllow))
            .transpose()?;
        let proxy = proxy_for(&server, &get)?;
        let dns_server = get("PSBX_DNS_SERVER")
            .map(|raw| {
                raw.parse::<SocketAddr>().map_err(|_| {
                    ConfigError::BadValue("PSBX_DNS_SERVER", raw, "expected ip:port".into())
                })
            })
            .transpose()?;
        Ok(Self {
            token,
            server,
            sessions,
            allow,
            ca_file: get("PSBX_CA_FILE").map(PathBuf::from),
            proxy,
            hosts_file: get("PSBX_HOSTS_FILE").map(PathBuf::from),
            dns_server,
        })
    }
}

/// Parses `PSBX_URL` (http or https, optionally with a path prefix) into
/// the WebSocket URL of `/v1/connect`.
pub fn parse_server_url(raw: &str) -> Result<ServerUrl, ConfigError> {
    let bad = |why: &str| ConfigError::BadUrl(raw.to_owned(), why.to_owned());
    let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    let (tls, ws) = match url.scheme() {
        "https" => (true, "wss"),
        "http" => (false, "ws"),
        _ => return Err(bad("the scheme must be http or https")),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "credentials do not belong in the URL; the token is PSBX_CONNECTOR_TOKEN",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("the URL must not have a query or fragment"));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(bad("the URL has no host")),
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| bad("the URL has no port"))?;
    let authority = match url.host() {
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    let prefix = url.path().trim_end_matches('/');
    Ok(ServerUrl {
        connect_url: format!("{ws}://{authority}{prefix}/v1/connect"),
        tls,
        display: format!("{}://{authority}{prefix}", url.scheme()),
        host,
        port,
    })
}

/// Whether `host` (as [`ServerUrl::host`] holds it) is this machine:
/// `localhost`, 127.0.0.0/8 or `::1`. Plain http is accepted there only.
pub fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The proxy the server connection goes through: `https_proxy` /
/// `HTTPS_PROXY` for an https server, `http_proxy` / `HTTP_PROXY` for an
/// http one, then `all_proxy` / `ALL_PROXY`; none when `NO_PROXY` /
/// `no_proxy` matches the server's host.
fn proxy_for(
    server: &ServerUrl,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Proxy>, ConfigError> {
    let names: &[&'static str] = if server.tls {
        &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    } else {
        &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
    };
    let Some((name, raw)) = names.iter().find_map(|n| get(n).map(|v| (*n, v))) else {
        return Ok(None);
    };
    let no_proxy = NoProxy::parse(
        &get("no_proxy")
            .or_else(|| get("NO_PROXY"))
            .unwrap_or_default(),
    );
    if no_proxy.matches(&server.host, server.port) {
        return Ok(None);
    }
    Proxy::parse(&raw)
        .map(Some)
        .map_err(|e| ConfigError::BadProxy(name, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    const TOKEN: (&str, &str) = ("PSBX_CONNECTOR_TOKEN", "psbx_conn_s3cret");
    const URL: (&str, &str) = ("PSBX_URL", "https://psbx.example.com");

    #[test]
    fn the_minimal_configuration_has_defaults() {
        let c = config(&[TOKEN, URL]).unwrap();
        assert_eq!(c.sessions, DEFAULT_SESSIONS);
        assert_eq!(
            c.server.connect_url,
            "wss://psbx.example.com:443/v1/connect"
        );
        assert_eq!(c.server.display, "https://psbx.example.com:443");
        assert!(c.server.tls);
        assert!(c.allow.is_none() && c.proxy.is_none() && c.ca_file.is_none());
        assert_eq!(c.token.secret(), "psbx_conn_s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn a_missing_or_foreign_token_is_refused() {
        assert_eq!(
            config(&[URL]).unwrap_err(),
            ConfigError::Missing("PSBX_CONNECTOR_TOKEN")
        );
        assert_eq!(
            config(&[URL, ("PSBX_CONNECTOR_TOKEN", "  ")]).unwrap_err(),
            ConfigError::Missing("PSBX_CONNECTOR_TOKEN")
        );
        for bad in ["psbx_key123", "psbx_conn_", "psbx_conn_a b"] {
            let err = config(&[URL, ("PSBX_CONNECTOR_TOKEN", bad)]).unwrap_err();
            assert_eq!(err, ConfigError::BadToken);
            assert!(bad == TOKEN_PREFIX || !err.to_string().contains(bad));
        }
    }

    #[test]
    fn the_server_defaults_to_the_tokens_issuer() {
        // `psbx_conn_` + base64url("https://psbx.example.com:8443") + "." + secret,
        // as psbx issues them.
        let token = "psbx_conn_aHR0cHM6Ly9wc2J4LmV4YW1wbGUuY29tOjg0NDM.s3cret";
        let c = config(&[("PSBX_CONNECTOR_TOKEN", token)]).unwrap();
        assert_eq!(
            c.server.connect_url,
            "wss://psbx.example.com:8443/v1/connect"
        );
        assert_eq!(c.token.secret(), token);
        // PSBX_URL still wins.
        let c = config(&[("PSBX_CONNECTOR_TOKEN", token), URL]).unwrap();
        assert_eq!(
            c.server.connect_url,
            "wss://psbx.example.com:443/v1/connect"
        );
        // An issuer that is not base64url, or not a URL, is no default.
        assert_eq!(
            config(&[("PSBX_CONNECTOR_TOKEN", "psbx_conn_%%.s3cret")]).unwrap_err(),
            ConfigError::NoServer
        );
        assert!(matches!(
            config(&[("PSBX_CONNECTOR_TOKEN", "psbx_conn_bm90IGEgdXJs.s3cret")]),
            Err(ConfigError::BadIssuer(..))
        ));
    }

    #[test]
    fn urls_become_the_connect_endpoint() {
        let u = parse_server_url("http://127.0.0.1:8080/").unwrap();
        assert_eq!(u.connect_url, "ws://127.0.0.1:8080/v1/connect");
        assert!(!u.tls);
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 8080));
        let u = parse_server_url("https://example.com/psbx/").unwrap();
        assert_eq!(u.connect_url, "wss://example.com:443/psbx/v1/connect");
        let u = parse_server_url("https://[::1]:9443").unwrap();
        assert_eq!(u.connect_url, "wss://[::1]:9443/v1/connect");
        assert_eq!(u.host, "::1");
        assert_eq!(config(&[TOKEN]).unwrap_err(), ConfigError::NoServer);
        for bad in [
            "ftp://example.com",
            "example.com",
            "wss://example.com",
            "https://user:pw@example.com",
            "https://example.com/?a=1",
            "not a url",
        ] {
            assert!(
                matches!(
                    config(&[TOKEN, ("PSBX_URL", bad)]),
                    Err(ConfigError::BadUrl(..))
                ),
                "{bad}"
            );
        }
    }

    /// M6: a token naming a plain-http server that is not loopback is
    /// refused unless PSBX_ALLOW_INSECURE=1 says the path is trusted.
    #[test]
    fn plain_http_is_refused_unless_loopback_or_allowed() {
        use base64::Engine as _;
        let token_for = |issuer: &str| {
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(issuer);
            format!("psbx_conn_{b64}.s3cret")
        };
        let remote = token_for("http://psbx.example.com");
        let err = config(&[("PSBX_CONNECTOR_TOKEN", remote.as_str())]).unwrap_err();
        assert_eq!(
            err,
            ConfigError::Insecure("http://psbx.example.com:80".into())
        );
        let message = err.to_string();
        assert!(
            message.contains("https") && message.contains("PSBX_ALLOW_INSECURE=1"),
            "{message}"
        );
        // PSBX_URL is checked the same way.
        assert!(matches!(
            config(&[TOKEN, ("PSBX_URL", "http://10.0.0.5:8080")]),
            Err(ConfigError::Insecure(_))
        ));
        for local in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            let token = token_for(local);
            let c = config(&[("PSBX_CONNECTOR_TOKEN", token.as_str())]).unwrap();
            assert!(!c.server.tls, "{local}");
        }
        let c = config(&[
            ("PSBX_CONNECTOR_TOKEN", remote.as_str()),
            ("PSBX_ALLOW_INSECURE", "1"),
        ])
        .unwrap();
        assert_eq!(c.server.connect_url, "ws://psbx.example.com:80/v1/connect");
        assert!(matches!(
            config(&[
                ("PSBX_CONNECTOR_TOKEN", remote.as_str()),
                ("PSBX_ALLOW_INSECURE", "yes")
            ]),
            Err(ConfigError::BadValue("PSBX_ALLOW_INSECURE", ..))
        ));
    }

    #[test]
    fn sessions_must_be_one_to_eight() {
        for good in ["1", "8", " 3 "] {
            let c = config(&[TOKEN, URL, ("PSBX_SESSIONS", good)]).unwrap();
            assert_eq!(c.sessions, good.trim().parse::<usize>().unwrap());
        }
        for bad in ["0", "9", "-1", "two", "2.5"] {
            let err = config(&[TOKEN, URL, ("PSBX_SESSIONS", bad)]).unwrap_err();
            assert_eq!(err, ConfigError::BadSessions(bad.to_owned()));
            assert!(err.to_string().contains("from 1 to 8"));
        }
    }

    #[test]
    fn allow_lists_are_parsed_and_checked() {
        let c = config(&[
            TOKEN,
            URL,
            ("PSBX_ALLOW", "db.internal:5432, 10.0.0.5:6379"),
        ])
        .unwrap();
        let allow = c.allow.unwrap();
        assert!(allow.allows("db.internal", 5432));
        assert!(!allow.allows("db.internal", 5433));
        assert!(matches!(
            config(&[TOKEN, URL, ("PSBX_ALLOW", "db.internal")]),
            Err(ConfigError::BadAllow(_))
        ));
    }

    #[test]
    fn the_proxy_follows_the_scheme_and_no_proxy() {
        let proxy = ("HTTPS_PROXY", "http://user:p%40ss@proxy.corp:3128");
        let c = config(&[TOKEN, URL, proxy]).unwrap();
        let p = c.proxy.unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.corp", 3128));
        assert_eq!(
            p.credentials.as_ref().map(|c| c.password.as_str()),
            Some("p@ss")
        );
        assert!(!format!("{p:?}").contains("p@ss"));
        // An http server uses HTTP_PROXY, not HTTPS_PROXY.
        let http = ("PSBX_URL", "http://psbx.example.com");
        let insecure = ("PSBX_ALLOW_INSECURE", "1");
        assert!(
            config(&[TOKEN, http, insecure, proxy])
                .unwrap()
                .proxy
                .is_none()
        );
        let c = config(&[TOKEN, http, insecure, ("HTTP_PROXY", "proxy.corp:8080")]).unwrap();
        assert_eq!(c.proxy.unwrap().port, 8080);
        // NO_PROXY keeps the server direct.
        let c = config(&[TOKEN, URL, proxy, ("NO_PROXY", "localhost,.example.com")]).unwrap();
        assert!(c.proxy.is_none());
        let c = config(&[TOKEN, URL, proxy, ("no_proxy", "other.com")]).unwrap();
        assert!(c.proxy.is_some());
        assert!(matches!(
            config(&[TOKEN, URL, ("HTTPS_PROXY", "socks5://proxy:1080")]),
            Err(ConfigError::BadProxy("HTTPS_PROXY", _))
        ));
    }

    #[test]
    fn test_aids_are_parsed() {
        let c = config(&[
            TOKEN,
            URL,
            ("PSBX_DNS_SERVER", "127.0.0.1:5353"),
            ("PSBX_HOSTS_FILE", "/tmp/hosts"),
            ("PSBX_CA_FILE", "/tmp/ca.pem"),
        ])
        .unwrap();
        assert_eq!(c.dns_server, Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(c.hosts_file, Some(PathBuf::from("/tmp/hosts")));
        assert_eq!(c.ca_file, Some(PathBuf::from("/tmp/ca.pem")));
        assert!(config(&[TOKEN, URL, ("PSBX_DNS_SERVER", "localhost")]).is_err());
    }
}
