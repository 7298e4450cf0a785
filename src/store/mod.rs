//! Where counts live: the [`CounterStore`] trait, its Firestore
//! implementation ([`firestore`], over the one [`firestore::FirestoreDb`]
//! handle every Firestore call goes through), a PostgreSQL one
//! ([`postgres`]), the one `--store` selects ([`selected`]) and an
//! in-memory one for unit tests ([`memory`]); the data-format version kept
//! with the data ([`mod@format`]).
//!
//! Invariant: [`CounterStore::commit`] applies a whole batch atomically, in
//! one transaction, or nothing of it; a batch whose marker already exists is
//! reported [`CommitOutcome::AlreadyCommitted`] and changes nothing, so an
//! unknown commit outcome can always be resolved by committing again.

pub mod counter_shards;
pub mod erasure;
pub mod firestore;
pub mod format;
pub mod memory;
pub mod milestone;
pub mod postgres;
pub mod quarantine;
pub mod reconcile;
pub mod rollup;
pub mod selected;

use std::future::Future;

use crate::model::batch::{Batch, Effects};

/// A store's settings, the same for Firestore and PostgreSQL (where the
/// data lives is the database handle's business).
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// Consumer name: namespaces batch markers and quarantine records.
    pub consumer: String,
    /// Counter shards per post at most; each increment goes to one, chosen
    /// among as many as the post's write rate needs.
    pub counter_shards: u32,
    /// Increments per second one counter shard should take (a post uses
    /// more shards as its rate grows); 0 = always all shards.
    pub counter_shard_target_writes_per_sec: u32,
    /// How long batch markers are kept (Firestore's `expireAt` TTL field;
    /// PostgreSQL's `expires_at`, see `PgDb::delete_expired_markers`).
    pub marker_ttl: std::time::Duration,
    /// Whether a batch that changes counts leaves a rollup due record in
    /// its commit (its marker lists the posts; [`rollup::DueRecord`]): on
    /// whenever rollups are.
    pub due_records: bool,
    /// Memberships the Firestore store keeps known (state and update
    /// time), so a batch of known ones commits in one round trip with no
    /// read (`store::firestore::known`); 0 = none: every batch is read in
    /// its transaction. The PostgreSQL store ignores it.
    pub known_memberships: usize,
}

impl StoreSettings {
    /// The due record a commit of `batch` writes (when it changed counts
    /// and records are on), or, found already committed, may have written.
    pub fn due_record(&self, batch: &Batch, changed: bool) -> Option<rollup::DueRecord> {
        (self.due_records && changed).then(|| rollup::DueRecord {
            consumer: self.consumer.clone(),
            batch_id: batch.id.clone(),
        })
    }
}

/// How a commit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The batch's writes are committed by this call.
    Committed,
    /// An earlier attempt of this batch committed (its marker exists).
    AlreadyCommitted,
}

/// What a successful commit reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitReport {
    /// Committed now or earlier.
    pub outcome: CommitOutcome,
    /// Per-event effects; for [`CommitOutcome::AlreadyCommitted`], the ones
    /// the committing attempt recorded in the batch marker.
    pub effects: Effects,
    /// Counter increments written (one per post with a non-zero delta).
    pub increments: usize,
    /// Store round trips this attempt used.
    pub rpcs: u32,
    /// Whether it was committed from known memberships, or tried that and
    /// was refused (Firestore's `known`; other stores never try).
    pub known: KnownUse,
    /// The posts whose count the batch changed, whose rollups need a
    /// refresh: for [`CommitOutcome::Committed`] each post incremented,
    /// with its counter shard; for [`CommitOutcome::AlreadyCommitted`]
    /// (what the earlier attempt changed is not known) every post of the
    /// batch, shard unknown.
    pub changed: Vec<ChangedCounter>,
    /// The commit's time in the store's clock, when the store tells it
    /// (Firestore): a rollup read at this time or later includes the batch.
    pub committed_at: Option<rollup::Micros>,
    /// The rollup due record the batch's commit wrote (or, already
    /// committed, may have written): cleared once `changed` is refreshed.
    pub due_record: Option<rollup::DueRecord>,
}

/// How a commit used what the store knew of its memberships.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KnownUse {
    /// Not tried: its memberships were read in its transaction.
    #[default]
    Unused,
    /// Committed from known memberships, in one round trip.
    Committed,
    /// Tried, refused on a precondition, then read in its transaction.
    Refused,
}

