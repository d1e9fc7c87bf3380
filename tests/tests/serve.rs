//! `scripts/serve` as a new user runs it: from a clone under a directory
//! other users cannot enter (root's home is 0700), on the embedded defaults.
//! The embedded cluster (run as `postgres`) and the box files (opened by
//! QEMU as another user) must live where those users reach; the first box,
//! asked for the moment the server answers (its pool box still booting),
//! starts from the production image.
//!
//! The clone is a copy of this checkout's `scripts/`; the binaries are the
//! test build's (`PSBX_SERVE_BIN_DIR`), and the images come from
//! `PSBX_TEST_IMAGES_DIR`, where scripts/test built them with the same boxd
//! (so scripts/serve finds the Debian image current). The boxes' names go
//! to a resolver nobody answers on loopback, and their traffic to test ranges
//! only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::ServerProcess;
use psbx_tests::vm::{DomainGuard, images_dir};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Everything the run made, removed however the test ends: the boxes'
/// domains and rules (through the embedded database, while it runs), the
/// server, its cluster, and the shared directory outside the clone.
struct Cleanup {
    server: Option<ServerProcess>,
    shared: PathBuf,
}

impl Cleanup {
    /// The embedded cluster's URL, read from its files, while it runs.
    fn database_url(&self) -> Option<String> {
        let pg = self.shared.join("pg");
        let password = std::fs::read_to_string(pg.join("password")).ok()?;
        let pid = std::fs::read_to_string(pg.join("data/postmaster.pid")).ok()?;
        let port = pid.lines().nth(3)?.trim().to_owned();
        Some(format!(
            "postgres://psbx:{}@127.0.0.1:{port}/psbx",
            password.trim()
        ))
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(url) = self.database_url() {
            drop(DomainGuard::new(&url));
        }
        if let Some(server) = self.server.take() {
            server.kill();
        }
        let data = self.shared.join("pg/data");
        if data.join("postmaster.pid").exists() {
            let pg_ctl = std::fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("bin/pg_ctl"))
                .find(|p| p.is_file());
            if let Some(pg_ctl) = pg_ctl {
                let _ = Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(pg_ctl)
                    .args(["stop", "-m", "immediate", "-D"])
                    .arg(&data)
                    .status();
            }
        }
        if self.shared.starts_with("/var/lib/psbx/") {
            let _ = std::fs::remove_dir_all(&self.shared);
        }
    }
}

/// `psbx config paths` from `cwd`, with `args` after it: name → path.
fn paths(cwd: &Path, args: &[&std::ffi::OsStr]) -> std::collections::HashMap<String, PathBuf> {
    let out = Command::new(psbx_tests::binary("psbx"))
        .current_dir(cwd)
        .args(["config", "paths"])
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), PathBuf::from(v)))
        .collect()
}

