//! The diesel migrations of psbx (`sql/`), embedded at compile time and run at start-up.
//!
//! [`run`] brings a database up to date; [`FINGERPRINT`] names the exact set of
//! migrations, so test templates built from an older set are never reused.

use diesel::RunQueryDsl;
use diesel::pg::PgConnection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

/// Every migration in `sql/`, in order.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("sql");

/// A migration failed to apply.
#[derive(Debug, thiserror::Error)]
#[error("database migration failed: {0}")]
pub struct MigrationError(String);

/// The advisory lock that serialises migration runs of several replicas.
const LOCK_KEY: i64 = 0x0070_7362_786d_6967; // "psbxmig"

/// Applies every pending migration, one replica at a time; returns the versions
/// it applied.
pub fn run(conn: &mut PgConnection) -> Result<Vec<String>, MigrationError> {
    let fail = |e: &dyn std::fmt::Display| MigrationError(e.to_string());
    diesel::sql_query(format!("SELECT pg_advisory_lock({LOCK_KEY})"))
        .execute(conn)
        .map_err(|e| fail(&e))?;
    let result = conn
        .run_pending_migrations(MIGRATIONS)
        .map(|done| done.iter().map(ToString::to_string).collect())
        .map_err(|e| fail(&e));
    diesel::sql_query(format!("SELECT pg_advisory_unlock({LOCK_KEY})"))
        .execute(conn)
        .map_err(|e| fail(&e))?;
    result
}

/// A short hex digest of every file under `sql/` (computed by `build.rs`), so a
/// database built from another set of migrations is recognised.
pub const FINGERPRINT: &str = env!("PSBX_MIGRATIONS_FINGERPRINT");
