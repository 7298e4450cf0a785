//! A handle on one PostgreSQL database: its settings, the connection
//! pool, the connections it hands out, the bounds every call runs within,
//! the server and schema checks, LISTEN and cancel requests. What runs on
//! it lives beside: the batch commit (`mod.rs`), [`repair`](super::repair),
//! [`operator`](super::operator), rollups, milestones, the data format.
//!
//! Invariants: a connection goes back to the pool only when no transaction
//! is open on it ([`Conn::release`]); any other way out (an error, a
//! dropped future) closes it, which makes the server roll back whatever it
//! had open. Every session runs with a `lock_timeout`, an
//! `idle_in_transaction_session_timeout` and a
//! `client_connection_check_interval`, so neither a stuck lock wait, a
//! stalled client nor a closed connection holds rows for long; its socket
//! notices a vanished server ([`session`](super::session)). Every call
//! ends within its bound ([`PgDb::bounded`]): [`PgDbConfig::call_timeout`]
//! (a scan of every post or record: [`PgDbConfig::scan_timeout`]); one
//! that does not is abandoned with its connection closed, as a transient
//! `DeadlineExceeded`.

use std::future::Future;
use std::time::Duration;

use deadpool::managed::{Object, Pool, PoolError};
use deadpool_postgres::ClientWrapper;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Statement};

use super::conninfo;
use super::errors::{pool_error, query_error, session_error, timed_out, unavailable_because};
use super::migrations::{self, MigrateError, MigrationReport, SchemaError};
use super::session::{ServerRefusal, ServerReport, SessionError, SessionSettings, Sessions};
use super::tls::{self, TlsError};
use crate::store::StoreError;

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

    /// Longest a scan of every post or record may take
    /// ([`PgDbConfig::scan_timeout`]).
    pub(super) fn scan_timeout(&self) -> Duration {
        self.scan_timeout
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
    pub(super) async fn query_rows_within(
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
}
