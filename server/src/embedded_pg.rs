//! The embedded default database: a PostgreSQL cluster psbx creates and runs
//! under `<data_dir>/pg` from the machine's own PostgreSQL binaries, when no
//! database URL is configured.
//!
//! Layout: `pg/data` (the cluster), `pg/postgres.log`, `pg/password` (the
//! generated password of the `psbx` superuser, mode 0600). The cluster listens
//! on 127.0.0.1 only, on a port chosen free at each start, with password
//! (SCRAM) authentication and no unix socket (socket paths under deep data
//! directories exceed the kernel's 107-byte limit). PostgreSQL refuses to run
//! as root, so as root the cluster runs as `postgres.user` and owns `pg/`.
//!
//! No crate runs a system PostgreSQL this way (the `postgresql_embedded` crate
//! downloads its own binaries, which this project must not), hence this module.

use crate::config::EmbeddedPostgresConfig;
use psbx_actors::ids::random_token;
use std::fs;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Name of the superuser and of the database psbx uses in its own cluster.
const ROLE: &str = "psbx";

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedPgError {
    #[error(
        "no PostgreSQL server binaries found (initdb, pg_ctl) on PATH or under \
         /usr/lib/postgresql/*/bin: install the `postgresql` package (scripts/setup does), \
         set postgres.bin_dir, or give a DATABASE_URL"
    )]
    NoBinaries,
    #[error(
        "psbx runs as root and PostgreSQL refuses to; the user {0:?} that should run the \
         cluster does not exist: create it or set postgres.user"
    )]
    NoUser(String),
    #[error("{what} under {dir}: {source}")]
    Io {
        what: &'static str,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("no psbx database under {0}: run `psbx serve` once to create it, or set DATABASE_URL")]
    NotInitialised(PathBuf),
}

/// The cluster under one data directory.
pub struct EmbeddedPostgres {
    dir: PathBuf,
    bin: PathBuf,
    /// The (uid, gid) the cluster runs as, when psbx runs as root.
    run_as: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
}

/// A running cluster: how to reach it, and whether this process started it.
pub struct Running {
    pub url: String,
    pub started_here: bool,
}

