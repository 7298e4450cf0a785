//! When to flush, and what a flush does: take one batch from the shards
//! that have none in flight, commit it as one transaction (retrying
//! transient failures, isolating permanent ones), then hand the handles to
//! the acker.
//!
//! The flush size adapts to the store (group commit): a batch is taken when
//! a commit slot is free and (a) the store is idle and the oldest message
//! has waited `flush_min_wait`, or (b) with `k` of the `n` commit slots
//! busy, `(k/n)²` of a full batch is buffered (a sixteenth with 1 of 4
//! busy, over half with 3 of 4; the aggregator wakes the loop when that
//! many have arrived, as it does when a shard turns non-empty), or (c) the
//! oldest message has waited `flush_interval`, or (d) the service stops.
//! While commits are in flight messages accumulate, so batches grow when
//! commits are slow or queued and stay small (low latency) when they are
//! fast and slots are free; under a backlog every batch is full. The rate
//! of commits, and so of writes to any one counter, is at most
//! `max_commits_in_flight / commit latency` whatever the event rate. A
//! flush takes as many batches at once as there are free commit slots
//! ([`split`], none below `split_min_events`), so what is buffered when
//! arrivals wait on the commits (a push window, a pull stream at low load)
//! is committed in overlapping transactions, not queued behind one.
//!
//! Invariants: a membership is in at most one batch in flight (each
//! batch's memberships, by route hash, and the shards it took from are
//! marked from take to commit; a take reaches into a marked shard only for
//! the memberships in no batch), so batches in flight in one process touch
//! disjoint memberships (one post may be in several: each increments its
//! own counter shard, [`crate::store::counter_shards`]); handles go to
//! [`Acker::ack`] only after the store reports the batch committed, and to
//! [`Acker::nack`] when it gives up; at shutdown every shard is drained and
//! every commit finished before the flusher returns.
//!
//! The parts: [`decide`] (`decide.rs`) is the flush rule, pure; `isolate.rs`
//! commits one take (retrying, splitting on contention, isolating what the
//! store refuses) and says how each message ended; this file is the loop
//! and the hand-off of the handles.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashSet;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::event::LikeEvent;
use crate::model::batch::{Batch, Effects, Tagged};
use crate::pipeline::acker::{AckHandle, Acker};
use crate::pipeline::aggregator::{Aggregator, Taken};
use crate::pipeline::rollup::Marks;
use crate::store::{CounterStore, Deadline, StoreError};
use crate::telemetry::Stats;

mod decide;
mod isolate;
mod tombstones;

