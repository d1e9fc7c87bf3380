//! docs/team-setup.md, run as written (issue 31 item 4): the test reads the doc
//! and runs every command in it, in order, so the doc cannot drift from what
//! psbx does. One account shared by alice and bob (a key each), environment
//! `dev` with two connections — `aws` (a Postgres under an RDS name and dev's
//! `api` and `pricing` under Cloud Map names), its connector an ECS service
//! made from psbx's `connector-ecs.yaml` with the token in Secrets Manager, and
//! `office` (`ledger.office.lan:8443`, HTTPS with the office's CA), its
//! connector psbx's `docker run` line — and the dev gateway as the
//! environment's `externalBaseUrl`; the services' settings uploaded as .env;
//! alice's box A runs her changed `api` and `pricing` (declared in box mode)
//! and reaches Sentry in external mode; bob's box B runs `web` and reaches
//! alice's api through a link; `sandbox_environments`, the troubleshooting
//! order, and stopping.
//!
//! The doc's block conventions (what this test relies on):
//!
//! * ```` ```sh yours ```` — the reader's own values: not run. The test sets
//!   the same variables (exactly the names the block assigns, `export`ed where
//!   it exports) to its own: psbx's URL, the gateway's, moto's region, subnets
//!   and security group.
//! * ```` ```sh ```` — run in order in one bash (`set -euo pipefail`), so
//!   variables carry from block to block; a failing command fails the test
//!   with the block's line and its output.
//! * ```` ```text ```` right after a `sh` block — what that block prints,
//!   compared line by line.
//! * ```` ```json <person> [VAR=field] ```` — MCP tool calls of that person's
//!   agent, one per line as `tool {arguments}` (a call may go on over indented
//!   lines), made in one session of the real MCP client
//!   (`tests/mcp/calls_client.py`, the official Python SDK) with that person's
//!   key, the bash variable `<PERSON>_KEY`. A JSON string that is exactly
//!   `$NAME` is the bash variable `NAME`. Every call must succeed, and a
//!   `sandbox_exec` that is not in the background must exit 0. `VAR=field`
//!   sets the bash variable `VAR` from that field of the block's last result.
//! * No other fenced block may appear, so nothing that looks like a command
//!   goes unrun.
//!
//! Stood in for, and only that (the doc's "What differs in psbx's tests"
//! says the same): `psbx keys` runs on this server's configuration and
//! database; AWS is moto on loopback (`tests/aws/moto_sts.py`) with the real
//! AWS CLI from the venv, and since moto runs no ECS task, once the stack is
//! complete the test's ECS stand-in (`ecs_runs_services` in
//! `tests/team_setup/stand-ins.sh`) starts what the service's task
//! definition names — the connector, with the token read back from moto's
//! Secrets Manager — in the VPC's namespace; `ssh office-gw` runs in the
//! office's namespace, where `docker run` starts the connector binary with
//! the line's `-e` variables (no Docker engine here) and `docker logs` prints
//! its log; both connectors get `PSBX_ALLOW_INSECURE=1` (psbx is plain http
//! on a namespace's link). The VPC, the office and the internet are network
//! namespaces of the test: a real PostgreSQL under the RDS name, dev's own
//! `api` and `pricing` and an unlisted `admin.dev.internal`, the ledger, and
//! the dev gateway with Sentry behind it (`tests/team_setup/servers.py`,
//! recording what reaches them). The repositories `~/src/backend` and
//! `~/src/web` are `tests/team_setup/`'s small Python services.
//!
//! Beyond the doc's own calls the test checks, from the boxes and from the
//! servers: Postgres and the ledger answer through their connectors, Sentry's
//! stand-in got the api's event with `X-Forwarded-Host:
//! sentry.dev.internal:9000`, bob's page shows alice's api and pricing, dev's
//! own `api` is never reached and dev's `pricing` only by bob's own call; an
//! unlisted VPC name does not resolve, a listed host on an unlisted port stays
//! in the box, and box B (which declares no Sentry) cannot reach it. Every
//! route is checked before anything is sent; traffic goes only to loopback,
//! the boxes' channels and the test's namespaces.
//!
//! Cost: two production-image boxes (1 vCPU, 1 GiB, 8 GB each, under TCG):
//! box A for the whole run, box B beside it for the second half; each start
//! is a cold boot of about 30 s. The whole test took 93-123 s in five runs
//! (four of them beside a full `scripts/test` run), a third of it booting.
//! The production image, not the test one: what the doc runs in the boxes is
//! curl, pg_isready, psbx-ro-psql and Python, as on any real box.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_tests::aws::Moto;
use psbx_tests::dev::Api;
use psbx_tests::netns::Netns;
use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The connector image the test's psbx names (its `runCommand`, the template's
/// `Image` default): what the stand-ins agree to run.
const CONNECTOR_IMAGE: &str = "registry.example.com/psbx/connector:1";
/// The egress of the test's boxes: the test ranges only.
const TEST_RANGES: &str = "only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]";
const RDS: &str = "dev-db.cluster-c1a2b3c4d5e6.ap-northeast-1.rds.amazonaws.com";
/// Addresses inside the namespaces only (on their loopback; nothing on the
/// host routes to them).
const DB_ADDR: Ipv4Addr = Ipv4Addr::new(10, 20, 1, 5);
const DEV_API_ADDR: Ipv4Addr = Ipv4Addr::new(10, 20, 1, 10);
const DEV_PRICING_ADDR: Ipv4Addr = Ipv4Addr::new(10, 20, 1, 11);
const ADMIN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 20, 1, 12);
const LEDGER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 30, 1, 5);
/// The dev settings' passwords: no answer may show them unmasked.
const PASSWORDS: [&str; 2] = ["dev-api-password", "dev-pricing-password"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("team_setup")
}

