//! The example repos (`examples/`) in a production box, and the FAQ's first task
//! from a real repo, end to end: an agent (the official Python MCP SDK,
//! `mcp/first_task.py`) follows docs/examples.md for example 1: it starts a box,
//! clones `notes` by name from the test's git server, brings it up with docker
//! compose, shoots its home page through the box's URL and hands the box over
//! with `sandbox_review`, waiting. While it waits, the test checks the notes app
//! through its box URL (a note added goes web → api → db and back), and runs
//! example 2 (`shop`) in the same box with the REST calls docs/examples.md lists:
//! its storefront's page, through its own box URL, shows what the inventory
//! service (called by name) has left, and a purchase takes one off. Then a person
//! (Playwright with Debian's Chromium) circles something on the agent's
//! screenshot in the app and sends feedback; the agent's wait returns it; "Shut
//! down" stops the box.
//!
//! "The internet" is a namespace of the test's own: a DNS server naming
//! `git.example.test`, and the two repos served over HTTP from copies of
//! `examples/`. Docker in the box has no registry to pull from: the images the
//! compose files name are made in the box from its own Debian packages
//! (`examples/stand-in-images.sh`, what the agent is told to run first).
//!
//! Cost: one production box (2 vCPUs, 3 GiB) for the whole test, about 4
//! minutes under TCG (boot, the images, two compose projects, Chromium twice).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_tests::netns::Netns;
use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

const PASSWORD: &str = "the-examples-test-password";
const FEEDBACK: &str = "the Add button should say Save";
/// The egress of the test's boxes: the test ranges only.
const TEST_RANGES: &str = "only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `examples/<name>` as a bare repository `<name>.git` under `site`, served as
/// files ("dumb" HTTP), as a repository host would serve it.
fn publish(site: &Path, name: &str) {
    let src = site.join(format!("{name}-src"));
    psbx_tests::git::copy_dir(&repo_root().join("examples").join(name), &src);
    psbx_tests::git::sh(
        site,
        &format!(
            "cd {name}-src && git init -q -b main && git add -A && git commit -qm 'the example' && cd .. && \
             git clone -q --bare {name}-src {name}.git && git -C {name}.git update-server-info && \
             rm -rf {name}-src"
        ),
    );
}

/// A client that sends every request for a box URL's host to the server.
fn box_client(server_url: &str, box_url: &str) -> reqwest::blocking::Client {
    let host = box_url
        .split("://")
        .nth(1)
        .unwrap()
        .split(['/', ':'])
        .next()
        .unwrap()
        .to_owned();
    let server = server_url.trim_start_matches("http://");
    reqwest::blocking::Client::builder()
        .resolve(&host, server.parse().unwrap())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A box URL for another port of the box: `box-<id>-<key>-<port>.<domain>`.
fn port_url(url: &str, port: u16) -> String {
    let (head, tail) = url.split_once(".box.localhost").unwrap();
    format!("{head}-{port}.box.localhost{tail}")
}

fn exec(s: &BoxServer, id: &str, cmd: &str) -> String {
    let answer = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({ "cmd": cmd, "timeout": "600s" })),
    );
    let out = format!(
        "{}{}",
        answer["stdout"]["text"].as_str().unwrap_or_default(),
        answer["stderr"]["text"].as_str().unwrap_or_default()
    );
    assert_eq!(answer["exitCode"], 0, "{cmd}: {out}");
    out
}

