//! An in-memory [`CounterStore`] and [`RollupStore`] for unit tests, with
//! failure injection.
//!
//! Invariant: same semantics as the Firestore store (one atomic apply per
//! batch, markers make a re-commit a no-op; a rollup write applies only
//! over the rollup it was read with); never used in production. Its clock
//! follows tokio's (paused time drives it) and every commit and read
//! advances it by at least one microsecond.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::rollup::{
    ChangedPost, DueRecord, Micros, PostRead, RollupKey, RollupSnapshot, RollupStore, RollupWrite,
    StoredRollup, TakenRecord, WriteOutcome,
};
use super::{
    Attempt, ChangedCounter, Code, CommitOutcome, CommitReport, CounterStore, ErrorClass, KnownUse,
    StoreError, TombstoneState,
};
use crate::model::batch::{Batch, Effects, Membership, MembershipKey};
use crate::model::poison::PoisonRecord;

/// A failure the next commits will meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectedFailure {
    /// Fail before applying, with this class.
    Before(ErrorClass),
    /// Apply, then report a transient failure (unknown outcome).
    AfterApply,
    /// Refuse (as content) any batch holding an event of this user id.
    RejectUser(String),
    /// Refuse (as content) any batch holding the quarantine record of this
    /// message id.
    RejectRecord(String),
}

#[derive(Default)]
struct State {
    memberships: HashMap<MembershipKey, Membership>,
    counters: BTreeMap<String, i64>,
    markers: HashMap<String, Effects>,
    quarantine: Vec<PoisonRecord>,
    failures: Vec<InjectedFailure>,
    reject_users: HashSet<String>,
    reject_records: HashSet<String>,
    commits: u64,
    delay: std::time::Duration,
    posts_in_flight: HashMap<String, usize>,
    memberships_in_flight: HashSet<MembershipKey>,
    commits_in_flight: usize,
    observed: Concurrency,
    rollups: HashMap<String, StoredRollup>,
    rollup_failures: Vec<RollupFailure>,
    rollup_writes: u64,
    /// How long each rollup read takes (on the tokio clock).
    rollup_read_delay: std::time::Duration,
    /// The milestones recorded: (post, milestone) -> likes, in order.
    milestones: Vec<(String, i64, i64)>,
    /// The erased users' tombstones and their generation.
    tombstones: TombstoneState,
    /// The clock: microseconds since the store's first use, on tokio's
    /// clock (so paused time drives it), and at least one more per commit
    /// or read.
    now: Micros,
    started: Option<tokio::time::Instant>,
    /// When each post's counter last changed.
    changed_at: HashMap<String, Micros>,
    /// Rollup due records by batch id: the posts, the commit time, and
    /// when the record's wait began.
    due: BTreeMap<String, (Vec<ChangedCounter>, Micros, Micros)>,
}

/// A failure the next rollup calls will meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollupFailure {
    /// The next read fails (UNAVAILABLE).
    Read,
    /// The next write call fails before applying anything.
    Write,
    /// The next write call applies, then fails (its answer lost).
    WriteAfterApply,
    /// The next look for due records to take over never answers (as a
    /// statement waiting on a lock another session holds).
    TakeOverHangs,
}

/// What the store saw of concurrent commits (for flusher tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Concurrency {
    /// Most commits in progress at once.
    pub max_commits_in_flight: usize,
    /// Commits that began while another commit of the same post was in
    /// progress (expected for a hot post: its users spread over shards).
    pub post_overlaps: u64,
    /// Commits that began while another commit of the same (post, user)
    /// was in progress (must never happen: they would contend).
    pub membership_overlaps: u64,
}

