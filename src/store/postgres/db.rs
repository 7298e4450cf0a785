//! A handle on one PostgreSQL database: the connection pool, and the reads
//! and maintenance the operator tools need (count, a consistent tally for
//! reconcile and its repair, memberships for replay, quarantine records,
//! marker cleanup, migrations).
//!
//! Invariants: a connection goes back to the pool only when no transaction
//! is open on it ([`Conn::release`]); any other way out (an error, a
//! dropped future) closes it, which makes the server roll back whatever it
//! had open. Every session runs with a `lock_timeout`, an
//! `idle_in_transaction_session_timeout` and a
//! `client_connection_check_interval`, so neither a stuck lock wait, a
//! stalled client nor a closed connection holds rows for long; its socket
//! notices a vanished server ([`session`](super::session)). Every call
//! here ends within its bound: [`PgDbConfig::call_timeout`] (a scan of
//! every post or record: [`PgDbConfig::scan_timeout`]); one that does not
//! is abandoned with its connection closed, as a transient
//! `DeadlineExceeded`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use deadpool::managed::{Object, Pool, PoolError};
use deadpool_postgres::ClientWrapper;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Statement};

use super::codec::{membership_from_row, quarantine_from_row, StoredRecord};
use super::conninfo;
use super::errors::{pool_error, query_error, session_error, timed_out, unavailable_because};
use super::migrations::{self, MigrateError, MigrationReport, SchemaError};
use super::schema;
use super::session::{ServerRefusal, ServerReport, SessionError, SessionSettings, Sessions};
use super::tls::{self, TlsError};
use crate::model::batch::{Membership, MembershipKey};
use crate::store::StoreError;

/// Attempts of one post's repair before giving up (each fails only when a
/// row it writes changed since its snapshot).
pub const REPAIR_MAX_ATTEMPTS: u32 = 5;

/// How to reach the database and how its sessions behave. Its `Debug`
/// hides the password ([`conninfo::redact`]).
#[derive(Clone)]
pub struct PgDbConfig {
    /// A libpq connection string: `postgres://user:password@host:port/db`
    /// or `host=... dbname=...`. Use a database (or `options=-c
    /// search_path=...`) per deployment: the tables have fixed names.
    pub url: String,
    /// Connections at most; at least the flusher's commits in flight, as
    /// each holds one for its transaction.
    pub max_connections: usize,
    /// Sockets and sessions: connect timeout, keepalives, user timeout,
    /// the server's connection check, the idle check on checkout.
    pub session: SessionSettings,
    /// Longest wait for a row lock before the statement fails (55P03,
    /// contention: retried, and split by the flusher if it persists).
    pub lock_timeout: Duration,
    /// A session idle inside a transaction this long is ended by the
    /// server, releasing its locks (a stalled or partitioned client).
    pub idle_in_transaction_timeout: Duration,
    /// Longest a store call may take (a commit attempt's round trips, a
    /// count, a cleanup statement), waiting for a connection included;
    /// also the batch transaction's `statement_timeout`.
    pub call_timeout: Duration,
    /// Longest a scan of every post or record may take (reconcile's tally,
    /// quarantine listings, migrations).
    pub scan_timeout: Duration,
}

impl PgDbConfig {
    /// The defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 8,
            session: SessionSettings::default(),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(30),
            scan_timeout: Duration::from_secs(600),
        }
    }
}

impl std::fmt::Debug for PgDbConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDbConfig")
            .field("url", &conninfo::redact(&self.url))
            .field("max_connections", &self.max_connections)
            .field("session", &self.session)
            .field("lock_timeout", &self.lock_timeout)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("call_timeout", &self.call_timeout)
            .field("scan_timeout", &self.scan_timeout)
            .finish()
    }
}