// ---- The doc's blocks -----------------------------------------------------

#[derive(Debug)]
enum Kind {
    Yours,
    Shell,
    Output,
    Mcp {
        person: String,
        capture: Option<(String, String)>,
    },
}

#[derive(Debug)]
struct Block {
    /// The line of the opening fence (1-based).
    line: usize,
    kind: Kind,
    text: String,
}

/// Every fenced block of `doc`, with its kind; a block of another kind fails.
fn blocks(doc: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = doc.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let words: Vec<&str> = info.split_whitespace().collect();
        let kind = match words.as_slice() {
            ["sh", "yours"] => Kind::Yours,
            ["sh"] => Kind::Shell,
            ["text"] => Kind::Output,
            ["json", person, rest @ ..] if rest.len() <= 1 => Kind::Mcp {
                person: (*person).to_owned(),
                capture: rest.first().map(|c| {
                    let (var, field) = c
                        .split_once('=')
                        .unwrap_or_else(|| panic!("line {}: {c} is not VAR=field", n + 1));
                    (var.to_owned(), field.to_owned())
                }),
            },
            _ => panic!(
                "docs/team-setup.md line {}: a ```{info} block: blocks are `sh`, `sh yours`, \
                 `text` or `json <person> [VAR=field]` (tests/tests/team_setup.rs)",
                n + 1
            ),
        };
        let mut text = String::new();
        loop {
            let (_, body) = lines
                .next()
                .unwrap_or_else(|| panic!("line {}: an unclosed block", n + 1));
            if body.trim() == "```" {
                break;
            }
            text.push_str(
                body.get(indent.min(body.len() - body.trim_start().len())..)
                    .unwrap(),
            );
            text.push('\n');
        }
        found.push(Block {
            line: n + 1,
            kind,
            text,
        });
    }
    found
}

/// The MCP calls of a block: `tool {json}`, continued on indented lines.
fn tool_calls(block: &Block) -> Vec<(String, Value)> {
    let mut parts: Vec<String> = Vec::new();
    for line in block.text.lines() {
        if line.starts_with("sandbox_") {
            parts.push(line.to_owned());
        } else if let Some(last) = parts.last_mut() {
            last.push('\n');
            last.push_str(line);
        } else if !line.trim().is_empty() {
            panic!("line {}: {line:?} is not a tool call", block.line);
        }
    }
    parts
        .iter()
        .map(|p| {
            let (tool, args) = p.split_once(' ').unwrap_or((p, "{}"));
            let args: Value = serde_json::from_str(args).unwrap_or_else(|e| {
                panic!(
                    "line {}: the arguments of {tool} are not JSON ({e}): {args}",
                    block.line
                )
            });
            (tool.to_owned(), args)
        })
        .collect()
}

/// The variables a `sh yours` block assigns, and whether each is exported.
fn assigned(block: &Block) -> Vec<(String, bool)> {
    block
        .text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (export, rest) = match l.strip_prefix("export ") {
                Some(rest) => (true, rest),
                None => (false, l),
            };
            let name = rest
                .split_once('=')
                .map(|(n, _)| n)
                .filter(|n| n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
                .unwrap_or_else(|| panic!("line {}: {l:?} is not NAME=value", block.line));
            (name.to_owned(), export)
        })
        .collect()
}

// ---- One bash for the whole doc --------------------------------------------

/// A bash reading commands from a pipe: blocks are sourced from files, each
/// followed by a marker line, so its variables stay for the next.
struct Bash {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    dir: PathBuf,
    count: usize,
}

impl Bash {
    fn start(dir: &Path, env: &[(String, String)]) -> Self {
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc"])
            .current_dir(dir)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting bash");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let dir = dir.join(".blocks");
        std::fs::create_dir_all(&dir).unwrap();
        let mut bash = Self {
            child,
            stdin,
            lines,
            dir,
            count: 0,
        };
        bash.run(
            "the start",
            "exec 2>&1\nset -euo pipefail\n",
            Duration::from_secs(10),
        )
        .unwrap();
        bash
    }