pub use crate::config::FlushConfig;
use decide::share_of_batch;
pub use decide::{decide, split, Decision};
pub use isolate::backoff;
use isolate::Settlement;
pub use tombstones::Tombstones;

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
    /// Where the posts a commit changed are marked for their rollup's
    /// refresh (none when rollups are off).
    rollups: Option<Arc<Marks>>,
    /// Erased users, whose events are dropped (none when no key is set).
    tombstones: Option<Arc<Tombstones>>,
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
            rollups: self.rollups.clone(),
            tombstones: self.tombstones.clone(),
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
            rollups: None,
            tombstones: None,
        }
    }

    /// This flusher, dropping (and acking) every event of a user whose
    /// keyed hash `tombstones` holds.
    pub fn with_tombstones(self, tombstones: Arc<Tombstones>) -> Self {
        Self {
            tombstones: Some(tombstones),
            ..self
        }
    }

    /// `events` without those of erased users, and the tombstone
    /// generation they were checked against (`None` without tombstones);
    /// the dropped ones are counted and, being in no batch part, acked with
    /// the take.
    fn drop_erased(&self, events: Vec<Tagged<LikeEvent>>) -> (Vec<Tagged<LikeEvent>>, Option<i64>) {
        let Some(tombstones) = &self.tombstones else {
            return (events, None);
        };
        let checked = tombstones.snapshot();
        let Some(set) = &checked.hashes else {
            return (events, Some(checked.generation));
        };
        let before = events.len();
        let kept: Vec<_> = events
            .into_iter()
            .filter(|e| !tombstones.holds(set, e.item.user_id()))
            .collect();
        self.count_dropped((before - kept.len()) as u64);
        (kept, Some(checked.generation))
    }

    /// Checks `batch` again against the store's tombstones, read now (its
    /// commit found them changed since it was checked): drops the events of
    /// the users erased meanwhile and labels it with the new generation.
    /// The set held is replaced too, for the batches after it. A failed
    /// read leaves the batch as it is (its next attempt fails the same way).
    async fn check_again(&self, batch: &mut Batch) -> Result<(), StoreError> {
        let Some(tombstones) = &self.tombstones else {
            return Ok(());
        };
        let dropped = tombstones.recheck(self.store.tombstones().await?, batch);
        self.count_dropped(dropped as u64);
        Ok(())
    }

    /// Counts (and logs, without any id) events of erased users dropped.
    fn count_dropped(&self, dropped: u64) {
        if dropped > 0 {
            self.stats.erased_dropped.add(dropped);
            tracing::info!(dropped, "events of erased users dropped");
        }
    }

    /// This flusher, marking in `marks` the posts each commit changes (once
    /// per post per batch), for the rollup refresher.
    pub fn with_rollups(self, marks: Arc<Marks>) -> Self {
        Self {
            rollups: Some(marks),
            ..self
        }
    }

    /// When commits must have ended, once stopping.
    fn deadline(&self) -> Option<Instant> {
        self.deadline.get()
    }

    /// Flushes by [`decide`] until `stop` turns true, then drains every
    /// shard and waits for every commit.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        // Per shard: whether a batch in flight took from it, and how many.
        let mut busy = vec![false; self.aggregator.shard_count()];
        let mut batches_of = vec![0u32; self.aggregator.shard_count()];
        let mut in_flight = tokio::task::JoinSet::new();
        let mut held: HashMap<tokio::task::Id, (Vec<usize>, Vec<u64>)> = HashMap::new();
        let mut stopping = false;
        loop {
            stopping |= *stop.borrow();
            let now = Instant::now();
            if stopping && self.deadline().is_none() {
                self.set_deadline
                    .send_replace(Some(now + self.config.shutdown_deadline));
            }
            // Counted before the view: what arrives between them only
            // makes the wake-up below come sooner.
            let buffered = self.aggregator.buffered();
            let free = self.aggregator.free_view(&busy);
            let free = match self.aggregator.takes_around_busy() {
                true => free.around_busy(),
                false => free,
            };
            let deadline = match decide(&self.config, free, in_flight.len(), stopping, now) {
                Decision::Flush => {
                    let (batches, each) = split(&self.config, free, in_flight.len());
                    let mut spawned = false;
                    for _ in 0..batches {
                        // The memberships (route hashes) of the batches in
                        // flight, gathered only if the take reaches into a
                        // busy shard.
                        let memberships = || {
                            held.values()
                                .flat_map(|(_, routes)| routes.iter().copied())
                                .collect::<FxHashSet<u64>>()
                        };
                        let (mut taken, shards) =
                            self.aggregator
                                .take_merged_around(&busy, Some(memberships), now, each);
                        if taken.is_empty() {
                            break;
                        }
                        for &shard in &shards {
                            busy[shard] = true;
                            batches_of[shard] += 1;
                        }
                        let routes = std::mem::take(&mut taken.routes);
                        let flusher = self.clone();
                        let task =
                            in_flight.spawn(async move { flusher.commit_taken(taken).await });
                        held.insert(task.id(), (shards, routes));
                        spawned = true;
                    }
                    if spawned {
                        continue;
                    }
                    None
                }
                Decision::WaitUntil(deadline) => {
                    // Rule (b) may come true with no shard turning
                    // non-empty (nothing else would wake this loop before
                    // a commit ends or the interval runs out): ask to be
                    // woken when enough more have arrived.
                    let share = share_of_batch(&self.config, free.batch_events, in_flight.len());
                    let wake_at = share.map(|share| {
                        buffered.saturating_add(share.saturating_sub(free.messages).max(1))
                    });
                    self.aggregator.wake_when_buffered(wake_at);
                    deadline
                }
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
                    let (shards, _routes) = held.remove(&id).unwrap_or_default();
                    for shard in shards {
                        batches_of[shard] = batches_of[shard].saturating_sub(1);
                        busy[shard] = batches_of[shard] > 0;
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
        let (events, checked) = self.drop_erased(events);
        let mut batch = Batch::of_messages(events, poison);
        batch.tombstone_generation = checked;
        let started = Instant::now();
        self.stats.commit_progress.begin();
        let settled = if batch.event_count() == 0 && batch.poison.is_empty() {
            Settlement::default()
        } else {
            self.commit_isolating(batch).await
        };
        self.stats.commit_progress.end();
        self.stats.commit_duration.record(started.elapsed());
        self.stats.record_effects(event_counts(settled.effects));
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
}

#[cfg(test)]
mod tests;

/// The metrics' counts of a batch's effects.
fn event_counts(effects: Effects) -> crate::telemetry::EventCounts {
    // Exhaustive: a new kind of effect does not compile until counted.
    let Effects {
        applied,
        duplicates,
        stale,
        poison,
    } = effects;
    crate::telemetry::EventCounts {
        applied,
        duplicates,
        stale,
        poison,
    }
}
