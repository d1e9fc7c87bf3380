//! `health`: what boxd reports about the box (uptime, load, memory, from
//! /proc, and its entries for the environment's addresses); and the boot id
//! its `info` gives.

use psbx_wire::boxd::{Health, PrivateEndpointHealth};

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn read(
    private_endpoints: Vec<PrivateEndpointHealth>,
    names: std::collections::BTreeMap<String, std::net::Ipv4Addr>,
) -> Health {
    let first_number = |path: &str| -> f64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0.0)
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = |key: &str| -> u64 {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Health {
        uptime_s: first_number("/proc/uptime"),
        load1: first_number("/proc/loadavg"),
        mem_total_kb: mem("MemTotal"),
        mem_available_kb: mem("MemAvailable"),
        private_endpoints,
        names,
    }
}

/// Answers `health`: the box now, and its entries.
pub async fn serve(incoming: psbx_wire::mux::Incoming, state: &super::common::Boxd) {
    super::common::answer::<psbx_wire::boxd::HealthRequest>(
        incoming.accept(),
        &read(state.private.health(), state.private.names()),
    )
    .await;
}