impl EmbeddedPostgres {
    pub fn new(data_dir: &Path, config: &EmbeddedPostgresConfig) -> Result<Self, EmbeddedPgError> {
        let bin = find_binaries(config.bin_dir.as_deref()).ok_or(EmbeddedPgError::NoBinaries)?;
        let run_as = if nix::unistd::geteuid().is_root() {
            let user = nix::unistd::User::from_name(&config.user)
                .ok()
                .flatten()
                .ok_or_else(|| EmbeddedPgError::NoUser(config.user.clone()))?;
            Some((user.uid, user.gid))
        } else {
            None
        };
        let data_dir = std::path::absolute(data_dir).map_err(|source| EmbeddedPgError::Io {
            what: "resolving the data directory",
            dir: data_dir.to_owned(),
            source,
        })?;
        Ok(Self {
            dir: data_dir.join("pg"),
            bin,
            run_as,
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// True once `initdb` has completed here.
    pub fn is_initialised(&self) -> bool {
        self.data().join("PG_VERSION").is_file()
    }

    /// Starts the cluster, creating it first when `create` allows and it does not
    /// exist yet. A cluster already running (left by a process that was killed) is
    /// adopted as it is.
    pub fn ensure_running(&self, create: bool) -> Result<Running, EmbeddedPgError> {
        if !self.is_initialised() {
            if !create {
                return Err(EmbeddedPgError::NotInitialised(self.dir.clone()));
            }
            self.init()?;
        }
        let password = self.password()?;
        if let Some(port) = self.running_port() {
            return Ok(Running {
                url: url(&password, port),
                started_here: false,
            });
        }
        let port = free_port().map_err(|source| self.io("choosing a free port", source))?;
        let log = self.dir.join("postgres.log");
        self.run(
            self.pg_ctl()
                .arg("start")
                .args(["-D"])
                .arg(self.data())
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o"])
                .arg(format!("-p {port}")),
        )
        .map_err(|e| with_log_tail(e, &log))?;
        let url = url(&password, port);
        if !self.dir.join("created").is_file() {
            self.create_database(port, &password)?;
        }
        Ok(Running {
            url,
            started_here: true,
        })
    }

    /// Stops the cluster (fast shutdown: sessions are closed, data is flushed).
    pub fn stop(&self) -> Result<(), EmbeddedPgError> {
        if self.running_port().is_none() {
            return Ok(());
        }
        self.run(
            self.pg_ctl()
                .args(["stop", "-m", "fast", "-w", "-t", "60", "-D"])
                .arg(self.data()),
        )
        .map(drop)
    }

    /// The port of the running cluster, read from its `postmaster.pid`, when
    /// `pg_ctl status` says it runs.
    fn running_port(&self) -> Option<u16> {
        let status = self
            .as_cluster_user(self.pg_ctl().arg("status").arg("-D").arg(self.data()))
            .output()
            .ok()?;
        if !status.status.success() {
            return None;
        }
        let pid_file = fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        pid_file.lines().nth(3)?.trim().parse().ok()
    }

    fn init(&self) -> Result<(), EmbeddedPgError> {
        let data = self.data();
        // A directory without PG_VERSION is what a failed initdb left: start over.
        if data.exists() {
            fs::remove_dir_all(&data).map_err(|e| self.io("removing a half-made cluster", e))?;
        }
        fs::create_dir_all(&self.dir).map_err(|e| self.io("creating the cluster directory", e))?;
        if let Some(parent) = self.dir.parent() {
            // The cluster's user must be able to pass through the data directory.
            let mode = if self.run_as.is_some() { 0o711 } else { 0o700 };
            fs::set_permissions(parent, fs::Permissions::from_mode(mode))
                .map_err(|e| self.io("setting the data directory's mode", e))?;
        }
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| self.io("setting the cluster directory's mode", e))?;
        let password = random_token(32).map_err(|e| self.io("generating a password", e.into()))?;
        let pwfile = self.dir.join("password");
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&pwfile)
            .and_then(|mut f| f.write_all(password.as_bytes()))
            .map_err(|e| self.io("writing the password file", e))?;
        let _ = fs::remove_file(self.dir.join("created"));
        self.chown_tree()?;
        self.run(
            Command::new(self.bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", ROLE, "-E", "UTF8", "--locale=C.UTF-8"])
                .args(["--auth-host=scram-sha-256", "--auth-local=scram-sha-256"])
                .arg(format!("--pwfile={}", pwfile.display())),
        )?;
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .map_err(|e| self.io("opening postgresql.conf", e))?;
        conf.write_all(
            b"\n# set by psbx: loopback only, no unix socket, port given at start\n\
              listen_addresses = '127.0.0.1'\n\
              unix_socket_directories = ''\n",
        )
        .map_err(|e| self.io("writing postgresql.conf", e))?;
        tracing::info!(dir = %self.dir.display(), "created the embedded PostgreSQL cluster");
        Ok(())
    }

    fn create_database(&self, port: u16, password: &str) -> Result<(), EmbeddedPgError> {
        let mut createdb = Command::new(self.bin.join("createdb"));
        createdb
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", ROLE, ROLE])
            .env("PGPASSWORD", password);
        match self.run(&mut createdb) {
            Ok(_) => {}
            Err(EmbeddedPgError::Command { detail, .. }) if detail.contains("already exists") => {}
            Err(e) => return Err(e),
        }
        fs::write(self.dir.join("created"), b"")
            .map_err(|e| self.io("marking the database created", e))
    }

    fn password(&self) -> Result<String, EmbeddedPgError> {
        fs::read_to_string(self.dir.join("password"))
            .map(|p| p.trim().to_owned())
            .map_err(|e| self.io("reading the password file", e))
    }

    fn pg_ctl(&self) -> Command {
        Command::new(self.bin.join("pg_ctl"))
    }

    fn as_cluster_user<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command.current_dir(&self.dir).env_remove("PGDATA");
        if let Some((uid, gid)) = self.run_as {
            // std drops root's supplementary groups itself when it changes the uid.
            command.uid(uid.as_raw()).gid(gid.as_raw());
        }
        command
    }

    fn run(&self, command: &mut Command) -> Result<Output, EmbeddedPgError> {
        // Program and arguments only: the environment may hold the password.
        let shown = std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|part| part.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let output =
            self.as_cluster_user(command)
                .output()
                .map_err(|e| EmbeddedPgError::Command {
                    command: shown.clone(),
                    detail: e.to_string(),
                })?;
        if output.status.success() {
            Ok(output)
        } else {
            Err(EmbeddedPgError::Command {
                command: shown,
                detail: format!(
                    "{}: {}\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim(),
                    String::from_utf8_lossy(&output.stdout).trim()
                ),
            })
        }
    }

    fn chown_tree(&self) -> Result<(), EmbeddedPgError> {
        let Some((uid, gid)) = self.run_as else {
            return Ok(());
        };
        for entry in [self.dir.clone(), self.dir.join("password")] {
            nix::unistd::chown(&entry, Some(uid), Some(gid))
                .map_err(|e| self.io("handing the cluster to its user", e.into()))?;
        }
        Ok(())
    }

    fn io(&self, what: &'static str, source: std::io::Error) -> EmbeddedPgError {
        EmbeddedPgError::Io {
            what,
            dir: self.dir.clone(),
            source,
        }
    }
}

fn url(password: &str, port: u16) -> String {
    format!("postgres://{ROLE}:{password}@127.0.0.1:{port}/{ROLE}")
}

/// A port nobody listens on right now (the kernel's choice for port 0).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Adds the end of PostgreSQL's own log to a failed start: that is where it says why.
fn with_log_tail(error: EmbeddedPgError, log: &Path) -> EmbeddedPgError {
    match error {
        EmbeddedPgError::Command { command, detail } => {
            let tail = fs::read_to_string(log)
                .map(|text| {
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(5)..].join("\n")
                })
                .unwrap_or_default();
            EmbeddedPgError::Command {
                command,
                detail: format!("{detail}\nend of {}:\n{tail}", log.display()),
            }
        }
        other => other,
    }
}

/// The directory holding `initdb`, `pg_ctl` and `createdb`: the configured one,
/// else PATH, else the newest /usr/lib/postgresql/<major>/bin. A symlink found on
/// PATH is followed to the directory of the real binaries (Debian puts only some
/// of them on PATH).
fn find_binaries(configured: Option<&Path>) -> Option<PathBuf> {
    let dir = find_initdb_dir(configured)?;
    let real = fs::canonicalize(dir.join("initdb")).ok()?;
    real.parent().map(Path::to_owned)
}

fn find_initdb_dir(configured: Option<&Path>) -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = configured {
        return has_both(dir).then(|| dir.to_owned());
    }
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major = entry.file_name().to_str()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}
