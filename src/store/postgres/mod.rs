//! The PostgreSQL [`CounterStore`]: one READ COMMITTED transaction per
//! batch, in two round trips, with the apply rules of [`Batch::plan`].
//!
//! Invariants: the batch's existing memberships are read and locked, and
//! the marker read, inside the transaction before anything is written; a
//! batch whose marker exists is rolled back and reported already
//! committed; a plan computed from a membership read as absent never
//! overwrites a row it did not see (the insert fails instead); memberships,
//! counter increments, the marker and quarantine records commit together
//! or not at all.
//!
//! # One batch, two round trips
//! tokio-postgres sends a request when its future is first polled and
//! answers requests in order, so requests polled together share one round
//! trip ([`pipeline`]):
//! 1. `BEGIN ISOLATION LEVEL READ COMMITTED`; the batch marker; for a batch
//!    checked against the erased users' tombstones, their generation,
//!    `FOR SHARE` (a tombstone's bump waits for this transaction; a batch
//!    checked against another generation applies nothing); the batch's
//!    memberships, `SELECT ... FOR UPDATE` joined to `unnest` of the key
//!    arrays, locked in key order.
//! 2. After [`Batch::plan`] (in memory): one `UPDATE ... FROM unnest` of the
//!    memberships that were read, one `INSERT ... SELECT FROM unnest` of
//!    those that were absent, one upsert adding each post's delta to one
//!    counter shard, the marker, one upsert per quarantine record, `COMMIT`.
//!    A statement that fails aborts the transaction, so the statements
//!    after it and the pipelined `COMMIT` apply nothing.
//!
//! A connection's first commit prepares the statements first (one more
//! round trip, once per connection).
//!
//! # Isolation: READ COMMITTED with row locks
//! - The plan depends only on the batch's memberships. `FOR UPDATE` locks
//!   the existing ones until the commit and, at READ COMMITTED, returns
//!   their latest committed version (after waiting for a transaction that
//!   holds one), so the plan is computed from the state it is written over.
//! - A membership that does not exist cannot be locked: a competing
//!   replica may create it after the read. The insert has no `ON CONFLICT`,
//!   so it then fails with 23505 (once the other transaction commits),
//!   classed as contention and retried from fresh reads.
//! - Counter shards are never read by a commit: `likes = likes + delta` is
//!   evaluated on the row's latest version under its lock, so increments of
//!   concurrent transactions commute; two replicas writing one shard of a
//!   hot post wait for each other, neither fails.
//! - REPEATABLE READ would fail (40001) every update of a row changed
//!   since the snapshot: every concurrent write to one counter shard, that
//!   is, retries exactly on the hottest rows, for increments that commute.
//!   SERIALIZABLE would also close the absent-membership gap, but with
//!   predicate locks on every read and false-positive 40001s; the primary
//!   key closes that gap at no cost.
//! - Readers lose nothing: each commit writes a post's memberships and
//!   deltas together, so any snapshot (a REPEATABLE READ READ ONLY
//!   transaction, [`PgDb::tally`]) has sum(shards) == count(liked).
//! - Deadlocks: memberships are locked in key order and counter shards
//!   written in (post, shard) order; a cycle between replicas stays
//!   possible through the later inserts and is rare. 40001, 40P01, 55P03
//!   (`lock_timeout`) and 23505 are contention ([`errors::classify`]),
//!   retried like Firestore's ABORTED.
//!
//! # Unknown outcomes and deadlines
//! When the connection breaks after `COMMIT` was sent, the attempt fails
//! transient (`Unavailable`) with its outcome unknown; the next attempt
//! finds the marker (committed: the marker's effects are reported) or not
//! (the server rolled the transaction back when the connection closed:
//! applied now). An attempt ends within the store call timeout
//! ([`PgDb::call_timeout`], also the transaction's `statement_timeout`) and
//! at the shutdown deadline: it cancels its running statement and closes
//! its connection, so the server rolls back and releases its locks at
//! once, and its error says whether its `COMMIT` may have been sent
//! (outcome unknown) or not (nothing applied).
//!
//! # Driver and pool
//! `tokio-postgres`: the maintained native async driver (no libpq), which
//! pipelines requests on one connection. `deadpool` for the pool, with our
//! own manager ([`session::Sessions`]: the sockets, the cleartext-password
//! guard, the server's version and encoding, the idle check), and
//! `deadpool-postgres`' per-connection statement cache; the pool gives wait
//! and create timeouts and [`deadpool::managed::Object::take`] to close a
//! connection instead of reusing it ([`db::Conn`]).
//!
//! [`schema`] holds every statement; [`migrations`] creates the tables
//! and checks a database's schema; [`codec`] converts rows and parameters; [`errors`] classes
//! failures; [`db`] is the pool and its bounds; [`repair`] reconcile's
//! snapshot tallies and repair; [`operator`] the operator tools' other
//! statements; [`session`] opens
//! and checks sessions; [`tls`] applies `sslmode` and `sslrootcert` over
//! rustls; [`conninfo`] hides a connection string's passwords.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio_postgres::types::ToSql;
use tokio_postgres::CancelToken;

