//! Wires the pipeline (source -> aggregator -> flusher/store -> acker) and
//! shuts it down in pipeline order.
//!
//! Invariant: at shutdown the source stops pulling first, then every shard
//! is flushed and its batches acked (or nacked), then the streams flush their
//! acks; nothing buffered is dropped without an ack or a nack.

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::{Config, Endpoints, StoreLocation, Strategy, Target};
use crate::connect;
use crate::pipeline::acker::Acker;
use crate::pipeline::aggregator::Aggregator;
use crate::pipeline::flusher::Flusher;
use crate::pipeline::source::{DeadLetterPolicy, PubSubHandle, Source};
use crate::store::firestore::FirestoreStore;
use crate::store::postgres::{PgConfigError, PgDb, PgDbConfig, PostgresStore};
use crate::store::selected::SelectedStore;
use crate::telemetry::Stats;

/// A running service failed to start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A client could not be built.
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
    /// The PostgreSQL URL or pool settings cannot be used.
    #[error(transparent)]
    Postgres(#[from] PgConfigError),
    /// The metrics endpoint could not bind.
    #[error(transparent)]
    Http(#[from] crate::http::HttpError),
}

/// Opens the store `config.store_location` names: Firestore (at
/// `endpoints`) or PostgreSQL, with a connection for each commit in flight.
pub async fn open_store(
    endpoints: &Endpoints,
    config: &Config,
) -> Result<SelectedStore, ServiceError> {
    match &config.store_location {
        StoreLocation::Firestore => {
            let target = Target {
                store: StoreLocation::Firestore,
                project: config.project.clone(),
                database: config.database.clone(),
                collection_prefix: config.collection_prefix.clone(),
            };
            let db = connect::firestore_db(endpoints, &target).await?;
            Ok(SelectedStore::Firestore(FirestoreStore::new(
                db,
                config.store(),
            )))
        }
        StoreLocation::Postgres { url } => {
            let mut db_config = PgDbConfig::new(url.clone());
            let in_flight = match config.strategy {
                Strategy::Batched => config.max_commits_in_flight,
                Strategy::PerEvent => config.per_event_concurrency,
            };
            db_config.max_connections = db_config.max_connections.max(in_flight + 2);
            let db = PgDb::new(&db_config)?;
            Ok(SelectedStore::Postgres(PostgresStore::new(
                db,
                config.postgres_store(),
            )))
        }
    }
}

/// Runs the service until `stop` turns true, then drains. Returns the stats.
///
/// With `config.metrics_addr` set, the metrics endpoint serves from start
/// (liveness at once; readiness once the source runs) until the drain ends;
/// its bound address is in `stats.metrics_addr`.
pub async fn run(
    endpoints: &Endpoints,
    config: &Config,
    stop: watch::Receiver<bool>,
    stats: Arc<Stats>,
) -> Result<Arc<Stats>, ServiceError> {
    let (http_stop_tx, http_stop) = watch::channel(false);
    let http = match config.metrics_addr {
        Some(addr) => Some(crate::http::serve(addr, stats.clone(), http_stop).await?),
        None => None,
    };
    let result = run_pipeline(endpoints, config, stop, stats).await;
    let _ = http_stop_tx.send(true);
    if let Some(task) = http {
        let _ = task.await;
    }
    result
}

async fn run_pipeline(
    endpoints: &Endpoints,
    config: &Config,
    stop: watch::Receiver<bool>,
    stats: Arc<Stats>,
) -> Result<Arc<Stats>, ServiceError> {
    let store = Arc::new(open_store(endpoints, config).await?);
    let subscriber = connect::subscriber(endpoints).await?;
    let admin = connect::subscription_admin(endpoints).await?;
    let dead_letters = DeadLetterPolicy::of(&admin, &config.subscription).await;
    dead_letters.log(&config.subscription);
    stats.dead_letter_policy.store(
        matches!(dead_letters, DeadLetterPolicy::Configured { .. }),
        std::sync::atomic::Ordering::Relaxed,
    );
    // One message per batch with `per-event`, round robin over
    // `per_event_concurrency` shards (its flush config flushes at once):
    // one transaction per event, `per_event_concurrency` in flight.
    let aggregator = match config.strategy {
        Strategy::Batched => Aggregator::new(config.shards, config.max_batch_events),
        Strategy::PerEvent => Aggregator::per_message(config.per_event_concurrency),
    };
    let aggregator: Arc<Aggregator<PubSubHandle>> = Arc::new(aggregator);
    let probe = Arc::downgrade(&aggregator);
    stats.buffered.set(Arc::new(move || match probe.upgrade() {
        Some(aggregator) => (0..aggregator.shard_count())
            .map(|shard| aggregator.len(shard) as u64)
            .collect(),
        None => Vec::new(),
    }));
    let acker = Arc::new(Acker::new(stats.clone()));
    let flusher = Flusher::new(
        aggregator.clone(),
        store,
        acker,
        stats.clone(),
        config.flush(),
    );
    let source = Source::new(
        subscriber,
        config.source(),
        aggregator.clone(),
        stats.clone(),
    );
    tracing::info!(subscription = %config.subscription, consumer = %config.consumer, shards = config.shards, streams = config.streams, strategy = ?config.strategy, "hotcount running");

    // The flusher stops only after the source has stopped, so nothing new
    // arrives while the shards drain.
    let (flush_stop_tx, flush_stop) = watch::channel(false);
    // In a JoinSet, so dropping this future (a crash in tests) ends it too.
    let mut flushing = tokio::task::JoinSet::new();
    flushing.spawn(flusher.run(flush_stop));
    stats.set_ready(true);
    let closing = source.run(stop).await;
    stats.set_ready(false);
    let _ = flush_stop_tx.send(true);
    aggregator.wake();
    while let Some(result) = flushing.join_next().await {
        if let Err(error) = result {
            tracing::error!(%error, "flusher task failed");
        }
    }
    closing.wait().await;
    stats.buffered.clear();
    tracing::info!(
        received = stats.received.get(),
        applied = stats.applied.get(),
        acks = stats.acks.get(),
        nacks = stats.nacks.get(),
        "hotcount stopped"
    );
    Ok(stats)
}
