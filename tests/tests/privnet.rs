//! A real box started in an environment whose connection lists
//! `db.internal:5432` and `10.9.8.7:8080`, seen from inside the box: boxd's
//! DNS answers the name with an address of 198.18.0.0/15; a connection to an
//! address is accepted by boxd's entry and, with no connector online (the
//! server refuses the stream, whichever code it gives), reset at once, logged
//! in /work/.sbx/logs/private-endpoints.log and counted in
//! `health.privateEndpoints`; a program in the box can listen on 5432 itself
//! at the same time; the name on a port that is not listed stays in the box.
//! Then boxd is killed inside the box and restarted by its /init: the server
//! talks to the new boxd, which set the same addresses up again; killed once
//! more with its kept setup damaged, it says so and serves without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::json;
use std::time::{Duration, Instant};

/// Background command `pid` of the box as `GET .../processes` lists it.
fn process(s: &BoxServer, id: &str, pid: u64) -> serde_json::Value {
    let list = s.ok("GET", &format!("/v1/boxes/{id}/processes"), None);
    list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .cloned()
        .unwrap_or_else(|| panic!("background command {pid} is not listed: {list}"))
}

/// Runs `cmd` in the box; its stdout and stderr, and how long the call took.
fn exec(s: &BoxServer, id: &str, cmd: &str) -> (String, Duration) {
    let started = Instant::now();
    let answer = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({ "cmd": cmd, "timeout": "60s" })),
    );
    let took = started.elapsed();
    let text = format!(
        "{}{}",
        answer["stdout"]["text"].as_str().unwrap_or_default(),
        answer["stderr"]["text"].as_str().unwrap_or_default()
    );
    (text, took)
}

