//! `psbx hosts`: the operator's view of the libvirt hosts and their nodes
//! (`list`: each host, the node holding its lease, the lease, what it has
//! room for, its pool and its boxes), and `drain` (no more placements on a
//! host: its node moves its frozen boxes to other hosts).

use super::boxes::time;
use crate::config::Config;
use crate::database::{Database, Opener};
use psbx_actors::store::HostRecord;

#[derive(Debug, clap::Subcommand)]
pub enum HostsCommand {
    /// List the libvirt hosts, their nodes and leases, and what runs on them.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Stop placing boxes on a host (`--undo` places there again).
    Drain {
        /// The host's name, as `psbx hosts list` shows it.
        host: String,
        #[arg(long)]
        undo: bool,
    },
}

pub fn run(config: &Config, command: HostsCommand) -> anyhow::Result<()> {
    let database = Database::open(config, Opener::Command)?;
    match command {
        HostsCommand::List { json } => {
            let hosts = database.store.list_hosts()?;
            if json {
                for h in &hosts {
                    println!("{}", as_json(h));
                }
                return Ok(());
            }
            println!(
                "{:<20} {:<34} {:<28} {:<5} {:>5} {:>10} {:>14} {:<10} BOXES",
                "HOST", "NODE", "LEASE", "ACCEL", "CPUS", "MEMORY", "FREE", "POOL"
            );
            for h in &hosts {
                println!(
                    "{:<20} {:<34} {:<28} {:<5} {:>5} {:>7}MiB {:>14} {:<10} {}",
                    h.name,
                    node(h),
                    lease(h),
                    h.accel,
                    h.cpus,
                    h.memory_mib,
                    format!("{:.0}cpu {}MiB", h.free_cpus, h.free_memory_mib),
                    pool(h),
                    boxes(h)
                );
            }
        }
        HostsCommand::Drain { host, undo } => {
            if !database.store.set_host_draining(&host, !undo)? {
                anyhow::bail!("no host named {host:?}: `psbx hosts list` shows their names");
            }
            if undo {
                println!("host {host} takes new boxes again");
            } else {
                println!("host {host} takes no new boxes");
            }
        }
    }
    Ok(())
}

fn node(h: &HostRecord) -> String {
    match (&h.server_id, &h.node_hostname) {
        (Some(id), Some(on)) => format!("{id} ({on})"),
        (Some(id), None) => id.to_string(),
        _ => "-".to_owned(),
    }
}

fn lease(h: &HostRecord) -> String {
    let state = if h.leased {
        "held"
    } else if h.lease_expires_at.is_some() {
        "lapsed"
    } else {
        "released"
    };
    let draining = if h.draining { ", draining" } else { "" };
    format!("{state} #{}{draining}", h.lease_epoch)
}

fn pool(h: &HostRecord) -> String {
    if h.pool.values().all(|n| *n == 0) {
        return "-".to_owned();
    }
    h.pool
        .iter()
        .map(|(size, n)| format!("{n}×{size}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn boxes(h: &HostRecord) -> String {
    if h.boxes.is_empty() {
        return "none".to_owned();
    }
    h.boxes
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn as_json(h: &HostRecord) -> serde_json::Value {
    serde_json::json!({
        "name": h.name,
        "uri": h.uri,
        "node": h.server_id.as_ref().map(ToString::to_string),
        "nodeHostname": h.node_hostname,
        "advertise": h.advertise,
        "leased": h.leased,
        "leaseEpoch": h.lease_epoch,
        "leaseExpiresAt": h.lease_expires_at.map(|t| time(Some(t))),
        "draining": h.draining,
        "accel": h.accel,
        "cpus": h.cpus,
        "memoryMib": h.memory_mib,
        "freeCpus": h.free_cpus,
        "freeMemoryMib": h.free_memory_mib,
        "pool": h.pool.iter().map(|(s, n)| (s.to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
        "boxes": h.boxes.iter().map(|(s, n)| (s.clone(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
        "updatedAt": time(Some(h.updated_at)),
    })
}
