//! The rollups' side of the store: one document (Firestore `counts/{post}`)
//! or row (PostgreSQL `post_counts`) per post holding the sum of its
//! counter shards at one read time, what clients read and listen to.
//! [`RollupStore`] is what the refresher ([`crate::pipeline::rollup`])
//! needs of a store: read many posts' shards and rollups at one read time,
//! write many rollups each on its own condition, and find recently changed
//! posts; implemented for Firestore, PostgreSQL, the in-memory store and
//! the selected one.
//!
//! Invariants: a [`RollupSnapshot`] holds, for every post asked, the sum of
//! its shards and its stored rollup as of one read time (`read_time`);
//! a [`RollupWrite`] is applied only if the rollup is still the one read
//! (Firestore: its update time, or absent; PostgreSQL: a stored `as_of`
//! older than the write's), so a rollup's `as_of` never goes backwards and
//! each value written was the true sum at its `as_of`. Rollups are never
//! written inside a batch's transaction.

use std::future::Future;
use std::time::{Duration, SystemTime};

use gcloud_sdk::prost_types::Timestamp;

use super::StoreError;

/// A store's time (a read or commit time): microseconds since the Unix epoch.
pub type Micros = i64;

/// `t` as [`Micros`] (0 before the epoch).
pub fn micros_of(t: SystemTime) -> Micros {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What to read of one post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RollupKey<'a> {
    /// The post.
    pub post_id: &'a str,
    /// Counter shard documents to sum (`0..shards`; Firestore reads them
    /// by name, and with 0 reads the rollup alone; PostgreSQL sums every
    /// row of the post whatever this says).
    pub shards: u32,
}

/// A rollup as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRollup {
    /// The sum it shows.
    pub likes: i64,
    /// The read time that sum was taken at.
    pub as_of: Micros,
    /// Counter shard documents the sum covered, `0..shards` (Firestore);
    /// `None`: every shard of the post (PostgreSQL sums them all).
    pub shards: Option<u32>,
    /// The document's update time (Firestore): the condition of the next
    /// write. `None` on PostgreSQL, whose condition is `as_of`.
    pub update_time: Option<Timestamp>,
    /// The highest milestone recorded with this rollup, ever (Firestore's
    /// `milestone` field: a post that falls below it and climbs back
    /// reaches nothing again); `None` when none was, and on PostgreSQL,
    /// whose `ON CONFLICT DO NOTHING` keeps the same promise.
    pub milestone: Option<i64>,
}

/// One post read at the snapshot's read time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostRead {
    /// The sum of the post's counter shards.
    pub likes: i64,
    /// Counter shard documents that exist among those read: the highest
    /// existing one's number plus one (Firestore); 0 where shards are not
    /// read by number (PostgreSQL sums every row).
    pub found_shards: u32,
    /// Its rollup, if one exists.
    pub stored: Option<StoredRollup>,
}

/// Posts read at one read time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollupSnapshot {
    /// The read time: every sum and rollup here is as of it.
    pub read_time: Micros,
    /// One per key asked, in the same order.
    pub posts: Vec<PostRead>,
}

/// One rollup to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RollupWrite<'a> {
    /// The post.
    pub post_id: &'a str,
    /// The new total: the sum of its shards at `as_of`.
    pub likes: i64,
    /// The read time of that sum.
    pub as_of: Micros,
    /// Counter shard documents it covers.
    pub shards: u32,
    /// The rollup the sum was read with (`None`: it did not exist). The
    /// write applies only if the rollup is still this one; its `likes` is
    /// the old total (what a milestone check compares the new one with).
    pub previous: Option<&'a StoredRollup>,
    /// The milestones this write reaches for the first time: each one's
    /// record (`likes`, reached at `as_of`) is created, if absent, in the
    /// same atomic write as the rollup ([`crate::store::milestone`]).
    pub milestones: &'a [i64],
}

/// How one rollup write ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written.
    Written,
    /// Not written: the rollup changed since it was read (another
    /// refresher wrote it first); nothing is lost, read again.
    Lost,
    /// Failed (the store's error): not written, or written with the answer
    /// lost; read again.
    Failed(StoreError),
}

/// A post whose counter shards changed recently (the sweep's find).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedPost {
    /// The post.
    pub post_id: String,
    /// A rollup as of this time or later includes the change (`None`: not
    /// known, the next read time is used).
    pub changed_at: Option<Micros>,
    /// Counter shard documents it has at least.
    pub shards: u32,
}

/// A due record: the durable mark a committed batch that changed counts
/// leaves in the store, in the same commit (its batch marker carries the
/// posts), until a refresher has brought every one of those posts' rollups
/// past the commit and clears it. A record no live refresher clears is
/// taken over by another replica ([`RollupStore::take_over_due`]), so a
/// post's rollup catches up whatever replicas are killed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DueRecord {
    /// The consumer that committed the batch.
    pub consumer: String,
    /// The batch.
    pub batch_id: String,
}

/// A due record taken over (leased) from a refresher that did not clear it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakenRecord {
    /// The record.
    pub record: DueRecord,
    /// The posts its batch changed, with the counter shard each was
    /// incremented on (when recorded).
    pub posts: Vec<super::ChangedCounter>,
    /// The batch's commit time in the store's clock, when recorded.
    pub committed_at: Option<Micros>,
}

/// A rollup's state as a listener sees it change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollupChange {
    /// The post.
    pub post_id: String,
    /// Its `likes` and `asOf`; `None` while it has no rollup.
    pub rollup: Option<(i64, Micros)>,
}

/// What the rollup refresher needs of a store.
pub trait RollupStore: Send + Sync + 'static {
    /// Reads the counter shards and the rollup of each of `keys` at one
    /// read time (one round trip).
    fn read_rollups(
        &self,
        keys: &[RollupKey<'_>],
    ) -> impl Future<Output = Result<RollupSnapshot, StoreError>> + Send;

    /// Writes `writes`, each on its own condition (see [`RollupWrite::previous`]),
    /// in one round trip; one outcome per write, in order. An error is a
    /// failure of the whole call (every write's outcome unknown).
    fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> impl Future<Output = Result<Vec<WriteOutcome>, StoreError>> + Send;

    /// Posts whose counter shards changed since `since` and whose rollup
    /// may not show it (the sweep after a restart).
    fn changed_since(
        &self,
        since: SystemTime,
    ) -> impl Future<Output = Result<Vec<ChangedPost>, StoreError>> + Send;

    /// Whether a post's counter shards are read by number (`0..shards`,
    /// Firestore), so a refresh must know how many to read; `false` where
    /// a read sums every shard the post has (PostgreSQL).
    fn numbers_shards(&self) -> bool {
        true
    }

    /// Takes over at most `limit` due records left uncleared for longer
    /// than `older_than` (by the store's clock; `store_now` is this
    /// process's best estimate of it, for stores that cannot ask): each is
    /// leased to the caller by restarting its wait at the store's time, on
    /// the condition that it did not change since it was found, so two
    /// replicas never take the same record at once.
    fn take_over_due(
        &self,
        older_than: Duration,
        store_now: Micros,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TakenRecord>, StoreError>> + Send;

    /// Clears `records` (their posts' rollups show their batches), in one
    /// round trip; a record already cleared or expired is no error.
    fn clear_due(
        &self,
        records: &[DueRecord],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
