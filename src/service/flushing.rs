//! One aggregator's flusher and the rollup refresher beside it, from start
//! to drain, and the tombstones they check against.
//!
//! Invariant: the drain flushes every shard and settles (acks or nacks)
//! every batch before the refresher is stopped, so nothing buffered is
//! dropped without an ack or a nack.

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::Config;
use crate::pipeline::acker::{AckHandle, Acker};
use crate::pipeline::aggregator::Aggregator;
use crate::pipeline::flusher::{Flusher, Tombstones};
use crate::pipeline::milestones::{Dispatcher, Webhook};
use crate::pipeline::rollup::Refresher;
use crate::store::milestone::Thresholds;
use crate::store::selected::SelectedStore;
use crate::telemetry::Stats;

use super::fleet_milestones::follow_milestones;
use super::{ReadAtStart, ServiceError};

/// Re-reads the erased users' tombstones into `tombstones`; a failed read
/// keeps the set held (logged).
pub(super) async fn refresh_tombstones(
    db: &crate::store::selected::SelectedDb,
    tombstones: &Tombstones,
) {
    match db.tombstone_state().await {
        Ok(state) => tombstones.replace(state),
        Err(error) => {
            tracing::warn!(%error, "reading the erased users' tombstones failed; keeping the set held")
        }
    }
}

/// The flusher of one aggregator, and the rollup refresher beside it,
/// running until [`Flushing::drain`].
pub(super) struct Flushing<H> {
    aggregator: Arc<Aggregator<H>>,
    stop: watch::Sender<bool>,
    // In a JoinSet, so dropping this (a crash in tests) ends it too.
    task: tokio::task::JoinSet<()>,
    rollup_stop: watch::Sender<bool>,
    rollups: tokio::task::JoinSet<()>,
}

impl<H: AckHandle> Flushing<H> {
    /// Starts the flusher over `aggregator`, committing into `store`.
    pub(super) async fn start(
        aggregator: Arc<Aggregator<H>>,
        store: Arc<SelectedStore>,
        stats: &Arc<Stats>,
        config: &Config,
        read: &ReadAtStart,
    ) -> Result<Self, ServiceError> {
        let acker = Arc::new(Acker::new(stats.clone()));
        let mut flusher = Flusher::new(
            aggregator.clone(),
            store.clone(),
            acker,
            stats.clone(),
            config.flush.flusher.clone(),
        );
        // Beside the pipeline, after the flusher: stops once the flusher
        // has drained, so the last commits' posts are refreshed too.
        let (rollup_stop, rollup_stopped) = watch::channel(false);
        let mut rollups = tokio::task::JoinSet::new();
        if let Some(mut rollup) = config.rollup() {
            // As the store was at start: a raise is followed at the next
            // start.
            rollup.shards_registered =
                read.data_format >= crate::store::format::DATA_FORMAT_REGISTERED_SHARDS;
            // The fleet's milestones, followed while running.
            let thresholds = Thresholds::new(read.milestones.thresholds());
            rollup.milestones = thresholds.clone();
            let interval = rollup.interval;
            rollups.spawn(follow_milestones(
                stats.clone(),
                store.db(),
                thresholds,
                interval,
                rollup_stopped.clone(),
            ));
            let refresher = Refresher::new(Arc::new(store.db()), rollup, stats.clone())
                .with_registry(store.shard_registry());
            flusher = flusher.with_rollups(refresher.marks().clone());
            rollups.spawn(refresher.run(rollup_stopped.clone()));
        }
        // Beside the pipeline: delivers the milestones the rollup writes
        // record; stops with the refresher (a round under way finishes).
        if let Some(notify) = &config.milestones.notify {
            let webhook = Webhook::new(
                notify.webhook.clone(),
                notify.secret.as_ref().map(crate::config::Secret::expose),
                &config.consumer,
                notify.request_timeout,
            )?
            .with_previous_secret(
                notify
                    .previous_secret
                    .as_ref()
                    .map(crate::config::Secret::expose),
            );
            let dispatcher = Dispatcher::new(
                Arc::new(store.db()),
                webhook,
                notify.dispatch(),
                stats.clone(),
            );
            tracing::info!(
                webhook_host = notify.webhook.host_str().unwrap_or_default(),
                signed = notify.secret.is_some(),
                rotating = notify.previous_secret.is_some(),
                "milestone notifications on: this replica sends the milestones recorded"
            );
            rollups.spawn(dispatcher.run(rollup_stopped));
        }
        let (stop, flush_stop) = watch::channel(false);
        let mut task = tokio::task::JoinSet::new();
        if let Some(key) = &config.erasure.user_hash_key {
            let tombstones = Arc::new(Tombstones::new(key.expose().as_bytes()));
            flusher = flusher.with_tombstones(tombstones.clone());
            let db = store.db();
            let every = config.erasure.tombstone_refresh;
            let mut stopped = flush_stop.clone();
            // Read once before the flusher starts, then every interval.
            refresh_tombstones(&db, &tombstones).await;
            task.spawn(async move {
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        _ = stopped.changed() => return,
                    }
                    refresh_tombstones(&db, &tombstones).await;
                }
            });
        }
        task.spawn(flusher.run(flush_stop));
        Ok(Self {
            aggregator,
            stop,
            task,
            rollup_stop,
            rollups,
        })
    }

    /// Stops the flusher (call once nothing new can arrive): it drains
    /// every shard, settling every handle, and ends; then the refresher
    /// refreshes the posts those last commits changed (bounded) and ends.
    pub(super) async fn drain(mut self) {
        let _ = self.stop.send(true);
        self.aggregator.wake();
        while let Some(result) = self.task.join_next().await {
            if let Err(error) = result {
                tracing::error!(%error, "flusher task failed");
            }
        }
        let _ = self.rollup_stop.send(true);
        while self.rollups.join_next().await.is_some() {}
    }
}
