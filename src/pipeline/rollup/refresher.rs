//! The refresher of one process ([`Refresher`]): its store, marks,
//! settings and counter shard registry, and how it settles a mark and
//! reports a failed store call; what it does is in its siblings (`run.rs`,
//! `round.rs`, `records.rs`).
//!
//! Invariants: every mark is settled through [`Refresher::settle`], which
//! records the wait of each mark it clears; a failed call leaves each of
//! its posts marked (settled as failed, tried again after a backoff) and
//! its warnings are rate-limited.

use std::sync::Arc;

use tokio::time::Instant;

use super::marks::{Due, Marks, Settled};
use crate::config::RollupConfig;
use crate::store::counter_shards::ShardRegistry;
use crate::store::rollup::{Micros, RollupStore};
use crate::store::StoreError;
use crate::telemetry::Stats;

/// The summary name of the rate-limited failure warnings.
const REFRESH_FAILED: &str = "rollup refreshes failed";

/// The refresher of one process.
pub struct Refresher<S> {
    pub(super) store: Arc<S>,
    pub(super) marks: Arc<Marks>,
    pub(super) config: RollupConfig,
    pub(super) stats: Arc<Stats>,
    /// Where the counter shards each rollup registers are kept for the
    /// commits (Firestore), and the posts that need more.
    pub(super) registry: Option<Arc<ShardRegistry>>,
    /// Refresh only rollups that exist (the operator tools: a deployment
    /// without rollups gets none from them).
    pub(super) existing_only: bool,
    /// The store's clock less this process's, in microseconds, as last
    /// seen in a read's time (0 until then).
    pub(super) store_offset: std::sync::atomic::AtomicI64,
}

impl<S: RollupStore> Refresher<S> {
    /// A refresher writing `store`'s rollups with fresh, empty marks
    /// (for the flusher: [`Self::marks`]).
    pub fn new(store: Arc<S>, config: RollupConfig, stats: Arc<Stats>) -> Self {
        let marks = Arc::new(Marks::new(config.max_shards, config.max_backoff));
        Self {
            store,
            marks,
            config,
            stats,
            registry: None,
            existing_only: false,
            store_offset: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// This refresher, registering in each rollup the counter shards its
    /// post's commits ask `registry` for, and telling `registry` what each
    /// rollup it reads or writes registers.
    pub fn with_registry(self, registry: Option<Arc<ShardRegistry>>) -> Self {
        Self { registry, ..self }
    }

    /// The marks the flusher fills.
    pub fn marks(&self) -> &Arc<Marks> {
        &self.marks
    }

    /// Settles `due`'s mark as `settled` by a read at `read_time`, recording
    /// its wait when that clears it.
    pub(super) fn settle(
        &self,
        due: &Due,
        read_time: Option<Micros>,
        settled: Settled,
        now: Instant,
    ) {
        if let Some(waited) = self.marks.settle(due, read_time, settled, now) {
            self.stats.rollup_lag.record(waited);
        }
    }

    /// A call for `due` failed: each is tried again after a backoff.
    pub(super) fn failed<'a>(
        &self,
        due: impl ExactSizeIterator<Item = &'a Due>,
        read_time: Option<Micros>,
        error: &StoreError,
    ) {
        self.warn_failed(due.len(), error);
        let now = Instant::now();
        for d in due {
            self.settle(d, read_time, Settled::Failed, now);
        }
    }

    /// Counts `posts` failed refreshes and warns, rate-limited.
    pub(super) fn warn_failed(&self, posts: usize, error: &StoreError) {
        self.stats.rollup_failures.add(posts as u64);
        if self.stats.warnings.admit(REFRESH_FAILED, error.op) {
            tracing::warn!(%error, posts, "rollup refresh failed; the posts stay marked and are tried again");
        }
    }
}
