//! The shapes of work in a box: an exec's request ([`ExecBody`], and
//! [`request`] checking it into boxd's `ExecRequest`) and its result, a
//! background process, a command's end with the connections it saw fail
//! (and what to do about them, [`private_endpoint_hint`]), and a sync's
//! destination and answer. `routes::exec` and MCP's `sandbox_exec`,
//! `sandbox_status` and `sandbox_sync` answer with the same views.

use super::patterns;
use crate::error::ApiError;
use psbx_actors::exec::bounded::Bounded;
use psbx_actors::exec::spec::ExecSpec;
use psbx_wire::boxd::{EndpointFailure, ExecRequest, Exit, Process};
use psbx_wire::frame::code::{BAD_GATEWAY, FORBIDDEN, UNAVAILABLE};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The time limit when none is given.
const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// A shell command line, run with `sh -lc`.
    pub cmd: String,
    /// Working directory (default `/work`).
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Kill the command (its whole process group) after this long, e.g. `"90s"`;
    /// default `"30m"`, at most `"24h"`. Foreground commands only.
    pub timeout: Option<String>,
    /// Return at once with a process id; read the output later from its logs.
    #[serde(default)]
    pub background: bool,
    /// Why the command runs, for people reading the box's history.
    pub note: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ExecQuery {
    /// `true`: stream NDJSON events (`{"stdout": ...}`, `{"stderr": ...}`,
    /// `{"exit": ...}`) as the command runs, instead of one JSON result.
    pub stream: Option<bool>,
}

/// The output of one stream, as kept for the caller.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputView {
    /// The first and last bytes, with a marker saying what was cut between.
    pub text: String,
    pub total_bytes: u64,
    pub cut_bytes: u64,
}

