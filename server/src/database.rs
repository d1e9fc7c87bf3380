//! Opens the store the configuration names: the `database_url` when set, else the
//! embedded cluster under the data directory, which is stopped again when the
//! returned [`Database`] is dropped (if this process is the one to stop it).

use crate::config::Config;
use crate::embedded_pg::{EmbeddedPgError, EmbeddedPostgres};
use psbx_actors::store::{PoolOptions, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error(transparent)]
    Embedded(#[from] EmbeddedPgError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("a blocking task failed: {0}")]
    Join(String),
}

/// Who opens the database, which decides what happens to the embedded cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// `psbx serve`: creates the cluster if needed and stops it on shutdown.
    Server,
    /// An operator command: uses an existing cluster, and stops it afterwards only
    /// if the command had to start it.
    Command,
}

/// The store, plus the embedded cluster it lives in when there is one.
pub struct Database {
    pub store: Store,
    /// Where the data lives, for logs: `embedded (<dir>)` or the redacted URL.
    pub location: String,
    cluster_to_stop: Option<EmbeddedPostgres>,
}

impl Database {
    pub fn open(config: &Config, opener: Opener) -> Result<Self, DatabaseError> {
        let options = match opener {
            Opener::Server => PoolOptions {
                max_size: config.database_pool_size,
                ..PoolOptions::default()
            },
            Opener::Command => PoolOptions::short_lived(2),
        };
        if let Some(url) = &config.database_url {
            return Ok(Self {
                store: Store::open(url, options)?.with_quotas(config.quotas.quotas()),
                location: crate::config::redact_url(url),
                cluster_to_stop: None,
            });
        }
        let cluster = EmbeddedPostgres::new(config.shared_dir(), &config.postgres)?;
        let running = cluster.ensure_running(opener == Opener::Server)?;
        let stop = opener == Opener::Server || running.started_here;
        let location = format!("embedded ({})", config.shared_dir().join("pg").display());
        match Store::open(&running.url, options) {
            Ok(store) => Ok(Self {
                store: store.with_quotas(config.quotas.quotas()),
                location,
                cluster_to_stop: stop.then_some(cluster),
            }),
            Err(e) => {
                if stop {
                    let _ = cluster.stop();
                }
                Err(e.into())
            }
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster_to_stop.take() {
            match cluster.stop() {
                Ok(()) => tracing::info!("stopped the embedded PostgreSQL cluster"),
                Err(e) => {
                    tracing::error!(error = %e, "could not stop the embedded PostgreSQL cluster")
                }
            }
        }
    }
}
