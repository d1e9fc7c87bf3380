//! How many connector sessions one connection and one account may hold on
//! a replica ([`HubLimits`]), and the count of those held. A session counts
//! from its WebSocket upgrade (before its hello) to its end, so that
//! upgrades held open without a hello cannot get around the limits.

use crate::ids::{AccountId, ConnectionId};
use std::collections::HashMap;

/// The limits on connector sessions, per replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubLimits {
    /// Sessions of one connection (its connector copies × their
    /// `PSBX_SESSIONS`, at most 8 each).
    pub sessions_per_connection: usize,
    /// Sessions of all the connections of one account.
    pub sessions_per_account: usize,
}

/// Four copies of a connector at the most sessions each (8).
pub const DEFAULT_SESSIONS_PER_CONNECTION: usize = 32;
/// Four connections at [`DEFAULT_SESSIONS_PER_CONNECTION`].
pub const DEFAULT_SESSIONS_PER_ACCOUNT: usize = 128;

impl Default for HubLimits {
    fn default() -> Self {
        Self {
            sessions_per_connection: DEFAULT_SESSIONS_PER_CONNECTION,
            sessions_per_account: DEFAULT_SESSIONS_PER_ACCOUNT,
        }
    }
}

/// Which limit a new session would pass, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("this connection already has {0} connector sessions on this server, the most allowed")]
    Connection(usize),
    #[error("this account already has {0} connector sessions on this server, the most allowed")]
    Account(usize),
}

/// Sessions held, per connection and per account.
#[derive(Debug, Default)]
pub(super) struct Held {
    connections: HashMap<ConnectionId, usize>,
    accounts: HashMap<AccountId, usize>,
}

impl Held {
    /// Counts one more session, unless a limit is reached.
    pub(super) fn take(
        &mut self,
        account: &AccountId,
        connection: &ConnectionId,
        limits: &HubLimits,
    ) -> Result<(), Full> {
        let by_connection = self.connections.get(connection).copied().unwrap_or(0);
        if by_connection >= limits.sessions_per_connection {
            return Err(Full::Connection(limits.sessions_per_connection));
        }
        let by_account = self.accounts.get(account).copied().unwrap_or(0);
        if by_account >= limits.sessions_per_account {
            return Err(Full::Account(limits.sessions_per_account));
        }
        self.connections
            .insert(connection.clone(), by_connection + 1);
        self.accounts.insert(account.clone(), by_account + 1);
        Ok(())
    }

    /// Counts one session less.
    pub(super) fn release(&mut self, account: &AccountId, connection: &ConnectionId) {
        fn down<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
        down(&mut self.connections, connection);
        down(&mut self.accounts, account);
    }
}
