//! What the server asks of boxd, stream by stream. Each request opens a stream
//! whose target names the [`Service`]; the server writes one JSON request
//! (when the service takes one) and half-closes; boxd answers on the same
//! stream.
//!
//! | target      | request              | answer                                   |
//! |-------------|----------------------|------------------------------------------|
//! | `info`      | —                    | JSON [`BoxInfo`]                         |
//! | `health`    | —                    | JSON [`Health`]                          |
//! | `configure` | JSON [`Configure`]   | JSON [`Done`]                            |
//! | `exec`      | JSON [`ExecRequest`] | [`Record`]s: `started`, output, `exit`   |
//! | `sync`      | JSON line [`SyncRequest`], then the tar bytes | JSON [`SyncDone`] |
//! | `processes` | —                    | JSON list of [`Process`]                 |
//! | `signal`    | JSON [`Signal`]      | JSON [`Done`]                            |
//! | `logs`      | JSON [`Logs`]        | the log's bytes                          |
//! | `clock`     | JSON [`Clock`]       | JSON [`Done`]                            |
//! | `port:<n>`  | the client's bytes   | the bytes of the box's program on port n |
//! | `pty`       | JSON line [`PtyRequest`], then [`PtyInput`]s | the terminal's output bytes |
//! | `shot`      | JSON line [`ShotRequest`] | JSON line [`ShotAnswer`], then the file and its poster |
//! | `wire`      | JSON [`Wiring`]      | JSON [`Done`]                            |
//!
//! `port:<n>` is a raw byte pipe to `127.0.0.1:<n>` in the box (box URLs):
//! boxd refuses it with 502 ([`nothing_listens`]) when nothing listens there.
//! `pty` runs a login shell on a new pseudo-terminal (the takeover page); the
//! server's half-close hangs the terminal up, and boxd's FIN says the shell
//! ended.
//!
//! `shot` takes a screenshot or a recording in the box ([`ShotRequest`]).
//! The server writes the request line and keeps its side open until it has
//! the answer: its half-close or reset before then stops the shot (boxd
//! kills the browser and ffmpeg). The stream is accepted before the request
//! is read, so boxd says no in the
//! answer line, not with `OPEN_ERR`: [`ShotAnswer::Refused`] with a code
//! (400 bad request, 503 a tool missing from the image, 504 the page did not
//! load in time, 502 chromium or ffmpeg failed, 413 the file is too big) and
//! a reason a person can act on. [`ShotAnswer::Shot`] is followed by exactly
//! [`ShotHeader::bytes`] bytes of the file and [`ShotHeader::poster_bytes`]
//! of a PNG poster frame, then FIN.
//!
//! `wire` replaces the box's [`Wiring`] (its declared services, their modes,
//! its links) after the claim: a name declared there keeps the address it
//! had in the box, and the connections open through the connector to the
//! host:port it now takes are closed (take-over in place).
//!
//! boxd opens streams the other way too ([`Outbound`]): `env:<host>:<port>`
//! for each connection a program in the box makes to an environment address,
//! `link:<host>:<port>` for each one to a name linked to another box, and
//! `dns:udp` / `dns:tcp` for each DNS query its resolver forwards
//! ([`crate::dns`]).

use crate::dns::Transport;
use serde::{Deserialize, Serialize};

pub mod shot;
pub use shot::{
    PAGE_URL_PATTERN, ShotAnswer, ShotHeader, ShotKind, ShotRefusal, ShotRequest, VideoFormat,
    is_page_url,
};

/// A service boxd serves: the target of the stream the server opens for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Info,
    Health,
    Configure,
    Exec,
    Sync,
    Processes,
    Signal,
    Logs,
    Clock,
    /// A byte pipe to a port on the box's loopback.
    Port(u16),
    /// A shell on a new pseudo-terminal.
    Pty,
    /// A screenshot or recording of a page or of the virtual display.
    Shot,
    /// The box's declared services and links, replaced.
    Wire,
}

/// The prefix of a [`Service::Port`] target.
const PORT_TARGET_PREFIX: &str = "port:";

