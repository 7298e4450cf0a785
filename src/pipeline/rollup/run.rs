//! The refresher's life ([`Refresher::run`]): the start-up sweep beside
//! a cycle every interval (and a look for due records to take over), then
//! the drain at stop.
//!
//! Invariants: the sweep never holds a cycle up, and is given up (at
//! ERROR) after [`SWEEP_ATTEMPTS`] tries; a look for due records to take
//! over never holds the stop up (it is abandoned, its records left in the
//! store); replicas started together do not
//! tick together (a random phase); the drain is bounded by the drain
//! timeout, and what it leaves is taken over by another replica.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::refresher::Refresher;
use crate::store::rollup::RollupStore;

/// The summary name of the rate-limited sweep warnings.
const SWEEP_FAILED: &str = "rollup sweeps failed";

/// Tries of the start-up sweep before it is given up.
pub const SWEEP_ATTEMPTS: u32 = 5;

impl<S: RollupStore> Refresher<S> {
    /// Sweeps (when configured), then runs a cycle every interval until
    /// `stop` turns true; then refreshes every marked post once more,
    /// bounded by the drain timeout.
    pub async fn run(self, stop: watch::Receiver<bool>) {
        // The sweep runs beside the cycles, never holding one up.
        tokio::join!(self.sweep_until_done(stop.clone()), self.cycles(stop));
        self.drain().await;
    }

    /// A cycle every interval (and a look for due records to take over
    /// every `takeover_every`) until `stop` turns true.
    async fn cycles(&self, mut stop: watch::Receiver<bool>) {
        // A random phase, so replicas started together do not tick together.
        let phase = self.config.interval.mul_f64(rand::random_range(0.0..1.0));
        let mut ticks = tokio::time::interval_at(Instant::now() + phase, self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_takeover = Instant::now() + phase;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
            if Instant::now() >= next_takeover {
                // Not waited for at stop (a statement may wait on a lock
                // for as long as the store lets it): what it would have
                // taken stays in the store, for the next look of any
                // replica.
                tokio::select! {
                    _ = self.take_over() => {}
                    _ = stop.wait_for(|stopped| *stopped) => break,
                }
                next_takeover = Instant::now() + self.config.takeover_every;
            }
            self.cycle(false).await;
            self.clear_ready().await;
        }
    }

    /// The start-up sweep, tried up to [`SWEEP_ATTEMPTS`] times with a
    /// growing pause, then given up (logged at ERROR): a backstop for
    /// changes no due record covers (writers from before due records).
    async fn sweep_until_done(&self, mut stop: watch::Receiver<bool>) {
        if self.config.sweep_lookback.is_none() {
            return;
        }
        let mut pause = Duration::from_secs(1);
        for attempt in 1..=SWEEP_ATTEMPTS {
            if self.sweep().await {
                return;
            }
            if attempt == SWEEP_ATTEMPTS {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            pause = (pause * 2).min(Duration::from_secs(30));
        }
        self.stats.rollup_failures.add(1);
        tracing::error!(
            attempts = SWEEP_ATTEMPTS,
            "rollup sweep given up; due records still cover every change this build committed"
        );
    }

    /// Refreshes every marked post, ignoring their due times and the
    /// interval, until none is marked, one cycle changes nothing, or the
    /// drain timeout passes (what is left is found by the next start's
    /// sweep).
    pub async fn drain(&self) {
        let deadline = Instant::now() + self.config.drain_timeout;
        let drained = tokio::time::timeout_at(deadline, async {
            // Cycles in a row that settled nothing (a failing store), at most.
            let mut stalled = 0;
            while !self.marks.is_empty() && stalled < 3 {
                let before = self.marks.len();
                let report = self.cycle(true).await;
                let progress = report.written > 0 || self.marks.len() < before;
                stalled = if progress { 0 } else { stalled + 1 };
                if report.posts == 0 {
                    break;
                }
            }
        })
        .await;
        // Bounded apart: a drain that ran out of time still clears what
        // it settled (a record left is taken over by another replica).
        let cleared = tokio::time::timeout(self.config.drain_timeout, self.clear_ready()).await;
        let left = self.marks.len();
        self.stats.rollup_pending.set(left as u64);
        if drained.is_err() || cleared.is_err() || left > 0 {
            tracing::warn!(
                posts = left,
                "rollups left unrefreshed at shutdown; their due records are taken over by another replica"
            );
        }
    }

    /// Finds recently changed posts whose rollups may be stale (a refresh
    /// lost with a killed process) and marks them. Returns whether it ran.
    pub async fn sweep(&self) -> bool {
        let Some(lookback) = self.config.sweep_lookback else {
            return true;
        };
        let since = SystemTime::now()
            .checked_sub(lookback)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.stats.rollup_rpcs.add(1);
        match self.store.changed_since(since).await {
            Ok(changed) => {
                let now = Instant::now();
                for post in &changed {
                    self.marks
                        .mark_post(&post.post_id, post.changed_at, post.shards, now);
                }
                self.stats.rollup_swept.add(changed.len() as u64);
                tracing::info!(
                    posts = changed.len(),
                    lookback_secs = lookback.as_secs(),
                    "rollup sweep: recently changed posts marked for a check"
                );
                true
            }
            Err(error) => {
                self.stats.rollup_failures.add(1);
                if self.stats.warnings.admit(SWEEP_FAILED, error.op) {
                    tracing::warn!(%error, "rollup sweep failed; trying again after a pause");
                }
                false
            }
        }
    }
}
