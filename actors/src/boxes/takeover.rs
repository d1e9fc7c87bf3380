//! Takeover: a one-time, expiring link to a web terminal in a box
//! ([`Boxes::takeover_link`]), and the terminal it opens
//! ([`Boxes::open_terminal`]): boxd's `pty` service on the box's channel.
//! The protocol stays here: one JSON [`PtyRequest`] line, then
//! [`PtyInput`] records; boxd answers with the terminal's raw output, and
//! its FIN says the shell ended; the server's half-close hangs up.
//!
//! The link does not rely on the box's key: the token is the credential,
//! stored as its hash (`store::takeover`), spent by the terminal that opens
//! with it. An open terminal keeps the box awake ([`Boxes::awake`]: a lease
//! on the box's actor) until it is dropped.
//!
//! Terminal output is not masked: the terminal is the account's own person
//! at the box's shell, not output returned to an agent, and masking would
//! cut through escape sequences.

use super::terminals::{Closed, Registration, TerminalView, Terminals};
use super::{Awake, Boxes, SERVICE, over};
use crate::blocking::blocking;
use crate::boxd_link::{LinkError, LinkHandle};
use crate::error::BoxError;
use crate::ids::{AccountId, BoxId, TerminalId};
use crate::store::{LinkState, TAKEOVER_TOKEN_PREFIX};
use chrono::{DateTime, Utc};
use psbx_wire::boxd::{PtyInput, PtyRequest, Streamed};
use psbx_wire::mux::Stream;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a takeover link works when the configuration does not say.
pub const DEFAULT_LINK_TTL: Duration = Duration::from_secs(15 * 60);
/// The longest token looked up (prefix + 40; a little room).
const MAX_TOKEN_LEN: usize = 64;

/// A link just made: the token (shown once, in the page's URL) and its end.
#[derive(Debug, Clone)]
pub struct TakeoverLink {
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub box_id: BoxId,
}

/// Why a terminal did not open.
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    #[error("this takeover link was already used")]
    Used,
    #[error("this takeover link has expired")]
    Expired,
    #[error("no such takeover link")]
    Unknown,
    /// boxd refused its `pty` service (a box image older than takeover).
    #[error("the box cannot open a terminal: {0}")]
    NoTerminal(String),
    /// The box: over, unreachable, or the store failing.
    #[error(transparent)]
    Box(#[from] BoxError),
}

impl From<crate::store::StoreError> for TakeoverError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Box(e.into())
    }
}

impl From<crate::blocking::TaskFailed> for TakeoverError {
    fn from(e: crate::blocking::TaskFailed) -> Self {
        Self::Box(e.into())
    }
}

/// A terminal in a box: its output is read, its input and size sent. The
/// box is kept awake, and the terminal listed, until this is dropped;
/// [`Terminal::closing`] says when psbx closes it.
pub struct Terminal {
    stream: Stream,
    box_id: BoxId,
    registration: Registration,
    /// Keeps the box awake until the terminal is dropped.
    _awake: Awake,
    /// Holds the box's channel open while the terminal is.
    _link: LinkHandle,
}

impl Terminal {
    pub fn box_id(&self) -> &BoxId {
        &self.box_id
    }

    /// The terminal's next output bytes; 0 once the shell ended.
    pub async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.read(buf).await
    }

    pub fn id(&self) -> &TerminalId {
        self.registration.id()
    }

    /// Sends typed bytes or a new size; typed bytes count as input for the
    /// idle timeout (a resize does not).
    pub async fn send(&mut self, input: &PtyInput) -> std::io::Result<()> {
        if matches!(input, PtyInput::Input(_)) {
            self.registration.input();
        }
        self.stream.write_all(&input.encode()).await
    }

    /// Resolves when psbx closes this terminal (idle, lifetime, owner). It
    /// borrows nothing: the bridge waits on it beside [`Terminal::read`].
    pub fn closing(&self) -> impl std::future::Future<Output = Closed> + Send + 'static {
        self.registration.closing()
    }

    /// Hangs the terminal up (the browser went away): a half-close.
    pub async fn hang_up(&mut self) -> std::io::Result<()> {
        self.stream.shutdown().await
    }
}

