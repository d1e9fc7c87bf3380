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
//!
//! One file per service here, as in boxd (`boxd/src/services/<name>.rs`):
//! [`exec`] (exec, processes, signal, logs), [`configure`] (configure, wire),
//! [`health`] (info, health, clock), [`sync`], [`pty`], [`aws`] (the role's
//! token and credentials), [`shot`]. This file holds what every service
//! shares: the [`Service`] names, the [`Outbound`] streams, [`Done`].

use crate::dns::Transport;
use crate::endpoint::{Endpoint, EndpointError};
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod aws;
pub mod configure;
pub mod exec;
pub mod health;
pub mod pty;
pub mod shot;
pub mod sync;

pub use aws::{
    AWS_CREDENTIALS_ADDR, AWS_CREDENTIALS_PATH, AWS_TOKEN_TARGET, AwsToken, BoxAws,
    aws_credentials_uri,
};
pub use configure::{ConfigFile, Configure, Declared, DeclaredRange, WireMode, Wiring};
pub use exec::{
    ExecRequest, Exit, Logs, MAX_RECORD, Process, ProcessesRequest, Record, RecordReader, Signal,
};
pub use health::{
    BoxInfo, Clock, Health, HealthRequest, InfoRequest, PrivateEndpointHealth, TAKE_OVER_FEATURE,
};
pub use pty::{PtyInput, PtyRequest};
pub use shot::{
    PAGE_URL_PATTERN, ShotAnswer, ShotHeader, ShotKind, ShotRefusal, ShotRequest, VideoFormat,
    is_page_url,
};
pub use sync::{SyncDone, SyncRequest};

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

/// A request whose whole answer is one JSON value, tied to the service it
/// goes to and to that answer: the server's link sends it with `call` and
/// reads `Answer` back, boxd's handler of [`Call::SERVICE`] answers one, so
/// a request cannot go to another service or be read as another answer.
/// The requests that take no body are unit structs (sent as JSON `null`,
/// which boxd reads to the stream's end and ignores).
pub trait Call: Serialize {
    /// The stream it is sent on.
    const SERVICE: Service;
    /// What boxd answers.
    type Answer: Serialize + serde::de::DeserializeOwned;
}

/// A request whose answer is a stream of its own (records, bytes, a
/// terminal): only the service is tied to it, the reading is the caller's.
pub trait Streamed: Serialize {
    /// The stream it opens.
    const SERVICE: Service;
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
    Env(Endpoint),
    /// A connection a program in the box made to a name linked to a port of
    /// another box: `link:<host>:<port>`. The server accepts (a byte pipe to
    /// that box's port) or refuses: 404 no such link or the linked box is
    /// stopped, 502 nothing listens there.
    Link(Endpoint),
    /// An identity token for the box's AWS role (`aws:token`): boxd sends
    /// nothing; the server answers an [`AwsToken`] or refuses (404 the box
    /// has no role, 503 the token cannot be signed now).
    AwsToken,
}

/// Why a target is not one boxd opens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    #[error("the server takes no stream {0:?} from a box")]
    Unknown(String),
    #[error("{0:?} is not host:port")]
    NotHostPort(String),
    /// The host of an `env:` or `link:` target is not a host name
    /// ([`crate::HostName::parse`]): checked before anything logs it.
    #[error("{0:?} is not a host name (letters, digits, '-' and '_' in dot-separated labels)")]
    NotHostName(String),
}

impl Outbound {
    /// The stream target.
    pub fn target(&self) -> String {
        match self {
            Self::Dns(transport) => transport.target().to_owned(),
            Self::Env(endpoint) => format!("{ENV_TARGET_PREFIX}{endpoint}"),
            Self::Link(endpoint) => format!("{LINK_TARGET_PREFIX}{endpoint}"),
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
        let (rest, kind): (&str, fn(Endpoint) -> Self) =
            if let Some(rest) = target.strip_prefix(ENV_TARGET_PREFIX) {
                (rest, Self::Env)
            } else if let Some(rest) = target.strip_prefix(LINK_TARGET_PREFIX) {
                (rest, Self::Link)
            } else {
                return Err(OutboundError::Unknown(target.to_owned()));
            };
        match rest.parse::<Endpoint>() {
            Ok(endpoint) => Ok(kind(endpoint)),
            Err(EndpointError::Host { host, .. }) => Err(OutboundError::NotHostName(host)),
            Err(_) => Err(OutboundError::NotHostPort(rest.to_owned())),
        }
    }
}

impl std::str::FromStr for Outbound {
    type Err = OutboundError;

