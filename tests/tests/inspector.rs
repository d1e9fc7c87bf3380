//! `/mcp` with the MCP Inspector CLI (`@modelcontextprotocol/inspector@1.0.3`,
//! installed by scripts/setup under tests/inspector; it speaks 2025-11-25
//! through the TypeScript SDK): list the tools, start a real box, run
//! `uname -a` in it, stop it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn inspector(s: &BoxServer, args: &[&str]) -> Value {
    let bin =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("inspector/node_modules/.bin/mcp-inspector");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/setup (it installs the MCP Inspector CLI)",
        bin.display()
    );
    let out = Command::new(&bin)
        .arg("--cli")
        .arg(format!("{}/mcp", s.url()))
        .args(["--transport", "http"])
        .arg("--header")
        .arg(format!("Authorization: Bearer {}", s.key))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Inspector failed ({args:?}):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It prints a deprecation banner before the JSON.
    let json = stdout
        .find('{')
        .map(|at| &stdout[at..])
        .unwrap_or_else(|| panic!("no JSON from the Inspector ({args:?}):\n{stdout}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn call(s: &BoxServer, tool: &str, args: &[&str]) -> Value {
    let mut all = vec!["--method", "tools/call", "--tool-name", tool];
    for a in args {
        all.extend(["--tool-arg", a]);
    }
    inspector(s, &all)
}

#[test]
fn the_inspector_cli_lists_tools_starts_a_box_runs_a_command_and_stops_it() {
    let s = BoxServer::start("");
    let tools = inspector(&s, &["--method", "tools/list"]);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for tool in [
        "sandbox_start",
        "sandbox_status",
        "sandbox_stop",
        "sandbox_list",
        "sandbox_exec",
    ] {
        assert!(names.contains(&tool), "no {tool} in {names:?}");
    }

    let started = call(&s, "sandbox_start", &["name=inspector"]);
    assert_ne!(started["isError"], true, "{started}");
    let id = started["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        started["structuredContent"]["state"], "running",
        "{started}"
    );

    let ran = call(&s, "sandbox_exec", &[&format!("id={id}"), "cmd=uname -a"]);
    assert_ne!(ran["isError"], true, "{ran}");
    assert_eq!(ran["structuredContent"]["exitCode"], 0, "{ran}");
    assert!(
        ran["structuredContent"]["output"]["text"]
            .as_str()
            .unwrap()
            .starts_with("Linux box "),
        "{ran}"
    );
    assert!(
        ran["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("exit code 0"),
        "{ran}"
    );

    let stopped = call(&s, "sandbox_stop", &[&format!("id={id}")]);
    assert_eq!(
        stopped["structuredContent"]["state"], "stopped",
        "{stopped}"
    );
    let again = call(&s, "sandbox_exec", &[&format!("id={id}"), "cmd=echo again"]);
    assert_eq!(again["isError"], true, "{again}");
    assert!(
        again["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("sandbox_start"),
        "{again}"
    );
}
