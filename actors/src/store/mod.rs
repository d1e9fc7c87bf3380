//! The store: the only place that touches diesel (DESIGN.md §7).
//!
//! [`Store`] owns the r2d2 pool of PostgreSQL connections. Its calls are
//! blocking: async callers run them on a blocking thread (`web::block`,
//! `spawn_blocking`). Every query about an account's objects takes the account.

mod accounts;
mod api_keys;
mod aws;
mod box_access;
mod boxes;
mod credentials;
mod disk_keys;
mod egress;
mod environments;
mod hosts;
mod oauth;
mod oidc_keys;
mod quota;
mod reviews;
mod schema;
mod secrets;
mod servers;
mod shots;
mod sign_in;
mod takeover;
mod uploads;
mod url_keys;

pub use accounts::{Account, Bootstrap};
pub use api_keys::{ApiKey, KeyPage, NewApiKey};
pub use aws::AwsRow;
pub use box_access::BoxAccessRow;
pub use boxes::{BoxCursor, BoxRecord, NewBox, PoolClaim, Transition};
pub use credentials::{Credential, OAUTH_TOKEN_PREFIX, Principal};
pub use environments::{
    ConnectionRecord, EnvironmentChange, EnvironmentRecord, NewService, SealedService,
    ServiceRecord, token_digest,
};
pub use hosts::{BoxPlace, HostClaim, HostHeld, HostRecord, Placed, Room, TakenHost};
pub use oauth::{
    ACCESS_TOKEN_TTL, CODE_TTL, CodeExchange, IssuedTokens, NewCode, OAuthClient, Refused,
};
pub use oidc_keys::{NewOidcKey, OidcKeyRow};
pub use reviews::{ItemRow, ReviewRow};
pub use secrets::SealedRow;
pub use servers::Server;
pub use shots::ShotRow;
pub use sign_in::{ARGON2_SLOTS, Argon2Slots, LOGIN_LINK_TTL, MIN_PASSWORD_LEN, SESSION_TTL};
pub use takeover::{LinkState, NewTakeoverLink, TAKEOVER_TOKEN_PREFIX};
pub use uploads::{UploadClaim, UploadTarget, UploadToken};
pub use url_keys::StoredUrlKey;

use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel::{Connection, RunQueryDsl};
use std::time::Duration;