pub mod causes;
pub mod codec;
pub mod conninfo;
pub mod db;
mod erasure;
pub mod errors;
pub mod format;
pub mod migrations;
pub mod milestones;
pub mod operator;
mod quarantine;
pub mod repair;
pub mod rollups;
pub mod schema;
pub mod session;
pub mod tls;

pub use codec::StoredRecord;
pub use db::{Listening, PgConfigError, PgDb, PgDbConfig};
pub use errors::classify;
pub use migrations::{migrate, MigrateError, MigrationReport, SchemaError};
pub use repair::PostTally;

use codec::{effects_from_row, membership_from_row, MembershipColumns, QuarantineColumns};
use db::Conn;
use errors::query_error;

use super::counter_shards::CounterShardPlanner;
use super::{
    Attempt, ChangedCounter, CommitOutcome, CommitReport, CounterStore, ErrorClass, KnownUse,
    StoreError,
};
use crate::model::batch::{Batch, Membership, MembershipKey};

/// The name failed commits are reported under.
const OP: &str = "Commit";

/// Longest wait for a best-effort cancel or rollback.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Store settings (where the rows live is the [`PgDb`]'s connection).
pub type PostgresStoreConfig = super::StoreSettings;

/// The PostgreSQL store; a cheap cloneable handle.
#[derive(Clone)]
pub struct PostgresStore {
    db: PgDb,
    config: Arc<PostgresStoreConfig>,
    shards: Arc<CounterShardPlanner>,
    /// `BEGIN`, and the transaction's `statement_timeout` (the call timeout).
    begin: Arc<str>,
}

impl PostgresStore {
    /// A store over `db`.
    pub fn new(db: PgDb, config: PostgresStoreConfig) -> Self {
        let shards = Arc::new(CounterShardPlanner::new(
            config.counter_shards,
            config.counter_shard_target_writes_per_sec,
        ));
        let begin = format!(
            "{}; SET LOCAL statement_timeout = {}",
            schema::BEGIN_BATCH,
            db.call_timeout().as_millis().max(1)
        );
        Self {
            db,
            config: Arc::new(config),
            shards,
            begin: begin.into(),
        }
    }

    /// The database handle (reads and maintenance).
    pub fn db(&self) -> &PgDb {
        &self.db
    }
}

impl CounterStore for PostgresStore {
    async fn commit(&self, batch: &Batch, attempt: &Attempt) -> Result<CommitReport, StoreError> {
        let cancel = parking_lot::Mutex::new(None);
        let committing = AtomicBool::new(false);
        let limit = self.db.call_timeout();
        let why = tokio::select! {
            result = tokio::time::timeout(limit, self.attempt(batch, &cancel, &committing)) => {
                match result {
                    Ok(result) => return result,
                    Err(_) => format!("no answer within the store call timeout ({limit:?})"),
                }
            }
            () = attempt.deadline.reached() => "the shutdown deadline passed".to_string(),
        };
        // Abandoned: end the statement it waits on now (a lock wait, say);
        // dropping the attempt closed its connection, so the server rolls
        // back whatever it did not commit.
        let token = cancel.lock().take();
        if let Some(token) = token {
            self.db.cancel(token, CLEANUP_TIMEOUT).await;
        }
        Err(abandoned(&why, committing.load(Ordering::SeqCst)))
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        self.db.count(post_id).await
    }

