//! The tasks beside the pipeline: the PostgreSQL store's expired batch
//! marker cleanup, the commits' and stages' stall watches that drive
//! readiness, and the periodic report of suppressed warnings.
//!
//! Invariant: none of them can stop or block the pipeline: a failure is
//! logged and retried at the next interval, and each ends when `stop`
//! turns true (a cleanup in progress is abandoned).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::store::selected::SelectedDb;
use crate::telemetry::{CommitProgress, Stall, Stats};

/// Statements one marker cleanup runs at most before it waits for the
/// next interval (so one cleanup is bounded however large the backlog).
pub(super) const MARKER_CLEANUP_STATEMENTS: u32 = 10;

/// Deletes a PostgreSQL store's expired batch markers every `interval`:
/// up to [`MARKER_CLEANUP_STATEMENTS`] statements of at most `batch_rows`
/// rows each, so one cleanup is bounded. A failure is logged and the
/// cleanup tried again at the next interval; it never stops the service.
pub(super) struct MarkerCleanup {
    pub(super) db: SelectedDb,
    pub(super) interval: Duration,
    pub(super) batch_rows: i64,
    pub(super) stats: Arc<Stats>,
}

impl MarkerCleanup {
    /// Cleans up at start and every interval until `stop` turns true; a
    /// cleanup running then is abandoned at once (its statement's
    /// connection closed, so the server rolls it back): the next replica's
    /// cleanup deletes those markers, and the drain never waits for it.
    pub(super) async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            tokio::select! {
                _ = self.clean() => {}
                _ = stop.wait_for(|stopped| *stopped) => {
                    tracing::info!("expired batch marker cleanup abandoned at shutdown");
                    return;
                }
            }
        }
    }

    /// One bounded cleanup; returns how many markers it deleted.
    async fn clean(&self) -> u64 {
        let mut deleted = 0;
        for _ in 0..MARKER_CLEANUP_STATEMENTS {
            match self.db.delete_expired_markers(self.batch_rows).await {
                Ok(n) => {
                    deleted += n;
                    self.stats.markers_deleted.add(n);
                    if n < self.batch_rows.unsigned_abs() {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "deleting expired batch markers failed; trying again at the next interval");
                    break;
                }
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "expired batch markers deleted");
        }
        deleted
    }
}

/// Watches `progress` every tenth of `threshold` until `stop` turns true:
/// while it has work and nothing was answered for `threshold`, the replica
/// is stalled (not ready, its gauge 1); `say` is told of each change (the
/// stall, or `None` when it ends). Stopping clears the stall: the drain's
/// readiness is the source's.
pub(super) async fn watch_progress(
    progress: &CommitProgress,
    threshold: Duration,
    mut stop: watch::Receiver<bool>,
    say: impl Fn(Option<&Stall>),
) {
    let period = (threshold / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
        let stall = progress.check(threshold);
        if progress.set_stalled(stall.is_some()) {
            say(stall.as_ref());
        }
    }
    progress.set_stalled(false);
}

/// The commits' watch: while batches are being committed and none has
/// committed for `threshold`, the replica is stalled
/// (`hotcount_commits_stalled` 1), said once at WARN with why; the first
/// commit that succeeds ends it, said at INFO.
pub(super) async fn watch_commits(
    stats: Arc<Stats>,
    threshold: Duration,
    stop: watch::Receiver<bool>,
) {
    watch_progress(&stats.commit_progress, threshold, stop, |stall| match stall {
        Some(stall) => tracing::warn!(
            no_commit_for_secs = stall.for_how_long.as_secs(),
            batches_in_flight = stall.in_flight,
            last_error = stall.last_error.as_deref().unwrap_or("none"),
            threshold_secs = threshold.as_secs(),
            "commits stalled: no batch has committed for longer than --stuck-commit-threshold-secs while batches wait on the store; reporting not ready until one commits (nothing is acked meanwhile)"
        ),
        None => tracing::info!("commits go through again; ready"),
    })
    .await;
}

/// Which progress of [`Stats`] a stage's watch judges.
pub(super) type ProgressOf = fn(&Stats) -> &CommitProgress;

/// A stage beside the pipeline (`stage`: the refresher, the milestone
/// dispatcher) whose `progress` had work and no store call answered for
/// `threshold` is stalled: the replica is not ready
/// (`hotcount_stage_stalled{stage}` 1), said once per change.
pub(super) async fn watch_stage(
    stats: Arc<Stats>,
    stage: &'static str,
    progress: ProgressOf,
    threshold: Duration,
    stop: watch::Receiver<bool>,
) {
    watch_progress(progress(&stats), threshold, stop, |stall| match stall {
        Some(stall) => tracing::warn!(
            stage,
            no_answer_for_secs = stall.for_how_long.as_secs(),
            last_error = stall.last_error.as_deref().unwrap_or("none"),
            threshold_secs = threshold.as_secs(),
            "a stage beside the pipeline is stalled: none of its store calls has been answered for longer than --stuck-commit-threshold-secs while it had work; reporting not ready until one is"
        ),
        None => tracing::info!(stage, "the stage's store calls are answered again; ready"),
    })
    .await;
}

/// Prints the summary lines of the rate-limited warnings every interval
/// (so a storm's count is reported even when nothing follows it) until
/// `stop` turns true; the last ones after the drain, by [`run_pipeline`].
pub(super) async fn report_suppressed_warnings(stats: Arc<Stats>, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(stats.warnings.interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => stats.warnings.flush(false),
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}