#[test]
fn the_examples_in_a_box_and_the_first_task_from_a_repo() {
    let images = psbx_tests::vm::images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{}/debian has no production image: scripts/test builds it (scripts/image/debian)",
        images.display()
    );
    psbx_tests::browser::require();

    // The internet: DNS and a git host serving both examples.
    let mut internet = Netns::new(&[]);
    let web = internet.routed([198, 51, 100]);
    let dns = internet.routed([198, 51, 100]);
    internet.dns_server(dns, &[("git.example.test", web)]);
    let site = tempfile::tempdir().unwrap();
    publish(site.path(), "notes");
    publish(site.path(), "shop");
    internet.serve_files(web, 80, site.path());

    let s = BoxServer::start(&format!(
        "network = true\nimage = \"debian\"\n\
         unit_vcpus = 2\nunit_memory_mib = 1536\nunit_disk_gb = 8\nboot_timeout = \"300s\"\n\
         [boxes.egress]\nresolvers = [\"{dns}\"]\n{TEST_RANGES}"
    ));
    let (ok, _, err) = s.cli_with_input(&["account", "set-password"], &format!("{PASSWORD}\n"));
    assert!(ok, "psbx account set-password: {err}");
    let mcp = format!("{}/mcp", s.url());

    // The agent: the first task, waiting for the person's answer.
    let prepare =
        std::fs::read_to_string(repo_root().join("tests/examples/stand-in-images.sh")).unwrap();
    let agent = {
        let key = s.key.clone();
        std::thread::spawn(move || {
            psbx_tests::python::run_json(
                "first_task.py",
                &[
                    &mcp,
                    &key,
                    "http://git.example.test/notes.git",
                    &prepare,
                    "600",
                ],
            )
        })
    };
    let review = wait::until(
        "the agent's review under \"Ready for you\"",
        Duration::from_secs(900),
        || {
            assert!(!agent.is_finished(), "the agent ended before handing over");
            let list = s.ok("GET", "/v1/reviews?state=waiting", None);
            list["reviews"].as_array().and_then(|r| r.first().cloned())
        },
    );
    let box_id = review["boxId"].as_str().unwrap().to_owned();
    let view = s.ok("GET", &format!("/v1/boxes/{box_id}"), None);
    let url = view["url"].as_str().unwrap().to_owned();

    // Example 1 through its box URL: the page, and a note through web, api and db.
    let notes = box_client(&s.url(), &url);
    let page = notes.get(&url).send().unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().unwrap().contains("<h1 id=\"title\">Notes</h1>"));
    let added = notes
        .post(format!("{url}api/notes"))
        .json(&json!({"text": "added through the box URL"}))
        .send()
        .unwrap();
    assert_eq!(added.status(), 201, "{:?}", added.text());
    let listed: Value = notes
        .get(format!("{url}api/notes"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        listed["notes"][0]["text"], "added through the box URL",
        "{listed}"
    );

    // Example 2, with the calls docs/examples.md lists, in the same box.
    exec(
        &s,
        &box_id,
        "git clone -q http://git.example.test/shop.git /work/shop && cd /work/shop && docker compose up -d 2>&1",
    );
    exec(
        &s,
        &box_id,
        "for i in $(seq 120); do curl -fsS -o /dev/null http://localhost:8090/ && exit 0; sleep 1; done; \
         cd /work/shop && docker compose logs 2>&1 | tail -40; exit 1",
    );
    let shop_url = port_url(&url, 8090);
    let shop = box_client(&s.url(), &shop_url);
    let page = shop.get(&shop_url).send().unwrap().text().unwrap();
    assert!(page.contains("id='left-mug'>12 left"), "{page}");
    let bought = shop
        .post(format!("{shop_url}buy"))
        .form(&[("sku", "mug")])
        .send()
        .unwrap();
    assert_eq!(bought.status(), 200);
    let page = bought.text().unwrap();
    assert!(
        page.contains("You bought a mug.") && page.contains("id='left-mug'>11 left"),
        "{page}"
    );

    // The person answers in the app, then shuts the box down.
    let person = psbx_tests::browser::run_json(
        "review.mjs",
        &json!({
            "baseUrl": s.url(),
            "account": "default",
            "password": PASSWORD,
            "reviewTitle": "Notes: the home page",
            "text": FEEDBACK,
            "shutDown": true,
        }),
    );
    assert_eq!(person["ok"], true, "{person}");
    let seen = agent.join().expect("the agent's thread");

    // The agent's shot was the notes page, returned as image content: its
    // blue Add button (#2457c5, style.css) is in it.
    let shot = &seen["shot"];
    assert_eq!(shot["value"]["mime"], "image/png", "{shot}");
    let images = shot["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{shot}");
    let png = STANDARD
        .decode(images[0]["data"].as_str().unwrap())
        .unwrap();
    let page = image::load_from_memory(&png).unwrap().to_rgb8();
    let button = page
        .pixels()
        .filter(|p| {
            p[0].abs_diff(0x24) < 24 && p[1].abs_diff(0x57) < 24 && p[2].abs_diff(0xc5) < 24
        })
        .count();
    assert!(button > 1000, "{button} pixels of the Add button's blue");
    let answered = &seen["review"];
    assert_eq!(answered["error"], false, "{answered}");
    assert_eq!(answered["value"]["state"], "answered", "{answered}");
    assert_eq!(answered["value"]["feedback"][0]["text"], FEEDBACK);
    assert_eq!(
        answered["images"].as_array().map(Vec::len),
        Some(1),
        "the drawn screenshot comes back: {answered}"
    );

    wait::until("the box's domain to go", Duration::from_secs(120), || {
        psbx_tests::vm::domain_state(&box_id)
            .is_none()
            .then_some(())
    });
    assert_eq!(s.db_box_state(&box_id).as_deref(), Some("stopped"));
}
