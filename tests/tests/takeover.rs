//! The takeover page end to end: a real box (TCG, the real boxd and its
//! pty), a link from `POST /v1/boxes/{id}/takeover`, and Chromium typing at
//! the terminal (tests/browser/takeover.mjs); the link works once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::json;

#[test]
fn the_takeover_page_runs_a_shell_once_and_keeps_the_box_awake() {
    psbx_tests::browser::require();
    // Frozen after 8 s without activity: the terminal is held open 15 s.
    let s = BoxServer::start("idle_freeze = \"8s\"\npool_size = 0");
    let (status, started) = s.call("POST", "/v1/boxes", Some(json!({"name": "takeover"})));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();

    let (status, link) = s.call("POST", &format!("/v1/boxes/{id}/takeover"), None);
    assert_eq!(status, 201, "{link}");
    assert_eq!(link["boxId"], id.as_str());
    let url = link["url"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with(&format!("{}/takeover/tko_", s.url())),
        "{url}"
    );
    let token = url.rsplit('/').next().unwrap().to_owned();
    // Only the token's SHA-256 is stored.
    let count = |condition: String| {
        s.db_query(&format!(
            "SELECT count(*)::text AS v FROM takeover_links WHERE {condition}"
        ))
    };
    assert_eq!(count(format!("token_hash = '{token}'")), ["0"]);
    assert_eq!(
        count(format!(
            "token_hash = encode(sha256('{token}'::bytea), 'hex')"
        )),
        ["1"]
    );

    let seen = psbx_tests::browser::run_json("takeover.mjs", &json!({"url": url, "holdMs": 15000}));
    assert_eq!(seen["status"], 200, "{seen}");
    assert!(
        seen["csp"].as_str().unwrap().contains("script-src 'self'"),
        "{seen}"
    );
    assert_eq!(seen["referrerPolicy"], "no-referrer", "{seen}");
    assert_eq!(seen["answered"], true, "{seen}");
    assert_eq!(seen["utf8"], true, "{seen}");
    assert_eq!(seen["interrupted"], true, "{seen}");
    assert_eq!(seen["stillConnected"], true, "{seen}");
    assert_eq!(seen["againStatus"], 410, "{seen}");
    assert!(
        seen["againText"].as_str().unwrap().contains("already used"),
        "{seen}"
    );
    // Never frozen while the terminal was open.
    assert_eq!(s.db_box_state(&id).as_deref(), Some("running"));
    assert!(!psbx_tests::vm::has_saved_memory(&id));
}
