//! The traffic of a chaos run in time: the workload published, the
//! processing waited for, the Seek replay, the chaos kept going until
//! enough kills, and the final drain.
//!
//! Invariant: every wait is bounded by a share of the run's timeout (or
//! the deadline given) and ends early on cancel; the drain reports whether
//! nothing was left unacked, never pretends it.

use std::time::{Duration, Instant};

use google_cloud_pubsub::client::SubscriptionAdmin;
use tokio::sync::watch;

use super::config::{ChaosConfig, LEASE_JUMP, PROJECT, SNAPSHOT};
use super::tally::Tally;
use crate::publish::{self, PublishOptions, PublishReport};
use crate::run_error::RunError;
use crate::stage::Stage;
use crate::workload::Workload;

/// Publishes the (shuffled) workload as generated, `occurredAt` untouched.
pub(super) async fn publish_workload(
    stage: &Stage,
    config: &ChaosConfig,
    workload: &Workload,
    cancel: &watch::Receiver<bool>,
) -> Result<PublishReport, RunError> {
    let options = PublishOptions {
        rate_per_sec: config.rate_per_sec,
        stamp_at_publish: false,
        progress: false,
        ..PublishOptions::default()
    };
    let (endpoints, topic) = (stage.endpoints(), stage.topic());
    let published =
        publish::connect_and_publish(endpoints, topic, workload, &options, cancel.clone()).await?;
    Ok(published)
}

/// The Seek replay: a snapshot taken before publishing, Seeked to later.
pub(super) struct Replay {
    admin: SubscriptionAdmin,
    snapshot: String,
}

impl Replay {
    /// Connects the admin client and, when `replay`, takes the snapshot.
    pub(super) async fn prepare(stage: &Stage, replay: bool) -> Result<Self, RunError> {
        let admin = hotcount::connect::subscription_admin(stage.endpoints())
            .await
            .map_err(|e| RunError::Start(e.to_string()))?;
        let snapshot = format!("projects/{PROJECT}/snapshots/{SNAPSHOT}");
        if replay {
            admin
                .create_snapshot()
                .set_name(snapshot.clone())
                .set_subscription(stage.subscription().to_string())
                .send()
                .await
                .map_err(|e| RunError::Start(format!("snapshot: {e}")))?;
        }
        Ok(Self { admin, snapshot })
    }

    /// Seeks the subscription to the snapshot; the messages it made
    /// deliverable again.
    pub(super) async fn seek(&self, stage: &Stage) -> Result<u64, RunError> {
        let before = stage.subscription_stats().unacked;
        self.admin
            .seek()
            .set_subscription(stage.subscription().to_string())
            .set_snapshot(self.snapshot.clone())
            .send()
            .await
            .map_err(|e| RunError::Start(format!("seek: {e}")))?;
        Ok(stage.subscription_stats().unacked.saturating_sub(before))
    }
}

/// Waits until the traffic is processed (by 35 % of the timeout), then,
/// with a replay, Seeks and waits again (by 70 %); the messages replayed.
pub(super) async fn process_and_replay(
    stage: &Stage,
    replay: &Replay,
    config: &ChaosConfig,
    started: Instant,
    cancel: &watch::Receiver<bool>,
) -> Result<u64, RunError> {
    // "Processed" while faults keep firing: at most a small remainder unacked.
    let remainder = config.workload.events / 50 + 20;
    let processed = || stage.subscription_stats().unacked <= remainder;
    wait_until(started + config.timeout.mul_f64(0.35), cancel, processed).await;
    if !config.replay || is_cancelled(cancel) {
        return Ok(0);
    }
    let replayed = replay.seek(stage).await?;
    wait_until(started + config.timeout.mul_f64(0.7), cancel, processed).await;
    Ok(replayed)
}

/// Keeps the chaos going (by 80 % of the timeout) until the minimum of
/// kills is reached and at least one kill provably followed one of the
/// victim's commits.
pub(super) async fn wait_for_kills(
    tally: &Tally,
    config: &ChaosConfig,
    started: Instant,
    cancel: &watch::Receiver<bool>,
) {
    wait_until(started + config.timeout.mul_f64(0.8), cancel, || {
        tally.kills() >= config.min_kills && tally.kills_after_commit() > 0
    })
    .await;
}

/// Whether the run was cancelled.
pub(super) fn is_cancelled(cancel: &watch::Receiver<bool>) -> bool {
    *cancel.borrow()
}

/// Polls `done` every 50 ms until it holds, `deadline` passes or `cancel` fires.
async fn wait_until(
    deadline: Instant,
    cancel: &watch::Receiver<bool>,
    mut done: impl FnMut() -> bool,
) {
    while !done() && Instant::now() < deadline && !is_cancelled(cancel) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until nothing is unacked for a full second; when the backlog stops
/// moving for 2 s (lost acks and killed consumers' leases wait for their
/// deadline), jumps the emulated clock past every lease.
pub(super) async fn drain(
    stage: &Stage,
    deadline: Instant,
    cancel: &watch::Receiver<bool>,
) -> bool {
    let mut last = u64::MAX;
    let mut moved = Instant::now();
    let mut empty_since: Option<Instant> = None;
    loop {
        let unacked = stage.unacked();
        if unacked == 0 {
            let since = *empty_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(1) {
                return true;
            }
        } else {
            empty_since = None;
        }
        if unacked != last {
            last = unacked;
            moved = Instant::now();
        } else if unacked > 0 && moved.elapsed() > Duration::from_secs(2) {
            stage.emulators().clock().advance(LEASE_JUMP);
            moved = Instant::now();
        }
        if Instant::now() > deadline || is_cancelled(cancel) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
