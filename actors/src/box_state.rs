//! The box lifecycle of DESIGN.md §4 and its legal transitions: one table,
//! [`TRANSITIONS`], that the store (`Store::transition_box` refuses any
//! other move), the actors (`check` before any side effect) and the API
//! (409 `invalid_state`) all go by. `actors/tests/lifecycle.rs` drives random
//! sequences of starts, commands, freezes, thaws, stops, expiries, host
//! restarts and refused hypervisor calls against it.
//!
//! It sits on a floor of its own, below the store and the actors, because
//! both go by it: the store writes nothing the table does not allow, and the
//! BoxActor checks before it acts.
//!
//! ```text
//! pooled -> running                      (claimed from the pool)
//! creating -> booting -> running <-> frozen
//!                          \          /
//!                           -> stopped (terminal; disk deleted)
//! any live state -> failed (with a reason)
//! ```

use crate::ids::BoxId;
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

    /// Whether the box may go from `self` to `next` (a row of [`TRANSITIONS`]).
    pub fn can_become(self, next: BoxState) -> bool {
        TRANSITIONS.iter().any(|t| t.from == self && t.to == next)
    }

    /// The check at the top of every lifecycle change (DESIGN.md §3): before
    /// libvirt is called, box `id` must be allowed to go from `self` to `to`.
    pub fn check(self, id: &BoxId, to: BoxState) -> Result<(), InvalidTransition> {
        if self.can_become(to) {
            Ok(())
        } else {
            Err(InvalidTransition {
                id: id.clone(),
                from: self,
                to,
            })
        }
    }
}

/// One legal move of a box, and what makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub from: BoxState,
    pub to: BoxState,
    pub when: &'static str,
}

const fn t(from: BoxState, to: BoxState, when: &'static str) -> Move {
    Move { from, to, when }
}

/// Every move a box may make. A step refused before any side effect, or a
/// hypervisor call that failed with the domain as it was, makes none (the
/// box keeps its state); `failed` is only for a VM in a state psbx cannot
/// tell (no hello after a start or a thaw).
pub const TRANSITIONS: &[Move] = {
    use BoxState::*;
    const UNKNOWN: &str = "its VM is in a state psbx cannot tell (no hello after a start or thaw)";
    &[
        t(
            Pooled,
            Running,
            "claimed from the pool: resumed, boxd said hello",
        ),
        t(Creating, Booting, "its domain was defined and started"),
        t(Booting, Running, "boxd said hello"),
        t(
            Running,
            Frozen,
            "idle, asked, or the host's memory pressure: saved to disk",
        ),
        t(
            Frozen,
            Running,
            "used again: restored from its save, boxd said hello",
        ),
        t(Running, Stopped, "stopped, or its keep ran out"),
        t(
            Frozen,
            Stopped,
            "stopped, its keep ran out, or frozen past boxes.max_frozen",
        ),
        t(
            Pooled,
            Stopped,
            "ended before a claim (the server deletes pooled rows instead, at stop and restart)",
        ),
        t(Pooled, Failed, UNKNOWN),
        t(Creating, Failed, UNKNOWN),
        t(Booting, Failed, UNKNOWN),
        t(Running, Failed, UNKNOWN),
        t(Frozen, Failed, UNKNOWN),
    ]
};

/// A lifecycle change the box's state does not allow (HTTP 409 `invalid_state`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("box {id} is {from} and cannot become {to}")]
pub struct InvalidTransition {
    pub id: BoxId,
    pub from: BoxState,
    pub to: BoxState,
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

    #[test]
    fn the_check_refuses_what_cannot_become_and_names_the_box() {
        let id = crate::ids::BoxId::parse("box_0123456789abcdefghij").unwrap();
        for a in ALL {
            for b in ALL {
                assert_eq!(a.check(&id, b).is_ok(), a.can_become(b), "{a} -> {b}");
            }
        }
        let refused = Stopped.check(&id, Frozen).unwrap_err();
        assert_eq!((refused.from, refused.to), (Stopped, Frozen));
        assert_eq!(
            refused.to_string(),
            "box box_0123456789abcdefghij is stopped and cannot become frozen"
        );
    }
}