/// Why boxd refuses a [`Service::Port`] stream: the reason after the 502.
pub fn nothing_listens(port: u16) -> String {
    format!("nothing listens on port {port} in this box")
}

impl Service {
    /// Every service that takes no argument, in the order of the table above.
    pub const ALL: [Self; 12] = [
        Self::Info,
        Self::Health,
        Self::Configure,
        Self::Exec,
        Self::Sync,
        Self::Processes,
        Self::Signal,
        Self::Logs,
        Self::Clock,
        Self::Pty,
        Self::Shot,
        Self::Wire,
    ];

    /// The feature name boxd lists in its [`BoxInfo`] for it.
    pub fn feature(self) -> &'static str {
        match self {
            Self::Port(_) => "port",
            other => other.fixed_target(),
        }
    }

    /// The stream target that names it.
    pub fn target(self) -> std::borrow::Cow<'static, str> {
        match self {
            Self::Port(port) => format!("{PORT_TARGET_PREFIX}{port}").into(),
            other => other.fixed_target().into(),
        }
    }

    fn fixed_target(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Health => "health",
            Self::Configure => "configure",
            Self::Exec => "exec",
            Self::Sync => "sync",
            Self::Processes => "processes",
            Self::Signal => "signal",
            Self::Logs => "logs",
            Self::Clock => "clock",
            Self::Pty => "pty",
            Self::Shot => "shot",
            Self::Wire => "wire",
            Self::Port(_) => "port",
        }
    }

    /// The service a stream target names, if it names one (`port:0` names none).
    pub fn parse(target: &str) -> Option<Self> {
        if let Some(port) = target.strip_prefix(PORT_TARGET_PREFIX) {
            // Digits only: `u16::from_str` would take a leading `+`.
            return port
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| port.parse().ok())
                .flatten()
                .filter(|p| *p != 0)
                .map(Self::Port);
        }
        Self::ALL.into_iter().find(|s| s.fixed_target() == target)
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.target())
    }
}

/// A stream boxd opens towards the server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outbound {
    /// A DNS query its resolver forwards: `dns:udp` or `dns:tcp`.
    Dns(Transport),
    /// A connection a program in the box made to an environment address:
    /// `env:<host>:<port>`. The server accepts (a raw byte pipe through the
    /// connector) or refuses: 403 the address is no longer listed, 503 the
    /// connection's connector is offline (the reason names it), 502 the
    /// connector could not reach the target.
    Env(PrivateEndpoint),
    /// A connection a program in the box made to a name linked to a port of
    /// another box: `link:<host>:<port>`. The server accepts (a byte pipe to
    /// that box's port) or refuses: 404 no such link or the linked box is
    /// stopped, 502 nothing listens there.
    Link(PrivateEndpoint),
    /// An identity token for the box's AWS role (`aws:token`): boxd sends
    /// nothing; the server answers an [`AwsToken`] or refuses (404 the box
    /// has no role, 503 the token cannot be signed now).
    AwsToken,
}

/// The target of [`Outbound::AwsToken`].
pub const AWS_TOKEN_TARGET: &str = "aws:token";

/// What boxd needs for one `AssumeRoleWithWebIdentity` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsToken {
    /// The signed identity token (a JWT, ten minutes).
    pub token: String,
    pub role_arn: String,
    /// `psbx-<box id>`.
    pub session_name: String,
    /// The STS endpoint the box sends it to (`https://sts.<region>.amazonaws.com/`).
    pub sts_url: String,
    /// How long the credentials are asked for.
    pub duration_seconds: u32,
}

/// Where boxd serves the role's credentials, in the form of ECS's container
/// credentials endpoint: the address is on the box's loopback device, so its
/// programs and its containers (through their bridge) reach it, and nothing
/// outside the box does.
pub const AWS_CREDENTIALS_ADDR: std::net::Ipv4Addr = std::net::Ipv4Addr::new(169, 254, 170, 2);
/// The path of the credentials on [`AWS_CREDENTIALS_ADDR`] (port 80).
pub const AWS_CREDENTIALS_PATH: &str = "/v1/credentials";

/// `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
pub fn aws_credentials_uri() -> String {
    format!("http://{AWS_CREDENTIALS_ADDR}{AWS_CREDENTIALS_PATH}")
}

