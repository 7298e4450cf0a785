//! A handle on one PostgreSQL database: the connection pool, and the reads
//! and maintenance the operator tools need (count, a consistent tally for
//! reconcile and its repair, memberships for replay, quarantine records,
//! marker cleanup, migrations).
//!
//! Invariants: a connection goes back to the pool only when no transaction
//! is open on it ([`Conn::release`]); any other way out (an error, a
//! dropped future) closes it, which makes the server roll back whatever it
//! had open. Every session runs with a `lock_timeout`, an
//! `idle_in_transaction_session_timeout` and (PostgreSQL 14+) a
//! `client_connection_check_interval`, so neither a stuck lock wait, a
//! stalled client nor a closed connection holds rows for long.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, NoTls, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::codec::{membership_from_row, quarantine_from_row, StoredRecord};
use super::errors::{pool_error, query_error, unavailable};
use super::schema::{self, MigrateError, MigrationReport, SchemaError};
use super::tls::{self, TlsError};
use crate::pipeline::batch::{Membership, MembershipKey};
use crate::store::StoreError;

/// Attempts of one post's repair before giving up (each fails only when a
/// row it writes changed since its snapshot).
pub const REPAIR_MAX_ATTEMPTS: u32 = 5;

/// How to reach the database and how its sessions behave.
#[derive(Clone, Debug)]
pub struct PgDbConfig {
    /// A libpq connection string: `postgres://user:password@host:port/db`
    /// or `host=... dbname=...`. Use a database (or `options=-c
    /// search_path=...`) per deployment: the tables have fixed names.
    pub url: String,
    /// Connections at most; at least the flusher's commits in flight, as
    /// each holds one for its transaction.
    pub max_connections: usize,
    /// Longest wait to open a connection, and for a free one.
    pub connect_timeout: Duration,
    /// Longest wait for a row lock before the statement fails (55P03,
    /// contention: retried, and split by the flusher if it persists).
    pub lock_timeout: Duration,
    /// A session idle inside a transaction this long is ended by the
    /// server, releasing its locks (a stalled or partitioned client).
    pub idle_in_transaction_timeout: Duration,
    /// How often the server checks, while a statement runs or waits for a
    /// lock, that the client is still connected, so the statement of a
    /// connection the store closed ends (and releases its locks) even if
    /// the cancel request missed it. `None` for servers before
    /// PostgreSQL 14, which do not know the setting.
    pub connection_check_interval: Option<Duration>,
}

impl PgDbConfig {
    /// The defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(30),
            connection_check_interval: Some(Duration::from_secs(1)),
        }
    }
}

/// A connection string or pool setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PgConfigError {
    /// The connection string does not parse.
    #[error("invalid PostgreSQL connection string: {0}")]
    Url(#[source] tokio_postgres::Error),
    /// The pool cannot be built with these settings.
    #[error("invalid PostgreSQL pool settings: {0}")]
    Pool(String),
    /// The TLS settings (`sslmode`, `sslrootcert`) cannot be used.
    #[error("invalid PostgreSQL TLS settings: {0}")]
    Tls(#[from] TlsError),
}

/// One post's two sides, read at one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostTally {
    /// The post.
    pub post_id: String,
    /// Memberships of the post with `liked`.
    pub liked: i64,
    /// Sum of its counter shards.
    pub shards_sum: i64,
}

impl PostTally {
    /// `liked - shards_sum`: the increment that makes the count right.
    pub fn difference(&self) -> i64 {
        self.liked - self.shards_sum
    }
}

/// The pool over one database; a cheap cloneable handle. Opens connections
/// on first use, not when built.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
    /// The connector of the pool's connections (`None`: plain TCP), for
    /// cancel requests and the connections that LISTEN.
    tls: Option<MakeRustlsConnect>,
    /// The pool's connection settings, for a connection of its own
    /// ([`Self::listen`]).
    config: tokio_postgres::Config,
}

