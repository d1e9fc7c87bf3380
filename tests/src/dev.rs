//! The user's dev network for the tests of environments: [`Api`], REST calls
//! under `/v1` with a key (commands in a box, an environment's connection
//! and waiting for it to come online), [`connector`], the real
//! `psbx-connector` started in a namespace standing for that network, and
//! [`held`], the connections a server in the namespace holds.

use crate::netns::Netns;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A server's REST API, as one account.
pub struct Api {
    pub url: String,
    pub key: String,
}

impl Api {
    /// `method /v1<path>` (`body` null: none): the status and the answer.
    pub fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        let body = Some(body).filter(|b| !b.is_null());
        crate::api::call(&self.url, &self.key, method, &format!("/v1{path}"), body)
    }

    /// [`Api::call`] that must succeed.
    pub fn ok(&self, method: &str, path: &str, body: Value) -> Value {
        let body = Some(body).filter(|b| !b.is_null());
        crate::api::ok(&self.url, &self.key, method, &format!("/v1{path}"), body)
    }

    /// Runs `cmd` in the box: (exit code, stdout + stderr).
    pub fn sh(&self, id: &str, cmd: &str) -> (i64, String) {
        let answer = self.ok(
            "POST",
            &format!("/boxes/{id}/exec"),
            json!({ "cmd": cmd, "timeout": "60s" }),
        );
        let out = format!(
            "{}{}",
            answer["stdout"]["text"].as_str().unwrap_or_default(),
            answer["stderr"]["text"].as_str().unwrap_or_default()
        );
        (answer["exitCode"].as_i64().unwrap_or(-1), out)
    }

    /// Connection `name` of environment `dev`, as `GET` shows it.
    pub fn connection(&self, name: &str) -> Value {
        let env = self.ok("GET", "/environments/dev", json!(null));
        env["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no connection {name}: {env}"))
    }

    /// Waits (up to a minute) for connection `name` to be `online`, with
    /// `sessions` sessions when online.
    pub fn wait_online(&self, name: &str, online: bool, sessions: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c = self.connection(name);
            if c["online"] == online && (!online || c["sessions"].as_u64() == Some(sessions)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "connection {name} never became online={online} with {sessions} sessions: {c}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// The real connector in `ns` with `token`, reaching the server at `url`
/// (on the namespace's link, plain http), two sessions, `env` set last (its
/// `PSBX_ALLOW` lists the targets on the namespace's loopback); its output
/// appended to `log`. The index of its process in `ns`.
pub fn connector(
    ns: &mut Netns,
    url: &str,
    token: &str,
    env: &[(&str, &str)],
    log: &std::path::Path,
) -> usize {
    let file = || {
        Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
    };
    let mut cmd = ns.command(crate::binary("psbx-connector").to_str().unwrap());
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PSBX_CONNECTOR_TOKEN", token)
        // The token names the server's public URL (loopback here), which
        // the namespace cannot reach: PSBX_URL overrides it, as where the
        // server has another name inside the user's network.
        .env("PSBX_URL", url)
        .env("PSBX_SESSIONS", "2")
        // The server is plain http on the namespace's link (not loopback).
        .env("PSBX_ALLOW_INSECURE", "1")
        .env("RUST_LOG", "info")
        .stdout(file())
        .stderr(file());
    for (k, v) in env {
        cmd.env(k, v);
    }
    ns.spawn(cmd)
}

/// Connections the namespace's servers hold on `port` (established).
pub fn held(ns: &Netns, port: u16) -> usize {
    let out = ns
        .command("ss")
        .args([
            "-Htn",
            "state",
            "established",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "ss: {out:?}");
    String::from_utf8_lossy(&out.stdout).lines().count()
}
