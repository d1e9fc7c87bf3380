//! The capacity ledger's arithmetic: which boxes hold CPU, memory and disk,
//! what they were promised and what they are measured to use, and whether a
//! new box is admitted.
//!
//! A box is admitted by three checks. Its vCPUs and memory, added to what
//! boxes holding host memory were promised, must stay under the host's CPUs
//! times `cpu_overcommit` and its memory (`MemTotal`) times
//! `memory_overcommit`: a cap on promises, however little boxes use. And its
//! memory must fit in what the host has available now (`MemAvailable`, which
//! the running boxes' QEMU processes have already taken their real use out
//! of), less what booting boxes may still take (a box counts its full promise
//! until boxd has said hello and its QEMU process has been measured, less
//! what it takes already), less `memory_margin_mib` kept free.
//!
//! Disk promises live here too; `ledger.rs` (`Machine::reserve`) checks them against
//! the file system, and checks that the managed saves of the boxes holding
//! memory ([`Ledger::saves_to_come_mib`]: what each uses, its promise while
//! it boots) fit in the free space now, so that a freeze (for pressure or
//! idleness) never finds the disk full.

use crate::ids::BoxId;
use crate::settings::Unit;
use std::collections::HashMap;

/// What the host may give, from the settings and the host's facts.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub cpus: u32,
    pub total_mib: u64,
    pub cpu_overcommit: f64,
    pub memory_overcommit: f64,
    pub memory_margin_mib: u64,
}

impl Limits {
    pub fn cpus_limit(&self) -> f64 {
        f64::from(self.cpus) * self.cpu_overcommit
    }

    pub fn memory_limit_mib(&self) -> f64 {
        self.total_mib as f64 * self.memory_overcommit
    }
}

/// Why a box was not admitted; every message says what is used, promised
/// and free, and which setting an operator may change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CapacityError {
    #[error(
        "this host cannot fit a box of {vcpus} vCPU: {promised} of {limit} vCPUs are already promised \
         ({cpus} CPUs × boxes.cpu_overcommit {overcommit}); stop or freeze boxes, or raise boxes.cpu_overcommit"
    )]
    Cpus {
        vcpus: u32,
        promised: u64,
        limit: f64,
        cpus: u32,
        overcommit: f64,
    },
    #[error(
        "this host cannot promise a box {memory_mib} MiB: {promised} of {limit:.0} MiB are already promised \
         ({total} MiB × boxes.memory_overcommit {overcommit}); stop or freeze boxes, or raise boxes.memory_overcommit"
    )]
    Promised {
        memory_mib: u64,
        promised: u64,
        limit: f64,
        total: u64,
        overcommit: f64,
    },
    #[error(
        "this host has no room for a box of {memory_mib} MiB now: {available} of {total} MiB are available, \
         running boxes use {measured} MiB (measured), booting boxes may take {booting} MiB more and \
         {margin} MiB are kept free (boxes.memory_margin_mib); try again when boxes have booted, stop or \
         freeze boxes, or lower boxes.unit_memory_mib or boxes.memory_margin_mib"
    )]
    Memory {
        memory_mib: u64,
        available: u64,
        total: u64,
        measured: u64,
        booting: u64,
        margin: u64,
    },
}

/// One box that holds host memory.
#[derive(Debug, Clone, Copy)]
struct Held {
    unit: Unit,
    /// boxd said hello: the box's use is what its QEMU process takes.
    settled: bool,
    /// The QEMU process's resident memory at the last measurement.
    rss_mib: Option<u64>,
}

impl Held {
    /// What this box may still take beyond what it takes now.
    fn may_still_take_mib(&self) -> u64 {
        if self.settled && self.rss_mib.is_some() {
            0
        } else {
            self.unit
                .memory_mib
                .saturating_sub(self.rss_mib.unwrap_or(0))
        }
    }
}

/// What the boxes holding host memory add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub promised_vcpus: u64,
    pub promised_mib: u64,
    /// Measured resident memory of the boxes' QEMU processes.
    pub measured_mib: u64,
    /// What booting (or unmeasured) boxes may still take.
    pub booting_mib: u64,
    pub boxes: usize,
}