/// A string that cannot be a takeover token is not looked up.
fn plausible(token: &str) -> bool {
    token.starts_with(TAKEOVER_TOKEN_PREFIX)
        && token.len() <= MAX_TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Boxes {
    /// How long the links [`Boxes::takeover_link`] makes work
    /// (`[takeover] link_ttl`; default [`DEFAULT_LINK_TTL`]).
    pub fn with_takeover_ttl(mut self, ttl: Duration) -> Self {
        self.takeover_ttl = ttl;
        self
    }

    /// A one-time link to a terminal in box `id` (not stopped or failed: the
    /// same answers as `keep`). Nothing is woken until the link is used.
    pub async fn takeover_link(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<TakeoverLink, BoxError> {
        let record = self.record(account, id).await?;
        if record.state.is_terminal() {
            return Err(over(&record));
        }
        let ttl = chrono::Duration::from_std(self.takeover_ttl)
            .map_err(|_| BoxError::Internal("takeover.link_ttl is out of range".into()))?;
        let (store, account, box_id) = (self.store.clone(), account.clone(), record.id.clone());
        let link = blocking(move || store.create_takeover_link(&account, &box_id, ttl)).await?;
        Ok(TakeoverLink {
            token: link.token,
            expires_at: link.expires_at,
            box_id: record.id,
        })
    }

    /// How the link `token` stands (for its page); does not spend it.
    pub async fn look_takeover(&self, token: &str) -> Result<LinkState, BoxError> {
        if !plausible(token) {
            return Ok(LinkState::Unknown);
        }
        let (store, token) = (self.store.clone(), token.to_owned());
        Ok(blocking(move || store.look_takeover_link(&token)).await?)
    }

    /// How long takeover terminals stay open without input, and at most
    /// (`[takeover] idle_timeout`, `max_lifetime`).
    pub fn with_terminal_limits(mut self, idle: Duration, lifetime: Duration) -> Self {
        self.terminals = Terminals::new(idle, lifetime);
        self
    }

    /// The open terminals of box `id` of the account (on this server).
    pub async fn terminals(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<Vec<TerminalView>, BoxError> {
        let record = self.record(account, id).await?;
        Ok(self.terminals.list(account, &record.id))
    }

    /// Closes the open terminals of box `id` of the account, or only
    /// `terminal`; answers those it closed.
    pub async fn close_terminals(
        &self,
        account: &AccountId,
        id: &BoxId,
        terminal: Option<&TerminalId>,
    ) -> Result<Vec<TerminalView>, BoxError> {
        let record = self.record(account, id).await?;
        Ok(self.terminals.close(account, &record.id, terminal))
    }

    /// Spends the link `token` and opens a `cols` × `rows` terminal in its
    /// box, thawing a frozen box. The link is spent even when the box then
    /// cannot be reached: a link opens at most one terminal.
    pub async fn open_terminal(
        &self,
        token: &str,
        cols: u16,
        rows: u16,
    ) -> Result<Terminal, TakeoverError> {
        if !plausible(token) {
            return Err(TakeoverError::Unknown);
        }
        let terminal_id = TerminalId::generate()
            .map_err(|e| BoxError::Internal(format!("no randomness for a terminal id: {e}")))?;
        let (store, t) = (self.store.clone(), token.to_owned());
        let (account, box_id) = match blocking(move || store.spend_takeover_link(&t)).await? {
            Ok(spent) => spent,
            Err(LinkState::Used) => return Err(TakeoverError::Used),
            Err(LinkState::Expired) => return Err(TakeoverError::Expired),
            // Valid yet not spent: it expired between the two queries.
            Err(LinkState::Valid { .. }) => return Err(TakeoverError::Expired),
            Err(LinkState::Unknown) => return Err(TakeoverError::Unknown),
        };
        let (addr, link, _) = self.channel(&account, &box_id).await?;
        let mut stream = link
            .open(PtyRequest::SERVICE, SERVICE)
            .await
            .map_err(|e| match e {
                LinkError::Refused { reason, .. } => TakeoverError::NoTerminal(reason),
                other => TakeoverError::Box(other.into()),
            })?;
        let mut line = serde_json::to_vec(&PtyRequest { cols, rows }).map_err(BoxError::from)?;
        line.push(b'\n');
        stream
            .write_all(&line)
            .await
            .map_err(crate::error::io_error(format!(
                "opening a terminal in box {box_id}"
            )))?;
        // Taking the channel counted as activity; the lease holds the box awake.
        let awake = self.awake(addr);
        let registration = self
            .terminals
            .register(terminal_id, account, box_id.clone());
        Ok(Terminal {
            stream,
            box_id,
            registration,
            _awake: awake,
            _link: link,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_token_shapes_are_looked_up() {
        assert!(plausible("tko_abcDEF0123456789"));
        assert!(!plausible("psbx_abc"));
        assert!(!plausible("tko_a/b"));
        assert!(!plausible(&format!("tko_{}", "a".repeat(100))));
    }
}