#[test]
fn scripts_serve_from_a_closed_home_starts_a_debian_box_at_once() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs scripts/serve as root, as a new user on a fresh machine does"
    );
    let images = images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{} has no production image: scripts/test builds it",
        images.display()
    );
    let top = tempfile::tempdir().unwrap();
    let home = top.path().join("home");
    let clone = home.join("psbx");
    std::fs::create_dir_all(&clone).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(repo.join("scripts"))
        .arg(&clone)
        .status()
        .unwrap();
    assert!(copied.success());

    let where_ = paths(&clone, &[]);
    let shared = where_["shared_dir"].clone();
    assert_eq!(where_["data_dir"], clone.join(".psbx"));
    assert!(
        shared.starts_with("/var/lib/psbx/"),
        "the cluster and box files would stay under the closed {}: {where_:?}",
        home.display()
    );
    let mut cleanup = Cleanup {
        server: None,
        shared: shared.clone(),
    };

    let bin_dir = psbx_tests::binary("psbx").parent().unwrap().to_owned();
    // What scripts/serve does first, here where it may take its minutes when
    // the image is not current (scripts/test made it so).
    let image = Command::new(clone.join("scripts/image/debian"))
        .arg(images.join("debian"))
        .arg(bin_dir.join("boxd"))
        .status()
        .unwrap();
    assert!(image.success(), "scripts/image/debian failed");
    let mut serve = Command::new(clone.join("scripts/serve"));
    serve
        .current_dir(&clone)
        .args(["--listen", "127.0.0.1:0"])
        .env("PSBX_SKIP_SETUP", "1")
        .env("PSBX_SERVE_BIN_DIR", &bin_dir)
        .env("PSBX_BOXES__IMAGES_DIR", &images)
        .env("PSBX_BOXES__ACCEL", "tcg")
        .env("PSBX_BOXES__EGRESS__RESOLVERS", "[\"127.0.0.1:9\"]")
        .env(
            "PSBX_BOXES__EGRESS__ONLY",
            "[\"198.51.100.0/24\", \"203.0.113.0/24\"]",
        )
        .env_remove("PSBX_BOXES__IMAGE");
    let server = cleanup.server.insert(ServerProcess::spawn(serve));
    let key = server
        .first_key()
        .expect("a first start prints the first key");
    let url = server.url.clone();
    assert!(
        shared.join("pg/data/PG_VERSION").is_file(),
        "the cluster is not under {}",
        shared.display()
    );
    let data_mode = std::fs::metadata(clone.join(".psbx"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        data_mode & 0o077,
        0,
        "the data dir (master key) is open to others"
    );

    let (status, health) = psbx_tests::api::call(&url, "", "GET", "/v1/health", None);
    assert_eq!(status, 200, "{health}");
    let (status, started) = psbx_tests::api::call(
        &url,
        &key,
        "POST",
        "/v1/boxes",
        Some(json!({"name": "first"})),
    );
    assert_eq!(status, 201, "{started}");
    assert_eq!(started["image"], "debian", "{started}");
    assert_eq!(started["state"], "running", "{started}");
    let id = started["id"].as_str().unwrap();
    assert!(
        shared.join("boxes").join(id).is_dir(),
        "the box's files are not under {}",
        shared.display()
    );
    let ran = psbx_tests::api::ok(
        &url,
        &key,
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": ". /etc/os-release && echo \"$PRETTY_NAME\"", "timeout": "60s"})),
    );
    assert_eq!(ran["exitCode"], 0, "{ran}");
    assert!(
        ran["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("Debian GNU/Linux 12"),
        "{ran}"
    );
    let (status, stopped) =
        psbx_tests::api::call(&url, &key, "DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{stopped}");

    let (clean, log) = cleanup.server.take().unwrap().stop();
    assert!(clean, "{log}");
}

