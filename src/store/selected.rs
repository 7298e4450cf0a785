//! The store `--store` selects: Firestore or PostgreSQL behind one
//! [`CounterStore`], so the pipeline is built once for either.
//!
//! Invariant: every call goes to the one store chosen at start; nothing
//! here adds behaviour of its own.

use super::firestore::FirestoreStore;
use super::postgres::PostgresStore;
use super::{Attempt, CommitReport, CounterStore, StoreError};
use crate::pipeline::batch::Batch;

/// Firestore or PostgreSQL.
#[derive(Clone)]
pub enum SelectedStore {
    /// Sharded counter documents in Firestore.
    Firestore(FirestoreStore),
    /// Sharded counter rows in PostgreSQL.
    Postgres(PostgresStore),
}

impl CounterStore for SelectedStore {
    async fn commit(&self, batch: &Batch, attempt: &Attempt) -> Result<CommitReport, StoreError> {
        match self {
            Self::Firestore(store) => store.commit(batch, attempt).await,
            Self::Postgres(store) => store.commit(batch, attempt).await,
        }
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        match self {
            Self::Firestore(store) => store.count(post_id).await,
            Self::Postgres(store) => store.count(post_id).await,
        }
    }
}
