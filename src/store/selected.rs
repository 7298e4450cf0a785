//! The store `--store` selects: Firestore or PostgreSQL behind one
//! [`CounterStore`] ([`SelectedStore`]), so the pipeline is built once for
//! either, and the database handle the operator commands read through
//! ([`SelectedDb`]).
//!
//! Invariant: every call goes to the one store chosen at start; nothing
//! here adds behaviour of its own.

use std::collections::HashMap;
use std::time::Duration;

use super::firestore::{FirestoreDb, FirestoreStore, FirestoreStoreConfig, Read};
use super::postgres::{PgDb, PostgresStore, PostgresStoreConfig};
use super::{Attempt, CommitReport, CounterStore, StoreError};
use crate::pipeline::batch::{Batch, Membership, MembershipKey};

/// Firestore or PostgreSQL.
#[derive(Clone)]
pub enum SelectedStore {
    /// Sharded counter documents in Firestore.
    Firestore(FirestoreStore),
    /// Sharded counter rows in PostgreSQL.
    Postgres(PostgresStore),
}

/// The settings either store takes (the same for both).
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// Consumer name: namespaces batch markers and quarantine records.
    pub consumer: String,
    /// Counter shards per post, at most.
    pub counter_shards: u32,
    /// Increments per second one counter shard should take (0 = always
    /// all shards).
    pub counter_shard_target_writes_per_sec: u32,
    /// How long batch markers are kept.
    pub marker_ttl: Duration,
}

impl SelectedStore {
    /// The store over `db` with `settings`.
    pub fn new(db: SelectedDb, settings: StoreSettings) -> Self {
        let StoreSettings {
            consumer,
            counter_shards,
            counter_shard_target_writes_per_sec,
            marker_ttl,
        } = settings;
        match db {
            SelectedDb::Firestore(db) => Self::Firestore(FirestoreStore::new(
                db,
                FirestoreStoreConfig {
                    consumer,
                    counter_shards,
                    counter_shard_target_writes_per_sec,
                    marker_ttl,
                },
            )),
            SelectedDb::Postgres(db) => Self::Postgres(PostgresStore::new(
                db,
                PostgresStoreConfig {
                    consumer,
                    counter_shards,
                    counter_shard_target_writes_per_sec,
                    marker_ttl,
                },
            )),
        }
    }

    /// The stored memberships of `keys` (absent ones left out), read
    /// outside any transaction: locks nothing (replay's plans).
    pub async fn memberships(
        &self,
        keys: &[MembershipKey],
    ) -> Result<HashMap<MembershipKey, Membership>, StoreError> {
        match self {
            Self::Firestore(store) => {
                let read = store.db().read_memberships(keys.iter(), None, Read::Latest);
                Ok(read.await?.found.into_iter().collect())
            }
            Self::Postgres(store) => store.db().memberships(keys).await,
        }
    }
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

/// The database of the selected store, as the operator commands read and
/// repair it; a cheap cloneable handle.
#[derive(Clone)]
pub enum SelectedDb {
    /// A Firestore database and its document layout.
    Firestore(FirestoreDb),
    /// A PostgreSQL connection pool.
    Postgres(PgDb),
}

impl SelectedDb {
    /// The like count of `post_id`: the sum of its counter shards.
    pub async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        match self {
            Self::Firestore(db) => db.count(post_id).await,
            Self::Postgres(db) => db.count(post_id).await,
        }
    }
}