    /// Runs `script` (named `what` in messages): its output, or Err with the
    /// output when bash ended (a command failed under `set -e`).
    fn run(&mut self, what: &str, script: &str, timeout: Duration) -> Result<String, String> {
        self.count += 1;
        let file = self.dir.join(format!("{:03}.sh", self.count));
        std::fs::write(&file, script).unwrap();
        let marker = format!("@@done-{}", self.count);
        writeln!(self.stdin, "source {}\necho {marker}", file.display())
            .map_err(|e| format!("bash is gone ({e})"))?;
        let deadline = Instant::now() + timeout;
        let mut out = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // A last line without a newline (curl's JSON) ends in the marker.
                Ok(line) if line.ends_with(&marker) => {
                    let rest = &line[..line.len() - marker.len()];
                    if !rest.is_empty() {
                        out.push_str(rest);
                        out.push('\n');
                    }
                    return Ok(out);
                }
                Ok(line) => {
                    out.push_str(&line);
                    out.push('\n');
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{what} still runs after {timeout:?}:\n{script}\noutput so far:\n{out}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!("{out}[bash ended: {status}]"));
                }
            }
        }
    }

    /// [`Bash::run`] that must succeed.
    fn ok(&mut self, what: &str, script: &str) -> String {
        self.run(what, script, Duration::from_secs(120))
            .unwrap_or_else(|out| panic!("{what} failed:\n{script}\n{out}"))
    }

    /// The value of variable `name`; None when it is not set.
    fn var(&mut self, name: &str) -> Option<String> {
        let out = self.ok(
            &format!("reading ${name}"),
            &format!(
                "if [[ -n ${{{name}+set}} ]]; then printf '@@set %s\\n' \"$(printf %s \"${name}\" | base64 -w0)\"; \
                 else echo @@unset; fi\n"
            ),
        );
        let line = out.trim();
        if line == "@@unset" {
            return None;
        }
        let b64 = line.strip_prefix("@@set").unwrap().trim();
        Some(String::from_utf8(STANDARD.decode(b64).unwrap()).unwrap())
    }

    /// Sets variable `name` to `value`.
    fn set(&mut self, name: &str, value: &str, export: bool) {
        let b64 = STANDARD.encode(value);
        let export = if export { "export " } else { "" };
        self.ok(
            &format!("setting ${name}"),
            &format!("{export}{name}=\"$(printf %s '{b64}' | base64 -d)\"\n"),
        );
    }
}

impl Drop for Bash {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- The world the doc assumes ---------------------------------------------

/// A real PostgreSQL in the VPC's namespace, on `DB_ADDR:5432`, with the
/// roles and data the doc's settings name; stopped (fast) when dropped, before
/// the namespace goes.
struct VpcPostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl VpcPostgres {
    fn start(vpc: &mut Netns) -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").is_file() && b.join("postgres").is_file())
            .max()
            .expect("PostgreSQL's server binaries (/usr/lib/postgresql/*/bin): scripts/setup installs them");
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let data = dir.path().join("data");
        let sock = dir.path().join("sock");
        std::fs::create_dir_all(&sock).unwrap();
        as_postgres(
            &[
                "chown",
                "-R",
                "postgres:postgres",
                dir.path().to_str().unwrap(),
            ],
            false,
        );
        as_postgres(
            &[
                bin.join("initdb").to_str().unwrap(),
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ],
            true,
        );
        let mut hba = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("pg_hba.conf"))
            .unwrap();
        writeln!(hba, "host all all 0.0.0.0/0 scram-sha-256").unwrap();
        let log = std::fs::File::create(dir.path().join("postgres.log")).unwrap();
        let mut cmd = vpc.command("runuser");
        cmd.args(["-u", "postgres", "--"])
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args([
                "-c",
                &format!("listen_addresses={DB_ADDR}"),
                "-c",
                "port=5432",
            ])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", sock.display()))
            .stdout(Stdio::null())
            .stderr(log);
        vpc.spawn(cmd);
        let me = Self { bin, dir };
        wait::until("the VPC's PostgreSQL", Duration::from_secs(60), || {
            Command::new(me.bin.join("pg_isready"))
                .args(["-q", "-h", sock.to_str().unwrap(), "-p", "5432"])
                .status()
                .ok()?
                .success()
                .then_some(())
        });
        let mut psql = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(me.bin.join("psql"))
            .args([
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                sock.to_str().unwrap(),
                "-p",
                "5432",
            ])
            .args(["-U", "postgres", "-d", "postgres", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        psql.stdin
            .take()
            .unwrap()
            .write_all(
                format!(
                    "CREATE ROLE api LOGIN PASSWORD '{}';\n\
                     CREATE ROLE pricing LOGIN PASSWORD '{}';\n\
                     CREATE DATABASE shop OWNER api;\n\
                     \\c shop\n\
                     SET ROLE api;\n\
                     CREATE TABLE refunds (id serial PRIMARY KEY, order_id int, amount_cents int);\n\
                     INSERT INTO refunds (order_id, amount_cents) VALUES (1001, 1500), (1002, 250), (1003, 9900);\n\
                     GRANT SELECT ON refunds TO pricing;\n",
                    PASSWORDS[0], PASSWORDS[1]
                )
                .as_bytes(),
            )
            .unwrap();
        let out = psql.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "setting up the VPC's PostgreSQL: {out:?}"
        );
        me
    }
}

