//! Real boxes end to end: libvirt domains under TCG with the real boxd inside,
//! driven through the `psbx` binary's REST API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::{
    BoxServer, disk_secret, domain_cgroup_file, domain_state, exec_text, has_saved_memory,
    qemu_args, qemu_uid, virsh,
};
use psbx_tests::wait;
use serde_json::json;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

/// Box `id` is in a jail of its own (review-2 L10): its QEMU runs as the uid
/// that owns its directory (0700) and disk (0600), a uid of the
/// installation's range; its domain's cgroup has the CPU shares of its size.
/// Returns the uid.
fn assert_jailed(s: &BoxServer, id: &str, size: u64) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let uid = qemu_uid(id);
    assert!(
        (0x6000_0000..0x7000_0000).contains(&uid),
        "box {id}'s QEMU runs as uid {uid}, not one of the box range"
    );
    let dir = std::fs::metadata(s.box_dir(id)).unwrap();
    assert_eq!(
        (dir.uid(), dir.mode() & 0o777),
        (uid, 0o700),
        "box directory of {id}: owner and mode {:o}",
        dir.mode()
    );
    let disk = std::fs::metadata(s.box_dir(id).join("disk.qcow2")).unwrap();
    assert_eq!(
        (disk.uid(), disk.mode() & 0o777),
        (uid, 0o600),
        "disk of {id}: owner and mode {:o}",
        disk.mode()
    );
    assert_eq!(
        domain_cgroup_file(id, "cpu", "cpu.shares"),
        (1024 * size).to_string(),
        "box {id}'s CPU shares"
    );
    assert_eq!(
        qemu_oom_score_adj(id),
        500,
        "box {id}'s QEMU is not the OOM killer's first choice"
    );
    uid
}

/// The encryption format `qemu-img info` reads in the qcow2 image at `path`
/// (which it reads without the key: only the data needs it), if any.
fn disk_encryption(path: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new("qemu-img")
        .args(["info", "-U", "--output=json"])
        .arg(path)
        .output()
        .expect("qemu-img (qemu-utils)");
    assert!(out.status.success(), "{out:?}");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    info["format-specific"]["data"]["encrypt"]["format"]
        .as_str()
        .map(str::to_owned)
}

