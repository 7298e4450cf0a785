//! The refresher's settings ([`RollupConfig`]) and their defaults.
//!
//! Invariant: a due record waits for its own replica one interval plus
//! [`TAKEOVER_MARGIN`] before another takes it over, longer than a refresh
//! takes (one interval, a deferral of another).

use std::time::Duration;

use crate::store::milestone::Thresholds;

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
    /// Posts read in one round trip, at most.
    pub posts_per_read: usize,
    /// Rollups written in one round trip, at most.
    pub writes_per_call: usize,
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
