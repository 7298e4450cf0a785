//! When to flush, and what a flush does: take one batch from the shards
//! that have none in flight, commit it as one transaction (retrying
//! transient failures, isolating permanent ones), then hand the handles to
//! the acker.
//!
//! The flush size adapts to the store (group commit): a batch is taken when
//! a commit slot is free and (a) the store is idle and the oldest message
//! has waited `flush_min_wait`, or (b) with `k` of the `n` commit slots
//! busy, `(k/n)²` of a full batch is buffered (a sixteenth with 1 of 4
//! busy, over half with 3 of 4), or (c) the oldest message has waited
//! `flush_interval`, or (d) the service stops. While commits are in flight
//! messages accumulate, so batches grow when commits are slow or queued and
//! stay small (low latency) when they are fast and slots are free; under a
//! backlog every batch is full. The rate of commits, and so of writes to
//! any one counter, is at most `max_commits_in_flight / commit latency`
//! whatever the event rate.
//!
//! Invariants: a shard is in at most one batch in flight (shards are marked
//! busy from take to commit), so batches in flight in one process touch
//! disjoint memberships (one post may be in several: each increments its
//! own counter shard, [`crate::store::counter_shards`]); handles go to
//! [`Acker::ack`] only after the store reports the batch committed, and to
//! [`Acker::nack`] when it gives up; at shutdown every shard is drained and
//! every commit finished before the flusher returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::event::to_json;
use crate::pipeline::acker::{AckHandle, Acker};
use crate::pipeline::aggregator::{Aggregator, FreeView, Taken};
use crate::pipeline::batch::{Batch, Effects, MessageIndex, PoisonRecord, Tagged};
use crate::store::{Attempt, CommitOutcome, CounterStore, Deadline, StoreError};
use crate::telemetry::Stats;

/// Flush and retry settings.
#[derive(Clone, Debug)]
pub struct FlushConfig {
    /// Flush once the oldest buffered message is this old, whatever else.
    pub flush_interval: Duration,
    /// With no commit in flight, flush once the oldest message is this old.
    pub flush_min_wait: Duration,
    /// Batches being committed at once, at most.
    pub max_commits_in_flight: usize,
    /// Commit attempts per batch before giving up (nack).
    pub commit_max_attempts: u32,
    /// First retry backoff; doubles per attempt, with jitter.
    pub backoff_initial: Duration,
    /// Largest retry backoff.
    pub backoff_max: Duration,
    /// A batch that met this many ABORTED attempts in a row (and nothing
    /// else) is split, so the events that can commit do and only the part
    /// on the contended documents keeps backing off (e.g. documents a
    /// killed replica's open transaction holds until it expires).
    pub split_after_aborts: u32,
    /// After the stop signal, commits may take this long: then no attempt
    /// is started or retried, open transactions are rolled back and what
    /// did not commit is nacked.
    pub shutdown_deadline: Duration,
}

impl Default for FlushConfig {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(100),
            flush_min_wait: Duration::from_millis(5),
            max_commits_in_flight: 4,
            commit_max_attempts: 8,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_secs(2),
            split_after_aborts: 3,
            shutdown_deadline: Duration::from_secs(8),
        }
    }
}

/// What the flush loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take a batch now.
    Flush,
    /// Wait for a wake-up, a commit to finish, or this deadline.
    WaitUntil(Option<Instant>),
}

/// The flush rule (see the module docs), pure so it can be tested alone.
pub fn decide(
    config: &FlushConfig,
    free: FreeView,
    in_flight: usize,
    stopping: bool,
    now: Instant,
) -> Decision {
    let Some(oldest) = free.oldest else {
        return Decision::WaitUntil(None);
    };
    if free.messages == 0 || in_flight >= config.max_commits_in_flight.max(1) {
        return Decision::WaitUntil(None);
    }
    let overdue = oldest + config.flush_interval;
    let eager = oldest + config.flush_min_wait.min(config.flush_interval);
    // (b): the busier the slots, the larger the batch worth a slot. Squared:
    // side by side at 22,000 events/s, k/n gave p99 119-127 ms and (k/n)²
    // 94-110 ms, with the same backlog throughput (docs/BENCHMARKS.md).
    let slots = config.max_commits_in_flight.max(1);
    let filled = in_flight > 0
        && free.messages.saturating_mul(slots * slots)
            >= free.batch_events.saturating_mul(in_flight * in_flight);
    if stopping || free.full || filled || overdue <= now || (in_flight == 0 && eager <= now) {
        return Decision::Flush;
    }
    Decision::WaitUntil(Some(if in_flight == 0 { eager } else { overdue }))
}

