//! `sandbox_exec`: a command runs in the box as a background process with a
//! time limit (`timeout_s`), and the call follows its output for at most
//! `wait_s`. When the command ends first, the result has its exit status and
//! output; when the wait passes, the command keeps running and the result has
//! its process id and output so far, so a long build is never killed because
//! a client stopped waiting. Calling again with `pid` waits for it again.
//! While it runs, progress notifications carry the output's tail (clients
//! abort calls that stay silent for about five minutes). No thread waits: the
//! call is a task reading the followed log.

use super::reply::{box_failed, failed, structured};
use crate::ids::RequestId;
use crate::views::exec::{OutputView, failure_texts, private_endpoint_hint};
use futures_util::StreamExt;
use psbx_actors::boxes::Boxes;
use psbx_actors::error::BoxError;
use psbx_actors::exec::bounded::Bounded;
use psbx_actors::exec::run::ExecEvent;
use psbx_actors::exec::spec::ExecSpec;
use psbx_actors::ids::BoxId;
use psbx_actors::store::Principal;
use psbx_wire::boxd::{ExecRequest, Exit};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Output kept in a tool result: head and tail.
const KEEP: usize = 16 * 1024;
/// How often a running command reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How much of the output's tail a progress message carries.
const PROGRESS_TAIL: usize = 400;
/// The default wait: under the five minutes after which clients give up.
const DEFAULT_WAIT_S: u64 = 240;
const MAX_WAIT_S: u64 = 3600;
const DEFAULT_TIMEOUT_S: u64 = 1800;
const MAX_TIMEOUT_S: u64 = 24 * 3600;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecArgs {
    /// The box id, box_...
    pub id: String,
    /// A shell command line, run with sh -lc in /work. Required unless pid is given.
    pub cmd: Option<String>,
    /// Start it as a service in the background and return its process id at once
    /// (no time limit unless timeout_s is given).
    pub background: Option<bool>,
    /// Kill the command and its children after this many seconds (default 1800, at most 86400).
    pub timeout_s: Option<u64>,
    /// Wait at most this many seconds for the command to end (default 240, at most 3600).
    /// When the wait passes the command keeps running: the result has its pid and
    /// output so far; call sandbox_exec again with that pid to wait for it again.
    pub wait_s: Option<u64>,
    /// Instead of starting cmd: wait again for an earlier command by its process id.
    pub pid: Option<u32>,
    /// Why the command runs, for people reading the box's history.
    pub note: Option<String>,
}

/// What a `sandbox_exec` call answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ExecOutcome {
    pid: u32,
    /// Still running when the call returned.
    running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    timed_out: bool,
    /// Connections to environment addresses the command made that failed (and
    /// containers' failures while it ran, whose program boxd cannot tell).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    private_endpoint_errors: Vec<String>,
    /// What to do about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    private_endpoint_hint: Option<String>,
    /// Standard output and error together: head and tail, secrets masked.
    output: OutputView,
    /// The whole output, a file in the box.
    log: String,
    /// What to do next, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// Runs (or waits again for) a command as the tool call asks.
pub async fn call(
    boxes: &Boxes,
    who: Principal,
    a: ExecArgs,
    ctx: RequestContext<RoleServer>,
) -> CallToolResult {
    let background = a.background.unwrap_or(false);
    let timeout = if background {
        a.timeout_s
    } else {
        Some(a.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S))
    };
    let wait = a.wait_s.unwrap_or(DEFAULT_WAIT_S);
    if timeout.is_some_and(|t| t == 0 || t > MAX_TIMEOUT_S) {
        return failed(format!(
            "timeout_s must be between 1 and {MAX_TIMEOUT_S} seconds"
        ));
    }
    if wait > MAX_WAIT_S {
        return failed(format!(
            "wait_s must be at most {MAX_WAIT_S} seconds; to wait longer, call again with the pid"
        ));
    }
    // A malformed id fails as an unknown box does (`crate::ids`).
    let id = match BoxId::read(&a.id) {
        Ok(id) => id,
        Err(e) => return box_failed(e),
    };
    if let Some(note) = &a.note {
        tracing::info!(box_id = %id, note = %note.chars().take(200).collect::<String>(), "exec (mcp)");
    }
    let pid = match (a.pid, a.cmd) {
        (Some(pid), _) => pid,
        (None, Some(cmd)) if !cmd.trim().is_empty() => {
            let request = match request(cmd, timeout) {
                Ok(request) => request,
                Err(e) => return failed(e.to_string()),
            };
            match start(boxes, &who, &id, request).await {
                Ok(pid) => pid,
                Err(result) => return result,
            }
        }
        (None, _) => {
            return failed(
                "give cmd (a shell command line) to run, or pid to wait again for an earlier command",
            );
        }
    };
    if background {
        // Where boxd writes its output, as boxd says.
        let log = match boxes.process(&who.account_id, &id, pid).await {
            Ok(process) => process.log,
            Err(e) => return box_failed(e),
        };
        return structured(
            format!("started in the background as process {pid}; its output goes to {log}"),
            &serde_json::json!({ "pid": pid, "background": true, "running": true, "log": log }),
        );
    }
    follow(boxes, &who, &id, pid, wait, ctx).await
}

/// Starts a command in the background; its process id.
async fn start(
    boxes: &Boxes,
    who: &Principal,
    id: &BoxId,
    request: ExecRequest,
) -> Result<u32, CallToolResult> {
    let mut events = boxes
        .exec(&who.account_id, id, request)
        .await
        .map_err(box_failed)?;
    match events.next().await {
        Some(Ok(ExecEvent::Started(pid))) => Ok(pid),
        Some(Err(e)) => Err(box_failed(e)),
        _ => Err(failed(
            "boxd did not say whether the command started; retry",
        )),
    }
}

