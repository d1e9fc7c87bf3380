//! The host's memory, watched: every few seconds the supervisor measures the
//! QEMU process of each box holding host memory (the ledger admits by these
//! figures, `machine/ledger.rs`) and reads the kernel's MemAvailable. Under
//! `pressure_available_mib` it freezes the idlest running boxes (oldest last
//! activity first; the freeze is the managed save to disk) until what they
//! use covers the shortfall; the next sample looks again.

use super::HostParts;
use crate::box_actor::Freeze;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::machine::Machine;
use crate::machine::meminfo::HostMemory;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// How often the boxes are measured and the host's memory read.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// A running box that pressure may freeze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: BoxId,
    pub last_activity_at: DateTime<Utc>,
    /// What freezing it gives back (its measured use, else its promise).
    pub rss_mib: u64,
}

/// The host is short of memory: these boxes are to freeze.
#[derive(Debug)]
pub(super) struct Pressure {
    pub available_mib: u64,
    pub threshold_mib: u64,
    pub freeze: Vec<Candidate>,
}

/// The idlest candidates whose use adds up to `shortfall_mib` (at least one
/// when there is any).
pub fn pick_idlest(mut candidates: Vec<Candidate>, shortfall_mib: u64) -> Vec<Candidate> {
    candidates.sort_by_key(|c| c.last_activity_at);
    let mut freed = 0u64;
    let mut out = Vec::new();
    for c in candidates {
        if freed >= shortfall_mib && !out.is_empty() {
            break;
        }
        freed = freed.saturating_add(c.rss_mib);
        out.push(c);
    }
    out
}

/// Measures the boxes holding host memory and reads the host's memory
/// (blocking); says which boxes to freeze when MemAvailable is under the
/// threshold.
pub(super) fn sample(machine: &Machine) -> Result<Option<Pressure>, BoxError> {
    for id in machine.held_boxes() {
        match machine.host.memory_rss_mib(&Machine::domain_name(&id)) {
            Ok(Some(rss)) => machine.measured(&id, rss),
            Ok(None) => {}
            Err(e) => tracing::debug!(box_id = %id, error = %e, "could not measure a box"),
        }
    }
    let memory = HostMemory::read().map_err(|e| BoxError::NoHost(e.to_string()))?;
    let threshold = machine.settings.pressure_available_mib;
    if threshold == 0 || memory.available_mib >= threshold {
        return Ok(None);
    }
    let candidates = machine
        .store
        .live_boxes_on_host(&machine.name)?
        .into_iter()
        .filter(|r| r.state == crate::box_state::BoxState::Running)
        .map(|r| Candidate {
            rss_mib: machine.rss_mib(&r.id).unwrap_or(r.memory_mib),
            id: r.id,
            last_activity_at: r.last_activity_at,
        })
        .collect();
    Ok(Some(Pressure {
        available_mib: memory.available_mib,
        threshold_mib: threshold,
        freeze: pick_idlest(candidates, threshold - memory.available_mib),
    }))
}

impl Pressure {
    /// Sends the freezes, and says what and why.
    pub(super) fn relieve(self, parts: &HostParts) {
        if self.freeze.is_empty() {
            tracing::warn!(
                available_mib = self.available_mib,
                threshold_mib = self.threshold_mib,
                "host memory is low and no running box is left to freeze"
            );
            return;
        }
        for c in self.freeze {
            tracing::warn!(
                box_id = %c.id,
                available_mib = self.available_mib,
                threshold_mib = self.threshold_mib,
                box_rss_mib = c.rss_mib,
                last_activity_at = %c.last_activity_at,
                "host memory is low (boxes.pressure_available_mib): freezing the idlest running box"
            );
            if let Some(actor) = parts.registry.actor(&c.id) {
                actor.do_send(Freeze);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(n: u8, minutes_ago: i64, rss_mib: u64) -> Candidate {
        Candidate {
            id: BoxId::parse(&format!("box_{n:0>20}")).unwrap(),
            last_activity_at: Utc::now() - chrono::Duration::minutes(minutes_ago),
            rss_mib,
        }
    }

    #[test]
    fn the_idlest_go_first_until_the_shortfall_is_covered() {
        let all = vec![
            candidate(1, 1, 500),
            candidate(2, 30, 400),
            candidate(3, 10, 300),
        ];
        let ids = |v: Vec<Candidate>| v.into_iter().map(|c| c.id.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ids(pick_idlest(all.clone(), 600)),
            ids(vec![all[1].clone(), all[2].clone()])
        );
        assert_eq!(ids(pick_idlest(all.clone(), 1)), ids(vec![all[1].clone()]));
        assert_eq!(pick_idlest(all.clone(), 10_000).len(), 3);
        assert!(pick_idlest(Vec::new(), 10).is_empty());
    }
}