/// The `oom_score_adj` of box `id`'s QEMU process.
fn qemu_oom_score_adj(id: &str) -> i32 {
    let pid = psbx_tests::vm::qemu_pid(id);
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_box_runs_freezes_thaws_and_stops() {
    // One vCPU of room (2 host CPUs x 0.5): a second box does not fit.
    let mut s = BoxServer::start("idle_freeze = \"6s\"\ncpu_overcommit = 0.5");
    // A secret for the exec path's smoke below.
    s.ok(
        "PUT",
        "/v1/secrets/MYSECRET",
        Some(json!({"value": "abcdefghijkl"})),
    );

    let (status, started) = s.call(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "one", "goal": "test", "secrets": ["MYSECRET"]})),
    );
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("box_"));
    assert_eq!(started["state"], "running");
    // boxd's hello arrived over the channel.
    assert_eq!(started["health"]["protocol"], 1, "{started}");
    assert_eq!(started["health"]["boxdVersion"], env!("CARGO_PKG_VERSION"));
    let boot_id = started["health"]["bootId"].as_str().unwrap().to_owned();
    assert_eq!(domain_state(&id).as_deref(), Some("running"));
    assert!(s.box_dir(&id).join("disk.qcow2").is_file());
    // What is in the box's directory (console log, disk) is its QEMU's to
    // read, nobody else's; the start said how libvirt confines QEMU besides.
    assert_jailed(&s, &id, 1);
    let log = s.server().log.lines().join("\n");
    assert!(
        log.contains("neither AppArmor nor SELinux")
            || log.contains("confines each box's QEMU with"),
        "nothing said of AppArmor or SELinux at start: {log}"
    );
    // QEMU runs confined (seccomp), without a USB controller, and its serial
    // console goes through virtlogd (which bounds it).
    let args = qemu_args(&id);
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_default()
    };
    assert!(
        after("-sandbox").starts_with("on"),
        "no seccomp sandbox: {args:?}"
    );
    assert!(
        after("-machine").contains("usb=off"),
        "a USB controller: {args:?}"
    );
    assert!(
        args.iter()
            .any(|a| a.contains("charserial0") && a.contains("/dev/fdset/")),
        "the console is not written through virtlogd: {args:?}"
    );
    // Its disk is LUKS-encrypted under a key of its own (issue 30 item 3):
    // stored sealed, given to libvirt as the secret its domain's disk names.
    let secret = disk_secret(&id).expect("the box's disk names no key secret");
    assert!(
        virsh(&["secret-dumpxml", &secret]).0,
        "libvirt has no secret {secret}"
    );
    let disk = s.box_dir(&id).join("disk.qcow2");
    assert_eq!(disk_encryption(&disk), Some("luks".to_owned()));
    let key_rows = format!("SELECT count(*)::text AS v FROM box_disk_keys WHERE box_id = '{id}'");
    assert_eq!(s.db_query(&key_rows), ["1"]);

    // The base image every box shares is not handed to the QEMU user.
    let base = psbx_tests::vm::images_dir().join("test/base.qcow2");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&base).unwrap()),
        0
    );

    // The host refuses what it cannot fit.
    let (status, full) = s.call("POST", "/v1/boxes", Some(json!({})));
    assert_eq!(status, 503, "{full}");
    assert_eq!(full["error"]["code"], "host_full");

    // Bad sizes and keeps are refused before anything is made.
    let (status, bad) = s.call("POST", "/v1/boxes", Some(json!({"size": 3})));
    assert_eq!(status, 400);
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1, 2, 4 or 8"),
        "{bad}"
    );
    let (status, bad) = s.call("POST", "/v1/boxes", Some(json!({"keep": "8d"})));
    assert_eq!(status, 400);
    assert!(
        bad["error"]["message"].as_str().unwrap().contains("7d"),
        "{bad}"
    );

    // Idle past idle_freeze: shut off with a managed save, listed as frozen.
    wait::until("the box to freeze", LONG, || {
        (s.listed_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    assert_eq!(domain_state(&id).as_deref(), Some("shut off"));
    assert!(has_saved_memory(&id), "no managed save for a frozen box");
    s.server().wait_for_log("frozen", Duration::from_secs(5));
    // libvirtd forgets the disk's key when it restarts (psbx keeps it off
    // libvirt's disk): the thaw gives it again (about 2 s more).
    psbx_tests::vm::restart_libvirtd();
    assert!(
        !virsh(&["secret-dumpxml", &secret]).0,
        "the secret was kept on disk"
    );

    // Reading it thaws it: memory was kept, so the boot id is the same.
    let (status, thawed) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{thawed}");
    assert_eq!(thawed["state"], "running");
    assert_eq!(thawed["health"]["answering"], true, "{thawed}");
    assert_eq!(thawed["health"]["bootId"], boot_id.as_str());
    // The restored QEMU is a new process, jailed as the first was.
    assert_jailed(&s, &id, 1);
    assert_eq!(domain_state(&id).as_deref(), Some("running"));

    // The box API's paths on this real box, once each: their stories run
    // in-process (server/tests/box_api/: exec, sync, isolation, sandbox_exec),
    // and the sync path on a real box is stdio.rs's. This costs no boot of
    // its own, about 0.5 s under TCG (measured). Exec: the secret is in the
    // environment and comes back masked, commands run in /work, and with
    // `network = false` (the harness's) and no environment the box has no
    // network card.
    let exec = format!("/v1/boxes/{id}/exec");
    let r = s.ok(
        "POST",
        &exec,
        Some(json!({"cmd": "echo $MYSECRET; pwd; ls /sys/class/net"})),
    );
    assert_eq!(r["stdout"]["text"], "****\n/work\nlo\n", "{r}");
    // A background command's log, from boxd's /run/psbx.
    let r = s.ok(
        "POST",
        &exec,
        Some(json!({"cmd": "echo started $MYSECRET; sleep 1000", "background": true})),
    );
    let logs = format!("/v1/boxes/{id}/processes/{}/logs", r["pid"]);
    wait::until("the background command's log", LONG, || {
        let (status, got) = s.call("GET", &logs, None);
        (status == 200 && got["text"] == "started ****\n").then_some(())
    });
    // Another account's calls with this box's id are not found, and write
    // nothing into it.
    let other = s.key_of_new_account("acct_other");
    let url = s.url();
    let touch = json!({"cmd": "touch /work/b-was-here"});
    for (method, path, body) in [("POST", &exec, Some(touch)), ("GET", &logs, None)] {
        let (status, answer) = psbx_tests::api::call(&url, &other, method, path, body);
        assert_eq!(status, 404, "{method} {path} as another account: {answer}");
    }
    let r = s.ok(
        "POST",
        &exec,
        Some(json!({"cmd": "test -e /work/b-was-here; echo $?"})),
    );
    assert_eq!(r["stdout"]["text"], "1\n", "{r}");

    // keep: up to 7 days.
    let (status, bad) = s.call(
        "POST",
        &format!("/v1/boxes/{id}/keep"),
        Some(json!({"keep": "8d"})),
    );
    assert_eq!(status, 400, "{bad}");
    let (status, kept) = s.call(
        "POST",
        &format!("/v1/boxes/{id}/keep"),
        Some(json!({"keep": "3d"})),
    );
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept["keep"], "3d");

    // What the box wrote is on its disk only as ciphertext; a copy of the
    // disk taken before the stop stays unreadable once the key is gone.
    let marker = format!("at-rest-marker-{id}");
    let wrote = exec_text(
        &s,
        &id,
        &format!("for i in $(seq 4000); do echo {marker}; done > /work/marker && sync && echo ok"),
    );
    assert_eq!(wrote.trim(), "ok", "{wrote}");
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("disk.qcow2");
    std::fs::copy(&disk, &copy).unwrap();

    // Stop: domain, disk and saved memory gone; the row says stopped.
    let (status, stopped) = s.call("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["state"], "stopped");
    assert_eq!(domain_state(&id), None, "the domain outlived the box");
    assert!(!s.box_dir(&id).exists(), "the box's disk outlived it");
    assert!(!has_saved_memory(&id));
    assert_eq!(
        s.db_query(&key_rows),
        ["0"],
        "the disk's key outlived the box"
    );
    assert!(
        !virsh(&["secret-dumpxml", &secret]).0,
        "libvirt kept the key"
    );
    assert_eq!(disk_encryption(&copy), Some("luks".to_owned()));
    let read = std::process::Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(&copy)
        .arg(copy_dir.path().join("plain.raw"))
        .output()
        .unwrap();
    assert!(!read.status.success(), "the copy opened without its key");
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("key-secret"),
        "{read:?}"
    );
    let bytes = std::fs::read(&copy).unwrap();
    assert!(
        !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
        "what the box wrote is on its disk in clear"
    );
    let (status, after) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!((status, after["state"].as_str()), (200, Some("stopped")));
    let (status, gone) = s.call(
        "POST",
        &format!("/v1/boxes/{id}/keep"),
        Some(json!({"keep": "1d"})),
    );
    assert_eq!(
        (status, gone["error"]["code"].as_str()),
        (409, Some("box_stopped"))
    );
    let (status, _) = s.call("GET", "/v1/boxes/box_doesnotexist", None);
    assert_eq!(status, 404);
}

#[test]
fn auto_acceleration_settles_and_an_unused_box_expires() {
    let mut s = BoxServer::start("accel = \"auto\"\ndefault_keep = \"10s\"");
    // One clear line says which accelerator boxes use (KVM hangs on these
    // machines, so a bounded probe boot decides).
    let line = s.server().wait_for_log("boxes run", Duration::from_secs(5));
    assert!(
        line.contains("with KVM") || line.contains("under TCG"),
        "{line}"
    );
    // The answer is kept for the next start on the same host setup.
    let (clean, log) = s.server.take().unwrap().stop();
    assert!(clean, "{log}");
    s.restart();
    let again = s.server().wait_for_log("boxes run", Duration::from_secs(5));
    assert!(again.contains("result kept in"), "{again}");
    let (status, started) = s.call("POST", "/v1/boxes", Some(json!({})));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    wait::until("the box to expire", LONG, || {
        (s.listed_state(&id).as_deref() == Some("stopped")).then_some(())
    });
    assert_eq!(domain_state(&id), None);
    assert!(!s.box_dir(&id).exists());
}

#[test]
fn restarts_keep_running_boxes_and_leave_no_half_made_ones() {
    let mut s = BoxServer::start("");
    let (status, x) = s.call("POST", "/v1/boxes", Some(json!({"name": "survivor"})));
    assert_eq!(status, 201, "{x}");
    let x_id = x["id"].as_str().unwrap().to_owned();
    let x_boot = x["health"]["bootId"].as_str().unwrap().to_owned();
    let x_freezes = x["freezesAt"].as_str().unwrap().to_owned();

    // A crash: the running box is adopted by the next start, timers and all.
    s.server.take().unwrap().kill();
    s.restart();
    let (status, back) = s.call("GET", &format!("/v1/boxes/{x_id}"), None);
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["state"], "running", "{back}");
    assert_eq!(back["health"]["answering"], true, "{back}");
    assert_eq!(back["health"]["bootId"], x_boot.as_str());
    assert!(back["freezesAt"].as_str().unwrap() >= x_freezes.as_str());

    // A crash while a box is being created.
    let url = s.url();
    let key = s.key.clone();
    let creating = std::thread::spawn(move || {
        let _ = reqwest::blocking::Client::new()
            .post(format!("{url}/v1/boxes"))
            .bearer_auth(key)
            .json(&json!({"name": "doomed"}))
            .timeout(Duration::from_secs(120))
            .send();
    });
    let doomed = wait::until("the new box's domain", LONG, || {
        let (_, names) = virsh(&["list", "--all", "--name"]);
        names
            .lines()
            .filter_map(|n| n.trim().strip_prefix("psbx-"))
            .find(|id| *id != x_id && s.db_box_state(id).is_some())
            .map(str::to_owned)
    });
    s.server.take().unwrap().kill();
    let _ = creating.join();
    s.restart();
    let state = s.db_box_state(&doomed).unwrap();
    assert_eq!(state, "failed", "a half-made box was left {state}");
    assert_eq!(
        domain_state(&doomed),
        None,
        "an orphan domain survived the restart"
    );
    assert!(!s.box_dir(&doomed).exists());
    let (_, listed) = s.call("GET", &format!("/v1/boxes/{doomed}"), None);
    assert!(
        listed["failure"]
            .as_str()
            .unwrap()
            .contains("server stopped"),
        "{listed}"
    );
    assert_eq!(domain_state(&x_id).as_deref(), Some("running"));

    // libvirtd restarts under a running server: the server reconnects.
    psbx_tests::vm::restart_libvirtd();
    let (status, stopped) = s.call("DELETE", &format!("/v1/boxes/{x_id}"), None);
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(domain_state(&x_id), None);
}