/// A connection that LISTENs (see [`PgDb::listen`]).
pub struct Listening {
    /// Keeps the connection open.
    _client: tokio_postgres::Client,
    /// The payload of each notification, in order; closed with the
    /// connection.
    pub notifications: tokio::sync::mpsc::UnboundedReceiver<String>,
}

/// Drives `connection`, sending each notification's payload to `tx`, until
/// the connection ends (or nobody receives).
async fn forward_notifications<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures::StreamExt;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                if tx.send(n.payload().to_string()).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "the LISTEN connection ended");
                return;
            }
        }
    }
}

/// A pooled connection that goes back to the pool only through
/// [`Conn::release`]; dropped otherwise, it is closed.
pub struct Conn {
    object: Option<Object>,
}

impl Conn {
    /// The client (an error only once released, which consumes the guard).
    pub fn client(&self) -> Result<&ClientWrapper, StoreError> {
        self.object
            .as_deref()
            .ok_or_else(|| unavailable("Connection", "the connection was released"))
    }

    /// `sqls` prepared on this connection: from its cache, without a round
    /// trip, once prepared. Requests meant to share a round trip must name
    /// statements: tokio-postgres sends a request when its future is first
    /// polled, but SQL given as text is prepared first and executed a round
    /// trip later, after requests polled after it (a COMMIT, say).
    pub async fn statements<const N: usize>(
        &self,
        op: &'static str,
        sqls: [&str; N],
    ) -> Result<[Statement; N], StoreError> {
        let client = self.client()?;
        let prepared = futures::future::try_join_all(sqls.map(|sql| client.prepare_cached(sql)))
            .await
            .map_err(|e| query_error(op, &e))?;
        prepared
            .try_into()
            .map_err(|_| unavailable(op, "fewer statements prepared than asked"))
    }

    /// How many statements are prepared on this connection (it grows
    /// when [`Conn::statements`] had to prepare, costing a round trip).
    pub fn prepared(&self) -> usize {
        self.object
            .as_deref()
            .map_or(0, |c| c.statement_cache.size())
    }

    /// Returns the connection to the pool: call only when no transaction
    /// is open on it.
    pub fn release(mut self) {
        drop(self.object.take());
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            // Out of the pool and dropped: the connection task ends, the
            // socket closes, and the server rolls back what was open.
            drop(Object::take(object));
        }
    }
}