    fn from_str(target: &str) -> Result<Self, Self::Err> {
        Self::parse(target)
    }
}

/// The prefix of [`Outbound::Env`] targets.
pub const ENV_TARGET_PREFIX: &str = "env:";
/// The prefix of [`Outbound::Link`] targets.
pub const LINK_TARGET_PREFIX: &str = "link:";

/// A connection to an environment address that failed: the address, the
/// `OPEN_ERR` code (or the one boxd gave: 503 no session, 504 no answer) and
/// the reason. It travels as JSON in [`Exit::private_endpoint_errors`], and
/// is shown as `<host>:<port> <code> <reason>` ([`fmt::Display`]: the API's
/// text, boxd's log of failed connections).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointFailure {
    pub endpoint: Endpoint,
    pub code: u16,
    /// On one line.
    pub reason: String,
}

impl fmt::Display for EndpointFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.endpoint, self.code, self.reason)
    }
}

/// A text that is not `<host>:<port> <code> <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not <host>:<port> <code> <reason>")]
pub struct NotAnEndpointFailure(pub String);

/// The text a boxd of an older image sends in place of the JSON.
impl std::str::FromStr for EndpointFailure {
    type Err = NotAnEndpointFailure;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || NotAnEndpointFailure(text.to_owned());
        let (address, rest) = text.split_once(' ').ok_or_else(bad)?;
        let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
        Ok(Self {
            endpoint: address.parse().map_err(|_| bad())?,
            code: code.parse().map_err(|_| bad())?,
            reason: reason.to_owned(),
        })
    }
}

/// [`Exit::private_endpoint_errors`] as JSON objects, or as the
/// `<host>:<port> <code> <reason>` texts a boxd of an older image (a frozen
/// or pooled box started before the server was upgraded) still sends; a
/// text that does not read back is left out.
pub(crate) fn failures<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<EndpointFailure>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Typed(EndpointFailure),
        Text(String),
    }
    let items = Vec::<Either>::deserialize(deserializer)?;
    Ok(items
        .into_iter()
        .filter_map(|item| match item {
            Either::Typed(failure) => Some(failure),
            Either::Text(text) => text.parse().ok(),
        })
        .collect())
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
    fn outbound_targets_parse_back() {
        let env = Outbound::Env("db.internal:5432".parse().unwrap());
        assert_eq!(env.target(), "env:db.internal:5432");
        assert_eq!(Outbound::parse("env:db.internal:5432"), Ok(env));
        assert_eq!(
            Outbound::parse("env:10.0.0.1:80"),
            Ok(Outbound::Env("10.0.0.1:80".parse().unwrap()))
        );
        let link = Outbound::Link("api.svc.local:8080".parse().unwrap());
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
        // Checked as connection addresses are, once, here: the server routes
        // what this gives (it was checked again in the router before).
        assert_eq!(
            Outbound::parse("env:DB.Internal:5432"),
            Ok(Outbound::Env("db.internal:5432".parse().unwrap()))
        );
        for bad in [
            "env:db.internal:0",
            "env:db.internal:+80",
            "env:*.internal:1",
        ] {
            assert!(Outbound::parse(bad).is_err(), "{bad}");
        }
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
            endpoint: "db.internal:5432".parse().unwrap(),
            code: 503,
            reason: "the connector \"aws\" of this environment is offline".into(),
        };
        let text = failure.to_string();
        assert_eq!(
            text,
            "db.internal:5432 503 the connector \"aws\" of this environment is offline"
        );
        assert_eq!(text.parse::<EndpointFailure>(), Ok(failure.clone()));
        let json = serde_json::to_string(&failure).unwrap();
        assert_eq!(
            serde_json::from_str::<EndpointFailure>(&json).unwrap(),
            failure
        );
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
