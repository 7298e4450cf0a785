//! An in-memory [`CounterStore`] for unit tests, with failure injection.
//!
//! Invariant: same semantics as the Firestore store (one atomic apply per
//! batch, markers make a re-commit a no-op); never used in production.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Attempt, Code, CommitOutcome, CommitReport, CounterStore, ErrorClass, StoreError};
use crate::pipeline::batch::{Batch, Effects, Membership, MembershipKey};
use crate::pipeline::poison::PoisonRecord;

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
            });
        }
        let plan = batch.plan(&state.memberships);
        for planned in &plan.memberships {
            state
                .memberships
                .insert(planned.key.clone(), planned.membership());
        }
        for (post, delta) in &plan.deltas {
            *state.counters.entry(post.clone()).or_default() += delta;
        }
        state.markers.insert(batch.id.clone(), plan.effects);
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
        })
    }
}