/// The flush loop over every shard of one aggregator.
pub struct Flusher<S, H> {
    aggregator: Arc<Aggregator<H>>,
    store: Arc<S>,
    acker: Arc<Acker>,
    stats: Arc<Stats>,
    config: FlushConfig,
    /// Set when the stop signal arrives: when commits must have ended.
    deadline: Deadline,
    set_deadline: Arc<watch::Sender<Option<Instant>>>,
}

impl<S, H> Clone for Flusher<S, H> {
    fn clone(&self) -> Self {
        Self {
            aggregator: self.aggregator.clone(),
            store: self.store.clone(),
            acker: self.acker.clone(),
            stats: self.stats.clone(),
            config: self.config.clone(),
            deadline: self.deadline.clone(),
            set_deadline: self.set_deadline.clone(),
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
        let (set_deadline, deadline) = Deadline::channel();
        Self {
            aggregator,
            store,
            acker,
            stats,
            config,
            deadline,
            set_deadline: Arc::new(set_deadline),
        }
    }

    /// When commits must have ended, once stopping.
    fn deadline(&self) -> Option<Instant> {
        self.deadline.get()
    }

    /// Flushes by [`decide`] until `stop` turns true, then drains every
    /// shard and waits for every commit.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut busy = vec![false; self.aggregator.shard_count()];
        let mut in_flight = tokio::task::JoinSet::new();
        let mut held: HashMap<tokio::task::Id, Vec<usize>> = HashMap::new();
        let mut stopping = false;
        loop {
            stopping |= *stop.borrow();
            let now = Instant::now();
            if stopping && self.deadline().is_none() {
                self.set_deadline
                    .send_replace(Some(now + self.config.shutdown_deadline));
            }
            let free = self.aggregator.free_view(&busy);
            let deadline = match decide(&self.config, free, in_flight.len(), stopping, now) {
                Decision::Flush => {
                    let (taken, shards) = self.aggregator.take_merged(&busy, now);
                    if !taken.is_empty() {
                        for &shard in &shards {
                            busy[shard] = true;
                        }
                        let flusher = self.clone();
                        let task =
                            in_flight.spawn(async move { flusher.commit_taken(taken).await });
                        held.insert(task.id(), shards);
                        continue;
                    }
                    None
                }
                Decision::WaitUntil(deadline) => deadline,
            };
            if stopping && in_flight.is_empty() && free.messages == 0 {
                break;
            }
            let sleep_until = deadline.unwrap_or_else(|| now + Duration::from_secs(3600));
            tokio::select! {
                _ = self.aggregator.woken() => {}
                Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                    let id = match done {
                        Ok((id, ())) => id,
                        Err(error) => {
                            tracing::error!(%error, "commit task failed; its messages are redelivered");
                            error.id()
                        }
                    };
                    for shard in held.remove(&id).unwrap_or_default() {
                        busy[shard] = false;
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => {}
                changed = stop.changed(), if !stopping => {
                    // A dropped sender means the owner is gone: stop too.
                    if changed.is_err() {
                        stopping = true;
                    }
                }
            }
        }
        self.acker.drain().await;
    }

    /// Takes one batch from `shard` alone and commits it (tests and tools).
    pub async fn flush(&self, shard: usize) {
        let taken = self.aggregator.take(shard);
        if !taken.is_empty() {
            self.commit_taken(taken).await;
        }
    }

    /// Commits what was taken; acks the messages whose effects or
    /// quarantine records committed and nacks the rest.
    async fn commit_taken(&self, taken: Taken<H>) {
        let (messages, bytes) = (taken.len() as u64, taken.bytes as u64);
        self.stats.batch_size.record(messages);
        let Taken {
            events,
            poison,
            handles,
            published,
            ..
        } = taken;
        let batch = Batch::of_messages(events, poison);
        let started = Instant::now();
        let settled = self.commit_isolating(batch).await;
        self.stats.commit_duration.record(started.elapsed());
        self.stats.record_effects(settled.effects.into());
        if let Some(error) = &settled.gave_up {
            self.stats.batches_failed.add(1);
            tracing::warn!(%error, messages = settled.nack.len(), "giving up on batch; nacking for redelivery");
        }
        // Out of the gauges before the handles go: acking or nacking one
        // releases its place in the source's cap at once, and the source
        // may take a new message before this task runs again.
        self.stats.in_flight.dec(messages);
        self.stats.bytes_in_flight.dec(bytes);
        if settled.nack.is_empty() {
            self.stats.publish_to_commit.record_since(&published);
            self.acker.ack(handles);
        } else {
            let mut nack = vec![false; handles.len()];
            for &message in &settled.nack {
                if let Some(slot) = nack.get_mut(message as usize) {
                    *slot = true;
                }
            }
            let (mut to_ack, mut to_nack) = (Vec::new(), Vec::new());
            for (handle, nack) in handles.into_iter().zip(nack) {
                if nack {
                    to_nack.push(handle);
                } else {
                    to_ack.push(handle);
                }
            }
            self.acker.ack(to_ack);
            self.acker.nack(to_nack);
        }
    }

    /// Commits `batch`, settling each of its messages.
    ///
    /// A failure that proves nothing about the content (after its retries)
    /// nacks the part that met it and every part not yet committed. A
    /// refusal of the content splits the part ([`Batch::split`]: poison
    /// apart from events first, then halves) until one item is alone: a
    /// lone event is quarantined (its record committed on its own); a lone
    /// quarantine record the store refuses is nacked, alone, for the
    /// subscription's dead-letter policy. Nothing is acked without its
    /// effect or its record, and a refused record never takes a valid
    /// event with it.
    async fn commit_isolating(&self, batch: Batch) -> Settlement {
        let mut settled = Settlement::default();
        let mut work = vec![batch];
        while let Some(batch) = work.pop() {
            let (error, contended) = match self.commit_with_retry(&batch).await {
                Ok(effects) => {
                    settled.effects.add(effects);
                    log_quarantined(&batch.poison);
                    continue;
                }
                Err(Failure::Contended(error)) => (error, true),
                Err(Failure::Other(error)) => (error, false),
            };
            if contended {
                // Only ABORTED met (the store applied nothing): the parts
                // are new batches. The one on the contended documents keeps
                // backing off; the others commit now.
                if let Ok((older, newer)) = batch.split() {
                    self.stats.contention_splits.add(1);
                    tracing::debug!(%error, "batch keeps meeting contention; splitting it");
                    work.push(newer);
                    work.push(older);
                }
                continue;
            }
            if !error.proves_content() {
                settled.nack.extend(batch.messages());
                for rest in work.drain(..) {
                    settled.nack.extend(rest.messages());
                }
                settled.gave_up = Some(error);
                break;
            }
            match batch.split() {
                Ok((older, newer)) => {
                    work.push(newer);
                    work.push(older);
                }
                Err(culprit) if culprit.event_count() > 0 => {
                    self.stats.isolated.add(culprit.event_count() as u64);
                    for event in culprit.events.values().flatten() {
                        tracing::warn!(
                            event_id = event.item.event_id(),
                            %error,
                            "the store refused an event; quarantining it"
                        );
                    }
                    work.push(quarantine_events(culprit, &error));
                }
                Err(culprit) => {
                    self.stats
                        .quarantine_refused
                        .add(culprit.poison.len() as u64);
                    for record in &culprit.poison {
                        tracing::error!(
                            message_id = %record.item.message_id,
                            reason = %record.item.reason,
                            %error,
                            "the store refused a quarantine record; nacking the message (the subscription's dead-letter policy takes it)"
                        );
                    }
                    settled.nack.extend(culprit.messages());
                }
            }
        }
        settled
    }

    /// Commits `batch`, retrying what proves nothing about its content,
    /// with backoff. Returns the error early, for the caller to split the
    /// batch, after `split_after_aborts` attempts that all met contention;
    /// and starts no attempt past the shutdown deadline.
    async fn commit_with_retry(&self, batch: &Batch) -> Result<Effects, Failure> {
        let mut attempt = 1;
        let mut this = Attempt::first();
        let mut only_aborted = true;
        loop {
            let result = self
                .store
                .commit(batch, &this.clone().until(self.deadline.clone()))
                .await;
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
                    only_aborted &= error.is_contention();
                    let pause = backoff(&self.config, attempt);
                    if self
                        .deadline()
                        .is_some_and(|deadline| Instant::now() + pause >= deadline)
                    {
                        return Err(Failure::Other(error));
                    }
                    if only_aborted
                        && attempt >= self.config.split_after_aborts
                        && batch.can_split()
                    {
                        return Err(Failure::Contended(error));
                    }
                    self.stats.commit_retries.add(1);
                    tracing::debug!(%error, attempt, "commit failed; retrying");
                    tokio::time::sleep(pause).await;
                    this = Attempt::after(&error);
                    attempt += 1;
                }
                Err(error) => return Err(Failure::Other(error)),
            }
        }
    }
}