/// The in-memory store; a cheap cloneable handle.
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    /// Writes the tombstone `user_hash` and bumps the generation, as
    /// `users erase` does.
    pub fn write_tombstone(&self, user_hash: &str) {
        let mut state = self.state.lock();
        if !state.tombstones.hashes.iter().any(|h| h == user_hash) {
            state.tombstones.hashes.push(user_hash.to_string());
        }
        state.tombstones.generation += 1;
    }

    /// Queues a failure for a coming commit (in order).
    pub fn inject(&self, failure: InjectedFailure) {
        let mut state = self.state.lock();
        match failure {
            InjectedFailure::RejectUser(user) => {
                state.reject_users.insert(user);
            }
            InjectedFailure::RejectRecord(message_id) => {
                state.reject_records.insert(message_id);
            }
            other => state.failures.push(other),
        }
    }

    /// Every commit takes this long (on the tokio clock) before it applies.
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.state.lock().delay = delay;
    }

    /// Every rollup read takes this long (on the tokio clock) before it
    /// reads.
    pub fn set_rollup_read_delay(&self, delay: std::time::Duration) {
        self.state.lock().rollup_read_delay = delay;
    }

    /// What was seen of concurrent commits so far.
    pub fn concurrency(&self) -> Concurrency {
        self.state.lock().observed
    }

    /// Quarantined records.
    pub fn quarantine(&self) -> Vec<PoisonRecord> {
        self.state.lock().quarantine.clone()
    }

    /// Commits that applied writes.
    pub fn commits(&self) -> u64 {
        self.state.lock().commits
    }

    /// Queues a failure for the coming rollup calls (in order).
    pub fn inject_rollup(&self, failure: RollupFailure) {
        self.state.lock().rollup_failures.push(failure);
    }

    /// The rollup of `post`, if any.
    pub fn rollup(&self, post: &str) -> Option<StoredRollup> {
        self.state.lock().rollups.get(post).cloned()
    }

    /// The milestones recorded with rollup writes: (post, milestone,
    /// likes), in the order recorded (each at most once).
    pub fn milestones(&self) -> Vec<(String, i64, i64)> {
        self.state.lock().milestones.clone()
    }

    /// Rollup writes applied so far.
    pub fn rollup_writes(&self) -> u64 {
        self.state.lock().rollup_writes
    }

    /// Every post's count (the sum of its shards).
    pub fn counts(&self) -> BTreeMap<String, i64> {
        self.state.lock().counters.clone()
    }

    fn fail(class: ErrorClass, message: &str) -> StoreError {
        StoreError {
            op: "Commit",
            code: match class {
                ErrorClass::Transient => Code::Aborted,
                ErrorClass::Content => Code::InvalidArgument,
            },
            message: message.into(),
            class,
            transaction: None,
        }
    }
}

