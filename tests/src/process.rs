//! The workspace's binaries, as `scripts/test` built them, and a running
//! `psbx serve` that tests talk to over HTTP.

use crate::log::Log;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A binary of the workspace (`psbx`, `psbx-connector`, `boxd`), from the target
/// directory this test runs from (or `PSBX_BIN_DIR`).
pub fn binary(name: &str) -> PathBuf {
    let dir = std::env::var_os("PSBX_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target/<profile>/deps/<test> -> target/<profile>
            let exe = std::env::current_exe().expect("the test's own path");
            exe.parent()
                .and_then(Path::parent)
                .expect("the test binary lives in target/<profile>/deps")
                .to_owned()
        });
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`, which \
         scripts/test does)",
        path.display()
    );
    path
}

/// A `psbx serve` child: started with the given arguments and environment, read
/// until it says where it listens, stopped with SIGTERM when dropped.
pub struct ServerProcess {
    child: Child,
    /// The URL it printed (`psbx is listening on <url>`).
    pub url: String,
    /// Everything it printed on stdout before it listened (the first key, if any).
    pub banner: String,
    /// What it logs (on stderr).
    pub log: Log,
    /// The lines of `log` before this index were already matched by
    /// [`Self::wait_for_log`].
    cursor: usize,
}

impl ServerProcess {
    /// Starts `psbx serve --listen 127.0.0.1:0 <args>` with `envs` set and waits
    /// (up to 90 s) until it listens. Panics with its output when it fails.
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::start_in(None, args, envs)
    }

    /// [`Self::start`] of a server without boxes, keeping its state in
    /// `data_dir` and `db`, with `envs` set as well.
    pub fn without_boxes(data_dir: &Path, db: &crate::TestDatabase, envs: &[(&str, &str)]) -> Self {
        let dir = data_dir.to_str().expect("a UTF-8 data dir");
        let mut all = vec![("DATABASE_URL", db.url()), ("PSBX_BOXES__ENABLED", "false")];
        all.extend_from_slice(envs);
        Self::start(&["--data-dir", dir], &all)
    }

    /// [`Self::start`] with the working directory `cwd` (relative paths in
    /// `args` resolve there).
    pub fn start_in(cwd: Option<&Path>, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut command = Command::new(binary("psbx"));
        if let Some(dir) = cwd {
            command.current_dir(dir);
        }
        command.arg("serve");
        if !args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        command.args(args);
        for (k, v) in envs {
            command.env(k, v);
        }
        Self::spawn(command)
    }

    /// Runs `command` (which ends in `psbx serve`: `scripts/serve`, say) with
    /// no DATABASE_URL and `RUST_LOG=info` unless it sets them, and waits (up
    /// to 90 s) until it listens.
    pub fn spawn(mut command: Command) -> Self {
        if !command.get_envs().any(|(k, _)| k == "RUST_LOG") {
            command.env("RUST_LOG", "info");
        }
        if !command.get_envs().any(|(k, _)| k == "DATABASE_URL") {
            command.env_remove("DATABASE_URL");
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("starting psbx serve");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let log = Log::capture(stderr, None);
        let (out_tx, out_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = out_tx.send(line);
            }
        });
        let mut banner = String::new();
        let url = loop {
            match out_rx.recv_timeout(Duration::from_secs(90)) {
                Ok(line) => match line.strip_prefix("psbx is listening on ") {
                    Some(url) => break url.to_owned(),
                    None => {
                        banner.push_str(&line);
                        banner.push('\n');
                    }
                },
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "psbx serve did not start listening; stdout:\n{banner}\nstderr:\n{}",
                        log.text()
                    );
                }
            }
        };
        Self {
            child,
            url,
            banner,
            log,
            cursor: 0,
        }
    }

    /// Waits for a log line containing `needle` after the line the previous
    /// call matched; returns it. Panics with the log so far after `timeout`.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> String {
        let (at, line) = self.log.wait_for_line(self.cursor, needle, timeout);
        self.cursor = at + 1;
        line
    }

    /// The API key printed on a first start, if this start printed one.
    pub fn first_key(&self) -> Option<String> {
        self.banner
            .split_whitespace()
            .find(|w| w.starts_with("psbx_"))
            .map(|w| {
                w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .to_owned()
            })
    }

    /// Sends SIGTERM and waits (up to 30 s) for a clean exit; returns whether the
    /// exit was successful and what it logged.
    pub fn stop(mut self) -> (bool, String) {
        let ok = self.terminate();
        // The reader thread drains the pipe and ends with it.
        self.log.finish(Duration::from_secs(2));
        (ok, self.log.lines().join("\n"))
    }

    /// Fails the test when its log shows a secret the test created.
    fn check_log(&self) {
        self.log.finish(Duration::from_secs(2));
        crate::witness::assert_unseen("psbx serve's log", &self.log.text());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL, as a crash would, and reaps it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.check_log();
    }

    fn terminate(&mut self) -> bool {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_err() {
            return false;
        }
        let child = &mut self.child;
        if let Some(status) =
            crate::wait::within(Duration::from_secs(30), || child.try_wait().ok().flatten())
        {
            return status.success();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
        self.check_log();
    }
}
