//! A ten-minute command through `sandbox_exec`, with the official Python MCP
//! SDK against a real box: the call holds no HTTP worker (the server runs one,
//! and answers other calls meanwhile), progress arrives all along, the box
//! does not freeze under a command someone waits for, and the exit code is
//! read afterwards. It sleeps most of the time, so it is not in the `vm` group.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::python::run_json;
use psbx_tests::vm::BoxServer;

#[test]
fn a_ten_minute_command_holds_no_worker_sends_progress_and_its_exit_code_is_read_afterwards() {
    let s = BoxServer::start_with("http_workers = 1", "idle_freeze = \"2m\"");
    let url = format!("{}/mcp", s.url());
    let seen = run_json("exec_client.py", &[&url, &s.key, "long"]);
    assert_eq!(seen["started"]["error"], false, "{seen}");

    let first = &seen["first"]["value"];
    assert_eq!(first["running"], true, "{seen}");
    let pid = first["pid"].as_u64().unwrap();
    assert!(seen["first_progress"].as_u64().unwrap() >= 3, "{seen}");

    // Other calls were answered while the long one waited, on the only worker.
    let answered = seen["answered_meanwhile"].as_array().unwrap();
    assert_eq!(answered.len(), 5, "{seen}");
    for a in answered {
        assert_eq!(a["error"], false, "{seen}");
        assert_eq!(a["while_waiting"], true, "{seen}");
    }

    let second = &seen["second"]["value"];
    assert_eq!(second["running"], false, "{seen}");
    assert_eq!(second["pid"].as_u64(), Some(pid), "{seen}");
    assert_eq!(second["exitCode"], 7, "{seen}");
    assert!(
        second["output"]["text"]
            .as_str()
            .unwrap()
            .ends_with("tick 60\n"),
        "{seen}"
    );
    // Progress every few seconds for the whole ten minutes (clients give up
    // on calls that stay silent for about five).
    assert!(seen["progress_count"].as_u64().unwrap() > 100, "{seen}");
    assert!(
        seen["largest_progress_gap_s"].as_f64().unwrap() < 60.0,
        "{seen}"
    );
    assert!(
        seen["last_progress"].as_str().unwrap().contains("tick"),
        "{seen}"
    );

    // The exit code, read again afterwards.
    let processes = seen["status"]["value"]["processes"].as_array().unwrap();
    let p = processes
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("process {pid} not in {seen}"));
    assert_eq!(p["exitCode"], 7, "{seen}");
    assert_eq!(p["running"], false, "{seen}");
    assert_eq!(seen["status"]["value"]["state"], "running", "{seen}");
    assert_eq!(seen["stopped"]["value"]["state"], "stopped", "{seen}");
}