/// The box's AWS role as a claim gives it to boxd: the environment variables
/// the server also wrote into every settings file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxAws {
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`: what a request for the
    /// credentials must carry in its `Authorization` header.
    pub authorization: String,
    /// `AWS_REGION` and `AWS_DEFAULT_REGION` (none: the environment names none).
    pub region: Option<String>,
}

impl BoxAws {
    /// The variables SDKs and the CLI read, in the order they are written.
    pub fn variables(&self) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI".to_owned(),
                aws_credentials_uri(),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN".to_owned(),
                self.authorization.clone(),
            ),
        ];
        if let Some(region) = &self.region {
            vars.push(("AWS_REGION".to_owned(), region.clone()));
            vars.push(("AWS_DEFAULT_REGION".to_owned(), region.clone()));
        }
        vars
    }

    /// `vars` (a service's settings, the commands' environment) with the
    /// role's variables: the credentials' always (any of the same name
    /// replaced), the region's where `vars` sets none of its own.
    pub fn add_to(&self, vars: &mut Vec<(String, String)>) {
        vars.retain(|(k, _)| !k.starts_with("AWS_CONTAINER_"));
        for (key, value) in self.variables() {
            if !vars.iter().any(|(k, _)| *k == key) {
                vars.push((key, value));
            }
        }
    }
}

/// Why a target is not one boxd opens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    #[error("the server takes no stream {0:?} from a box")]
    Unknown(String),
    #[error("{0:?} is not host:port")]
    NotHostPort(String),
    /// The host of an `env:` or `link:` target is not a host name
    /// ([`is_host_name`]): checked before anything logs it.
    #[error("{0:?} is not a host name (letters, digits, '-' and '_' in dot-separated labels)")]
    NotHostName(String),
}

impl Outbound {
    /// The stream target.
    pub fn target(&self) -> String {
        match self {
            Self::Dns(transport) => transport.target().to_owned(),
            Self::Env(endpoint) => {
                format!("{ENV_TARGET_PREFIX}{}:{}", endpoint.host, endpoint.port)
            }
            Self::Link(endpoint) => {
                format!("{LINK_TARGET_PREFIX}{}:{}", endpoint.host, endpoint.port)
            }
            Self::AwsToken => AWS_TOKEN_TARGET.to_owned(),
        }
    }

    /// The stream a target names.
    pub fn parse(target: &str) -> Result<Self, OutboundError> {
        if let Some(transport) = Transport::of_target(target) {
            return Ok(Self::Dns(transport));
        }
        if target == AWS_TOKEN_TARGET {
            return Ok(Self::AwsToken);
        }
        let (rest, kind): (&str, fn(PrivateEndpoint) -> Self) =
            if let Some(rest) = target.strip_prefix(ENV_TARGET_PREFIX) {
                (rest, Self::Env)
            } else if let Some(rest) = target.strip_prefix(LINK_TARGET_PREFIX) {
                (rest, Self::Link)
            } else {
                return Err(OutboundError::Unknown(target.to_owned()));
            };
        let bad = || OutboundError::NotHostPort(rest.to_owned());
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let port = port.parse().map_err(|_| bad())?;
        if !is_host_name(host) {
            return Err(OutboundError::NotHostName(host.to_owned()));
        }
        Ok(kind(PrivateEndpoint {
            host: host.to_owned(),
            port,
        }))
    }
}

impl std::str::FromStr for Outbound {
    type Err = OutboundError;

    fn from_str(target: &str) -> Result<Self, Self::Err> {
        Self::parse(target)
    }
}

/// boxd's introduction, asked for after every (re)connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxInfo {
    pub protocol: u32,
    pub version: String,
    /// The kernel's boot id: the same after a freeze and thaw.
    pub boot_id: String,
    pub features: Vec<String>,
}

/// The server's clock, sent on every new session (boot, thaw, a server
/// restart): boxd sets the box's clock to it, so no box runs NTP or asks the
/// internet for the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clock {
    /// Nanoseconds since the Unix epoch.
    pub unix_nanos: u64,
}

impl Clock {
    /// This machine's clock now.
    pub fn now() -> Self {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            unix_nanos: u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// Account data pushed at claim time: environment variables of every command.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configure {
    pub env: Vec<(String, String)>,
    /// Files written at claim (the environment's settings files), under
    /// `/work/.sbx/`, readable by their owner only.
    #[serde(default)]
    pub files: Vec<ConfigFile>,
    /// Every address of the box's environment (at most 200): boxd gives each
    /// host name an address of its own and opens an entry per address, whose
    /// connections go out as `env:<host>:<port>` streams it opens.
    #[serde(default)]
    pub endpoints: Vec<PrivateEndpoint>,
    /// The services declared in the box and its links (empty from a server
    /// that predates them).
    #[serde(default)]
    pub wiring: Wiring,
    /// The environment's AWS role, when it names one: boxd serves its
    /// credentials and adds [`BoxAws::variables`] to every command.
    #[serde(default)]
    pub aws: Option<BoxAws>,
}

/// What the box runs itself and which names lead to other boxes: set at
/// claim ([`Configure::wiring`]) and replaced by [`Service::Wire`]. A host
/// here is lower-case; a declared host:port wins over an environment address
/// of the same host:port, a link over both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Wiring {
    /// Declared host:port pairs and where their connections go.
    #[serde(default)]
    pub services: Vec<Declared>,
    /// Declared names without a port: they resolve to the box's own address
    /// for them, and every port stays in the box.
    #[serde(default)]
    pub names: Vec<String>,
    /// Private ranges whose port leads to a port in the box (fixed at claim).
    #[serde(default)]
    pub ranges: Vec<DeclaredRange>,
    /// host:port pairs linked to another box: connections go out as
    /// `link:<host>:<port>` streams.
    #[serde(default)]
    pub links: Vec<PrivateEndpoint>,
    /// Where services in external mode forward HTTP to.
    #[serde(default)]
    pub external_base_url: Option<String>,
}

/// A declared host:port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Declared {
    pub host: String,
    pub port: u16,
    /// The port the box's process listens on (box mode).
    pub target_port: u16,
    pub mode: WireMode,
}

/// Where a declared service's connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireMode {
    /// To the box's own process on the target port (boxd does not hold the
    /// port).
    Box,
    /// boxd's HTTP proxy to the external base URL.
    External,
}

impl WireMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Box => "box",
            Self::External => "external",
        }
    }
}

/// A declared private range: connections to any address in it on `port`
/// lead to the box's `target_port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredRange {
    /// `a.b.c.d/n`, with no host bits set.
    pub range: String,
    pub port: u16,
    pub target_port: u16,
}

