//! The store `--store` selects: Firestore or PostgreSQL behind one
//! [`CounterStore`] ([`SelectedStore`]), so the pipeline is built once for
//! either, and the database handle the operator commands read through and
//! the rollup refresher writes through ([`SelectedDb`], a [`RollupStore`]).
//!
//! Invariant: every call goes to the one store chosen at start; nothing
//! here adds behaviour of its own.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use super::counter_shards::ShardRegistry;
pub use super::firestore::ListenResume;
use super::firestore::{FirestoreDb, FirestoreStore, Read};
use super::milestone::{
    Claim, MilestoneRecord, MilestoneSetting, MilestoneStore, RetrySelection, Settle,
};
use super::postgres::{PgDb, PostgresStore};
use super::rollup::{
    ChangedPost, DueRecord, Micros, RollupChange, RollupKey, RollupSnapshot, RollupStore,
    RollupWrite, TakenRecord, WriteOutcome,
};
pub use super::StoreSettings;
use super::{Attempt, CommitReport, CounterStore, StoreError, TombstoneState};
use crate::model::batch::{Batch, Membership, MembershipKey};

/// Firestore or PostgreSQL.
#[derive(Clone)]
pub enum SelectedStore {
    /// Sharded counter documents in Firestore.
    Firestore(FirestoreStore),
    /// Sharded counter rows in PostgreSQL.
    Postgres(PostgresStore),
}

impl SelectedStore {
    /// The store over `db` with `settings`.
    pub fn new(db: SelectedDb, settings: StoreSettings) -> Self {
        match db {
            SelectedDb::Firestore(db) => Self::Firestore(FirestoreStore::new(db, settings)),
            SelectedDb::Postgres(db) => Self::Postgres(PostgresStore::new(db, settings)),
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
                let read = store
                    .db()
                    .read_memberships(keys.iter(), None, None, Read::Latest);
                let found = read.await?.found;
                let stored = keys.iter().zip(found);
                Ok(stored.filter_map(|(k, m)| Some((k.clone(), m?))).collect())
            }
            Self::Postgres(store) => store.db().memberships(keys).await,
        }
    }
}

impl SelectedStore {
    /// With rollups on: the counter shard registry the commits are capped
    /// by (Firestore, whose rollups read counter shards by name;
    /// PostgreSQL's sum every row of a post and need none).
    pub fn shard_registry(&self) -> Option<std::sync::Arc<ShardRegistry>> {
        match self {
            Self::Firestore(store) => Some(store.register_shards()),
            Self::Postgres(_) => None,
        }
    }

