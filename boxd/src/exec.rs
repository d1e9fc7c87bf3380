//! Running commands in the box: `sh -lc <cmd>` (a login-like environment),
//! in its own process group with the box's secrets and the caller's variables
//! in its environment, `/work` as the default working directory. Output goes
//! out chunk by chunk; a time limit kills the whole process group. Background
//! commands keep running after the call (until their time limit, if they were
//! given one); their output goes to a log file that can be read later, or
//! followed while it grows, and they are listed and signalled by process id.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::mpsc;

/// A piece of output.
#[derive(Debug)]
pub enum Output {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

use psbx_wire::boxd::{ExecRequest, Exit, Process};

/// How long output is still read after the command exited, for children that
/// keep its pipes open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

fn command(spec: &ExecRequest, base_env: &[(String, String)]) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-lc")
        .arg(&spec.cmd)
        .current_dir(&spec.cwd)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", "/root")
        .env("TERM", "dumb")
        .env("LANG", "C.UTF-8")
        .envs(base_env.iter().map(|(k, v)| (k, v)))
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    cmd
}

/// Kills every process of a group.
pub fn kill_group(pgid: u32, signal: nix::sys::signal::Signal) -> bool {
    i32::try_from(pgid)
        .ok()
        .is_some_and(|p| nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), signal).is_ok())
}

async fn pump(mut from: impl AsyncRead + Unpin, to: mpsc::Sender<Output>, stderr: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = buf[..n].to_vec();
                let out = if stderr {
                    Output::Stderr(chunk)
                } else {
                    Output::Stdout(chunk)
                };
                if to.send(out).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn exit_of(status: std::process::ExitStatus, timed_out: bool) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    Exit {
        code: status.code(),
        signal: status.signal(),
        timed_out,
        private_endpoint_errors: Vec::new(),
    }
}

/// Runs a foreground command, sending its output to `out` as it comes.
pub async fn run(
    spec: &ExecRequest,
    base_env: &[(String, String)],
    out: mpsc::Sender<Output>,
) -> std::io::Result<(u32, Exit)> {
    let mut child = command(spec, base_env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id().unwrap_or(0);
    let mut pumps = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(stdout, out.clone(), false)));
    }
    if let Some(stderr) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(stderr, out.clone(), true)));
    }
    drop(out);
    let limit = spec.timeout_s.map(Duration::from_secs);
    let (status, timed_out) = match limit {
        Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => (status?, false),
            Err(_) => {
                kill_group(pid, nix::sys::signal::Signal::SIGKILL);
                (child.wait().await?, true)
            }
        },
        None => (child.wait().await?, false),
    };
    if timed_out {
        // Children still holding the pipes were killed with the group.
        for p in pumps {
            let _ = p.await;
        }
    } else {
        let drain = async {
            for p in pumps {
                let _ = p.await;
            }
        };
        let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, drain).await;
    }
    Ok((pid, exit_of(status, timed_out)))
}

/// The background commands of this box.
#[derive(Clone)]
pub struct Processes {
    inner: Arc<Mutex<HashMap<u32, Process>>>,
    /// Where the list is kept for a restarted boxd (`crate::kept`; none in
    /// tests).
    kept: Option<PathBuf>,
    /// Where their output goes, a log file each.
    logs: PathBuf,
}

impl Default for Processes {
    /// None yet, not kept, logging where a box's do (`crate::settings`).
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            kept: None,
            logs: crate::settings::Settings::default().logs_dir(),
        }
    }
}

impl Processes {
    /// The list kept at `path`, with the commands an earlier boxd of this
    /// boot started: they are listed, signalled and logged again. Those still
    /// running are watched until they end; their exit code is not known (they
    /// are not this boxd's children), so it reads as none. Their time limit,
    /// if they had one, is no longer enforced. New commands log under `logs`.
    pub fn kept_at(path: PathBuf, logs: PathBuf) -> Self {
        let me = Self {
            inner: Arc::default(),
            kept: Some(path.clone()),
            logs,
        };
        let earlier: Vec<Process> =
            crate::kept::usable(&path, crate::kept::read(&path)).unwrap_or_default();
        let mut watched = 0;
        for mut process in earlier {
            if process.exit.is_none() {
                if alive(process.pid) {
                    watched += 1;
                    me.watch(process.pid);
                } else {
                    process.exit = Some(unknown_exit());
                }
            }
            me.lock().insert(process.pid, process);
        }
        if !me.lock().is_empty() {
            println!(
                "boxd: restored {} background commands ({watched} running) from {}",
                me.len(),
                path.display()
            );
        }
        me.save();
        me
    }

