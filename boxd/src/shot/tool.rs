//! The programs a shot runs (chromium, Xvfb, ffmpeg, ffprobe): started in a
//! process group of their own, their stderr kept (its last lines name what
//! went wrong) and offered line by line to whoever waits for one (chromium's
//! `DevTools listening on`), and the whole group killed when the handle is
//! dropped, so a shot that is abandoned leaves nothing running.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// How many of a program's last stderr lines are kept.
const TAIL_LINES: usize = 12;
/// How many stderr lines wait for a reader before more are dropped.
const LINE_QUEUE: usize = 256;

/// Why a program could not be run or did not do its work.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Not installed (not on `PATH`).
    #[error("{0} is not installed in this box image: install it in the box (apt-get install {pkg})", pkg = package(.0))]
    Missing(&'static str),
    #[error("cannot start {0}: {1}")]
    Spawn(&'static str, #[source] std::io::Error),
    /// It ended with a failure; its stderr's last lines.
    #[error("{tool} failed ({status}){}", on_lines(stderr))]
    Failed {
        tool: &'static str,
        status: ExitStatus,
        stderr: String,
    },
    #[error("{tool} did not finish within {}s{}", limit.as_secs(), on_lines(stderr))]
    Slow {
        tool: &'static str,
        limit: Duration,
        stderr: String,
    },
    #[error("waiting for {0}: {1}")]
    Wait(&'static str, #[source] std::io::Error),
}

/// The Debian package of a program.
fn package(program: &str) -> &str {
    match program {
        "Xvfb" => "xvfb",
        "ffprobe" => "ffmpeg",
        other => other,
    }
}

/// `: <lines>` when there are any.
fn on_lines(lines: &str) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!(": {lines}")
    }
}

/// A running program: killed with its process group when dropped.
pub struct Tool {
    name: &'static str,
    child: tokio::process::Child,
    group: Option<Pid>,
    tail: Arc<Mutex<VecDeque<String>>>,
    lines: mpsc::Receiver<String>,
    /// SIGTERM rather than SIGKILL when dropped.
    gentle: bool,
}

impl Tool {
    /// Starts `program` with `args`, stdin closed, stdout to `stdout`, and
    /// `env` set (`None` removes the variable); SIGKILLed when dropped.
    pub fn spawn<I, S>(
        name: &'static str,
        program: &str,
        args: I,
        env: &[(&str, Option<&str>)],
        stdout: Stdio,
    ) -> Result<Self, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::start(name, program, args, env, stdout, false)
    }

    /// Like [`Tool::spawn`], but ended with SIGTERM when dropped (Xvfb then
    /// removes its socket and lock file).
    pub fn spawn_gentle<I, S>(name: &'static str, program: &str, args: I) -> Result<Self, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::start(name, program, args, &[], Stdio::null(), true)
    }

    fn start<I, S>(
        name: &'static str,
        program: &str,
        args: I,
        env: &[(&str, Option<&str>)],
        stdout: Stdio,
        gentle: bool,
    ) -> Result<Self, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .process_group(0)
            // tokio's SIGKILL would come right after the SIGTERM.
            .kill_on_drop(!gentle);
        for (key, value) in env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ToolError::Missing(name),
            _ => ToolError::Spawn(name, e),
        })?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, lines) = mpsc::channel(LINE_QUEUE);
        if let Some(stderr) = child.stderr.take() {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == TAIL_LINES {
                            tail.pop_front();
                        }
                        tail.push_back(line.clone());
                    }
                    let _ = tx.try_send(line);
                }
            });
        }
        Ok(Self {
            name,
            child,
            group,
            tail,
            lines,
            gentle,
        })
    }

    /// Its stdout, when it was piped.
    pub fn stdout(&mut self) -> Option<tokio::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Its last stderr lines, joined with ` | `.
    pub fn stderr_tail(&self) -> String {
        self.tail
            .lock()
            .map(|t| t.iter().map(String::as_str).collect::<Vec<_>>().join(" | "))
            .unwrap_or_default()
    }

    /// The next stderr line, `None` once stderr is closed.
    pub async fn next_line(&mut self) -> Option<String> {
        self.lines.recv().await
    }

    #[cfg(test)]
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it has ended.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for it to end, successfully.
    pub async fn finish(&mut self, limit: Duration) -> Result<(), ToolError> {
        let status = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => status.map_err(|e| ToolError::Wait(self.name, e))?,
            Err(_) => {
                return Err(ToolError::Slow {
                    tool: self.name,
                    limit,
                    stderr: self.stderr_tail(),
                });
            }
        };
        if status.success() {
            return Ok(());
        }
        // Give the stderr reader a moment to take the last lines.
        tokio::time::sleep(Duration::from_millis(50)).await;
        Err(ToolError::Failed {
            tool: self.name,
            status,
            stderr: self.stderr_tail(),
        })
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            let signal = if self.gentle {
                Signal::SIGTERM
            } else {
                Signal::SIGKILL
            };
            let _ = killpg(group, signal);
        }
    }
}

/// Runs a program to its end within `limit`.
pub async fn run(
    name: &'static str,
    program: &str,
    args: &[String],
    env: &[(&str, Option<&str>)],
    limit: Duration,
) -> Result<(), ToolError> {
    let mut tool = Tool::spawn(name, program, args, env, Stdio::null())?;
    tool.finish(limit).await
}

/// Runs a program to its end within `limit` and returns its stdout.
pub async fn output(
    name: &'static str,
    program: &str,
    args: &[String],
    limit: Duration,
) -> Result<Vec<u8>, ToolError> {
    let mut tool = Tool::spawn(name, program, args, &[], Stdio::piped())?;
    let mut stdout = tool.stdout();
    let read = async {
        let mut out = Vec::new();
        if let Some(stdout) = &mut stdout {
            use tokio::io::AsyncReadExt;
            let _ = stdout.take(1 << 20).read_to_end(&mut out).await;
        }
        out
    };
    let out: Vec<u8> = tokio::time::timeout(limit, read).await.unwrap_or_default();
    tool.finish(limit).await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_program_is_named() {
        let e = run(
            "frobnicator",
            "/nonexistent/frob",
            &[],
            &[],
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "frobnicator is not installed in this box image: install it in the box (apt-get install frobnicator)"
        );
    }

    #[tokio::test]
    async fn a_failure_carries_the_last_stderr_lines() {
        let args = [
            "-c",
            "for i in $(seq 1 20); do echo line$i >&2; done; exit 3",
        ]
        .map(String::from);
        let e = run("sh", "sh", &args, &[], Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("sh failed (exit status: 3): line9 | line10"),
            "{e}"
        );
        assert!(e.ends_with("line20"), "{e}");
    }

    #[tokio::test]
    async fn a_slow_program_is_killed_with_its_group_when_dropped() {
        let args = ["-c", "sleep 30 & echo $! >&2; wait"].map(String::from);
        let mut tool = Tool::spawn("sh", "sh", &args, &[], Stdio::null()).unwrap();
        let child: i32 = tool.next_line().await.unwrap().parse().unwrap();
        let e = tool.finish(Duration::from_millis(200)).await.unwrap_err();
        assert!(e.to_string().contains("did not finish within 0s"), "{e}");
        drop(tool);
        for _ in 0..50 {
            if nix::sys::signal::kill(Pid::from_raw(child), None).is_err() {
                return;
            }
            // A killed child of the group lingers as a zombie of init at most.
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            if stat.contains(") Z") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the group's sleep {child} is still running");
    }
}
