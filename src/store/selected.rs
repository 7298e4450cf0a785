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
use super::erasure::{ErasureStore, UserMembership};
pub use super::firestore::ListenResume;
use super::firestore::{FirestoreDb, FirestoreStore, Read};
use super::milestone::{
    Claim, MilestoneRecord, MilestoneSetting, MilestoneStore, RetrySelection, Settle,
};
use super::postgres::{PgDb, PostgresStore};
use super::quarantine::{QuarantineStore, StoredRecord};
use super::reconcile::{PostReport, Reconcilable};
use super::rollup::{
    ChangedPost, DueRecord, Micros, RollupChange, RollupKey, RollupSnapshot, RollupStore,
    RollupWrite, TakenRecord, WriteOutcome,
};
pub use super::StoreSettings;
use super::{Attempt, CommitReport, CounterStore, StoreError, TombstoneState};
use crate::model::batch::{Batch, Membership, MembershipKey};

/// `$call` on whichever backend `$selected` holds (a [`SelectedStore`] or
/// a [`SelectedDb`], bound as `$backend`; used inside their `impl`s): the one place a call is
/// dispatched to Firestore or PostgreSQL, so each call is written once and
/// both backends answer it through the same trait or method.
macro_rules! each_backend {
    ($selected:expr, $backend:ident => $call:expr) => {
        match $selected {
            Self::Firestore($backend) => $call,
            Self::Postgres($backend) => $call,
        }
    };
}

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
        each_backend!(self, store => store.commit(batch, attempt).await)
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        each_backend!(self, store => store.count(post_id).await)
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
        each_backend!(self, db => db.data_format().await)
    }

    /// Stores data format `to` unless the stored one is as high (never
    /// lowers it); returns the stored format after.
    pub async fn raise_data_format(&self, to: u32) -> Result<u32, StoreError> {
        each_backend!(self, db => db.raise_data_format(to).await)
    }

    /// The erased users' tombstones and their generation (read first).
    pub async fn tombstone_state(&self) -> Result<TombstoneState, StoreError> {
        each_backend!(self, db => db.tombstone_state().await)
    }

    /// Whether the service deletes expired batch markers itself
    /// ([`Self::delete_expired_markers`]: PostgreSQL) rather than the store
    /// (Firestore's TTL policy on `expireAt`).
    pub fn sweeps_expired_markers(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// Deletes up to `rows` expired batch markers; how many (Firestore:
    /// none, its TTL policy deletes them).
    pub async fn delete_expired_markers(&self, rows: i64) -> Result<u64, StoreError> {
        match self {
            Self::Firestore(_) => Ok(0),
            Self::Postgres(db) => db.delete_expired_markers(rows).await,
        }
    }

    /// The like count of `post_id`: the sum of its counter shards.
    pub async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        each_backend!(self, db => db.count(post_id).await)
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
        each_backend!(self, db => db.numbers_shards())
    }

    async fn read_rollups(&self, keys: &[RollupKey<'_>]) -> Result<RollupSnapshot, StoreError> {
        each_backend!(self, db => db.read_rollups(keys).await)
    }

    async fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        each_backend!(self, db => db.write_rollups(writes).await)
    }

    async fn changed_since(&self, since: SystemTime) -> Result<Vec<ChangedPost>, StoreError> {
        each_backend!(self, db => db.changed_since(since).await)
    }

    async fn take_over_due(
        &self,
        older_than: std::time::Duration,
        store_now: Micros,
        limit: usize,
    ) -> Result<Vec<TakenRecord>, StoreError> {
        each_backend!(self, db => db.take_over_due(older_than, store_now, limit).await)
    }

    async fn clear_due(&self, records: &[DueRecord]) -> Result<(), StoreError> {
        each_backend!(self, db => db.clear_due(records).await)
    }
}

impl MilestoneStore for SelectedDb {
    async fn claim(
        &self,
        lease: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        each_backend!(self, db => db.claim(lease, limit).await)
    }

    fn claim_each(
        &self,
        lease: std::time::Duration,
        limit: usize,
    ) -> futures::stream::BoxStream<'_, Result<Claim, StoreError>> {
        each_backend!(self, db => db.claim_each(lease, limit))
    }

    async fn settle(&self, claim: &Claim, settle: &Settle) -> Result<bool, StoreError> {
        each_backend!(self, db => db.settle(claim, settle).await)
    }

    async fn milestones(&self) -> Result<Vec<MilestoneRecord>, StoreError> {
        each_backend!(self, db => db.milestones().await)
    }

    async fn retry(&self, selection: &RetrySelection) -> Result<u64, StoreError> {
        each_backend!(self, db => db.retry(selection).await)
    }

    async fn milestone_setting(&self) -> Result<Option<MilestoneSetting>, StoreError> {
        each_backend!(self, db => db.milestone_setting().await)
    }

    async fn store_milestone_setting(
        &self,
        setting: &MilestoneSetting,
        only_if_unset: bool,
    ) -> Result<MilestoneSetting, StoreError> {
        each_backend!(self, db => db.store_milestone_setting(setting, only_if_unset).await)
    }
}

impl Reconcilable for SelectedDb {
    async fn compare_all(&self) -> Result<Vec<PostReport>, StoreError> {
        each_backend!(self, db => db.compare_all().await)
    }

    async fn compare_post(&self, post_id: &str, repair: bool) -> Result<PostReport, StoreError> {
        each_backend!(self, db => db.compare_post(post_id, repair).await)
    }
}

impl QuarantineStore for SelectedDb {
    async fn list_quarantined(
        &self,
        consumer: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        each_backend!(self, db => db.list_quarantined(consumer, limit).await)
    }

    async fn quarantined(&self, id: &str) -> Result<Option<StoredRecord>, StoreError> {
        each_backend!(self, db => db.quarantined(id).await)
    }

    async fn delete_quarantined(&self, id: &str) -> Result<(), StoreError> {
        each_backend!(self, db => db.delete_quarantined(id).await)
    }
}

impl ErasureStore for SelectedDb {
    async fn memberships_of_user(&self, user_id: &str) -> Result<Vec<UserMembership>, StoreError> {
        each_backend!(self, db => db.memberships_of_user(user_id).await)
    }

    async fn put_tombstone(&self, user_hash: &str) -> Result<(), StoreError> {
        each_backend!(self, db => db.put_tombstone(user_hash).await)
    }

    async fn tombstone_hashes(&self) -> Result<Vec<String>, StoreError> {
        each_backend!(self, db => db.tombstone_hashes().await)
    }

    async fn lift_tombstone(&self, user_hash: &str) -> Result<bool, StoreError> {
        each_backend!(self, db => db.lift_tombstone(user_hash).await)
    }

    async fn membership_user_ids(&self) -> Result<Vec<String>, StoreError> {
        each_backend!(self, db => db.membership_user_ids().await)
    }

    async fn delete_erased(
        &self,
        user_id: &str,
        keys: &[MembershipKey],
    ) -> Result<u64, StoreError> {
        each_backend!(self, db => db.delete_erased(user_id, keys).await)
    }
}
