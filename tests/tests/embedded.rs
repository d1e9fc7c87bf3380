//! The `psbx` binary itself: its embedded PostgreSQL default, restarts, an
//! external DATABASE_URL, the operator commands, TLS and JSON logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::{ServerProcess, TestDatabase, binary};
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn client() -> Client {
    Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
}

fn list_keys(url: &str, key: &str) -> (StatusCode, Value) {
    let res = client()
        .get(format!("{url}/v1/api-keys"))
        .bearer_auth(key)
        .send()
        .unwrap();
    let status = res.status();
    (status, res.json().unwrap_or(Value::Null))
}

fn psbx(data_dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(binary("psbx"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cluster_running(data_dir: &Path) -> bool {
    data_dir.join("pg/data/postmaster.pid").exists()
}

#[test]
fn embedded_default_creates_once_survives_restarts_and_crashes() {
    let dir = tempfile::tempdir().unwrap();
    // PostgreSQL runs as its own user, which must pass through to the data dir.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = &dir.path().join("state");
    let data_arg = data.to_str().unwrap();

    // First start, with the data directory given relative to the working
    // directory: a cluster, an account, a key printed once with a curl line.
    let server = ServerProcess::start_in(Some(dir.path()), &["--data-dir", "state"], &[]);
    let key = server.first_key().expect("a first start prints a key");
    assert!(server.banner.contains(&format!(
        "curl -H \"Authorization: Bearer {key}\" {}/v1/api-keys",
        server.url
    )));
    assert!(
        server.banner.contains(&format!(
            "claude mcp add --transport http --scope user psbx {}/mcp",
            server.url
        )),
        "{}",
        server.banner
    );
    assert!(data.join("pg/data/PG_VERSION").is_file());
    let master_key = std::fs::metadata(data.join("master.key")).expect("the master key file");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&master_key.permissions()) & 0o777,
        0o600
    );
    assert_eq!(master_key.len(), 32);
    let health: Value = client()
        .get(format!("{}/v1/health", server.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["status"], "ok");
    let (status, listed) = list_keys(&server.url, &key);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["apiKeys"].as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains(&key));

    // One server per data directory.
    let (ok, _, err) = psbx(data, &["serve", "--listen", "127.0.0.1:0"]);
    assert!(!ok);
    assert!(err.contains("another `psbx serve`"), "{err}");

    // Operator commands work beside the running server, on its cluster.
    let (ok, out, err) = psbx(data, &["keys", "create", "--name", "ops"]);
    assert!(ok, "{err}");
    let ops_key = out.trim().to_owned();
    assert!(ops_key.starts_with("psbx_"), "{out}");
    assert_eq!(list_keys(&server.url, &ops_key).0, StatusCode::OK);
    let (ok, out, _) = psbx(data, &["keys", "list", "--json"]);
    assert!(ok);
    let ops: Value = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|k| k["name"] == "ops")
        .unwrap();
    assert!(!out.contains(&ops_key));
    let (ok, _, err) = psbx(data, &["keys", "revoke", ops["id"].as_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(
        list_keys(&server.url, &ops_key).0,
        StatusCode::UNAUTHORIZED,
        "a revoked key still works"
    );
    let (ok, _, err) = psbx(data, &["keys", "revoke", "key_nosuchkey"]);
    assert!(!ok && err.contains("no live key"), "{err}");

    // A clean stop stops the cluster too.
    let (clean, log) = server.stop();
    assert!(clean, "psbx serve did not exit cleanly:\n{log}");
    assert!(!log.contains(&key), "the key reached the log");
    assert!(
        !cluster_running(data),
        "the embedded cluster outlived the server"
    );

    // Operator commands start the stopped cluster and stop it again.
    let (ok, out, err) = psbx(data, &["keys", "list"]);
    assert!(ok, "{err}");
    assert!(out.contains("first key"), "{out}");
    assert!(!cluster_running(data));

    // Second start: nothing re-initialised, the same key works.
    let server = ServerProcess::start(&["--data-dir", data_arg], &[]);
    assert_eq!(
        server.first_key(),
        None,
        "a restart printed a new key:\n{}",
        server.banner
    );
    let (status, listed) = list_keys(&server.url, &key);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["apiKeys"][0]["name"], "first key");

    // A crash leaves the cluster running; the next start adopts it.
    server.kill();
    assert!(cluster_running(data));
    let server = ServerProcess::start(&["--data-dir", data_arg], &[]);
    assert_eq!(server.first_key(), None);
    assert_eq!(list_keys(&server.url, &key).0, StatusCode::OK);
    let (clean, log) = server.stop();
    assert!(clean, "{log}");
    assert!(!cluster_running(data));
}

#[test]
fn database_url_is_used_instead_of_the_embedded_cluster() {
    let db = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        &["--data-dir", dir.path().to_str().unwrap()],
        &[("DATABASE_URL", db.url())],
    );
    let key = server
        .first_key()
        .expect("an empty database gets a first key");
    assert_eq!(list_keys(&server.url, &key).0, StatusCode::OK);
    assert!(
        !dir.path().join("pg").exists(),
        "a cluster was created under the data dir"
    );
    {
        use diesel::RunQueryDsl;
        let mut conn = <diesel::PgConnection as diesel::Connection>::establish(db.url()).unwrap();
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let accounts: N = diesel::sql_query("SELECT count(*) AS n FROM accounts")
            .get_result(&mut conn)
            .unwrap();
        assert_eq!(accounts.n, 1);
        let live: N =
            diesel::sql_query("SELECT count(*) AS n FROM servers WHERE stopped_at IS NULL")
                .get_result(&mut conn)
                .unwrap();
        assert_eq!(live.n, 1, "the replica is not registered");
    }
    let (clean, log) = server.stop();
    assert!(clean, "{log}");
    assert!(!log.contains(&key));
}

