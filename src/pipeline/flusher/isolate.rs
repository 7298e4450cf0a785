//! Commits one take as one or more transactions and settles each of its
//! messages: retries what proves nothing about the content, splits a batch
//! that keeps meeting contention, and splits a batch whose content the
//! store refuses until the culprit is alone, then quarantines it.
//!
//! Invariant: a message is settled once, as acked only when the part
//! holding its effects, or its quarantine record, committed ([`Settlement`]
//! lists the rest, to nack); a refused quarantine record never takes a
//! valid event with it.

use std::time::Duration;

use tokio::time::Instant;

use super::{FlushConfig, Flusher};
use crate::event::to_json;
use crate::model::batch::{Batch, Effects, MessageIndex, Tagged};
use crate::model::poison::PoisonRecord;
use crate::pipeline::acker::AckHandle;
use crate::store::{Attempt, CommitOutcome, CounterStore, KnownUse, StoreError};
use crate::telemetry::LogThrottle;

/// What the rate-limited quarantine warnings are called in their summary line.
const QUARANTINED: &str = "messages quarantined";
/// ... the warnings about valid events the store refused.
const REFUSED_EVENTS: &str = "events refused by the store";
/// ... the errors about quarantine records the store refused.
const REFUSED_RECORDS: &str = "quarantine records refused by the store";