impl Drop for VpcPostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["stop", "-m", "fast", "-w", "-t", "30", "-D"])
            .arg(self.dir.path().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `args` (as the postgres user when `runuser`), failing the test on failure.
fn as_postgres(args: &[&str], runuser: bool) {
    let mut cmd = if runuser {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]);
        c.args(args);
        c
    } else {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        c
    };
    let out = cmd.output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// Puts `addr` on the namespace's loopback (inside it only).
fn ns_address(ns: &Netns, addr: Ipv4Addr) {
    let out = Command::new("ip")
        .args([
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{addr}/32"),
            "dev",
            "lo",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip -n {} addr add {addr}: {out:?}",
        ns.name
    );
}

/// `servers.py <args>` in `ns`, logging to `log`, once it listens.
fn server(ns: &mut Netns, args: &[&str], log: &Path) {
    let mut cmd = ns.command(psbx_tests::python::python().to_str().unwrap());
    cmd.arg(files().join("servers.py"))
        .args(&args[..3])
        .arg(log)
        .args(&args[3..])
        .stdout(Stdio::null());
    ns.spawn(cmd);
    let ready = PathBuf::from(format!("{}.ready", log.display()));
    wait::until(
        &format!(
            "servers.py {} on {}:{} in {}",
            args[0], args[1], args[2], ns.name
        ),
        Duration::from_secs(30),
        || ready.exists().then_some(()),
    );
}

/// The JSON lines `servers.py` recorded in `log`.
fn recorded(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The office's CA and the ledger's certificate (`ledger.office.lan`), made
/// with openssl in `dir`: (ca.pem, ledger.pem, ledger.key).
fn office_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let out = Command::new("bash")
        .current_dir(dir)
        .args([
            "-c",
            "set -euo pipefail
             openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
               -subj '/CN=Office dev CA' -keyout ca.key -out ca.pem 2>/dev/null
             openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
               -subj '/CN=ledger.office.lan' -keyout ledger.key -out ledger.csr 2>/dev/null
             printf 'subjectAltName=DNS:ledger.office.lan\\nbasicConstraints=CA:FALSE\\n' > ledger.ext
             openssl x509 -req -in ledger.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
               -extfile ledger.ext -out ledger.pem 2>/dev/null
             chmod 644 ledger.key",
        ])
        .output()
        .expect("running openssl");
    assert!(out.status.success(), "openssl: {out:?}");
    (
        dir.join("ca.pem"),
        dir.join("ledger.pem"),
        dir.join("ledger.key"),
    )
}

/// `tests/team_setup/<name>` as a git repository at `to` (a teammate's checkout).
fn checkout(name: &str, to: &Path, extra: &[(&str, &Path)]) {
    psbx_tests::git::copy_dir(&files().join(name), to);
    for (file, from) in extra {
        std::fs::copy(from, to.join(file)).unwrap();
    }
    psbx_tests::git::sh(
        to,
        "git init -q -b main && git add -A && \
         git -c user.name=dev -c user.email=dev@example.com commit -qm 'refunds'",
    );
}

fn require(program: &str, what: &str) {
    let found = Command::new("bash")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "{program} is missing: {what}");
}

// ---- The run ---------------------------------------------------------------

/// A tool call the doc made, with what it answered.
struct Call {
    person: String,
    tool: String,
    args: Value,
    result: Value,
}

/// The calls of `tool` whose arguments mention `needle`.
fn found<'a>(calls: &'a [Call], tool: &str, needle: &str) -> &'a Call {
    calls
        .iter()
        .find(|c| c.tool == tool && c.args.to_string().contains(needle))
        .unwrap_or_else(|| panic!("the doc made no {tool} call with {needle}"))
}

/// A `sandbox_exec` result's output text.
fn output(call: &Call) -> &str {
    call.result["structured"]["output"]["text"]
        .as_str()
        .unwrap_or_default()
}

/// The addresses a box or environment view lists as reachable, `host:port`.
fn reachable(view: &Value) -> Vec<String> {
    let mut all: Vec<String> = view["reachable"]
        .as_array()
        .unwrap_or_else(|| panic!("no reachable in {view}"))
        .iter()
        .map(|e| format!("{}:{}", e["host"].as_str().unwrap(), e["port"]))
        .collect();
    all.sort();
    all
}