    /// The database it commits to (a cheap handle).
    pub fn db(&self) -> SelectedDb {
        match self {
            Self::Firestore(store) => SelectedDb::Firestore(store.db().clone()),
            Self::Postgres(store) => SelectedDb::Postgres(store.db().clone()),
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

    async fn tombstones(&self) -> Result<TombstoneState, StoreError> {
        self.db().tombstone_state().await
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
    /// The stored data format; `None` when no record exists (format 1:
    /// see [`super::format`]).
    pub async fn data_format(&self) -> Result<Option<u32>, StoreError> {
        match self {
            Self::Firestore(db) => db.data_format().await,
            Self::Postgres(db) => db.data_format().await,
        }
    }

    /// Stores data format `to` unless the stored one is as high (never
    /// lowers it); returns the stored format after.
    pub async fn raise_data_format(&self, to: u32) -> Result<u32, StoreError> {
        match self {
            Self::Firestore(db) => db.raise_data_format(to).await,
            Self::Postgres(db) => db.raise_data_format(to).await,
        }
    }

    /// The erased users' tombstones and their generation (read first).
    pub async fn tombstone_state(&self) -> Result<TombstoneState, StoreError> {
        match self {
            Self::Firestore(db) => db.tombstone_state().await,
            Self::Postgres(db) => db.tombstone_state().await,
        }
    }

    /// The like count of `post_id`: the sum of its counter shards.
    pub async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        match self {
            Self::Firestore(db) => db.count(post_id).await,
            Self::Postgres(db) => db.count(post_id).await,
        }
    }

    /// Listens to the rollups of `posts`: each one's current state, then
    /// each change, sent to `changes` (Firestore: the Listen RPC, resuming
    /// from `resume`, when only what changed is sent; PostgreSQL: `LISTEN
    /// hotcount_counts`). Returns when the stream or connection ends (an
    /// error) or `changes` closes.
    pub async fn listen_rollups(
        &self,
        posts: &[String],
        resume: &mut ListenResume,
        changes: &tokio::sync::mpsc::UnboundedSender<RollupChange>,
    ) -> Result<(), StoreError> {
        match self {
            Self::Firestore(db) => db.listen_rollups(posts, resume, changes).await,
            Self::Postgres(db) => db.listen_rollups(posts, changes).await,
        }
    }

    /// Every rollup: post -> (`likes`, `asOf`), latest state.
    pub async fn rollups(&self) -> Result<BTreeMap<String, (i64, Micros)>, StoreError> {
        match self {
            Self::Firestore(db) => db.rollups(Read::Latest).await,
            Self::Postgres(db) => db.rollups().await,
        }
    }
}

impl RollupStore for SelectedDb {
    fn numbers_shards(&self) -> bool {
        match self {
            Self::Firestore(db) => db.numbers_shards(),
            Self::Postgres(db) => db.numbers_shards(),
        }
    }

    async fn read_rollups(&self, keys: &[RollupKey<'_>]) -> Result<RollupSnapshot, StoreError> {
        match self {
            Self::Firestore(db) => db.read_rollups(keys).await,
            Self::Postgres(db) => db.read_rollups(keys).await,
        }
    }

    async fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        match self {
            Self::Firestore(db) => db.write_rollups(writes).await,
            Self::Postgres(db) => db.write_rollups(writes).await,
        }
    }

    async fn changed_since(&self, since: SystemTime) -> Result<Vec<ChangedPost>, StoreError> {
        match self {
            Self::Firestore(db) => db.changed_since(since).await,
            Self::Postgres(db) => db.changed_since(since).await,
        }
    }

    async fn take_over_due(
        &self,
        older_than: std::time::Duration,
        store_now: Micros,
        limit: usize,
    ) -> Result<Vec<TakenRecord>, StoreError> {
        match self {
            Self::Firestore(db) => db.take_over_due(older_than, store_now, limit).await,
            Self::Postgres(db) => db.take_over_due(older_than, store_now, limit).await,
        }
    }

    async fn clear_due(&self, records: &[DueRecord]) -> Result<(), StoreError> {
        match self {
            Self::Firestore(db) => db.clear_due(records).await,
            Self::Postgres(db) => db.clear_due(records).await,
        }
    }
}

impl MilestoneStore for SelectedDb {
    async fn claim(
        &self,
        lease: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        match self {
            Self::Firestore(db) => db.claim(lease, limit).await,
            Self::Postgres(db) => db.claim(lease, limit).await,
        }
    }

    async fn settle(&self, claim: &Claim, settle: &Settle) -> Result<bool, StoreError> {
        match self {
            Self::Firestore(db) => db.settle(claim, settle).await,
            Self::Postgres(db) => db.settle(claim, settle).await,
        }
    }

    async fn milestones(&self) -> Result<Vec<MilestoneRecord>, StoreError> {
        match self {
            Self::Firestore(db) => db.milestones().await,
            Self::Postgres(db) => db.milestones().await,
        }
    }

    async fn retry(&self, selection: &RetrySelection) -> Result<u64, StoreError> {
        match self {
            Self::Firestore(db) => db.retry(selection).await,
            Self::Postgres(db) => db.retry(selection).await,
        }
    }

    async fn milestone_setting(&self) -> Result<Option<MilestoneSetting>, StoreError> {
        match self {
            Self::Firestore(db) => db.milestone_setting().await,
            Self::Postgres(db) => db.milestone_setting().await,
        }
    }

    async fn store_milestone_setting(
        &self,
        setting: &MilestoneSetting,
        only_if_unset: bool,
    ) -> Result<MilestoneSetting, StoreError> {
        match self {
            Self::Firestore(db) => db.store_milestone_setting(setting, only_if_unset).await,
            Self::Postgres(db) => db.store_milestone_setting(setting, only_if_unset).await,
        }
    }
}
