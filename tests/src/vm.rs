//! Running real boxes in tests: a `psbx serve` configured for small TCG boxes
//! from the test image, on a database of its own, and a guard that removes
//! every libvirt domain of that database's boxes (and its disk's key secret)
//! however the test ends.

use crate::{ServerProcess, TestDatabase};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The variable `scripts/test` sets to where it built the test image.
pub const IMAGES_VAR: &str = "PSBX_TEST_IMAGES_DIR";

/// The directory holding `test/manifest.json`.
pub fn images_dir() -> PathBuf {
    let dir = std::env::var_os(IMAGES_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "{IMAGES_VAR} is not set: these tests boot the test image that scripts/test builds \
             (scripts/image/test); run the suite with scripts/test"
            )
        });
    assert!(
        dir.join("test/manifest.json").is_file(),
        "{} has no test image: run scripts/image/test {}/test <boxd>",
        dir.display(),
        dir.display()
    );
    dir
}

/// `virsh -c qemu:///system <args>`: (success, stdout + stderr).
pub fn virsh(args: &[&str]) -> (bool, String) {
    let out = Command::new("virsh")
        .args(["-c", "qemu:///system"])
        .args(args)
        .output()
        .expect("virsh is installed (scripts/setup installs libvirt-clients)");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text.trim().to_owned())
}

/// The pid of the QEMU process running box `box_id`.
pub fn qemu_pid(box_id: &str) -> u32 {
    let pidfile = format!("/run/libvirt/qemu/psbx-{box_id}.pid");
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("no QEMU pid file {pidfile}: {e}"));
    pid.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{pidfile} holds {pid:?}: {e}"))
}

/// The uid the QEMU process of box `box_id` runs as (its effective uid).
pub fn qemu_uid(box_id: &str) -> u32 {
    let pid = qemu_pid(box_id);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read the status of QEMU {pid}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no Uid in the status of QEMU {pid}: {status}"))
}

/// A file of the cgroup (v1 `controller`) libvirt made for box `box_id`'s
/// domain: the parent of the one its QEMU process is in (libvirt moves the
/// process into the domain's `emulator` group).
pub fn domain_cgroup_file(box_id: &str, controller: &str, file: &str) -> String {
    let pid = qemu_pid(box_id);
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_else(|e| panic!("cannot read the cgroups of QEMU {pid}: {e}"));
    let path = groups
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            controllers
                .split(',')
                .any(|c| c == controller)
                .then_some(path)
        })
        .unwrap_or_else(|| panic!("QEMU {pid} is in no {controller} cgroup: {groups}"));
    let domain = path.strip_suffix("/emulator").unwrap_or(path);
    let at = format!("/sys/fs/cgroup/{controller}{domain}/{file}");
    std::fs::read_to_string(&at)
        .unwrap_or_else(|e| panic!("cannot read {at}: {e}"))
        .trim()
        .to_owned()
}

