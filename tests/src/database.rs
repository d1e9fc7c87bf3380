//! [`TestDatabase`]: one fresh database per test, created from a template that
//! holds the migrated schema, on the cluster named by `PSBX_TEST_DATABASE_URL`.

use diesel::pg::PgConnection;
use diesel::{Connection, RunQueryDsl};

/// The variable `scripts/test` sets to a superuser URL of its test cluster.
pub const URL_VAR: &str = "PSBX_TEST_DATABASE_URL";

/// An advisory lock key: one process at a time builds the template.
const TEMPLATE_LOCK: i64 = 0x0070_7362_7874_706c;

/// A database of its own for one test; dropped (forcibly) on drop.
pub struct TestDatabase {
    name: String,
    url: String,
    admin_url: String,
}

impl TestDatabase {
    /// Creates the database from the migrated template (building the template
    /// first if this set of migrations has none yet).
    pub fn new() -> Self {
        let admin_url = std::env::var(URL_VAR).unwrap_or_else(|_| {
            panic!(
                "{URL_VAR} is not set: these tests need the PostgreSQL cluster that \
                 scripts/test starts; run the suite with scripts/test"
            )
        });
        let mut admin = PgConnection::establish(&admin_url)
            .unwrap_or_else(|e| panic!("cannot connect to the test cluster ({URL_VAR}): {e}"));
        let template = ensure_template(&mut admin, &admin_url);
        let name = format!("psbx_t_{}", suffix());
        diesel::sql_query(format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .execute(&mut admin)
            .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
        Self {
            url: with_database(&admin_url, &name),
            name,
            admin_url,
        }
    }

    /// The URL of this test's database.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one SQL statement on this test's database (rows as an earlier
    /// version left them, say).
    pub fn execute(&self, sql: &str) {
        let mut conn = PgConnection::establish(&self.url).expect("the test database");
        diesel::sql_query(sql)
            .execute(&mut conn)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Adds a second account with this id (`acct_...`), for tests of account
    /// scoping; returns the id.
    pub fn add_account(&self, id: &str) -> String {
        let mut conn = PgConnection::establish(&self.url).expect("the test database");
        diesel::sql_query("INSERT INTO accounts (id, name) VALUES ($1, 'other')")
            .bind::<diesel::sql_types::Text, _>(id)
            .execute(&mut conn)
            .expect("inserting an account");
        id.to_owned()
    }
}

impl Default for TestDatabase {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let dropped = PgConnection::establish(&self.admin_url).and_then(|mut admin| {
            diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut admin)
            .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
        });
        if let Err(e) = dropped {
            eprintln!("warning: could not drop test database {}: {e}", self.name);
        }
    }
}

/// The template for the current migrations, `psbx_tpl_<fingerprint>`.
fn ensure_template(admin: &mut PgConnection, admin_url: &str) -> String {
    let template = format!("psbx_tpl_{}", psbx_migrations::FINGERPRINT);
    let building = format!("{template}_building");
    diesel::sql_query(format!("SELECT pg_advisory_lock({TEMPLATE_LOCK})"))
        .execute(admin)
        .expect("taking the template lock");
    if !database_exists(admin, &template) {
        // Whatever a crashed build left is thrown away; the rename makes the
        // finished template appear at once.
        for sql in [
            format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"),
            format!("CREATE DATABASE {building}"),
        ] {
            diesel::sql_query(&sql)
                .execute(admin)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        {
            let mut conn = PgConnection::establish(&with_database(admin_url, &building))
                .unwrap_or_else(|e| panic!("connecting to {building}: {e}"));
            psbx_migrations::run(&mut conn).expect("migrating the template database");
        }
        diesel::sql_query(format!("ALTER DATABASE {building} RENAME TO {template}"))
            .execute(admin)
            .unwrap_or_else(|e| panic!("publishing the template: {e}"));
    }
    diesel::sql_query(format!("SELECT pg_advisory_unlock({TEMPLATE_LOCK})"))
        .execute(admin)
        .expect("releasing the template lock");
    template
}

fn database_exists(admin: &mut PgConnection, name: &str) -> bool {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let found: Count =
        diesel::sql_query("SELECT count(*) AS n FROM pg_database WHERE datname = $1")
            .bind::<diesel::sql_types::Text, _>(name)
            .get_result(admin)
            .expect("reading pg_database");
    found.n > 0
}

/// The admin URL with its database replaced.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{database}?{q}"),
        None => format!("{root}/{database}"),
    }
}

fn suffix() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("random bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn swaps_only_the_database() {
        assert_eq!(
            with_database("postgres://u:p@127.0.0.1:5/postgres", "x"),
            "postgres://u:p@127.0.0.1:5/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h:5/postgres?sslmode=disable", "x"),
            "postgres://u:p@h:5/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:5", "x"), "postgres://h:5/x");
    }
}