/// `psbx serve --data-dir "$(mktemp -d)"` as root: a data directory that is
/// itself closed (0700) keeps its box files where QEMU reaches them, as a
/// closed parent does, instead of stopping with "cannot enter". Boxes are on
/// (the check is QEMU's), with no pool and no network, so nothing boots: a
/// few seconds, no VM.
#[test]
fn serve_with_a_closed_data_dir_relocates_its_shared_state() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs psbx serve as root, where box files must be reachable by QEMU's users"
    );
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = top.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    let where_ = paths(top.path(), &["--data-dir".as_ref(), data.as_os_str()]);
    let shared = where_["shared_dir"].clone();
    assert!(
        shared.starts_with("/var/lib/psbx/"),
        "the box files would stay in the closed {}: {where_:?}",
        data.display()
    );
    let mut cleanup = Cleanup {
        server: None,
        shared: shared.clone(),
    };
    let db = psbx_tests::TestDatabase::new();
    let images = images_dir();
    let server = cleanup.server.insert(ServerProcess::start(
        &["--data-dir", data.to_str().unwrap()],
        &[
            ("DATABASE_URL", db.url()),
            ("PSBX_BOXES__IMAGES_DIR", images.to_str().unwrap()),
            ("PSBX_BOXES__IMAGE", "test"),
            ("PSBX_BOXES__ACCEL", "tcg"),
            ("PSBX_BOXES__POOL_SIZE", "0"),
            ("PSBX_BOXES__NETWORK", "false"),
        ],
    ));
    let (status, health) = psbx_tests::api::call(&server.url, "", "GET", "/v1/health", None);
    assert_eq!(status, 200, "{health}");
    assert!(
        shared.join("DATA_DIR").is_file(),
        "{} does not name its data directory",
        shared.display()
    );
    // The server is the last the OOM killer picks (review-2 L9), where the
    // machine lets root lower a score (CAP_SYS_RESOURCE; some containers do
    // not, and then the server says so).
    let adj = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", server.pid())).unwrap();
    let server = cleanup.server.take().unwrap();
    let (clean, log) = server.stop();
    assert!(clean, "{log}");
    if can_lower_oom_score() {
        assert_eq!(adj.trim(), "-900");
    } else {
        assert!(log.contains("could not lower its oom_score_adj"), "{log}");
    }
    assert!(!log.contains("cannot enter"), "{log}");
    // This machine's disk is no encrypted volume (its kernel has no
    // device-mapper): the server says so (issue 30).
    assert!(log.contains("NOT encrypted at rest"), "{log}");
}

/// Issue 30: with `boxes.require_encryption`, a server whose frozen boxes'
/// memory (libvirt's save directory) would be on an unencrypted volume
/// refuses to start and says which directory, what it is on and what to do;
/// the boxes' disks, which psbx encrypts itself, are named too only when
/// `boxes.encrypt_disks` is off. (This machine's disk is not encrypted; on
/// one whose is, the server starts, and the test says so.)
#[test]
fn serve_requiring_encryption_refuses_an_unencrypted_save_dir() {
    let refusal = |encrypt_disks: &str| {
        // Open to QEMU's users, so the server keeps its box files inside it
        // (nothing is left under /var/lib/psbx).
        let data = tempfile::tempdir().unwrap();
        std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = psbx_tests::TestDatabase::new();
        let mut child = Command::new(psbx_tests::binary("psbx"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .env("DATABASE_URL", db.url())
            .env("PSBX_BOXES__REQUIRE_ENCRYPTION", "true")
            .env("PSBX_BOXES__ENCRYPT_DISKS", encrypt_disks)
            .env("PSBX_BOXES__POOL_SIZE", "0")
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let exited = psbx_tests::wait::within(std::time::Duration::from_secs(60), || {
            child.try_wait().unwrap()
        });
        if exited.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            exited.is_some(),
            "psbx serve started with boxes.require_encryption on this machine: is its disk encrypted? {text}"
        );
        assert!(!out.status.success(), "{text}");
        let refusal = text
            .lines()
            .find(|l| l.contains("boxes.require_encryption is set"))
            .unwrap_or_else(|| panic!("no refusal: {text}"))
            .to_owned();
        (refusal, format!("{}/boxes", data.path().display()))
    };
    let (text, boxes_dir) = refusal("true");
    assert!(
        text.contains("frozen boxes' memory")
            && text.contains("/var/lib/libvirt/qemu/save, on /")
            && text.contains("not encrypted")
            && text.contains("dm-crypt")
            && !text.contains(&boxes_dir),
        "{text}"
    );
    let (text, boxes_dir) = refusal("false");
    assert!(
        text.contains("/var/lib/libvirt/qemu/save, on /")
            && text.contains(&format!(
                "boxes' disks (boxes.encrypt_disks is off) in {boxes_dir}"
            )),
        "{text}"
    );
}

/// Whether a process of this machine may lower its OOM score (a child tries).
fn can_lower_oom_score() -> bool {
    Command::new("sh")
        .args(["-c", "echo -900 > /proc/self/oom_score_adj"])
        .status()
        .is_ok_and(|s| s.success())
}
