//! A PostgreSQL database made ready for a run (hotcount's migrations, then
//! a clean state), the way a run's consumers reach it (through the run's
//! proxy), and the server's own account of a run: its settings and, by
//! logical decoding, the transactions committed and the most written
//! counter row of a measured window. Reading back what hotcount wrote is
//! [`crate::readback`]'s.
//!
//! Invariants: a run never wipes a database the load generator did not
//! make: [`prepare`] empties hotcount's tables only in a database it
//! created hotcount's schema in (marked by [`OWNER_TABLE`]) or whose
//! tables are empty already, and refuses otherwise. A decoding slot lives
//! only from [`Probe::begin`] to [`Probe::finish`] (dropped by the next
//! `begin` if a run died before), so it never holds WAL back after a run.
//!
//! Why a clean state by truncation, not a database per run: it needs no
//! CREATEDB right nor a second database to connect to, so `--store` can be
//! any database the user owns; `TRUNCATE` gives each run new, empty table
//! files (no dead rows or bloat from the run before), the same start as a
//! fresh database, and it is instant.

use std::net::SocketAddr;

use hotcount::store::postgres::{PgDb, PgDbConfig};
use tokio_postgres::NoTls;

use crate::run_error::RunError;

/// The table that marks a database whose hotcount schema the load
/// generator created, so its runs may empty it.
pub const OWNER_TABLE: &str = "hotcount_loadgen_owner";

/// hotcount's tables, emptied before each run.
const TABLES: &str =
    "memberships, counter_shards, batch_markers, quarantine, post_counts, milestones";

/// The logical decoding slot of a measured window.
const SLOT: &str = "hotcount_loadgen_window";

/// A plain client on `url`, its connection driven by a task.
pub(crate) async fn client(url: &str) -> Result<tokio_postgres::Client, RunError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| RunError::Start(format!("postgres: connect: {e}")))?;
    tokio::spawn(connection);
    Ok(client)
}

fn sql_error(what: &'static str) -> impl Fn(tokio_postgres::Error) -> RunError {
    move |e| RunError::Start(format!("postgres: {what}: {e}"))
}

/// Applies hotcount's migrations to `url` and empties its tables, so a run
/// starts from nothing; refuses a database with hotcount data that the load
/// generator did not create (see the module's invariants).
pub async fn prepare(url: &str) -> Result<(), RunError> {
    let client = client(url).await?;
    let query_bool = |sql: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(sql, &[])
                .await
                .and_then(|row| row.try_get::<_, bool>(0))
                .map_err(sql_error("inspect the database"))
        }
    };
    let had_schema = query_bool("SELECT to_regclass('schema_migrations') IS NOT NULL").await?;
    let owned = query_bool("SELECT to_regclass('hotcount_loadgen_owner') IS NOT NULL").await?;
    if had_schema && !owned {
        let empty = query_bool(
            "SELECT NOT EXISTS (SELECT 1 FROM memberships)
                AND NOT EXISTS (SELECT 1 FROM counter_shards)
                AND NOT EXISTS (SELECT 1 FROM quarantine)",
        )
        .await?;
        if !empty {
            return Err(RunError::Invalid(
                "this PostgreSQL database holds hotcount data the load generator did not \
                 create; a run empties hotcount's tables: give it a database of its own"
                    .into(),
            ));
        }
    }
    let db = PgDb::new(&PgDbConfig::new(url)).map_err(|e| RunError::Start(e.to_string()))?;
    db.migrate()
        .await
        .map_err(|e| RunError::Start(format!("postgres: migrate: {e}")))?;
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {OWNER_TABLE} (created_at timestamptz NOT NULL DEFAULT now());
             TRUNCATE {TABLES}"
        ))
        .await
        .map_err(sql_error("empty hotcount's tables"))?;
    // Each run starts right after a checkpoint, so none lands in one run's
    // window more than in another's by chance; needs the right to
    // (superuser or pg_checkpoint), skipped without it.
    if let Err(e) = client.batch_execute("CHECKPOINT").await {
        tracing::debug!(error = %e, "no CHECKPOINT before the run");
    }
    Ok(())
}