/// The content type of a TLS alert record.
const TLS_ALERT: u8 = 21;

/// What the server at `url` sends back to a plain-HTTP GET of `path` on its
/// port, up to its close.
fn plain_http_reply(url: &str, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("https://").trim_end_matches('/');
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    // One write: the server may close as soon as it sees the first bytes
    // are not TLS, and a second write would then meet a reset.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    tcp.read_to_end(&mut reply)
        .expect("the server closes the connection");
    reply
}

#[test]
fn tls_self_signed_and_json_logs() {
    let db = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        &[
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--tls-self-signed",
            "--log-format",
            "json",
        ],
        &[("DATABASE_URL", db.url())],
    );
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let pem = std::fs::read(dir.path().join("tls/self-signed.crt")).unwrap();
    let tls = Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let health = || -> Value {
        tls.get(format!("{}/v1/health", server.url))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    assert_eq!(health()["status"], "ok");
    // A plain-HTTP request on the TLS port gets no HTTP answer: the TLS
    // layer answers with a TLS alert record and closes the connection.
    let reply = plain_http_reply(&server.url, "/v1/health");
    assert!(
        reply.len() >= 5 && reply[0] == TLS_ALERT && reply[1] == 3,
        "not a TLS alert: {:?}",
        String::from_utf8_lossy(&reply)
    );
    // ...and the server still serves HTTPS after it.
    assert_eq!(health()["status"], "ok");
    let (clean, log) = server.stop();
    assert!(clean, "{log}");
    let mut lines = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            entry["level"].is_string() && entry["timestamp"].is_string(),
            "{line}"
        );
        lines += 1;
    }
    assert!(lines > 3, "too few log lines:\n{log}");
    assert!(
        log.contains("/v1/health"),
        "requests are not logged:\n{log}"
    );
}

#[test]
fn config_show_prints_the_effective_configuration_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("psbx.toml");
    std::fs::write(
        &config,
        "box_domain = \"boxes.example.com\"\n[postgres]\nuser = \"postgres\"\n",
    )
    .unwrap();
    let out = Command::new(binary("psbx"))
        .args(["--config", config.to_str().unwrap(), "config", "show"])
        .env(
            "DATABASE_URL",
            "postgres://psbx:t0psecret@db.example:5432/psbx",
        )
        .env("PSBX_LIBVIRT_URI", "qemu+ssh://host/system")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("t0psecret"), "{text}");
    for expected in [
        "box_domain = \"boxes.example.com\"",
        "libvirt_uri = \"qemu+ssh://host/system\"",
        "listen = \"127.0.0.1:8080\"",
        "postgres://psbx:****@db.example:5432/psbx",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // A typo in the file is an error that names it.
    std::fs::write(&config, "box_domian = \"x\"\n").unwrap();
    let out = Command::new(binary("psbx"))
        .args(["--config", config.to_str().unwrap(), "config", "show"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("box_domian"));
}