impl From<&Bounded> for OutputView {
    fn from(b: &Bounded) -> Self {
        Self {
            text: b.render(),
            total_bytes: b.total(),
            cut_bytes: b.cut(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// For background commands: the process id to read logs from or signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub background: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Connections to environment addresses the command made that failed
    /// (and those of containers, whose program boxd cannot tell, made while
    /// it ran): `<host>:<port> <code> <reason>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub private_endpoint_errors: Vec<String>,
    /// What to do about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_endpoint_hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<OutputView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<OutputView>,
}

/// The command boxd is sent: the body checked by the one check every front
/// makes (`ExecSpec`), and its time limit read here (a duration text).
pub fn request(body: ExecBody) -> Result<ExecRequest, ApiError> {
    let mut request = ExecSpec::request(
        body.cmd,
        body.cwd,
        body.env.into_iter().collect(),
        None,
        body.background,
    )?;
    let timeout = match &body.timeout {
        Some(t) => patterns::strict_duration("timeout", t, patterns::MAX_EXEC_TIMEOUT)?,
        None => DEFAULT_TIMEOUT,
    };
    request.timeout_s = (!body.background).then_some(timeout.as_secs());
    Ok(request)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProcessList {
    pub processes: Vec<ProcessView>,
}

/// A background command (or one MCP's `sandbox_exec` started), as
/// `GET /v1/boxes/{id}/processes` and MCP's `sandbox_status` show it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessView {
    pub pid: u32,
    pub cmd: String,
    pub running: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Killed for running past its time limit.
    pub timed_out: bool,
    /// Once it ended: like an exec result's `privateEndpointErrors`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub private_endpoint_errors: Vec<String>,
    /// Its whole output (stdout and stderr together), a file in the box.
    pub log: String,
}

impl From<Process> for ProcessView {
    fn from(p: Process) -> Self {
        let exit = p.exit.as_ref();
        Self {
            pid: p.pid,
            cmd: p.cmd,
            running: exit.is_none(),
            exit_code: exit.and_then(|e| e.code),
            signal: exit.and_then(|e| e.signal),
            timed_out: exit.is_some_and(|e| e.timed_out),
            private_endpoint_errors: exit
                .map(|e| failure_texts(&e.private_endpoint_errors))
                .unwrap_or_default(),
            log: p.log,
        }
    }
}

/// A command's end as the API shows it (the `exit` line of a streamed
/// exec): boxd's [`Exit`] with its failed connections as text.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitView {
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    private_endpoint_errors: Vec<String>,
}

impl From<&Exit> for ExitView {
    fn from(exit: &Exit) -> Self {
        Self {
            code: exit.code,
            signal: exit.signal,
            timed_out: exit.timed_out,
            private_endpoint_errors: failure_texts(&exit.private_endpoint_errors),
        }
    }
}

/// Failed connections as the API shows them: `<host>:<port> <code> <reason>`.
pub fn failure_texts(failures: &[EndpointFailure]) -> Vec<String> {
    failures.iter().map(ToString::to_string).collect()
}

/// What to do about the connections to environment addresses a command saw
/// fail, by their codes.
pub fn private_endpoint_hint(errors: &[EndpointFailure]) -> Option<String> {
    let codes: Vec<u16> = errors.iter().map(|f| f.code).collect();
    let mut hints = Vec::new();
    if codes.contains(&UNAVAILABLE) {
        hints.push(
            "503: the connector of that connection is offline; check its log (docker logs \
             parallelsandbox-connector) and sandbox_environments",
        );
    }
    if codes.contains(&BAD_GATEWAY) {
        hints.push(
            "502: the connector could not reach the target; check DNS, routes and security groups \
             between the connector's machine and that address",
        );
    }
    if codes.contains(&FORBIDDEN) {
        hints.push(
            "403: the address is no longer listed; add it back with PUT \
             /v1/environments/{env}/connections/{id}/endpoints",
        );
    }
    if hints.is_empty() && !errors.is_empty() {
        hints.push("see /work/.sbx/logs/private-endpoints.log and health.privateEndpoints");
    }
    (!hints.is_empty()).then(|| hints.join("; "))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SignalQuery {
    /// `TERM` (default), `KILL`, `INT` or `HUP`.
    #[param(inline)]
    pub signal: Option<SignalName>,
}

/// The signals a process can be sent.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum SignalName {
    TERM,
    KILL,
    INT,
    HUP,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SyncQuery {
    /// Where under `/work` to unpack (default: `/work` itself).
    pub dest: Option<String>,
}

/// Where under `/work` a sync unpacks: `dest` without a leading `/work` or `/`.
pub fn sync_dest(dest: &str) -> String {
    dest.trim_start_matches("/work")
        .trim_start_matches('/')
        .to_owned()
}

/// What a sync answers (and an upload to a one-time upload URL).
#[derive(Debug, Serialize, ToSchema)]
pub struct Synced {
    /// Files unpacked.
    pub files: u64,
    /// Bytes of file content unpacked.
    pub bytes: u64,
}

impl From<psbx_actors::boxes::Synced> for Synced {
    fn from(done: psbx_actors::boxes::Synced) -> Self {
        Self {
            files: done.files,
            bytes: done.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(errors: &[&str]) -> Option<String> {
        let failures: Vec<EndpointFailure> = errors.iter().map(|e| e.parse().unwrap()).collect();
        private_endpoint_hint(&failures)
    }

    #[test]
    fn each_code_boxd_reports_has_its_hint_and_others_point_at_the_log() {
        assert_eq!(hint(&[]), None);
        let offline = hint(&["db.internal:5432 503 no connector session"]).unwrap();
        assert!(
            offline.starts_with("503: the connector of that connection is offline"),
            "{offline}"
        );
        assert!(
            !offline.contains("502") && !offline.contains("403"),
            "{offline}"
        );
        let both = hint(&[
            "db.internal:5432 502 connection refused",
            "10.0.0.1:443 403 not listed",
        ])
        .unwrap();
        assert!(
            both.starts_with("502: ") && both.contains("; 403: "),
            "{both}"
        );
        // (A text that is not a failure no longer reaches here: boxd sends
        // them typed, and an old boxd's unreadable text is left out.)
        for other in ["db.internal:5432 504 no answer", "10.0.0.1:80 400 bad"] {
            assert_eq!(
                hint(&[other]).unwrap(),
                "see /work/.sbx/logs/private-endpoints.log and health.privateEndpoints"
            );
        }
    }

    #[test]
    fn a_process_shows_its_exit_its_time_limit_and_its_log() {
        let view = ProcessView::from(Process {
            pid: 7,
            cmd: "make".into(),
            started_at_unix: 1,
            exit: Some(psbx_wire::boxd::Exit {
                code: None,
                signal: Some(9),
                timed_out: true,
                private_endpoint_errors: vec!["db.internal:5432 503 offline".parse().unwrap()],
            }),
            log: "/run/psbx/processes/7.log".into(),
        });
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::json!({
                "pid": 7, "cmd": "make", "running": false, "exitCode": null, "signal": 9,
                "timedOut": true, "privateEndpointErrors": ["db.internal:5432 503 offline"],
                "log": "/run/psbx/processes/7.log",
            })
        );
    }
}