/// The server's settings that shape a measurement, one line:
/// `version()`, then `name=value` of durability, memory and WAL settings.
pub async fn server_settings(url: &str) -> Result<String, RunError> {
    let client = client(url).await?;
    let version: String = client
        .query_one("SELECT version()", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(sql_error("read the server's version"))?;
    let rows = client
        .query(
            "SELECT name, current_setting(name) FROM pg_settings
             WHERE name = ANY($1) ORDER BY name",
            &[&SETTINGS.to_vec()],
        )
        .await
        .map_err(sql_error("read the server's settings"))?;
    let mut line = version;
    for row in rows {
        let (name, value): (String, String) = (row.get(0), row.get(1));
        line.push_str(&format!("; {name}={value}"));
    }
    Ok(line)
}

/// The settings [`server_settings`] reports.
const SETTINGS: [&str; 12] = [
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "wal_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "work_mem",
    "max_connections",
    "commit_delay",
    "effective_io_concurrency",
];

/// `url` with its host and port replaced by `addr` (for a consumer that
/// goes through the proxy); one TCP host only.
pub fn via(url: &str, addr: SocketAddr) -> Result<String, RunError> {
    let invalid = |why: &str| RunError::Invalid(format!("postgres URL: {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (user_info, host) = match authority.rsplit_once('@') {
        Some((user_info, host)) => (format!("{user_info}@"), host),
        None => (String::new(), authority),
    };
    if host.is_empty() || host.contains(',') || tail.contains("host=") {
        return Err(invalid(
            "the run's proxy needs one TCP host in the URL's authority",
        ));
    }
    Ok(format!("{scheme}://{user_info}{addr}{tail}"))
}

/// The server address of `url` (its one TCP host and port).
pub fn server_addr(url: &str) -> Result<SocketAddr, RunError> {
    use std::net::ToSocketAddrs;
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| RunError::Invalid(format!("postgres URL: {e}")))?;
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts() {
        [tokio_postgres::config::Host::Tcp(host)] => host.clone(),
        _ => {
            return Err(RunError::Invalid(
                "postgres URL: the run's proxy needs exactly one TCP host".into(),
            ))
        }
    };
    (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| RunError::Invalid(format!("postgres URL: cannot resolve {host}")))
}

/// What the server says about a measured window, by logical decoding:
/// every change committed in it, read after the window (the decoding is
/// not part of what is measured).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerWindow {
    /// Transactions committed that wrote something.
    pub transactions: u64,
    /// The counter row (`post_id`, shard) written most, if any was.
    pub hottest_row: String,
    /// Its writes (inserts and updates) committed in the window.
    pub hottest_writes: u64,
    /// Writes to the counter rows of the most written post, all its
    /// shards together.
    pub hottest_post_writes: u64,
}

/// A logical decoding slot over a measured window (`None` inside when the
/// server cannot decode: `wal_level` below `logical`, no `test_decoding`,
/// or no replication right; the figures are then missing, not guessed).
pub struct Probe {
    client: tokio_postgres::Client,
    slot: bool,
    end_lsn: Option<String>,
}

