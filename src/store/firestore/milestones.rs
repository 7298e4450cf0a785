//! Milestone records on Firestore (`milestones/{post}:{n}`): the rollup
//! writes that record milestones, and the [`MilestoneStore`] of a
//! [`FirestoreDb`].
//!
//! Invariants: a rollup write that records milestones is one Commit with
//! the rollup's own precondition and each record's exists=false, so the
//! record exists if and only if the rollup that decided it was written; a
//! claim is one Commit conditioned on the update time the due query read,
//! so two dispatchers never both hold a lease, and no claim holds a lock
//! (a replica killed mid-claim leaves nothing open that could hold up the
//! others); a settle is conditioned on the update time the claim left.
//! "Due" and "lease until" are the store's time (the due query's read
//! time, carried forward on this process's monotonic clock), never a
//! replica's wall clock, and every Commit here ends within the call
//! deadline.

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::structured_query::{field_filter, CollectionSelector};

use std::time::{Duration, Instant};

use futures::stream::{self, BoxStream, FuturesUnordered, StreamExt};

use super::codec::{self, timestamp_to_micros};
use super::db::{answer_within, FirestoreDb, Read};
use super::documents::{ascending, compare};
use super::errors::status_error;
use super::layout::collections;
use super::layout::fields::milestone as f;
use crate::store::milestone::{
    Claim, MilestoneRecord, MilestoneSetting, MilestoneStatus, MilestoneStore, RetrySelection,
    Settle,
};
use crate::store::rollup::{Micros, RollupWrite, WriteOutcome};
use crate::store::{Code, StoreError};

impl FirestoreDb {
    /// Commits `writes` (atomically, no transaction) within the call
    /// deadline and returns each write's update time; a
    /// Commit without an answer by then is a transient DEADLINE_EXCEEDED
    /// (it may have applied: each caller's condition tells on the next
    /// try).
    async fn commit_writes(
        &self,
        writes: Vec<fs::Write>,
    ) -> Result<Vec<Option<Timestamp>>, StoreError> {
        self.commit_writes_within(writes, self.call_timeout()).await
    }

    /// [`FirestoreDb::commit_writes`] within `limit` instead of the call
    /// deadline.
    async fn commit_writes_within(
        &self,
        writes: Vec<fs::Write>,
        limit: Duration,
    ) -> Result<Vec<Option<Timestamp>>, StoreError> {
        let request = fs::CommitRequest {
            database: self.layout().database.clone(),
            writes,
            ..Default::default()
        };
        let mut client = self.client();
        let call = client.commit(FirestoreDb::within(request, limit));
        let response = answer_within(limit, "it may have applied", call)
            .await
            .map_err(|s| status_error("Commit", &s))?;
        Ok(response
            .write_results
            .into_iter()
            .map(|r| r.update_time)
            .collect())
    }

    /// Writes one rollup with the records of the milestones it reaches, in
    /// one Commit: all or nothing.
    pub(super) async fn write_recording(&self, write: &RollupWrite<'_>) -> WriteOutcome {
        let layout = self.layout();
        let mut writes = vec![codec::rollup_write(layout, write)];
        for &n in write.milestones {
            writes.push(codec::milestone_create(
                layout,
                write.post_id,
                n,
                write.likes,
                write.as_of,
            ));
        }
        match self.commit_writes(writes).await {
            Ok(_) => WriteOutcome::Written,
            // The rollup is not the one read (or, after a lost answer, a
            // record exists already: read again, and the rollup says so).
            Err(e) if matches!(e.code, Code::FailedPrecondition | Code::AlreadyExists) => {
                WriteOutcome::Lost
            }
            Err(e) => WriteOutcome::Failed(e),
        }
    }

