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
    // Terminals close after 20 s without input: the idle one below waits
    // that long (about 25 s more on the box this test boots anyway).
    let s = BoxServer::start_with("[takeover]\nidle_timeout = \"20s\"", "idle_freeze = \"8s\"");
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

    // MCP's sandbox_status makes one too when asked, in the same shape.
    let status = mcp_status(&s, &id);
    let made = &status["result"]["structuredContent"]["takeover"];
    assert_eq!(made["boxId"], id.as_str(), "{status}");
    assert!(made["expiresAt"].is_string(), "{status}");
    let other = made["url"].as_str().unwrap();
    assert!(
        other.starts_with(&format!("{}/takeover/tko_", s.url())) && other != url,
        "{status}"
    );

    let new_link = || {
        let (status, link) = s.call("POST", &format!("/v1/boxes/{id}/takeover"), None);
        assert_eq!(status, 201, "{link}");
        link["url"].as_str().unwrap().to_owned()
    };
    let seen = psbx_tests::browser::run_json(
        "takeover.mjs",
        &json!({
            "url": url, "holdMs": 15000,
            "idleUrl": new_link(), "ownerUrl": new_link(),
            "api": {"base": s.url(), "key": s.key, "boxId": id},
        }),
    );
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
    // Loading the page spent nothing: the terminal opened on the click.
    assert_eq!(seen["readyBeforeClick"], true, "{seen}");
    assert_eq!(seen["unspentBeforeClick"], 200, "{seen}");
    assert_eq!(seen["againStatus"], 410, "{seen}");
    // psbx closed the terminal nobody typed at, and said why.
    assert!(
        seen["idleClosed"]
            .as_str()
            .unwrap()
            .contains("20 s without input"),
        "{seen}"
    );
    // The owner saw the open terminal and closed it.
    let listed = seen["listed"]["terminals"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{seen}");
    assert!(
        listed[0]["id"].as_str().unwrap().starts_with("term_"),
        "{seen}"
    );
    assert_eq!(listed[0]["boxId"], id.as_str(), "{seen}");
    assert_eq!(seen["ownerClose"]["status"], 200, "{seen}");
    assert_eq!(
        seen["ownerClose"]["body"]["terminals"][0]["id"], listed[0]["id"],
        "{seen}"
    );
    assert!(
        seen["ownerClosed"]
            .as_str()
            .unwrap()
            .contains("closed by the box's owner"),
        "{seen}"
    );
    assert_eq!(seen["listedAfter"]["terminals"], json!([]), "{seen}");
    assert!(
        seen["againText"].as_str().unwrap().contains("already used"),
        "{seen}"
    );
    // Never frozen while the terminal was open.
    assert_eq!(s.db_box_state(&id).as_deref(), Some("running"));
    assert!(!psbx_tests::vm::has_saved_memory(&id));
}

/// `sandbox_status {id, takeover: true}` over `/mcp` (2026-07-28, session-free).
fn mcp_status(s: &BoxServer, id: &str) -> serde_json::Value {
    let version = "2026-07-28";
    let text = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", s.url()))
        .bearer_auth(&s.key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "sandbox_status")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sandbox_status", "arguments": {"id": id, "takeover": true},
                       "_meta": {
                           "io.modelcontextprotocol/protocolVersion": version,
                           "io.modelcontextprotocol/clientInfo": {"name": "takeover test", "version": "1"},
                           "io.modelcontextprotocol/clientCapabilities": {}
                       }}
        }))
        .send()
        .unwrap()
        .text()
        .unwrap();
    // A JSON answer, or one server-sent event carrying it.
    let body = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .map_or(text.as_str(), str::trim);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
}
