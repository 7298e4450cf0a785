//! How the service uses the store: its flags ([`StoreWriteFlags`]:
//! counter shards, batch markers and their cleanup, the call timeout),
//! validated into [`StoreConfig`], which carries the store's own settings
//! ([`StoreSettings`]).
//!
//! Invariant: a store call is bounded (100 ms..=10 min); a batch marker
//! outlives the subscription's retention (at least a day).

use std::time::Duration;

use super::store::{DEFAULT_COUNTER_SHARDS, DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC};
use super::{range, ConfigError};
use crate::store::selected::StoreSettings;

/// `hotcount run`'s flags of how counts are written and calls bounded.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Store writes")]
pub struct StoreWriteFlags {
    /// Counter shard documents per post, at most (a quiet post uses one; a
    /// post uses more as its increment rate grows).
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = DEFAULT_COUNTER_SHARDS)]
    pub counter_shards: u32,
    /// Increments per second one counter shard document should take; a post
    /// spreads over rate / this many shards (0 = every post uses all shards).
    #[arg(
        long,
        env = "HOTCOUNT_COUNTER_SHARD_TARGET_WRITES_PER_SEC",
        default_value_t = DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC
    )]
    pub counter_shard_target_writes_per_sec: u32,
    /// Batch marker lifetime (`expireAt`), in days: longer than the
    /// subscription's retention plus the longest replay window.
    #[arg(long, env = "HOTCOUNT_MARKER_TTL_DAYS", default_value_t = 40)]
    pub marker_ttl_days: u64,
    /// With `--store postgres://...`: how often expired batch markers are
    /// deleted, in seconds (0 = never, e.g. when `pg_cron` runs the same
    /// statement). Replicas may all run it: each skips rows another holds.
    #[arg(
        long,
        env = "HOTCOUNT_MARKER_CLEANUP_INTERVAL_SECS",
        default_value_t = 300
    )]
    pub marker_cleanup_interval_secs: u64,
    /// Expired batch markers one cleanup statement deletes at most (a
    /// cleanup runs at most 10 statements, then waits for the next interval).
    #[arg(
        long,
        env = "HOTCOUNT_MARKER_CLEANUP_BATCH_ROWS",
        default_value_t = 1000
    )]
    pub marker_cleanup_batch_rows: u32,
    /// Longest a store call may take, in milliseconds: a Firestore RPC, or
    /// a PostgreSQL commit attempt's round trips (also its
    /// `statement_timeout`). Past it the call is abandoned as
    /// DEADLINE_EXCEEDED and retried (a commit's outcome, if unknown, is
    /// resolved by its batch marker).
    #[arg(long, env = "HOTCOUNT_STORE_CALL_TIMEOUT_MS", default_value_t = 10_000)]
    pub store_call_timeout_ms: u64,
    /// Firestore: memberships this replica keeps known, in entries (~250
    /// bytes each, and 4 seen keys per entry at ~10 bytes each): a batch
    /// whose memberships are all known, or not seen here lately, commits in one
    /// round trip with no read, each write on the precondition of the state
    /// assumed (refused: read in a transaction). 0 = every batch is read in
    /// its transaction.
    #[arg(
        long,
        env = "HOTCOUNT_KNOWN_MEMBERSHIPS_ENTRIES",
        default_value_t = DEFAULT_KNOWN_MEMBERSHIPS_ENTRIES
    )]
    pub known_memberships_entries: usize,
}

/// `--known-memberships-entries` by default: ~60 MiB at most.
pub const DEFAULT_KNOWN_MEMBERSHIPS_ENTRIES: usize = 200_000;

/// What the store flags validate into.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The store's settings (the same for Firestore and PostgreSQL).
    pub settings: StoreSettings,
    /// Longest a store call may take.
    pub call_timeout: Duration,
    /// How often expired batch markers are deleted (PostgreSQL); `None` = never.
    pub marker_cleanup_interval: Option<Duration>,
    /// Expired batch markers deleted per cleanup statement, at most.
    pub marker_cleanup_batch_rows: i64,
}

impl StoreWriteFlags {
    /// Checks the store flags into the settings of a store written as
    /// `consumer`, leaving rollup due records when `due_records` (rollups on).
    pub fn validate(&self, consumer: &str, due_records: bool) -> Result<StoreConfig, ConfigError> {
        let counter_shards = range("counter-shards", self.counter_shards, 1, 1000)?;
        let counter_shard_target_writes_per_sec = range(
            "counter-shard-target-writes-per-sec",
            self.counter_shard_target_writes_per_sec,
            0,
            10_000,
        )?;
        let marker_ttl =
            Duration::from_secs(86_400 * range("marker-ttl-days", self.marker_ttl_days, 1, 3650)?);
        let marker_cleanup_interval = match range(
            "marker-cleanup-interval-secs",
            self.marker_cleanup_interval_secs,
            0,
            86_400,
        )? {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        };
        let marker_cleanup_batch_rows = i64::from(range(
            "marker-cleanup-batch-rows",
            self.marker_cleanup_batch_rows,
            1,
            100_000,
        )?);
        let call_timeout = Duration::from_millis(range(
            "store-call-timeout-ms",
            self.store_call_timeout_ms,
            100,
            600_000,
        )?);
        let known_memberships = range(
            "known-memberships-entries",
            self.known_memberships_entries,
            0,
            50_000_000,
        )?;
        Ok(StoreConfig {
            settings: StoreSettings {
                consumer: consumer.to_string(),
                counter_shards,
                counter_shard_target_writes_per_sec,
                marker_ttl,
                due_records,
                known_memberships,
            },
            call_timeout,
            marker_cleanup_interval,
            marker_cleanup_batch_rows,
        })
    }
}