/// The erased users' tombstones as the store holds them: their keyed
/// hashes, and the generation `users erase` bumps in the same write as each
/// tombstone it writes (0 before the first).
///
/// A batch checked against the hashes of generation `g` carries `g`
/// ([`Batch::tombstone_generation`]); its commit reads the generation in
/// its own transaction and applies nothing if it differs
/// ([`StoreError::tombstones_changed`]), so no commit that lands after a
/// tombstone counts an event the tombstone covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TombstoneState {
    /// Bumped with every tombstone written.
    pub generation: i64,
    /// The keyed hashes (never an id), read no earlier than `generation`.
    pub hashes: Vec<String>,
}

/// A post whose count a committed batch changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedCounter {
    /// The post.
    pub post_id: String,
    /// The counter shard incremented, when known.
    pub shard: Option<u32>,
}

impl ChangedCounter {
    /// Every post of `batch`, shard unknown (a batch found already
    /// committed: its earlier attempt may have changed any of them).
    pub fn every_post_of(batch: &Batch) -> Vec<Self> {
        let mut posts: Vec<&str> = batch.keys().map(|k| k.post_id.as_str()).collect();
        posts.dedup();
        posts
            .into_iter()
            .map(|post| Self {
                post_id: post.to_string(),
                shard: None,
            })
            .collect()
    }
}

/// The class of a store failure: what it proves about the batch.
///
/// Only [`ErrorClass::Content`] lets the flusher isolate and quarantine;
/// every other failure (auth, permissions, a missing database, quota,
/// contention, timeouts, unknown errors) proves nothing about the events,
/// so it is retried with backoff and then the messages are nacked, never
/// quarantined. The per-code table is [`firestore::classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Proves nothing about the content: retry with backoff, then nack.
    Transient,
    /// The store refuses this batch's content (e.g. a value or name it
    /// cannot hold): split the batch to isolate the offending item.
    Content,
}

/// The canonical code of a store failure, in Google's error model (the
/// codes of `google.rpc.Code`), which every backend maps its failures to:
/// Firestore's are these, PostgreSQL's SQLSTATEs are mapped
/// (`postgres/errors.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// Not an error.
    Ok,
    /// The call was cancelled (by the caller, or its deadline on the client).
    Cancelled,
    /// An error with no more specific code.
    Unknown,
    /// The request's content is refused.
    InvalidArgument,
    /// The deadline passed before the call ended.
    DeadlineExceeded,
    /// What was asked for does not exist.
    NotFound,
    /// What was to be created exists.
    AlreadyExists,
    /// The caller may not do this.
    PermissionDenied,
    /// A quota or rate limit was reached.
    ResourceExhausted,
    /// A precondition on the stored state failed.
    FailedPrecondition,
    /// Another transaction won: contention.
    Aborted,
    /// A value out of its range.
    OutOfRange,
    /// Not implemented by the store.
    Unimplemented,
    /// The store failed internally.
    Internal,
    /// The store cannot be reached now.
    Unavailable,
    /// Data was lost or corrupted.
    DataLoss,
    /// No valid credentials.
    Unauthenticated,
}

impl Code {
    /// The code numbered `n` in `google.rpc.Code` (gRPC's status codes);
    /// an unknown number is [`Code::Unknown`].
    pub fn from_number(n: i32) -> Self {
        const BY_NUMBER: [Code; 17] = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        usize::try_from(n)
            .ok()
            .and_then(|i| BY_NUMBER.get(i))
            .copied()
            .unwrap_or(Code::Unknown)
    }
}

/// The transaction a failed attempt had opened, as its backend names it:
/// opaque above the backend, handed back to it by the next attempt of the
/// same batch ([`Attempt::retry_transaction`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedTransaction(Vec<u8>);

impl OpenedTransaction {
    /// The transaction the backend names `id`.
    pub fn new(id: Vec<u8>) -> Self {
        Self(id)
    }

    /// The backend's name of it.
    pub fn id(&self) -> &[u8] {
        &self.0
    }
}

/// A failed store call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed ({code:?}): {message}")]
pub struct StoreError {
    /// Which operation failed (`BatchGetDocuments`, `Commit`, ...).
    pub op: &'static str,
    /// What failed, as a canonical code.
    pub code: Code,
    /// The store's message.
    pub message: String,
    /// What the failure proves.
    pub class: ErrorClass,
    /// The read-write transaction the failed attempt had opened, if any:
    /// the next attempt of the same batch names it as the transaction it
    /// retries ([`Attempt::retry_transaction`]).
    pub transaction: Option<OpenedTransaction>,
}

impl StoreError {
    /// Whether retrying the same batch may succeed (everything but a
    /// refusal of the content).
    pub fn is_retryable(&self) -> bool {
        self.class == ErrorClass::Transient
    }