/// The command line of the QEMU process running box `box_id`, by argument.
pub fn qemu_args(box_id: &str) -> Vec<String> {
    let pid = qemu_pid(box_id);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_else(|e| panic!("cannot read the command line of QEMU {pid}: {e}"));
    cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The libvirt state of a box's domain (`running`, `shut off`, `paused`), or
/// `None` when libvirt has no such domain.
pub fn domain_state(box_id: &str) -> Option<String> {
    let (ok, text) = virsh(&["domstate", &format!("psbx-{box_id}")]);
    ok.then_some(text)
}

/// The uuid of the libvirt secret holding the key of box `id`'s encrypted
/// disk, as its domain's disk names it; `None` for a clear disk or no domain.
pub fn disk_secret(box_id: &str) -> Option<String> {
    let (ok, xml) = virsh(&["dumpxml", &format!("psbx-{box_id}")]);
    if !ok {
        return None;
    }
    let at = xml.find("<secret type='passphrase' uuid='")? + 32;
    let uuid = xml[at..].split('\'').next()?;
    Some(uuid.to_owned())
}

/// The egress of test boxes unless a test sets its own: the allow-list mode
/// limited to the test ranges, and a resolver on loopback that answers
/// nothing, so that a box with a card sends nothing to a real address.
const TEST_EGRESS: &str = "[boxes.egress]\nresolvers = [\"127.0.0.1:9\"]\n\
                           only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]\n";

/// A server for box tests; everything it made is removed on drop.
pub struct BoxServer {
    pub server: Option<ServerProcess>,
    pub key: String,
    pub dir: tempfile::TempDir,
    config: PathBuf,
    /// The configuration's `[boxes]` part (and its tables), for other nodes.
    boxes_section: String,
    listen: String,
    envs: Vec<(String, String)>,
    // Dropped last: the guard needs the database to find the boxes.
    _guard: DomainGuard,
    pub db: TestDatabase,
}

impl BoxServer {
    /// Starts `psbx serve` with `[boxes]` settings for 1 vCPU / 256 MiB / 2 GB
    /// TCG boxes from the test image without network, no pool and no idle freeze
    /// within an hour, plus `extra` TOML lines
    /// in `[boxes]` (which may set any of those keys instead, and may end with
    /// tables of their own, such as `[boxes.egress]`).
    pub fn start(extra: &str) -> Self {
        Self::start_with("", extra)
    }

    /// Like [`BoxServer::start`], with `top` TOML lines before `[boxes]`
    /// (server settings such as `http_workers = 1`).
    pub fn start_with(top: &str, extra: &str) -> Self {
        Self::start_on("127.0.0.1:0", top, extra)
    }

    /// Like [`BoxServer::start_with`], listening on `listen` (an address of a
    /// test's own network namespace link, for a connector in it).
    pub fn start_on(listen: &str, top: &str, extra: &str) -> Self {
        Self::start_with_env(listen, top, extra, &[])
    }

    /// Like [`BoxServer::start_on`], with further environment variables for
    /// the server process (on every restart too).
    pub fn start_with_env(listen: &str, top: &str, extra: &str, envs: &[(&str, &str)]) -> Self {
        let images = images_dir();
        let db = TestDatabase::new();
        let dir = node_dir();
        let config = dir.path().join("psbx.toml");
        // The harness's defaults, but for the keys `extra` sets itself.
        let images_line = format!("images_dir = \"{}\"", images.display());
        let defaults = [
            "accel = \"tcg\"",
            images_line.as_str(),
            "image = \"test\"",
            "unit_vcpus = 1",
            "unit_memory_mib = 256",
            "unit_disk_gb = 2",
            // Test boxes write little to their thin overlays, and these
            // machines are short of disk: the ledger may promise more.
            "disk_margin_gb = 1",
            "disk_overcommit = 8.0",
            "network = false",
            "boot_timeout = \"120s\"",
            // No pool (a pool box boots beside every test that does not want it:
            // the two pool tests set `pool_size = 1`), and no freeze within a
            // test unless it sets a short `idle_freeze` to see one.
            "pool_size = 0",
            "idle_freeze = \"1h\"",
        ];
        let sets = |line: &str| {
            let key = line.split(' ').next().unwrap_or_default();
            extra.lines().any(|l| {
                l.trim_start().starts_with(&format!("{key} "))
                    || l.trim_start().starts_with(&format!("{key}="))
            })
        };
        let mut boxes = String::new();
        for line in defaults.iter().filter(|l| !sets(l)) {
            boxes.push_str(line);
            boxes.push('\n');
        }
        let boxes_section = format!(
            "[boxes]\n{boxes}{extra}\n{}",
            if extra.contains("[boxes.egress]") {
                ""
            } else {
                TEST_EGRESS
            },
        );
        std::fs::write(&config, format!("{top}\n{boxes_section}")).expect("config");
        let guard = DomainGuard {
            url: db.url().to_owned(),
        };
        let mut me = Self {
            server: None,
            key: String::new(),
            dir,
            config,
            boxes_section,
            listen: listen.to_owned(),
            envs: envs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            _guard: guard,
            db,
        };
        me.restart();
        me.key = me
            .server()
            .first_key()
            .expect("a first start prints the first key");
        me
    }

    /// The server's configuration file (a test may change it before a restart).
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Starts the server (again) on the same data dir and database.
    pub fn restart(&mut self) {
        let envs = std::iter::once(("DATABASE_URL", self.db.url()))
            .chain(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect::<Vec<_>>();
        self.server = Some(serve(self.dir.path(), &self.listen, &self.config, &envs));
    }

    /// Starts another node of this server's installation (issue 33): `psbx
    /// serve` on the same database, with this server's master key file and
    /// `[boxes]` settings, `top` before them (its own `[cluster]`, say), a
    /// data dir of its own, listening on `listen`, with `envs` set
    /// (`PSBX_BOXES__ENABLED=false` makes it API-only). Its boxes are in the
    /// same database, so this server's guard removes their domains too.
    pub fn node(&self, listen: &str, top: &str, envs: &[(&str, &str)]) -> Node {
        let dir = node_dir();
        let config = dir.path().join("psbx.toml");
        let key = self.dir.path().join("data/master.key");
        std::fs::write(
            &config,
            format!(
                "master_key_file = \"{}\"\n{top}\n{}",
                key.display(),
                self.boxes_section
            ),
        )
        .expect("config");
        let mut node = Node {
            server: None,
            dir,
            config,
            listen: listen.to_owned(),
            envs: std::iter::once(("DATABASE_URL".to_owned(), self.db.url().to_owned()))
                .chain(envs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
                .collect(),
        };
        node.restart();
        node
    }

    /// Runs a `psbx` operator command on this server's configuration and
    /// database: (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        self.cli_with_input(args, "")
    }

    /// [`BoxServer::cli`] with `input` on the command's standard input (a
    /// password for `psbx account set-password`).
    pub fn cli_with_input(&self, args: &[&str], input: &str) -> (bool, String, String) {
        use std::io::Write;
        let data = self.dir.path().join("data");
        let mut child = Command::new(crate::binary("psbx"))
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .env("DATABASE_URL", self.db.url())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running psbx");
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        let out = child.wait_with_output().expect("running psbx");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A second account (`id`, `acct_...`) and an API key of it, made with
    /// `psbx keys create` as an operator would.
    pub fn key_of_new_account(&self, id: &str) -> String {
        let account = self.db.add_account(id);
        let (ok, stdout, stderr) =
            self.cli(&["keys", "create", "--name", "other", "--account", &account]);
        assert!(ok, "psbx keys create: {stderr}");
        stdout
            .split_whitespace()
            .find(|w| w.starts_with("psbx_") && w.len() == 45)
            .unwrap_or_else(|| panic!("no key in {stdout}"))
            .to_owned()
    }

    pub fn server(&mut self) -> &mut ServerProcess {
        self.server.as_mut().expect("the server runs")
    }

    /// The running server's log lines at WARN or ERROR, for a failure message.
    pub fn warnings(&self) -> String {
        let log = &self.server.as_ref().expect("the server runs").log;
        log.lines()
            .into_iter()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    pub fn url(&self) -> String {
        self.server.as_ref().expect("the server runs").url.clone()
    }

    pub fn box_dir(&self, box_id: &str) -> PathBuf {
        self.dir.path().join("data/boxes").join(box_id)
    }

    /// A request to the API with this server's key: (status, JSON body).
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        crate::api::call(&self.url(), &self.key, method, path, body)
    }

    /// [`BoxServer::call`], failing the test unless the answer is a 2xx.
    pub fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        crate::api::ok(&self.url(), &self.key, method, path, body)
    }

    /// The state stored for a box, read from the database directly.
    pub fn db_box_state(&self, box_id: &str) -> Option<String> {
        self.db_query(&format!(
            "SELECT state AS v FROM boxes WHERE id = '{}'",
            box_id.replace('\'', "")
        ))
        .pop()
    }

    /// This server's installation id.
    pub fn installation(&self) -> String {
        self.db_query("SELECT value AS v FROM meta WHERE key = 'installation_id'")
            .pop()
            .expect("the server recorded its installation")
    }

    /// Every box id in the database, pooled ones included.
    pub fn db_box_ids(&self) -> Vec<String> {
        self.db_query("SELECT id AS v FROM boxes")
    }

    /// The text column `v` of each row `sql` selects in this server's database.
    pub fn db_query(&self, sql: &str) -> Vec<String> {
        use diesel::{Connection, RunQueryDsl};
        #[derive(diesel::QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::Text)]
            v: String,
        }
        let mut conn = diesel::PgConnection::establish(self.db.url()).expect("test database");
        let rows: Vec<V> = diesel::sql_query(sql).load(&mut conn).expect("query");
        rows.into_iter().map(|r| r.v).collect()
    }

    /// A box's state as listed (listing never thaws or touches a box).
    pub fn listed_state(&self, box_id: &str) -> Option<String> {
        let (_, list) = self.call("GET", "/v1/boxes?limit=200", None);
        list["boxes"]
            .as_array()?
            .iter()
            .find(|b| b["id"] == box_id)
            .and_then(|b| b["state"].as_str().map(str::to_owned))
    }
}

impl Drop for BoxServer {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.kill();
        }
        // The consoles of the boxes still there (a stopped box's went with it).
        let boxes = self.dir.path().join("data/boxes");
        for entry in std::fs::read_dir(&boxes).into_iter().flatten().flatten() {
            let console = entry.path().join("console.log");
            if let Ok(text) = std::fs::read(&console) {
                crate::witness::assert_unseen(
                    &format!("the console of {}", console.display()),
                    &String::from_utf8_lossy(&text),
                );
            }
        }
    }
}

