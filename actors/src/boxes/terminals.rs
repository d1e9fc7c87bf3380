//! The takeover terminals open on this server, and when each one ends by
//! itself. A takeover link opens a root shell in a box; a link that leaked
//! (a chat's link scanner, a stolen URL) must not hold that shell, and keep
//! the box awake, for ever (review-2 L4). So a terminal closes after
//! `takeover.idle_timeout` without input from the page and after
//! `takeover.max_lifetime` open, whatever it does; and the box's owner can
//! list the box's open terminals and close them
//! (`GET`/`DELETE /v1/boxes/{id}/terminals`).
//!
//! The list is this process's: a terminal lives in the server that holds its
//! WebSocket, and so does the means to close it. Until boxes are served by
//! several nodes, that is every terminal.

use crate::ids::{AccountId, BoxId, TerminalId};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a terminal stays open without input when the configuration does
/// not say.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long a terminal stays open at most when the configuration does not say.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);

/// Why a terminal was closed by psbx rather than by its shell or its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// No input for the idle timeout.
    Idle(Duration),
    /// Open for the longest time a terminal may be.
    Lifetime(Duration),
    /// The box's owner closed it (`DELETE /v1/boxes/{id}/terminals`).
    ByOwner,
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Idle(d) => write!(f, "closed after {} without input", human(*d)),
            Self::Lifetime(d) => write!(
                f,
                "closed after {} open, the longest a terminal stays",
                human(*d)
            ),
            Self::ByOwner => f.write_str("closed by the box's owner"),
        }
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// An open terminal as its box's owner sees it.
#[derive(Debug, Clone)]
pub struct TerminalView {
    pub id: TerminalId,
    pub box_id: BoxId,
    pub opened_at: DateTime<Utc>,
    /// The page's last keystroke (or the opening).
    pub last_input_at: DateTime<Utc>,
    /// When it closes unless input comes first: the idle timeout after the
    /// last input, or the end of its lifetime, whichever is sooner.
    pub closes_at: DateTime<Utc>,
}

/// The limits every terminal of this server has, and the open ones.
#[derive(Clone)]
pub struct Terminals {
    idle: Duration,
    lifetime: Duration,
    open: Arc<Mutex<HashMap<TerminalId, Arc<Open>>>>,
}

impl Default for Terminals {
    fn default() -> Self {
        Self::new(DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_LIFETIME)
    }
}

/// What the registry and the terminal share.
struct Open {
    account: AccountId,
    box_id: BoxId,
    opened: (Instant, DateTime<Utc>),
    last_input: Mutex<(Instant, DateTime<Utc>)>,
    closed_by_owner: watch::Sender<bool>,
}

impl Open {
    fn last_input(&self) -> (Instant, DateTime<Utc>) {
        self.last_input.lock().map(|l| *l).unwrap_or(self.opened)
    }
}

impl Terminals {
    pub fn new(idle: Duration, lifetime: Duration) -> Self {
        Self {
            idle,
            lifetime,
            open: Arc::default(),
        }
    }

    /// Registers terminal `id`, just opened in `box_id`; it is listed until
    /// the returned guard is dropped.
    pub(super) fn register(
        &self,
        id: TerminalId,
        account: AccountId,
        box_id: BoxId,
    ) -> Registration {
        let now = (Instant::now(), Utc::now());
        let (closed_by_owner, _) = watch::channel(false);
        let open = Arc::new(Open {
            account,
            box_id,
            opened: now,
            last_input: Mutex::new(now),
            closed_by_owner,
        });
        if let Ok(mut all) = self.open.lock() {
            all.insert(id.clone(), open.clone());
        }
        Registration {
            id,
            open,
            terminals: self.clone(),
        }
    }

    /// The open terminals of `box_id` (the account's), oldest first.
    pub fn list(&self, account: &AccountId, box_id: &BoxId) -> Vec<TerminalView> {
        let Ok(all) = self.open.lock() else {
            return Vec::new();
        };
        let mut views: Vec<TerminalView> = all
            .iter()
            .filter(|(_, o)| &o.account == account && &o.box_id == box_id)
            .map(|(id, o)| self.view(id, o))
            .collect();
        views.sort_by_key(|v| v.opened_at);
        views
    }

    /// Closes the open terminals of `box_id` (the account's), or only `one`;
    /// answers those it closed.
    pub fn close(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        one: Option<&TerminalId>,
    ) -> Vec<TerminalView> {
        let Ok(all) = self.open.lock() else {
            return Vec::new();
        };
        all.iter()
            .filter(|(id, o)| {
                &o.account == account && &o.box_id == box_id && one.is_none_or(|one| one == *id)
            })
            .map(|(id, o)| {
                o.closed_by_owner.send_replace(true);
                self.view(id, o)
            })
            .collect()
    }