/// A connection string or pool setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PgConfigError {
    /// The connection string does not parse.
    #[error("invalid PostgreSQL connection string: {}", super::causes::with_causes(.0))]
    Url(tokio_postgres::Error),
    /// The connection string parses, but not as its writer meant.
    #[error("invalid PostgreSQL connection string: {0}")]
    Ambiguous(&'static str),
    /// The pool cannot be built with these settings.
    #[error("invalid PostgreSQL pool settings: {0}")]
    Pool(String),
    /// The TLS settings (`sslmode`, `sslrootcert`) cannot be used.
    #[error("invalid PostgreSQL TLS settings: {0}")]
    Tls(#[from] TlsError),
}

/// Why the server cannot be used: unreachable, or not one hotcount runs on.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No session (the server is unreachable, credentials refused, ...).
    #[error(transparent)]
    Store(StoreError),
    /// A server too old, or a database not in UTF-8.
    #[error(transparent)]
    Refused(ServerRefusal),
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
    pool: Pool<Sessions>,
    call_timeout: Duration,
    scan_timeout: Duration,
}

/// A connection that LISTENs (see [`PgDb::listen`]).
pub struct Listening {
    /// Keeps the connection open.
    _client: tokio_postgres::Client,
    /// The payload of each notification, in order; closed with the
    /// connection.
    pub notifications: tokio::sync::mpsc::UnboundedReceiver<String>,
}

/// A pooled connection that goes back to the pool only through
/// [`Conn::release`]; dropped otherwise, it is closed.
pub struct Conn {
    object: Option<Object<Sessions>>,
}

