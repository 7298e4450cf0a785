//! How events become transactions ([`Strategy`]) and what the flusher
//! takes from a [`Config`] ([`FlushConfig`]).
//!
//! Invariant: with `per-event`, one message is a batch, flushed at once.

use std::time::Duration;

use super::Config;

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

impl Config {
    /// The flusher's settings for this strategy: with `per-event`, one
    /// message per batch flushed at once, `per_event_concurrency` in flight.
    pub fn flush(&self) -> FlushConfig {
        let retry = FlushConfig {
            commit_max_attempts: self.commit_max_attempts,
            backoff_initial: self.commit_backoff_initial,
            backoff_max: self.commit_backoff_max,
            shutdown_deadline: self.shutdown_deadline,
            ..FlushConfig::default()
        };
        match self.strategy {
            Strategy::Batched => FlushConfig {
                flush_interval: self.flush_interval,
                flush_min_wait: self.flush_min_wait,
                max_commits_in_flight: self.max_commits_in_flight,
                ..retry
            },
            Strategy::PerEvent => FlushConfig {
                flush_interval: Duration::ZERO,
                flush_min_wait: Duration::ZERO,
                max_commits_in_flight: self.per_event_concurrency,
                ..retry
            },
        }
    }
}
