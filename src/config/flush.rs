//! Batching and commits: the flags that shape the aggregator and the
//! flusher ([`FlushFlags`]), validated into [`FlushSettings`], which
//! carries the flusher's own settings ([`FlushConfig`]).
//!
//! Invariants: with `per-event`, one message is a batch, flushed at once,
//! `--per-event-concurrency` in flight; a flush waits no longer than
//! `--flush-interval-ms`, a retry backs off at most a minute.

use std::time::Duration;

use super::{range, ConfigError};

/// `hotcount run`'s batching and commit flags.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Batching and commits")]
pub struct FlushFlags {
    /// In-memory aggregator shards, by (post, user) (a shard is in at most one batch in flight).
    #[arg(long, env = "HOTCOUNT_SHARDS", default_value_t = 16)]
    pub shards: usize,
    /// Flush when the oldest buffered event is this old, in milliseconds
    /// (the longest an event waits in memory while a commit slot is free).
    #[arg(long, env = "HOTCOUNT_FLUSH_INTERVAL_MS", default_value_t = 100)]
    pub flush_interval_ms: u64,
    /// With no commit in flight, flush once the oldest event is this old,
    /// in milliseconds (group commit: batches grow while commits are in flight).
    #[arg(long, env = "HOTCOUNT_FLUSH_MIN_WAIT_MS", default_value_t = 5)]
    pub flush_min_wait_ms: u64,
    /// Batches committed at once, at most (each a transaction over disjoint memberships).
    #[arg(long, env = "HOTCOUNT_MAX_COMMITS_IN_FLIGHT", default_value_t = 4)]
    pub max_commits_in_flight: usize,
    /// Flush at once when this many messages are buffered; the largest batch.
    #[arg(long, env = "HOTCOUNT_MAX_BATCH_EVENTS", default_value_t = 1000)]
    pub max_batch_events: usize,
    /// Commit attempts per batch before it is nacked.
    #[arg(long, env = "HOTCOUNT_COMMIT_MAX_ATTEMPTS", default_value_t = 8)]
    pub commit_max_attempts: u32,
    /// First commit retry backoff, in milliseconds (doubles, with jitter).
    #[arg(long, env = "HOTCOUNT_COMMIT_BACKOFF_INITIAL_MS", default_value_t = 20)]
    pub commit_backoff_initial_ms: u64,
    /// Largest commit retry backoff, in milliseconds.
    #[arg(long, env = "HOTCOUNT_COMMIT_BACKOFF_MAX_MS", default_value_t = 2000)]
    pub commit_backoff_max_ms: u64,
    /// After SIGTERM, at most this long is spent committing what is
    /// buffered: then retries stop, open transactions are rolled back and
    /// what did not commit is nacked, in seconds (fits Cloud Run's 10 s).
    #[arg(long, env = "HOTCOUNT_SHUTDOWN_DEADLINE_SECS", default_value_t = 8)]
    pub shutdown_deadline_secs: u64,
    /// `batched` (the design) or `per-event` (the naive baseline, for benchmarks).
    #[arg(long, env = "HOTCOUNT_STRATEGY", value_enum, default_value_t = Strategy::Batched)]
    pub strategy: Strategy,
    /// Transactions in flight with `--strategy per-event`.
    #[arg(long, env = "HOTCOUNT_PER_EVENT_CONCURRENCY", default_value_t = 64)]
    pub per_event_concurrency: usize,
}

/// What the batching flags validate into: the aggregator's shape and the
/// flusher's settings.
#[derive(Clone, Debug)]
pub struct FlushSettings {
    /// Batched or per-event.
    pub strategy: Strategy,
    /// Aggregator shards with `batched` (`--shards`; `per-event` has one
    /// per transaction in flight, `flusher.max_commits_in_flight`).
    pub shards: usize,
    /// Messages per batch at most.
    pub max_batch_events: usize,
    /// The flusher's settings, for this strategy.
    pub flusher: FlushConfig,
}

