//! Faults under a running psbx: `kill -9` of the server while a box freezes,
//! while it thaws and while commands run; PostgreSQL restarted under load.
//! After each: no orphan domain, no box left half way (each row's state
//! matches its domain), the box kept its memory (same boot), the command that
//! was running finished with its whole output, and the server answers within
//! its limits. (A server killed while it creates a box, and libvirtd
//! restarted under running boxes: `boxes.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::{BoxServer, domain_state, domains_of, has_saved_memory, virsh};
use psbx_tests::{ServerProcess, wait};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(180);

/// Every box of the server is in a state it can stay in, and its domain
/// agrees; every domain of the installation has such a box.
fn assert_settled(s: &BoxServer) {
    let ids = s.db_box_ids();
    for id in &ids {
        let state = s.db_box_state(id).unwrap();
        let domain = domain_state(id);
        match state.as_str() {
            "running" => assert_eq!(domain.as_deref(), Some("running"), "box {id}"),
            "frozen" => {
                assert_eq!(domain.as_deref(), Some("shut off"), "box {id}");
                assert!(has_saved_memory(id), "frozen box {id} without its memory");
            }
            "stopped" | "failed" => assert_eq!(domain, None, "an orphan domain of box {id}"),
            other => panic!("box {id} was left {other} (domain {domain:?})"),
        }
    }
    for name in domains_of(&s.installation()) {
        let id = name.trim_start_matches("psbx-");
        assert!(ids.iter().any(|i| i == id), "domain {name} has no box");
    }
}

/// Kills the server as a crash would, and starts it again on its state.
fn crash_and_restart(s: &mut BoxServer) {
    s.server.take().unwrap().kill();
    s.restart();
}

fn background(s: &BoxServer, id: &str, cmd: &str) -> u64 {
    let ran = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": cmd, "background": true})),
    );
    ran["pid"].as_u64().unwrap()
}

fn stdout_of(s: &BoxServer, id: &str, cmd: &str) -> String {
    let ran = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": cmd})),
    );
    ran["stdout"]["text"].as_str().unwrap().trim().to_owned()
}