impl<S: CounterStore, H: AckHandle> Flusher<S, H> {
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
    pub(super) async fn commit_isolating(&self, batch: Batch) -> Settlement {
        let mut settled = Settlement::default();
        let mut work = vec![batch];
        while let Some(mut batch) = work.pop() {
            let (error, contended) = match self.commit_with_retry(&mut batch).await {
                Ok(effects) => {
                    settled.effects.add(effects);
                    log_quarantined(&self.stats.warnings, &batch.poison);
                    continue;
                }
                Err(Failure::Contended(error)) => (error, true),
                Err(Failure::Other(error)) => (error, false),
            };
            if contended {
                self.split_contended(batch, error, &mut work, &mut settled);
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
                        if !self
                            .stats
                            .warnings
                            .admit(REFUSED_EVENTS, PoisonRecord::STORE_REFUSED)
                        {
                            continue;
                        }
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
                        if !self.stats.warnings.admit(REFUSED_RECORDS, record.item.kind) {
                            continue;
                        }
                        tracing::error!(
                            kind = record.item.kind,
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

    /// A batch that kept meeting contention (only ABORTED: the store
    /// applied nothing): its parts become new batches in `work`, so the one
    /// on the contended documents keeps backing off and the others commit
    /// now. A batch that cannot be split (one item) is nacked: nothing of
    /// it committed, so none of its messages may be acked.
    pub(super) fn split_contended(
        &self,
        batch: Batch,
        error: StoreError,
        work: &mut Vec<Batch>,
        settled: &mut Settlement,
    ) {
        match batch.split() {
            Ok((older, newer)) => {
                self.stats.contention_splits.add(1);
                tracing::debug!(%error, "batch keeps meeting contention; splitting it");
                work.push(newer);
                work.push(older);
            }
            Err(unsplit) => {
                settled.nack.extend(unsplit.messages());
                settled.gave_up = Some(error);
            }
        }
    }

    /// Commits `batch`, retrying what proves nothing about its content,
    /// with backoff. Returns the error early, for the caller to split the
    /// batch, after `split_after_aborts` attempts that all met contention;
    /// and starts no attempt past the shutdown deadline. A commit that
    /// found the erased users' tombstones changed since the batch was
    /// checked is retried at once, after the batch is checked again
    /// ([`Flusher::check_again`]: its events of users erased meanwhile are
    /// dropped); a batch left with nothing to commit ends there.
    async fn commit_with_retry(&self, batch: &mut Batch) -> Result<Effects, Failure> {
        let mut attempt = 1;
        let mut this = Attempt::first();
        let mut only_aborted = true;
        loop {
            if batch.event_count() == 0 && batch.poison.is_empty() {
                return Ok(Effects::default());
            }
            let result = self
                .store
                .commit(batch, &this.clone().until(self.deadline.clone()))
                .await;
            match result {
                Ok(report) => {
                    if let Some(marks) = &self.rollups {
                        marks.mark(
                            &report.changed,
                            report.committed_at,
                            report.due_record.clone(),
                            Instant::now(),
                        );
                    }
                    self.stats.commit_progress.committed();
                    self.stats.store_rpcs.add(u64::from(report.rpcs));
                    match report.known {
                        KnownUse::Committed => self.stats.known_commits.add(1),
                        KnownUse::Refused => self.stats.known_refusals.add(1),
                        KnownUse::Unused => {}
                    }
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
                Err(error)
                    if error.is_tombstones_changed()
                        && attempt < self.config.commit_max_attempts =>
                {
                    self.stats.commit_retries.add(1);
                    tracing::debug!(%error, attempt, "tombstones changed; checking the batch again");
                    if let Err(read) = self.check_again(batch).await {
                        self.record_failure(&read);
                        if !self.pause(backoff(&self.config, attempt)).await {
                            return Err(Failure::Other(error));
                        }
                    }
                    this = Attempt::after(&error);
                    attempt += 1;
                }
                Err(error) if error.is_retryable() && attempt < self.config.commit_max_attempts => {
                    self.record_failure(&error);
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
                    if !self.pause(pause).await {
                        // The shutdown deadline falls within the backoff.
                        return Err(Failure::Other(error));
                    }
                    self.stats.commit_retries.add(1);
                    tracing::debug!(%error, attempt, "commit failed; retrying");
                    this = Attempt::after(&error);
                    attempt += 1;
                }
                Err(error) => {
                    self.record_failure(&error);
                    return Err(Failure::Other(error));
                }
            }
        }
    }
}

impl<S: CounterStore, H: AckHandle> Flusher<S, H> {
    /// Sleeps `pause` before a retry; false, at once, when the shutdown
    /// deadline is set (now or while sleeping) to fall within it: then no
    /// retry would be allowed to start anyway.
    async fn pause(&self, pause: Duration) -> bool {
        let wake = Instant::now() + pause;
        let mut deadline = self.deadline.clone();
        loop {
            if deadline.get().is_some_and(|at| wake >= at) {
                return false;
            }
            tokio::select! {
                () = tokio::time::sleep_until(wake) => return true,
                () = deadline.changed() => {}
            }
        }
    }

    /// Counts and remembers a failed attempt (a call the store did not
    /// answer in time, unless the shutdown deadline ended it).
    fn record_failure(&self, error: &StoreError) {
        self.stats.commit_progress.failed(error);
        let shutting_down = self
            .deadline()
            .is_some_and(|deadline| Instant::now() >= deadline);
        if error.code == crate::store::Code::DeadlineExceeded && !shutting_down {
            self.stats.store_call_timeouts.add(1);
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
pub(super) struct Settlement {
    /// The effects of every part that committed.
    pub(super) effects: Effects,
    /// Messages to nack; every other message of the take is acked.
    pub(super) nack: Vec<MessageIndex>,
    /// The failure that made the flusher give up on a part, if any.
    pub(super) gave_up: Option<StoreError>,
}

/// Logs the quarantine records of a committed part at WARN, rate-limited
/// per reason kind (each record is counted in its metric and stored
/// whether or not its line is printed).
fn log_quarantined(warnings: &LogThrottle, poison: &[Tagged<PoisonRecord>]) {
    for record in poison {
        if !warnings.admit(QUARANTINED, record.item.kind) {
            continue;
        }
        tracing::warn!(
            kind = record.item.kind,
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
            )
            .of_kind(PoisonRecord::STORE_REFUSED),
            message: event.message,
        })
        .collect();
    Batch::of_messages(Vec::new(), poison)
}