impl Wiring {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.names.is_empty()
            && self.ranges.is_empty()
            && self.links.is_empty()
    }
}

/// Whether `host` is a host name boxd gives an address: letters, digits,
/// `-` and `_` in dot-separated labels of 1 to 63 bytes, at most 253 in all
/// (lower-case is the caller's to make).
pub fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The [`BoxInfo`] feature of a boxd that takes a name over in place
/// ([`Service::Wire`]).
pub const TAKE_OVER_FEATURE: &str = "take-over";

/// An address of the box's environment: a lower-case DNS name or an IPv4
/// literal, and a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PrivateEndpoint {
    pub host: String,
    pub port: u16,
}

impl PrivateEndpoint {
    /// The target of the stream boxd opens for a connection to it
    /// ([`Outbound::Env`]).
    pub fn target(&self) -> String {
        Outbound::Env(self.clone()).target()
    }
}

/// The prefix of [`Outbound::Env`] targets.
pub const ENV_TARGET_PREFIX: &str = "env:";
/// The prefix of [`Outbound::Link`] targets.
pub const LINK_TARGET_PREFIX: &str = "link:";

/// boxd's view of the box, the answer of [`Service::Health`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub uptime_s: f64,
    pub load1: f64,
    pub mem_total_kb: u64,
    pub mem_available_kb: u64,
    /// The box's entries for its environment's addresses (none outside an
    /// environment, and from a boxd that predates them).
    #[serde(default)]
    pub private_endpoints: Vec<PrivateEndpointHealth>,
    /// The host names boxd's DNS answers (environment, declared and linked
    /// names) and the address each has in the box.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub names: std::collections::BTreeMap<String, std::net::Ipv4Addr>,
}