impl Probe {
    /// Creates the slot: changes committed from now on are decoded.
    pub async fn begin(url: &str) -> Result<Self, RunError> {
        let client = client(url).await?;
        let _ = client
            .execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                &[&SLOT],
            )
            .await;
        let slot = match client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
                &[&SLOT],
            )
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "no logical decoding: the hottest row's writes are not measured (wal_level=logical needed)");
                false
            }
        };
        Ok(Self {
            client,
            slot,
            end_lsn: None,
        })
    }

    /// Marks the end of the window: changes committed after it are left out.
    pub async fn mark_end(&mut self) {
        self.end_lsn = self
            .client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .and_then(|row| row.try_get(0))
            .ok();
    }

    /// Decodes the window's changes and drops the slot; `None` without a slot.
    pub async fn finish(self) -> Result<Option<ServerWindow>, RunError> {
        if !self.slot {
            return Ok(None);
        }
        let decoded = self
            .client
            .query_one(DECODE_WINDOW, &[&SLOT, &self.end_lsn])
            .await
            .map_err(sql_error("decode the window"));
        let _ = self
            .client
            .execute("SELECT pg_drop_replication_slot($1)", &[&SLOT])
            .await;
        let row = decoded?;
        let get = |i: usize| -> Result<i64, RunError> {
            row.try_get::<_, Option<i64>>(i)
                .map(Option::unwrap_or_default)
                .map_err(sql_error("read the decoded window"))
        };
        let hottest_row: Option<String> = row
            .try_get(1)
            .map_err(sql_error("read the decoded window"))?;
        Ok(Some(ServerWindow {
            transactions: u64::try_from(get(0)?).unwrap_or(0),
            hottest_row: row_name(&hottest_row.unwrap_or_default()),
            hottest_writes: u64::try_from(get(2)?).unwrap_or(0),
            hottest_post_writes: u64::try_from(get(3)?).unwrap_or(0),
        }))
    }
}

/// `post_id[text]:'p' shard[integer]:3` (a decoded row's key) as `p / shard 3`.
fn row_name(key: &str) -> String {
    let parsed = key
        .strip_prefix("post_id[text]:'")
        .and_then(|rest| rest.split_once("' shard[integer]:"));
    match parsed {
        Some((post, shard)) => format!("{post} / shard {shard}"),
        None => key.to_string(),
    }
}

/// Every change committed up to `$2` (an LSN, or NULL for all), from slot
/// `$1`: the transactions, and the counter row with the most writes
/// and the post whose counter rows took the most, all shards together
/// (`test_decoding` prints one line per row written:
/// `table public.counter_shards: UPDATE: post_id[text]:'p' shard[integer]:0 likes[bigint]:7 ...`).
const DECODE_WINDOW: &str = "WITH changes AS MATERIALIZED (
        SELECT data FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL,
            'skip-empty-xacts', '1', 'include-xids', '0', 'include-timestamp', '0')
    ), keys AS (
        SELECT regexp_replace(
                   regexp_replace(data, '^table [^ ]*counter_shards: [A-Z]+: ', ''),
                   ' likes\\[bigint\\]:.*$', '') AS row_key
        FROM changes WHERE data ~ '^table [^ ]*counter_shards: '
    ), hottest AS (
        SELECT row_key, count(*)::int8 AS writes
        FROM keys GROUP BY 1 ORDER BY 2 DESC LIMIT 1
    ), hottest_post AS (
        SELECT regexp_replace(row_key, ' shard\\[integer\\]:.*$', '') AS post_key,
               count(*)::int8 AS writes
        FROM keys GROUP BY 1 ORDER BY 2 DESC LIMIT 1
    )
    SELECT (SELECT count(*)::int8 FROM changes WHERE data = 'COMMIT'),
           (SELECT row_key FROM hottest),
           (SELECT writes FROM hottest),
           (SELECT writes FROM hottest_post)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn via_replaces_host_and_port_and_keeps_the_rest() {
        let addr: SocketAddr = "127.0.0.1:6000".parse().expect("an address");
        assert_eq!(
            via("postgres://u:p@db.example:5432/hc?sslmode=disable", addr).ok(),
            Some("postgres://u:p@127.0.0.1:6000/hc?sslmode=disable".to_string())
        );
        assert_eq!(
            via("postgresql://localhost/hc", addr).ok(),
            Some("postgresql://127.0.0.1:6000/hc".to_string())
        );
        assert!(via("postgres://a,b/hc", addr).is_err());
    }

    #[test]
    fn a_decoded_counter_row_key_is_named_by_post_and_shard() {
        assert_eq!(
            row_name("post_id[text]:'post-000001' shard[integer]:3"),
            "post-000001 / shard 3"
        );
        assert_eq!(row_name("odd"), "odd");
    }
}