/// A node's directory: its configuration, and its data under `data/`
/// (open to libvirt's QEMU user, which must reach the box files there).
fn node_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    dir
}

/// `psbx serve` of the node in `dir` (data in `dir/data`) with `config`,
/// listening on `listen`, with `envs` set.
fn serve(dir: &Path, listen: &str, config: &Path, envs: &[(&str, &str)]) -> ServerProcess {
    let data = dir.join("data");
    ServerProcess::start(
        &[
            "--listen",
            listen,
            "--config",
            config.to_str().expect("utf-8 path"),
            "--data-dir",
            data.to_str().expect("utf-8 path"),
        ],
        envs,
    )
}

/// Another node of a [`BoxServer`]'s installation ([`BoxServer::node`]);
/// stopped (SIGTERM, a clean stop) when dropped.
pub struct Node {
    pub server: Option<ServerProcess>,
    pub dir: tempfile::TempDir,
    config: PathBuf,
    listen: String,
    envs: Vec<(String, String)>,
}

impl Node {
    /// Starts the node (again) on the same data dir and configuration.
    pub fn restart(&mut self) {
        let envs: Vec<(&str, &str)> = self
            .envs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.server = Some(serve(self.dir.path(), &self.listen, &self.config, &envs));
    }

    pub fn server(&mut self) -> &mut ServerProcess {
        self.server.as_mut().expect("the node runs")
    }
}

