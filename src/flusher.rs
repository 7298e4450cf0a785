//! When to flush, and what a flush does: take a shard's buffer, commit it as
//! one batch (retrying transient failures, isolating permanent ones), then
//! hand the handles to the acker.
//!
//! Invariants: a shard has at most one batch in flight (its task commits
//! before it takes again), so batches in one process touch disjoint posts;
//! handles go to [`Acker::ack`] only after the store reports the batch
//! committed, and to [`Acker::nack`] when it gives up; at shutdown every
//! shard is drained before the flusher returns.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::acker::{AckHandle, Acker};
use crate::aggregator::Aggregator;
use crate::batch::{Batch, Effects, PoisonRecord};
use crate::event::to_json;
use crate::store::{CommitOutcome, CounterStore, StoreError};
use crate::telemetry::Stats;

/// Flush and retry settings.
#[derive(Clone, Debug)]
pub struct FlushConfig {
    /// Flush a shard once its oldest message is this old.
    pub flush_interval: Duration,
    /// Commit attempts per batch before giving up (nack).
    pub commit_max_attempts: u32,
    /// First retry backoff; doubles per attempt, with jitter.
    pub backoff_initial: Duration,
    /// Largest retry backoff.
    pub backoff_max: Duration,
}

impl Default for FlushConfig {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(100),
            commit_max_attempts: 8,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// The flush loop over every shard of one aggregator.
pub struct Flusher<S, H> {
    aggregator: Arc<Aggregator<H>>,
    store: Arc<S>,
    acker: Arc<Acker>,
    stats: Arc<Stats>,
    config: FlushConfig,
}

impl<S, H> Clone for Flusher<S, H> {
    fn clone(&self) -> Self {
        Self {
            aggregator: self.aggregator.clone(),
            store: self.store.clone(),
            acker: self.acker.clone(),
            stats: self.stats.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: CounterStore, H: AckHandle> Flusher<S, H> {
    /// A flusher over `aggregator` committing into `store`.
    pub fn new(
        aggregator: Arc<Aggregator<H>>,
        store: Arc<S>,
        acker: Arc<Acker>,
        stats: Arc<Stats>,
        config: FlushConfig,
    ) -> Self {
        Self {
            aggregator,
            store,
            acker,
            stats,
            config,
        }
    }

    /// Runs one task per shard until `stop` turns true, then drains every shard.
    pub async fn run(self, stop: watch::Receiver<bool>) {
        let mut tasks = tokio::task::JoinSet::new();
        for shard in 0..self.aggregator.shard_count() {
            let flusher = self.clone();
            let stop = stop.clone();
            tasks.spawn(async move { flusher.run_shard(shard, stop).await });
        }
        while tasks.join_next().await.is_some() {}
        self.acker.drain().await;
    }

    async fn run_shard(&self, shard: usize, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                break;
            }
            let due = self
                .aggregator
                .oldest(shard)
                .map(|oldest| oldest + self.config.flush_interval);
            let ready = self.aggregator.is_full(shard) || due.is_some_and(|d| d <= Instant::now());
            if ready {
                self.flush(shard).await;
                continue;
            }
            let sleep_until = due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                _ = self.aggregator.woken(shard) => {}
                _ = tokio::time::sleep_until(sleep_until) => {}
                changed = stop.changed() => {
                    // A dropped sender means the owner is gone: stop too.
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        while self.aggregator.len(shard) > 0 {
            self.flush(shard).await;
        }
    }

    /// Takes one batch from `shard`, commits it, acks or nacks its messages.
    pub async fn flush(&self, shard: usize) {
        let taken = self.aggregator.take(shard);
        if taken.is_empty() {
            return;
        }
        let (messages, bytes) = (taken.len() as u64, taken.bytes as u64);
        self.stats.batch_size.record(messages);
        let batch = Batch::new(taken.events, taken.poison);
        let started = Instant::now();
        let result = self.commit_isolating(batch).await;
        self.stats.commit_duration.record(started.elapsed());
        match result {
            Ok(effects) => {
                self.stats.record_effects(effects);
                self.stats.publish_to_commit.record_since(&taken.published);
                self.acker.ack(taken.handles);
            }
            Err(error) => {
                self.stats.batches_failed.add(1);
                tracing::warn!(%error, messages = taken.handles.len(), "giving up on batch; nacking for redelivery");
                self.acker.nack(taken.handles);
            }
        }
        self.stats.in_flight.dec(messages);
        self.stats.bytes_in_flight.dec(bytes);
    }

    /// Commits `batch`; on a permanent rejection, splits it until the
    /// offending events are alone, quarantines those and commits the rest.
    async fn commit_isolating(&self, batch: Batch) -> Result<Effects, StoreError> {
        let mut total = Effects::default();
        let mut work = vec![batch];
        while let Some(batch) = work.pop() {
            match self.commit_with_retry(&batch).await {
                Ok(effects) => total.add(effects),
                Err(error) if error.is_retryable() => return Err(error),
                Err(error) => {
                    if batch.events.len() > 1 {
                        let (a, b) = batch.split();
                        work.push(a);
                        work.push(b);
                    } else if batch.event_count() > 0 {
                        work.push(quarantine_events(batch, &error));
                        self.stats.isolated.add(1);
                    } else {
                        return Err(error);
                    }
                }
            }
        }
        Ok(total)
    }

    async fn commit_with_retry(&self, batch: &Batch) -> Result<Effects, StoreError> {
        let mut attempt = 1;
        loop {
            let result = self.store.commit(batch).await;
            match result {
                Ok(report) => {
                    self.stats.store_rpcs.add(u64::from(report.rpcs));
                    self.stats.batches.add(1);
                    if report.outcome == CommitOutcome::AlreadyCommitted {
                        self.stats.already_committed.add(1);
                    }
                    self.stats.increments.add(report.increments as u64);
                    tracing::debug!(
                        batch = %batch.id,
                        messages = batch.message_count,
                        applied = report.effects.applied,
                        duplicates = report.effects.duplicates,
                        stale = report.effects.stale,
                        poison = report.effects.poison,
                        already = report.outcome == CommitOutcome::AlreadyCommitted,
                        attempt,
                        "batch committed"
                    );
                    // An attempt that committed but was answered with an error
                    // counted nothing; its effects come back from the marker.
                    return Ok(report.effects);
                }
                Err(error) if error.is_retryable() && attempt < self.config.commit_max_attempts => {
                    self.stats.commit_retries.add(1);
                    tracing::debug!(%error, attempt, "commit failed; retrying");
                    tokio::time::sleep(backoff(&self.config, attempt)).await;
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Exponential backoff with jitter: `initial * 2^(attempt-1)`, capped, times 0.5..1.0.
pub fn backoff(config: &FlushConfig, attempt: u32) -> Duration {
    let exp = config
        .backoff_initial
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    exp.min(config.backoff_max)
        .mul_f64(rand::random_range(0.5..=1.0))
}

/// A batch of the one remaining key's events turned into quarantine records.
fn quarantine_events(batch: Batch, error: &StoreError) -> Batch {
    let poison: Vec<PoisonRecord> = batch
        .events
        .into_values()
        .flatten()
        .map(|event| {
            PoisonRecord::new(
                format!("event-{}", event.event_id()),
                format!("rejected by the store: {error}"),
                to_json(&event).as_bytes(),
                Default::default(),
            )
        })
        .collect();
    Batch::new(Vec::new(), poison)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acker::Confirmation;
    use crate::aggregator::{Item, Pending};
    use crate::event::{LikeEvent, LikeKind, Version};
    use crate::store::memory::{InjectedFailure, MemoryStore};
    use crate::store::ErrorClass;
    use parking_lot::Mutex;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fate {
        Acked,
        Nacked,
    }

    #[derive(Debug)]
    struct TestHandle(u32, Arc<Mutex<Vec<(u32, Fate)>>>);

    impl AckHandle for TestHandle {
        fn ack(self) -> Option<Confirmation> {
            self.1.lock().push((self.0, Fate::Acked));
            None
        }
        fn nack(self) {
            self.1.lock().push((self.0, Fate::Nacked));
        }
    }

    struct Rig {
        agg: Arc<Aggregator<TestHandle>>,
        store: Arc<MemoryStore>,
        flusher: Flusher<MemoryStore, TestHandle>,
        fates: Arc<Mutex<Vec<(u32, Fate)>>>,
        next: u32,
    }

    impl Rig {
        fn new() -> Self {
            let agg = Arc::new(Aggregator::new(1, 100));
            let store = Arc::new(MemoryStore::default());
            let stats = Arc::new(Stats::default());
            let config = FlushConfig {
                backoff_initial: Duration::from_millis(1),
                backoff_max: Duration::from_millis(2),
                commit_max_attempts: 3,
                ..FlushConfig::default()
            };
            let flusher = Flusher::new(
                agg.clone(),
                store.clone(),
                Arc::new(Acker::new(stats.clone())),
                stats,
                config,
            );
            Self {
                agg,
                store,
                flusher,
                fates: Default::default(),
                next: 0,
            }
        }

        fn like(&mut self, post: &str, user: &str, seq: i64) -> u32 {
            let event = LikeEvent {
                kind: LikeKind::Added,
                post_id: post.into(),
                user_id: user.into(),
                version: Version {
                    seq,
                    occurred_at_micros: 0,
                    event_id: format!("{user}-{seq}"),
                },
                producer: None,
            };
            self.next += 1;
            let handle = TestHandle(self.next, self.fates.clone());
            self.agg.add(Pending {
                handle,
                item: Item::Event(event),
                bytes: 10,
                published: None,
            });
            self.next
        }
    }

    #[tokio::test]
    async fn acks_only_after_commit() {
        let mut rig = Rig::new();
        rig.like("p", "u1", 1);
        rig.like("p", "u2", 1);
        assert!(rig.fates.lock().is_empty(), "nothing acked before a flush");
        rig.flusher.flush(0).await;
        assert_eq!(rig.store.commits(), 1);
        assert_eq!(rig.fates.lock().len(), 2);
        assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
        assert_eq!(rig.store.count("p").await.unwrap(), 2);
    }

    #[tokio::test]
    async fn transient_failures_are_retried_then_acked() {
        let mut rig = Rig::new();
        rig.like("p", "u1", 1);
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
        rig.store.inject(InjectedFailure::AfterApply);
        rig.flusher.flush(0).await;
        assert_eq!(
            rig.store.count("p").await.unwrap(),
            1,
            "applied once despite the unknown outcome"
        );
        assert_eq!(rig.fates.lock().as_slice(), &[(1, Fate::Acked)]);
    }

    #[tokio::test]
    async fn giving_up_nacks_and_counts_nothing() {
        let mut rig = Rig::new();
        rig.like("p", "u1", 1);
        for _ in 0..3 {
            rig.store
                .inject(InjectedFailure::Before(ErrorClass::Transient));
        }
        rig.flusher.flush(0).await;
        assert_eq!(rig.store.count("p").await.unwrap(), 0);
        assert_eq!(rig.fates.lock().as_slice(), &[(1, Fate::Nacked)]);
    }

    #[tokio::test]
    async fn permanent_error_is_isolated_and_the_rest_commits() {
        let mut rig = Rig::new();
        for i in 0..7 {
            rig.like("p", &format!("u{i}"), 1);
        }
        rig.like("p", "bad", 1);
        rig.store.inject(InjectedFailure::RejectUser("bad".into()));
        rig.flusher.flush(0).await;
        assert_eq!(rig.store.count("p").await.unwrap(), 7);
        let quarantine = rig.store.quarantine();
        assert_eq!(quarantine.len(), 1);
        assert!(quarantine[0].reason.contains("rejected by the store"));
        assert_eq!(rig.fates.lock().len(), 8);
        assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
    }

    #[tokio::test(start_paused = true)]
    async fn shard_flushes_when_oldest_reaches_interval_and_drains_at_stop() {
        let mut rig = Rig::new();
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(rig.flusher.clone().run(stop));
        rig.like("p", "u1", 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rig.fates.lock().is_empty(), "not due yet");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(rig.fates.lock().len(), 1, "flushed at the interval");
        rig.like("p", "u2", 1);
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(rig.fates.lock().len(), 2, "drained at shutdown");
        assert_eq!(rig.store.count("p").await.unwrap(), 2);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let config = FlushConfig::default();
        assert!(backoff(&config, 1) <= config.backoff_initial);
        assert!(backoff(&config, 30) <= config.backoff_max);
        assert!(backoff(&config, 4) >= config.backoff_initial * 4);
    }
}
