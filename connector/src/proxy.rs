//! The HTTP CONNECT proxy the server connection may go through
//! (`HTTPS_PROXY` and friends), `NO_PROXY` matching, and the CONNECT
//! handshake itself.
//!
//! The handshake is written by hand: it is one request and one status line
//! over a `TcpStream`, and the crates that do it either pull in a whole
//! HTTP client stack (hyper-util's tunnel connector, reqwest) or are no
//! longer maintained (async-http-proxy). The response is read one byte at a
//! time, so that nothing after the proxy's header is consumed before the
//! TLS or WebSocket handshake that follows.

use std::fmt;
use std::net::IpAddr;

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The port a proxy URL without one uses (curl's default).
const DEFAULT_PROXY_PORT: u16 = 1080;
/// The largest proxy response header accepted.
const MAX_RESPONSE_HEADER: usize = 16 * 1024;

/// An HTTP proxy (`http://[user:pass@]host[:port]`).
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    pub credentials: Option<Credentials>,
}

/// Basic credentials for the proxy, percent-decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// Why the tunnel through the proxy could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("proxy I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("the proxy closed the connection before answering CONNECT")]
    Closed,
    #[error("the proxy's answer to CONNECT is not HTTP: {0:?}")]
    Malformed(String),
    #[error("the proxy requires authentication (407): set user:password in the proxy URL")]
    AuthRequired,
    #[error("the proxy refused the credentials in the proxy URL (407)")]
    AuthRefused,
    #[error("the proxy refused CONNECT: {0}")]
    Refused(String),
}

impl Proxy {
    /// Parses a proxy URL; a bare `host:port` means `http://host:port`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let with_scheme = if raw.contains("://") {
            raw.to_owned()
        } else {
            format!("http://{raw}")
        };
        let url = url::Url::parse(&with_scheme).map_err(|e| format!("{e}"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "only http:// proxies (HTTP CONNECT) are supported, not {}://",
                url.scheme()
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err("the proxy URL has no host".into()),
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| "the proxy credentials are not UTF-8".to_owned())
        };
        let credentials = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            Some(Credentials {
                user: decode(url.username())?,
                password: decode(url.password().unwrap_or(""))?,
            })
        };
        Ok(Self {
            host,
            port: url.port().unwrap_or(if explicit_port_80(&with_scheme) {
                80
            } else {
                DEFAULT_PROXY_PORT
            }),
            credentials,
        })
    }

    /// `host:port` to connect to (brackets around IPv6).
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }

    /// Opens a tunnel to `host:port` over `io`, a connection to the proxy.
    pub async fn connect<S>(&self, io: &mut S, host: &str, port: u16) -> Result<(), ProxyError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let target = authority(host, port);
        let mut request = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: {}\r\n",
            crate::USER_AGENT
        );
        if let Some(c) = &self.credentials {
            let basic = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", c.user, c.password));
            request.push_str(&format!("Proxy-Authorization: Basic {basic}\r\n"));
        }
        request.push_str("\r\n");
        io.write_all(request.as_bytes()).await?;
        io.flush().await?;
        let header = read_header(io).await?;
        let status_line = header.lines().next().unwrap_or_default().trim().to_owned();
        let mut parts = status_line.split_whitespace();
        let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
            return Err(ProxyError::Malformed(status_line));
        };
        if !version.starts_with("HTTP/1.") {
            return Err(ProxyError::Malformed(status_line));
        }
        match code {
            c if c.starts_with('2') && c.len() == 3 => Ok(()),
            "407" if self.credentials.is_some() => Err(ProxyError::AuthRefused),
            "407" => Err(ProxyError::AuthRequired),
            _ => Err(ProxyError::Refused(status_line)),
        }
    }
}

/// `Url::port()` is None both without a port and with the scheme's own
/// port 80; this tells them apart.
fn explicit_port_80(url: &str) -> bool {
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    authority
        .rsplit('@')
        .next()
        .is_some_and(|host_port| host_port.ends_with(":80"))
}

/// Reads the proxy's response header, up to the blank line, byte by byte.
async fn read_header<S: AsyncRead + Unpin>(io: &mut S) -> Result<String, ProxyError> {
    let mut header = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !header.ends_with(b"\r\n\r\n") && !header.ends_with(b"\n\n") {
        if header.len() >= MAX_RESPONSE_HEADER {
            return Err(ProxyError::Malformed(
                "a response header over 16 KiB".into(),
            ));
        }
        if io.read(&mut byte).await? == 0 {
            return Err(ProxyError::Closed);
        }
        header.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&header).into_owned())
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("credentials", &self.credentials.as_ref().map(|_| "…"))
            .finish()
    }
}

impl fmt::Display for Proxy {
    /// The proxy for logs, without credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority())
    }
}

/// `NO_PROXY`: hosts reached directly. Entries are separated by commas or
/// spaces: `*` (everything), a domain (`example.com` and `.example.com`
/// both match it and its subdomains; `*.example.com` too), an IP address,
/// or a CIDR block (`10.0.0.0/8`); any of them with `:port` to match that
/// port only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoProxy {
    entries: Vec<(Pattern, Option<u16>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    All,
    Domain(String),
    Net(IpAddr, u8),
}

impl NoProxy {
    /// Parses the list; entries that mean nothing are ignored, as curl does.
    pub fn parse(raw: &str) -> Self {
        let entries = raw
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
            .filter_map(parse_entry)
            .collect();
        Self { entries }
    }

    /// Whether a connection to `host:port` skips the proxy.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.entries.iter().any(|(pattern, p)| {
            p.is_none_or(|p| p == port)
                && match pattern {
                    Pattern::All => true,
                    Pattern::Domain(d) => host == *d || host.ends_with(&format!(".{d}")),
                    Pattern::Net(net, bits) => ip.is_some_and(|ip| in_net(ip, *net, *bits)),
                }
        })
    }
}

