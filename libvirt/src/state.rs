//! The one place libvirt's raw domain states become ours.

/// What a domain is doing, as psbx cares about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainStatus {
    /// Executing guest code.
    Running,
    /// Suspended in memory (pool boxes; resume takes milliseconds).
    Paused,
    /// Not running. `saved`: a managed save holds its memory (a frozen box).
    ShutOff { saved: bool },
    /// Crashed, or in a state psbx never puts a box in (PM-suspended,
    /// shutting down by itself): a box here has failed.
    Broken,
}

/// Maps libvirt's state (and whether a managed save exists) to ours.
pub fn map(state: virt::domain::DomainState, has_managed_save: bool) -> DomainStatus {
    use virt::domain::DomainState as S;
    match state {
        S::Running | S::Blocked => DomainStatus::Running,
        S::Paused => DomainStatus::Paused,
        S::Shutoff => DomainStatus::ShutOff {
            saved: has_managed_save,
        },
        S::NoState | S::Shutdown | S::Crashed | S::PMSuspended => DomainStatus::Broken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use virt::domain::DomainState as S;

    #[test]
    fn every_libvirt_state_maps() {
        assert_eq!(map(S::Running, false), DomainStatus::Running);
        assert_eq!(map(S::Blocked, false), DomainStatus::Running);
        assert_eq!(map(S::Paused, false), DomainStatus::Paused);
        assert_eq!(map(S::Shutoff, true), DomainStatus::ShutOff { saved: true });
        assert_eq!(
            map(S::Shutoff, false),
            DomainStatus::ShutOff { saved: false }
        );
        for broken in [S::NoState, S::Shutdown, S::Crashed, S::PMSuspended] {
            assert_eq!(map(broken, false), DomainStatus::Broken);
        }
    }
}
