//! The versioned migrations that create the PostgreSQL store's tables,
//! their runner, and the check that a database has this build's schema:
//! changing a table is a new migration here and in `migrations/`.
//!
//! Invariants: [`migrate`] applies each migration once, in version order,
//! in one transaction with its `schema_migrations` row, under an advisory
//! lock, so concurrent `setup`s never apply one twice and a failed run
//! leaves nothing half-applied; an applied migration's text never changes
//! (its SHA-256 is recorded and checked on every run); a database with a
//! migration this build does not know is never migrated, and `run` serves
//! only a database with every migration of this build ([`check_version`]).

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use super::errors::query_error;
use super::session::ServerRefusal;
use crate::store::StoreError;

/// One versioned schema change.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Applied in increasing order; never reused.
    pub version: i32,
    /// A short name, recorded beside the version.
    pub name: &'static str,
    /// The statements (run as one simple query inside the transaction).
    pub sql: &'static str,
}

/// Every migration this build knows, in version order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "rollups",
        sql: include_str!("migrations/0002_rollups.sql"),
    },
    Migration {
        version: 3,
        name: "milestones",
        sql: include_str!("migrations/0003_milestones.sql"),
    },
    Migration {
        version: 4,
        name: "rollup due records",
        sql: include_str!("migrations/0004_rollup_due_records.sql"),
    },
    Migration {
        version: 5,
        name: "milestone settings",
        sql: include_str!("migrations/0005_milestone_settings.sql"),
    },
    Migration {
        version: 6,
        name: "memberships by user, erased users",
        sql: include_str!("migrations/0006_memberships_by_user.sql"),
    },
    Migration {
        version: 7,
        name: "data format",
        sql: include_str!("migrations/0007_data_format.sql"),
    },
    Migration {
        version: 8,
        name: "tombstone generation",
        sql: include_str!("migrations/0008_tombstone_generation.sql"),
    },
];

/// The advisory lock key every [`migrate`] takes: "hotcoun" in ASCII.
const MIGRATION_LOCK: i64 = 0x0068_6f74_636f_756e;

const CREATE_MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

const READ_MIGRATIONS: &str =
    "SELECT version, name, sha256 FROM schema_migrations ORDER BY version";

const RECORD_MIGRATION: &str =
    "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)";

/// Whether the `schema_migrations` table exists.
const HAS_MIGRATIONS_TABLE: &str = "SELECT to_regclass('schema_migrations') IS NOT NULL";

/// The newest applied version, `NULL` when none.
const NEWEST_MIGRATION: &str = "SELECT max(version) FROM schema_migrations";

/// What [`migrate`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versions applied by this run.
    pub applied: Vec<i32>,
    /// Versions found already applied.
    pub present: Vec<i32>,
}

/// Why [`migrate`] failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The server failed a statement or the connection broke.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The server or database is not one hotcount runs on.
    #[error(transparent)]
    Server(ServerRefusal),
    /// The database has a migration this build does not know: it was set
    /// up by a newer hotcount.
    #[error("the database has schema migration {found}; this build knows up to {known}: run a newer hotcount")]
    Newer {
        /// The unknown version found.
        found: i32,
        /// This build's newest version.
        known: i32,
    },
    /// An applied migration's text differs from this build's.
    #[error("schema migration {version} ({name}) differs from the one applied (sha256 {recorded}, this build {built})")]
    Changed {
        /// The migration.
        version: i32,
        /// Its name.
        name: &'static str,
        /// The digest recorded when it was applied.
        recorded: String,
        /// The digest of this build's text.
        built: String,
    },
}

impl MigrateError {
    /// Whether running [`migrate`] again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, MigrateError::Store(e) if e.is_retryable())
    }
}

/// Brings the database `client` is connected to up to this build's schema:
/// applies the missing [`MIGRATIONS`] in one transaction (see the module
/// invariants). Idempotent: a second run applies nothing.
pub async fn migrate(client: &Client) -> Result<MigrationReport, MigrateError> {
    let op = "Migrate";
    let err = |e: tokio_postgres::Error| MigrateError::Store(query_error(op, &e));
    client.batch_execute("BEGIN").await.map_err(err)?;
    let result = apply_missing(client).await;
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = client.batch_execute(end).await;
    let report = result?;
    ended.map_err(err)?;
    Ok(report)
}

