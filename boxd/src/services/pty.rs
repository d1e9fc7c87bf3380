//! `pty`: a login shell on a new pseudo-terminal (the takeover page). The
//! stream starts with one JSON line [`PtyRequest`] (the terminal's size),
//! then carries [`PtyInput`] records: typed bytes go to the terminal, a
//! resize sets its size (TIOCSWINSZ). The terminal's output goes back as
//! raw bytes, one read at a time.
//!
//! The shell (`/bin/bash -l`, or `/bin/sh -l` where there is no bash) is
//! the leader of a new session with the terminal as its controlling
//! terminal (the `pty-process` crate does the `setsid` and `TIOCSCTTY`), so
//! a 0x03 typed interrupts its foreground job. The server's half-close
//! hangs the terminal up: every process of the shell's session gets SIGHUP
//! (and SIGCONT, as the kernel's hang-up does), and a second later the
//! shell's process group and the foreground job get SIGKILL if they are
//! still there ([`hang_up`]). When the shell exits, the output still in the
//! terminal is sent and the stream finished (FIN). A malformed request or
//! input resets the stream with the reason.

use super::common::Boxd;
use bytes::{Bytes, BytesMut};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use psbx_wire::boxd::{PtyInput, PtyRequest};
use psbx_wire::mux::{ReadHalf, Stream};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// The longest request line read.
const MAX_REQUEST_LINE: usize = 4 * 1024;
/// The most bytes read from the terminal at once (one output chunk).
const READ_CHUNK: usize = 16 * 1024;
/// How long the terminal's output is still read after the shell exited (a
/// program it left behind may hold the terminal open).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// Between the hang-up's SIGHUP and SIGKILL.
const KILL_AFTER_HANGUP: Duration = Duration::from_secs(1);
/// How long boxd waits for the server's half-close once the shell ended.
const WAIT_FOR_CLOSE: Duration = Duration::from_secs(10);

/// Why a terminal could not be started or driven.
#[derive(Debug, thiserror::Error)]
enum PtyError {
    #[error("bad terminal request: {0}")]
    Request(String),
    #[error("the stream ended before the terminal request line")]
    NoRequest,
    #[error("cannot open a terminal: {0}")]
    Open(pty_process::Error),
    #[error("cannot start {shell}: {error}")]
    Spawn {
        shell: &'static str,
        error: pty_process::Error,
    },
    #[error("bad terminal input: {0}")]
    Input(String),
    #[error("the stream broke: {0}")]
    Stream(std::io::Error),
}

pub async fn serve(stream: Stream, state: &Boxd) {
    let (mut from_server, mut to_server) = stream.into_split();
    let (request, rest) = match request_line(&mut from_server).await {
        Ok(r) => r,
        Err(e) => return to_server.reset(&e.to_string()),
    };
    let env = state.env.read().map(|e| e.clone()).unwrap_or_default();
    let (pty, mut child) = match spawn(request, state.work(), &env) {
        Ok(started) => started,
        Err(e) => return to_server.reset(&e.to_string()),
    };
    // The session id is the shell's pid (it is the session leader).
    let sid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw);
    let (mut pty_out, pty_in) = pty.into_split();
    let mut input = tokio::spawn(take_input(from_server, pty_in, rest));
    let mut input_end: Option<Result<(), PtyError>> = None;
    let mut output_open = true;
    let mut exited_at: Option<Instant> = None;
    let mut buf = BytesMut::new();
    loop {
        if !output_open && exited_at.is_some() {
            break;
        }
        let drain_until = exited_at.map(|at| at + DRAIN_AFTER_EXIT);
        tokio::select! {
            read = read_output(&mut pty_out, &mut buf), if output_open => match read {
                Some(bytes) => {
                    if to_server.write_chunk(bytes).await.is_err() {
                        output_open = false;
                        hang_up(sid);
                    }
                }
                None => output_open = false,
            },
            end = &mut input, if input_end.is_none() => {
                input_end = Some(end.unwrap_or_else(|e| {
                    Err(PtyError::Stream(std::io::Error::other(e.to_string())))
                }));
                hang_up(sid);
            },
            _ = child.wait(), if exited_at.is_none() => exited_at = Some(Instant::now()),
            () = sleep_until(drain_until), if output_open && drain_until.is_some() => {
                output_open = false;
            },
        }
    }
    if input_end.is_none() {
        // The shell ended first: say so, then wait for the server's half-close.
        let _ = to_server.shutdown().await;
        input_end = match tokio::time::timeout(WAIT_FOR_CLOSE, &mut input).await {
            Ok(end) => Some(end.unwrap_or(Ok(()))),
            Err(_) => {
                input.abort();
                Some(Ok(()))
            }
        };
    }
    match input_end {
        Some(Err(e @ PtyError::Input(_))) => to_server.reset(&e.to_string()),
        _ => {
            let _ = to_server.shutdown().await;
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The request line and the bytes that came after it.
async fn request_line(stream: &mut ReadHalf) -> Result<(PtyRequest, Vec<u8>), PtyError> {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let request = serde_json::from_slice(&buf[..end])
                .map_err(|e| PtyError::Request(e.to_string()))?;
            return Ok((request, buf.split_off(end + 1)));
        }
        if buf.len() > MAX_REQUEST_LINE {
            return Err(PtyError::Request(format!(
                "no newline in the first {MAX_REQUEST_LINE} bytes"
            )));
        }
        match stream.read_chunk().await.map_err(PtyError::Stream)? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None => return Err(PtyError::NoRequest),
        }
    }
}

