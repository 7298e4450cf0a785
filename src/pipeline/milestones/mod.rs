//! The milestone dispatcher, beside the pipeline: delivers each milestone
//! record the rollup writes created (`milestones/{post}:{n}`,
//! `milestones`) to the webhook, once per milestone as far as a receiver
//! that keys on `Idempotency-Key` can tell.
//!
//! Invariants:
//! - a record is attempted only under a lease this dispatcher claimed
//!   ([`MilestoneStore::claim`]): one dispatcher at a time calls for it,
//!   and a lease outlives the call it covers (`lease` > the request
//!   timeout), so a call in progress is not taken over;
//! - a record is marked done only after a 2xx, given up only after a
//!   refusal (a 4xx other than 408 and 429, a redirect) whose reason is
//!   stored, and otherwise made due again after a backoff with jitter;
//! - every call for a record carries the same body and key
//!   ([`webhook`]): a call repeated because its dispatcher died between
//!   the receiver's answer and the mark (the one window that remains: the
//!   lease ends and another dispatcher calls again) is the same call to
//!   the receiver;
//! - a settle whose lease was taken over changes nothing (it is counted);
//! - leases, "due" and the next attempt's time are the store's time, never
//!   this replica's clock ([`MilestoneStore::claim`], [`Settle::Retry`]);
//! - a call goes out only while its lease has room for the whole call and
//!   its settle; a settle the store fails is tried again while the lease
//!   lasts, so a record is called again only when its dispatcher died or
//!   the store stayed unreachable for the whole lease.

pub mod webhook;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use tokio::sync::watch;

use crate::store::milestone::{Claim, MilestoneStore, Settle};
use crate::store::rollup::micros_of;
use crate::store::StoreError;
use crate::telemetry::Stats;

pub use crate::config::DispatchConfig;

pub use webhook::{Answer, Webhook};

/// At shutdown, how long the calls under way may take to finish (inside
/// the service's shutdown deadline).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The summary name of the rate-limited warnings.
const ATTEMPT_FAILED: &str = "milestone webhook attempts failed";
/// The summary name of the rate-limited give-up errors.
const GIVEN_UP: &str = "milestones given up";
/// The summary name of the rate-limited warnings of leases too short.
const LEASE_TOO_SHORT: &str = "milestone leases too short for their call";
/// The summary name of the rate-limited store failures.
const STORE_FAILED: &str = "milestone store calls failed";

/// Room kept in a lease beyond the call: for its settle (and the settle's
/// retries) before the lease ends.
const SETTLE_ROOM: Duration = Duration::from_millis(200);

/// The first wait before a failed settle is tried again (doubling).
const SETTLE_RETRY_INITIAL: Duration = Duration::from_millis(50);

/// What one round did (for tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Records claimed.
    pub claimed: usize,
    /// Delivered (2xx, marked done).
    pub delivered: usize,
    /// Failed, to be retried.
    pub failed: usize,
    /// Given up.
    pub dead: usize,
    /// Settles refused: the lease had been taken over.
    pub lost: usize,
    /// Claims not called: too little of their lease was left for the call
    /// (a slow store); called again once the lease ends.
    pub skipped: usize,
}

impl RoundReport {
    /// Counts one attempt's outcome (`None`: its settle failed).
    fn add(&mut self, settled: Option<Settled>) {
        match settled {
            Some(Settled::Skipped) => self.skipped += 1,
            Some(Settled::Delivered) => self.delivered += 1,
            Some(Settled::Failed) => self.failed += 1,
            Some(Settled::Dead) => self.dead += 1,
            Some(Settled::Lost) => self.lost += 1,
            None => {}
        }
    }
}

/// The dispatcher of one process.
pub struct Dispatcher<S> {
    store: Arc<S>,
    webhook: Webhook,
    config: DispatchConfig,
    stats: Arc<Stats>,
}

/// The delay before attempt `attempts + 1` after a failure: the initial
/// delay doubled per attempt made, capped, times a jitter in [0.5, 1).
pub fn backoff(config: &DispatchConfig, attempts: u32, jitter: f64) -> Duration {
    let doublings = attempts.saturating_sub(1).min(30);
    let delay = config
        .backoff_initial
        .saturating_mul(1 << doublings)
        .min(config.backoff_max);
    delay.mul_f64(jitter.clamp(0.5, 1.0))
}

