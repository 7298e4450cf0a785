//! The fleet's milestone setting: read (or, none stored, stored) at start,
//! and followed while the service runs, so every replica and the refresher
//! record the same milestones.
//!
//! Invariant: a replica whose `--milestones` names another list than the
//! stored one refuses to start; a read that fails transiently is retried,
//! bounded, never taken for "no setting".

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::store::milestone::{list_text, MilestoneSetting, MilestoneStore, Thresholds};
use crate::store::selected::{SelectedDb, SelectedStore};
use crate::telemetry::Stats;

use super::ServiceError;

/// The fleet's milestone setting at start: the stored one, which a
/// `--milestones` naming another list refuses; none stored, the list this
/// replica names (`--milestones`, or the defaults with a webhook) is
/// stored for the fleet, and without either milestones are off.
pub async fn milestone_setting(
    store: &SelectedStore,
    config: &Config,
) -> Result<MilestoneSetting, ServiceError> {
    // A store that fails for a while (contention, a failover) delays the
    // start; only a refusal, or a failure past the bound, stops it.
    let deadline = tokio::time::Instant::now() + SETTING_RETRY_FOR;
    let mut pause = Duration::from_millis(100);
    loop {
        match milestone_setting_once(store, config).await {
            Err(ServiceError::MilestoneSetting(error))
                if error.is_retryable() && tokio::time::Instant::now() + pause < deadline =>
            {
                tracing::warn!(%error, "reading or storing the fleet's milestone setting failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// How long the start retries the milestone setting's transient failures.
pub(super) const SETTING_RETRY_FOR: Duration = Duration::from_secs(120);

pub(super) async fn milestone_setting_once(
    store: &SelectedStore,
    config: &Config,
) -> Result<MilestoneSetting, ServiceError> {
    let db = store.db();
    let stored = db
        .milestone_setting()
        .await
        .map_err(ServiceError::MilestoneSetting)?;
    let stored = match stored {
        Some(stored) => stored,
        None => {
            let named = (config.milestones.given.clone()).or_else(|| {
                config
                    .milestones
                    .notify
                    .as_ref()
                    .map(|m| m.thresholds.clone())
            });
            let Some(list) = named else {
                return Ok(MilestoneSetting::Off);
            };
            let stored = db
                .store_milestone_setting(&MilestoneSetting::On(list), true)
                .await
                .map_err(ServiceError::MilestoneSetting)?;
            tracing::info!(milestones = %stored.describe(), "no milestone setting was stored; this one is now the fleet's");
            stored
        }
    };
    if let Some(given) = &config.milestones.given {
        if stored != MilestoneSetting::On(given.clone()) {
            return Err(ServiceError::MilestonesDisagree {
                given: list_text(given),
                stored: stored.describe(),
            });
        }
    }
    Ok(stored)
}

/// Re-reads the fleet's milestone setting every `interval` (at least a
/// second) into `thresholds` until `stop` turns true, so a change
/// (`hotcount setup --milestones`) applies without a restart; a failed
/// read keeps the last one known.
pub(super) async fn follow_milestones(
    stats: Arc<Stats>,
    db: SelectedDb,
    thresholds: Thresholds,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_secs(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        match db.milestone_setting().await {
            Ok(setting) => {
                let setting = setting.unwrap_or(MilestoneSetting::Off);
                if thresholds.set(setting.thresholds()) {
                    tracing::info!(milestones = %setting.describe(), "the fleet's milestone setting changed; rollup writes record by it from now on");
                }
            }
            Err(error) => {
                if stats
                    .warnings
                    .admit("milestone setting reads failed", error.op)
                {
                    tracing::warn!(%error, "reading the fleet's milestone setting failed; recording by the last one read");
                }
            }
        }
    }
}