/// A connection to an environment address that failed: the address, the
/// `OPEN_ERR` code (or the one boxd gave: 503 no session, 504 no answer) and
/// the reason. It travels and is shown as `<host>:<port> <code> <reason>`
/// ([`Exit::private_endpoint_errors`], boxd's log of failed connections).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointFailure {
    pub host: String,
    pub port: u16,
    pub code: u16,
    /// On one line.
    pub reason: String,
}

impl std::fmt::Display for EndpointFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} {} {}",
            self.host, self.port, self.code, self.reason
        )
    }
}

/// A text that is not `<host>:<port> <code> <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not <host>:<port> <code> <reason>")]
pub struct NotAnEndpointFailure(pub String);

impl std::str::FromStr for EndpointFailure {
    type Err = NotAnEndpointFailure;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || NotAnEndpointFailure(text.to_owned());
        let (address, rest) = text.split_once(' ').ok_or_else(bad)?;
        let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
        let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
        Ok(Self {
            host: host.to_owned(),
            port: port.parse().map_err(|_| bad())?,
            code: code.parse().map_err(|_| bad())?,
            reason: reason.to_owned(),
        })
    }
}

/// How one environment address fares in the box, in boxd's health.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrivateEndpointHealth {
    pub host: String,
    pub port: u16,
    /// The entry boxd opened for it (a listener on loopback).
    pub local_ip: String,
    pub local_port: u16,
    /// Connections through the entry now.
    pub open: u32,
    /// Connections the entry accepted since the claim.
    pub opened: u64,
    /// Connections whose stream was refused or could not be opened.
    pub failures: u64,
    /// `<code> <reason>` of the last failure.
    pub last_failure: Option<String>,
}

/// A file boxd writes: a path under `/work/.sbx/` and its contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigFile {
    pub path: String,
    pub contents: String,
}

/// A request that succeeded, or why it did not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Done {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Done {
    pub fn ok() -> Self {
        Self {
            ok: true,
            error: None,
        }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(error.into()),
        }
    }
}

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecRequest {
    pub cmd: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// Kill the whole process group after this many seconds (foreground, and
    /// background commands that were given one).
    pub timeout_s: Option<u64>,
    pub background: bool,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Connections to environment addresses the command made that failed
    /// ([`EndpointFailure`]s as text; boxd's `privnet/owner.rs` says how
    /// they are told apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub private_endpoint_errors: Vec<String>,
}

/// A background command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    pub pid: u32,
    pub cmd: String,
    pub started_at_unix: u64,
    pub exit: Option<Exit>,
    /// Its output (stdout and stderr together), a file in the box.
    #[serde(default)]
    pub log: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signal {
    pub pid: u32,
    /// A signal number (15 TERM, 9 KILL, 2 INT, ...).
    pub signal: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Logs {
    pub pid: u32,
    /// Start at this byte of the log.
    #[serde(default)]
    pub offset: u64,
    /// Keep the stream open while the process runs, sending output as it is
    /// written; the stream ends once the process has exited and all of its
    /// output was sent.
    #[serde(default)]
    pub follow: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncRequest {
    /// Under `/work`; relative, without `..`.
    pub dest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncDone {
    pub ok: bool,
    pub files: u64,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The first line of a `pty` stream: the terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtyRequest {
    pub cols: u16,
    pub rows: u16,
}

/// What the server sends on a `pty` stream after the [`PtyRequest`] line:
/// framed like [`Record`] (a tag byte, a big-endian u32 length, the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyInput {
    /// Bytes typed at the terminal (`i`).
    Input(Vec<u8>),
    /// The terminal's new size (`r`: columns then rows, big-endian u16s).
    Resize { cols: u16, rows: u16 },
}

impl PtyInput {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, Vec<u8>) = match self {
            Self::Input(b) => (b'i', b.clone()),
            Self::Resize { cols, rows } => {
                let mut body = cols.to_be_bytes().to_vec();
                body.extend_from_slice(&rows.to_be_bytes());
                (b'r', body)
            }
        };
        let mut out = Vec::with_capacity(5 + body.len());
        out.push(tag);
        out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// The whole input at the start of `buf`, if there is one, and how many
    /// bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, String> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_RECORD {
            return Err(format!("a terminal input of {len} bytes is over the limit"));
        }
        let Some(body) = buf.get(5..5 + len) else {
            return Ok(None);
        };
        let input = match (buf[0], body) {
            (b'i', _) => Self::Input(body.to_vec()),
            (b'r', [c0, c1, r0, r1]) => Self::Resize {
                cols: u16::from_be_bytes([*c0, *c1]),
                rows: u16::from_be_bytes([*r0, *r1]),
            },
            (b'r', _) => return Err("a resize is two u16s".to_owned()),
            (other, _) => return Err(format!("unknown terminal input {other}")),
        };
        Ok(Some((input, 5 + len)))
    }
}

