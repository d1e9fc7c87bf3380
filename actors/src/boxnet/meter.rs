//! Each box's own internet traffic, in bytes (the box's
//! `internetEgressBytes`, for the credits issue's ledger): what its QEMU
//! process sent past the host's filter, counted by the kernel per uid
//! (`nft.rs`, the set `egress`) and so per box (`jail.rs`).
//!
//! The kernel's figure is what the uid sent since its counter began: when
//! its box got that uid ([`super::BoxNetwork::forget`]) or when the table was
//! last written. Every check (`CHECK_EVERY`) hands the figures here;
//! those that changed since the last one stored go to `box_egress`, whose
//! `internet_counted` holds the kernel figure last added, so the database
//! adds only the difference (the whole figure after a counter began again),
//! and a restarted server neither counts twice nor loses what it had not
//! stored. Bytes a box sends in the seconds between the last check and the
//! table being rewritten, or its stop, are not counted.

use crate::ids::BoxId;
use std::collections::HashMap;
use std::sync::Mutex;

/// The figures last stored, per uid and the box that held it.
#[derive(Default)]
pub struct Meter {
    stored: Mutex<HashMap<u32, (BoxId, u64)>>,
}

impl Meter {
    /// Of `counts` (uid, bytes since its counter began), those of a uid a
    /// box holds (`owners`) whose figure is not the one stored last.
    pub fn changed(
        &self,
        counts: &[(u32, u64)],
        owners: &HashMap<u32, BoxId>,
    ) -> Vec<(u32, BoxId, u64)> {
        let Ok(stored) = self.stored.lock() else {
            return Vec::new();
        };
        counts
            .iter()
            .filter_map(|&(uid, bytes)| {
                let id = owners.get(&uid)?;
                let same = stored
                    .get(&uid)
                    .is_some_and(|(was, last)| was == id && *last == bytes);
                (!same).then(|| (uid, id.clone(), bytes))
            })
            .collect()
    }

    /// Remembers figures the database took; forgets uids no box holds.
    pub fn stored(&self, figures: Vec<(u32, BoxId, u64)>, owners: &HashMap<u32, BoxId>) {
        if let Ok(mut stored) = self.stored.lock() {
            stored.retain(|uid, _| owners.contains_key(uid));
            for (uid, id, bytes) in figures {
                stored.insert(uid, (id, bytes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changed_figures_of_held_uids_are_stored_again() {
        let meter = Meter::default();
        let (a, b) = (
            BoxId::parse("box_aaaa").unwrap(),
            BoxId::parse("box_bbbb").unwrap(),
        );
        let owners = HashMap::from([(1, a.clone()), (2, b.clone())]);
        let first = meter.changed(&[(1, 100), (2, 50), (3, 9)], &owners);
        assert_eq!(first, vec![(1, a.clone(), 100), (2, b.clone(), 50)]);
        meter.stored(first, &owners);
        assert_eq!(
            meter.changed(&[(1, 100), (2, 70)], &owners),
            vec![(2, b.clone(), 70)]
        );
        // Not stored (the database failed): asked again next time.
        assert_eq!(
            meter.changed(&[(1, 100), (2, 70)], &owners),
            vec![(2, b.clone(), 70)]
        );
        // Uid 1 went to another box, whose counter by chance shows the same.
        let c = BoxId::parse("box_cccc").unwrap();
        let owners = HashMap::from([(1, c.clone()), (2, b)]);
        assert_eq!(meter.changed(&[(1, 100)], &owners), vec![(1, c, 100)]);
    }
}
