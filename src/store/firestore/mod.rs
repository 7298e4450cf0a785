//! The Firestore [`CounterStore`]: one read-write transaction per batch,
//! in two round trips (BatchGetDocuments opening the transaction, Commit),
//! or one Commit alone when the batch's memberships are known ([`known`]).
//!
//! Invariants: a Commit alone carries a precondition on every state its
//! plan assumed (the memberships as known, the marker absent), so it
//! applies only where the transaction would have planned the same; else
//! the memberships and the batch marker are read inside the
//! transaction before anything is written (so Firestore locks them); a batch
//! whose marker exists is rolled back and reported already committed; a
//! batch checked against tombstone generation `g` also reads
//! `settings/erasedUsers` in that request and is rolled back, applying
//! nothing, unless it holds `g`; every
//! membership write carries a precondition on what was read, so even an
//! optimistic database cannot apply a plan computed from stale reads.
//!
//! The schema lives beside it: [`layout`] names every collection, document
//! and field, [`codec`] turns documents into values and back and builds a
//! batch's writes, [`errors`] classes failures, and [`FirestoreDb`] (`db`,
//! `documents`) is the one handle every Firestore call in the repo goes
//! through: this store, the operator tools, the load generator and the tests.
//! [`wire`] holds the lean, wire-compatible messages of the hot path (a
//! batch's read and commit), which carry fields as lists, not maps, and
//! [`frame`] reads a batch's read responses in place, without building
//! them.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::store::{Code, OpenedTransaction};

pub mod codec;
mod db;
mod documents;
mod erasure;
pub mod errors;
mod format;
pub mod frame;
pub mod known;
pub mod layout;
mod milestones;
mod quarantine;
pub mod repair;
mod rollups;
pub mod wire;

pub use codec::{StoredMembership, StoredRecord};
pub use db::{FirestoreDb, Opened, Queried, Read, DEFAULT_CALL_TIMEOUT};
pub use documents::{CounterSums, Memberships};
pub use errors::{classify, status_error};
pub use layout::Layout;
pub use rollups::ListenResume;

use super::counter_shards::{CounterShardPlanner, ShardRegistry};
use super::{
    Attempt, ChangedCounter, CommitOutcome, CommitReport, CounterStore, ErrorClass, KnownUse,
    StoreError,
};
use crate::model::batch::{Batch, MembershipKey, Plan};
use gcloud_sdk::prost_types::Timestamp;
use known::{KeyHashes, KnownMemberships, Recalled, Unchanged};

/// Store settings (where the documents live is the [`FirestoreDb`]'s layout).
pub type FirestoreStoreConfig = super::StoreSettings;

/// The Firestore store.
#[derive(Clone)]
pub struct FirestoreStore {
    db: FirestoreDb,
    config: FirestoreStoreConfig,
    shards: std::sync::Arc<CounterShardPlanner>,
    known: std::sync::Arc<KnownMemberships>,
}

impl FirestoreStore {
    /// A store over an open database.
    pub fn new(db: FirestoreDb, config: FirestoreStoreConfig) -> Self {
        let shards = std::sync::Arc::new(CounterShardPlanner::new(
            config.counter_shards,
            config.counter_shard_target_writes_per_sec,
        ));
        let known = std::sync::Arc::new(KnownMemberships::new(config.known_memberships));
        Self {
            db,
            config,
            shards,
            known,
        }
    }

    /// The database it commits to.
    pub fn db(&self) -> &FirestoreDb {
        &self.db
    }

    /// From now on, caps each post's counter shards at what its rollup
    /// registers (see [`super::counter_shards`]); the registry the rollup
    /// refresher keeps up to date.
    pub fn register_shards(&self) -> std::sync::Arc<ShardRegistry> {
        self.shards.register_in(std::sync::Arc::default())
    }
}

impl CounterStore for FirestoreStore {
    async fn commit(&self, batch: &Batch, attempt: &Attempt) -> Result<CommitReport, StoreError> {
        let opened = Opened::default();
        let committing = AtomicBool::new(false);
        let work = self.attempt(batch, attempt, &opened, &committing);
        tokio::select! {
            result = work => result,
            () = attempt.deadline.reached() => {
                // Abandoned mid-RPC: end the transaction it opened, so its
                // locks do not stall other replicas until it expires (a
                // Commit that did apply makes the rollback fail, harmlessly).
                let transaction = opened.take();
                if let Some(transaction) = &transaction {
                    self.db.rollback(transaction.clone()).await;
                }
                let outcome = if committing.load(Ordering::SeqCst) {
                    "its Commit was sent, so its outcome is unknown (the batch marker tells the next attempt or delivery whether it applied)"
                } else {
                    "abandoned before its Commit was sent: its transaction was rolled back, nothing applied"
                };
                Err(StoreError {
                    op: "Commit",
                    code: Code::DeadlineExceeded,
                    message: format!("the shutdown deadline passed; {outcome}"),
                    class: ErrorClass::Transient,
                    transaction: transaction.map(OpenedTransaction::new),
                })
            }
        }
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        self.db.count(post_id).await
    }