    fn view(&self, id: &TerminalId, o: &Open) -> TerminalView {
        let (_, last) = o.last_input();
        let idle_end =
            last + chrono::Duration::from_std(self.idle).unwrap_or(chrono::Duration::MAX);
        let life_end =
            o.opened.1 + chrono::Duration::from_std(self.lifetime).unwrap_or(chrono::Duration::MAX);
        TerminalView {
            id: id.clone(),
            box_id: o.box_id.clone(),
            opened_at: o.opened.1,
            last_input_at: last,
            closes_at: idle_end.min(life_end),
        }
    }
}

/// A terminal's place in the list; removed when dropped.
pub(super) struct Registration {
    id: TerminalId,
    open: Arc<Open>,
    terminals: Terminals,
}

impl Registration {
    pub(super) fn id(&self) -> &TerminalId {
        &self.id
    }

    /// The page typed something.
    pub(super) fn input(&self) {
        if let Ok(mut last) = self.open.last_input.lock() {
            *last = (Instant::now(), Utc::now());
        }
    }

    /// Resolves when psbx closes the terminal: the idle timeout after the
    /// last input, the end of its lifetime, or its owner closing it. It
    /// borrows nothing, so it can be awaited beside the terminal's reads.
    pub(super) fn closing(&self) -> impl Future<Output = Closed> + Send + 'static {
        let open = self.open.clone();
        let mut by_owner = open.closed_by_owner.subscribe();
        let (idle, lifetime) = (self.terminals.idle, self.terminals.lifetime);
        async move {
            loop {
                if *by_owner.borrow_and_update() {
                    return Closed::ByOwner;
                }
                let idle_end = open.last_input().0 + idle;
                let life_end = open.opened.0 + lifetime;
                let now = Instant::now();
                if now >= life_end {
                    return Closed::Lifetime(lifetime);
                }
                if now >= idle_end {
                    return Closed::Idle(idle);
                }
                tokio::select! {
                    // Input moves the idle end: look again when it passes.
                    _ = tokio::time::sleep_until(idle_end.min(life_end)) => {}
                    changed = by_owner.changed() => if changed.is_err() {
                        // Never: `open` holds the sender.
                        std::future::pending::<()>().await;
                    },
                }
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut all) = self.terminals.open.lock() {
            all.remove(&self.id);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ids() -> (AccountId, BoxId) {
        (
            AccountId::parse("acct_a").unwrap(),
            BoxId::parse("box_b").unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_terminal_closes_after_its_idle_time_and_input_moves_it() {
        let terminals = Terminals::new(Duration::from_secs(60), Duration::from_secs(3600));
        let (account, box_id) = ids();
        let reg = terminals.register(
            TerminalId::generate().unwrap(),
            account.clone(),
            box_id.clone(),
        );
        tokio::time::sleep(Duration::from_secs(50)).await;
        reg.input();
        let started = Instant::now();
        assert_eq!(reg.closing().await, Closed::Idle(Duration::from_secs(60)));
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert_eq!(terminals.list(&account, &box_id).len(), 1);
        drop(reg);
        assert!(terminals.list(&account, &box_id).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn input_does_not_outlive_the_lifetime() {
        let terminals = Terminals::new(Duration::from_secs(60), Duration::from_secs(150));
        let (account, box_id) = ids();
        let reg = terminals.register(TerminalId::generate().unwrap(), account, box_id);
        let closing = reg.closing();
        tokio::pin!(closing);
        for _ in 0..4 {
            tokio::select! {
                _ = &mut closing => panic!("closed while typing"),
                _ = tokio::time::sleep(Duration::from_secs(30)) => reg.input(),
            }
        }
        assert_eq!(closing.await, Closed::Lifetime(Duration::from_secs(150)));
    }

    #[tokio::test]
    async fn the_owner_lists_and_closes_only_its_own() {
        let terminals = Terminals::default();
        let (account, box_id) = ids();
        let other = AccountId::parse("acct_other").unwrap();
        let mine = terminals.register(
            TerminalId::generate().unwrap(),
            account.clone(),
            box_id.clone(),
        );
        let _theirs = terminals.register(
            TerminalId::generate().unwrap(),
            other.clone(),
            box_id.clone(),
        );
        let listed = terminals.list(&account, &box_id);
        assert_eq!(listed.len(), 1);
        assert_eq!(&listed[0].id, mine.id());
        assert!(listed[0].closes_at > listed[0].opened_at);
        let closed = terminals.close(&account, &box_id, None);
        assert_eq!(closed.len(), 1);
        assert_eq!(mine.closing().await, Closed::ByOwner);
        assert_eq!(
            terminals.list(&other, &box_id).len(),
            1,
            "another account's was closed"
        );
    }
}
