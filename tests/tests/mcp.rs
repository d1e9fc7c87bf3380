//! `/mcp` with real MCP clients (the official Python SDK) on real boxes.
//! `sandbox_exec`'s waiting, capping and time limits run in-process
//! (`server/tests/box_api/mcp.rs`); the story below runs `sandbox_exec` on a
//! real box.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::python::run_json;
use psbx_tests::vm::BoxServer;
use serde_json::{Value, json};

fn run_client(s: &BoxServer, mode: &str) -> Value {
    run_json("client.py", &[&format!("{}/mcp", s.url()), &s.key, mode])
}

#[test]
fn python_sdk_clients_start_a_box_run_a_command_and_stop_it_on_both_revisions() {
    let s = BoxServer::start("");
    for mode in ["legacy", "2026-07-28"] {
        let seen = run_client(&s, mode);
        for tool in [
            "sandbox_environments",
            "sandbox_sync",
            "sandbox_shot",
            "sandbox_review",
            "sandbox_exec",
            "sandbox_list",
            "sandbox_start",
            "sandbox_status",
            "sandbox_stop",
            "sandbox_wire",
        ] {
            assert!(
                seen["tools"].as_array().unwrap().iter().any(|t| t == tool),
                "{mode}: no {tool}"
            );
        }
        // Schemas every client accepts: no $ref, anyOf, nullable type arrays or formats.
        let schemas = seen["schemas"].to_string();
        // (`"format":"…"` is the keyword; a property may be named `format`.)
        for banned in [
            "$ref",
            "anyOf",
            "oneOf",
            "\"null\"",
            "\"format\":\"",
            "$schema",
        ] {
            assert!(!schemas.contains(banned), "{mode}: {banned} in {schemas}");
        }
        assert_eq!(seen["started_error"], false, "{seen}");
        assert_eq!(seen["started"]["state"], "running", "{seen}");
        assert_eq!(seen["started"]["services"][0]["mode"], "box", "{seen}");
        // sandbox_wire declares a name later: the box's view, the same shape.
        assert_eq!(seen["wired_error"], false, "{seen}");
        let web = &seen["wired"]["services"][1];
        assert_eq!(
            (&web["name"], &web["port"], &web["targetPort"], &web["mode"]),
            (
                &json!("web.svc.local"),
                &json!(80),
                &json!(3000),
                &json!("box")
            ),
            "{seen}"
        );
        assert!(
            web["address"]
                .as_str()
                .is_some_and(|a| a.starts_with("198.1")),
            "{seen}"
        );
        // External mode needs a base URL, and the error says so.
        assert_eq!(seen["external_error"], true, "{seen}");
        assert!(
            seen["external_text"]
                .as_str()
                .unwrap()
                .contains("no external base URL"),
            "{seen}"
        );
        assert_eq!(seen["exec"]["exitCode"], 0, "{seen}");
        assert!(
            seen["exec"]["output"]["text"]
                .as_str()
                .unwrap()
                .starts_with("Linux box "),
            "{seen}"
        );
        assert_eq!(seen["environments"]["environments"], json!([]), "{seen}");
        assert!(
            seen["environments_text"]
                .as_str()
                .unwrap()
                .contains("POST /v1/environments"),
            "{seen}"
        );
        assert_eq!(seen["unknown_error"], true, "{seen}");
        assert!(
            seen["unknown_text"]
                .as_str()
                .unwrap()
                .contains("sandbox_list"),
            "{seen}"
        );
        assert_eq!(seen["stopped"]["state"], "stopped", "{seen}");
    }
}

#[test]
fn mcp_refuses_foreign_origins_missing_keys_mismatched_headers_and_unknown_versions() {
    let s = BoxServer::start("");
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    });
    let client = reqwest::blocking::Client::new();
    let post = || {
        client
            .post(format!("{}/mcp", s.url()))
            .header("accept", "application/json, text/event-stream")
            .json(&body)
    };
    let res = post().send().unwrap();
    assert_eq!(res.status().as_u16(), 401);
    assert!(
        res.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let res = post()
        .bearer_auth(&s.key)
        .header("origin", "http://evil.example")
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    let res = post().bearer_auth(&s.key).send().unwrap();
    assert_eq!(res.status().as_u16(), 200);

    // Stateless: no GET stream and no session to DELETE.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let res = client
            .request(method.clone(), format!("{}/mcp", s.url()))
            .bearer_auth(&s.key)
            .header("accept", "text/event-stream")
            .send()
            .unwrap();
        assert_eq!(res.status().as_u16(), 405, "{method}");
        assert_eq!(res.headers()["allow"], "POST", "{method}");
    }

    // 2026-07-28: headers that disagree with the body, and versions not served.
    let call = |version: &str, method: &str, name: Option<&str>, body: Value| {
        let mut req = client
            .post(format!("{}/mcp", s.url()))
            .bearer_auth(&s.key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .header("mcp-method", method)
            .json(&body);
        if let Some(name) = name {
            req = req.header("mcp-name", name);
        }
        let res = req.send().unwrap();
        let status = res.status().as_u16();
        (status, res.text().unwrap())
    };
    let meta =
        |version: &str| serde_json::json!({ "io.modelcontextprotocol/protocolVersion": version });
    let list = |version: &str| serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta(version)}});
    let error_of =
        |text: &str| -> Value { serde_json::from_str::<Value>(text).unwrap()["error"].clone() };

    let (status, text) = call(
        "2026-07-28",
        "tools/list",
        None,
        serde_json::json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "sandbox_list", "arguments": {}, "_meta": meta("2026-07-28")}
        }),
    );
    assert_eq!(status, 400, "{text}");
    assert_eq!(error_of(&text)["code"], -32020, "method mismatch: {text}");

    let (status, text) = call(
        "2026-07-28",
        "tools/call",
        Some("sandbox_stop"),
        serde_json::json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "sandbox_list", "arguments": {}, "_meta": meta("2026-07-28")}
        }),
    );
    assert_eq!(status, 400, "{text}");
    assert_eq!(error_of(&text)["code"], -32020, "name mismatch: {text}");

    let (status, text) = call("2026-07-28", "tools/list", None, list("2025-11-25"));
    assert_eq!(status, 400, "{text}");
    assert_eq!(error_of(&text)["code"], -32020, "version mismatch: {text}");

    let (_, text) = call("2030-01-01", "tools/list", None, list("2030-01-01"));
    let error = error_of(&text);
    assert_eq!(error["code"], -32022, "unsupported version: {text}");
    let supported = error["data"]["supported"].to_string();
    assert!(
        supported.contains("2025-11-25") && supported.contains("2026-07-28"),
        "{text}"
    );

    // An older-style request naming a version this server does not speak.
    let res = client
        .post(format!("{}/mcp", s.url()))
        .bearer_auth(&s.key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "1999-01-01")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}))
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    assert!(res.text().unwrap().contains("1999-01-01"));
}
