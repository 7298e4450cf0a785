//! The rollup flags ([`RollupFlags`]), validated into [`RollupSettings`],
//! from which [`Config::rollup`] builds the refresher's settings
//! ([`RollupConfig`]) with their defaults.
//!
//! Invariants: an interval is 0 (no rollups) or 10 ms..=1 h; a sweep
//! lookback is 0 (no sweep) or up to a week; a due record waits for its
//! own replica one interval plus [`TAKEOVER_MARGIN`] before another takes
//! it over, longer than a refresh takes (one interval, a deferral of
//! another).

use std::time::Duration;

use super::{range, Config, ConfigError};
use crate::store::milestone::Thresholds;

/// `hotcount run`'s rollup flags.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Rollups")]
pub struct RollupFlags {
    /// Refresh the rollup (`counts/{post}`, `post_counts`) of each post a
    /// commit changed at most once per this many milliseconds, fleet-wide
    /// (0 = no rollups).
    #[arg(long, env = "HOTCOUNT_ROLLUP_INTERVAL_MS", default_value_t = 1000)]
    pub rollup_interval_ms: u64,
    /// At start, check the rollups of posts whose counter shards changed
    /// within this many seconds (a refresh lost with a killed replica);
    /// 0 = no sweep.
    #[arg(
        long,
        env = "HOTCOUNT_ROLLUP_SWEEP_LOOKBACK_SECS",
        default_value_t = 900
    )]
    pub rollup_sweep_lookback_secs: u64,
}

/// What the rollup flags validate into.
#[derive(Clone, Debug)]
pub struct RollupSettings {
    /// At most one rollup refresh per post per this long; `None` = no rollups.
    pub interval: Option<Duration>,
    /// How far back the start-up sweep looks; `None` = no sweep.
    pub sweep_lookback: Option<Duration>,
}

impl RollupFlags {
    /// Checks the rollup flags; the first problem is reported with its flag.
    pub fn validate(&self) -> Result<RollupSettings, ConfigError> {
        let interval = match range("rollup-interval-ms", self.rollup_interval_ms, 0, 3_600_000)? {
            0 => None,
            ms => Some(Duration::from_millis(range(
                "rollup-interval-ms",
                ms,
                10,
                3_600_000,
            )?)),
        };
        let sweep_lookback = match range(
            "rollup-sweep-lookback-secs",
            self.rollup_sweep_lookback_secs,
            0,
            7 * 86_400,
        )? {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        };
        Ok(RollupSettings {
            interval,
            sweep_lookback,
        })
    }
}

impl Config {
    /// The rollup refresher's settings; `None` when rollups are off.
    pub fn rollup(&self) -> Option<RollupConfig> {
        let interval = self.rollups.interval?;
        Some(RollupConfig {
            sweep_lookback: self.rollups.sweep_lookback,
            ..RollupConfig::new(interval, self.store.settings.counter_shards)
        })
    }
}

/// The refresher's settings.
#[derive(Clone, Debug)]
pub struct RollupConfig {
    /// At most one refresh per post per interval, fleet-wide; the refresher
    /// runs a cycle every interval.
    pub interval: Duration,
    /// At start, posts whose counter shards changed within this long are
    /// checked (a refresh lost with a killed process); `None` = no sweep.
    pub sweep_lookback: Option<Duration>,
    /// Counter shards a post may have when its own are unknown.
    pub max_shards: u32,
    /// Posts read in one round trip, at most, when many are due (a
    /// backlog, the last refresh at shutdown).
    pub posts_per_read: usize,
    /// Rollups written in one round trip, at most, when many are due.
    pub writes_per_call: usize,
    /// Posts read in one small call, at most. A cycle reads and writes in
    /// small calls (`small_posts_per_read`, `small_writes_per_call`), one
    /// after another, until it has run half its interval, so a batch's
    /// commit does not queue in the store behind one long call; then (a
    /// backlog) in large ones, so the refresher keeps up. The last refresh
    /// at shutdown uses large calls, to fit its deadline.
    pub small_posts_per_read: usize,
    /// Rollups written in one small call, at most.
    pub small_writes_per_call: usize,
    /// At shutdown, how long the last refresh of every marked post may take.
    pub drain_timeout: Duration,
    /// Longest wait before a post whose refresh failed is tried again.
    pub max_backoff: Duration,
    /// The milestones a write records when it first reaches them, sorted
    /// ascending; empty: none (milestones off). A shared handle: the
    /// fleet's stored setting, re-read while the refresher runs.
    pub milestones: Thresholds,
    /// A due record left uncleared this long (store time since its
    /// commit, or its last takeover) is taken over by this refresher: its
    /// committing replica is gone or stuck. Longer than a refresh takes
    /// (one interval, a deferral of another) with a margin.
    pub takeover_after: Duration,
    /// How often the refresher looks for records to take over.
    pub takeover_every: Duration,
    /// Due records taken over in one round trip, at most.
    pub takeover_limit: usize,
    /// Every counter shard a post without a rollup has is one its due
    /// records name: no build that leaves shards unregistered writes this
    /// store (data format 2 and up, see `store::format`). When false, a
    /// post's first refresh reads every shard a post may have.
    pub shards_registered: bool,
}

impl RollupConfig {
    /// The defaults around `interval` and `max_shards`.
    pub fn new(interval: Duration, max_shards: u32) -> Self {
        Self {
            interval,
            sweep_lookback: Some(Duration::from_secs(900)),
            max_shards,
            posts_per_read: 2000,
            writes_per_call: 500,
            small_posts_per_read: 500,
            small_writes_per_call: 100,
            drain_timeout: Duration::from_secs(2),
            max_backoff: Duration::from_secs(10).max(interval),
            milestones: Thresholds::default(),
            takeover_after: interval + TAKEOVER_MARGIN,
            takeover_every: interval.clamp(Duration::from_millis(200), Duration::from_secs(2)),
            takeover_limit: 500,
            shards_registered: false,
        }
    }
}

/// How much longer than one interval a due record may wait for its own
/// replica before another takes it over.
pub const TAKEOVER_MARGIN: Duration = Duration::from_secs(5);