#[test]
fn the_team_setup_walkthrough_runs_as_written() {
    let begun = Instant::now();
    let step = |what: &str| eprintln!("[{:>6.1?}] {what}", begun.elapsed());

    // What the doc and its stand-ins need.
    let images = psbx_tests::vm::images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{}/debian has no production image: scripts/test builds it (scripts/image/debian); \
         the doc's boxes run curl, pg_isready, psql and Python",
        images.display()
    );
    let venv_bin = psbx_tests::python::python().parent().unwrap().to_path_buf();
    assert!(
        venv_bin.join("aws").is_file(),
        "{} has no aws: run scripts/setup (scripts/requirements.txt installs awscli)",
        venv_bin.display()
    );
    for (program, what) in [
        ("jq", "the doc's shell commands use jq (apt-get install jq)"),
        ("curl", "the doc's shell commands use curl"),
        ("git", "the teammates' checkouts are git repositories"),
        ("openssl", "the office's CA is made with openssl"),
        (
            "runuser",
            "the VPC's PostgreSQL runs as the postgres user (util-linux)",
        ),
        (
            "base64",
            "the test passes values to bash in base64 (coreutils)",
        ),
    ] {
        require(program, what);
    }
    let connector_bin = psbx_tests::binary("psbx-connector");
    let psbx_bin = psbx_tests::binary("psbx");
    let doc_path = root().join("docs/team-setup.md");
    let doc = std::fs::read_to_string(&doc_path)
        .unwrap_or_else(|e| panic!("{}: {e}", doc_path.display()));
    let blocks = blocks(&doc);
    for p in PASSWORDS {
        psbx_tests::witness::secret(p);
    }

    // The VPC: PostgreSQL under the RDS name, dev's api and pricing, and an
    // admin service nobody lists.
    let mut vpc = Netns::new(&[
        (RDS, &DB_ADDR.to_string()),
        ("api.dev.internal", &DEV_API_ADDR.to_string()),
        ("pricing.dev.internal", &DEV_PRICING_ADDR.to_string()),
        ("admin.dev.internal", &ADMIN_ADDR.to_string()),
    ]);
    for addr in [DB_ADDR, DEV_API_ADDR, DEV_PRICING_ADDR, ADMIN_ADDR] {
        ns_address(&vpc, addr);
    }
    let logs = tempfile::tempdir().unwrap();
    let log = |name: &str| logs.path().join(name);
    server(
        &mut vpc,
        &[
            "http",
            &DEV_API_ADDR.to_string(),
            "8080",
            r#"{"api": "dev"}"#,
        ],
        &log("dev-api.log"),
    );
    server(
        &mut vpc,
        &[
            "http",
            &DEV_PRICING_ADDR.to_string(),
            "8081",
            r#"{"pricing": "dev"}"#,
        ],
        &log("dev-pricing.log"),
    );
    server(
        &mut vpc,
        &[
            "http",
            &ADMIN_ADDR.to_string(),
            "9090",
            r#"{"admin": "dev"}"#,
        ],
        &log("dev-admin.log"),
    );
    let postgres = VpcPostgres::start(&mut vpc);

    // The office: the ledger, HTTPS with the office's CA.
    let mut office = Netns::new(&[("ledger.office.lan", &LEDGER_ADDR.to_string())]);
    ns_address(&office, LEDGER_ADDR);
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = office_certificates(certs.path());
    server(
        &mut office,
        &[
            "https",
            &LEDGER_ADDR.to_string(),
            "8443",
            r#"{"ledger": "office", "status": "ok"}"#,
            cert.to_str().unwrap(),
            key.to_str().unwrap(),
        ],
        &log("ledger.log"),
    );

    // The internet: the dev gateway, with Sentry behind it.
    let mut internet = Netns::new(&[]);
    let gateway = internet.routed([203, 0, 113]);
    server(
        &mut internet,
        &["sentry", &gateway.to_string(), "8000"],
        &log("gateway.log"),
    );
    internet.assert_routed(gateway);
    wait::until("the gateway from the host", Duration::from_secs(10), || {
        TcpStream::connect_timeout(
            &SocketAddrV4::new(gateway, 8000).into(),
            Duration::from_secs(1),
        )
        .ok()
    });
    step("the VPC, the office and the internet are up");

    let moto = Moto::start();
    let s = BoxServer::start_with_env(
        &format!("{}:0", vpc.host_ip),
        "",
        &format!(
            "network = true\nimage = \"debian\"\n\
             unit_vcpus = 1\nunit_memory_mib = 1024\nunit_disk_gb = 8\nboot_timeout = \"280s\"\n\
             [boxes.egress]\nresolvers = [\"127.0.0.1:9\"]\n{TEST_RANGES}"
        ),
        &[("PSBX_CONNECTOR_IMAGE", CONNECTOR_IMAGE)],
    );
    let url = s.url();
    // The office reaches psbx where the VPC does (the token names that URL):
    // through its own link to the host, whose address on the VPC's link it is.
    let out = Command::new("ip")
        .args(["-n", &office.name, "route", "add"])
        .arg(format!("{}/32", vpc.host_ip))
        .arg("via")
        .arg(office.host_ip.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "the office's route to psbx: {out:?}");
    let route = Command::new("ip")
        .args(["-n", &office.name, "route", "get", &vpc.host_ip.to_string()])
        .output()
        .unwrap();
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(
        route.contains(&format!("via {}", office.host_ip)),
        "the office does not send {} to the host: {route}",
        vpc.host_ip
    );
    step("moto and psbx are up");

    // The teammates' machine: their checkouts, and the shell the doc runs in.
    let home = tempfile::tempdir().unwrap();
    checkout(
        "backend",
        &home.path().join("src/backend"),
        &[("office-ca.pem", &ca)],
    );
    checkout("web", &home.path().join("src/web"), &[]);
    let work = tempfile::tempdir().unwrap();
    let standins = files().join("stand-ins.sh");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let env: Vec<(String, String)> = [
        (
            "PATH",
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                venv_bin.display()
            ),
        ),
        ("HOME", path(home.path())),
        ("LANG", "C.UTF-8".to_owned()),
        ("NO_PROXY", "*".to_owned()),
        ("AWS_ENDPOINT_URL", moto.url.clone()),
        ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
        ("AWS_CONFIG_FILE", "/dev/null".to_owned()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("TS_PSBX", path(&psbx_bin)),
        ("TS_PSBX_CONFIG", path(s.config_path())),
        ("TS_PSBX_DATA", path(&s.dir.path().join("data"))),
        ("TS_DATABASE_URL", s.db.url().to_owned()),
        ("TS_CONNECTOR", path(&connector_bin)),
        ("TS_CONNECTOR_IMAGE", CONNECTOR_IMAGE.to_owned()),
        ("TS_VPC_NS", vpc.name.clone()),
        ("TS_OFFICE_NS", office.name.clone()),
        ("TS_LOGS", path(logs.path())),
        ("TS_STANDINS", path(&standins)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut bash = Bash::start(work.path(), &env);
    for (k, _) in env.iter().filter(|(k, _)| k.starts_with("TS_")) {
        bash.ok("exporting", &format!("export {k}\n"));
    }
    bash.ok(
        "the stand-ins",
        &format!("source '{}'\n", standins.display()),
    );

    // Your values, the test's.
    let region = "ap-northeast-1";
    let network = bash.ok(
        "moto's default subnets and security group",
        &format!(
            "aws ec2 describe-subnets --region {region} --query 'Subnets[0:2].SubnetId' --output text\n\
             aws ec2 describe-security-groups --region {region} --query 'SecurityGroups[0].GroupId' --output text\n"
        ),
    );
    let mut network = network.lines();
    let subnets = network
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("\\,");
    let group = network.next().unwrap().trim().to_owned();
    assert!(
        subnets.starts_with("subnet-") && group.starts_with("sg-"),
        "{subnets} {group}"
    );
    let yours: BTreeMap<&str, String> = [
        ("PSBX_URL", url.clone()),
        ("DEV_GATEWAY", format!("http://{gateway}:8000")),
        ("AWS_DEFAULT_REGION", region.to_owned()),
        ("SUBNETS", subnets),
        ("SECURITY_GROUP", group),
    ]
    .into_iter()
    .collect();

    // The doc, block by block.
    let mut calls: Vec<Call> = Vec::new();
    let mut last_output: Option<(usize, String)> = None;
    let mut checked = false;
    for block in &blocks {
        if block.text.contains("sandbox_stop") && !checked {
            checked = true;
            step("before stopping: the test's own checks");
            check_the_paths(&s, &calls, &yours, &log, &vpc, gateway);
        }
        match &block.kind {
            Kind::Yours => {
                let names = assigned(block);
                let doc_names: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
                let test_names: Vec<&str> = yours.keys().copied().collect();
                let mut sorted = doc_names.clone();
                sorted.sort_unstable();
                assert_eq!(
                    sorted, test_names,
                    "line {}: the doc's own values are not the ones this test sets",
                    block.line
                );
                for (name, export) in &names {
                    bash.set(name, &yours[name.as_str()], *export);
                }
                last_output = None;
            }
            Kind::Shell => {
                step(&format!("line {}: sh", block.line));
                let out = bash
                    .run(
                        &format!("line {}", block.line),
                        &block.text,
                        Duration::from_secs(900),
                    )
                    .unwrap_or_else(|out| {
                        panic!(
                            "docs/team-setup.md line {}: the block failed:\n{}\n{out}",
                            block.line, block.text
                        )
                    });
                psbx_tests::witness::assert_unseen(
                    &format!("the output of the block at line {}", block.line),
                    &out,
                );
                eprint!("{out}");
                if block
                    .text
                    .contains("aws cloudformation wait stack-create-complete")
                {
                    // ECS would start the service's task now: its stand-in.
                    let started = bash.ok("the ECS stand-in", "ecs_runs_services\n");
                    eprint!("{started}");
                }
                last_output = Some((block.line, out));
            }
            Kind::Output => {
                let (line, out) = last_output.take().unwrap_or_else(|| {
                    panic!("line {}: a text block after no sh block", block.line)
                });
                let got: Vec<&str> = out.lines().map(str::trim_end).collect();
                let want: Vec<&str> = block.text.lines().map(str::trim_end).collect();
                assert_eq!(
                    got, want,
                    "the block at line {line} does not print what line {} says",
                    block.line
                );
            }
            Kind::Mcp { person, capture } => {
                step(&format!("line {}: {person}'s agent", block.line));
                let key_var = format!("{}_KEY", person.to_uppercase());
                let key = bash
                    .var(&key_var)
                    .unwrap_or_else(|| panic!("line {}: ${key_var} is not set", block.line));
                let mut list = Vec::new();
                for (tool, mut args) in tool_calls(block) {
                    expand(&mut bash, &mut args, block.line);
                    list.push((tool, args));
                }
                let payload = Value::Array(list.iter().map(|(t, a)| json!([t, a])).collect());
                let results = psbx_tests::python::run_json(
                    "calls_client.py",
                    &[&format!("{url}/mcp"), &key, &payload.to_string()],
                );
                let results = results.as_array().unwrap().clone();
                assert_eq!(results.len(), list.len(), "{results:?}");
                for ((tool, args), result) in list.into_iter().zip(results) {
                    assert_eq!(
                        result["is_error"], false,
                        "line {}: {tool} {args} failed: {}",
                        block.line, result["text"]
                    );
                    let structured = &result["structured"];
                    if tool == "sandbox_exec" && args["background"] != true {
                        assert_eq!(
                            structured["exitCode"], 0,
                            "line {}: {tool} {args}: {}",
                            block.line, structured["output"]["text"]
                        );
                    }
                    eprintln!(
                        "  {tool}: {}",
                        result["text"]
                            .as_str()
                            .unwrap_or_default()
                            .lines()
                            .next()
                            .unwrap_or_default()
                    );
                    calls.push(Call {
                        person: person.clone(),
                        tool,
                        args,
                        result,
                    });
                }
                if let Some((var, field)) = capture {
                    let last = &calls.last().expect("a block with calls").result["structured"];
                    let value = last[field.as_str()].as_str().unwrap_or_else(|| {
                        panic!(
                            "line {}: the last result has no {field}: {last}",
                            block.line
                        )
                    });
                    bash.set(var, value, false);
                }
                last_output = None;
            }
        }
    }
    assert!(checked, "the doc never stops a box");

    // Stopped: both boxes, and their domains.
    for var in ["BOX_A", "BOX_B"] {
        let id = bash.var(var).unwrap();
        wait::until(
            &format!("{var} {id} stopped"),
            Duration::from_secs(60),
            || {
                (s.listed_state(&id).as_deref() == Some("stopped")
                    && psbx_tests::vm::domain_state(&id).is_none())
                .then_some(())
            },
        );
    }
    assert!(
        calls
            .iter()
            .all(|c| c.person == "alice" || c.person == "bob"),
        "a call by someone else"
    );
    for entry in std::fs::read_dir(logs.path()).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        psbx_tests::witness::assert_unseen(&format!("the log {}", entry.path().display()), &text);
    }
    drop(bash);
    drop(postgres);
    step("done");
}

