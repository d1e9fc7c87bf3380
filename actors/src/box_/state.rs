//! The box lifecycle of DESIGN.md §4 and its legal transitions.
//!
//! ```text
//! pooled -> running                      (claimed from the pool)
//! creating -> booting -> running <-> frozen
//!                          \          /
//!                           -> stopped (terminal; disk deleted)
//! any live state -> failed (with a reason)
//! ```

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoxState {
    /// Booted, clean, suspended in memory, owned by no account yet.
    Pooled,
    Creating,
    Booting,
    /// boxd has said hello: the box can be used.
    Running,
    /// Memory and disk saved by libvirt (managed save); no host memory used.
    Frozen,
    Stopped,
    Failed,
}

impl BoxState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pooled => "pooled",
            Self::Creating => "creating",
            Self::Booting => "booting",
            Self::Running => "running",
            Self::Frozen => "frozen",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pooled" => Self::Pooled,
            "creating" => Self::Creating,
            "booting" => Self::Booting,
            "running" => Self::Running,
            "frozen" => Self::Frozen,
            "stopped" => Self::Stopped,
            "failed" => Self::Failed,
            _ => return None,
        })
    }

    /// Stopped and failed boxes are over: no domain, no disk.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Stopped | Self::Failed)
    }

    /// Whether the box may go from `self` to `next`.
    pub fn can_become(self, next: BoxState) -> bool {
        use BoxState::*;
        match (self, next) {
            (Pooled, Running) | (Creating, Booting) | (Booting, Running) => true,
            (Running, Frozen) | (Frozen, Running) => true,
            (Running | Frozen | Pooled, Stopped) => true,
            (from, Failed) => !from.is_terminal(),
            _ => false,
        }
    }
}

impl fmt::Display for BoxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::BoxState::{self, *};

    const ALL: [BoxState; 7] = [Pooled, Creating, Booting, Running, Frozen, Stopped, Failed];

    #[test]
    fn names_round_trip() {
        for s in ALL {
            assert_eq!(BoxState::parse(s.as_str()), Some(s));
        }
        assert_eq!(BoxState::parse("thawing"), None);
    }

    #[test]
    fn only_the_designed_transitions_are_legal() {
        let legal: Vec<(BoxState, BoxState)> = ALL
            .iter()
            .flat_map(|a| ALL.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| a.can_become(*b))
            .collect();
        let expected = vec![
            (Pooled, Running),
            (Pooled, Stopped),
            (Pooled, Failed),
            (Creating, Booting),
            (Creating, Failed),
            (Booting, Running),
            (Booting, Failed),
            (Running, Frozen),
            (Running, Stopped),
            (Running, Failed),
            (Frozen, Running),
            (Frozen, Stopped),
            (Frozen, Failed),
        ];
        assert_eq!(legal, expected);
    }
}