    async fn tombstones(&self) -> Result<super::TombstoneState, StoreError> {
        self.db.tombstone_state().await
    }
}

impl PostgresStore {
    /// One commit attempt of `batch`; leaves the connection's cancel token
    /// in `cancel` as soon as it has one.
    async fn attempt(
        &self,
        batch: &Batch,
        cancel: &parking_lot::Mutex<Option<CancelToken>>,
        committing: &AtomicBool,
    ) -> Result<CommitReport, StoreError> {
        let conn = self.db.checkout(OP).await?;
        *cancel.lock() = Some(conn.client()?.cancel_token());
        let prepared = conn.prepared();
        let statements = conn.statements(OP, schema::COMMIT_STATEMENTS).await?;
        let mut rpcs = u32::from(conn.prepared() > prepared);
        let [read_marker, read_generation, lock, update, insert, add, mark, quarantine] =
            &statements;
        let client = conn.client()?;
        let consumer = self.config.consumer.as_str();
        let post_ids: Vec<&str> = batch.keys().map(|k| k.post_id.as_str()).collect();
        let user_ids: Vec<&str> = batch.keys().map(|k| k.user_id.as_str()).collect();

        // Round trip 1: open, read the marker, the tombstones' generation
        // (a checked batch), read and lock the memberships.
        let marker_params: [&(dyn ToSql + Sync); 2] = [&consumer, &batch.id];
        let (begun, marker, generation, locked) = tokio::join!(
            biased;
            client.batch_execute(&self.begin),
            client.query_opt(read_marker, &marker_params),
            async {
                if batch.tombstone_generation.is_none() {
                    return Ok(None);
                }
                client.query_opt(read_generation, &[]).await
            },
            async {
                if post_ids.is_empty() {
                    return Ok(Vec::new());
                }
                client.query(lock, &[&post_ids, &user_ids]).await
            },
        );
        rpcs += 1;
        let read = (begun.and(marker))
            .and_then(|m| Ok((m, generation?)))
            .and_then(|(m, g)| Ok((m, g, locked?)));
        let (marker, generation, locked) = match read {
            Ok(read) => read,
            Err(e) => {
                let error = query_error(OP, &e);
                if reusable_after(&error) {
                    roll_back(conn).await;
                }
                return Err(error);
            }
        };
        if let Some(row) = marker {
            let effects = effects_from_row(&row)?;
            roll_back(conn).await;
            return Ok(CommitReport {
                outcome: CommitOutcome::AlreadyCommitted,
                effects,
                increments: 0,
                rpcs: rpcs + 1,
                known: KnownUse::Unused,
                changed: ChangedCounter::every_post_of(batch),
                committed_at: None,
                due_record: self.config.due_record(batch, true),
            });
        }
        if let Some(checked) = batch.tombstone_generation {
            let found = generation.as_ref().map_or(Ok(0), |row| row.try_get(0));
            let error = match found {
                Ok(found) if found == checked => None,
                Ok(found) => Some(StoreError::tombstones_changed(checked, found)),
                Err(e) => Some(query_error(OP, &e)),
            };
            if let Some(error) = error {
                roll_back(conn).await;
                return Err(error);
            }
        }
        let mut stored: FxHashMap<MembershipKey, Membership> =
            FxHashMap::with_capacity_and_hasher(locked.len(), Default::default());
        for row in &locked {
            let (key, membership) = membership_from_row(row)?;
            stored.insert(key, membership);
        }
        let plan = batch.plan(&stored);

        // Round trip 2: write everything and commit.
        let (mut updates, mut inserts) =
            (MembershipColumns::default(), MembershipColumns::default());
        for planned in &plan.memberships {
            let columns = if stored.contains_key(planned.key) {
                &mut updates
            } else {
                &mut inserts
            };
            columns.push(planned);
        }
        // Held until the commit has ended: another batch in flight on one of
        // these posts increments a different counter shard.
        let counters = self.shards.lease(
            plan.deltas.keys().map(String::as_str),
            std::time::Instant::now(),
        );
        let shard_posts: Vec<&str> = plan.deltas.keys().map(String::as_str).collect();
        let shard_ids: Vec<i32> = (0..plan.deltas.len())
            .map(|i| i32::try_from(counters.shard(i)).unwrap_or(0))
            .collect();
        let deltas: Vec<i64> = plan.deltas.values().copied().collect();
        let e = plan.effects;
        let counts = [e.applied, e.duplicates, e.stale, e.poison]
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let messages = i32::try_from(batch.message_count).unwrap_or(i32::MAX);
        let posts = i32::try_from(plan.deltas.len()).unwrap_or(i32::MAX);
        let ttl_secs = i64::try_from(self.config.marker_ttl.as_secs()).unwrap_or(i64::MAX);
        let records: Vec<QuarantineColumns<'_>> = batch
            .poison
            .iter()
            .map(|p| QuarantineColumns::of(&p.item))
            .collect();

        let update_params = membership_params(&updates, &batch.id);
        let insert_params = membership_params(&inserts, &batch.id);
        let add_params: [&(dyn ToSql + Sync); 3] = [&shard_posts, &shard_ids, &deltas];
        // The rollup due record: the posts incremented, or NULL.
        let due_posts: Option<&Vec<&str>> =
            (self.config.due_records && !shard_posts.is_empty()).then_some(&shard_posts);
        let mark_params: [&(dyn ToSql + Sync); 10] = [
            &consumer, &batch.id, &messages, &counts[0], &counts[1], &counts[2], &counts[3],
            &posts, &ttl_secs, &due_posts,
        ];
        let record_params: Vec<[&(dyn ToSql + Sync); 12]> = records
            .iter()
            .map(|r| -> [&(dyn ToSql + Sync); 12] {
                [
                    &consumer,
                    &r.record_id,
                    &r.message_id,
                    &r.reason,
                    &r.data,
                    &r.data_bytes,
                    &r.data_sha256,
                    &r.keys,
                    &r.values,
                    &r.attribute_count,
                    &r.attributes_truncated,
                    &batch.id,
                ]
            })
            .collect();

        let mut requests: Vec<Request<'_>> = Vec::with_capacity(5 + records.len());
        if !updates.is_empty() {
            requests.push(Box::pin(client.execute(update, &update_params)));
        }
        if !inserts.is_empty() {
            requests.push(Box::pin(client.execute(insert, &insert_params)));
        }
        if !deltas.is_empty() {
            requests.push(Box::pin(client.execute(add, &add_params)));
        }
        requests.push(Box::pin(client.execute(mark, &mark_params)));
        for params in &record_params {
            requests.push(Box::pin(client.execute(quarantine, params)));
        }
        requests.push(Box::pin(async {
            client.batch_execute(schema::COMMIT).await.map(|()| 0)
        }));
        // From here the server may commit before an answer arrives.
        committing.store(true, Ordering::SeqCst);
        let mut results = pipeline(requests).await;
        rpcs += 1;
        drop(counters);

        // The server answered COMMIT (even with an error): the transaction
        // is over and the connection can serve another. Otherwise (COMMIT
        // unsent, or unanswered: the outcome is unknown) it is closed, and
        // the server rolls back whatever it did not commit.
        let ended = results.pop().flatten();
        let answered = match &ended {
            Some(Ok(_)) => true,
            Some(Err(e)) => e.as_db_error().is_some(),
            None => false,
        };
        let failed = results.into_iter().flatten().find_map(Result::err);
        match (ended, failed) {
            (Some(Ok(_)), None) => {
                conn.release();
                let changed = (shard_posts.iter().zip(&shard_ids))
                    .map(|(post, shard)| ChangedCounter {
                        post_id: (*post).to_string(),
                        shard: u32::try_from(*shard).ok(),
                    })
                    .collect();
                Ok(CommitReport {
                    outcome: CommitOutcome::Committed,
                    effects: plan.effects,
                    increments: plan.deltas.len(),
                    rpcs,
                    known: KnownUse::Unused,
                    changed,
                    committed_at: None,
                    due_record: self.config.due_record(batch, !deltas.is_empty()),
                })
            }
            (ended, failed) => {
                let error = match failed.or(ended.and_then(Result::err)) {
                    Some(e) => query_error(OP, &e),
                    None => errors::unavailable_because(OP, "COMMIT was not sent"),
                };
                let open = conn.client().is_ok_and(|c| !c.is_closed());
                if answered && open && reusable_after(&error) {
                    conn.release();
                }
                Err(error)
            }
        }
    }
}