/// Why [`Flusher::commit_with_retry`] gave up on a batch.
#[derive(Debug)]
enum Failure {
    /// Every attempt met contention (ABORTED: nothing was applied) and the
    /// batch can be split: its parts may commit where it could not.
    Contended(StoreError),
    /// Anything else (the last error).
    Other(StoreError),
}

/// Exponential backoff with jitter: `initial * 2^(attempt-1)`, capped, times 0.5..1.0.
pub fn backoff(config: &FlushConfig, attempt: u32) -> Duration {
    let exp = config
        .backoff_initial
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    exp.min(config.backoff_max)
        .mul_f64(rand::random_range(0.5..=1.0))
}

/// How the messages of one take ended.
#[derive(Debug, Default)]
struct Settlement {
    /// The effects of every part that committed.
    effects: Effects,
    /// Messages to nack; every other message of the take is acked.
    nack: Vec<MessageIndex>,
    /// The failure that made the flusher give up on a part, if any.
    gave_up: Option<StoreError>,
}

/// Logs each quarantine record of a committed part at WARN.
fn log_quarantined(poison: &[Tagged<PoisonRecord>]) {
    for record in poison {
        tracing::warn!(
            message_id = %record.item.message_id,
            reason = %record.item.reason,
            data_bytes = record.item.data_len,
            "message quarantined"
        );
    }
}