    /// Waits for a command this boxd did not start to end.
    fn watch(&self, pid: u32) {
        let me = self.clone();
        tokio::spawn(async move {
            while alive(pid) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if let Some(p) = me.lock().get_mut(&pid) {
                p.exit = Some(unknown_exit());
            }
            me.save();
        });
    }

    /// Keeps the list for a restarted boxd.
    fn save(&self) {
        if let Some(path) = &self.kept {
            crate::kept::keep(path, &self.list(), "the background commands");
        }
    }

    /// Starts a background command; its stdout and stderr go to its log file.
    /// `caused`, given its pid once it ended, says which connections to
    /// environment addresses it made failed.
    pub fn start(
        &self,
        spec: &ExecRequest,
        base_env: &[(String, String)],
        caused: impl FnOnce(u32) -> Vec<psbx_wire::boxd::EndpointFailure> + Send + 'static,
    ) -> std::io::Result<Process> {
        std::fs::create_dir_all(&self.logs)?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let log = self.logs.join(format!("{stamp}-{}.log", self.len()));
        let file = std::fs::File::create(&log)?;
        let mut child = command(spec, base_env)
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        let final_log = self.logs.join(format!("{pid}.log"));
        std::fs::rename(&log, &final_log)?;
        let process = Process {
            pid,
            cmd: spec.cmd.clone(),
            started_at_unix: stamp,
            log: final_log.display().to_string(),
            exit: None,
        };
        self.lock().insert(pid, process.clone());
        self.save();
        let me = self.clone();
        let limit = spec.timeout_s.map(Duration::from_secs);
        tokio::spawn(async move {
            let ended = match limit {
                Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
                    Ok(status) => status.map(|s| exit_of(s, false)),
                    Err(_) => {
                        kill_group(pid, nix::sys::signal::Signal::SIGKILL);
                        child.wait().await.map(|s| exit_of(s, true))
                    }
                },
                None => child.wait().await.map(|s| exit_of(s, false)),
            };
            if let Ok(mut exit) = ended
                && let Some(p) = me.lock().get_mut(&pid)
            {
                exit.private_endpoint_errors = caused(pid);
                p.exit = Some(exit);
            }
            me.save();
        });
        Ok(process)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Process>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn list(&self) -> Vec<Process> {
        let mut all: Vec<Process> = self.lock().values().cloned().collect();
        all.sort_by_key(|p| p.pid);
        all
    }

    pub fn get(&self, pid: u32) -> Option<Process> {
        self.lock().get(&pid).cloned()
    }

    /// Signals a background command's whole process group.
    pub fn signal(&self, pid: u32, signal: nix::sys::signal::Signal) -> bool {
        self.get(pid)
            .is_some_and(|p| p.exit.is_none() && kill_group(pid, signal))
    }

    /// Kills the process group of every background command still running
    /// (what a box's stop does to them); the number killed.
    pub fn kill_all(&self) -> usize {
        let running: Vec<u32> = self
            .lock()
            .values()
            .filter(|p| p.exit.is_none())
            .map(|p| p.pid)
            .collect();
        running
            .into_iter()
            .filter(|pid| kill_group(*pid, nix::sys::signal::Signal::SIGKILL))
            .count()
    }
}

