//! The rollup flags ([`RollupFlags`]), validated into [`RollupSettings`],
//! from which [`Config::rollup`] builds the refresher's settings.
//!
//! Invariant: an interval is 0 (no rollups) or 10 ms..=1 h; a sweep
//! lookback is 0 (no sweep) or up to a week.

use std::time::Duration;

use super::{range, Config, ConfigError};
use crate::pipeline::rollup::RollupConfig;

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
