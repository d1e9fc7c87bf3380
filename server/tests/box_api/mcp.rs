//! `sandbox_exec` over `/mcp` with a real MCP client (the official Python
//! SDK, `tests/mcp/exec_client.py`), in-process (was `tests/tests/mcp.rs`'s
//! VM story): a command outliving `wait_s` is handed back with its pid and
//! waited for again; 50 MB of output come back capped, whole in the log
//! boxd writes; `timeout_s` kills; `sandbox_status` lists the commands. The
//! same path on a real box: `tests/tests/mcp.rs`'s Python SDK story
//! (`sandbox_exec` of `uname`) and `mcp_long.rs`.

use crate::world::World;
use psbx_tests::python::run_json;

#[test]
fn sandbox_exec_waits_then_hands_back_the_pid_caps_output_and_kills_on_timeout() {
    let s = World::start();
    let url = format!("{}/mcp", s.url);
    let seen = run_json("exec_client.py", &[&url, &s.key, "work"]);
    assert_eq!(seen["started"]["error"], false, "{seen}");

    // wait_s passed: still running, with its pid and output so far.
    let waited = &seen["waited"]["value"];
    assert_eq!(waited["running"], true, "{seen}");
    assert!(waited["pid"].as_u64().unwrap() > 0, "{seen}");
    assert!(
        waited["output"]["text"].as_str().unwrap().contains("begun"),
        "{seen}"
    );
    assert!(
        seen["waited"]["text"].as_str().unwrap().contains("pid"),
        "{seen}"
    );
    // Waited for again by pid: its end, its exit code, all of its output.
    let again = &seen["again"]["value"];
    assert_eq!(again["running"], false, "{seen}");
    assert_eq!(again["exitCode"], 3, "{seen}");
    assert_eq!(again["pid"], waited["pid"], "{seen}");
    assert_eq!(again["output"]["text"], "begun\nfinished\n", "{seen}");
    assert!(!seen["progress"].as_array().unwrap().is_empty(), "{seen}");

    // 50 MB of output: head and tail, the total and what was cut.
    let big = &seen["big"]["value"];
    assert_eq!(big["exitCode"], 0, "{seen}");
    let total = big["output"]["totalBytes"].as_u64().unwrap();
    assert!(total > 50_000_000, "{seen}");
    assert!(
        big["output"]["cutBytes"].as_u64().unwrap() > total - 40_000,
        "{seen}"
    );
    assert!(seen["big_text_len"].as_u64().unwrap() < 40_000, "{seen}");
    assert!(
        seen["big_tail"].as_str().unwrap().ends_with("the-end\n"),
        "{seen}"
    );
    assert!(big["next"].as_str().unwrap().contains(".log"), "{seen}");
    assert_eq!(
        seen["big_log_size"]["value"]["output"]["text"]
            .as_str()
            .unwrap()
            .trim(),
        total.to_string(),
        "{seen}"
    );

    // timeout_s kills the command.
    let killed = &seen["killed"]["value"];
    assert_eq!(killed["timedOut"], true, "{seen}");
    assert_eq!(killed["running"], false, "{seen}");
    // A background command's answer names the log boxd writes, and
    // sandbox_status lists the commands in the shape GET .../processes has.
    let background = &seen["background"]["value"];
    assert_eq!(background["running"], true, "{seen}");
    let listed = |pid: &serde_json::Value| {
        seen["status"]["value"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == *pid)
            .cloned()
            .unwrap_or_else(|| panic!("process {pid} is not listed: {seen}"))
    };
    let pid = &background["pid"];
    let log = background["log"].as_str().unwrap();
    assert!(log.ends_with(&format!("/{pid}.log")), "{seen}");
    let running = listed(pid);
    assert_eq!(running["log"], log, "{seen}");
    assert_eq!(running["running"], true, "{seen}");
    assert_eq!(running["timedOut"], false, "{seen}");
    assert!(running["exitCode"].is_null(), "{seen}");
    let ended = listed(&killed["pid"]);
    assert_eq!(ended["running"], false, "{seen}");
    assert_eq!(ended["timedOut"], true, "{seen}");
    assert_eq!(ended["log"], killed["log"], "{seen}");
    // Bad calls are results that say what to do.
    assert_eq!(seen["no_cmd"]["error"], true, "{seen}");
    assert!(
        seen["no_cmd"]["text"].as_str().unwrap().contains("cmd"),
        "{seen}"
    );
    assert_eq!(seen["unknown_pid"]["error"], true, "{seen}");
    assert_eq!(seen["stopped"]["value"]["state"], "stopped", "{seen}");
}
