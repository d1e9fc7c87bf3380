//! The host's disk, watched (beside the memory, `pressure.rs`): every
//! [`SAMPLE_EVERY`] the supervisor reads the free space of `boxes_dir`'s file
//! system (statvfs) and how much each box holding disk has written (the blocks
//! its directory's files take). Admission never promises more disk than is
//! free above `disk_margin_gb` by default (`disk_overcommit = 1.0`,
//! `machine/ledger.rs`), but something else may write on the same file system, and an
//! operator may overcommit: when, at the rate boxes wrote since the last
//! sample, the free space would fall under the margin within two samples
//! (one to notice, one for the freeze to land), the boxes that wrote most in
//! that interval are frozen, each named in a warning, until what is left
//! writing could not reach the margin. It never picks by idleness: the
//! writer is the active one. Frozen is the pause a box's owner sees (its
//! state says `frozen`): it costs no host memory, its disk and memory are
//! kept (the managed save's room is held by the ledger from the box's
//! start), and the owner resumes it with any call or stops it. A box that
//! goes on writing is frozen again at the next sample. Writes are also
//! throttled per size unit (`<iotune>`, `boxes.unit_write_mib_per_sec`), so
//! no box outruns two samples by much; a write that still finds the disk
//! full pauses the VM (`error_policy='stop'`) instead of corrupting it.
//!
//! This keeps `disk_margin_gb` free for what shares the file system, the
//! embedded PostgreSQL first (`server/src/shared_dir.rs` refuses to start
//! when they share one that is under the margin already).

use super::HostParts;
use crate::box_actor::Freeze;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::machine::Machine;
use crate::machine::ledger::{free_bytes, written_bytes};
use std::collections::HashMap;
use std::time::Duration;

/// How often the free space and the boxes' writes are read.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// How many samples ahead the free space is projected.
const LOOKAHEAD: u64 = 2;

/// What each box had written at the last sample.
#[derive(Debug, Default)]
pub(super) struct Written(HashMap<BoxId, u64>);

/// A box and what it wrote since the last sample (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    pub id: BoxId,
    pub wrote: u64,
}

/// The disk is running out: these boxes are to freeze.
#[derive(Debug)]
pub(super) struct DiskPressure {
    pub free: u64,
    pub margin: u64,
    pub freeze: Vec<Writer>,
}

/// The writers to freeze when `above` bytes are left above the margin: none
/// while what all of them wrote in one sample, `LOOKAHEAD` times over, fits;
/// else the ones that wrote most until what the others write would fit (at
/// least one). Boxes that wrote nothing are never picked.
pub fn pick_writers(mut writers: Vec<Writer>, above: u64) -> Vec<Writer> {
    writers.retain(|w| w.wrote > 0);
    let fits = |rest: u64| rest.saturating_mul(LOOKAHEAD) < above;
    let mut rest: u64 = writers.iter().map(|w| w.wrote).sum();
    if fits(rest) {
        return Vec::new();
    }
    writers.sort_by(|a, b| b.wrote.cmp(&a.wrote).then_with(|| a.id.cmp(&b.id)));
    let mut out = Vec::new();
    for w in writers {
        if fits(rest) && !out.is_empty() {
            break;
        }
        rest = rest.saturating_sub(w.wrote);
        out.push(w);
    }
    out
}

/// Reads the free space and what every box holding disk wrote since the last
/// sample (blocking); says which running boxes to freeze.
pub(super) fn sample(
    machine: &Machine,
    last: &mut Written,
) -> Result<Option<DiskPressure>, BoxError> {
    let mut now = HashMap::new();
    let mut writers = Vec::new();
    for id in machine.disk_holders() {
        let bytes = written_bytes(&machine.box_dir(&id));
        // A box seen for the first time counts from now.
        let before = last.0.get(&id).copied().unwrap_or(bytes);
        writers.push(Writer {
            id: id.clone(),
            wrote: bytes.saturating_sub(before),
        });
        now.insert(id, bytes);
    }
    last.0 = now;
    let free = free_bytes(&machine.settings.boxes_dir)?;
    let margin = machine.settings.disk_margin_gb.saturating_mul(1 << 30);
    let freeze = pick_writers(writers, free.saturating_sub(margin));
    if freeze.is_empty() {
        return Ok(None);
    }
    // Only running boxes can be frozen (a box booting or freezing already
    // is left to its own step; the next sample looks again).
    let running: Vec<BoxId> = machine
        .store
        .live_boxes_on_host(&machine.name)?
        .into_iter()
        .filter(|r| r.state == crate::box_state::BoxState::Running)
        .map(|r| r.id)
        .collect();
    Ok(Some(DiskPressure {
        free,
        margin,
        freeze: freeze
            .into_iter()
            .filter(|w| running.contains(&w.id))
            .collect(),
    }))
}

impl DiskPressure {
    /// Sends the freezes, and says what and why.
    pub(super) fn relieve(self, parts: &HostParts) {
        const MIB: u64 = 1 << 20;
        if self.freeze.is_empty() {
            tracing::warn!(
                free_mib = self.free / MIB,
                margin_mib = self.margin / MIB,
                boxes_dir = %parts.machine.settings.boxes_dir.display(),
                "the host's disk is filling and no running box writing to it is left to freeze"
            );
            return;
        }
        for w in self.freeze {
            tracing::warn!(
                box_id = %w.id,
                wrote_mib = w.wrote / MIB,
                seconds = SAMPLE_EVERY.as_secs(),
                free_mib = self.free / MIB,
                margin_mib = self.margin / MIB,
                "the host's disk is filling (boxes.disk_margin_gb): freezing the box that wrote most"
            );
            if let Some(actor) = parts.registry.actor(&w.id) {
                actor.do_send(Freeze);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn writer(n: u8, wrote_mib: u64) -> Writer {
        Writer {
            id: BoxId::parse(&format!("box_{n:0>20}")).unwrap(),
            wrote: wrote_mib * MIB,
        }
    }

    fn ids(v: &[Writer]) -> Vec<String> {
        v.iter().map(|w| w.id.to_string()).collect()
    }

    #[test]
    fn nothing_is_frozen_while_the_writes_fit_above_the_margin() {
        let all = vec![writer(1, 100), writer(2, 50)];
        assert!(pick_writers(all.clone(), 10_000 * MIB).is_empty());
        // 150 MiB per sample, two samples ahead: 300 MiB; 301 free is enough.
        assert!(pick_writers(all.clone(), 301 * MIB).is_empty());
        assert!(pick_writers(Vec::new(), 0).is_empty());
    }

    #[test]
    fn the_biggest_writers_go_first_never_the_idle_ones() {
        let all = vec![writer(1, 10), writer(2, 300), writer(3, 0), writer(4, 100)];
        // 410 MiB per sample with 500 MiB left: box 2 alone leaves 110 (220 ahead).
        assert_eq!(
            ids(&pick_writers(all.clone(), 500 * MIB)),
            ids(&[writer(2, 0)])
        );
        // With 100 MiB left, boxes 2 and 4; box 1's 10 MiB fits.
        assert_eq!(
            ids(&pick_writers(all.clone(), 100 * MIB)),
            ids(&[writer(2, 0), writer(4, 0)])
        );
        // Under the margin already: every writer, and still not the idle box 3.
        assert_eq!(
            ids(&pick_writers(all, 0)),
            ids(&[writer(2, 0), writer(4, 0), writer(1, 0)])
        );
    }
}
