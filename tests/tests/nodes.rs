//! Several nodes on one database (issue 33): a host node with boxes and an
//! API-only node, linked by mutual TLS under the cluster certificate both
//! derive from the one master key. Through the API-only node: a start is
//! placed on the host node, the box answers (REST, exec), its node killed (-9)
//! answers 503 `host_unavailable` once the lease has run out, and after a
//! restart the same box (same boot) answers again.
//!
//! Cost: one test-image box (a few seconds to boot under TCG) and three
//! starts of `psbx serve`; the lease is 4 s, so the wait for it is short.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::ServerProcess;
use psbx_tests::api;
use psbx_tests::vm::BoxServer;
use serde_json::{Value, json};
use std::time::Duration;

use psbx_tests::free_port;

#[test]
fn an_api_only_node_answers_for_a_box_on_another_node_and_says_when_its_host_is_gone() {
    let cluster = |host: &str, port: u16| {
        format!("[cluster]\nhost = \"{host}\"\nlisten = \"127.0.0.1:{port}\"\nlease = \"4s\"\n")
    };
    let mut a = BoxServer::start_with(&cluster("host-a", free_port()), "");
    let data_a = a.dir.path().join("data");
    let dir_b = tempfile::tempdir().unwrap();
    let config_b = dir_b.path().join("psbx.toml");
    std::fs::write(
        &config_b,
        format!(
            "master_key_file = \"{}\"\n{}",
            data_a.join("master.key").display(),
            cluster("api", free_port())
        ),
    )
    .unwrap();
    let b = ServerProcess::start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config_b.to_str().unwrap(),
            "--data-dir",
            dir_b.path().join("data").to_str().unwrap(),
        ],
        &[
            ("DATABASE_URL", a.db.url()),
            ("PSBX_BOXES__ENABLED", "false"),
        ],
    );
    let (url_b, key) = (b.url.clone(), a.key.clone());
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
    b.stop();
}