type PgPool = Pool<ConnectionManager<PgConnection>>;
type Conn = PooledConnection<ConnectionManager<PgConnection>>;

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error(transparent)]
    Migrate(#[from] psbx_migrations::MigrationError),
    #[error("no database connection free within the pool timeout: {0}")]
    Pool(#[from] diesel::r2d2::PoolError),
    #[error("database query failed: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("the operating system's random generator failed: {0}")]
    Random(#[from] getrandom::Error),
    #[error("{0}")]
    Invalid(String),
    /// A stored value no longer reads as its type (written by another version, or by hand).
    #[error("{what} is unreadable: {why}")]
    Unreadable { what: String, why: String },
    /// A transition the box's state does not allow (the store checks too).
    #[error(transparent)]
    InvalidTransition(#[from] crate::box_state::InvalidTransition),
    /// The request would take the account past one of its quotas.
    #[error(transparent)]
    QuotaExceeded(#[from] crate::quota::QuotaExceeded),
    /// A value to store as a secret is (or holds) one of this server's own
    /// credentials: what it names (`a psbx API key`).
    #[error(
        "the value is (or holds) {0} of this server: a box does not need it, it reaches psbx without one"
    )]
    NotASecret(&'static str),
    /// The thread running the call failed (see [`crate::blocking`]).
    #[error(transparent)]
    Task(#[from] crate::blocking::TaskFailed),
}

/// A stored name read back as the enum it names (with the enum's own
/// `parse`): any other value is [`StoreError::Unreadable`], never a default,
/// so a row written by another version fails loudly instead of reading as
/// something it is not. `what` names the value (`the state of review rev_…`).
pub fn read_enum<T>(
    what: impl FnOnce() -> String,
    stored: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, StoreError> {
    parse(stored).ok_or_else(|| StoreError::Unreadable {
        what: what(),
        why: format!("{stored:?} is not one of its values"),
    })
}

impl StoreError {
    /// Whether the database could not be reached or went away under the
    /// call (it restarts, fails over or shuts down): worth a retry, not a bug.
    pub fn is_unavailable(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        match self {
            Self::Pool(_) | Self::Connect(_) => true,
            Self::Query(Error::DatabaseError(
                DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
                _,
            )) => true,
            // PostgreSQL ending the connection (SQLSTATE class 57: admin
            // shutdown, crash shutdown, cannot connect now), which diesel
            // does not tell apart by kind.
            Self::Query(Error::DatabaseError(_, info)) => {
                let message = info.message();
                [
                    "terminating connection",
                    "server closed the connection",
                    "the database system is",
                    "no connection to the server",
                ]
                .iter()
                .any(|m| message.contains(m))
            }
            _ => false,
        }
    }
}

/// How many connections a [`Store`] keeps, and how long a caller waits for one.
#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    pub max_size: u32,
    /// Connections kept open while idle; the pool reopens them in background
    /// threads. Short-lived commands use 0: a process must not exit while such a
    /// thread is inside libpq (OpenSSL's exit handlers then crash it).
    pub min_idle: u32,
    pub connect_timeout: Duration,
}

impl PoolOptions {
    /// The options of a short-lived process (a command, a test): at most
    /// `max_size` connections, none kept idle.
    pub fn short_lived(max_size: u32) -> Self {
        Self {
            max_size,
            min_idle: 0,
            ..Self::default()
        }
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            max_size: 10,
            min_idle: 1,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Use of the pool right now, for metrics.
#[derive(Debug, Clone, Copy)]
pub struct PoolUse {
    pub max_size: u32,
    pub connections: u32,
    pub idle: u32,
}

/// A handle on the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    /// The per-account limits the store's inserts check.
    quotas: crate::quota::Quotas,
}

impl Store {
    /// Connects, checks the database answers, and applies pending migrations.
    pub fn open(database_url: &str, options: PoolOptions) -> Result<Self, StoreError> {
        let mut first = PgConnection::establish(database_url)
            .map_err(|e| StoreError::Connect(redact_connection_error(&e.to_string())))?;
        let applied = psbx_migrations::run(&mut first)?;
        if !applied.is_empty() {
            tracing::info!(migrations = ?applied, "applied database migrations");
        }
        drop(first);
        let pool = Pool::builder()
            .max_size(options.max_size)
            .min_idle(Some(options.min_idle))
            .connection_timeout(options.connect_timeout)
            .build(ConnectionManager::new(database_url))
            .map_err(|e| StoreError::Connect(e.to_string()))?;
        Ok(Self {
            pool,
            quotas: crate::quota::Quotas::default(),
        })
    }

    /// The store with these per-account limits (the defaults otherwise).
    pub fn with_quotas(mut self, quotas: crate::quota::Quotas) -> Self {
        self.quotas = quotas;
        self
    }

    pub fn quotas(&self) -> &crate::quota::Quotas {
        &self.quotas
    }

    fn conn(&self) -> Result<Conn, StoreError> {
        Ok(self.pool.get()?)
    }

    /// Runs a trivial query: is the database reachable?
    pub fn ping(&self) -> Result<(), StoreError> {
        diesel::sql_query("SELECT 1").execute(&mut self.conn()?)?;
        Ok(())
    }

    pub fn pool_use(&self) -> PoolUse {
        let state = self.pool.state();
        PoolUse {
            max_size: self.pool.max_size(),
            connections: state.connections,
            idle: state.idle_connections,
        }
    }
}

/// libpq's messages may quote the connection string; never let a password
/// through into logs or answers.
fn redact_connection_error(message: &str) -> String {
    message
        .split_whitespace()
        .map(|word| {
            if word.contains("password=") || (word.contains("://") && word.contains('@')) {
                "[redacted]"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