    /// The records still to deliver, earliest due first, at most `limit`
    /// (latest state), with the query's read time: the store's time, which
    /// says which of them are due.
    async fn due_milestones(
        &self,
        limit: usize,
    ) -> Result<(Vec<fs::Document>, Micros), StoreError> {
        let query = fs::StructuredQuery {
            from: vec![self.milestones_collection()],
            order_by: vec![ascending(f::DUE_AT)],
            limit: Some(i32::try_from(limit).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        let root = self.layout().root();
        let limit = self.call_timeout();
        let queried = (self.run_query_within(&root, query, Read::Latest, limit)).await?;
        let read_time = queried
            .read_time
            .as_ref()
            .map(timestamp_to_micros)
            .ok_or_else(|| {
                StoreError::internal("RunQuery", "no read time for the due milestones")
            })?;
        Ok((queried.documents, read_time))
    }

    fn milestones_collection(&self) -> CollectionSelector {
        CollectionSelector {
            collection_id: self.layout().collection(collections::MILESTONES),
            all_descendants: false,
        }
    }

    /// Leases `record` if it is still as the due query read it (`seen`,
    /// its update time): one Commit conditioned on that time, within the
    /// lease it writes (a claim landing later is worth nothing). No
    /// transaction: a replica killed mid-claim leaves no lock behind.
    /// `None` when another claim (or any write) came first, or the record
    /// is gone.
    async fn claim_one(
        &self,
        mut record: MilestoneRecord,
        seen: Timestamp,
        clock: StoreClock,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        // The store's time now (see `StoreClock`): the lease runs from
        // before the commit, so its end as stored is what every other
        // dispatcher sees.
        let taken = Instant::now();
        let now = clock.now();
        let lease_micros = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
        record.status = MilestoneStatus::Leased;
        record.attempts = record.attempts.saturating_add(1);
        record.due_at = Some(now.saturating_add(lease_micros));
        let write = codec::milestone_update(self.layout(), &record, Some(seen));
        let limit = self.call_timeout().min(lease);
        let Some(times) = self.commit_conditioned(write, limit).await? else {
            return Ok(None);
        };
        let update_time = times.into_iter().next().flatten();
        if update_time.is_none() {
            return Err(StoreError::internal(
                "Commit",
                "no update time for the claim",
            ));
        }
        Ok(Some(Claim {
            record,
            update_time,
            leased_at: now,
            taken,
        }))
    }

    /// Applies `write` on its condition; `Ok(false)` when the condition
    /// failed.
    async fn write_conditioned(&self, write: fs::Write) -> Result<bool, StoreError> {
        let committed = self.commit_conditioned(write, self.call_timeout()).await?;
        Ok(committed.is_some())
    }

    /// Applies `write` on its condition within `limit` and returns its
    /// update time; `Ok(None)` when the condition failed (the document
    /// changed, or is gone).
    async fn commit_conditioned(
        &self,
        write: fs::Write,
        limit: Duration,
    ) -> Result<Option<Vec<Option<Timestamp>>>, StoreError> {
        match self.commit_writes_within(vec![write], limit).await {
            Ok(times) => Ok(Some(times)),
            Err(e) if matches!(e.code, Code::FailedPrecondition | Code::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The store's time, as a read time carried forward on this process's
/// monotonic clock from before the read was sent: ahead of the store's
/// time by at most the read's latency, so a lease this process believes
/// it still holds is never one the store already ended.
#[derive(Clone, Copy, Debug)]
struct StoreClock {
    read_time: Micros,
    asked: Instant,
}

impl StoreClock {
    fn now(self) -> Micros {
        let elapsed = i64::try_from(self.asked.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.read_time.saturating_add(elapsed)
    }
}

/// Whether a claim at `now` may take `record`.
fn is_due(record: &MilestoneRecord, now: Micros) -> bool {
    matches!(
        record.status,
        MilestoneStatus::Pending | MilestoneStatus::Leased
    ) && record.due_at.is_some_and(|d| d <= now)
}

/// `record` after `settle`.
pub(crate) fn settled(record: &MilestoneRecord, settle: &Settle, now: Micros) -> MilestoneRecord {
    let mut next = record.clone();
    match settle {
        Settle::Done { at } => {
            next.status = MilestoneStatus::Done;
            next.due_at = None;
            next.delivered_at = Some(*at);
        }
        Settle::Retry { error, after } => {
            let after = i64::try_from(after.as_micros()).unwrap_or(i64::MAX);
            next.status = MilestoneStatus::Pending;
            next.due_at = Some(now.saturating_add(after));
            next.last_error = Some(error.clone());
        }
        Settle::Dead { reason } => {
            next.status = MilestoneStatus::Dead;
            next.due_at = None;
            next.last_error = Some(reason.clone());
        }
    }
    next
}

impl MilestoneStore for FirestoreDb {
    async fn claim(&self, lease: Duration, limit: usize) -> Result<Vec<Claim>, StoreError> {
        let mut claims = Vec::new();
        let mut failed = None;
        let mut each = self.claim_each(lease, limit);
        while let Some(claimed) = each.next().await {
            match claimed {
                Ok(claim) => claims.push(claim),
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        // Nothing claimed and the store failed: the caller hears of it.
        match failed {
            Some(error) if claims.is_empty() => Err(error),
            _ => Ok(claims),
        }
    }

    fn claim_each(
        &self,
        lease: Duration,
        limit: usize,
    ) -> BoxStream<'_, Result<Claim, StoreError>> {
        let due = async move {
            let asked = Instant::now();
            let (docs, read_time) = self.due_milestones(limit).await?;
            let clock = StoreClock { read_time, asked };
            // Every lease at once, each from the store's time just before
            // its own commit: none lapses waiting for the others.
            let claims: FuturesUnordered<_> = docs
                .into_iter()
                .filter_map(|doc| {
                    let record = codec::milestone_from_document(&doc)?;
                    let seen = doc.update_time?;
                    is_due(&record, clock.now()).then(|| self.claim_one(record, seen, clock, lease))
                })
                .collect();
            Ok::<_, StoreError>(claims)
        };
        stream::once(due)
            .flat_map(|due| match due {
                Ok(claims) => claims
                    .filter_map(|claimed| async move {
                        match claimed {
                            Ok(claim) => claim.map(Ok),
                            Err(error) => {
                                tracing::debug!(%error, "claiming a milestone failed; left to the next claim");
                                Some(Err(error))
                            }
                        }
                    })
                    .left_stream(),
                Err(error) => stream::iter([Err(error)]).right_stream(),
            })
            .boxed()
    }

    async fn milestone_setting(&self) -> Result<Option<MilestoneSetting>, StoreError> {
        self.read_milestone_setting().await
    }

    async fn store_milestone_setting(
        &self,
        setting: &MilestoneSetting,
        only_if_unset: bool,
    ) -> Result<MilestoneSetting, StoreError> {
        self.write_milestone_setting(setting, only_if_unset).await
    }

    async fn settle(&self, claim: &Claim, settle: &Settle) -> Result<bool, StoreError> {
        let next = settled(&claim.record, settle, claim.store_now());
        let write = codec::milestone_update(self.layout(), &next, claim.update_time);
        self.write_conditioned(write).await
    }

    async fn milestones(&self) -> Result<Vec<MilestoneRecord>, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![self.milestones_collection()],
            ..Default::default()
        };
        let root = self.layout().root();
        let queried = self.run_query(&root, query, Read::Latest).await?;
        let mut records: Vec<MilestoneRecord> = queried
            .documents
            .iter()
            .filter_map(codec::milestone_from_document)
            .collect();
        records.sort_by_key(|r| (r.reached_at, r.id()));
        Ok(records)
    }

    async fn retry(&self, selection: &RetrySelection) -> Result<u64, StoreError> {
        let docs = match selection {
            RetrySelection::AllDead => {
                let query = fs::StructuredQuery {
                    from: vec![self.milestones_collection()],
                    r#where: Some(compare(
                        f::STATUS,
                        field_filter::Operator::Equal,
                        codec::string(MilestoneStatus::Dead.as_str()),
                    )),
                    ..Default::default()
                };
                let root = self.layout().root();
                self.run_query(&root, query, Read::Latest).await?.documents
            }
            RetrySelection::One { post_id, milestone } => {
                let name = self.layout().milestone(post_id, *milestone);
                self.get(&name).await?.into_iter().collect()
            }
        };
        let mut retried = 0;
        for doc in docs {
            let Some(mut record) = codec::milestone_from_document(&doc) else {
                continue;
            };
            if !retryable(record.status) {
                continue;
            }
            // Due at once (the epoch: whatever the clocks say); attempts
            // keep counting.
            record.status = MilestoneStatus::Pending;
            record.due_at = Some(0);
            let write = codec::milestone_update(self.layout(), &record, doc.update_time);
            if self.write_conditioned(write).await? {
                retried += 1;
            }
        }
        Ok(retried)
    }
}

impl FirestoreDb {
    /// The fleet's milestone setting; `None` when none is stored.
    pub(super) async fn read_milestone_setting(
        &self,
    ) -> Result<Option<MilestoneSetting>, StoreError> {
        let name = self.layout().milestone_setting();
        let Some(doc) = self.get(&name).await? else {
            return Ok(None);
        };
        codec::milestone_setting_from_document(&doc)
            .map(Some)
            .ok_or_else(|| StoreError::internal("GetDocument", "an unreadable milestone setting"))
    }

    /// Stores `setting` (see [`MilestoneStore::store_milestone_setting`]).
    pub(super) async fn write_milestone_setting(
        &self,
        setting: &MilestoneSetting,
        only_if_unset: bool,
    ) -> Result<MilestoneSetting, StoreError> {
        let write = codec::milestone_setting_write(self.layout(), setting, only_if_unset);
        match self.commit_writes(vec![write]).await {
            Ok(_) => Ok(setting.clone()),
            Err(e) if only_if_unset && e.code == Code::AlreadyExists => {
                self.read_milestone_setting().await?.ok_or_else(|| {
                    StoreError::internal("GetDocument", "the milestone setting vanished")
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether `hotcount milestones retry` may make a record of `status`
/// pending again (a leased one is being attempted; a done one was
/// delivered).
pub(crate) fn retryable(status: MilestoneStatus) -> bool {
    matches!(status, MilestoneStatus::Dead | MilestoneStatus::Pending)
}