/// Flush and retry settings.
#[derive(Clone, Debug)]
pub struct FlushConfig {
    /// Flush once the oldest buffered message is this old, whatever else.
    pub flush_interval: Duration,
    /// With no commit in flight, flush once the oldest message is this old.
    pub flush_min_wait: Duration,
    /// Batches being committed at once, at most.
    pub max_commits_in_flight: usize,
    /// A flush splits what it takes over the free commit slots, but into
    /// batches of at least this many messages ([`crate::pipeline::flusher::split`]).
    pub split_min_events: usize,
    /// Commit attempts per batch before giving up (nack).
    pub commit_max_attempts: u32,
    /// First retry backoff; doubles per attempt, with jitter.
    pub backoff_initial: Duration,
    /// Largest retry backoff.
    pub backoff_max: Duration,
    /// A batch that met this many ABORTED attempts in a row (and nothing
    /// else) is split, so the events that can commit do and only the part
    /// on the contended documents keeps backing off (e.g. documents a
    /// killed replica's open transaction holds until it expires).
    pub split_after_aborts: u32,
    /// After the stop signal, commits may take this long: then no attempt
    /// is started or retried, open transactions are rolled back and what
    /// did not commit is nacked.
    pub shutdown_deadline: Duration,
}

impl Default for FlushConfig {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(100),
            flush_min_wait: Duration::from_millis(5),
            max_commits_in_flight: 4,
            split_min_events: 250,
            commit_max_attempts: 8,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_secs(2),
            split_after_aborts: 3,
            shutdown_deadline: Duration::from_secs(8),
        }
    }
}

/// How events become transactions.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Buffer per post, one transaction per batch (the design).
    Batched,
    /// The naive baseline: one transaction per event, several in flight,
    /// same parsing and membership semantics, ack after commit. Exists only
    /// to be measured against (docs/BENCHMARKS.md).
    PerEvent,
}

impl FlushFlags {
    /// Checks the batching flags; the first problem is reported with its
    /// flag. With `per-event`, the flusher flushes one message per batch
    /// at once, `--per-event-concurrency` in flight.
    pub fn validate(&self) -> Result<FlushSettings, ConfigError> {
        let shards = range("shards", self.shards, 1, 4096)?;
        let flush_interval = Duration::from_millis(range(
            "flush-interval-ms",
            self.flush_interval_ms,
            1,
            60_000,
        )?);
        let flush_min_wait = Duration::from_millis(range(
            "flush-min-wait-ms",
            self.flush_min_wait_ms,
            0,
            self.flush_interval_ms,
        )?);
        let max_commits_in_flight =
            range("max-commits-in-flight", self.max_commits_in_flight, 1, 256)?;
        let max_batch_events = range("max-batch-events", self.max_batch_events, 1, 10_000)?;
        let commit_max_attempts = range("commit-max-attempts", self.commit_max_attempts, 1, 100)?;
        let backoff_initial = Duration::from_millis(range(
            "commit-backoff-initial-ms",
            self.commit_backoff_initial_ms,
            1,
            60_000,
        )?);
        // A backoff past a minute would outlast the lease extension and
        // the shutdown deadline it must fit in.
        let backoff_max = Duration::from_millis(range(
            "commit-backoff-max-ms",
            self.commit_backoff_max_ms,
            self.commit_backoff_initial_ms.min(60_000),
            60_000,
        )?);
        let shutdown_deadline = Duration::from_secs(range(
            "shutdown-deadline-secs",
            self.shutdown_deadline_secs,
            1,
            3600,
        )?);
        let per_event_concurrency =
            range("per-event-concurrency", self.per_event_concurrency, 1, 4096)?;
        let retry = FlushConfig {
            commit_max_attempts,
            backoff_initial,
            backoff_max,
            shutdown_deadline,
            ..FlushConfig::default()
        };
        let flusher = match self.strategy {
            Strategy::Batched => FlushConfig {
                flush_interval,
                flush_min_wait,
                max_commits_in_flight,
                ..retry
            },
            Strategy::PerEvent => FlushConfig {
                flush_interval: Duration::ZERO,
                flush_min_wait: Duration::ZERO,
                max_commits_in_flight: per_event_concurrency,
                ..retry
            },
        };
        Ok(FlushSettings {
            strategy: self.strategy,
            shards,
            max_batch_events,
            flusher,
        })
    }
}