impl<S: MilestoneStore> Dispatcher<S> {
    /// A dispatcher delivering `store`'s records to `webhook`.
    pub fn new(store: Arc<S>, webhook: Webhook, config: DispatchConfig, stats: Arc<Stats>) -> Self {
        Self {
            store,
            webhook,
            config,
            stats,
        }
    }

    /// Runs a round every poll interval (more at once while rounds come
    /// back full) until `stop` turns true; nothing is claimed after, and a
    /// round under way gets [`SHUTDOWN_GRACE`] to finish (its calls cut
    /// then are called again once their leases end, with the same key).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.config.poll_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut grace = stop.clone();
        let cut = async move {
            let _ = grace.wait_for(|stopped| *stopped).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::pin!(cut);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            loop {
                let report = tokio::select! {
                    report = self.round() => report,
                    _ = &mut cut => {
                        tracing::warn!("milestone calls cut at shutdown; each is called again, with the same key, once its lease ends");
                        return;
                    }
                };
                if report.claimed < self.config.claim_limit || *stop.borrow() {
                    break;
                }
            }
        }
    }

    /// Claims the due records and calls for each, concurrently: each call
    /// starts as soon as its own claim lands, whatever the others' do.
    pub async fn round(&self) -> RoundReport {
        let progress = &self.stats.milestone_progress;
        let mut report = RoundReport::default();
        let mut claims = self
            .store
            .claim_each(self.config.lease, self.config.claim_limit);
        let mut calls = FuturesUnordered::new();
        let mut claiming = true;
        let mut failed = None;
        progress.begin();
        while claiming || !calls.is_empty() {
            tokio::select! {
                claimed = claims.next(), if claiming => match claimed {
                    Some(Ok(claim)) => {
                        report.claimed += 1;
                        calls.push(self.attempt(claim));
                    }
                    Some(Err(error)) => {
                        failed.get_or_insert(error);
                    }
                    None => {
                        claiming = false;
                        progress.end();
                        self.claimed(report.claimed, failed.take());
                    }
                },
                Some(settled) = calls.next(), if !calls.is_empty() => report.add(settled),
            }
        }
        report
    }

    /// Calls for `claim` if its lease still has room for the call and its
    /// settle, and stores the answer.
    async fn attempt(&self, claim: Claim) -> Option<Settled> {
        // The call and its settle must fit in the lease: otherwise another
        // dispatcher may take it over and call too.
        if claim.lease_left() < self.webhook.timeout() + SETTLE_ROOM {
            if self.stats.warnings.admit(LEASE_TOO_SHORT, "claim") {
                tracing::warn!(post_id = %claim.record.post_id, milestone = claim.record.milestone, lease_left_ms = claim.lease_left().as_millis() as u64, "a milestone's lease was too short for its call by the time it was claimed (a slow store); not called, it is claimed again when the lease ends");
            }
            self.stats.milestone_leases_lost.add(1);
            return Some(Settled::Skipped);
        }
        let answer = self.webhook.call(&claim.record).await;
        self.settle(&claim, answer).await
    }

    /// Tells `/readyz` and the log how a round's claiming went: `failed`
    /// counts only when nothing was claimed (the store then fails the
    /// dispatcher; a record whose claim failed is left to the next round).
    fn claimed(&self, claimed: usize, failed: Option<StoreError>) {
        let progress = &self.stats.milestone_progress;
        match failed {
            Some(error) if claimed == 0 => {
                progress.failed(&error);
                if self.stats.warnings.admit(STORE_FAILED, error.op) {
                    tracing::warn!(%error, "claiming milestones failed; trying again at the next round");
                }
            }
            _ => progress.committed(),
        }
    }

    /// Claims the records due now (the store's time); `None` when the
    /// store failed.
    pub async fn claim(&self) -> Option<Vec<Claim>> {
        // Whether the store answers the dispatcher (`/readyz`).
        let progress = &self.stats.milestone_progress;
        progress.begin();
        let claimed = self
            .store
            .claim(self.config.lease, self.config.claim_limit)
            .await;
        progress.end();
        match claimed {
            Ok(claims) => {
                self.claimed(claims.len(), None);
                Some(claims)
            }
            Err(error) => {
                self.claimed(0, Some(error));
                None
            }
        }
    }

    /// Stores what `answer` means for `claim`; `None` when the store
    /// failed (the lease then ends and the record is attempted again).
    pub async fn settle(&self, claim: &Claim, answer: Answer) -> Option<Settled> {
        let record = &claim.record;
        let now = SystemTime::now();
        let (settle, settled) = match answer {
            Answer::Accepted => (Settle::Done { at: micros_of(now) }, Settled::Delivered),
            Answer::Retry { why, after } => {
                let delay = backoff(&self.config, record.attempts, rand::random_range(0.5..1.0))
                    .max(after.unwrap_or_default().min(self.config.backoff_max));
                if self.stats.warnings.admit(ATTEMPT_FAILED, "retry") {
                    tracing::warn!(post_id = %record.post_id, milestone = record.milestone, attempts = record.attempts, retry_in_ms = delay.as_millis() as u64, error = %why, "milestone webhook attempt failed; retrying after a backoff");
                }
                (
                    Settle::Retry {
                        error: why,
                        after: delay,
                    },
                    Settled::Failed,
                )
            }
            Answer::Refused { why } => {
                if self.stats.warnings.admit(GIVEN_UP, "refused") {
                    tracing::error!(post_id = %record.post_id, milestone = record.milestone, attempts = record.attempts, reason = %why, "milestone webhook refused the call; given up (hotcount milestones retry sends it again)");
                }
                (Settle::Dead { reason: why }, Settled::Dead)
            }
        };
        match self.store_settle(claim, &settle).await {
            Ok(true) => {
                let counter = match settled {
                    Settled::Delivered => &self.stats.milestones_delivered,
                    Settled::Failed => &self.stats.milestone_attempts_failed,
                    Settled::Dead => &self.stats.milestones_dead,
                    Settled::Lost | Settled::Skipped => &self.stats.milestone_leases_lost,
                };
                counter.add(1);
                Some(settled)
            }
            Ok(false) => {
                self.stats.milestone_leases_lost.add(1);
                tracing::warn!(post_id = %record.post_id, milestone = record.milestone, "a milestone's lease was taken over before its attempt settled; the new holder calls again with the same key");
                Some(Settled::Lost)
            }
            Err(error) => {
                if self.stats.warnings.admit(STORE_FAILED, error.op) {
                    tracing::warn!(%error, post_id = %record.post_id, milestone = record.milestone, "storing a milestone attempt's outcome failed; it is attempted again when its lease ends");
                }
                None
            }
        }
    }
}