/// The login shell this box has.
fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

fn spawn(
    request: PtyRequest,
    work: &Path,
    env: &[(String, String)],
) -> Result<(pty_process::Pty, tokio::process::Child), PtyError> {
    let (pty, pts) = pty_process::open().map_err(PtyError::Open)?;
    pty.resize(pty_process::Size::new(request.rows, request.cols))
        .map_err(PtyError::Open)?;
    let shell = shell();
    let child = pty_process::Command::new(shell)
        .arg("-l")
        .current_dir(work)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", "/root")
        .env("LANG", "C.UTF-8")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("TERM", "xterm-256color")
        .kill_on_drop(false)
        .spawn(pts)
        .map_err(|error| PtyError::Spawn { shell, error })?;
    Ok((pty, child))
}

/// The next bytes the terminal printed; `None` once it is closed (EIO when
/// no process holds it any more).
async fn read_output(pty: &mut pty_process::OwnedReadPty, buf: &mut BytesMut) -> Option<Bytes> {
    buf.reserve(READ_CHUNK);
    match pty.read_buf(buf).await {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(buf.split().freeze()),
    }
}

/// Applies the server's inputs to the terminal until the stream's end.
/// Once the terminal is gone, inputs are read and dropped.
async fn take_input(
    mut stream: ReadHalf,
    mut pty: pty_process::OwnedWritePty,
    rest: Vec<u8>,
) -> Result<(), PtyError> {
    let mut buf = rest;
    let mut terminal = true;
    loop {
        let mut at = 0;
        while let Some((input, used)) = PtyInput::parse(&buf[at..]).map_err(PtyError::Input)? {
            at += used;
            if terminal {
                terminal = match input {
                    PtyInput::Input(bytes) => pty.write_all(&bytes).await.is_ok(),
                    PtyInput::Resize { cols, rows } => {
                        pty.resize(pty_process::Size::new(rows, cols)).is_ok()
                    }
                };
            }
        }
        buf.drain(..at);
        match stream.read_chunk().await.map_err(PtyError::Stream)? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None if buf.is_empty() => return Ok(()),
            None => return Err(PtyError::Input("the stream ended inside an input".into())),
        }
    }
}

/// Hangs the terminal up as closing a terminal window does: SIGHUP and
/// SIGCONT to every process of the shell's session (the kernel's hang-up
/// reaches the foreground job only, and not every shell passes it on to its
/// jobs), then, a second later, SIGKILL to what is left of the shell's own
/// process group and of the terminal's foreground job. A background job
/// that ignores SIGHUP (`nohup`) keeps running, as after a real hang-up.
fn hang_up(sid: Option<Pid>) {
    let Some(sid) = sid else { return };
    for member in session(sid) {
        let _ = kill(member.pid, Signal::SIGHUP);
        let _ = kill(member.pid, Signal::SIGCONT);
    }
    tokio::spawn(async move {
        tokio::time::sleep(KILL_AFTER_HANGUP).await;
        for member in session(sid) {
            if member.pgrp == sid.as_raw() || member.pgrp == member.foreground {
                let _ = kill(member.pid, Signal::SIGKILL);
            }
        }
    });
}

