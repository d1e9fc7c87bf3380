//! Several nodes on one database (issue 33): two nodes, then the issue's
//! acceptance test with three, as far as it is built. Each test says what
//! it covers and costs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::aws::Moto;
use psbx_tests::vm::BoxServer;
use psbx_tests::{api, free_port, wait};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{self, Message};

/// A host node with boxes and an API-only node, linked by mutual TLS under
/// the cluster certificate both derive from the one master key. Through the
/// API-only node: a start is placed on the host node, the box answers (REST,
/// exec), its node killed (-9) answers 503 `host_unavailable` once the lease
/// has run out, and after a restart the same box (same boot) answers again.
///
/// Cost: one test-image box (a few seconds to boot under TCG) and three
/// starts of `psbx serve`; the lease is 4 s, so the wait for it is short.
#[test]
fn an_api_only_node_answers_for_a_box_on_another_node_and_says_when_its_host_is_gone() {
    let cluster = |host: &str, port: u16| {
        format!("[cluster]\nhost = \"{host}\"\nlisten = \"127.0.0.1:{port}\"\nlease = \"4s\"\n")
    };
    let mut a = BoxServer::start_with(&cluster("host-a", free_port()), "");
    let mut b = a.node(
        "127.0.0.1:0",
        &cluster("api", free_port()),
        &[("PSBX_BOXES__ENABLED", "false")],
    );
    let (url_b, key) = (b.server().url.clone(), a.key.clone());
    let via_b =
        |method: &str, path: &str, body: Option<Value>| api::call(&url_b, &key, method, path, body);

    // A start through the API-only node is placed on the one host with room.
    let (status, started) = via_b("POST", "/v1/boxes", Some(json!({"name": "on-a"})));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    assert_eq!(
        a.db_query(&format!("SELECT host AS v FROM boxes WHERE id = '{id}'")),
        ["host-a"]
    );
    let boot = started["health"]["bootId"].as_str().unwrap().to_owned();

    // REST through the node that does not hold the box.
    let (status, got) = via_b("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(
        (status, got["state"].as_str()),
        (200, Some("running")),
        "{got}"
    );
    let (status, ran) = via_b(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "echo forwarded-$((6*7))"})),
    );
    assert_eq!(status, 200, "{ran}");
    assert!(
        ran["stdout"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("forwarded-42"),
        "{ran}"
    );
    // An unknown box is answered by the node asked, as ever.
    let (status, missing) = via_b("GET", "/v1/boxes/box_nosuchbox1", None);
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("box_not_found")),
        "{missing}"
    );

    // The host node dies: once its lease has run out, the other node says so.
    a.server.take().unwrap().kill();
    let gone = psbx_tests::wait::until(
        "host_unavailable through the API-only node",
        Duration::from_secs(30),
        || {
            let (status, body) = via_b("GET", &format!("/v1/boxes/{id}"), None);
            (status == 503).then_some(body)
        },
    );
    assert_eq!(gone["error"]["code"], "host_unavailable", "{gone}");
    assert!(
        gone["error"]["message"]
            .as_str()
            .unwrap()
            .contains("host-a"),
        "{gone}"
    );

    // Back: it adopts its box, and the other node reaches it again.
    a.restart();
    let back = psbx_tests::wait::until(
        "the box through the API-only node again",
        Duration::from_secs(60),
        || {
            let (status, body) = via_b("GET", &format!("/v1/boxes/{id}"), None);
            (status == 200).then_some(body)
        },
    );
    assert_eq!(
        back["health"]["bootId"].as_str(),
        Some(boot.as_str()),
        "{back}"
    );
    let (ok, listed, err) = a.cli(&["hosts", "list", "--json"]);
    assert!(ok, "{err}");
    let host: Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();
    assert_eq!(
        (&host["name"], &host["leased"], &host["boxes"]["running"]),
        (&json!("host-a"), &json!(true), &json!(1)),
        "{listed}"
    );
    // A clean stop: the host takes no new boxes and its lease is given back
    // at once (no wait for it to run out); its box keeps running.
    let (stopped, log) = a.server.take().unwrap().stop();
    assert!(stopped, "{log}");
    let (ok, listed, err) = a.cli(&["hosts", "list", "--json"]);
    assert!(ok, "{err}");
    let host: Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();
    assert_eq!(
        (
            &host["leased"],
            &host["freeMemoryMib"],
            &host["boxes"]["running"]
        ),
        (&json!(false), &json!(0), &json!(1)),
        "{listed}"
    );
    let (status, gone) = via_b("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(
        (status, gone["error"]["code"].as_str()),
        (503, Some("host_unavailable")),
        "{gone}"
    );
    b.server.take().unwrap().stop();
}

