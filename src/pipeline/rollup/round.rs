//! One refresh cycle of the due posts, in rounds: one read of every due
//! post's shards and rollup at one read time, then one write call of every
//! rollup to write, each on its own condition; every mark is settled by
//! what its read or its write found.
//!
//! Invariants: a mark is settled done only when a rollup as of a time that
//! includes its changes is stored (written here, or found); a lost race, a
//! lost answer or a failed call leaves it marked; a peek (the rollup alone,
//! for posts over more than [`PEEK_ABOVE`] shards) settles only what a
//! full read would settle from the rollup alone.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::decide::{decide, Decision, PlannedWrite};
use super::marks::{Due, Settled};
use super::refresher::Refresher;
use crate::store::milestone::crossed;
use crate::store::rollup::{
    micros_of, RollupKey, RollupSnapshot, RollupStore, RollupWrite, WriteOutcome,
};
use crate::store::StoreError;

/// Posts over more counter shards than this are read without their
/// shards first ([`Refresher::peek`]).
pub const PEEK_ABOVE: u32 = 4;

/// The largest share of an interval added at random to a deferral.
const JITTER_SHARE: f64 = 0.25;

/// What one cycle did (for tests and the drain).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Posts refreshed in this cycle (read).
    pub posts: usize,
    /// Rollups written.
    pub written: usize,
    /// Store round trips.
    pub rpcs: usize,
}

/// Records on `progress` whether a store call was answered.
fn answered<T>(progress: &crate::telemetry::CommitProgress, result: &Result<T, StoreError>) {
    match result {
        Ok(_) => progress.committed(),
        Err(error) => progress.failed(error),
    }
}

/// [`answered`] for a write call: one whose every write failed (e.g. each
/// recording Commit unanswered) is no answer either.
fn written(
    progress: &crate::telemetry::CommitProgress,
    outcomes: &Result<Vec<WriteOutcome>, StoreError>,
) {
    match outcomes.as_deref() {
        Ok([WriteOutcome::Failed(error), rest @ ..])
            if rest.iter().all(|o| matches!(o, WriteOutcome::Failed(_))) =>
        {
            progress.failed(error);
        }
        _ => answered(progress, outcomes),
    }
}

/// A store answer the refresher cannot use.
fn internal(message: &str) -> StoreError {
    StoreError::internal("Rollups", message)
}

impl<S: RollupStore> Refresher<S> {
    /// Refreshes the due posts (all marked posts with `all`, the last
    /// refresh at shutdown, which also writes rollups younger than the
    /// interval).
    pub async fn cycle(&self, all: bool) -> CycleReport {
        let due = self.take_due(all);
        let mut report = CycleReport::default();
        let config = &self.config;
        // Small calls while the cycle is young; once it has taken half
        // its interval (a backlog), large ones, so it keeps up; the last
        // refresh at shutdown, large ones, to fit its deadline.
        let started = Instant::now();
        let mut rest = &due[..];
        while !rest.is_empty() {
            let small = !all && started.elapsed() < config.interval / 2;
            let (posts_per_read, writes_per_call) = if small {
                (config.small_posts_per_read, config.small_writes_per_call)
            } else {
                (config.posts_per_read, config.writes_per_call)
            };
            let (chunk, after) = rest.split_at(posts_per_read.clamp(1, rest.len()));
            self.refresh(chunk, !all, writes_per_call, &mut report)
                .await;
            rest = after;
        }
        self.stats.rollup_pending.set(self.marks.len() as u64);
        report
    }

    /// The marks due now (all of them with `all`), with the posts whose
    /// commits asked for more counter shards marked first.
    pub fn take_due(&self, all: bool) -> Vec<Due> {
        let now = Instant::now();
        if let Some(registry) = &self.registry {
            for (post, shards) in registry.take_wanted() {
                self.marks.want_shards(&post, shards, now);
            }
        }
        self.marks.take_due(now, all, usize::MAX)
    }