#[test]
fn environment_addresses_inside_a_box() {
    let s = BoxServer::start("");
    s.ok("POST", "/v1/environments", Some(json!({"name": "dev"})));
    let conn = s.ok(
        "POST",
        "/v1/environments/dev/connections",
        Some(json!({"name": "aws"})),
    );
    s.ok("PUT",
        &format!(
            "/v1/environments/dev/connections/{}/endpoints",
            conn["id"].as_str().unwrap()
        ),
        Some(
            json!({"endpoints": [{"host": "db.internal", "port": 5432}, {"host": "10.9.8.7", "port": 8080}]}),
        ),
    );
    s.ok(
        "PUT",
        "/v1/secrets/PRIVNET_SECRET",
        Some(json!({"value": "kept across a boxd restart"})),
    );
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "privnet", "environment": "dev", "secrets": ["PRIVNET_SECRET"]})),
    );
    let id = started["id"].as_str().unwrap().to_owned();

    // DNS: boxd's server answers the name, and resolv.conf names it.
    let (dns, _) = exec(
        &s,
        &id,
        "cat /etc/resolv.conf; nslookup db.internal 198.18.0.1; nslookup db.internal",
    );
    assert!(dns.contains("nameserver 198.18.0.1\n"), "{dns}");
    assert_eq!(
        dns.matches("Address: 198.18.0.2").count(),
        2,
        "db.internal is 198.18.0.2, through either: {dns}"
    );

    // A connection through the entry, with nothing to take it on the server's
    // side: accepted by boxd, then reset quickly, not left hanging.
    let (out, took) = exec(&s, &id, "echo to-db | nc db.internal 5432; echo exit=$?");
    assert!(out.contains("exit="), "{out}");
    assert!(!out.contains("to-db"), "{out}");
    assert!(
        took < Duration::from_secs(8),
        "the refused connection took {took:?}: {out}"
    );
    let (out, took) = exec(&s, &id, "echo to-ip | nc 10.9.8.7 8080; echo exit=$?");
    assert!(
        !out.contains("unreachable") && took < Duration::from_secs(8),
        "{took:?} {out}"
    );

    // A program in the box listens on 5432 itself: db.internal:5432 still
    // goes to the entry, 127.0.0.1:5432 to the program.
    let (out, _) = exec(
        &s,
        &id,
        "nc -l -p 5432 </dev/null >/tmp/got & sleep 1; \
         echo to-db-again | nc db.internal 5432; \
         echo local-ok | nc 127.0.0.1 5432; wait; echo \"got=$(cat /tmp/got)\"",
    );
    assert!(out.contains("got=local-ok\n"), "{out}");
    // The name on a port that is not listed stays in the box: refused at once.
    let (out, _) = exec(&s, &id, "echo x | nc 198.18.0.2 9999; echo exit=$?");
    assert!(out.contains("refused") && out.contains("exit=1"), "{out}");

    // The log: one line per failed connection, with its code.
    let (log, _) = exec(&s, &id, "cat /work/.sbx/logs/private-endpoints.log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    for (line, address) in
        lines
            .iter()
            .zip(["db.internal:5432", "10.9.8.7:8080", "db.internal:5432"])
    {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        // 2026-03-04T05:06:07.089Z
        assert!(
            words[0].len() == 24 && words[0].ends_with('Z') && words[0].as_bytes()[10] == b'T',
            "{line}"
        );
        assert_eq!(words[1], address, "{line}");
        assert!(
            words[2].len() == 3 && words[2].parse::<u16>().is_ok(),
            "{line}"
        );
    }

    // health.privateEndpoints: the entries and their counts.
    let view = s.ok("GET", &format!("/v1/boxes/{id}"), None);
    let entries = view["health"]["privateEndpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("{view}"));
    assert_eq!(entries.len(), 2, "{view}");
    let db = &entries[0];
    assert_eq!(db["host"], "db.internal", "{view}");
    assert_eq!(db["port"], 5432);
    assert_eq!(db["localIp"], "127.0.0.1");
    assert!(db["localPort"].as_u64().unwrap() > 0);
    assert_eq!(db["opened"], 2, "{view}");
    assert_eq!(db["failures"], 2, "{view}");
    assert_eq!(db["open"], 0, "{view}");
    assert!(db["lastFailure"].as_str().unwrap().len() > 4, "{view}");
    assert_eq!(entries[1]["host"], "10.9.8.7");
    assert_eq!(entries[1]["failures"], 1);

    // An exec result names the failures its own command caused, not those
    // of another command failing at the same time.
    let noisy = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "for i in $(seq 1 15); do nc db.internal 5432 </dev/null; sleep 0.3; done", "background": true})),
    );
    let noisy = noisy["pid"].as_u64().unwrap_or_else(|| panic!("{noisy}"));
    let errors = |result: &serde_json::Value| -> String {
        result["privateEndpointErrors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e.as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    let quiet = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "sleep 2", "timeout": "60s"})),
    );
    assert_eq!(errors(&quiet), "", "another command's failures: {quiet}");
    let own = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "nc 10.9.8.7 8080 </dev/null; true", "timeout": "60s"})),
    );
    let own_errors = errors(&own);
    assert!(own_errors.starts_with("10.9.8.7:8080 "), "{own}");
    assert!(!own_errors.contains("db.internal"), "{own}");
    // The background command's own, once it ended.
    let ended = wait::until(
        "the failing background command to end",
        Duration::from_secs(60),
        || Some(process(&s, &id, noisy)).filter(|p| p["running"] == false),
    );
    let noisy_errors = errors(&ended);
    assert!(
        noisy_errors.lines().count() >= 10
            && noisy_errors
                .lines()
                .all(|l| l.starts_with("db.internal:5432 ")),
        "{ended}"
    );

    a_restarted_boxd_keeps_the_addresses(&s, &id);
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
}