/// One piece of an exec answer: a tag byte, a big-endian u32 length, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// JSON `{"pid": n}`: the command runs (for a background one, that is all).
    Started(u32),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Exit),
    /// The command could not be started.
    Failed(String),
}

/// The largest record body accepted.
pub const MAX_RECORD: usize = 1 << 20;

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, Vec<u8>) = match self {
            Self::Started(pid) => (b'S', pid.to_be_bytes().to_vec()),
            Self::Stdout(b) => (b'o', b.clone()),
            Self::Stderr(b) => (b'e', b.clone()),
            Self::Exit(exit) => (b'x', serde_json::to_vec(exit).unwrap_or_default()),
            Self::Failed(why) => (b'f', why.as_bytes().to_vec()),
        };
        let mut out = Vec::with_capacity(5 + body.len());
        out.push(tag);
        out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Takes one whole record off the front of `buf`, if there is one.
    /// Each call moves the rest of `buf`: to read many records from one
    /// buffer, use a [`RecordReader`].
    pub fn decode(buf: &mut Vec<u8>) -> Result<Option<Self>, String> {
        let Some((record, used)) = Self::parse(buf)? else {
            return Ok(None);
        };
        buf.drain(..used);
        Ok(Some(record))
    }

    /// The whole record at the start of `buf`, if there is one, and how many
    /// bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, String> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_RECORD {
            return Err(format!("an exec record of {len} bytes is over the limit"));
        }
        let Some(body) = buf.get(5..5 + len) else {
            return Ok(None);
        };
        let record = match buf[0] {
            b'S' => Self::Started(u32::from_be_bytes(
                body.try_into()
                    .map_err(|_| "bad started record".to_owned())?,
            )),
            b'o' => Self::Stdout(body.to_vec()),
            b'e' => Self::Stderr(body.to_vec()),
            b'x' => Self::Exit(serde_json::from_slice(body).map_err(|e| e.to_string())?),
            b'f' => Self::Failed(String::from_utf8_lossy(body).into_owned()),
            other => return Err(format!("unknown exec record {other}")),
        };
        Ok(Some((record, 5 + len)))
    }
}

/// Reads records out of a byte stream that arrives in chunks. An index
/// cursor walks the buffer: records are parsed where they lie, and the
/// bytes already read are dropped once per [`RecordReader::extend`], not
/// once per record, so a chunk holding many small records costs time in
/// proportion to its length (draining one record at a time moved the rest
/// of the buffer each time: quadratic).
#[derive(Debug, Default)]
pub struct RecordReader {
    buf: Vec<u8>,
    at: usize,
}