async fn apply_missing(client: &Client) -> Result<MigrationReport, MigrateError> {
    let err = |e: tokio_postgres::Error| MigrateError::Store(query_error("Migrate", &e));
    client
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err)?;
    client
        .batch_execute(CREATE_MIGRATIONS_TABLE)
        .await
        .map_err(err)?;
    let rows = client.query(READ_MIGRATIONS, &[]).await.map_err(err)?;
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    let mut report = MigrationReport::default();
    for row in rows {
        let version: i32 = row.try_get(0).map_err(err)?;
        let recorded: String = row.try_get(2).map_err(err)?;
        let Some(migration) = MIGRATIONS.iter().find(|m| m.version == version) else {
            return Err(MigrateError::Newer {
                found: version,
                known,
            });
        };
        let built = sha256_hex(migration.sql);
        if recorded != built {
            return Err(MigrateError::Changed {
                version,
                name: migration.name,
                recorded,
                built,
            });
        }
        report.present.push(version);
    }
    for migration in MIGRATIONS {
        if report.present.contains(&migration.version) {
            continue;
        }
        client.batch_execute(migration.sql).await.map_err(err)?;
        let digest = sha256_hex(migration.sql);
        client
            .execute(
                RECORD_MIGRATION,
                &[&migration.version, &migration.name, &digest],
            )
            .await
            .map_err(err)?;
        tracing::info!(
            version = migration.version,
            name = migration.name,
            "schema migration applied"
        );
        report.applied.push(migration.version);
    }
    Ok(report)
}

fn sha256_hex(text: &str) -> String {
    let mut out = String::with_capacity(64);
    for byte in Sha256::digest(text.as_bytes()) {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// The newest migration this build knows: the schema `run` needs.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Why the service refuses a database's schema: `setup` has not brought
/// it to this build's migrations.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The schema version could not be read (the server is unreachable,
    /// the credentials are refused, ...).
    #[error("reading the schema version: {0}")]
    Store(StoreError),
    /// The server or database is not one hotcount runs on.
    #[error(transparent)]
    Server(ServerRefusal),
    /// No migration was ever applied.
    #[error("the database has no hotcount schema (this build needs schema migration {needed}): run `hotcount setup --store <the same URL>` first")]
    Missing {
        /// This build's newest migration.
        needed: i32,
    },
    /// Older migrations only.
    #[error("the database schema is at migration {found}, this build needs {needed}: run `hotcount setup --store <the same URL>` with this build first")]
    Behind {
        /// The newest migration applied.
        found: i32,
        /// This build's newest migration.
        needed: i32,
    },
}

// Not `#[from]`: that would also make the store error the source, and a
// chain printer (`{:#}`) would print it twice.
impl From<StoreError> for SchemaError {
    fn from(error: StoreError) -> Self {
        SchemaError::Store(error)
    }
}

impl SchemaError {
    /// Whether checking again may succeed without an operator running
    /// `setup` (only a failed read).
    pub fn is_retryable(&self) -> bool {
        matches!(self, SchemaError::Store(e) if e.is_retryable())
    }
}

/// Whether a database whose newest applied migration is `found` serves
/// this build: it must have every migration up to [`latest_version`]. A
/// newer schema (a newer hotcount ran `setup`) is accepted: migrations
/// only add, so it keeps what this build uses; `setup` with this build
/// refuses it ([`MigrateError::Newer`]).
pub fn check_version(found: Option<i32>) -> Result<i32, SchemaError> {
    let needed = latest_version();
    match found {
        None => Err(SchemaError::Missing { needed }),
        Some(found) if found < needed => Err(SchemaError::Behind { found, needed }),
        Some(found) => Ok(found),
    }
}

/// The newest schema migration applied to the database `client` reaches
/// (`None` before any).
pub async fn schema_version(client: &Client) -> Result<Option<i32>, StoreError> {
    let err = |e: tokio_postgres::Error| query_error("SchemaVersion", &e);
    let exists = client
        .query_one(HAS_MIGRATIONS_TABLE, &[])
        .await
        .map_err(err)?;
    if !exists.try_get::<_, bool>(0).map_err(err)? {
        return Ok(None);
    }
    let newest = client.query_one(NEWEST_MIGRATION, &[]).await.map_err(err)?;
    newest.try_get(0).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_in_strictly_increasing_version_order() {
        let versions: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(versions.first(), Some(&1));
    }

    #[test]
    fn only_a_schema_with_every_migration_of_this_build_serves_it() {
        let needed = latest_version();
        assert!(matches!(
            check_version(None),
            Err(SchemaError::Missing { .. })
        ));
        assert!(matches!(
            check_version(Some(needed - 1)),
            Err(SchemaError::Behind { found, .. }) if found == needed - 1
        ));
        assert_eq!(check_version(Some(needed)).ok(), Some(needed));
        assert_eq!(check_version(Some(needed + 1)).ok(), Some(needed + 1));
        let advice = SchemaError::Missing { needed }.to_string();
        assert!(advice.contains("hotcount setup --store"), "{advice}");
    }
}