impl Conn {
    /// The client (an error only once released, which consumes the guard).
    pub fn client(&self) -> Result<&ClientWrapper, StoreError> {
        self.object
            .as_deref()
            .ok_or_else(|| unavailable_because("Connection", "the connection was released"))
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
            .map_err(|_| unavailable_because(op, "fewer statements prepared than asked"))
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
        conninfo::check_url(&config.url).map_err(PgConfigError::Ambiguous)?;
        let (url, tls) = tls::split(&config.url)?;
        let mode = tls.mode;
        let tls = tls::connector(&tls)?;
        let mut pg: tokio_postgres::Config = url.parse().map_err(PgConfigError::Url)?;
        if pg.get_application_name().is_none() {
            pg.application_name("hotcount");
        }
        // Sent in the startup packet: no round trip per session (the
        // connection check, which servers before 14 do not know, is set
        // once the server said which it is: `session/pool.rs`).
        let session = format!(
            "-c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            config.lock_timeout.as_millis().max(1),
            config.idle_in_transaction_timeout.as_millis().max(1),
        );
        let options = match pg.get_options() {
            Some(given) => format!("{given} {session}"),
            None => session,
        };
        pg.options(options);
        let mut settings = config.session.clone();
        if let Some(given) = pg.get_connect_timeout() {
            settings.connect_timeout = *given;
        }
        let wait = settings.connect_timeout;
        let sessions = Sessions::new(pg, mode, tls, settings);
        let pool = Pool::builder(sessions)
            .max_size(config.max_connections.max(1))
            .wait_timeout(Some(wait))
            // Opening is bounded inside (every host tried); this is the backstop.
            .create_timeout(Some(wait + Duration::from_secs(1)))
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| PgConfigError::Pool(e.to_string()))?;
        Ok(Self {
            pool,
            call_timeout: config.call_timeout,
            scan_timeout: config.scan_timeout,
        })
    }

    /// Longest a store call may take ([`PgDbConfig::call_timeout`]).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// `call` of `op`, abandoned as a transient `DeadlineExceeded` after
    /// `limit` (dropping it closes the connection it held).
    pub async fn bounded<T>(
        &self,
        op: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(op, limit, "abandoned; its connection was closed")),
        }
    }

    /// Opens a session of its own (not the pool's, with the same
    /// protections) that LISTENs on `channel`: each notification's payload
    /// arrives on the returned receiver, which closes when the connection
    /// ends. The connection lives as long as the returned [`Listening`].
    pub async fn listen(&self, channel: &str) -> Result<Listening, StoreError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let opened = (self.pool.manager().open_forwarding(Some(tx)))
            .await
            .map_err(|e| session_error("Listen", &e))?;
        // The channel is ours (a constant), quoted as an identifier.
        let listen = format!("LISTEN \"{}\"", channel.replace('"', "\"\""));
        let client = opened.client;
        self.bounded("Listen", self.call_timeout, async {
            client
                .batch_execute(&listen)
                .await
                .map_err(|e| query_error("Listen", &e))
        })
        .await?;
        Ok(Listening {
            _client: client,
            notifications: rx,
        })
    }

    /// Asks the server to cancel the statement running on the connection
    /// of `token` (best effort, bounded by `timeout`: otherwise the server
    /// rolls back when it sees the connection closed).
    pub async fn cancel(&self, token: CancelToken, timeout: Duration) {
        let sessions = self.pool.manager();
        match tokio::time::timeout(timeout, sessions.cancel(&token)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "cancel failed; the server rolls back when it sees the connection closed");
            }
            Err(_) => tracing::debug!(
                "cancel timed out; the server rolls back when it sees the connection closed"
            ),
        }
    }

    /// What the server reports of itself, from a fresh session, checked:
    /// a server older than the oldest supported version or a database not
    /// in UTF-8 is refused with the fix ([`ServerRefusal`]).
    pub async fn check_server(&self) -> Result<ServerReport, ServerError> {
        let op = "CheckServer";
        // A pooled session: opening one checks the server's report.
        let object = self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(SessionError::Refused(refusal)) => ServerError::Refused(refusal),
            other => ServerError::Store(pool_error(op, &other)),
        })?;
        drop(object);
        self.pool
            .manager()
            .last_report()
            .ok_or_else(|| ServerError::Store(unavailable_because(op, "no session reported")))
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
        self.query_rows_within(op, self.call_timeout, sql, params)
            .await
    }

    /// [`Self::query_rows`] bounded by `limit`.
    async fn query_rows_within(
        &self,
        op: &'static str,
        limit: Duration,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.bounded(op, limit, async {
            let conn = self.checkout(op).await?;
            let rows = conn
                .client()?
                .query(sql, params)
                .await
                .map_err(|e| query_error(op, &e))?;
            conn.release();
            Ok(rows)
        })
        .await
    }

    /// A connection for `op`, opened if none is free (one idle for a while
    /// is checked first, and replaced if it does not answer).
    pub async fn checkout(&self, op: &'static str) -> Result<Conn, StoreError> {
        let object = self
            .pool
            .get()
            .await
            .map_err(|e: PoolError<SessionError>| pool_error(op, &e))?;
        Ok(Conn {
            object: Some(object),
        })
    }

    /// Applies the missing schema migrations ([`migrations::migrate`]), on a
    /// server and database hotcount runs on ([`Self::check_server`]).
    pub async fn migrate(&self) -> Result<MigrationReport, MigrateError> {
        self.check_server().await.map_err(|e| match e {
            ServerError::Store(e) => MigrateError::Store(e),
            ServerError::Refused(refusal) => MigrateError::Server(refusal),
        })?;
        let op = "Migrate";
        let migrated = tokio::time::timeout(self.scan_timeout, async {
            let conn = self.checkout(op).await?;
            let report = migrations::migrate(conn.client()?).await?;
            conn.release();
            Ok(report)
        })
        .await;
        migrated.unwrap_or_else(|_| {
            Err(MigrateError::Store(timed_out(
                op,
                self.scan_timeout,
                "abandoned; its transaction was rolled back",
            )))
        })
    }

    /// The newest schema migration applied (`None` before `setup`).
    pub async fn schema_version(&self) -> Result<Option<i32>, StoreError> {
        let op = "SchemaVersion";
        self.bounded(op, self.call_timeout, async {
            let conn = self.checkout(op).await?;
            let version = migrations::schema_version(conn.client()?).await?;
            conn.release();
            Ok(version)
        })
        .await
    }

    /// Checks that the server and database are ones hotcount runs on
    /// ([`Self::check_server`]) and that the database has this build's
    /// schema ([`migrations::check_version`]); returns its version. Never
    /// migrates: only `setup` does.
    pub async fn check_schema(&self) -> Result<i32, SchemaError> {
        let report = self.check_server().await.map_err(|e| match e {
            ServerError::Store(e) => SchemaError::Store(e),
            ServerError::Refused(refusal) => SchemaError::Server(refusal),
        })?;
        tracing::debug!(version = %report.version, encoding = %report.encoding, "PostgreSQL server checked");
        let found = self.schema_version().await?;
        let version = migrations::check_version(found)?;
        if version > migrations::latest_version() {
            tracing::warn!(
                version,
                known = migrations::latest_version(),
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
            .bounded(
                op,
                self.scan_timeout,
                self.snapshot_pair(op, [schema::LIKED_PER_POST, schema::SHARDS_PER_POST], &[]),
            )
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
            .bounded(
                op,
                self.call_timeout,
                self.snapshot_pair(op, [schema::LIKED_OF_POST, schema::COUNT], &[&post_id]),
            )
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
            let attempt_once = self.repair_attempt(post_id);
            match self
                .bounded("Repair", self.call_timeout, attempt_once)
                .await
            {
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

    /// Every membership of `user_id` (liked or not), by post, with its
    /// `updated_at` in microseconds since the epoch; read without locking
    /// (`users export`, and `users erase` finding what to remove).
    pub async fn user_memberships(
        &self,
        user_id: &str,
    ) -> Result<Vec<(MembershipKey, Membership, i64)>, StoreError> {
        let op = "ReadUserMemberships";
        let rows = self
            .query_rows_within(
                op,
                self.scan_timeout,
                schema::READ_USER_MEMBERSHIPS,
                &[&user_id],
            )
            .await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let (key, membership) = membership_from_row(row)?;
            let updated: i64 = row.try_get(6).map_err(|e| query_error(op, &e))?;
            found.push((key, membership, updated));
        }
        Ok(found)
    }

    /// Every user id that has a membership.
    pub async fn user_ids(&self) -> Result<Vec<String>, StoreError> {
        let op = "ReadUserIds";
        let rows = self
            .query_rows_within(op, self.scan_timeout, schema::READ_USER_IDS, &[])
            .await?;
        let mut ids = Vec::with_capacity(rows.len());
        for row in &rows {
            ids.push(row.try_get(0).map_err(|e| query_error(op, &e))?);
        }
        Ok(ids)
    }

    /// Every erased user's keyed hash.
    pub async fn tombstones(&self) -> Result<Vec<String>, StoreError> {
        let op = "ReadTombstones";
        let rows = self.query_rows(op, schema::READ_TOMBSTONES, &[]).await?;
        let mut hashes = Vec::with_capacity(rows.len());
        for row in &rows {
            hashes.push(row.try_get(0).map_err(|e| query_error(op, &e))?);
        }
        Ok(hashes)
    }

    /// The tombstones' generation and every tombstone, in one snapshot.
    pub async fn tombstone_state(&self) -> Result<crate::store::TombstoneState, StoreError> {
        let op = "ReadTombstones";
        let rows = self
            .query_rows(op, schema::READ_TOMBSTONE_STATE, &[])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(crate::store::TombstoneState::default());
        };
        Ok(crate::store::TombstoneState {
            generation: row.try_get(0).map_err(|e| query_error(op, &e))?,
            hashes: row.try_get(1).map_err(|e| query_error(op, &e))?,
        })
    }

    /// Writes the tombstone `user_hash` (idempotent) and bumps the
    /// tombstones' generation, in one statement: it waits for every batch
    /// transaction that read the generation before it, and every batch
    /// checked against the old generation that reads it after applies
    /// nothing.
    pub async fn write_tombstone(&self, user_hash: &str) -> Result<(), StoreError> {
        let op = "WriteTombstone";
        self.query_rows(op, schema::WRITE_TOMBSTONE, &[&user_hash])
            .await?;
        Ok(())
    }

    /// Deletes the tombstone `user_hash`; whether it existed.
    pub async fn delete_tombstone(&self, user_hash: &str) -> Result<bool, StoreError> {
        let op = "DeleteTombstone";
        let rows = self
            .query_rows(op, schema::DELETE_TOMBSTONE, &[&user_hash])
            .await?;
        Ok(!rows.is_empty())
    }

    /// Deletes `user_id`'s memberships on `posts` that are still in the
    /// erasure's state (`seq`, `event_id`, not liked); how many.
    pub async fn delete_erased_memberships(
        &self,
        user_id: &str,
        posts: &[&str],
        seq: i64,
        event_id: &str,
    ) -> Result<u64, StoreError> {
        let op = "DeleteErasedMemberships";
        let rows = self
            .query_rows(
                op,
                &format!("{} RETURNING 1", schema::DELETE_ERASED_MEMBERSHIPS),
                &[&user_id, &posts, &seq, &event_id],
            )
            .await?;
        Ok(rows.len() as u64)
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
            .query_rows_within(
                op,
                self.scan_timeout,
                schema::LIST_QUARANTINE,
                &[&consumer, &limit],
            )
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