impl RecordReader {
    /// Adds bytes read from the stream.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole record, `None` until more bytes come.
    pub fn next_record(&mut self) -> Result<Option<Record>, String> {
        let Some(rest) = self.buf.get(self.at..) else {
            return Ok(None);
        };
        match Record::parse(rest)? {
            Some((record, used)) => {
                self.at += used;
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    /// Bytes received and not yet taken as records.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_targets_name_a_port_and_nothing_else() {
        assert_eq!(Service::parse("port:8080"), Some(Service::Port(8080)));
        assert_eq!(Service::Port(3000).target(), "port:3000");
        for bad in ["port:0", "port:", "port:+80", "port:65536", "port:80 "] {
            assert_eq!(Service::parse(bad), None, "{bad}");
        }
        assert_eq!(Service::parse("pty"), Some(Service::Pty));
        for s in Service::ALL {
            assert_eq!(Service::parse(&s.target()), Some(s));
        }
    }

    #[test]
    fn terminal_inputs_round_trip() {
        let inputs = [
            PtyInput::Input("é\x03".as_bytes().to_vec()),
            PtyInput::Resize {
                cols: 120,
                rows: 40,
            },
        ];
        let mut buf = Vec::new();
        for i in &inputs {
            buf.extend(i.encode());
        }
        let mut at = 0;
        for i in &inputs {
            let (got, used) = PtyInput::parse(&buf[at..]).unwrap().unwrap();
            assert_eq!(&got, i);
            at += used;
        }
        assert_eq!(PtyInput::parse(&buf[at..]).unwrap(), None);
        assert!(PtyInput::parse(b"r\0\0\0\x01x").is_err());
    }

    #[test]
    fn records_round_trip_in_pieces() {
        let records = vec![
            Record::Started(42),
            Record::Stdout(b"hello\n".to_vec()),
            Record::Stderr(vec![]),
            Record::Exit(Exit {
                code: Some(0),
                signal: None,
                timed_out: false,
                private_endpoint_errors: vec!["db.internal:5432 503 offline".into()],
            }),
            Record::Failed("no such dir".into()),
        ];
        let bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for b in bytes {
            buf.push(b);
            while let Some(r) = Record::decode(&mut buf).unwrap() {
                out.push(r);
            }
        }
        assert_eq!(out, records);
        let mut bad = vec![b'o', 0xff, 0xff, 0xff, 0xff];
        assert!(Record::decode(&mut bad).is_err());
        let mut unknown = vec![b'?', 0, 0, 0, 0];
        assert!(Record::decode(&mut unknown).is_err());
    }

    /// L6: many records in one buffer are read by the cursor, whatever the
    /// chunking, and what is taken is dropped.
    #[test]
    fn many_records_in_one_buffer_decode_with_a_cursor() {
        const N: usize = 100_000;
        let mut bytes = Vec::new();
        for i in 0..N {
            let record = if i % 2 == 0 {
                Record::Stdout(vec![b'o'; i % 7])
            } else {
                Record::Stderr(vec![b'e'; 1])
            };
            bytes.extend(record.encode());
        }
        bytes.extend(Record::Started(7).encode());
        // All in one chunk, then in odd-sized chunks across record bounds.
        for chunk in [bytes.len(), 4093, 3] {
            let mut reader = RecordReader::default();
            let mut count = 0;
            let mut last = None;
            for piece in bytes.chunks(chunk) {
                reader.extend(piece);
                while let Some(record) = reader.next_record().unwrap() {
                    if count < N {
                        let expected = if count % 2 == 0 { b'o' } else { b'e' };
                        match &record {
                            Record::Stdout(b) | Record::Stderr(b) => {
                                assert!(b.iter().all(|&c| c == expected), "{count}")
                            }
                            other => panic!("record {count}: {other:?}"),
                        }
                    }
                    count += 1;
                    last = Some(record);
                }
            }
            assert_eq!(count, N + 1, "chunks of {chunk}");
            assert_eq!(last, Some(Record::Started(7)));
            assert_eq!(reader.pending(), 0);
            reader.extend(&[]);
            assert!(reader.buf.is_empty(), "what was read is dropped");
        }
        let mut bad = RecordReader::default();
        bad.extend(&[b'o', 0xff, 0xff, 0xff, 0xff]);
        assert!(bad.next_record().is_err());
    }

    #[test]
    fn service_targets_are_the_protocols_names() {
        let targets: Vec<String> = Service::ALL.iter().map(|s| s.target().into()).collect();
        assert_eq!(
            targets,
            [
                "info",
                "health",
                "configure",
                "exec",
                "sync",
                "processes",
                "signal",
                "logs",
                "clock",
                "pty",
                "shot",
                "wire"
            ]
        );
        assert_eq!(Service::parse("Exec"), None);
        assert_eq!(Service::parse("env:db.internal:5432"), None);
    }

    #[test]
    fn the_roles_variables_replace_credentials_and_keep_a_services_region() {
        let aws = BoxAws {
            authorization: "tok".into(),
            region: Some("us-east-1".into()),
        };
        let mut vars = vec![
            ("AWS_REGION".to_owned(), "eu-west-1".to_owned()),
            (
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI".to_owned(),
                "/v2/x".to_owned(),
            ),
            ("PORT".to_owned(), "8080".to_owned()),
        ];
        aws.add_to(&mut vars);
        let got: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            got,
            [
                "AWS_REGION=eu-west-1",
                "PORT=8080",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.2/v1/credentials",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN=tok",
                "AWS_DEFAULT_REGION=us-east-1",
            ]
        );
    }

    #[test]
    fn outbound_targets_parse_back() {
        let env = Outbound::Env(PrivateEndpoint {
            host: "db.internal".into(),
            port: 5432,
        });
        assert_eq!(env.target(), "env:db.internal:5432");
        assert_eq!(Outbound::parse("env:db.internal:5432"), Ok(env));
        assert_eq!(
            Outbound::parse("env:10.0.0.1:80"),
            Ok(Outbound::Env(PrivateEndpoint {
                host: "10.0.0.1".into(),
                port: 80
            }))
        );
        let link = Outbound::Link(PrivateEndpoint {
            host: "api.svc.local".into(),
            port: 8080,
        });
        assert_eq!(link.target(), "link:api.svc.local:8080");
        assert_eq!(Outbound::parse("link:api.svc.local:8080"), Ok(link));
        assert!(Outbound::parse("link:api.svc.local").is_err());
        assert_eq!(Outbound::AwsToken.target(), "aws:token");
        assert_eq!(Outbound::parse("aws:token"), Ok(Outbound::AwsToken));
        assert_eq!(Outbound::Dns(Transport::Udp).target(), "dns:udp");
        assert_eq!("dns:tcp".parse(), Ok(Outbound::Dns(Transport::Tcp)));
        assert_eq!(
            Outbound::parse("exec").unwrap_err().to_string(),
            "the server takes no stream \"exec\" from a box"
        );
        assert_eq!(
            Outbound::parse("env:db.internal").unwrap_err().to_string(),
            "\"db.internal\" is not host:port"
        );
        assert!(Outbound::parse("env:db.internal:99999").is_err());
    }

    /// review-2 L8: a box-chosen host is a host name before anything logs
    /// it; a line break (a forged log line) is refused as malformed.
    #[test]
    fn outbound_hosts_are_host_names() {
        for target in [
            "link:a\nb:1",
            "env:a\nb:1",
            "link::1",
            "link:a b:1",
            "env:*.internal:80",
            "link:a..b:1",
        ] {
            let e = Outbound::parse(target).unwrap_err();
            assert!(
                matches!(e, OutboundError::NotHostName(_)),
                "{target:?}: {e}"
            );
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        let long = format!("link:{}:1", "a".repeat(1024));
        assert!(matches!(
            Outbound::parse(&long),
            Err(OutboundError::NotHostName(_))
        ));
        assert!(Outbound::parse("link:db_1.svc-2:5432").is_ok());
    }

    #[test]
    fn endpoint_failures_read_back_what_they_write() {
        let failure = EndpointFailure {
            host: "db.internal".into(),
            port: 5432,
            code: 503,
            reason: "the connector \"aws\" of this environment is offline".into(),
        };
        let text = failure.to_string();
        assert_eq!(
            text,
            "db.internal:5432 503 the connector \"aws\" of this environment is offline"
        );
        assert_eq!(text.parse::<EndpointFailure>(), Ok(failure));
        let bare: EndpointFailure = "10.0.0.1:80 502".parse().unwrap();
        assert_eq!((bare.code, bare.reason.as_str()), (502, ""));
        for bad in [
            "",
            "db.internal 503 x",
            "db.internal:x 503 y",
            "db:1 five x",
        ] {
            assert!(bad.parse::<EndpointFailure>().is_err(), "{bad}");
        }
    }
}
