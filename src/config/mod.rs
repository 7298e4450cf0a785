//! Typed, validated settings of `hotcount run`, and where the services are.
//!
//! Invariant: a [`Config`] only exists validated ([`RunArgs::validate`]);
//! every duration and size carries its unit in its name. Each stage takes
//! its own settings from it ([`Config::source`], [`Config::flush`],
//! [`Config::store`]); the flags' defaults live with their flags. One
//! module per concern: [`RunArgs`]'s flags (`run_args.rs`) and their
//! validation (`validate.rs`), the store flags every command shares
//! (`store.rs`), secrets and `--…-file` flags (`secret.rs`), push
//! (`push.rs`), milestones (`milestones.rs`), the source's and the
//! flusher's settings (`source.rs`, `flush.rs`), Pub/Sub names
//! (`pubsub_names.rs`).

use std::time::Duration;

mod flush;
mod milestones;
mod pubsub_names;
mod push;
mod rollup;
mod run_args;
mod secret;
mod source;
mod store;
mod validate;

pub use flush::{FlushConfig, Strategy};
pub use milestones::{parse_milestones, DispatchConfig, MilestoneSettings, DEFAULT_MILESTONES};
pub use pubsub_names::{check_pubsub_id, subscription_name};
pub use push::{
    AuthConfig, Delivery, GoogleAuth, PushAuthMode, PushConfig, CLOUD_RUN_SERVICE_ENV,
    DEFAULT_PUSH_JWKS_URL, MIN_ACK_DEADLINE,
};
pub use rollup::{RollupConfig, TAKEOVER_MARGIN};
pub use run_args::RunArgs;
pub use secret::{read_secret_file, FileParser, FromFile, Secret};
pub use source::SourceConfig;
pub use store::{
    Endpoints, StoreFlags, StoreLocation, StoreLocationParser, Target, TargetFlags,
    DEFAULT_COUNTER_SHARDS, DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC,
};
pub use validate::metrics_addr;

/// Validated settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The store.
    pub store_location: StoreLocation,
    /// Project id.
    pub project: String,
    /// Database id.
    pub database: String,
    /// Collection prefix.
    pub collection_prefix: String,
    /// Full subscription name.
    pub subscription: String,
    /// Consumer name.
    pub consumer: String,
    /// Aggregator shards.
    pub shards: usize,
    /// Counter shards per post, at most.
    pub counter_shards: u32,
    /// Increments per second per counter shard document (0 = fixed count).
    pub counter_shard_target_writes_per_sec: u32,
    /// Longest wait of a buffered event while a commit slot is free.
    pub flush_interval: Duration,
    /// Wait before an eager flush when no commit is in flight.
    pub flush_min_wait: Duration,
    /// Batches committed at once, at most.
    pub max_commits_in_flight: usize,
    /// Messages per batch at most.
    pub max_batch_events: usize,
    /// Flow control, messages per stream.
    pub max_outstanding_messages: i64,
    /// Flow control, bytes per stream.
    pub max_outstanding_bytes: i64,
    /// StreamingPull streams.
    pub streams: usize,
    /// Lease extension asked for.
    pub lease_extension: Duration,
    /// Commit attempts per batch.
    pub commit_max_attempts: u32,
    /// First retry backoff.
    pub commit_backoff_initial: Duration,
    /// Largest retry backoff.
    pub commit_backoff_max: Duration,
    /// Batch marker lifetime.
    pub marker_ttl: Duration,
    /// How often expired batch markers are deleted (PostgreSQL); `None` = never.
    pub marker_cleanup_interval: Option<Duration>,
    /// Expired batch markers deleted per cleanup statement, at most.
    pub marker_cleanup_batch_rows: i64,
    /// Longest drain after a stop signal.
    pub shutdown_deadline: Duration,
    /// Batched or per-event.
    pub strategy: Strategy,
    /// Transactions in flight with the per-event strategy.
    pub per_event_concurrency: usize,
    /// Where the metrics endpoint listens; `None` = no endpoint.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// At most one rollup refresh per post per this long; `None` = no rollups.
    pub rollup_interval: Option<Duration>,
    /// How far back the start-up sweep looks; `None` = no sweep.
    pub rollup_sweep_lookback: Option<Duration>,
    /// With `--delivery push`, the push endpoint's settings; `None` = pull.
    pub push: Option<PushConfig>,
    /// Longest a store call may take.
    pub store_call_timeout: Duration,
    /// No commit for this long while commits are in flight: not ready.
    pub stuck_commit_threshold: Duration,
    /// Milestone notifications; `None` = no webhook (this replica records
    /// milestones by the stored setting, and sends none).
    pub milestones: Option<MilestoneSettings>,
    /// The `--milestones` list given, if any: it must match the stored one.
    pub milestones_given: Option<Vec<i64>>,
    /// The tombstones' hash key; `None` (or empty) = no tombstone check.
    pub user_hash_key: Option<Secret>,
    /// How often the tombstones are re-read.
    pub tombstone_refresh: Duration,
}

/// A setting that is out of range, with what is allowed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid --{flag}: {reason}")]
pub struct ConfigError {
    /// The flag.
    pub flag: &'static str,
    /// What is wrong and what is allowed.
    pub reason: String,
}

fn range<T: PartialOrd + std::fmt::Display>(
    flag: &'static str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError {
            flag,
            reason: format!("{v} is outside {lo}..={hi}"),
        });
    }
    Ok(v)
}

impl Config {
    /// The rollup refresher's settings; `None` when rollups are off.
    pub fn rollup(&self) -> Option<RollupConfig> {
        let interval = self.rollup_interval?;
        Some(RollupConfig {
            sweep_lookback: self.rollup_sweep_lookback,
            ..RollupConfig::new(interval, self.counter_shards)
        })
    }
}

#[cfg(test)]
mod tests;