/// Removes the libvirt domain of every box in a test database, and the box
/// network rules of its installation (a killed server leaves them).
pub struct DomainGuard {
    url: String,
}

impl DomainGuard {
    /// A guard for the boxes of the database at `url`.
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
        }
    }
}

impl Drop for DomainGuard {
    fn drop(&mut self) {
        use diesel::{Connection, RunQueryDsl};
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = diesel::sql_types::Text)]
            id: String,
        }
        let Ok(mut conn) = diesel::PgConnection::establish(&self.url) else {
            return;
        };
        let ids: Vec<Id> = diesel::sql_query("SELECT id FROM boxes")
            .load(&mut conn)
            .unwrap_or_default();
        for Id { id } in ids {
            let name = format!("psbx-{id}");
            if let Some(secret) = disk_secret(&id) {
                let _ = virsh(&["secret-undefine", &secret]);
            }
            let _ = virsh(&["destroy", &name]);
            let _ = virsh(&["undefine", &name, "--managed-save"]);
        }
        // The installation's table, and those of further hosts (several
        // nodes: each host's owner mark names its own).
        let mut owners: Vec<Id> =
            diesel::sql_query("SELECT value AS id FROM meta WHERE key = 'installation_id'")
                .load(&mut conn)
                .unwrap_or_default();
        owners.extend(
            diesel::sql_query("SELECT owner AS id FROM hosts")
                .load::<Id>(&mut conn)
                .unwrap_or_default(),
        );
        owners.sort_by(|a, b| a.id.cmp(&b.id));
        owners.dedup_by(|a, b| a.id == b.id);
        for Id { id } in owners {
            delete_network_table(&network_table(&id));
        }
    }
}