/// The error of an attempt abandoned because of `why`: its outcome is
/// unknown once its `COMMIT` may have been sent (the batch marker tells,
/// on the next attempt or delivery), and nothing was applied otherwise.
fn abandoned(why: &str, committing: bool) -> StoreError {
    let outcome = if committing {
        "its COMMIT may have been sent, so its outcome is unknown (the batch marker tells the next attempt or delivery whether it committed); its connection was closed"
    } else {
        "abandoned before its COMMIT was sent: rolled back, nothing applied"
    };
    StoreError {
        op: OP,
        code: crate::store::Code::DeadlineExceeded,
        message: format!("{why}; {outcome}"),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

/// The parameters of [`schema::UPDATE_MEMBERSHIPS`] and
/// [`schema::INSERT_MEMBERSHIPS`].
fn membership_params<'a>(
    c: &'a MembershipColumns<'_>,
    batch_id: &'a String,
) -> [&'a (dyn ToSql + Sync); 7] {
    [
        &c.post_ids,
        &c.user_ids,
        &c.liked,
        &c.seqs,
        &c.occurred_at_micros,
        &c.event_ids,
        batch_id,
    ]
}

/// Whether a connection whose transaction failed with `error` (and ended)
/// may serve another: after contention or a refused value, the expected
/// failures, yes; after anything else (a statement the server no longer
/// knows, a plan gone stale under a migration, ...) a fresh connection,
/// with freshly prepared statements, is the safer start.
fn reusable_after(error: &StoreError) -> bool {
    error.is_contention() || error.proves_content()
}

/// Ends the transaction open on `conn` without applying it: the connection
/// goes back to the pool if the server confirms, and is closed otherwise
/// (which rolls back too).
async fn roll_back(conn: Conn) {
    let Ok(client) = conn.client() else {
        return;
    };
    let rolled =
        tokio::time::timeout(CLEANUP_TIMEOUT, client.batch_execute(schema::ROLLBACK)).await;
    if matches!(rolled, Ok(Ok(()))) {
        conn.release();
    }
}

/// One pipelined request.
type Request<'a, T = u64, E = tokio_postgres::Error> =
    Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>;

/// Runs `requests` in one round trip: tokio-postgres sends a request when
/// its future is first polled (or fails it then, unsent: a parameter that
/// cannot be encoded, a closed connection) and answers requests in order,
/// so each is first polled in the order given, back to back. A request
/// that fails unsent stops the others from being sent: a transaction's
/// COMMIT is never sent after a statement of it that was not. The results
/// are in the same order; `None` for a request never sent.
pub async fn pipeline<T, E>(mut requests: Vec<Request<'_, T, E>>) -> Vec<Option<Result<T, E>>> {
    let count = requests.len();
    let mut results: Vec<Option<Result<T, E>>> = (0..count).map(|_| None).collect();
    // Requests polled at least once, and whether one failed unsent.
    let (mut started, mut stopped) = (0, false);
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, (request, result)) in requests.iter_mut().zip(results.iter_mut()).enumerate() {
            if result.is_some() {
                continue;
            }
            let first = i >= started;
            if first && stopped {
                break;
            }
            match request.as_mut().poll(cx) {
                Poll::Ready(Err(e)) if first => {
                    *result = Some(Err(e));
                    stopped = true;
                }
                Poll::Ready(done) => *result = Some(done),
                Poll::Pending => pending = true,
            }
            if first {
                started = i + 1;
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results
}

#[cfg(test)]
mod tests;