/// Follows a command's output until it ends or the wait passes.
async fn follow(
    boxes: &Boxes,
    who: &Principal,
    id: &BoxId,
    pid: u32,
    wait: u64,
    ctx: RequestContext<RoleServer>,
) -> CallToolResult {
    let mut chunks = match boxes.follow(&who.account_id, id, pid, 0).await {
        Ok(chunks) => chunks,
        Err(e) => return box_failed(e),
    };
    let progress = ctx.meta.get_progress_token();
    let mut output = Bounded::new(KEEP, KEEP);
    let deadline = tokio::time::sleep(Duration::from_secs(wait));
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    let started = tokio::time::Instant::now();
    let ended = loop {
        tokio::select! {
            chunk = chunks.next() => match chunk {
                Some(Ok(bytes)) => output.push(&bytes),
                Some(Err(e)) => return box_failed(e),
                None => break true,
            },
            _ = &mut deadline => break false,
            _ = tick.tick() => {
                if let Some(token) = &progress {
                    let secs = started.elapsed().as_secs();
                    let message = format!(
                        "process {pid} running for {secs}s; output so far ends with: {}",
                        tail(&output.render(), PROGRESS_TAIL)
                    );
                    let note = ProgressNotificationParam::new(token.clone(), secs as f64)
                        .with_message(message);
                    let _ = ctx.peer.notify_progress(note).await;
                }
            }
        }
    };
    let process = match boxes.process(&who.account_id, id, pid).await {
        Ok(process) => process,
        Err(e) => return box_failed(e),
    };
    let exit = process.exit.filter(|_| ended);
    let next = match &exit {
        None => Some(format!(
            "still running after {wait}s: call sandbox_exec with pid {pid} to wait again; the whole output is in {}",
            process.log
        )),
        Some(_) if output.cut() > 0 => Some(format!(
            "the output was cut: read parts of {} with sandbox_exec, e.g. `sed -n 1,200p {}`",
            process.log, process.log
        )),
        Some(_) => None,
    };
    let mut summary = summary(pid, exit.as_ref(), wait, &output);
    if let Some(errors) = exit
        .as_ref()
        .map(|e| &e.private_endpoint_errors)
        .filter(|e| !e.is_empty())
    {
        summary.push_str(&format!(
            "\nconnections to environment addresses that failed: {}",
            failure_texts(errors).join("; ")
        ));
    }
    let Exit {
        code,
        signal,
        timed_out,
        private_endpoint_errors,
    } = exit.clone().unwrap_or(Exit {
        code: None,
        signal: None,
        timed_out: false,
        private_endpoint_errors: Vec::new(),
    });
    structured(
        summary,
        &ExecOutcome {
            pid,
            running: exit.is_none(),
            exit_code: code,
            signal,
            timed_out,
            private_endpoint_hint: private_endpoint_hint(&private_endpoint_errors),
            private_endpoint_errors: failure_texts(&private_endpoint_errors),
            output: OutputView::from(&output),
            log: process.log,
            next,
        },
    )
}

fn summary(pid: u32, exit: Option<&Exit>, wait: u64, output: &Bounded) -> String {
    match exit {
        None => format!(
            "still running as process {pid} after {wait}s (call again with pid {pid} to wait for it); output so far:\n{}",
            output.render()
        ),
        Some(Exit {
            timed_out: true, ..
        }) => format!("timed out and was killed; output:\n{}", output.render()),
        Some(Exit {
            code: Some(code), ..
        }) => format!("exit code {code}\n{}", output.render()),
        Some(Exit { signal, .. }) => format!(
            "ended by signal {}\n{}",
            signal.unwrap_or_default(),
            output.render()
        ),
    }
}

/// The last `n` characters of `text`.
fn tail(text: &str, n: usize) -> &str {
    let start = text
        .char_indices()
        .rev()
        .nth(n.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    &text[start..]
}

/// The command boxd is sent: run in the background in `/work`, checked as
/// the REST route's are (`ExecSpec`).
fn request(cmd: String, timeout_s: Option<u64>) -> Result<ExecRequest, BoxError> {
    ExecSpec::request(cmd, None, Vec::new(), timeout_s, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MCP refuses what REST refuses, with the same message (the tool
    /// passed a NUL byte on to boxd before).
    #[test]
    fn a_command_is_refused_as_the_rest_route_refuses_it() {
        for cmd in ["echo a\0b", "\u{1c}\u{1f}"] {
            let body: crate::views::exec::ExecBody =
                serde_json::from_value(serde_json::json!({ "cmd": cmd })).unwrap();
            let rest = crate::views::exec::request(body).unwrap_err();
            let mcp = request(cmd.to_owned(), Some(60)).unwrap_err();
            assert_eq!(mcp.to_string(), rest.message(), "{cmd:?}");
            assert_eq!(rest.status(), actix_web::http::StatusCode::BAD_REQUEST);
        }
        assert_eq!(
            request("echo a\0b".into(), None).unwrap_err().to_string(),
            "cmd contains NUL (\\u0000): send text without it"
        );
        let fine = request("make test".into(), Some(60)).unwrap();
        assert_eq!(
            (fine.cwd.as_str(), fine.background, fine.timeout_s),
            ("/work", true, Some(60))
        );
    }

    #[test]
    fn tail_keeps_whole_characters() {
        assert_eq!(tail("héllo wörld", 5), "wörld");
        assert_eq!(tail("ab", 5), "ab");
        assert_eq!(tail("", 5), "");
    }
}