/// The refused events of one key turned into quarantine records, each
/// keeping its message.
fn quarantine_events(batch: Batch, error: &StoreError) -> Batch {
    let poison: Vec<Tagged<PoisonRecord>> = batch
        .events
        .into_values()
        .flatten()
        .map(|event| Tagged {
            item: PoisonRecord::new(
                format!("event-{}", event.item.event_id()),
                format!("rejected by the store: {error}"),
                to_json(&event.item).as_bytes(),
                Default::default(),
            ),
            message: event.message,
        })
        .collect();
    Batch::of_messages(Vec::new(), poison)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{LikeEvent, LikeKind, Version};
    use crate::pipeline::acker::Confirmation;
    use crate::pipeline::aggregator::{Item, Pending};
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
            Self::with(1, 100, FlushConfig::default())
        }

        fn with(shards: usize, max_batch_events: usize, config: FlushConfig) -> Self {
            let agg = Arc::new(Aggregator::new(shards, max_batch_events));
            let store = Arc::new(MemoryStore::default());
            let stats = Arc::new(Stats::default());
            let config = FlushConfig {
                backoff_initial: Duration::from_millis(1),
                backoff_max: Duration::from_millis(2),
                commit_max_attempts: 3,
                ..config
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
            let event = LikeEvent::new(
                LikeKind::Added,
                post,
                user,
                &Version {
                    seq,
                    occurred_at_micros: 0,
                    event_id: format!("{user}-{seq}"),
                },
                None,
            )
            .expect("valid test event");
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

        /// Buffers a poison message with id `m{n}`; returns its handle id.
        fn poison(&mut self) -> u32 {
            self.next += 1;
            let record = PoisonRecord::new(
                format!("m{}", self.next),
                "bad".into(),
                b"x",
                Default::default(),
            );
            let handle = TestHandle(self.next, self.fates.clone());
            self.agg.add(Pending {
                handle,
                item: Item::Poison(Box::new(record)),
                bytes: 1,
                published: None,
            });
            self.next
        }

        fn fate(&self, handle: u32) -> Vec<Fate> {
            let fates = self.fates.lock();
            fates
                .iter()
                .filter(|(h, _)| *h == handle)
                .map(|(_, f)| *f)
                .collect()
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

    #[tokio::test]
    async fn a_refused_quarantine_record_nacks_its_message_alone_and_every_valid_event_counts() {
        let mut rig = Rig::new();
        let mut valid = Vec::new();
        for i in 0..20 {
            valid.push(rig.like("p", &format!("u{i}"), 1));
        }
        let bad = [rig.poison(), rig.poison()];
        let good = rig.poison();
        for handle in bad {
            rig.store
                .inject(InjectedFailure::RejectRecord(format!("m{handle}")));
        }
        rig.flusher.flush(0).await;
        assert_eq!(
            rig.store.count("p").await.unwrap(),
            20,
            "no valid like lost"
        );
        for handle in valid.into_iter().chain([good]) {
            assert_eq!(rig.fate(handle), [Fate::Acked], "handle {handle}");
        }
        for handle in bad {
            assert_eq!(rig.fate(handle), [Fate::Nacked], "handle {handle}");
        }
        let quarantine = rig.store.quarantine();
        assert_eq!(quarantine.len(), 1, "{quarantine:?}");
        assert_eq!(quarantine[0].message_id, format!("m{good}"));
        assert_eq!(rig.flusher.stats.quarantine_refused.get(), 2);
        assert_eq!(rig.flusher.stats.isolated.get(), 0);
    }

    #[tokio::test]
    async fn a_refused_event_whose_record_is_refused_too_is_nacked_alone() {
        let mut rig = Rig::new();
        let good = rig.like("p", "u1", 1);
        let bad = rig.like("p", "bad", 1);
        rig.store.inject(InjectedFailure::RejectUser("bad".into()));
        rig.store
            .inject(InjectedFailure::RejectRecord("event-bad-1".into()));
        rig.flusher.flush(0).await;
        assert_eq!(rig.store.count("p").await.unwrap(), 1);
        assert_eq!(rig.fate(good), [Fate::Acked]);
        assert_eq!(rig.fate(bad), [Fate::Nacked]);
        assert!(rig.store.quarantine().is_empty());
    }

    #[tokio::test]
    async fn a_failure_that_proves_nothing_nacks_and_never_quarantines() {
        let mut rig = Rig::new();
        rig.like("p", "u1", 1);
        rig.poison();
        for _ in 0..3 {
            rig.store
                .inject(InjectedFailure::Before(ErrorClass::Transient));
        }
        rig.flusher.flush(0).await;
        assert!(rig.store.quarantine().is_empty());
        assert_eq!(rig.flusher.stats.isolated.get(), 0);
        assert_eq!(rig.fate(1), [Fate::Nacked]);
        assert_eq!(rig.fate(2), [Fate::Nacked]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_event_flushes_after_the_min_wait_and_the_rest_drains_at_stop() {
        let mut rig = Rig::new();
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(rig.flusher.clone().run(stop));
        rig.like("p", "u1", 1);
        tokio::time::sleep(Duration::from_millis(3)).await;
        assert!(rig.fates.lock().is_empty(), "not due yet");
        tokio::time::sleep(Duration::from_millis(3)).await;
        assert_eq!(rig.fates.lock().len(), 1, "flushed after the min wait");
        rig.like("p", "u2", 1);
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(rig.fates.lock().len(), 2, "drained at shutdown");
        assert_eq!(rig.store.count("p").await.unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn with_min_wait_equal_to_the_interval_a_shard_flushes_at_the_interval() {
        let mut rig = Rig::with(
            1,
            1000,
            FlushConfig {
                flush_min_wait: Duration::from_millis(100),
                ..FlushConfig::default()
            },
        );
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(rig.flusher.clone().run(stop));
        rig.like("p", "u1", 1);
        tokio::time::sleep(Duration::from_millis(95)).await;
        assert!(rig.fates.lock().is_empty(), "not due yet");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(rig.fates.lock().len(), 1, "flushed at the interval");
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }

    /// What free shards holding `messages` look like to an aggregator
    /// whose batches hold at most 1000.
    fn view(messages: usize, oldest: Instant) -> FreeView {
        FreeView {
            messages,
            oldest: Some(oldest),
            full: messages >= 1000,
            batch_events: 1000,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_store_flushes_after_the_min_wait_busy_slots_need_their_share_of_a_batch() {
        let config = FlushConfig::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(
            decide(&config, view(3, t0), 0, false, t0),
            Decision::WaitUntil(Some(t0 + config.flush_min_wait))
        );
        assert_eq!(
            decide(&config, view(3, t0), 0, false, t0 + ms(5)),
            Decision::Flush
        );
        assert_eq!(
            decide(&config, view(3, t0), 1, false, t0 + ms(5)),
            Decision::WaitUntil(Some(t0 + config.flush_interval)),
            "a commit in flight: let the batch grow"
        );
        assert_eq!(
            decide(&config, view(3, t0), 1, false, t0 + ms(100)),
            Decision::Flush
        );
        // Adaptive size, 4 slots: (busy/4)² of a 1,000-event batch.
        for (busy, enough) in [(1, 63), (2, 250), (3, 563)] {
            assert_eq!(
                decide(&config, view(enough, t0), busy, false, t0),
                Decision::Flush,
                "{busy} busy, {enough} buffered"
            );
            assert_eq!(
                decide(&config, view(enough - 1, t0), busy, false, t0),
                Decision::WaitUntil(Some(t0 + config.flush_interval)),
                "{busy} busy, {} buffered",
                enough - 1
            );
        }
        assert_eq!(
            decide(&config, view(1000, t0), 1, false, t0),
            Decision::Flush,
            "a full batch goes at once"
        );
        assert_eq!(
            decide(&config, view(5000, t0), 4, false, t0 + ms(500)),
            Decision::WaitUntil(None),
            "no free commit slot"
        );
        assert_eq!(
            decide(&config, view(1, t0), 1, true, t0),
            Decision::Flush,
            "stopping flushes whatever is buffered"
        );
        assert_eq!(
            decide(&config, FreeView::default(), 0, true, t0),
            Decision::WaitUntil(None)
        );
    }

    /// Feeds `posts` round robin, `per_milli` likes per millisecond, `total` in all.
    async fn feed(rig: &mut Rig, posts: usize, per_milli: usize, total: usize) {
        for i in 0..total {
            rig.like(&format!("p{}", i % posts), &format!("u{i}"), 1);
            if (i + 1) % per_milli == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn batches_grow_while_commits_are_in_flight() {
        let mut rig = Rig::with(
            8,
            1000,
            FlushConfig {
                max_commits_in_flight: 1,
                ..FlushConfig::default()
            },
        );
        rig.store.set_delay(Duration::from_millis(50));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(rig.flusher.clone().run(stop));
        feed(&mut rig, 20, 1, 1000).await;
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        let commits = rig.store.commits();
        // One commit at a time of 50 ms: the first event waits 5 ms, then
        // each batch holds what arrived during the previous commit (~50).
        assert!(
            (15..=25).contains(&commits),
            "{commits} commits for 1000 events"
        );
        assert_eq!(rig.fates.lock().len(), 1000);
        assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
        let mut total = 0;
        for p in 0..20 {
            total += rig.store.count(&format!("p{p}")).await.unwrap();
        }
        assert_eq!(total, 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_membership_is_never_in_two_commits_at_once_but_a_post_is() {
        let mut rig = Rig::with(16, 40, FlushConfig::default());
        rig.store.set_delay(Duration::from_millis(30));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(rig.flusher.clone().run(stop));
        // 5 posts x 4 users: every membership comes back every ~7 ms,
        // while an earlier batch of it (30 ms) may be in flight (distinct
        // users alone could never overlap).
        for i in 0..3000usize {
            let (post, user) = (i % 5, (i / 5) % 4);
            rig.like(&format!("p{post}"), &format!("u{user}"), i as i64);
            if (i + 1) % 3 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        let seen = rig.store.concurrency();
        assert!(seen.max_commits_in_flight > 1, "{seen:?}");
        assert!(seen.max_commits_in_flight <= 4, "{seen:?}");
        assert_eq!(seen.membership_overlaps, 0, "{seen:?}");
        assert!(
            seen.post_overlaps > 0,
            "one post in several commits: {seen:?}"
        );
        assert_eq!(rig.fates.lock().len(), 3000);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let config = FlushConfig::default();
        assert!(backoff(&config, 1) <= config.backoff_initial);
        assert!(backoff(&config, 30) <= config.backoff_max);
        assert!(backoff(&config, 4) >= config.backoff_initial * 4);
    }
}
