//! Exec in a box, in-process (was `tests/tests/work.rs`'s VM story): secrets
//! as environment variables, masked in every form of output; a time limit
//! kills the command and its children; a background command survives the
//! call and its log is readable; 200 MB of output come back bounded while
//! the server's memory stays bounded; a stop ends the box's background work.
//! The same path on a real box: `tests/tests/boxes.rs`'s
//! `a_box_runs_freezes_thaws_and_stops`.

use crate::world::{World, stdout};
use serde_json::{Value, json};
use std::time::Duration;

/// Peak resident memory of this process (the server, and boxd's services
/// too), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn exec_masks_secrets_kills_on_timeout_keeps_background_work_and_bounds_output() {
    let w = World::start();
    for (name, value) in [("MYSECRET", "abcdefghijkl"), ("SHORT7", "1234567")] {
        let (status, put) = w.call(
            "PUT",
            &format!("/v1/secrets/{name}"),
            Some(json!({ "value": value })),
        );
        assert_eq!(status, 201, "{put}");
    }
    // A secret the request names that the account does not hold: not found.
    let (status, bad) = w.call("POST", "/v1/boxes", Some(json!({"secrets": ["NOPE"]})));
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (404, Some("secret_not_found")),
        "{bad}"
    );
    assert!(bad["error"]["message"].as_str().unwrap().contains("NOPE"));
    let (status, started) = w.call(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "work", "secrets": ["MYSECRET", "SHORT7"]})),
    );
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let work = w.work_of(&id);

    // Secrets are environment variables; values of 8+ characters come back
    // masked. Commands run in the box's /work (here, its directory).
    let r = w.exec(&id, json!({"cmd": "echo $MYSECRET; echo $SHORT7; pwd"}));
    assert_eq!(
        stdout(&r),
        format!("****\n1234567\n{}\n", work.display()),
        "{r}"
    );
    assert_eq!(r["exitCode"], 0);
    // ...also when printed one character at a time with pauses between.
    let r = w.exec(
        &id,
        json!({"cmd": "echo \"$MYSECRET\" | fold -w1 | while read c; do printf %s \"$c\"; sleep 0.1; done; echo"}),
    );
    assert_eq!(stdout(&r), "****\n", "{r}");
    // ...and in the streamed form.
    let streamed = reqwest::blocking::Client::new()
        .post(format!("{}/v1/boxes/{id}/exec?stream=true", w.url))
        .bearer_auth(&w.key)
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
    let r = w.exec(&id, json!({"cmd": "echo $MYSECRET > f; wc -c < f"}));
    assert_eq!(stdout(&r).trim(), "13");
    assert_eq!(
        std::fs::read_to_string(work.join("f")).unwrap(),
        "abcdefghijkl\n"
    );

    // A time limit kills the command and its children. (The subshell is
    // named by the box's id: this machine runs other tests' commands too.)
    let r = w.exec(
        &id,
        json!({"cmd": format!("(sleep 40; echo late {id}) & sleep 60"), "timeout": "2s"}),
    );
    assert_eq!(r["timedOut"], true, "{r}");
    let r = w.exec(
        &id,
        json!({"cmd": format!("ps -eo args | grep -c '[s]leep 40; echo late {id}' || true")}),
    );
    assert_eq!(
        stdout(&r).trim(),
        "0",
        "a child outlived the time limit: {r}"
    );

    // A background command survives the call; its logs are readable.
    let r = w.exec(
        &id,
        json!({"cmd": "echo started $MYSECRET; sleep 1000", "background": true}),
    );
    let pid = r["pid"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let (_, list) = w.call("GET", &format!("/v1/boxes/{id}/processes"), None);
    assert!(
        list["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid && p["running"] == true),
        "{list}"
    );
    let (status, logs) = w.call("GET", &format!("/v1/boxes/{id}/processes/{pid}/logs"), None);
    assert_eq!(status, 200, "{logs}");
    assert_eq!(logs["text"], "started ****\n", "{logs}");
    // An unknown process: 404 that says so, and where to look.
    let (status, missing) = w.call("GET", &format!("/v1/boxes/{id}/processes/99999/logs"), None);
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
    let before = peak_rss_kib();
    let r = w.exec(
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
    let after = peak_rss_kib();
    assert!(
        after < 200 * 1024,
        "the server's peak memory grew from {before} KiB to {after} KiB"
    );

    // Stopping the box stops its background work with it.
    assert!(alive(pid), "the background command ended before the stop");
    let (status, stopped) = w.call("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!((status, stopped["state"].as_str()), (200, Some("stopped")));
    let (status, _) = w.call("GET", &format!("/v1/boxes/{id}/processes"), None);
    assert_eq!(status, 409);
    psbx_tests::wait::until(
        "the background command to end with its box",
        Duration::from_secs(10),
        || (!alive(pid)).then_some(()),
    );
}
