//! Start-up reconciliation of libvirt's `psbx-` domains with the store. Only
//! this installation's domains (by their metadata) are considered: a domain
//! without a live row is destroyed; a row whose VM is gone or
//! half-made is marked failed; pooled boxes are thrown away (the pool is
//! rebuilt); running and frozen boxes are handed back for adoption.

use super::shared::HostShared;
use crate::box_actor::state::BoxState;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::store::BoxRecord;
use psbx_libvirt::{DOMAIN_PREFIX, DomainStatus};
use std::collections::HashMap;

/// A box to put back under an actor.
pub(super) enum Adopt {
    /// Its VM runs: reconnect to boxd and re-arm the timers. The row may
    /// still say frozen (the server died during a thaw).
    Running(BoxRecord),
    /// Saved by libvirt: only the expiry timer runs.
    Frozen(BoxRecord),
}

pub(super) fn reconcile(ctx: &HostShared) -> Result<Vec<Adopt>, BoxError> {
    let mut domains: HashMap<String, DomainStatus> = ctx
        .host
        .list()?
        .into_iter()
        .filter(|d| d.owner.as_deref() == Some(ctx.installation.as_str()))
        .map(|d| (d.name, d.status))
        .collect();
    let mut adopt = Vec::new();
    for row in ctx.store.live_boxes_on_host(ctx.host.uri())? {
        let status = domains.remove(&HostShared::domain_name(&row.id));
        match (row.state, status) {
            (BoxState::Pooled, _) => {
                ctx.teardown(&row.id)?;
                ctx.store.delete_pooled_box(&row.id)?;
            }
            (BoxState::Creating | BoxState::Booting, _) => {
                ctx.fail_box(&row, "the server stopped while this box was starting")?;
            }
            (BoxState::Running, Some(DomainStatus::Running)) => adopt.push(Adopt::Running(row)),
            (BoxState::Running, Some(DomainStatus::Paused)) => {
                ctx.host.resume(&HostShared::domain_name(&row.id))?;
                adopt.push(Adopt::Running(row));
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
                ctx.fail_box(
                    &row,
                    &format!("its VM was {found} when the server restarted (the box was {state})"),
                )?;
            }
        }
    }
    for (name, _) in domains {
        tracing::warn!(domain = %name, "removing a psbx domain that has no box");
        ctx.host.remove(&name)?;
        if let Some(id) = name
            .strip_prefix(DOMAIN_PREFIX)
            .and_then(|id| BoxId::parse(id).ok())
        {
            ctx.teardown(&id)?;
        }
    }
    Ok(adopt)
}