/// Kills boxd inside the box (the test image's /init starts it again a second
/// later) and checks that the server talks to the new one, whose setup is the
/// one before: the same address for the name, a fast failure logged, the
/// entries in health with counters from zero. Then a damaged kept setup: the
/// next boxd says so and serves without it.
fn a_restarted_boxd_keeps_the_addresses(s: &BoxServer, id: &str) {
    let (before, _) = exec(
        s,
        id,
        "cat /proc/sys/kernel/random/boot_id; nslookup db.internal",
    );
    let boot_id = before.lines().next().unwrap().to_owned();
    let address = before
        .lines()
        .rfind(|l| l.starts_with("Address: 198.18."))
        .unwrap_or_else(|| panic!("{before}"))
        .to_owned();

    let started = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "echo before-restart; sleep 600", "background": true})),
    );
    let pid = started["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("{started}"));

    restart_boxd(s, id);

    // The background command started before is listed, logged and signalled
    // through the new boxd.
    assert_eq!(process(s, id, pid)["running"], true);
    let logs = s.ok("GET", &format!("/v1/boxes/{id}/processes/{pid}/logs"), None);
    assert_eq!(logs["text"], "before-restart\n", "{logs}");
    let (status, body) = s.call(
        "DELETE",
        &format!("/v1/boxes/{id}/processes/{pid}?signal=KILL"),
        None,
    );
    assert_eq!(status, 204, "{body}");
    wait::until(
        "the killed command to be seen ended",
        Duration::from_secs(15),
        || (process(s, id, pid)["running"] == false).then_some(()),
    );

    // The same boot; the name resolves to what it did before the restart.
    let (dns, _) = exec(
        s,
        id,
        "cat /proc/sys/kernel/random/boot_id /etc/resolv.conf; nslookup db.internal",
    );
    assert!(dns.starts_with(&format!("{boot_id}\n")), "{boot_id}: {dns}");
    assert!(dns.contains("nameserver 198.18.0.1\n"), "{dns}");
    assert!(dns.lines().any(|l| l == address), "{address} again: {dns}");
    let console = std::fs::read_to_string(s.box_dir(id).join("console.log")).unwrap();
    assert!(
        console.contains("boxd: restored 2 environment addresses from /run/psbx/privnet.json"),
        "{console}"
    );
    // Commands still get the claim's secrets.
    let (secret, _) = exec(
        s,
        id,
        "[ \"$PRIVNET_SECRET\" = 'kept across a boxd restart' ] && echo secret-kept",
    );
    assert!(secret.contains("secret-kept"), "{secret}");
    assert!(
        console.contains("boxd: restored the commands' environment from /run/psbx/env.json"),
        "{console}"
    );

    // A connection fails fast again, through a new entry, and is logged.
    let (log, _) = exec(s, id, "cat /work/.sbx/logs/private-endpoints.log");
    let logged = log.lines().count();
    let (out, took) = exec(s, id, "echo to-db | nc db.internal 5432; echo exit=$?");
    assert!(out.contains("exit=") && !out.contains("to-db"), "{out}");
    assert!(
        took < Duration::from_secs(8),
        "the refused connection took {took:?}: {out}"
    );
    let (log, _) = exec(s, id, "cat /work/.sbx/logs/private-endpoints.log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), logged + 1, "{log}");
    assert_eq!(
        lines[logged].split(' ').nth(1),
        Some("db.internal:5432"),
        "{log}"
    );

    // Health: the entries again, counted from zero.
    let view = s.ok("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(view["state"], "running", "{view}");
    assert_eq!(view["health"]["answering"], true, "{view}");
    let entries = view["health"]["privateEndpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("{view}"));
    assert_eq!(entries.len(), 2, "{view}");
    assert_eq!(entries[0]["host"], "db.internal", "{view}");
    assert_eq!(entries[0]["opened"], 1, "{view}");
    assert_eq!(entries[0]["failures"], 1, "{view}");
    assert_eq!(entries[1]["host"], "10.9.8.7", "{view}");
    assert_eq!(entries[1]["failures"], 0, "{view}");

    // A damaged file is reported and left alone: boxd serves without it.
    exec(s, id, "echo '{\"endpoints\": [' >/run/psbx/privnet.json");
    restart_boxd(s, id);
    let console = std::fs::read_to_string(s.box_dir(id).join("console.log")).unwrap();
    assert!(
        console.contains("boxd: ignoring /run/psbx/privnet.json: "),
        "{console}"
    );
    let view = s.ok("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(view["health"]["answering"], true, "{view}");
    assert_eq!(view["health"]["privateEndpoints"], json!([]), "{view}");
}

/// Kills boxd inside the box and waits until the server runs a command
/// through the next one.
fn restart_boxd(s: &BoxServer, id: &str) {
    let (old_pid, _) = exec(s, id, "pidof boxd");
    let old_pid = old_pid.trim().to_owned();
    // The exec's own session dies with boxd: the kill runs detached from it.
    exec(
        s,
        id,
        "setsid sh -c 'sleep 1; kill $(pidof boxd)' </dev/null >/dev/null 2>&1 &",
    );
    let killed = Instant::now();
    // A command running when boxd goes: its caller is told what happened.
    let (status, lost) = s.call(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({ "cmd": "sleep 10", "timeout": "60s" })),
    );
    assert_eq!(status, 503, "{lost}");
    assert_eq!(lost["error"]["code"], "box_channel_lost", "{lost}");
    assert!(
        lost["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may still be running"),
        "{lost}"
    );
    let new_pid = wait::until(
        "the server to run a command through the restarted boxd",
        Duration::from_secs(120),
        || {
            let (status, answer) = s.call(
                "POST",
                &format!("/v1/boxes/{id}/exec"),
                Some(json!({ "cmd": "pidof boxd", "timeout": "10s" })),
            );
            let pid = answer["stdout"]["text"].as_str()?.trim().to_owned();
            (status == 200 && !pid.is_empty() && pid != old_pid).then_some(pid)
        },
    );
    eprintln!(
        "boxd {old_pid} killed; the server ran a command through boxd {new_pid} {:?} later",
        killed.elapsed()
    );
}