    async fn tombstones(&self) -> Result<super::TombstoneState, StoreError> {
        self.db.tombstone_state().await
    }
}

impl FirestoreStore {
    /// One commit attempt of `batch`: in one round trip when its
    /// memberships are known ([`known`]; not for a batch checked against
    /// tombstones, whose generation only a transaction can hold, nor for a
    /// retry of a transaction); else, or when that Commit is refused on a
    /// precondition (its round trips then counted in the report), in a
    /// transaction ([`Self::commit_in_transaction`]).
    async fn attempt(
        &self,
        batch: &Batch,
        attempt: &Attempt,
        opened: &Opened,
        committing: &AtomicBool,
    ) -> Result<CommitReport, StoreError> {
        let marker = self.db.layout().marker(&self.config.consumer, &batch.id);
        let mut refused_rpcs = 0;
        if batch.tombstone_generation.is_none() && attempt.retry_transaction.is_none() {
            if let Some(recalled) = self.known.recall(batch.keys()) {
                let mut used = 0;
                match self
                    .commit_known(batch, &marker, recalled, committing, &mut used)
                    .await
                {
                    Ok(report) => return Ok(report),
                    // Nothing applied: the transaction reads what changed
                    // (or finds the marker of an earlier attempt).
                    Err(error) if known::refused_on_precondition(&error) => {
                        committing.store(false, Ordering::SeqCst);
                        refused_rpcs = used;
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        let mut report =
            (self.commit_in_transaction(batch, attempt, opened, committing, &marker)).await?;
        if refused_rpcs > 0 {
            report.rpcs += refused_rpcs;
            report.known = KnownUse::Refused;
        }
        Ok(report)
    }

    /// Reads `batch`'s memberships and `marker`, opening a read-write
    /// transaction (that retries `attempt.retry_transaction`, if any, and
    /// is left in `opened` as soon as it is known), then commits the plan's
    /// writes in it.
    async fn commit_in_transaction(
        &self,
        batch: &Batch,
        attempt: &Attempt,
        opened: &Opened,
        committing: &AtomicBool,
        marker: &str,
    ) -> Result<CommitReport, StoreError> {
        let layout = self.db.layout();
        let read = Read::ReadWrite {
            retry: attempt
                .retry_transaction
                .as_ref()
                .map(OpenedTransaction::id),
            opened,
        };
        // A checked batch reads the tombstones' generation in the same
        // request: its transaction holds it until the commit, so a tombstone
        // written meanwhile waits for this commit or was written before the
        // read, and then the generation differs.
        let generation = batch
            .tombstone_generation
            .map(|_| layout.tombstone_generation());
        let snapshot = self
            .db
            .read_memberships(batch.keys(), Some(marker), generation.as_deref(), read)
            .await?;
        if let Some(effects) = snapshot.marker {
            self.db.rollback(snapshot.transaction).await;
            return Ok(CommitReport {
                outcome: CommitOutcome::AlreadyCommitted,
                effects,
                increments: 0,
                rpcs: 2,
                known: KnownUse::Unused,
                changed: ChangedCounter::every_post_of(batch),
                committed_at: None,
                due_record: self.config.due_record(batch, true),
            });
        }
        if let (Some(checked), Some(found)) =
            (batch.tombstone_generation, snapshot.tombstone_generation)
        {
            if checked != found {
                self.db.rollback(snapshot.transaction).await;
                return Err(StoreError::tombstones_changed(checked, found));
            }
        }
        let plan = batch.plan(snapshot.found.as_slice());
        // A checked batch never commits from known memberships, and every
        // batch of a store with tombstones is checked: nothing to learn.
        let learns = batch.tombstone_generation.is_none();
        let hashes = match learns {
            true => self.known.hashes(batch.keys()),
            false => KeyHashes::default(),
        };
        self.known.see(&hashes);
        let committed = self
            .commit_plan(
                batch,
                &plan,
                &snapshot.names,
                &snapshot.update_times,
                marker,
                Some(snapshot.transaction),
                committing,
            )
            .await;
        let (report, commit_time) = match committed {
            Ok(committed) => committed,
            Err(error) => {
                self.known.forget(batch.keys(), &hashes);
                return Err(error);
            }
        };
        let unchanged = Unchanged::Read {
            found: &snapshot.found,
            update_times: &snapshot.update_times,
        };
        (self.known).learn(batch.keys(), &hashes, &plan, commit_time, unchanged);
        Ok(report)
    }

    /// Commits `batch` planned against the `recalled` states, with no
    /// transaction (the forgotten ones read first, locking nothing): every
    /// membership write on the precondition of the state recalled or read,
    /// the marker only if absent. Counts its round trips in `used`.
    async fn commit_known(
        &self,
        batch: &Batch,
        marker: &str,
        mut recalled: Recalled,
        committing: &AtomicBool,
        used: &mut u32,
    ) -> Result<CommitReport, StoreError> {
        let read_some = !recalled.forgotten.is_empty();
        if read_some {
            let keys: Vec<&MembershipKey> = batch.keys().collect();
            let forgotten = recalled.forgotten.iter().map(|&i| keys[i]);
            let mut read = (self.db)
                .read_memberships(forgotten, None, None, Read::Latest)
                .await?;
            *used += 1;
            for (j, &i) in recalled.forgotten.iter().enumerate() {
                recalled.found[i] = read.found.get_mut(j).and_then(Option::take);
                recalled.update_times[i] = read.update_times.get(j).copied().flatten();
            }
        }
        *used += 1;
        let plan = batch.plan(recalled.found.as_slice());
        self.known.see(&recalled.hashes);
        let committed = self
            .commit_plan(
                batch,
                &plan,
                &[],
                &recalled.update_times,
                marker,
                None,
                committing,
            )
            .await;
        match committed {
            Ok((mut report, commit_time)) => {
                report.known = KnownUse::Committed;
                report.rpcs = *used;
                self.known.confirmed();
                let unchanged = match read_some {
                    true => Unchanged::Read {
                        found: &recalled.found,
                        update_times: &recalled.update_times,
                    },
                    false => Unchanged::AlreadyKnown,
                };
                let hashes = &recalled.hashes;
                (self.known).learn(batch.keys(), hashes, &plan, commit_time, unchanged);
                Ok(report)
            }
            Err(error) => {
                self.known.forget(batch.keys(), &recalled.hashes);
                if known::refused_on_precondition(&error) {
                    self.known.refused();
                    tracing::debug!(
                        batch = %batch.id,
                        assumed_absent = recalled.assumed_absent,
                        read = recalled.forgotten.len(),
                        error = %error,
                        "a commit from known memberships was refused on a precondition; reading them in a transaction"
                    );
                }
                Err(error)
            }
        }
    }

    /// Commits `plan`'s writes (in `transaction`, or alone when `None`):
    /// memberships named by `names` (built from the layout where short) on
    /// the preconditions `update_times`, one increment per post on a
    /// counter shard leased for the commit, the marker, the quarantine
    /// records. Gives the report and the Commit's time.
    #[allow(clippy::too_many_arguments)]
    async fn commit_plan(
        &self,
        batch: &Batch,
        plan: &Plan<'_>,
        names: &[String],
        update_times: &[Option<Timestamp>],
        marker: &str,
        transaction: Option<Vec<u8>>,
        committing: &AtomicBool,
    ) -> Result<(CommitReport, Option<Timestamp>), StoreError> {
        let layout = self.db.layout();
        // Held until the commit has ended: another batch in flight on one of
        // these posts increments a different counter shard.
        let counters = self.shards.lease(
            plan.deltas.keys().map(String::as_str),
            std::time::Instant::now(),
        );
        // About 250 bytes per membership write.
        let capacity = 512 + 256 * (plan.memberships.len() + plan.deltas.len());
        let mut commit = wire::EncodedCommit::new(&layout.database, capacity);
        codec::encode_writes(
            &mut commit,
            layout,
            &self.config,
            batch,
            plan,
            names,
            update_times,
            marker,
            |i| counters.shard(i),
        );
        committing.store(true, Ordering::SeqCst);
        let rpcs = if transaction.is_some() { 2 } else { 1 };
        let committed_at = self.db.commit_encoded(commit, transaction).await?;
        let increments = plan.deltas.len();
        let due_record = self.config.due_record(batch, increments > 0);
        let changed = (plan.deltas.keys().enumerate())
            .map(|(i, post_id)| ChangedCounter {
                post_id: post_id.clone(),
                shard: Some(counters.shard(i)),
            })
            .collect();
        let report = CommitReport {
            outcome: CommitOutcome::Committed,
            effects: plan.effects,
            increments,
            rpcs,
            known: KnownUse::Unused,
            changed,
            committed_at: committed_at.as_ref().map(codec::timestamp_to_micros),
            due_record,
        };
        Ok((report, committed_at))
    }
}