impl PgDb {
    /// A pool over `config.url` (no connection is opened yet).
    pub fn new(config: &PgDbConfig) -> Result<Self, PgConfigError> {
        let (url, tls) = tls::split(&config.url)?;
        let tls = tls::connector(&tls)?;
        let mut pg: tokio_postgres::Config = url.parse().map_err(PgConfigError::Url)?;
        if pg.get_application_name().is_none() {
            pg.application_name("hotcount");
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(config.connect_timeout);
        }
        // Sent in the startup packet: no round trip per session.
        let mut session = format!(
            "-c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            config.lock_timeout.as_millis().max(1),
            config.idle_in_transaction_timeout.as_millis().max(1),
        );
        if let Some(interval) = config.connection_check_interval {
            let interval = interval.as_millis().max(1);
            session.push_str(&format!(" -c client_connection_check_interval={interval}"));
        }
        let options = match pg.get_options() {
            Some(given) => format!("{given} {session}"),
            None => session,
        };
        pg.options(options);
        let recycling = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let config_copy = pg.clone();
        let manager = match &tls {
            Some(connector) => Manager::from_config(pg, connector.clone(), recycling),
            None => Manager::from_config(pg, NoTls, recycling),
        };
        let pool = Pool::builder(manager)
            .max_size(config.max_connections.max(1))
            .wait_timeout(Some(config.connect_timeout))
            .create_timeout(Some(config.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| PgConfigError::Pool(e.to_string()))?;
        Ok(Self {
            pool,
            tls,
            config: config_copy,
        })
    }

    /// Opens a connection of its own (not the pool's) that LISTENs on
    /// `channel`: each notification's payload arrives on the returned
    /// receiver, which closes when the connection ends. The connection
    /// lives as long as the returned [`Listening`].
    pub async fn listen(&self, channel: &str) -> Result<Listening, StoreError> {
        let op = "Listen";
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = match &self.tls {
            Some(connector) => {
                let (client, connection) =
                    self.config.connect(connector.clone()).await.map_err(err)?;
                tokio::spawn(forward_notifications(connection, tx));
                client
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(err)?;
                tokio::spawn(forward_notifications(connection, tx));
                client
            }
        };
        // The channel is ours (a constant), quoted as an identifier.
        let listen = format!("LISTEN \"{}\"", channel.replace('"', "\"\""));
        client.batch_execute(&listen).await.map_err(err)?;
        Ok(Listening {
            _client: client,
            notifications: rx,
        })
    }

    /// Asks the server to cancel the statement running on the connection
    /// of `token` (best effort, bounded by `timeout`: otherwise the server
    /// rolls back when it sees the connection closed).
    pub async fn cancel(&self, token: CancelToken, timeout: Duration) {
        let cancelled = match &self.tls {
            Some(connector) => {
                tokio::time::timeout(timeout, token.cancel_query(connector.clone())).await
            }
            None => tokio::time::timeout(timeout, token.cancel_query(NoTls)).await,
        };
        match cancelled {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "cancel failed; the server rolls back when it sees the connection closed");
            }
            Err(_) => tracing::debug!(
                "cancel timed out; the server rolls back when it sees the connection closed"
            ),
        }
    }

    /// Runs one statement outside a transaction on a pooled connection and
    /// returns its rows; the connection goes back to the pool only when the
    /// statement ended normally.
    pub(super) async fn query_rows(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let conn = self.checkout(op).await?;
        let rows = conn
            .client()?
            .query(sql, params)
            .await
            .map_err(|e| query_error(op, &e))?;
        conn.release();
        Ok(rows)
    }

    /// A connection for `op`, opened if none is free.
    pub async fn checkout(&self, op: &'static str) -> Result<Conn, StoreError> {
        let object = self.pool.get().await.map_err(|e| pool_error(op, &e))?;
        Ok(Conn {
            object: Some(object),
        })
    }

    /// Applies the missing schema migrations ([`schema::migrate`]).
    pub async fn migrate(&self) -> Result<MigrationReport, MigrateError> {
        let conn = self.checkout("Migrate").await?;
        let report = schema::migrate(conn.client()?).await?;
        conn.release();
        Ok(report)
    }

    /// The newest schema migration applied (`None` before `setup`).
    pub async fn schema_version(&self) -> Result<Option<i32>, StoreError> {
        let conn = self.checkout("SchemaVersion").await?;
        let version = schema::schema_version(conn.client()?).await?;
        conn.release();
        Ok(version)
    }

    /// Checks that the database has this build's schema
    /// ([`schema::check_version`]); returns its version. Never migrates:
    /// only `setup` does.
    pub async fn check_schema(&self) -> Result<i32, SchemaError> {
        let found = self.schema_version().await?;
        let version = schema::check_version(found)?;
        if version > schema::latest_version() {
            tracing::warn!(
                version,
                known = schema::latest_version(),
                "the database schema is newer than this build (a newer hotcount ran setup)"
            );
        }
        Ok(version)
    }

    /// The like count of `post_id`: the sum of its counter shards.
    pub async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        let op = "Count";
        let rows = self.query_rows(op, schema::COUNT, &[&post_id]).await?;
        match rows.first() {
            Some(row) => row.try_get(0).map_err(|e| query_error(op, &e)),
            None => Ok(0),
        }
    }

    /// Every post with liked memberships or counter shards, both sides read
    /// in one REPEATABLE READ READ ONLY transaction (one snapshot, however
    /// many commits land meanwhile), in one round trip. Sorted by post.
    pub async fn tally(&self) -> Result<Vec<PostTally>, StoreError> {
        let op = "Tally";
        let [liked, shards] = self
            .snapshot_pair(op, [schema::LIKED_PER_POST, schema::SHARDS_PER_POST], &[])
            .await?;
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let mut posts: BTreeMap<String, PostTally> = BTreeMap::new();
        for row in liked {
            let post_id: String = row.try_get(0).map_err(err)?;
            let tally = posts.entry(post_id.clone()).or_default();
            tally.post_id = post_id;
            tally.liked = row.try_get(1).map_err(err)?;
        }
        for row in shards {
            let post_id: String = row.try_get(0).map_err(err)?;
            let tally = posts.entry(post_id.clone()).or_default();
            tally.post_id = post_id;
            tally.shards_sum = row.try_get(1).map_err(err)?;
        }
        Ok(posts.into_values().collect())
    }

    /// Runs two queries with the same `params` in one REPEATABLE READ READ
    /// ONLY transaction (one snapshot), pipelined in one round trip.
    async fn snapshot_pair(
        &self,
        op: &'static str,
        sqls: [&str; 2],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<[Vec<tokio_postgres::Row>; 2], StoreError> {
        let conn = self.checkout(op).await?;
        let [first, second] = conn.statements(op, sqls).await?;
        let client = conn.client()?;
        let (begun, first, second, ended) = tokio::join!(
            biased;
            client.batch_execute(schema::BEGIN_SNAPSHOT),
            client.query(&first, params),
            client.query(&second, params),
            client.batch_execute(schema::COMMIT),
        );
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        begun.map_err(err)?;
        let rows = [first.map_err(err)?, second.map_err(err)?];
        ended.map_err(err)?;
        conn.release();
        Ok(rows)
    }

    /// One post's [`PostTally`], read at one snapshot.
    pub async fn tally_post(&self, post_id: &str) -> Result<PostTally, StoreError> {
        let op = "TallyPost";
        let [liked, shards] = self
            .snapshot_pair(op, [schema::LIKED_OF_POST, schema::COUNT], &[&post_id])
            .await?;
        // Both are aggregates: exactly one row each.
        let first = |rows: &[tokio_postgres::Row]| -> Result<i64, StoreError> {
            match rows.first() {
                Some(row) => row.try_get(0).map_err(|e| query_error(op, &e)),
                None => Ok(0),
            }
        };
        Ok(PostTally {
            post_id: post_id.to_string(),
            liked: first(&liked)?,
            shards_sum: first(&shards)?,
        })
    }

    /// Compares one post's counter with its liked memberships and, if they
    /// differ, adds the difference to its shard 0; returns the tally as
    /// found and the correction committed (0 when none was needed).
    ///
    /// Why this is exact while consumers commit, without locking them out:
    /// every consumer commit writes a post's memberships and the matching
    /// increments together, so it leaves `liked - shards` unchanged; the
    /// difference read at the repair's snapshot is therefore still the
    /// difference when the correction commits, except for a correction or
    /// another write to shard 0 since the snapshot. That one is caught:
    /// the repair runs at REPEATABLE READ, so writing a row that changed
    /// since its snapshot fails (40001) and the repair starts again from a
    /// fresh snapshot. A repair whose COMMIT answer was lost is not applied
    /// twice either: the next attempt reads the corrected difference, 0.
    pub async fn repair_post(&self, post_id: &str) -> Result<(PostTally, i64), StoreError> {
        let mut attempt = 1;
        loop {
            match self.repair_attempt(post_id).await {
                Err(e) if e.is_retryable() && attempt < REPAIR_MAX_ATTEMPTS => {
                    tracing::debug!(error = %e, attempt, "repair attempt failed; retrying");
                    tokio::time::sleep(Duration::from_millis(10 << attempt)).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn repair_attempt(&self, post_id: &str) -> Result<(PostTally, i64), StoreError> {
        let op = "Repair";
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let conn = self.checkout(op).await?;
        let [liked, shards, correct] = conn
            .statements(
                op,
                [
                    schema::LIKED_OF_POST,
                    schema::COUNT,
                    schema::CORRECT_SHARD_ZERO,
                ],
            )
            .await?;
        let client = conn.client()?;
        let by_post: [&(dyn ToSql + Sync); 1] = [&post_id];
        let (begun, liked, shards) = tokio::join!(
            biased;
            client.batch_execute(schema::BEGIN_REPAIR),
            client.query_one(&liked, &by_post),
            client.query_one(&shards, &by_post),
        );
        begun.map_err(err)?;
        let tally = PostTally {
            post_id: post_id.to_string(),
            liked: liked.map_err(err)?.try_get(0).map_err(err)?,
            shards_sum: shards.map_err(err)?.try_get(0).map_err(err)?,
        };
        let correction = tally.difference();
        if correction == 0 {
            client.batch_execute(schema::ROLLBACK).await.map_err(err)?;
            conn.release();
            return Ok((tally, 0));
        }
        let params: [&(dyn ToSql + Sync); 2] = [&post_id, &correction];
        let (corrected, ended) = tokio::join!(
            biased;
            client.execute(&correct, &params),
            client.batch_execute(schema::COMMIT),
        );
        corrected.map_err(err)?;
        ended.map_err(err)?;
        conn.release();
        tracing::info!(post_id, correction, "counter repaired");
        Ok((tally, correction))
    }

    /// The stored memberships of `keys` (absent ones are left out), read
    /// without locking (replay's dry run).
    pub async fn memberships(
        &self,
        keys: &[MembershipKey],
    ) -> Result<HashMap<MembershipKey, Membership>, StoreError> {
        let op = "ReadMemberships";
        let post_ids: Vec<&str> = keys.iter().map(|k| k.post_id.as_str()).collect();
        let user_ids: Vec<&str> = keys.iter().map(|k| k.user_id.as_str()).collect();
        let rows = self
            .query_rows(op, schema::READ_MEMBERSHIPS, &[&post_ids, &user_ids])
            .await?;
        rows.iter().map(membership_from_row).collect()
    }

    /// Quarantine records, oldest first: of `consumer`, or every consumer's.
    pub async fn quarantine(
        &self,
        consumer: Option<&str>,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        self.quarantine_records(consumer, None).await
    }

    /// Up to `limit` (all when `None`) quarantine records, oldest first: of
    /// `consumer`, or every consumer's.
    pub async fn quarantine_records(
        &self,
        consumer: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let op = "ListQuarantine";
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = self
            .query_rows(op, schema::LIST_QUARANTINE, &[&consumer, &limit])
            .await?;
        rows.iter().map(quarantine_from_row).collect()
    }

    /// The quarantine record `record_id` of `consumer`, if any.
    pub async fn quarantine_record(
        &self,
        consumer: &str,
        record_id: &str,
    ) -> Result<Option<StoredRecord>, StoreError> {
        let op = "ReadQuarantine";
        let rows = self
            .query_rows(op, schema::READ_QUARANTINE_RECORD, &[&consumer, &record_id])
            .await?;
        rows.first().map(quarantine_from_row).transpose()
    }

    /// Deletes the quarantine record `record_id` of `consumer`; whether it
    /// existed.
    pub async fn delete_quarantine_record(
        &self,
        consumer: &str,
        record_id: &str,
    ) -> Result<bool, StoreError> {
        let op = "DeleteQuarantine";
        let rows = self
            .query_rows(
                op,
                schema::DELETE_QUARANTINE_RECORD,
                &[&consumer, &record_id],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    /// Deletes up to `limit` expired batch markers, oldest first; returns
    /// how many. Run it periodically (a marker only resolves retries of
    /// its own batch, so expired ones are dead weight); from SQL alone the
    /// same statement can run from `pg_cron`.
    pub async fn delete_expired_markers(&self, limit: i64) -> Result<u64, StoreError> {
        let op = "DeleteExpiredMarkers";
        // One row returned per marker deleted.
        let deleted = self
            .query_rows(op, schema::DELETE_EXPIRED_MARKERS, &[&limit])
            .await?;
        Ok(deleted.len() as u64)
    }
}