#[test]
fn boxes_start_from_the_pool_and_the_pool_leaves_with_the_server() {
    let mut s = BoxServer::start("pool_size = 1");
    let line = s.server().wait_for_log("pool box ready", LONG);
    let pooled_id = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("box_id="))
        .unwrap()
        .to_owned();
    assert_eq!(domain_state(&pooled_id).as_deref(), Some("paused"));
    let (status, started) = s.call("POST", "/v1/boxes", Some(json!({"name": "fast"})));
    assert_eq!(status, 201, "{started}");
    assert_eq!(
        started["id"],
        pooled_id.as_str(),
        "the box did not come from the pool"
    );
    assert_eq!(started["state"], "running");
    assert_eq!(started["health"]["answering"], true, "{started}");
    s.server()
        .wait_for_log("box started from the pool", Duration::from_secs(10));
    let refill = s.server().wait_for_log("pool box ready", LONG);
    assert!(!refill.contains(&pooled_id));
    // Two boxes, two jails.
    let refill_id = refill
        .split_whitespace()
        .find_map(|w| w.strip_prefix("box_id="))
        .unwrap()
        .to_owned();
    assert_ne!(
        assert_jailed(&s, &pooled_id, 1),
        assert_jailed(&s, &refill_id, 1),
        "two boxes' QEMU run as one uid"
    );

    // Operators see the box and the host, and can stop a box themselves.
    let (ok, out, err) = s.cli(&["boxes", "list", "--json"]);
    assert!(ok, "{err}");
    let listed: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        listed.iter().any(|b| b["id"] == pooled_id.as_str()
            && b["state"] == "running"
            && b["name"] == "fast"),
        "{out}"
    );
    let (ok, out, err) = s.cli(&["hosts", "list"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("held #") && out.contains("tcg") && out.contains("1 running"),
        "{out}"
    );
    let (ok, out, err) = s.cli(&["hosts", "list", "--json"]);
    assert!(ok, "{err}");
    let host: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&host["uri"], &host["leased"], &host["boxes"]["running"]),
        (
            &serde_json::json!("qemu:///system"),
            &serde_json::json!(true),
            &serde_json::json!(1)
        ),
        "{out}"
    );
    let (ok, out, err) = s.cli(&["boxes", "stop", &pooled_id]);
    assert!(ok, "{err}");
    assert!(out.contains("stopped"), "{out}");
    assert_eq!(domain_state(&pooled_id), None);
    let (status, after) = s.call("GET", &format!("/v1/boxes/{pooled_id}"), None);
    assert_eq!(
        (status, after["state"].as_str()),
        (200, Some("stopped")),
        "{after}"
    );

    // A clean stop removes the pool's boxes: no domain of this installation remains.
    let (clean, log) = s.server.take().unwrap().stop();
    assert!(clean, "{log}");
    for id in s.db_box_ids() {
        assert_eq!(
            domain_state(&id),
            None,
            "domain psbx-{id} outlived the server"
        );
    }
}