impl CounterStore for MemoryStore {
    async fn commit(&self, batch: &Batch, _attempt: &Attempt) -> Result<CommitReport, StoreError> {
        let posts: HashSet<String> = batch.keys().map(|k| k.post_id.clone()).collect();
        let delay = {
            let mut state = self.state.lock();
            state.commits_in_flight += 1;
            state.observed.max_commits_in_flight = state
                .observed
                .max_commits_in_flight
                .max(state.commits_in_flight);
            let state = &mut *state;
            for post in &posts {
                let n = state.posts_in_flight.entry(post.clone()).or_default();
                if *n > 0 {
                    state.observed.post_overlaps += 1;
                }
                *n += 1;
            }
            for key in batch.keys() {
                if !state.memberships_in_flight.insert(key.clone()) {
                    state.observed.membership_overlaps += 1;
                }
            }
            state.delay
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let result = self.apply(batch);
        let mut state = self.state.lock();
        state.commits_in_flight -= 1;
        for post in &posts {
            if let Some(n) = state.posts_in_flight.get_mut(post) {
                *n -= 1;
            }
        }
        for key in batch.keys() {
            state.memberships_in_flight.remove(key);
        }
        result
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        Ok(self
            .state
            .lock()
            .counters
            .get(post_id)
            .copied()
            .unwrap_or(0))
    }

    async fn tombstones(&self) -> Result<TombstoneState, StoreError> {
        Ok(self.state.lock().tombstones.clone())
    }
}

impl MemoryStore {
    fn apply(&self, batch: &Batch) -> Result<CommitReport, StoreError> {
        let mut state = self.state.lock();
        let after_apply = match state.failures.first().cloned() {
            Some(InjectedFailure::Before(class)) => {
                state.failures.remove(0);
                return Err(Self::fail(class, "injected"));
            }
            Some(InjectedFailure::AfterApply) => {
                state.failures.remove(0);
                true
            }
            _ => false,
        };
        if batch
            .keys()
            .any(|k| state.reject_users.contains(&k.user_id))
        {
            return Err(Self::fail(ErrorClass::Content, "rejected user"));
        }
        if batch
            .poison
            .iter()
            .any(|p| state.reject_records.contains(&p.item.message_id))
        {
            return Err(Self::fail(ErrorClass::Content, "rejected record"));
        }
        if let Some(effects) = state.markers.get(&batch.id).copied() {
            return Ok(CommitReport {
                outcome: CommitOutcome::AlreadyCommitted,
                effects,
                increments: 0,
                rpcs: 1,
                known: KnownUse::Unused,
                changed: ChangedCounter::every_post_of(batch),
                committed_at: None,
                due_record: Some(DueRecord {
                    consumer: String::new(),
                    batch_id: batch.id.clone(),
                }),
            });
        }
        if let Some(checked) = batch.tombstone_generation {
            let found = state.tombstones.generation;
            if checked != found {
                return Err(StoreError::tombstones_changed(checked, found));
            }
        }
        let now = state.tick();
        let plan = batch.plan(&state.memberships);
        for planned in &plan.memberships {
            state
                .memberships
                .insert(planned.key.clone(), planned.membership());
        }
        for (post, delta) in &plan.deltas {
            *state.counters.entry(post.clone()).or_default() += delta;
            state.changed_at.insert(post.clone(), now);
        }
        state.markers.insert(batch.id.clone(), plan.effects);
        let changed: Vec<ChangedCounter> = (plan.deltas.keys())
            .map(|post_id| ChangedCounter {
                post_id: post_id.clone(),
                shard: Some(0),
            })
            .collect();
        let due_record = (!changed.is_empty()).then(|| {
            state
                .due
                .insert(batch.id.clone(), (changed.clone(), now, now));
            DueRecord {
                consumer: String::new(),
                batch_id: batch.id.clone(),
            }
        });
        state
            .quarantine
            .extend(batch.poison.iter().map(|p| p.item.clone()));
        state.commits += 1;
        if after_apply {
            return Err(Self::fail(
                ErrorClass::Transient,
                "applied, answered UNAVAILABLE",
            ));
        }
        Ok(CommitReport {
            outcome: CommitOutcome::Committed,
            effects: plan.effects,
            increments: plan.deltas.len(),
            rpcs: 2,
            known: KnownUse::Unused,
            changed,
            committed_at: Some(now),
            due_record,
        })
    }

