//! Where counts live: the [`CounterStore`] trait, its Firestore
//! implementation ([`firestore`]) and an in-memory one for unit tests
//! ([`memory`]).
//!
//! Invariant: [`CounterStore::commit`] applies a whole batch atomically, in
//! one transaction, or nothing of it; a batch whose marker already exists is
//! reported [`CommitOutcome::AlreadyCommitted`] and changes nothing, so an
//! unknown commit outcome can always be resolved by committing again.

pub mod counter_shards;
pub mod firestore;
pub mod memory;

use std::future::Future;

use crate::batch::{Batch, Effects};

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
}

/// The class of a store failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Try again: contention, unavailability, deadlines, an unknown outcome.
    Transient,
    /// The store rejects this batch's content: isolate the offending event.
    Permanent,
}

/// A failed store call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed ({code}): {message}")]
pub struct StoreError {
    /// Which operation failed (`BatchGetDocuments`, `Commit`, ...).
    pub op: &'static str,
    /// gRPC code name.
    pub code: String,
    /// The store's message.
    pub message: String,
    /// Transient or permanent.
    pub class: ErrorClass,
}

impl StoreError {
    /// Whether retrying the same batch may succeed.
    pub fn is_retryable(&self) -> bool {
        self.class == ErrorClass::Transient
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
    ) -> impl Future<Output = Result<CommitReport, StoreError>> + Send;

    /// The like count of `post_id`: the sum of its counter shards.
    fn count(&self, post_id: &str) -> impl Future<Output = Result<i64, StoreError>> + Send;
}