impl<S: MilestoneStore> Dispatcher<S> {
    /// Stores `settle`, trying again after a transient failure while the
    /// lease lasts (a settle left undone is a call made again by the next
    /// holder).
    async fn store_settle(&self, claim: &Claim, settle: &Settle) -> Result<bool, StoreError> {
        let give_up = Instant::now() + claim.lease_left();
        let mut wait = SETTLE_RETRY_INITIAL;
        let progress = &self.stats.milestone_progress;
        loop {
            let settled = self.store.settle(claim, settle).await;
            match &settled {
                Ok(_) => progress.committed(),
                Err(error) => progress.failed(error),
            }
            match settled {
                Err(error) if error.is_retryable() && Instant::now() + wait < give_up => {
                    if self.stats.warnings.admit(STORE_FAILED, error.op) {
                        tracing::warn!(%error, post_id = %claim.record.post_id, milestone = claim.record.milestone, "storing a milestone attempt's outcome failed; trying again while the lease lasts");
                    }
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                }
                outcome => return outcome,
            }
        }
    }
}

/// How one attempt settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Marked done.
    Delivered,
    /// Made due again after a backoff.
    Failed,
    /// Given up.
    Dead,
    /// The lease had been taken over: nothing stored.
    Lost,
    /// Not called: the lease had too little left for the call.
    Skipped,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_attempt_up_to_the_cap_with_jitter() {
        let config = DispatchConfig {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(10),
            ..DispatchConfig::default()
        };
        assert_eq!(backoff(&config, 1, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(&config, 3, 1.0), Duration::from_secs(4));
        assert_eq!(backoff(&config, 40, 1.0), Duration::from_secs(10));
        assert_eq!(backoff(&config, 3, 0.5), Duration::from_secs(2));
    }
}