pub struct Ledger {
    limits: Limits,
    held: HashMap<BoxId, Held>,
    /// Bytes of disk promised, by box that is not over.
    pub(super) disk: HashMap<BoxId, u64>,
}

impl Ledger {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            held: HashMap::new(),
            disk: HashMap::new(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn holds(&self, id: &BoxId) -> bool {
        self.held.contains_key(id)
    }

    pub fn usage(&self) -> Usage {
        self.held.values().fold(Usage::default(), |u, h| Usage {
            promised_vcpus: u.promised_vcpus + u64::from(h.unit.vcpus),
            promised_mib: u.promised_mib + h.unit.memory_mib,
            measured_mib: u.measured_mib + h.rss_mib.unwrap_or(0),
            booting_mib: u.booting_mib + h.may_still_take_mib(),
            boxes: u.boxes + 1,
        })
    }

    /// Whether a box of `unit` fits, with `available_mib` of host memory
    /// available now.
    pub fn admit(&self, unit: Unit, available_mib: u64) -> Result<(), CapacityError> {
        let l = self.limits;
        let u = self.usage();
        if (u.promised_vcpus + u64::from(unit.vcpus)) as f64 > l.cpus_limit() {
            return Err(CapacityError::Cpus {
                vcpus: unit.vcpus,
                promised: u.promised_vcpus,
                limit: l.cpus_limit(),
                cpus: l.cpus,
                overcommit: l.cpu_overcommit,
            });
        }
        if (u.promised_mib + unit.memory_mib) as f64 > l.memory_limit_mib() {
            return Err(CapacityError::Promised {
                memory_mib: unit.memory_mib,
                promised: u.promised_mib,
                limit: l.memory_limit_mib(),
                total: l.total_mib,
                overcommit: l.memory_overcommit,
            });
        }
        let needed = unit
            .memory_mib
            .saturating_add(u.booting_mib)
            .saturating_add(l.memory_margin_mib);
        if needed > available_mib {
            return Err(CapacityError::Memory {
                memory_mib: unit.memory_mib,
                available: available_mib,
                total: l.total_mib,
                measured: u.measured_mib,
                booting: u.booting_mib,
                margin: l.memory_margin_mib,
            });
        }
        Ok(())
    }

    /// Box `id` holds `unit` of host memory from now on, unsettled (a box
    /// that holds it already keeps its figures).
    pub fn hold(&mut self, id: &BoxId, unit: Unit) {
        self.held.entry(id.clone()).or_insert(Held {
            unit,
            settled: false,
            rss_mib: None,
        });
    }

    /// boxd said hello: the box's measured use counts from now on.
    pub fn settle(&mut self, id: &BoxId) {
        if let Some(h) = self.held.get_mut(id) {
            h.settled = true;
        }
    }

    /// Records a measurement of box `id`'s QEMU process.
    pub fn measure(&mut self, id: &BoxId, rss_mib: u64) {
        if let Some(h) = self.held.get_mut(id) {
            h.rss_mib = Some(rss_mib);
        }
    }

    /// MiB the managed saves of the boxes holding host memory may take when
    /// they freeze: what each uses (measured), else its full promise.
    pub fn saves_to_come_mib(&self) -> u64 {
        self.held
            .values()
            .map(|h| match (h.settled, h.rss_mib) {
                (true, Some(rss)) => rss,
                _ => h.unit.memory_mib,
            })
            .sum()
    }

    /// The boxes holding host memory.
    pub fn held_ids(&self) -> Vec<BoxId> {
        self.held.keys().cloned().collect()
    }

    /// The last measurement of box `id`.
    pub fn rss_mib(&self, id: &BoxId) -> Option<u64> {
        self.held.get(id)?.rss_mib
    }

    /// Box `id` gives its CPU and memory back (it froze, or is over).
    pub fn release(&mut self, id: &BoxId) {
        self.held.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024;

    fn unit(memory_mib: u64) -> Unit {
        Unit {
            vcpus: 2,
            memory_mib,
            disk_gb: 40,
        }
    }

    fn ledger() -> Ledger {
        Ledger::new(Limits {
            cpus: 2,
            total_mib: 24 * GIB,
            cpu_overcommit: 16.0,
            memory_overcommit: 8.0,
            memory_margin_mib: GIB,
        })
    }

    fn id(n: u8) -> BoxId {
        BoxId::parse(&format!("box_{n:0>20}")).unwrap()
    }

    #[test]
    fn a_booting_box_counts_its_full_promise() {
        let mut l = ledger();
        l.hold(&id(1), unit(8 * GIB));
        // 22 GiB available: 8 booting + 8 new + 1 margin fits, twice does not.
        assert_eq!(l.admit(unit(8 * GIB), 22 * GIB), Ok(()));
        l.hold(&id(2), unit(8 * GIB));
        let err = l.admit(unit(8 * GIB), 22 * GIB).unwrap_err();
        assert!(matches!(err, CapacityError::Memory { booting, .. } if booting == 16 * GIB));
        assert!(err.to_string().contains("boxes.memory_margin_mib"), "{err}");
    }

    #[test]
    fn a_measured_box_counts_what_it_uses() {
        let mut l = ledger();
        for n in 1..=10 {
            l.hold(&id(n), unit(8 * GIB));
            l.settle(&id(n));
            l.measure(&id(n), 400);
        }
        // Ten boxes promised 80 GiB of a 24 GiB host; they use 4 GiB, which
        // MemAvailable has taken out already.
        let u = l.usage();
        assert_eq!(
            (u.promised_mib, u.measured_mib, u.booting_mib),
            (80 * GIB, 4000, 0)
        );
        assert_eq!(l.admit(unit(8 * GIB), 19 * GIB), Ok(()));
        // High use leaves too little available.
        assert!(matches!(
            l.admit(unit(8 * GIB), 8 * GIB),
            Err(CapacityError::Memory { .. })
        ));
    }

    #[test]
    fn a_measured_but_booting_box_counts_what_it_may_still_take() {
        let mut l = ledger();
        l.hold(&id(1), unit(8 * GIB));
        l.measure(&id(1), 3 * GIB);
        assert_eq!(l.usage().booting_mib, 5 * GIB);
        l.settle(&id(1));
        assert_eq!(l.usage().booting_mib, 0);
    }

    #[test]
    fn promises_are_capped_by_the_overcommit() {
        let mut l = ledger();
        // 24 GiB × 8 = 192 GiB: 24 boxes of 8 GiB, whatever they use.
        for n in 1..=24 {
            l.hold(
                &id(n),
                Unit {
                    vcpus: 1,
                    ..unit(8 * GIB)
                },
            );
            l.settle(&id(n));
            l.measure(&id(n), 100);
        }
        let err = l
            .admit(
                Unit {
                    vcpus: 1,
                    ..unit(8 * GIB)
                },
                20 * GIB,
            )
            .unwrap_err();
        assert!(matches!(err, CapacityError::Promised { .. }), "{err}");
        assert!(err.to_string().contains("boxes.memory_overcommit"), "{err}");
    }

    #[test]
    fn vcpus_are_capped_by_the_overcommit() {
        let mut l = ledger();
        // 2 CPUs × 16 = 32 vCPUs: 16 boxes of 2.
        for n in 1..=16 {
            l.hold(&id(n), unit(GIB));
            l.settle(&id(n));
            l.measure(&id(n), 100);
        }
        let err = l.admit(unit(GIB), 20 * GIB).unwrap_err();
        assert!(
            matches!(err, CapacityError::Cpus { promised: 32, .. }),
            "{err}"
        );
        l.release(&id(1));
        assert_eq!(l.admit(unit(GIB), 20 * GIB), Ok(()));
    }

    #[test]
    fn saves_count_what_settled_boxes_use_and_the_promise_of_others() {
        let mut l = ledger();
        l.hold(&id(1), unit(8 * GIB));
        l.settle(&id(1));
        l.measure(&id(1), 300);
        l.hold(&id(2), unit(8 * GIB));
        l.measure(&id(2), 100);
        assert_eq!(l.saves_to_come_mib(), 300 + 8 * GIB);
    }

    #[test]
    fn hold_keeps_a_held_box_figures() {
        let mut l = ledger();
        l.hold(&id(1), unit(GIB));
        l.settle(&id(1));
        l.measure(&id(1), 10);
        l.hold(&id(1), unit(GIB));
        assert_eq!(l.rss_mib(&id(1)), Some(10));
        assert_eq!(l.usage().booting_mib, 0);
    }
}
