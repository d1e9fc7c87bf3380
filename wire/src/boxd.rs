//! What the server asks of boxd, stream by stream. Each request opens a stream
//! whose target names the service; the server writes one JSON request (when
//! the service takes one) and half-closes; boxd answers on the same stream.
//!
//! | target      | request              | answer                                   |
//! |-------------|----------------------|------------------------------------------|
//! | `info`      | —                    | JSON [`BoxInfo`]                         |
//! | `health`    | —                    | JSON [`Health`](crate::control::Health)  |
//! | `configure` | JSON [`Configure`]   | JSON [`Done`]                            |
//! | `exec`      | JSON [`ExecRequest`] | [`Record`]s: `started`, output, `exit`   |
//! | `sync`      | JSON line [`SyncRequest`], then the tar bytes | JSON [`SyncDone`] |
//! | `processes` | —                    | JSON list of [`Process`]                 |
//! | `signal`    | JSON [`Signal`]      | JSON [`Done`]                            |
//! | `logs`      | JSON [`Logs`]        | the log's bytes                          |
//! | `clock`     | JSON [`Clock`]       | JSON [`Done`]                            |
//!
//! boxd opens streams the other way too: `env:<host>:<port>` for each
//! connection a program in the box makes to an environment address
//! ([`ENV_TARGET_PREFIX`]), and `dns:udp` / `dns:tcp` for each DNS query its
//! resolver forwards ([`crate::dns`]).

use serde::{Deserialize, Serialize};

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
}

/// An address of the box's environment: a lower-case DNS name or an IPv4
/// literal, and a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PrivateEndpoint {
    pub host: String,
    pub port: u16,
}

impl PrivateEndpoint {
    /// The target of the stream boxd opens for a connection to it.
    pub fn target(&self) -> String {
        format!("{ENV_TARGET_PREFIX}{}:{}", self.host, self.port)
    }
}

/// Streams boxd opens towards the server for a connection from the box to an
/// environment address: `env:<host>:<port>`. The server accepts (a raw byte
/// pipe through the connector) or refuses: 403 the address is no longer
/// listed, 503 the connection's connector is offline (the reason names it),
/// 502 the connector could not reach the target.
pub const ENV_TARGET_PREFIX: &str = "env:";

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
    /// (`<host>:<port> <code> <reason>`; boxd's `privnet/owner.rs` says how
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
    pub fn decode(buf: &mut Vec<u8>) -> Result<Option<Self>, String> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_RECORD {
            return Err(format!("an exec record of {len} bytes is over the limit"));
        }
        if buf.len() < 5 + len {
            return Ok(None);
        }
        let tag = buf[0];
        let body: Vec<u8> = buf.drain(..5 + len).skip(5).collect();
        Ok(Some(match tag {
            b'S' => Self::Started(u32::from_be_bytes(
                body.as_slice()
                    .try_into()
                    .map_err(|_| "bad started record".to_owned())?,
            )),
            b'o' => Self::Stdout(body),
            b'e' => Self::Stderr(body),
            b'x' => Self::Exit(serde_json::from_slice(&body).map_err(|e| e.to_string())?),
            b'f' => Self::Failed(String::from_utf8_lossy(&body).into_owned()),
            other => return Err(format!("unknown exec record {other}")),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