/// Waits until the box's background command `pid` ended; its log.
fn ended(s: &BoxServer, id: &str, pid: u64) -> (Value, String) {
    let process = wait::until("the command to end", LONG, || {
        let (_, list) = s.call("GET", &format!("/v1/boxes/{id}/processes"), None);
        list["processes"]
            .as_array()?
            .iter()
            .find(|p| p["pid"] == pid && p["running"] == false)
            .cloned()
    });
    let (status, logs) = s.call("GET", &format!("/v1/boxes/{id}/processes/{pid}/logs"), None);
    assert_eq!(status, 200, "{logs}");
    (
        process,
        logs["text"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_server_killed_mid_command_mid_freeze_and_mid_thaw_leaves_every_box_whole() {
    let mut s = BoxServer::start("idle_freeze = \"10s\"");
    let made = s.ok("POST", "/v1/boxes", Some(json!({"name": "faults"})));
    let id = made["id"].as_str().unwrap().to_owned();
    let boot = made["health"]["bootId"].as_str().unwrap().to_owned();

    // Commands running when the server dies: a background one writing its
    // log, and a foreground one whose caller is cut off.
    let pid = background(
        &s,
        &id,
        "for i in 1 2 3 4 5; do echo line $i; sleep 1; done; echo finished",
    );
    let url = s.url();
    let key = s.key.clone();
    let cut_off = {
        let id = id.clone();
        // Its answer never comes: the server dies under it.
        std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(format!("{url}/v1/boxes/{id}/exec"))
                .bearer_auth(key)
                .json(&json!({"cmd": "sleep 2; echo done > /work/foreground"}))
                .send()
                .is_ok()
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    crash_and_restart(&mut s);
    let _ = cut_off.join();
    assert_settled(&s);
    let (process, log) = ended(&s, &id, pid);
    assert_eq!(process["exitCode"], 0, "{process}");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        ["line 1", "line 2", "line 3", "line 4", "line 5", "finished"],
        "the background command's output"
    );
    wait::until("the cut-off command's own end", LONG, || {
        (stdout_of(&s, &id, "cat /work/foreground 2>/dev/null") == "done").then_some(())
    });

    // Mid-freeze: killed while libvirt saves the box's memory (or, if that
    // was too quick to catch, right after it).
    let mut caught = false;
    wait::until("the idle freeze to begin", LONG, || {
        let (_, job) = virsh(&["domjobinfo", &format!("psbx-{id}")]);
        caught = job.contains("Unbounded");
        (caught || s.db_box_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    eprintln!(
        "killed {} the managed save",
        if caught { "during" } else { "after" }
    );
    crash_and_restart(&mut s);
    wait::until("the save to settle", LONG, || {
        let (_, job) = virsh(&["domjobinfo", &format!("psbx-{id}")]);
        (!job.contains("Unbounded")).then_some(())
    });
    // The restarted server adopted the box as it found it.
    wait::until("the box to settle", LONG, || {
        let state = s.db_box_state(&id)?;
        let domain = domain_state(&id);
        let agree = match state.as_str() {
            "running" => domain.as_deref() == Some("running"),
            "frozen" => domain.as_deref() == Some("shut off"),
            _ => true,
        };
        agree.then_some(())
    });
    assert_settled(&s);
    let (status, back) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["state"], "running", "{back}");
    assert_eq!(
        back["health"]["bootId"],
        boot.as_str(),
        "the box lost its memory: {back}"
    );

    // Mid-thaw: frozen, then woken by a read, killed while it comes back.
    wait::until("the box to freeze", LONG, || {
        (s.listed_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    let url = s.url();
    let key = s.key.clone();
    let waking = {
        let id = id.clone();
        std::thread::spawn(move || {
            psbx_tests::api::call(&url, &key, "GET", &format!("/v1/boxes/{id}"), None)
        })
    };
    wait::until("the thaw to start the domain", LONG, || {
        (domain_state(&id).as_deref() == Some("running")).then_some(())
    });
    crash_and_restart(&mut s);
    let _ = waking.join();
    assert_settled(&s);
    let (status, back) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["state"], "running", "{back}");
    assert_eq!(back["health"]["answering"], true, "{back}");
    assert_eq!(
        back["health"]["bootId"],
        boot.as_str(),
        "the box lost its memory: {back}"
    );
    assert_eq!(stdout_of(&s, &id, "cat /work/foreground"), "done");

    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_settled(&s);
}

/// The PostgreSQL server binaries `scripts/test` and the embedded default use.
fn pg_bin() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("pg_ctl").is_file())
        .max();
    found.expect("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (scripts/setup installs them)")
}

fn pg_ctl(data: &Path, args: &[&str]) {
    // The postmaster it starts keeps what it is given: a log file, no pipes
    // (a pipe held open would leave this waiting for its end).
    let log = data.with_file_name("pg_ctl.log");
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(pg_bin().join("pg_ctl"))
        .arg("-D")
        .arg(data)
        .arg("-l")
        .arg(&log)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "pg_ctl {args:?}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// One request under load: its status, error code, and how long it took.
fn timed(
    url: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, String, Duration) {
    let started = Instant::now();
    let (status, answer) = psbx_tests::api::call(url, key, method, path, body);
    let code = answer["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, code, started.elapsed())
}

#[test]
fn postgres_restarted_under_load_loses_nothing_acknowledged_and_the_server_recovers() {
    let dir = tempfile::tempdir().unwrap();
    // PostgreSQL runs as its own user, which must pass through to the data dir.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = dir.path().join("state");
    let server = ServerProcess::start(&["--data-dir", data.to_str().unwrap()], &[]);
    let key = server.first_key().expect("a first start prints a key");
    let url = server.url.clone();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (url, key, stop) = (url.clone(), key.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut acknowledged = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // 25 secrets a worker, written again and again.
                    let name = format!("LOAD_{w}_{}", i % 25);
                    let value = format!("value-{w}-{}-under-load", i % 25);
                    let put = timed(
                        &url,
                        &key,
                        "PUT",
                        &format!("/v1/secrets/{name}"),
                        Some(json!({ "value": value })),
                    );
                    if (200..300).contains(&put.0) && !acknowledged.contains(&name) {
                        acknowledged.push(name);
                    }
                    seen.push(put);
                    seen.push(timed(&url, &key, "GET", "/v1/secrets", None));
                    i += 1;
                }
                (seen, acknowledged)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    pg_ctl(
        &data.join("pg/data"),
        &["restart", "-m", "fast", "-w", "-t", "60"],
    );
    std::thread::sleep(Duration::from_secs(2));
    // Once PostgreSQL is back, every request succeeds again.
    wait::until("requests to succeed again", Duration::from_secs(60), || {
        let (status, _, _) = timed(&url, &key, "GET", "/v1/secrets", None);
        (status == 200).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Vec::new();
    let mut acknowledged = Vec::new();
    for w in workers {
        let (seen, acked) = w.join().unwrap();
        all.extend(seen);
        acknowledged.extend(acked);
    }
    let refused = all
        .iter()
        .filter(|(s, _, _)| *s != 200 && *s != 201 && *s != 204)
        .count();
    eprintln!(
        "{} requests, {refused} refused while PostgreSQL restarted",
        all.len()
    );
    for (status, said, took) in &all {
        assert!(
            matches!(status, 200 | 201 | 204 | 503),
            "a request answered {status} while PostgreSQL restarted: {said}"
        );
        if *status == 503 {
            assert!(
                said.contains("database_unavailable"),
                "a 503 that does not say why: {said}"
            );
        }
        assert!(
            *took < Duration::from_secs(15),
            "a request waited {took:?}: past the pool's limit"
        );
    }
    let (_, list) = psbx_tests::api::call(&url, &key, "GET", "/v1/secrets", None);
    let stored: Vec<&str> = list["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    for name in &acknowledged {
        assert!(
            stored.contains(&name.as_str()),
            "secret {name} was acknowledged and lost"
        );
    }
    assert!(
        acknowledged.len() > 10,
        "too little load to mean anything: {}",
        acknowledged.len()
    );
    let (clean, log) = server.stop();
    assert!(clean, "{log}");
}