/// The host's MemTotal and MemAvailable (MiB), as the kernel tells them.
fn host_memory_mib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    (kib("MemTotal:") / 1024, kib("MemAvailable:") / 1024)
}

#[test]
fn a_start_waits_for_the_booting_pool_box_boxes_are_admitted_by_use_and_pressure_freezes_them() {
    // A unit of 30% of the host's memory: four boxes promise more than the
    // host has, and start because they use little (free page reporting).
    let (total, available) = host_memory_mib();
    let unit = total * 3 / 10;
    assert!(
        available > unit * 2 + 2048,
        "this test needs {} MiB of host memory available, and {available} are",
        unit * 2 + 2048
    );
    let config = format!(
        "pool_size = 1\nunit_memory_mib = {unit}\nmemory_overcommit = 8.0\n\
         memory_margin_mib = 2048\npressure_available_mib = 0"
    );
    let mut s = BoxServer::start(&config);

    // Right after the start, while the pool box boots: the start waits for it.
    let (status, first) = s.call("POST", "/v1/boxes", Some(json!({"name": "first"})));
    assert_eq!(status, 201, "{first}");
    let pooled = s.server().wait_for_log("pool box ready", LONG);
    assert!(
        pooled.contains(first["id"].as_str().unwrap()),
        "the first box did not come from the booting pool box: {pooled}"
    );
    s.server()
        .wait_for_log("box started from the pool", Duration::from_secs(10));
    let args = qemu_args(first["id"].as_str().unwrap());
    assert!(
        args.iter()
            .any(|a| a.contains("virtio-balloon") && a.contains("free-page-reporting")),
        "no balloon with free page reporting: {args:?}"
    );

    // Three more: 4 × 30% of the host promised; each is admitted by use.
    let mut ids = vec![first["id"].as_str().unwrap().to_owned()];
    for n in 0..3 {
        let (status, b) = s.call("POST", "/v1/boxes", Some(json!({"name": format!("b{n}")})));
        assert_eq!(
            status, 201,
            "box {n} of {unit} MiB on a {total} MiB host: {b}"
        );
        ids.push(b["id"].as_str().unwrap().to_owned());
    }
    // A box larger than what is available is refused: the caller learns no
    // figure of the host's, the operator's log says why.
    let (status, big) = s.call("POST", "/v1/boxes", Some(json!({"size": 4})));
    assert_eq!(status, 503, "{big}");
    assert_eq!(big["error"]["code"], "host_full", "{big}");
    let message = big["error"]["message"].as_str().unwrap();
    assert!(!message.contains("MiB"), "{message}");
    let why = s
        .server()
        .wait_for_log("the host is full", Duration::from_secs(10));
    assert!(
        why.contains("MiB are available") && why.contains("boxes.memory_margin_mib"),
        "{why}"
    );

    // Pressure: a threshold above what the host has freezes the idlest boxes.
    let (clean, log) = s.server.take().unwrap().stop();
    assert!(clean, "{log}");
    let text = std::fs::read_to_string(s.config_path()).unwrap().replace(
        "pressure_available_mib = 0",
        &format!("pressure_available_mib = {}", total * 2),
    );
    std::fs::write(s.config_path(), text).unwrap();
    s.restart();
    s.server()
        .wait_for_log("freezing the idlest running box", LONG);
    for id in &ids {
        wait::until("pressure to freeze every box", LONG, || {
            (s.db_box_state(id).as_deref() == Some("frozen")).then_some(())
        });
        assert!(has_saved_memory(id), "{id} frozen without a managed save");
    }
}
