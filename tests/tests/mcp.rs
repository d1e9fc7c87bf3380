//! `/mcp` with real MCP clients (the official Python SDK) on real boxes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// The project's Python venv, made by scripts/setup.
fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    assert!(
        venv.is_file(),
        "{} is missing: run scripts/setup (it makes the venv with the mcp package)",
        venv.display()
    );
    venv
}

fn run_client(s: &BoxServer, mode: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/client.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(format!("{}/mcp", s.url()))
        .arg(&s.key)
        .arg(mode)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the MCP client failed ({mode}):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn python_sdk_clients_start_a_box_run_a_command_and_stop_it_on_both_revisions() {
    let s = BoxServer::start("pool_size = 0\nidle_freeze = \"1h\"");
    for mode in ["legacy", "2026-07-28"] {
        let seen = run_client(&s, mode);
        for tool in [
            "sandbox_exec",
            "sandbox_list",
            "sandbox_start",
            "sandbox_status",
            "sandbox_stop",
        ] {
            assert!(
                seen["tools"].as_array().unwrap().iter().any(|t| t == tool),
                "{mode}: no {tool}"
            );
        }
        // Schemas every client accepts: no $ref, anyOf, nullable type arrays or formats.
        let schemas = seen["schemas"].to_string();
        for banned in ["$ref", "anyOf", "oneOf", "\"null\"", "format", "$schema"] {
            assert!(!schemas.contains(banned), "{mode}: {banned} in {schemas}");
        }
        assert_eq!(seen["started_error"], false, "{seen}");
        assert_eq!(seen["started"]["state"], "running", "{seen}");
        assert_eq!(seen["exec"]["exitCode"], 0, "{seen}");
        assert!(
            seen["exec"]["stdout"]["text"]
                .as_str()
                .unwrap()
                .starts_with("Linux box "),
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
fn mcp_refuses_foreign_origins_and_missing_keys() {
    let s = BoxServer::start("pool_size = 0");
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
}
