//! Start-up reconciliation of libvirt's `psbx-` domains with the store. Only
//! this installation's domains (by their metadata) are considered: a domain
//! without a live row is destroyed; a row whose VM is gone or
//! half-made is marked failed; pooled boxes are thrown away (the pool is
//! rebuilt); running and frozen boxes are handed back for adoption.
//!
//! A server killed during a freeze leaves libvirt saving the box (the domain
//! paused until the save ends) or saved (shut off with a managed save) while
//! the row says running: the save is waited for, and a saved box is recorded
//! frozen, its memory kept.

use crate::box_state::BoxState;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::machine::Machine;
use crate::store::{BoxRecord, Transition};
use psbx_libvirt::{DOMAIN_PREFIX, DomainStatus};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A box to put back under an actor.
pub(super) enum Adopt {
    /// Its VM runs: reconnect to boxd and re-arm the timers. The row may
    /// still say frozen (the server died during a thaw).
    Running(BoxRecord),
    /// Saved by libvirt: only the expiry timer runs.
    Frozen(BoxRecord),
}

pub(super) fn reconcile(machine: &Machine) -> Result<Vec<Adopt>, BoxError> {
    let mut domains: HashMap<String, DomainStatus> = machine
        .host
        .list()?
        .into_iter()
        .filter(|d| d.owner.as_deref() == Some(machine.owner.as_str()))
        .map(|d| (d.name, d.status))
        .collect();
    let mut adopt = Vec::new();
    for row in machine.store.live_boxes_on_host(&machine.name)? {
        let status = domains.remove(&Machine::domain_name(&row.id));
        match (row.state, status) {
            (BoxState::Pooled, _) => {
                machine.teardown(&row.id)?;
                machine.store.delete_pooled_box(&row.id)?;
            }
            (BoxState::Creating | BoxState::Booting, _) => {
                machine.fail_box(&row, "the server stopped while this box was starting")?;
            }
            (BoxState::Running, Some(DomainStatus::Running)) => adopt.push(Adopt::Running(row)),
            (BoxState::Running, Some(DomainStatus::Paused)) => {
                let name = Machine::domain_name(&row.id);
                match machine.host.resume(&name) {
                    Ok(()) => adopt.push(Adopt::Running(row)),
                    // Paused by a save still under way: wait for its end.
                    Err(e) => match after_save(machine, &name) {
                        Some(DomainStatus::ShutOff { saved: true }) => {
                            adopt.extend(saved(machine, row)?)
                        }
                        Some(DomainStatus::Running) => adopt.push(Adopt::Running(row)),
                        _ => {
                            machine.fail_box(&row, &format!("its VM could not be resumed: {e}"))?;
                        }
                    },
                }
            }
            (BoxState::Running, Some(DomainStatus::ShutOff { saved: true })) => {
                adopt.extend(saved(machine, row)?);
            }
            (BoxState::Frozen, Some(DomainStatus::ShutOff { saved: true })) => {
                adopt.push(Adopt::Frozen(row));
            }
            (BoxState::Frozen, Some(DomainStatus::Running)) => adopt.push(Adopt::Running(row)),
            (state, status) => {
                let found = match status {
                    None => "gone".to_owned(),
                    Some(s) => format!("{s:?}"),
                };
                machine.fail_box(
                    &row,
                    &format!("its VM was {found} when the server restarted (the box was {state})"),
                )?;
            }
        }
    }
    for (name, _) in domains {
        tracing::warn!(domain = %name, "removing a psbx domain that has no box");
        machine.host.remove(&name)?;
        if let Some(id) = name
            .strip_prefix(DOMAIN_PREFIX)
            .and_then(|id| BoxId::parse(id).ok())
        {
            machine.teardown(&id)?;
        }
    }
    Ok(adopt)
}

/// How long a managed save begun before the restart may still take.
const SAVE_WAIT: Duration = Duration::from_secs(120);

/// The domain's status once it is no longer paused (a save under way ends
/// shut off, saved), or `None` if it still is after [`SAVE_WAIT`].
fn after_save(machine: &Machine, name: &str) -> Option<DomainStatus> {
    let deadline = Instant::now() + SAVE_WAIT;
    while Instant::now() < deadline {
        let status = machine
            .host
            .list()
            .ok()?
            .into_iter()
            .find(|d| d.name == name)
            .map(|d| d.status);
        if status != Some(DomainStatus::Paused) {
            return status;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

/// A box the server froze as it died: its save is done, so it is frozen.
fn saved(machine: &Machine, row: BoxRecord) -> Result<Option<Adopt>, BoxError> {
    tracing::info!(box_id = %row.id, "the box was saved as the server stopped: it is frozen");
    let frozen = machine.store.transition_box(
        &row.id,
        BoxState::Running,
        BoxState::Frozen,
        Transition::default(),
    )?;
    Ok(frozen.map(Adopt::Frozen))
}