fn parse_entry(entry: &str) -> Option<(Pattern, Option<u16>)> {
    if entry == "*" {
        return Some((Pattern::All, None));
    }
    // `[v6]:port`, `[v6]`, `v6`, `v6/bits`, `host:port`, `host`.
    let (body, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        (inside, after.strip_prefix(':').and_then(|p| p.parse().ok()))
    } else if entry.matches(':').count() == 1 {
        let (h, p) = entry.split_once(':')?;
        (h, Some(p.parse().ok()?))
    } else {
        (entry, None)
    };
    if let Some((net, bits)) = body.split_once('/') {
        let net: IpAddr = net.parse().ok()?;
        let bits: u8 = bits.parse().ok()?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        return (bits <= max).then_some((Pattern::Net(net, bits), port));
    }
    if let Ok(ip) = body.parse::<IpAddr>() {
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        return Some((Pattern::Net(ip, bits), port));
    }
    let domain = body
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    (!domain.is_empty()).then_some((Pattern::Domain(domain), port))
}

fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls_parse() {
        let p = Proxy::parse("http://u%3Ax:p%40ss@proxy.corp:3128").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.corp", 3128));
        let c = p.credentials.as_ref().unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("u:x", "p@ss"));
        assert_eq!(p.to_string(), "http://proxy.corp:3128");
        assert_eq!(
            Proxy::parse("10.0.0.1:8080").unwrap().authority(),
            "10.0.0.1:8080"
        );
        assert_eq!(Proxy::parse("http://proxy").unwrap().port, 1080);
        assert_eq!(Proxy::parse("http://proxy:80").unwrap().port, 80);
        assert_eq!(Proxy::parse("http://u:80@proxy").unwrap().port, 1080);
        assert_eq!(
            Proxy::parse("http://[::1]:3128").unwrap().authority(),
            "[::1]:3128"
        );
        assert!(Proxy::parse("https://proxy:443").is_err());
        assert!(Proxy::parse("socks5h://proxy:1080").is_err());
        assert!(Proxy::parse("http://").is_err());
    }

    #[test]
    fn no_proxy_matches_domains_ips_nets_and_ports() {
        let np = NoProxy::parse(
            "localhost, .corp.example *.svc.local 10.0.0.0/8 192.168.1.7 internal.example:8443 [::1]",
        );
        assert!(np.matches("localhost", 443));
        assert!(np.matches("LOCALHOST.", 443));
        assert!(np.matches("corp.example", 443));
        assert!(np.matches("psbx.corp.example", 443));
        assert!(!np.matches("notcorp.example", 443));
        assert!(np.matches("api.svc.local", 80));
        assert!(np.matches("10.20.30.40", 443));
        assert!(!np.matches("11.0.0.1", 443));
        assert!(np.matches("192.168.1.7", 443));
        assert!(!np.matches("192.168.1.8", 443));
        assert!(np.matches("internal.example", 8443));
        assert!(!np.matches("internal.example", 443));
        assert!(np.matches("::1", 443));
        assert!(!np.matches("example.com", 443));
        assert!(NoProxy::parse("*").matches("anything.example", 1));
        assert!(!NoProxy::parse("").matches("localhost", 1));
        assert!(!NoProxy::parse("10.0.0.0/40,:,[").matches("10.0.0.1", 1));
    }

    #[tokio::test]
    async fn connect_sends_credentials_and_reads_only_the_header() {
        let proxy = Proxy::parse("http://user:pw@proxy:3128").unwrap();
        let (mut client, mut server) = tokio::io::duplex(4096);
        let answer = tokio::spawn(async move {
            let mut buf = vec![0u8; 1024];
            let n = server.read(&mut buf).await.unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            server
                .write_all(b"HTTP/1.1 200 Connection established\r\nX: y\r\n\r\nAFTER")
                .await
                .unwrap();
            request
        });
        proxy
            .connect(&mut client, "psbx.example.com", 443)
            .await
            .unwrap();
        let request = answer.await.unwrap();
        assert!(request.starts_with("CONNECT psbx.example.com:443 HTTP/1.1\r\n"));
        assert!(request.contains("Host: psbx.example.com:443\r\n"));
        // base64("user:pw")
        assert!(request.contains("Proxy-Authorization: Basic dXNlcjpwdw==\r\n"));
        let mut rest = [0u8; 5];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"AFTER");
    }

    #[tokio::test]
    async fn connect_reports_refusals() {
        for (answer, anonymous, want) in [
            (
                "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
                true,
                "requires authentication",
            ),
            (
                "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
                false,
                "refused the credentials",
            ),
            (
                "HTTP/1.0 403 Forbidden\r\n\r\n",
                true,
                "refused CONNECT: HTTP/1.0 403 Forbidden",
            ),
            ("SSH-2.0-OpenSSH\r\n\r\n", true, "not HTTP"),
        ] {
            let proxy = Proxy::parse(if anonymous {
                "proxy:1"
            } else {
                "http://u:p@proxy:1"
            })
            .unwrap();
            let (mut client, mut server) = tokio::io::duplex(4096);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1024];
                let _ = server.read(&mut buf).await;
                let _ = server.write_all(answer.as_bytes()).await;
            });
            let err = proxy.connect(&mut client, "h", 1).await.unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
        let proxy = Proxy::parse("proxy:1").unwrap();
        let (mut client, server) = tokio::io::duplex(4096);
        drop(server);
        assert!(proxy.connect(&mut client, "h", 1).await.is_err());
    }
}