/// Whether `pid` runs (and is not a zombie waiting for its parent).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The end of a command whose exit status boxd could not collect.
fn unknown_exit() -> Exit {
    Exit {
        code: None,
        signal: None,
        timed_out: false,
        private_endpoint_errors: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cmd: &str) -> ExecRequest {
        ExecRequest {
            cmd: cmd.to_owned(),
            cwd: "/tmp".to_owned(),
            env: vec![("MINE".into(), "caller".into())],
            timeout_s: None,
            background: false,
        }
    }

    async fn collect(
        spec: ExecRequest,
        env: &[(String, String)],
    ) -> (String, String, Exit, Duration) {
        let (tx, mut rx) = mpsc::channel(64);
        let started = std::time::Instant::now();
        let runner = run(&spec, env, tx);
        let gather = async {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            while let Some(chunk) = rx.recv().await {
                match chunk {
                    Output::Stdout(b) => o.extend(b),
                    Output::Stderr(b) => e.extend(b),
                }
            }
            (o, e)
        };
        let (result, (o, e)) = tokio::join!(runner, gather);
        let (_, exit) = result.unwrap();
        (
            String::from_utf8(o).unwrap(),
            String::from_utf8(e).unwrap(),
            exit,
            started.elapsed(),
        )
    }

    #[tokio::test]
    async fn runs_with_the_box_and_caller_environment() {
        let secrets = vec![("TOKEN".to_owned(), "from-the-box".to_owned())];
        let (out, err, exit, _) = collect(
            spec("echo $TOKEN $MINE; pwd; echo oops >&2; exit 3"),
            &secrets,
        )
        .await;
        assert_eq!(out, "from-the-box caller\n/tmp\n");
        assert_eq!(err, "oops\n");
        assert_eq!(
            exit,
            Exit {
                code: Some(3),
                signal: None,
                timed_out: false,
                private_endpoint_errors: Vec::new(),
            }
        );
    }

    #[tokio::test]
    async fn a_time_limit_kills_the_whole_group() {
        let marker = format!("/tmp/psbx-exec-test-{}", std::process::id());
        let mut s = spec(&format!("(sleep 3; touch {marker}) & sleep 30"));
        s.timeout_s = Some(1);
        let (_, _, exit, took) = collect(s, &[]).await;
        assert!(exit.timed_out);
        assert_eq!(exit.signal, Some(9));
        assert!(took < Duration::from_secs(3), "{took:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !std::path::Path::new(&marker).exists(),
            "a child survived the time limit"
        );
    }

    #[tokio::test]
    async fn background_commands_outlive_the_call_and_log_their_output() {
        let procs = Processes::default();
        let p = procs
            .start(&spec("echo started; sleep 30"), &[], |_| Vec::new())
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(std::fs::read_to_string(&p.log).unwrap(), "started\n");
        assert!(
            procs
                .list()
                .iter()
                .any(|q| q.pid == p.pid && q.exit.is_none())
        );
        assert!(procs.signal(p.pid, nix::sys::signal::Signal::SIGTERM));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(procs.get(p.pid).unwrap().exit.unwrap().signal, Some(15));
        let _ = std::fs::remove_file(&p.log);
    }

    #[tokio::test]
    async fn kept_commands_come_back_and_running_ones_are_watched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("processes.json");
        // In its own process group, as boxd starts commands.
        let mut running = std::os::unix::process::CommandExt::process_group(
            &mut std::process::Command::new("sleep"),
            0,
        )
        .arg("30")
        .spawn()
        .unwrap();
        let gone = std::process::Command::new("true")
            .spawn()
            .unwrap()
            .wait()
            .unwrap();
        assert!(gone.success());
        let process = |pid: u32, exit: Option<Exit>| Process {
            pid,
            cmd: format!("command {pid}"),
            started_at_unix: 1,
            log: format!("/run/psbx/processes/{pid}.log"),
            exit,
        };
        let ended = Exit {
            code: Some(3),
            ..unknown_exit()
        };
        // A pid no process has (pid_max is below 2^22).
        let vanished = 4_194_304 + 7;
        crate::kept::write(
            &path,
            &vec![
                process(running.id(), None),
                process(vanished, None),
                process(11, Some(ended.clone())),
            ],
        )
        .unwrap();

        let restored = Processes::kept_at(path.clone(), dir.path().join("processes"));
        assert_eq!(restored.list().len(), 3);
        assert!(restored.get(running.id()).unwrap().exit.is_none());
        assert_eq!(restored.get(vanished).unwrap().exit, Some(unknown_exit()));
        assert_eq!(restored.get(11).unwrap().exit, Some(ended));
        // What it found is kept again as it is now.
        let kept: Vec<Process> = crate::kept::read(&path).unwrap().unwrap();
        assert_eq!(kept, restored.list());

        // The running one is signalled like any other, and seen to end.
        assert!(restored.signal(running.id(), nix::sys::signal::Signal::SIGKILL));
        psbx_tests::wait::until_async(
            "it to be seen to end",
            Duration::from_secs(10),
            async || restored.get(running.id()).unwrap().exit,
        )
        .await;
        let _ = running.wait();
        let kept: Vec<Process> = crate::kept::read(&path).unwrap().unwrap();
        assert!(kept.iter().all(|p| p.exit.is_some()), "{kept:?}");
    }
}