/// The issue's acceptance test, as far as it is built: three nodes of one
/// installation on this machine (one database, the first node's master key
/// file, one bucket of moto's S3 in a network namespace, moto's key in the
/// nodes' environment only): two host nodes, `host-a` and `host-b`, on the
/// one libvirtd, each fitting [`PER_HOST`] test-image boxes
/// (`boxes.cpu_overcommit` against the machine's CPUs), and one API-only
/// node, whose URL is every node's `public_url` (it stands where a load
/// balancer would). Everything a client does goes through the API-only node:
///
/// 1. starts are placed until a box runs on each host (one kept per host);
/// 2. three starts at once, for the two places left: two are placed, one on
///    each host, the third is refused with a 503, and no host holds more
///    than it fits (the `boxes` table, `psbx hosts list --json`);
/// 3. for the box on each host: exec (plain, streamed as it runs, and in
///    the background with its process log), a sync, a box URL (HTTP, an
///    event stream as it is sent, a WebSocket echo), a screenshot of the
///    display, a takeover terminal (its WebSocket through the API-only
///    node: a command typed, its output read) and a review (handed over,
///    waited for with MCP's `sandbox_review`, which is forwarded to the
///    box's node, and answered through the API-only node with an image the
///    waiter then reads from the bucket);
/// 4. each shot file read through the host node that does not hold its box
///    as well, and found in the bucket;
/// 5. `host-a`'s node killed (-9): its box answers 503 `host_unavailable`
///    naming the host within the lease (4 s), before and after the lease
///    has lapsed, while `host-b`'s box works; restarted, the box works again
///    with the same boot.
///
/// The test image has no Xvfb or ffmpeg, so the screenshot is of a stand-in
/// display: psbx-box-web accepts on `/tmp/.X11-unix/X99` (the X socket boxd
/// checks) and an `ffmpeg` script writes a known PNG where boxd's grab asks;
/// boxd's shot service, its wire protocol and the server's storage are the
/// real ones.
///
/// Not here: `psbx hosts drain` moving a frozen box to the other host (not
/// built yet), and `scripts/bench nodes`.
///
/// Cost: four or five test-image boxes (two kept throughout, two more for
/// the concurrent starts, stopped at once, and a third start when the
/// first two land on one host), each a few seconds to boot under TCG, two
/// at once about 25 s; five starts of `psbx serve`, moto's S3 in a
/// namespace, 12 MB synced into each box, and waits of about the lease
/// (4 s) twice: 70 to 90 s on this 2-core machine beside other tests.
#[test]
fn three_nodes_two_hosts_one_bucket() {
    let moto = Moto::start_in_netns();
    moto.bucket(BUCKET);
    let user = moto.setup(&["user", &moto.url]);
    // No log and no answer may show the bucket's secret key.
    psbx_tests::witness::secret(user["secretAccessKey"].as_str().unwrap());
    let identity = psbx_tests::aws::identity(&user);
    let envs: Vec<(&str, &str)> = identity.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let (port_a, port_b, port_api) = (free_port(), free_port(), free_port());
    let api = format!("http://127.0.0.1:{port_api}");
    let top = |host: Option<&str>| {
        format!(
            "public_url = \"{api}\"\n[cluster]\n{}listen = \"127.0.0.1:{}\"\nlease = \"{LEASE}\"\n\
             [storage.s3]\nbucket = \"{BUCKET}\"\nregion = \"us-east-1\"\nendpoint_url = \"{}\"\n\
             prefix = \"{PREFIX}\"\n",
            host.map(|h| format!("host = \"{h}\"\n"))
                .unwrap_or_default(),
            free_port(),
            moto.url
        )
    };
    // Each host fits PER_HOST boxes of one vCPU, and not one more.
    let cpus = machine_cpus();
    let overcommit = (f64::from(PER_HOST) + 0.5) / f64::from(cpus);
    let boxes = format!("cpu_overcommit = {overcommit}");
    let mut a = BoxServer::start_with_env(
        &format!("127.0.0.1:{port_a}"),
        &top(Some("host-a")),
        &boxes,
        &envs,
    );
    let b = a.node(&format!("127.0.0.1:{port_b}"), &top(Some("host-b")), &envs);
    let mut api_envs = envs.clone();
    api_envs.push(("PSBX_BOXES__ENABLED", "false"));
    let api_node = a.node(&format!("127.0.0.1:{port_api}"), &top(None), &api_envs);
    let c = Cluster {
        api: api.clone(),
        key: a.key.clone(),
        direct: [
            ("host-a".to_owned(), format!("http://127.0.0.1:{port_a}")),
            ("host-b".to_owned(), format!("http://127.0.0.1:{port_b}")),
        ]
        .into(),
    };
    let listed = hosts_list(&a);
    for host in ["host-a", "host-b"] {
        let h = &listed[host];
        assert_eq!(h["leased"], true, "{h}");
        assert_eq!(h["cpus"], cpus, "{h}");
    }

    // 1. Starts through the API-only node are placed until each host has one.
    let mut kept: BTreeMap<String, Value> = BTreeMap::new();
    for n in 0..=PER_HOST {
        if kept.len() == 2 {
            break;
        }
        let (status, started) = c.call(
            "POST",
            "/v1/boxes",
            Some(json!({"name": format!("placed-{n}")})),
        );
        assert_eq!(status, 201, "{started}");
        let id = started["id"].as_str().unwrap().to_owned();
        let host = host_of(&a, &id);
        eprintln!("nodes: start {n} placed on {host}");
        match kept.entry(host) {
            std::collections::btree_map::Entry::Vacant(place) => {
                place.insert(started);
            }
            // A second box on a host: not needed.
            std::collections::btree_map::Entry::Occupied(_) => {
                let (status, stopped) = c.call("DELETE", &format!("/v1/boxes/{id}"), None);
                assert_eq!(status, 200, "{stopped}");
            }
        }
    }
    assert_eq!(
        kept.keys().collect::<Vec<_>>(),
        ["host-a", "host-b"],
        "starts were not placed on both hosts: {:?}",
        hosts_list(&a)
    );
    let id_of = |host: &str| kept[host]["id"].as_str().unwrap().to_owned();
    let (id_a, id_b) = (id_of("host-a"), id_of("host-b"));

    // 2. Three starts at once for the two places left: one placed on each
    // host, the third refused; no host holds more than it fits.
    wait::until(
        "each host to publish room for one more box",
        Duration::from_secs(30),
        || {
            let listed = hosts_list(&a);
            listed
                .values()
                .all(|h| {
                    h["freeCpus"]
                        .as_f64()
                        .is_some_and(|f| (1.0..2.0).contains(&f))
                })
                .then_some(())
        },
    );
    assert_eq!(live_per_host(&a), ["host-a=1", "host-b=1"]);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
    let threads: Vec<_> = (0..3)
        .map(|n| {
            let (barrier, api, key) = (barrier.clone(), api.clone(), c.key.clone());
            std::thread::spawn(move || {
                barrier.wait();
                api::call(
                    &api,
                    &key,
                    "POST",
                    "/v1/boxes",
                    Some(json!({"name": format!("fill-{n}")})),
                )
            })
        })
        .collect();
    let starts: Vec<(u16, Value)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let placed: Vec<String> = starts
        .iter()
        .filter(|(status, _)| *status == 201)
        .map(|(_, started)| started["id"].as_str().unwrap().to_owned())
        .collect();
    let refused: Vec<&Value> = starts
        .iter()
        .filter(|(status, _)| *status != 201)
        .map(|(_, body)| body)
        .collect();
    eprintln!("nodes: concurrent starts answered {starts:?}");
    assert_eq!(placed.len(), 2, "{starts:?}");
    let mut hosts: Vec<String> = placed.iter().map(|id| host_of(&a, id)).collect();
    hosts.sort();
    assert_eq!(hosts, ["host-a", "host-b"], "{starts:?}");
    for (status, body) in starts.iter().filter(|(status, _)| *status != 201) {
        assert_eq!(*status, 503, "{body}");
        assert_eq!(body["error"]["code"], "host_full", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("no host has room"),
            "{body}"
        );
    }
    assert_eq!(refused.len(), 1);
    assert_eq!(live_per_host(&a), ["host-a=2", "host-b=2"]);
    let listed = wait::until(
        "psbx hosts list to show both hosts full",
        Duration::from_secs(30),
        || {
            let listed = hosts_list(&a);
            listed
                .values()
                .all(|h| h["freeCpus"].as_f64().is_some_and(|f| f < 1.0))
                .then_some(listed)
        },
    );
    for (name, h) in &listed {
        let boxes: u64 = h["boxes"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(boxes, u64::from(PER_HOST), "{name}: {h}");
        assert!(h["freeCpus"].as_f64().unwrap() >= 0.0, "{name}: {h}");
    }
    for id in &placed {
        let (status, stopped) = c.call("DELETE", &format!("/v1/boxes/{id}"), None);
        assert_eq!(status, 200, "{stopped}");
    }

    // 3. Everything a client does, for the box on each host.
    let png = display_png();
    let mut shots = BTreeMap::new();
    for (host, id) in [("host-a", &id_a), ("host-b", &id_b)] {
        shots.insert(host, c.work_in(host, id, &png));
    }

    // 4. A shot taken through the API-only node, read through the host node
    // that does not hold its box; its file is an object of the bucket.
    let stored = moto.objects(BUCKET);
    for (host, (id, shot)) in &shots {
        let other = if *host == "host-a" {
            "host-b"
        } else {
            "host-a"
        };
        let base = &c.direct[other];
        let (status, view) = api::call(
            base,
            &c.key,
            "GET",
            &format!("/v1/boxes/{id}/shots/{shot}"),
            None,
        );
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["id"], shot.as_str(), "{view}");
        let (status, file) = c.fetch(&format!("{base}/v1/boxes/{id}/shots/{shot}/file"));
        assert_eq!(status, 200);
        assert!(
            file == png,
            "the shot of {id} read through {other} is not the PNG taken"
        );
        let key = stored
            .sizes
            .iter()
            .find(|(k, _)| k.ends_with(&format!("/{id}/{shot}.full")))
            .unwrap_or_else(|| panic!("no object of {shot} in {:?}", stored.sizes));
        assert_eq!(*key.1, png.len() as u64, "{key:?}");
    }
    // Nothing of them on a node's disk.
    for dir in [a.dir.path(), b.dir.path(), api_node.dir.path()] {
        let shots_dir = dir.join("data/shots");
        assert!(
            std::fs::read_dir(&shots_dir).map_or(true, |mut d| d.next().is_none()),
            "{} holds files",
            shots_dir.display()
        );
    }

    // 5. host-a's node dies: within the lease its box answers 503
    // host_unavailable naming the host; host-b's box is unaffected.
    let boot_a = kept["host-a"]["health"]["bootId"]
        .as_str()
        .unwrap()
        .to_owned();
    let killed = Instant::now();
    a.server.take().unwrap().kill();
    let gone = wait::until(
        "host_unavailable through the API-only node",
        Duration::from_secs(30),
        || {
            let (status, body) = c.call("GET", &format!("/v1/boxes/{id_a}"), None);
            (status == 503).then_some(body)
        },
    );
    let after = killed.elapsed();
    eprintln!(
        "nodes: host-a's box answered 503 {:.1} s after its node was killed",
        after.as_secs_f64()
    );
    assert!(
        after < LEASE_TIME,
        "503 only {after:?} after the kill: {gone}"
    );
    assert_unavailable(&gone, "host-a");
    let (status, ran) = c.call(
        "POST",
        &format!("/v1/boxes/{id_a}/exec"),
        Some(json!({"cmd": "true"})),
    );
    assert_eq!(status, 503, "{ran}");
    assert_unavailable(&ran, "host-a");
    // The other host node answers the same.
    let (status, via_b) = api::call(
        &c.direct["host-b"],
        &c.key,
        "GET",
        &format!("/v1/boxes/{id_a}"),
        None,
    );
    assert_eq!(status, 503, "{via_b}");
    assert_unavailable(&via_b, "host-a");
    c.exec_says(&id_b, "echo still-$((6*7))", "still-42");
    // Once the lease has lapsed, the same answer (no node is tried).
    wait::until("host-a's lease to lapse", Duration::from_secs(30), || {
        (hosts_list(&a)["host-a"]["leased"] == false).then_some(())
    });
    let (status, lapsed) = c.call("GET", &format!("/v1/boxes/{id_a}"), None);
    assert_eq!(status, 503, "{lapsed}");
    assert_unavailable(&lapsed, "host-a");
    c.exec_says(&id_b, "echo still-$((6*7))", "still-42");

    // Restarted, it adopts its box: the same boot answers again.
    a.restart();
    let back = wait::until(
        "host-a's box through the API-only node again",
        Duration::from_secs(90),
        || {
            let (status, body) = c.call("GET", &format!("/v1/boxes/{id_a}"), None);
            (status == 200).then_some(body)
        },
    );
    assert_eq!(
        back["health"]["bootId"].as_str(),
        Some(boot_a.as_str()),
        "{back}"
    );
    c.exec_says(&id_a, "echo back-$((6*7))", "back-42");
    let listed = hosts_list(&a);
    assert_eq!(listed["host-a"]["leased"], true, "{listed:?}");
}

