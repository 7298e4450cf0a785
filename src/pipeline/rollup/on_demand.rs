//! Refreshes on demand, for the operator tools: every rollup of a list
//! of posts now, whatever its age ([`refresh_existing`], [`refresh_all`]).
//!
//! Invariants: each post is read over every counter shard it may have, so
//! shards no rollup registered yet are summed; each write records the
//! milestones it reaches first, as the refresher's do; `refresh_existing`
//! creates no rollup.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::refresher::Refresher;
use crate::config::RollupConfig;
use crate::store::milestone::Thresholds;
use crate::store::rollup::RollupStore;
use crate::telemetry::Stats;

/// Refreshes now, whatever their age, the rollups of `posts` that exist
/// (the operator tools, after changing counts: `replay`, `reconcile
/// --repair`), recording the `milestones` (the fleet's stored setting)
/// each write reaches first; returns how many were written. A post
/// without a rollup is left alone: rollups are the running service's,
/// which may have them off.
pub async fn refresh_existing<S: RollupStore>(
    store: Arc<S>,
    posts: &[String],
    max_shards: u32,
    milestones: &[i64],
) -> usize {
    refresh_now(store, posts, max_shards, milestones, true).await
}

/// Refreshes now, whatever their age, the rollups of `posts`, creating
/// those that do not exist (`hotcount rollups refresh`, after an upgrade
/// from a build that wrote counter shards no rollup registers); each post
/// is read over `max_shards` counter shards and its rollup registers those
/// that exist; a write records the `milestones` it reaches first. Returns
/// how many were written.
pub async fn refresh_all<S: RollupStore>(
    store: Arc<S>,
    posts: &[String],
    max_shards: u32,
    milestones: &[i64],
) -> usize {
    refresh_now(store, posts, max_shards, milestones, false).await
}

async fn refresh_now<S: RollupStore>(
    store: Arc<S>,
    posts: &[String],
    max_shards: u32,
    milestones: &[i64],
    existing_only: bool,
) -> usize {
    let config = RollupConfig {
        milestones: Thresholds::new(milestones),
        sweep_lookback: None,
        drain_timeout: Duration::from_secs(60).max(Duration::from_millis(posts.len() as u64)),
        ..RollupConfig::new(Duration::from_secs(1), max_shards)
    };
    let stats = Arc::new(Stats::default());
    let refresher = Refresher {
        existing_only,
        ..Refresher::new(store, config, stats.clone())
    };
    let now = Instant::now();
    // Every shard a post may have: a tool's refresh also sums shards no
    // rollup registered yet.
    for post in posts {
        refresher.marks.mark_post(post, None, max_shards, now);
    }
    refresher.drain().await;
    stats.rollup_refreshes.get() as usize
}