    /// One read of `due`, then the writes it calls for, at most
    /// `writes_per_call` in one.
    async fn refresh(
        &self,
        due: &[Due],
        rate_limited: bool,
        writes_per_call: usize,
        report: &mut CycleReport,
    ) {
        let peeked;
        let due = if rate_limited && self.store.numbers_shards() {
            peeked = self.peek(due, report).await;
            if peeked.is_empty() {
                return;
            }
            peeked.as_slice()
        } else {
            due
        };
        let keys: Vec<RollupKey<'_>> = due
            .iter()
            .map(|d| RollupKey {
                post_id: &d.post_id,
                shards: d.shards,
            })
            .collect();
        report.posts += due.len();
        report.rpcs += 1;
        self.stats.rollup_rpcs.add(1);
        // Whether the store answers the refresher (`/readyz`).
        let progress = &self.stats.rollup_progress;
        progress.begin();
        let read = self.store.read_rollups(&keys).await;
        answered(progress, &read);
        if let Ok(snapshot) = &read {
            let offset = snapshot.read_time - micros_of(SystemTime::now());
            if snapshot.read_time > 0 {
                self.store_offset
                    .store(offset, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let Some(planned) = self.after_read(due, read, rate_limited) else {
            progress.end();
            return;
        };
        for chunk in planned.chunks(writes_per_call.max(1)) {
            let writes: Vec<RollupWrite<'_>> = chunk.iter().map(PlannedWrite::write).collect();
            report.rpcs += 1;
            self.stats.rollup_rpcs.add(1);
            let outcomes = self.store.write_rollups(&writes).await;
            written(progress, &outcomes);
            report.written += self.after_write(chunk, outcomes);
        }
        progress.end();
    }

    /// Reads the rollups (not the counter shards) of the posts of `due`
    /// over more than [`PEEK_ABOVE`] shards, and settles those a rollup
    /// already shows (another replica refreshed them since their change)
    /// or that another replica refreshed within the interval (deferred);
    /// returns what still needs the full read. So replicas sharing a hot
    /// post read its shards about once per interval fleet-wide, not once
    /// each. A failed peek leaves everything to the full read.
    async fn peek(&self, due: &[Due], report: &mut CycleReport) -> Vec<Due> {
        let wide: Vec<&Due> = due.iter().filter(|d| d.shards > PEEK_ABOVE).collect();
        if wide.is_empty() {
            return due.to_vec();
        }
        let keys: Vec<RollupKey<'_>> = wide
            .iter()
            .map(|d| RollupKey {
                post_id: &d.post_id,
                shards: 0,
            })
            .collect();
        report.rpcs += 1;
        self.stats.rollup_rpcs.add(1);
        let snapshot = match self.store.read_rollups(&keys).await {
            Ok(snapshot) if snapshot.posts.len() == wide.len() => snapshot,
            _ => return due.to_vec(),
        };
        // The peek's answer is the decision a full read would reach on
        // the rollup alone: covered, or deferred to a younger rollup; any
        // other answer needs the shards.
        let now = Instant::now();
        let mut peeked = wide.iter().zip(&snapshot.posts);
        let mut full = Vec::with_capacity(due.len());
        for d in due {
            if d.shards <= PEEK_ABOVE {
                full.push(d.clone());
                continue;
            }
            let Some((_, read)) = peeked.next() else {
                full.push(d.clone());
                continue;
            };
            let interval = self.config.interval;
            let settled = match decide(d, read, snapshot.read_time, interval, true) {
                Decision::Covered => Settled::Done,
                Decision::Defer { after } => {
                    self.stats.rollup_deferred.add(1);
                    Settled::Later {
                        after: after + self.jitter(),
                    }
                }
                _ => {
                    full.push(d.clone());
                    continue;
                }
            };
            self.settle(d, Some(snapshot.read_time), settled, now);
        }
        full
    }

    /// A random extra wait of up to a quarter interval, so replicas that
    /// deferred to one hot post's rollup (after a peek) do not all come
    /// back at once.
    fn jitter(&self) -> Duration {
        self.config
            .interval
            .mul_f64(rand::random_range(0.0..JITTER_SHARE))
    }

    /// Settles every post of `due` whose read calls for no write (or whose
    /// read failed) and returns the writes the others call for; `None` when
    /// the read failed.
    pub fn after_read(
        &self,
        due: &[Due],
        read: Result<RollupSnapshot, StoreError>,
        rate_limited: bool,
    ) -> Option<Vec<PlannedWrite>> {
        let snapshot = match read {
            Ok(snapshot) if snapshot.posts.len() == due.len() => snapshot,
            Ok(_) => {
                self.failed(due.iter(), None, &internal("not one result per post read"));
                return None;
            }
            Err(error) => {
                self.failed(due.iter(), None, &error);
                return None;
            }
        };
        let now = Instant::now();
        let read_time = snapshot.read_time;
        let thresholds = self.config.milestones.current();
        let mut writes = Vec::new();
        for (due, read) in due.iter().zip(snapshot.posts) {
            if self.existing_only && read.stored.is_none() {
                self.settle(due, Some(read_time), Settled::Done, now);
                continue;
            }
            // A post without a rollup may have counter shards no rollup
            // registered (written by a build before rollups, while the
            // data format is below 2): its first refresh reads every shard
            // a post may have.
            let unregistered = !self.config.shards_registered
                && read.stored.is_none()
                && self.store.numbers_shards()
                && due.shards < self.config.max_shards;
            if unregistered {
                let shards = self.config.max_shards;
                self.settle(due, Some(read_time), Settled::Unregistered { shards }, now);
                continue;
            }
            let registered = read.stored.as_ref().and_then(|s| s.shards);
            if let (Some(registry), Some(shards)) = (&self.registry, registered) {
                registry.confirm(&due.post_id, shards);
            }
            let decision = decide(due, &read, read_time, self.config.interval, rate_limited);
            let settled = match decision {
                Decision::Covered => Settled::Done,
                Decision::Incomplete { shards } => Settled::Again { shards },
                Decision::Defer { after } => {
                    self.stats.rollup_deferred.add(1);
                    Settled::Later { after }
                }
                Decision::Write { likes, shards } => {
                    let stored = read.stored.as_ref();
                    let milestones = crossed(
                        &thresholds,
                        stored.map_or(0, |s| s.likes),
                        stored.and_then(|s| s.milestone),
                        likes,
                    );
                    writes.push(PlannedWrite {
                        milestones,
                        due: due.clone(),
                        likes,
                        as_of: read_time,
                        shards,
                        previous: read.stored,
                    });
                    continue;
                }
            };
            self.settle(due, Some(read_time), settled, now);
        }
        Some(writes)
    }

    /// Settles the posts of `planned` by how their writes ended; returns
    /// how many were written.
    pub fn after_write(
        &self,
        planned: &[PlannedWrite],
        outcomes: Result<Vec<WriteOutcome>, StoreError>,
    ) -> usize {
        let dues = planned.iter().map(|p| &p.due);
        let read_time = planned.first().map(|p| p.as_of);
        let outcomes = match outcomes {
            Ok(outcomes) if outcomes.len() == planned.len() => outcomes,
            Ok(_) => {
                self.failed(dues, read_time, &internal("not one outcome per write"));
                return 0;
            }
            Err(error) => {
                self.failed(dues, read_time, &error);
                return 0;
            }
        };
        let now = Instant::now();
        let mut written = 0;
        for (planned, outcome) in planned.iter().zip(outcomes) {
            let settled = match outcome {
                WriteOutcome::Written => {
                    written += 1;
                    let recorded = planned.milestones.len() as u64;
                    self.stats.milestones_recorded.add(recorded);
                    self.stats.rollup_refreshes.add(1);
                    if let Some(registry) = &self.registry {
                        registry.confirm(&planned.due.post_id, planned.shards);
                    }
                    Settled::Done
                }
                WriteOutcome::Lost => {
                    self.stats.rollup_skipped.add(1);
                    Settled::Again { shards: 0 }
                }
                WriteOutcome::Failed(error) => {
                    self.warn_failed(1, &error);
                    Settled::Failed
                }
            };
            self.settle(&planned.due, Some(planned.as_of), settled, now);
        }
        written
    }
}