/// `psbx hosts list --json`, by host.
fn hosts_list(s: &BoxServer) -> BTreeMap<String, Value> {
    let (ok, listed, err) = s.cli(&["hosts", "list", "--json"]);
    assert!(ok, "psbx hosts list: {err}");
    listed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|h| (h["name"].as_str().unwrap().to_owned(), h))
        .collect()
}

/// The host of box `id`, as its row says.
fn host_of(s: &BoxServer, id: &str) -> String {
    s.db_query(&format!("SELECT host AS v FROM boxes WHERE id = '{id}'"))
        .pop()
        .unwrap_or_else(|| panic!("no row for {id}"))
}

/// `host=<boxes>` for each host with live boxes (neither stopped nor failed).
fn live_per_host(s: &BoxServer) -> Vec<String> {
    s.db_query(
        "SELECT host || '=' || count(*) AS v FROM boxes \
         WHERE state NOT IN ('stopped', 'failed') GROUP BY host ORDER BY host",
    )
}

/// Boxes each host fits (by vCPUs).
const PER_HOST: u32 = 2;
const LEASE: &str = "4s";
const LEASE_TIME: Duration = Duration::from_secs(4);
const BUCKET: &str = "psbx-nodes";
const PREFIX: &str = "cluster/";

/// The CPUs libvirt counts on this machine (what a host's ledger has).
fn machine_cpus() -> u32 {
    let (ok, info) = psbx_tests::vm::virsh(&["nodeinfo"]);
    assert!(ok, "virsh nodeinfo: {info}");
    info.lines()
        .find_map(|l| l.strip_prefix("CPU(s):"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no CPU(s) in virsh nodeinfo: {info}"))
}

/// A 503 `host_unavailable` naming `host`.
fn assert_unavailable(body: &Value, host: &str) {
    assert_eq!(body["error"]["code"], "host_unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(host),
        "{body}"
    );
}

/// A small PNG standing for the box's display: stripes, so that a changed
/// byte shows.
fn display_png() -> Vec<u8> {
    let image = image::RgbImage::from_fn(64, 48, |x, y| {
        image::Rgb([
            (x * 4) as u8,
            (y * 5) as u8,
            if (x / 8 + y / 8) % 2 == 0 { 255 } else { 0 },
        ])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgb8(image)
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    out.into_inner()
}

/// A tar stream of `(path, mode, bytes)`.
fn tar_of(files: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, mode, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(*mode);
        header.set_path(path).unwrap();
        header.set_cksum();
        tar.append(&header, *bytes).unwrap();
    }
    tar.into_inner().unwrap()
}

/// Stands for ffmpeg's one-frame grab of the display: writes the PNG the
/// test synced where boxd asks (its last argument).
const FAKE_FFMPEG: &str = "#!/bin/sh\n# psbx test: stands for ffmpeg's grab of the display\n\
                           for out in \"$@\"; do :; done\nexec cp /work/tools/display.png \"$out\"\n";

/// The nodes as a client sees them: the API-only node, and (for reading a
/// shot through another node) each host node's own URL.
struct Cluster {
    api: String,
    key: String,
    direct: BTreeMap<String, String>,
}

impl Cluster {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        api::call(&self.api, &self.key, method, path, body)
    }

    fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        api::ok(&self.api, &self.key, method, path, body)
    }

    fn client(&self) -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap()
    }

    /// GET `url` with the key: its status and bytes.
    fn fetch(&self, url: &str) -> (u16, Vec<u8>) {
        let res = self
            .client()
            .get(url)
            .bearer_auth(&self.key)
            .send()
            .unwrap();
        (res.status().as_u16(), res.bytes().unwrap().to_vec())
    }

    /// Runs `cmd` in box `id` and checks that its output has `expected`.
    fn exec_says(&self, id: &str, cmd: &str, expected: &str) {
        let ran = self.ok(
            "POST",
            &format!("/v1/boxes/{id}/exec"),
            Some(json!({"cmd": cmd})),
        );
        assert!(
            ran["stdout"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains(expected),
            "{cmd}: {ran}"
        );
    }

    /// Everything a client does with box `id` on `host`, through the
    /// API-only node; returns the id of the screenshot taken.
    fn work_in(&self, host: &str, id: &str, png: &[u8]) -> (String, String) {
        let timed = |what: &str, started: Instant| {
            eprintln!(
                "nodes: {host}: {what}: {:.1} s",
                started.elapsed().as_secs_f64()
            );
        };
        // Exec, plain.
        let started = Instant::now();
        self.exec_says(id, "echo plain-$((6*7))", "plain-42");
        timed("exec", started);

        // Exec, streamed: the first line arrives while the command runs.
        let res = self
            .client()
            .post(format!("{}/v1/boxes/{id}/exec?stream=true", self.api))
            .bearer_auth(&self.key)
            .json(&json!({"cmd": "echo first; sleep 2; echo second"}))
            .send()
            .unwrap();
        assert_eq!(res.status(), 200);
        let started = Instant::now();
        let mut lines = Vec::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(res)) {
            let line: Value = serde_json::from_str(&line.unwrap()).unwrap();
            lines.push((started.elapsed(), line));
        }
        let when = |text: &str| {
            lines
                .iter()
                .find(|(_, l)| l["stdout"].as_str().is_some_and(|s| s.contains(text)))
                .unwrap_or_else(|| panic!("no {text:?} in {lines:?}"))
                .0
        };
        assert!(
            when("second") - when("first") > Duration::from_millis(1500),
            "the lines came together: {lines:?}"
        );
        let exit = lines.last().map(|(_, l)| l).unwrap();
        assert_eq!(exit["exit"]["code"], 0, "{lines:?}");
        timed("exec streamed", started);

        // Exec in the background, and its process log.
        let started = Instant::now();
        let bg = self.ok(
            "POST",
            &format!("/v1/boxes/{id}/exec"),
            Some(json!({"cmd": "echo bg-start; sleep 1; echo bg-end", "background": true})),
        );
        let pid = bg["pid"].as_u64().unwrap_or_else(|| panic!("{bg}"));
        let log = wait::until(
            "the background command's log",
            Duration::from_secs(30),
            || {
                let log = self.ok("GET", &format!("/v1/boxes/{id}/processes/{pid}/logs"), None);
                log["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("bg-end"))
                    .then_some(log)
            },
        );
        assert!(log["text"].as_str().unwrap().contains("bg-start"), "{log}");
        timed("background exec and its log", started);

        // Sync: a small tar into /work.
        let started = Instant::now();
        let note = format!("synced to {id} through the API-only node\n");
        let tar = tar_of(&[("hello/note.txt", 0o644, note.as_bytes())]);
        let synced = self.sync(id, None, tar);
        assert_eq!(synced["files"], 1, "{synced}");
        self.exec_says(id, "cat /work/hello/note.txt", note.trim());
        timed("sync", started);

        // The box's web server (psbx-box-web, also standing for an X
        // server on the display's socket) and the stand-in ffmpeg.
        let started = Instant::now();
        let web = std::fs::read(psbx_tests::binary("psbx-box-web")).unwrap();
        let tools = tar_of(&[
            ("psbx-box-web", 0o755, &web),
            ("ffmpeg", 0o755, FAKE_FFMPEG.as_bytes()),
            ("display.png", 0o644, png),
        ]);
        self.sync(id, Some("tools"), tools);
        self.ok(
            "POST",
            &format!("/v1/boxes/{id}/exec"),
            Some(json!({"cmd": "cp /work/tools/ffmpeg /usr/bin/ffmpeg && \
                                exec /work/tools/psbx-box-web --port 80 --unix /tmp/.X11-unix/X99",
                        "background": true})),
        );
        timed("sync of the tools (12 MB) and their start", started);

        // The box URL through the API-only node: HTTP, SSE, a WebSocket.
        let started = Instant::now();
        let url = self.ok("GET", &format!("/v1/boxes/{id}"), None)["url"]
            .as_str()
            .unwrap()
            .to_owned();
        let authority = url
            .split("://")
            .nth(1)
            .unwrap()
            .trim_end_matches('/')
            .to_owned();
        assert!(
            authority.ends_with(&format!(":{}", self.api.rsplit(':').next().unwrap())),
            "{url} is not on the API-only node's port"
        );
        let name = authority.split(':').next().unwrap().to_owned();
        let api_addr: std::net::SocketAddr =
            self.api.trim_start_matches("http://").parse().unwrap();
        let browser = reqwest::blocking::Client::builder()
            .resolve(&name, api_addr)
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        wait::until(
            "psbx-box-web through the box URL",
            Duration::from_secs(30),
            || {
                browser
                    .get(format!("{url}status/204"))
                    .send()
                    .ok()
                    .filter(|r| r.status() == 204)
            },
        );
        let seen: Value = browser
            .get(format!("{url}headers"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(seen["headers"]["host"], authority.as_str(), "{seen}");
        assert_eq!(seen["headers"]["x-forwarded-for"], "127.0.0.1", "{seen}");
        let mut events = browser
            .get(format!("{url}sse?count=4&every_ms=500"))
            .send()
            .unwrap();
        assert_eq!(events.status(), 200);
        let (sse_started, mut text, mut arrivals) = (Instant::now(), String::new(), Vec::new());
        let mut buf = [0u8; 1024];
        loop {
            let n = std::io::Read::read(&mut events, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            arrivals.push((text.matches("data: ").count(), sse_started.elapsed()));
        }
        assert_eq!(text, "data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
        let at = |n: usize| arrivals.iter().find(|(seen, _)| *seen >= n).unwrap().1;
        assert!(
            at(4) - at(1) >= Duration::from_millis(1200),
            "the events came together: {arrivals:?}"
        );
        let (mut ws, answer) = websocket(api_addr, &format!("ws://{authority}/ws"));
        assert_eq!(answer.status(), 101);
        let hello = format!("hello-{host}");
        ws.send(Message::text(hello.clone())).unwrap();
        assert_eq!(ws.read().unwrap(), Message::text(hello));
        let _ = ws.close(None);
        timed("box URL: HTTP, SSE, WebSocket", started);

        // A screenshot of the (stand-in) display.
        let started = Instant::now();
        let (status, view) = self.call("POST", &format!("/v1/boxes/{id}/shots"), Some(json!({})));
        assert_eq!(status, 201, "{view}");
        assert_eq!(
            (view["width"].as_u64(), view["height"].as_u64()),
            (Some(64), Some(48)),
            "{view}"
        );
        let file_url = view["url"].as_str().unwrap();
        assert!(file_url.starts_with(&self.api), "{view}");
        let (status, file) = self.fetch(file_url);
        assert_eq!(status, 200);
        assert!(file == png, "the shot's file is not the display's PNG");
        let shot = view["id"].as_str().unwrap().to_owned();
        timed("screenshot", started);

        // A takeover terminal: the link and its WebSocket through the
        // API-only node.
        let started = Instant::now();
        let (status, link) = self.call("POST", &format!("/v1/boxes/{id}/takeover"), None);
        assert_eq!(status, 201, "{link}");
        let link = link["url"].as_str().unwrap().to_owned();
        assert!(
            link.starts_with(&format!("{}/takeover/tko_", self.api)),
            "{link}"
        );
        let token = link.rsplit('/').next().unwrap();
        let (mut ws, answer) = websocket(
            api_addr,
            &format!(
                "ws://127.0.0.1:{}/takeover/{token}/ws?cols=80&rows=24",
                api_addr.port()
            ),
        );
        assert_eq!(answer.status(), 101);
        let typed = json!({"type": "input", "data": "echo typed-$((6*7))\r"}).to_string();
        ws.send(Message::text(typed)).unwrap();
        let mut screen = String::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !screen.contains("typed-42") {
            assert!(
                Instant::now() < deadline,
                "no typed-42 on the terminal: {screen:?}"
            );
            match ws.read().unwrap() {
                Message::Binary(b) => screen.push_str(&String::from_utf8_lossy(&b)),
                Message::Text(t) => screen.push_str(t.as_str()),
                Message::Close(why) => panic!("the terminal closed ({why:?}): {screen:?}"),
                _ => {}
            }
        }
        let _ = ws.close(None);
        timed("takeover terminal", started);

        // A review: handed over, waited for (MCP, forwarded to the box's
        // node), answered with an image through the API-only node.
        let started = Instant::now();
        let (status, review) = self.call(
            "POST",
            &format!("/v1/boxes/{id}/reviews"),
            Some(json!({"title": format!("the page on {host}"), "summary": "through the API-only node"})),
        );
        assert_eq!(status, 201, "{review}");
        assert_eq!(review["state"], "waiting", "{review}");
        let review_id = review["id"].as_str().unwrap().to_owned();
        let waiter = {
            let (api, key, id) = (self.api.clone(), self.key.clone(), id.to_owned());
            std::thread::spawn(move || {
                let started = Instant::now();
                let result = mcp_call(
                    &api,
                    &key,
                    "sandbox_review",
                    json!({"id": id, "wait_s": 120}),
                );
                (started.elapsed(), result)
            })
        };
        std::thread::sleep(Duration::from_secs(2));
        use base64::Engine;
        let feedback = format!("the stripes on {host} are crooked");
        let answered = self.ok(
            "POST",
            &format!("/v1/reviews/{review_id}/answer"),
            Some(json!({"items": [{
                "text": feedback,
                "image": base64::engine::general_purpose::STANDARD.encode(png),
            }]})),
        );
        assert_eq!(answered["state"], "answered", "{answered}");
        let (waited, result) = waiter.join().unwrap();
        // It came back with the answer, not before it was given.
        assert!(
            waited >= Duration::from_secs(2),
            "sandbox_review did not wait: {result}"
        );
        let result = &result["result"];
        assert_eq!(result["isError"], false, "{result}");
        let content = result["content"].as_array().unwrap();
        assert!(
            content
                .iter()
                .any(|c| c["text"].as_str().is_some_and(|t| t.contains(&feedback))),
            "{result}"
        );
        // The image the answer stored, read back by the box's node.
        assert!(
            content
                .iter()
                .any(|c| c["type"] == "image" && c["mimeType"] == "image/png"),
            "no image in {result}"
        );
        timed("review", started);
        (id.to_owned(), shot)
    }

    /// `POST /v1/boxes/{id}/sync[?dest=]` with `tar`: the answer.
    fn sync(&self, id: &str, dest: Option<&str>, tar: Vec<u8>) -> Value {
        let query = dest.map(|d| format!("?dest={d}")).unwrap_or_default();
        let res = self
            .client()
            .post(format!("{}/v1/boxes/{id}/sync{query}", self.api))
            .bearer_auth(&self.key)
            .body(tar)
            .send()
            .unwrap();
        let status = res.status();
        let body: Value = res.json().unwrap_or(Value::Null);
        assert!(status.is_success(), "sync: {status} {body}");
        body
    }
}

/// A WebSocket to `url` over a connection to `addr` (the API-only node,
/// whatever the URL's host).
fn websocket(
    addr: std::net::SocketAddr,
    url: &str,
) -> (
    tungstenite::WebSocket<std::net::TcpStream>,
    tungstenite::handshake::client::Response,
) {
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    tungstenite::client::client(url, tcp).unwrap_or_else(|e| panic!("WebSocket {url}: {e}"))
}

/// An MCP `tools/call` over `/mcp` (2026-07-28, session-free): its JSON-RPC
/// answer (the one event carrying it, when it comes as a stream).
fn mcp_call(base: &str, key: &str, tool: &str, arguments: Value) -> Value {
    let version = "2026-07-28";
    let text = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap()
        .post(format!("{base}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments,
                       "_meta": {
                           "io.modelcontextprotocol/protocolVersion": version,
                           "io.modelcontextprotocol/clientInfo": {"name": "nodes test", "version": "1"},
                           "io.modelcontextprotocol/clientCapabilities": {}
                       }}
        }))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let answers: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))]
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    };
    answers
        .into_iter()
        .find(|a| a.get("result").is_some() || a.get("error").is_some())
        .unwrap_or_else(|| panic!("no answer to {tool} in {text}"))
}