/// Replaces every JSON string that is exactly `$NAME` with bash's `$NAME`.
fn expand(bash: &mut Bash, value: &mut Value, line: usize) {
    match value {
        Value::String(s) => {
            if let Some(name) = s.strip_prefix('$')
                && !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                *s = bash
                    .var(name)
                    .unwrap_or_else(|| panic!("line {line}: ${name} is not set"));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| expand(bash, v, line)),
        Value::Object(map) => map.values_mut().for_each(|v| expand(bash, v, line)),
        _ => {}
    }
}

/// The test's own checks while both boxes run: what the doc's calls answered,
/// what reached the servers, and what must not be reachable.
fn check_the_paths(
    s: &BoxServer,
    calls: &[Call],
    yours: &BTreeMap<&str, String>,
    log: &dyn Fn(&str) -> PathBuf,
    vpc: &Netns,
    gateway: Ipv4Addr,
) {
    // Both connections online, each with its connector's two sessions.
    let envs = &found(calls, "sandbox_environments", "{}").result["structured"];
    let dev = envs["environments"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == "dev"))
        .unwrap_or_else(|| panic!("no environment dev: {envs}"));
    for name in ["aws", "office"] {
        let c = dev["connections"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("no connection {name}: {dev}"));
        assert_eq!(
            (&c["online"], &c["sessions"]),
            (&json!(true), &json!(2)),
            "{c}"
        );
        assert!(
            c["connectorVersion"]
                .as_str()
                .unwrap_or_default()
                .contains("psbx-connector"),
            "{c}"
        );
    }
    assert_eq!(
        reachable(dev),
        [
            "api.dev.internal:8080".to_owned(),
            format!("{RDS}:5432"),
            "ledger.office.lan:8443".to_owned(),
            "pricing.dev.internal:8081".to_owned(),
        ],
        "{dev}"
    );

    // Box A: its two services in the box, Sentry external, the rest reachable.
    let a = &found(calls, "sandbox_start", "api.dev.internal").result["structured"];
    let a_id = a["id"].as_str().unwrap().to_owned();
    assert_eq!(a["externalBaseUrl"], yours["DEV_GATEWAY"].as_str(), "{a}");
    assert_eq!(
        reachable(&a["environment"]),
        [format!("{RDS}:5432"), "ledger.office.lan:8443".to_owned()],
        "box A runs api and pricing itself: {a}"
    );
    let mode = |view: &Value, name: &str| {
        view["services"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name))
            .map(|s| s["mode"].clone())
            .unwrap_or_else(|| panic!("no service {name}: {view}"))
    };
    assert_eq!(mode(a, "api.dev.internal"), "box");
    assert_eq!(mode(a, "pricing.dev.internal"), "box");
    assert_eq!(mode(a, "sentry.dev.internal"), "external");
    // The wait's last line (curl's failures before the api listened come first).
    let up = found(
        calls,
        "sandbox_exec",
        "curl -fsS http://api.dev.internal:8080/",
    );
    let last = output(up).trim().lines().last().unwrap_or_default();
    let api: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the api's answer is not JSON ({e}): {}", output(up)));
    assert_eq!(
        api,
        json!({"api": "refunds branch", "pricing": {"pricing": "refunds branch"}})
    );

    // The VPC's Postgres and the office's ledger, through their connectors.
    let ready = output(found(calls, "sandbox_exec", "pg_isready"));
    assert!(
        ready.contains(&format!("{RDS}:5432 - accepting connections")),
        "{ready}"
    );
    let count = output(found(calls, "sandbox_exec", "psbx-ro-psql"));
    assert_eq!(count.trim(), "3", "{count}");
    let ledger = output(found(calls, "sandbox_exec", "ledger.office.lan:8443"));
    assert_eq!(
        serde_json::from_str::<Value>(ledger.trim()).ok(),
        Some(json!({"ledger": "office", "status": "ok"})),
        "{ledger}"
    );
    assert_eq!(
        recorded(&log("ledger.log")).len(),
        1,
        "the ledger's one request"
    );

    // Sentry, in external mode, through the gateway.
    let boom = output(found(calls, "sandbox_exec", "/boom"));
    let boom: Value = serde_json::from_str(boom.trim())
        .unwrap_or_else(|e| panic!("/boom answered no JSON ({e}): {boom}"));
    let event = boom["sentryEvent"]
        .as_str()
        .unwrap_or_else(|| panic!("{boom}"));
    let at_gateway = recorded(&log("gateway.log"));
    assert_eq!(at_gateway.len(), 1, "{at_gateway:?}");
    let got = &at_gateway[0];
    assert_eq!(got["method"], "POST", "{got}");
    assert_eq!(got["path"], "/api/2/store/", "{got}");
    assert_eq!(got["xForwardedHost"], "sentry.dev.internal:9000", "{got}");
    assert_eq!(got["host"], format!("{gateway}:8000"), "{got}");
    assert!(
        got["sentryAuth"]
            .as_str()
            .unwrap_or_default()
            .contains("sentry_key=8d3c0a9e5b7f4e21"),
        "{got}"
    );
    let sent: Value = serde_json::from_str(got["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent["event_id"], event, "{got}");

    // Box B: alice's api (and through it her pricing) by the link; dev's
    // pricing through the connector.
    let b = &found(calls, "sandbox_start", "links").result["structured"];
    let b_id = b["id"].as_str().unwrap().to_owned();
    let link = &b["links"][0];
    assert_eq!(
        (&link["name"], &link["port"], link["box"].as_str()),
        (
            &json!("api.dev.internal"),
            &json!(8080),
            Some(a_id.as_str())
        ),
        "{b}"
    );
    let page = output(found(calls, "sandbox_exec", "http://localhost:3000/"));
    assert!(
        page.contains("api: refunds branch, pricing: refunds branch"),
        "{page}"
    );
    let pricing = output(found(
        calls,
        "sandbox_exec",
        "http://pricing.dev.internal:8081/",
    ));
    assert_eq!(
        serde_json::from_str::<Value>(pricing.trim()).ok(),
        Some(json!({"pricing": "dev"})),
        "{pricing}"
    );
    assert_eq!(
        recorded(&log("dev-api.log")).len(),
        0,
        "dev's api was reached from a box"
    );
    assert_eq!(
        recorded(&log("dev-pricing.log")).len(),
        1,
        "dev's pricing: only bob's own call"
    );

    // What must not be reachable is not.
    let api = Api {
        url: s.url(),
        key: s.key.clone(),
    };
    // An address of the VPC nobody listed: the name does not resolve.
    let (code, out) = api.sh(&a_id, "curl -sS -m 10 http://admin.dev.internal:9090/");
    assert!(
        code != 0 && out.contains("Could not resolve host"),
        "{code} {out}"
    );
    // A listed host on a port that is not listed stays in the box: refused.
    let (code, out) = api.sh(&a_id, &format!("curl -sS -m 10 http://{RDS}:5433/"));
    assert!(code != 0 && out.contains("onnect"), "{code} {out}");
    assert!(!out.contains("timed out"), "not refused at once: {out}");
    // Box B declares no Sentry: it has no way to it.
    let (code, out) = api.sh(
        &b_id,
        "curl -sS -m 10 http://sentry.dev.internal:9000/api/2/store/",
    );
    assert!(
        code != 0 && out.contains("Could not resolve host"),
        "{code} {out}"
    );
    // External mode is per declared name: another name of dev goes nowhere.
    let (code, out) = api.sh(&a_id, "curl -sS -m 10 http://grafana.dev.internal:3000/");
    assert!(
        code != 0 && out.contains("Could not resolve host"),
        "{code} {out}"
    );
    assert_eq!(recorded(&log("dev-admin.log")).len(), 0);
    assert_eq!(recorded(&log("gateway.log")).len(), 1);
    // The VPC's own servers saw nothing from the boxes but what the doc sent.
    assert_eq!(
        psbx_tests::dev::held(vpc, 5432),
        0,
        "a connection to Postgres left open"
    );
}