/// A process of the shell's session, from `/proc/<pid>/stat`.
struct Member {
    pid: Pid,
    pgrp: i32,
    /// The foreground process group of its terminal (`tpgid`).
    foreground: i32,
}

/// The processes of session `sid`.
fn session(sid: Pid) -> Vec<Member> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command's `(name)`: state ppid pgrp session tty tpgid.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let number = |i: usize| fields.get(i)?.parse::<i32>().ok();
            (number(3)? == sid.as_raw()).then_some(Member {
                pid: Pid::from_raw(pid),
                pgrp: number(2)?,
                foreground: number(5)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::session;
    use psbx_wire::Stream;
    use psbx_wire::boxd::{PtyInput, PtyRequest};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn terminal(session: &psbx_wire::Session) -> Stream {
        let mut stream = session.open("pty").await.unwrap();
        let mut line = serde_json::to_vec(&PtyRequest { cols: 80, rows: 24 }).unwrap();
        line.push(b'\n');
        stream.write_all(&line).await.unwrap();
        stream
    }

    async fn send(stream: &mut Stream, input: PtyInput) {
        stream.write_all(&input.encode()).await.unwrap();
    }

    async fn type_line(stream: &mut Stream, line: &str) {
        send(stream, PtyInput::Input(format!("{line}\n").into_bytes())).await;
    }

    /// Reads the terminal's output until it holds `needle` (within 10 s),
    /// and returns all of it.
    async fn read_until(stream: &mut Stream, needle: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let found = tokio::time::timeout(Duration::from_secs(10), async {
            let mut buf = [0u8; 4096];
            while !out.windows(needle.len()).any(|w| w == needle) {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "the terminal ended: {}",
                    String::from_utf8_lossy(&out)
                );
                out.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "no {:?} in the terminal's output: {:?}",
            String::from_utf8_lossy(needle),
            String::from_utf8_lossy(&out)
        );
        out
    }

    /// The number after `name=` in the output (typed as `name=$...`).
    fn number_after(out: &[u8], name: &str) -> i32 {
        let text = String::from_utf8_lossy(out);
        text.match_indices(&format!("{name}="))
            .filter_map(|(at, m)| {
                let digits: String = text[at + m.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .next()
            .unwrap_or_else(|| panic!("no {name}=<n> in {text:?}"))
    }

    fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // A zombie waiting for its new parent is gone too.
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn runs_a_shell_that_answers_resizes_and_takes_ctrl_c() {
        let session = session().await;
        let mut t = terminal(&session).await;
        type_line(&mut t, "echo $((6*7))").await;
        read_until(&mut t, b"42").await;
        type_line(&mut t, "echo \"$TERM:$SECRET\"").await;
        read_until(&mut t, b"xterm-256color:s3cr3t-value").await;
        type_line(&mut t, "stty size").await;
        read_until(&mut t, b"24 80").await;
        send(
            &mut t,
            PtyInput::Resize {
                cols: 120,
                rows: 40,
            },
        )
        .await;
        type_line(&mut t, "stty size").await;
        read_until(&mut t, b"40 120").await;
        type_line(&mut t, "sleep 30").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        send(&mut t, PtyInput::Input(vec![0x03])).await;
        let started = std::time::Instant::now();
        // Typed as af""ter, so only the command's output reads "after".
        type_line(&mut t, "echo af\"\"ter").await;
        read_until(&mut t, b"after").await;
        assert!(started.elapsed() < Duration::from_secs(5));
        type_line(&mut t, "echo \"é-$((1+1))\"").await;
        read_until(&mut t, "é-2".as_bytes()).await;
        type_line(&mut t, "exit").await;
        // The shell's end finishes the stream (FIN), with the output before.
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), t.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap();
        t.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn the_servers_half_close_hangs_up_the_shell_and_its_jobs() {
        let session = session().await;
        let mut t = terminal(&session).await;
        let got = numbers(
            &mut t,
            "sleep 300 & echo job=$! shell=$$",
            &["job", "shell"],
        )
        .await;
        let (job, shell) = (got[0], got[1]);
        let (_job, _shell) = (Reap::new(job), Reap::new(shell));
        assert!(!gone(job) && !gone(shell));
        hang_up_and_see_gone(&mut t, &[(job, "job"), (shell, "shell")]).await;
    }

    /// Half-closes the terminal's stream, waits for its end, then for each
    /// of `pids` to be gone within 5 s.
    async fn hang_up_and_see_gone(t: &mut Stream, pids: &[(i32, &str)]) {
        t.shutdown().await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), t.read_to_end(&mut rest))
            .await
            .expect("the stream ends after the half-close")
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for (pid, what) in pids {
            while !gone(*pid) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the {what} ({pid}) outlived the hang-up"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Kills a process when dropped (a test's leftover, also on failure),
    /// if it is still the same process (its start time unchanged: a pid is
    /// reused).
    struct Reap(i32, Option<String>);

    fn started(pid: i32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Field 22, the 20th after the command's `(name)`.
        Some(
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(19)?
                .to_owned(),
        )
    }

    impl Reap {
        fn new(pid: i32) -> Self {
            Self(pid, started(pid))
        }
    }

    impl Drop for Reap {
        fn drop(&mut self) {
            if self.1.is_some() && started(self.0) == self.1 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(self.0),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }

    /// Types `line` and reads until `name=<n>` and its line's end came, for
    /// each name; returns the numbers.
    async fn numbers(t: &mut Stream, line: &str, names: &[&str]) -> Vec<i32> {
        type_line(t, line).await;
        let mut out = Vec::new();
        let printed = |out: &[u8], name: &str| {
            String::from_utf8_lossy(out)
                .split(&format!("{name}="))
                .skip(1)
                .any(|s| s.starts_with(|c: char| c.is_ascii_digit()) && s.contains(['\r', '\n']))
        };
        while !names.iter().all(|n| printed(&out, n)) {
            out.extend(read_until(t, b"\n").await);
        }
        names.iter().map(|n| number_after(&out, n)).collect()
    }

    #[tokio::test]
    async fn the_hang_up_kills_a_foreground_job_that_ignores_it_and_spares_nohup() {
        let session = session().await;
        let mut t = terminal(&session).await;
        let shell = numbers(&mut t, "echo shell=$$", &["shell"]).await[0];
        let _shell = Reap::new(shell);
        let bg = numbers(
            &mut t,
            "nohup sleep 302 >/dev/null 2>&1 & echo bg=$!",
            &["bg"],
        )
        .await[0];
        let _bg = Reap::new(bg);
        // A foreground job that ignores SIGHUP (inherited through exec).
        let fg = numbers(
            &mut t,
            "trap '' HUP; sh -c 'echo fg=$$; exec sleep 301'",
            &["fg"],
        )
        .await[0];
        let _fg = Reap::new(fg);
        hang_up_and_see_gone(&mut t, &[(fg, "foreground job"), (shell, "shell")]).await;
        assert!(!gone(bg), "the nohup job ({bg}) was killed");
    }

    #[tokio::test]
    async fn a_malformed_input_resets_the_stream_with_the_reason() {
        let session = session().await;
        let mut t = terminal(&session).await;
        t.write_all(b"z\0\0\0\0").await.unwrap();
        let mut out = Vec::new();
        let err = tokio::time::timeout(Duration::from_secs(10), t.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
        assert!(err.to_string().contains("unknown terminal input"), "{err}");
    }

    #[tokio::test]
    async fn a_bad_request_line_resets_the_stream() {
        let session = session().await;
        let mut t = session.open("pty").await.unwrap();
        t.write_all(b"{\"cols\": \"wide\"}\n").await.unwrap();
        let mut out = Vec::new();
        let err = t.read_to_end(&mut out).await.unwrap_err();
        assert!(err.to_string().contains("bad terminal request"), "{err}");
    }
}
