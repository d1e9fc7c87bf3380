//! Working in a real box: exec (masking, time limits, background processes,
//! bounded output), sync from a git repository, secrets as environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::{Value, json};
use std::process::Command;

fn exec(s: &BoxServer, id: &str, body: Value) -> Value {
    let (status, result) = s.call("POST", &format!("/v1/boxes/{id}/exec"), Some(body));
    assert_eq!(status, 200, "{result}");
    result
}

fn stdout(result: &Value) -> &str {
    result["stdout"]["text"].as_str().unwrap()
}

/// Peak resident memory of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[test]
fn exec_masks_secrets_kills_on_timeout_keeps_background_work_and_bounds_output() {
    let mut s = BoxServer::start("");
    for (name, value) in [("MYSECRET", "abcdefghijkl"), ("SHORT7", "1234567")] {
        let (status, put) = s.call(
            "PUT",
            &format!("/v1/secrets/{name}"),
            Some(json!({ "value": value })),
        );
        assert_eq!(status, 201, "{put}");
    }
    // A secret the request names that the account does not hold: not found.
    let (status, bad) = s.call("POST", "/v1/boxes", Some(json!({"secrets": ["NOPE"]})));
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (404, Some("secret_not_found")),
        "{bad}"
    );
    assert!(bad["error"]["message"].as_str().unwrap().contains("NOPE"));
    let (status, started) = s.call(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "work", "secrets": ["MYSECRET", "SHORT7"]})),
    );
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();

    // `network = false` (the harness's) and no environment: no network card.
    let r = exec(&s, &id, json!({"cmd": "ls /sys/class/net"}));
    assert_eq!(stdout(&r), "lo\n", "{r}");

    // Secrets are environment variables; values of 8+ characters come back masked.
    let r = exec(&s, &id, json!({"cmd": "echo $MYSECRET; echo $SHORT7; pwd"}));
    assert_eq!(stdout(&r), "****\n1234567\n/work\n", "{r}");
    assert_eq!(r["exitCode"], 0);
    // ...also when printed one character at a time with pauses between.
    let r = exec(
        &s,
        &id,
        json!({"cmd": "echo \"$MYSECRET\" | fold -w1 | while read c; do printf %s \"$c\"; sleep 0.1; done; echo"}),
    );
    assert_eq!(stdout(&r), "****\n", "{r}");
    // ...and in the streamed form.
    let streamed = reqwest::blocking::Client::new()
        .post(format!("{}/v1/boxes/{id}/exec?stream=true", s.url()))
        .bearer_auth(&s.key)
        .json(&json!({"cmd": "echo one $MYSECRET; echo two >&2; exit 3"}))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let events: Vec<Value> = streamed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let out: String = events.iter().filter_map(|e| e["stdout"].as_str()).collect();
    assert_eq!(out, "one ****\n", "{streamed}");
    assert!(events.iter().any(|e| e["stderr"] == "two\n"), "{streamed}");
    assert_eq!(events.last().unwrap()["exit"]["code"], 3, "{streamed}");
    // Files in the box are not touched.
    let r = exec(
        &s,
        &id,
        json!({"cmd": "echo $MYSECRET > /work/f; wc -c < /work/f"}),
    );
    assert_eq!(stdout(&r).trim(), "13");

    // A time limit kills the command and its children.
    let r = exec(
        &s,
        &id,
        json!({"cmd": "(sleep 40; echo late) & sleep 60", "timeout": "2s"}),
    );
    assert_eq!(r["timedOut"], true, "{r}");
    let r = exec(&s, &id, json!({"cmd": "ps | grep -c '[s]leep 40' || true"}));
    assert_eq!(
        stdout(&r).trim(),
        "0",
        "a child outlived the time limit: {r}"
    );

    // A background command survives the call; its logs are readable.
    let r = exec(
        &s,
        &id,
        json!({"cmd": "echo started $MYSECRET; sleep 1000", "background": true}),
    );
    let pid = r["pid"].as_u64().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (_, list) = s.call("GET", &format!("/v1/boxes/{id}/processes"), None);
    assert!(
        list["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid && p["running"] == true),
        "{list}"
    );
    let (status, logs) = s.call("GET", &format!("/v1/boxes/{id}/processes/{pid}/logs"), None);
    assert_eq!(status, 200, "{logs}");
    assert_eq!(logs["text"], "started ****\n", "{logs}");
    // An unknown process: 404 that says so, and where to look.
    let (status, missing) = s.call("GET", &format!("/v1/boxes/{id}/processes/99999/logs"), None);
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "process_not_found", "{missing}");
    assert_eq!(
        missing["error"]["message"],
        format!("no background process 99999 in box {id}"),
        "{missing}"
    );
    assert!(
        missing["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("/processes"),
        "{missing}"
    );

    // 200 MB of output: a bounded result that says what was cut; the server's
    // memory stays bounded.
    let before = peak_rss_kib(s.server().pid());
    let r = exec(
        &s,
        &id,
        json!({"cmd": "head -c 200000000 /dev/zero | tr '\\\\0' x; echo; echo end"}),
    );
    assert_eq!(
        r["stdout"]["totalBytes"], 200_000_005u64,
        "{}",
        r["stdout"]["totalBytes"]
    );
    assert!(r["stdout"]["cutBytes"].as_u64().unwrap() > 199_000_000);
    let text = stdout(&r);
    assert!(
        text.contains("bytes cut") && text.ends_with("\nend\n"),
        "{}",
        &text[..200]
    );
    assert!(text.len() < 100_000);
    let after = peak_rss_kib(s.server().pid());
    assert!(
        after < 200 * 1024,
        "the server's peak memory grew from {before} KiB to {after} KiB"
    );

    // Stopping the box stops its background work with it.
    let (status, stopped) = s.call("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!((status, stopped["state"].as_str()), (200, Some("stopped")));
    let (status, _) = s.call("GET", &format!("/v1/boxes/{id}/processes"), None);
    assert_eq!(status, 409);
}

fn git(dir: &std::path::Path, script: &str) {
    psbx_tests::git::sh(dir, script);
}

#[test]
fn sync_sends_what_git_would_and_refuses_escapes() {
    let s = BoxServer::start("");
    let (status, started) = s.call("POST", "/v1/boxes", Some(json!({"name": "sync"})));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();

    let repo = tempfile::tempdir().unwrap();
    git(
        repo.path(),
        "git init -q . && echo .env > .gitignore && echo tracked > tracked.txt && git add . \
         && git commit -qm one && echo v2 > tracked.txt && echo second > later.txt && git add . \
         && git commit -qm two && echo new > untracked.txt && echo SECRET=1 > .env",
    );
    let sync = |args: &[&str]| {
        let out = Command::new(psbx_tests::binary("psbx"))
            .arg("sync")
            .arg(&id)
            .args(args)
            .arg("--dir")
            .arg(repo.path())
            .env("PSBX_URL", s.url())
            .env("PSBX_API_KEY", &s.key)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sync(&["--dest", "repo"]);
    let r = exec(
        &s,
        &id,
        json!({"cmd": "ls -A /work/repo; cat /work/repo/tracked.txt"}),
    );
    assert_eq!(
        stdout(&r),
        ".gitignore\nlater.txt\ntracked.txt\nuntracked.txt\nv2\n",
        "{r}"
    );

    sync(&["--dest", "first", "--commit", "HEAD~1"]);
    let r = exec(
        &s,
        &id,
        json!({"cmd": "ls -A /work/first; cat /work/first/tracked.txt"}),
    );
    assert_eq!(stdout(&r), ".gitignore\ntracked.txt\ntracked\n", "{r}");

    // A hostile archive is refused with the entry named.
    let mut header = tar::Header::new_gnu();
    header.set_size(1);
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_path("escape").unwrap();
    header.set_link_name("../../etc").unwrap();
    header.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&header, &b"x"[..]).unwrap();
    let evil = b.into_inner().unwrap();
    let res = reqwest::blocking::Client::new()
        .post(format!("{}/v1/boxes/{id}/sync?dest=evil", s.url()))
        .bearer_auth(&s.key)
        .body(evil)
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    let body: Value = res.json().unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("escape"),
        "{body}"
    );
    let (status, _) = s.call("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200);
}