    /// Whether the store refused the batch's content, so splitting it can
    /// find the item to quarantine.
    pub fn proves_content(&self) -> bool {
        self.class == ErrorClass::Content
    }

    /// Whether another transaction won a lock this attempt needed (ABORTED),
    /// not counting [`Self::is_tombstones_changed`].
    pub fn is_contention(&self) -> bool {
        self.code == Code::Aborted && !self.is_tombstones_changed()
    }

    /// The commit of a batch checked against tombstone generation
    /// `checked`, aborted before anything was written because the store
    /// holds generation `found`: retryable once the batch is checked again
    /// against the store's current tombstones.
    pub fn tombstones_changed(checked: i64, found: i64) -> Self {
        Self {
            op: TOMBSTONE_CHECK,
            code: Code::Aborted,
            message: format!(
                "the erased users' tombstones changed (generation {found}) since the batch was checked against generation {checked}; nothing applied"
            ),
            class: ErrorClass::Transient,
            transaction: None,
        }
    }

    /// Whether this is [`Self::tombstones_changed`]: the batch must be
    /// checked against fresh tombstones before its next attempt.
    pub fn is_tombstones_changed(&self) -> bool {
        self.op == TOMBSTONE_CHECK
    }
}

impl StoreError {
    /// An INTERNAL failure of `op`: the store answered something this
    /// client cannot use (classed like any INTERNAL: transient).
    pub fn internal(op: &'static str, message: &str) -> Self {
        Self {
            op,
            code: Code::Internal,
            message: message.to_string(),
            class: ErrorClass::Transient,
            transaction: None,
        }
    }
}

/// The operation [`StoreError::tombstones_changed`] names.
const TOMBSTONE_CHECK: &str = "TombstoneCheck";

/// When commits must have ended: unset until the stop signal, then set
/// once; attempts already running see it too.
#[derive(Clone, Debug)]
pub struct Deadline(tokio::sync::watch::Receiver<Option<tokio::time::Instant>>);

impl Default for Deadline {
    fn default() -> Self {
        Self::channel().1
    }
}

impl Deadline {
    /// A deadline and the sender that sets it.
    pub fn channel() -> (
        tokio::sync::watch::Sender<Option<tokio::time::Instant>>,
        Self,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(None);
        (tx, Self(rx))
    }

    /// The deadline, if set.
    pub fn get(&self) -> Option<tokio::time::Instant> {
        *self.0.borrow()
    }

    /// Resolves when the deadline is set (or changed) after this handle
    /// last looked; never if it cannot change any more.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once the deadline is set and has passed (never if it is
    /// never set).
    pub async fn reached(&self) {
        let mut rx = self.0.clone();
        loop {
            let at = *rx.borrow_and_update();
            if let Some(at) = at {
                tokio::time::sleep_until(at).await;
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// What one commit attempt of a batch knows of the attempts before it.
#[derive(Clone, Debug, Default)]
pub struct Attempt {
    /// The transaction of the previous attempt, if it opened one. Firestore
    /// gives a transaction that names the one it retries that one's age,
    /// and the older transaction wins a lock conflict, so a batch that
    /// keeps losing to younger ones is not starved.
    pub retry_transaction: Option<OpenedTransaction>,
    /// When the attempt must have ended (the shutdown deadline, possibly
    /// set while it runs): then the store abandons the attempt, rolls back
    /// the transaction it opened and answers a transient DEADLINE_EXCEEDED.
    pub deadline: Deadline,
}

impl Attempt {
    /// The first attempt of a batch.
    pub fn first() -> Self {
        Self::default()
    }

    /// The attempt after one that failed with `error`.
    pub fn after(error: &StoreError) -> Self {
        Self {
            retry_transaction: error.transaction.clone(),
            deadline: Deadline::default(),
        }
    }

    /// This attempt, ending by `deadline`.
    pub fn until(self, deadline: Deadline) -> Self {
        Self { deadline, ..self }
    }
}

/// A store of membership documents, counter shards, batch markers and quarantine.
pub trait CounterStore: Send + Sync + 'static {
    /// Commits `batch` in one transaction: reads its memberships and marker,
    /// applies [`Batch::plan`], writes changed memberships, one increment per
    /// post on one counter shard, the marker and quarantine records.
    fn commit(
        &self,
        batch: &Batch,
        attempt: &Attempt,
    ) -> impl Future<Output = Result<CommitReport, StoreError>> + Send;

    /// The like count of `post_id`: the sum of its counter shards.
    fn count(&self, post_id: &str) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// The erased users' tombstones and their generation, the generation
    /// read first (so the hashes are at least as new as it says).
    fn tombstones(&self) -> impl Future<Output = Result<TombstoneState, StoreError>> + Send;
}