/// Deletes an nftables table of a box network; false when nft could not
/// (absent, or held by another program).
pub fn delete_network_table(table: &str) -> bool {
    Command::new("nft")
        .args(["delete", "table", "inet", table])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The nftables table of an installation's box network.
pub fn network_table(installation: &str) -> String {
    format!(
        "psbx_{}",
        installation.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    )
}

/// Restarts libvirtd (as `scripts/setup` starts it: no systemd here) and waits
/// until it answers again. Running domains keep running meanwhile.
pub fn restart_libvirtd() {
    let _ = Command::new("pkill").args(["-x", "libvirtd"]).status();
    crate::wait::until("libvirtd to exit", Duration::from_secs(30), || {
        let running = Command::new("pgrep")
            .args(["-x", "libvirtd"])
            .stdout(std::process::Stdio::null())
            .status();
        (!running.is_ok_and(|s| s.success())).then_some(())
    });
    let started = Command::new("libvirtd")
        .arg("-d")
        .status()
        .expect("starting libvirtd");
    assert!(started.success(), "libvirtd -d failed");
    crate::wait::until("libvirtd to answer", Duration::from_secs(30), || {
        virsh(&["version"]).0.then_some(())
    });
}

/// The names of the libvirt domains whose psbx metadata names `installation`
/// as their owner, whatever their state.
pub fn domains_of(installation: &str) -> Vec<String> {
    let (_, names) = virsh(&["list", "--all", "--name"]);
    names
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with("psbx-"))
        .filter(|n| {
            let (ok, meta) = virsh(&["metadata", n, "urn:psbx:box"]);
            ok && meta.contains(&format!("owner=\"{installation}\""))
                || meta.contains(&format!("owner='{installation}'"))
        })
        .map(str::to_owned)
        .collect()
}

/// Whether libvirt keeps a managed save (frozen memory) for the box.
pub fn has_saved_memory(box_id: &str) -> bool {
    Path::new(&format!("/var/lib/libvirt/qemu/save/psbx-{box_id}.save")).exists()
}

/// Runs `cmd` in box `id` (five minutes at most: a docker build under TCG on
/// a busy host takes minutes): stdout and stderr together, `[timed out]`
/// after them when the limit ended it.
pub fn exec_text(s: &BoxServer, id: &str, cmd: &str) -> String {
    let answer = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(serde_json::json!({ "cmd": cmd, "timeout": "300s" })),
    );
    format!(
        "{}{}{}",
        answer["stdout"]["text"].as_str().unwrap_or_default(),
        answer["stderr"]["text"].as_str().unwrap_or_default(),
        if answer["timedOut"] == true {
            "[timed out]"
        } else {
            ""
        }
    )
}

/// A shell command that builds the docker image `bb` in a production box
/// from the box's own busybox (no registry needed), printing `built`.
pub const BUSYBOX_IMAGE: &str = "mkdir -p /work/bb && cp /bin/busybox /work/bb/ && \
     printf 'FROM scratch\\nCOPY busybox /bin/busybox\\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\\n' \
       >/work/bb/Dockerfile && docker build -q -t bb /work/bb >/dev/null && echo built";