    /// Takes the next queued rollup failure if it is `kind`.
    fn rollup_failure(&self, kinds: &[RollupFailure]) -> Option<RollupFailure> {
        let mut state = self.state.lock();
        let next = *state.rollup_failures.first()?;
        kinds
            .contains(&next)
            .then(|| state.rollup_failures.remove(0))
    }
}

impl State {
    /// Advances the clock; returns the new time.
    fn tick(&mut self) -> Micros {
        let started = *self.started.get_or_insert_with(tokio::time::Instant::now);
        let elapsed = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.now = (self.now + 1).max(elapsed);
        self.now
    }
}

fn unavailable(op: &'static str) -> StoreError {
    StoreError {
        op,
        code: Code::Unavailable,
        message: "injected".into(),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

impl RollupStore for MemoryStore {
    /// Its counters are one number per post.
    fn numbers_shards(&self) -> bool {
        false
    }

    async fn read_rollups(&self, keys: &[RollupKey<'_>]) -> Result<RollupSnapshot, StoreError> {
        if self.rollup_failure(&[RollupFailure::Read]).is_some() {
            return Err(unavailable("BatchGetDocuments"));
        }
        let delay = self.state.lock().rollup_read_delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut state = self.state.lock();
        let read_time = state.tick();
        let posts = keys
            .iter()
            .map(|k| PostRead {
                likes: state.counters.get(k.post_id).copied().unwrap_or(0),
                found_shards: u32::from(state.counters.contains_key(k.post_id)),
                stored: state.rollups.get(k.post_id).cloned(),
            })
            .collect();
        Ok(RollupSnapshot { read_time, posts })
    }

    async fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        let kinds = [RollupFailure::Write, RollupFailure::WriteAfterApply];
        let failure = self.rollup_failure(&kinds);
        if failure == Some(RollupFailure::Write) {
            return Err(unavailable("BatchWrite"));
        }
        let mut state = self.state.lock();
        let version = state.tick();
        let outcomes = writes
            .iter()
            .map(|w| {
                let stored = state.rollups.get(w.post_id);
                if stored.map(|s| &s.update_time) != w.previous.map(|p| &p.update_time) {
                    return WriteOutcome::Lost;
                }
                // As Firestore: the rollup keeps its highest milestone,
                // and a record is created only if absent.
                let highest = stored.and_then(|s| s.milestone);
                let rollup = StoredRollup {
                    likes: w.likes,
                    as_of: w.as_of,
                    shards: Some(w.shards),
                    update_time: Some(gcloud_sdk::prost_types::Timestamp {
                        seconds: version,
                        nanos: 0,
                    }),
                    milestone: w.milestones.iter().copied().max().max(highest),
                };
                for &n in w.milestones {
                    let known = state
                        .milestones
                        .iter()
                        .any(|m| m.0 == w.post_id && m.1 == n);
                    if !known {
                        state.milestones.push((w.post_id.to_string(), n, w.likes));
                    }
                }
                state.rollups.insert(w.post_id.to_string(), rollup);
                state.rollup_writes += 1;
                WriteOutcome::Written
            })
            .collect();
        match failure {
            Some(_) => Err(unavailable("BatchWrite")),
            None => Ok(outcomes),
        }
    }

    async fn changed_since(
        &self,
        _since: std::time::SystemTime,
    ) -> Result<Vec<ChangedPost>, StoreError> {
        let state = self.state.lock();
        Ok(state
            .changed_at
            .iter()
            .map(|(post, at)| ChangedPost {
                post_id: post.clone(),
                changed_at: Some(*at),
                shards: 1,
            })
            .collect())
    }

    async fn take_over_due(
        &self,
        older_than: std::time::Duration,
        _store_now: Micros,
        limit: usize,
    ) -> Result<Vec<TakenRecord>, StoreError> {
        if self
            .rollup_failure(&[RollupFailure::TakeOverHangs])
            .is_some()
        {
            std::future::pending::<()>().await;
        }
        let mut state = self.state.lock();
        let now = state.tick();
        let before = now - i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let mut taken = Vec::new();
        for (batch_id, (posts, committed_at, due_at)) in state.due.iter_mut() {
            if taken.len() >= limit {
                break;
            }
            if *due_at <= before {
                *due_at = now;
                taken.push(TakenRecord {
                    record: DueRecord {
                        consumer: String::new(),
                        batch_id: batch_id.clone(),
                    },
                    posts: posts.clone(),
                    committed_at: Some(*committed_at),
                });
            }
        }
        Ok(taken)
    }

    async fn clear_due(&self, records: &[DueRecord]) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        for record in records {
            state.due.remove(&record.batch_id);
        }
        Ok(())
    }
}

impl MemoryStore {
    /// The batches whose rollup due records are not cleared.
    pub fn due_records(&self) -> Vec<String> {
        self.state.lock().due.keys().cloned().collect()
    }
}
