//! The one-line client setup, run as a person would run it: the line `psbx
//! serve` prints on its first start for each client, taken from that banner and
//! run as written in a scratch home directory, then the real client (Claude Code,
//! Gemini CLI and Codex from npm, `tests/clients/`) lists psbx, signs in with
//! OAuth through psbx's sign-in page, and connects: Claude Code with `claude mcp
//! login`, Codex as its `mcp add` goes on to sign in, Gemini CLI with `/mcp auth
//! psbx` in a session the test types into (tmux). The person's browser is
//! `mcp/sign_in.py`, given the URL the client asked a browser to open. Cursor has
//! no command-line client here: its line is checked by the file it writes. No VM:
//! the tools are listed, not called.
//!
//! The clients run in a network namespace the test made (only a veth to the
//! host): whatever else they try to reach (their makers' telemetry, model APIs)
//! goes nowhere. OAuth clients take plain http only on a loopback host, so a
//! relay in the namespace serves `http://127.0.0.1:<port>` (psbx's public URL)
//! from psbx listening on the host's end of the veth. psbx runs with
//! `oauth.client_metadata_documents = false`, as a server without internet
//! would: Claude Code then registers at `/oauth/register` instead of naming
//! its document on claude.ai, which psbx would have to fetch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::netns::Netns;
use psbx_tests::{ServerProcess, TestDatabase, binary, wait};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const PASSWORD: &str = "correct horse battery";

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/clients/node_modules/.bin`, where `scripts/setup` installs the clients.
fn clients_bin() -> PathBuf {
    let bin = tests_dir().join("clients/node_modules/.bin");
    for client in ["claude", "gemini", "codex"] {
        assert!(
            bin.join(client).exists(),
            "{} is missing: run scripts/setup (it installs the MCP clients of tests/clients from npm)",
            bin.join(client).display()
        );
    }
    bin
}

/// Dropped in field order: the namespace (relay and clients), the server, its
/// database and data directory.
struct Setup {
    ns: Netns,
    server: ServerProcess,
    /// psbx's public URL, as the clients in the namespace reach it.
    url: String,
    /// The same server from the host (the veth's host end).
    direct: String,
    db: TestDatabase,
    dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Self {
        let db = TestDatabase::new();
        let dir = tempfile::tempdir().unwrap();
        let mut ns = Netns::new(&[]);
        let port = std::net::TcpListener::bind((ns.host_ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let listen = format!("{}:{port}", ns.host_ip);
        let server = ServerProcess::start(
            &[
                "--data-dir",
                dir.path().to_str().unwrap(),
                "--listen",
                &listen,
            ],
            &[
                ("DATABASE_URL", db.url()),
                ("PSBX_BOXES__ENABLED", "false"),
                ("PSBX_PUBLIC_URL", &url),
                ("PSBX_OAUTH__CLIENT_METADATA_DOCUMENTS", "false"),
            ],
        );
        assert_eq!(server.url, url);
        let mut relay = ns.command(psbx_tests::python::python().to_str().unwrap());
        relay.arg(tests_dir().join("net/relay.py")).args([
            "127.0.0.1",
            &port.to_string(),
            &ns.host_ip.to_string(),
            &port.to_string(),
        ]);
        relay.stdout(Stdio::null());
        ns.spawn(relay);
        let s = Self {
            direct: format!("http://{listen}"),
            ns,
            server,
            url,
            db,
            dir,
        };
        wait::until(
            "the relay to psbx in the namespace",
            Duration::from_secs(20),
            || {
                s.ns.command("curl")
                    .args(["-fsS", "-o", "/dev/null", &format!("{}/v1/health", s.url)])
                    .status()
                    .unwrap()
                    .success()
                    .then_some(())
            },
        );
        let mut set = Command::new(binary("psbx"))
            .args(["--data-dir", s.dir.path().to_str().unwrap()])
            .args(["account", "set-password"])
            .env("DATABASE_URL", s.db.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        writeln!(set.stdin.take().unwrap(), "{PASSWORD}").unwrap();
        assert!(set.wait().unwrap().success());
        s
    }

    /// The line the first start printed under `label` (the line after it).
    fn line(&self, label: &str) -> String {
        let mut lines = self.server.banner.lines();
        lines
            .find(|l| l.trim() == format!("{label}:"))
            .unwrap_or_else(|| panic!("no {label} line in the banner:\n{}", self.server.banner));
        lines
            .map(str::trim)
            .find(|l| !l.is_empty())
            .expect("a line under the label")
            .to_owned()
    }

    /// A scratch home directory, with a `BROWSER` that writes down the URL it
    /// is asked to open (the sign-in page the person would see).
    fn home(&self) -> tempfile::TempDir {
        let home = tempfile::tempdir().unwrap();
        let browser = home.path().join("browser");
        std::fs::write(
            &browser,
            format!(
                "#!/bin/sh\necho \"$1\" >> {}\n",
                home.path().join("browser-urls").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &browser,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        home
    }

    /// `program args` in the namespace, as a person whose home is `home`: a
    /// clean environment, the clients on the PATH, their telemetry off.
    fn client(&self, home: &Path, program: &str, args: &[&str]) -> Command {
        let mut cmd = self.ns.command("env");
        cmd.arg("-i")
            .arg(format!("HOME={}", home.display()))
            .arg(format!(
                "PATH={}:/usr/local/bin:/usr/bin:/bin",
                clients_bin().display()
            ))
            .arg(format!("BROWSER={}", home.join("browser").display()))
            .args([
                "TERM=xterm",
                "LANG=C.UTF-8",
                // Gemini CLI opens a browser only where it sees a display.
                "DISPLAY=:99",
                "DISABLE_TELEMETRY=1",
                "DISABLE_ERROR_REPORTING=1",
                "DISABLE_AUTOUPDATER=1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
            ])
            .arg(program)
            .args(args)
            .current_dir(home)
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, home: &Path, program: &str, args: &[&str]) -> (bool, String) {
        let out = self
            .client(home, program, args)
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        let text = text(&out);
        (out.status.success(), text)
    }

    /// Runs the printed line as written, with bash, in `home`.
    fn run_line(&self, home: &Path, line: &str) -> String {
        let (ok, text) = self.run(home, "bash", &["-c", line]);
        assert!(ok, "the line failed:\n{line}\n{text}");
        text
    }

    /// Signs the person in on the page the client asked its browser to open,
    /// and lets the browser follow the redirect to the client's callback.
    fn sign_in_from_browser(&self, home: &Path) {
        let urls = home.join("browser-urls");
        let url = wait::until(
            "the client to open psbx's sign-in page",
            Duration::from_secs(60),
            || {
                std::fs::read_to_string(&urls)
                    .ok()
                    .and_then(|t| t.lines().last().map(str::to_owned))
            },
        );
        assert!(
            url.starts_with(&format!("{}/oauth/authorize?", self.url)),
            "{url}"
        );
        let out = self
            .ns
            .command(psbx_tests::python::python().to_str().unwrap())
            .arg(tests_dir().join("mcp/sign_in.py"))
            .args([&url, "default", PASSWORD])
            .output()
            .unwrap();
        assert!(out.status.success(), "signing in: {}", text(&out));
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["callback"], 200, "{answer}");
    }

    /// The skill as the server serves it.
    fn served(&self, file: &str) -> String {
        reqwest::blocking::get(format!("{}/skills/psbx/{file}", self.direct))
            .unwrap()
            .error_for_status()
            .unwrap()
            .text()
            .unwrap()
    }

    /// The skill's two files are in `dir`, as served.
    fn assert_skill_in(&self, dir: &Path) {
        for file in ["SKILL.md", "tools.md"] {
            let path = dir.join(file);
            let installed = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(installed, self.served(file), "{}", path.display());
        }
        let skill = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
        assert!(skill.starts_with("---\nname: psbx\n"), "{skill}");
        assert!(skill.contains(&format!("{}/app", self.url)));
    }

    /// POSTs to `/mcp` that psbx answered 401 so far.
    fn unauthorized_mcp_calls(&self) -> usize {
        self.server
            .log
            .lines()
            .iter()
            .filter(|l| l.contains("method=POST path=/mcp status=401"))
            .count()
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for a spawned client to end; its output.
fn finish(child: Child, what: &str) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("{what} did not end within 90 s"))
        .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{what} failed:\n{all}");
    all
}

#[test]
fn claude_code_one_line_then_sign_in_and_connect() {
    let s = Setup::start();
    let line = s.line("Claude Code");
    let home = s.home();
    s.run_line(home.path(), &line);
    s.assert_skill_in(&home.path().join(".claude/skills/psbx"));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join(".claude.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["mcpServers"]["psbx"],
        serde_json::json!({"type": "http", "url": format!("{}/mcp", s.url)}),
        "{config}"
    );
    // Run twice, the line replaces the entry instead of failing.
    s.run_line(home.path(), &line);

    let (ok, list) = s.run(home.path(), "claude", &["mcp", "list"]);
    assert!(ok, "{list}");
    assert!(
        list.contains(&format!(
            "psbx: {}/mcp (HTTP) - ! Needs authentication",
            s.url
        )),
        "{list}"
    );

    // `claude mcp login` wants a terminal: script(1) gives it one.
    let login = s
        .client(
            home.path(),
            "script",
            &["-qfec", "claude mcp login psbx", "/dev/null"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.sign_in_from_browser(home.path());
    let said = finish(login, "claude mcp login psbx");
    assert!(said.contains("Authenticated with \"psbx\""), "{said}");

    let (ok, list) = s.run(home.path(), "claude", &["mcp", "list"]);
    assert!(ok, "{list}");
    assert!(
        list.contains(&format!("psbx: {}/mcp (HTTP) - ✔ Connected", s.url)),
        "{list}"
    );
}

#[test]
fn codex_one_line_signs_in_and_lists_psbx_with_oauth() {
    let s = Setup::start();
    let line = s.line("Codex");
    let home = s.home();
    // `codex mcp add` finds psbx's OAuth and signs in at once: the line waits
    // for the browser.
    let setup = s
        .client(home.path(), "bash", &["-c", &line])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.sign_in_from_browser(home.path());
    let said = finish(setup, "Codex's line");
    assert!(said.contains("Successfully logged in"), "{said}");
    s.assert_skill_in(&home.path().join(".agents/skills/psbx"));
    let config = std::fs::read_to_string(home.path().join(".codex/config.toml")).unwrap();
    assert!(
        config.contains(&format!("[mcp_servers.psbx]\nurl = \"{}/mcp\"", s.url)),
        "{config}"
    );
    assert!(!config.contains("bearer_token"), "{config}");

    let (ok, list) = s.run(home.path(), "codex", &["mcp", "list"]);
    assert!(ok, "{list}");
    let row = list
        .lines()
        .find(|l| l.starts_with("psbx "))
        .unwrap_or_else(|| panic!("no psbx row:\n{list}"));
    assert!(row.contains(&format!("{}/mcp", s.url)), "{row}");
    assert!(row.trim_end().ends_with("OAuth"), "{row}");
}

/// Gemini CLI in a terminal the test drives (tmux in the namespace, its socket
/// in the scratch home so parallel tests do not share a server).
struct Session {
    socket: PathBuf,
}

impl Session {
    fn start(s: &Setup, home: &Path, program: &[&str]) -> Self {
        let socket = home.join("tmux.sock");
        let client = s.client(home, program[0], &program[1..]);
        // `ip netns exec NS env -i ... program`: the same command, as tmux's.
        let line: Vec<String> = std::iter::once(client.get_program())
            .chain(client.get_args())
            .map(|a| shell_word(&a.to_string_lossy()))
            .collect();
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args([
                "new-session",
                "-d",
                "-s",
                "psbx",
                "-x",
                "250",
                "-y",
                "60",
                "-c",
            ])
            .arg(home)
            .arg(line.join(" "))
            .output()
            .expect("running tmux (scripts/setup installs it)");
        assert!(out.status.success(), "tmux: {}", text(&out));
        Self { socket }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen, and what scrolled off it.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "psbx"])
    }

    fn wait_for(&self, what: &str) -> String {
        wait::within(Duration::from_secs(60), || {
            let screen = self.screen();
            screen.contains(what).then_some(screen)
        })
        .unwrap_or_else(|| panic!("{what:?} never showed:\n{}", self.screen()))
    }

    /// Types `line` at the prompt and, once the prompt shows it, presses Enter
    /// (an Enter in the same burst as the text is taken as part of a paste).
    fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-t", "psbx", "-l", line]);
        self.wait_for(&format!("> {line}"));
        self.tmux(&["send-keys", "-t", "psbx", "Enter"]);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// `s` as one word for the shell tmux runs its command with.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The sign-in URL Gemini CLI prints, which it wraps over lines itself.
fn printed_url(screen: &str, prefix: &str) -> String {
    let mut url = String::new();
    for line in screen.lines().map(str::trim) {
        if url.is_empty() {
            if let Some(at) = line.find(prefix) {
                url.push_str(&line[at..]);
            }
        } else if line.is_empty() || line.contains(' ') {
            break;
        } else {
            url.push_str(line);
        }
    }
    assert!(!url.is_empty(), "no {prefix} URL on the screen:\n{screen}");
    url
}

#[test]
fn gemini_cli_one_line_then_sign_in_in_a_session_and_connect() {
    let s = Setup::start();
    let line = s.line("Gemini CLI");
    let home = s.home();
    s.run_line(home.path(), &line);
    s.assert_skill_in(&home.path().join(".gemini/skills/psbx"));
    let file = home.path().join(".gemini/settings.json");
    let mut settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        settings["mcpServers"]["psbx"],
        serde_json::json!({"type": "http", "url": format!("{}/mcp", s.url)}),
        "{settings}"
    );
    let (ok, skills) = s.run(home.path(), "gemini", &["skills", "list"]);
    assert!(ok, "{skills}");
    assert!(skills.contains("psbx [Enabled]"), "{skills}");

    // The person's own Gemini CLI set-up, nothing of psbx's: the folder they work
    // in trusted (untrusted, it connects to no server at all) and how they sign in
    // to Gemini itself (a key that goes nowhere here).
    std::fs::write(
        home.path().join(".gemini/trustedFolders.json"),
        serde_json::json!({ home.path().to_str().unwrap(): "TRUST_FOLDER" }).to_string(),
    )
    .unwrap();
    settings["security"] = serde_json::json!({"auth": {"selectedType": "gemini-api-key"}});
    std::fs::write(&file, settings.to_string()).unwrap();

    // Before signing in, its list reaches psbx and is asked to.
    let before = s.unauthorized_mcp_calls();
    let (ok, list) = s.run(home.path(), "gemini", &["mcp", "list"]);
    assert!(ok, "{list}");
    assert!(
        list.contains(&format!("psbx: {}/mcp (http) - Disconnected", s.url)),
        "{list}"
    );
    wait::until(
        "psbx to log the 401 it answered",
        Duration::from_secs(10),
        || (s.unauthorized_mcp_calls() > before).then_some(()),
    );

    // Gemini CLI signs in inside a session: /mcp auth psbx.
    {
        let session = Session::start(
            &s,
            home.path(),
            &["env", "GEMINI_API_KEY=not-used", "gemini"],
        );
        session.wait_for("Type your message");
        session.type_line("/mcp auth psbx");
        session.wait_for("Do you want to continue?");
        session.tmux(&["send-keys", "-t", "psbx", "Enter"]);
        let screen = session.wait_for("oauth/authorize?");
        let url = printed_url(&screen, &format!("{}/oauth/authorize?", s.url));
        std::fs::write(home.path().join("browser-urls"), format!("{url}\n")).unwrap();
        s.sign_in_from_browser(home.path());
        session.wait_for("Successfully authenticated");
    }
    let (ok, list) = s.run(home.path(), "gemini", &["mcp", "list"]);
    assert!(ok, "{list}");
    assert!(
        list.contains(&format!("✓ psbx: {}/mcp (http) - Connected", s.url)),
        "{list}"
    );
}

#[test]
fn cursor_one_line_merges_its_file_and_installs_the_skill() {
    let s = Setup::start();
    let line = s.line("Cursor");
    let home = s.home();
    let file = home.path().join(".cursor/mcp.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        r#"{"mcpServers": {"docs": {"command": "docs-mcp"}}, "other": 1}"#,
    )
    .unwrap();
    s.run_line(home.path(), &line);
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        config["mcpServers"]["psbx"],
        serde_json::json!({"url": format!("{}/mcp", s.url)})
    );
    assert_eq!(config["mcpServers"]["docs"]["command"], "docs-mcp");
    assert_eq!(config["other"], 1);
    s.assert_skill_in(&home.path().join(".cursor/skills/psbx"));
}

#[test]
fn mcp_install_write_configures_each_client_and_installs_the_skill() {
    let s = Setup::start();
    let home = s.home();
    // A server that does not answer: refused before the client's file changes.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let out = Command::new(binary("psbx"))
        .args([
            "mcp", "install", "--client", "cursor", "--write", "--url", &nowhere,
        ])
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("is the server up?"), "{}", text(&out));
    assert!(!home.path().join(".cursor").exists());
    for (client, skill_dir) in [
        ("claude", ".claude/skills/psbx"),
        ("codex", ".agents/skills/psbx"),
        ("cursor", ".cursor/skills/psbx"),
        ("gemini", ".gemini/skills/psbx"),
    ] {
        let out = Command::new(binary("psbx"))
            .args([
                "mcp", "install", "--client", client, "--write", "--url", &s.direct,
            ])
            .env("HOME", home.path())
            .env_remove("CODEX_HOME")
            .env_remove("PSBX_URL")
            .current_dir(home.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{client}: {}", text(&out));
        s.assert_skill_in(&home.path().join(skill_dir));
    }
    // Claude Code reads what --write wrote (no key anywhere) and reaches psbx.
    let config = std::fs::read_to_string(home.path().join(".claude.json")).unwrap();
    assert!(!config.contains("psbx_"), "{config}");
    let config: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        config["mcpServers"]["psbx"]["url"],
        format!("{}/mcp", s.direct)
    );
}
