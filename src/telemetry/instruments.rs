//! The instruments the pipeline updates: thin handles over
//! `prometheus-client`'s metrics, with the verbs the pipeline uses.
//!
//! Invariant: a handle and its registered copy share one value (the
//! crate's metrics are `Arc`s inside), so what the pipeline records is what
//! a scrape reads; counters only grow and levels never go below zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::{counter, gauge, histogram};

/// A monotonically increasing counter.
#[derive(Clone, Debug, Default)]
pub struct Counter(pub(super) counter::Counter<u64, AtomicU64>);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.inc_by(n);
    }

    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A level that goes up and down, with its high-water mark.
#[derive(Clone, Debug, Default)]
pub struct Level {
    pub(super) now: gauge::Gauge<u64, AtomicU64>,
    pub(super) max: gauge::Gauge<u64, AtomicU64>,
}

impl Level {
    /// Raises the level by `n`.
    pub fn inc(&self, n: u64) {
        let level = self.now.inc_by(n) + n;
        self.max.inner().fetch_max(level, Ordering::Relaxed);
    }

    /// Lowers the level by `n` (never below zero).
    pub fn dec(&self, n: u64) {
        let _ = self
            .now
            .inner()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Sets the level to `n`.
    pub fn set(&self, n: u64) {
        self.now.set(n);
        self.max.inner().fetch_max(n, Ordering::Relaxed);
    }

    /// Current level.
    pub fn get(&self) -> u64 {
        self.now.get()
    }

    /// Highest level seen.
    pub fn max(&self) -> u64 {
        self.max.get()
    }
}

/// A latency histogram, observed in seconds (buckets in [`super::names`]).
#[derive(Clone, Debug)]
pub struct Latency(pub(super) histogram::Histogram);

impl Latency {
    pub(super) fn new(buckets: &[f64]) -> Self {
        Self(histogram::Histogram::new(buckets.iter().copied()))
    }

    /// Records one sample.
    pub fn record(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }

    /// Records the time elapsed since each of `starts` (clock skew counts as 0).
    pub fn record_since(&self, starts: &[SystemTime]) {
        let now = SystemTime::now();
        for start in starts {
            let d = now.duration_since(*start).unwrap_or_default();
            self.0.observe(d.as_secs_f64());
        }
    }
}

/// A distribution of sizes (e.g. messages per batch).
#[derive(Clone, Debug)]
pub struct Sizes(pub(super) histogram::Histogram);

impl Sizes {
    pub(super) fn new(buckets: &[f64]) -> Self {
        Self(histogram::Histogram::new(buckets.iter().copied()))
    }

    /// Records one sample.
    pub fn record(&self, n: u64) {
        self.0.observe(n as f64);
    }
}

/// Reads a per-shard level at scrape time (set by the service, cleared when it stops).
#[derive(Default)]
pub struct ShardLevels(parking_lot::RwLock<Option<LevelProbe>>);

/// A function returning one level per shard.
pub type LevelProbe = Arc<dyn Fn() -> Vec<u64> + Send + Sync>;

impl std::fmt::Debug for ShardLevels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ShardLevels").field(&self.read()).finish()
    }
}

impl ShardLevels {
    /// Installs the probe (replacing any earlier one).
    pub fn set(&self, probe: LevelProbe) {
        *self.0.write() = Some(probe);
    }

    /// Removes the probe: every shard reads as absent.
    pub fn clear(&self) {
        *self.0.write() = None;
    }

    /// The current level of each shard (empty without a probe).
    pub fn read(&self) -> Vec<u64> {
        let probe = self.0.read().clone();
        probe.map(|p| p()).unwrap_or_default()
    }
}
