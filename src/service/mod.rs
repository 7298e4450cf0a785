//! Wires the pipeline (source or push endpoint -> aggregator ->
//! flusher/store -> acker, and the rollup refresher and milestone
//! dispatcher beside it) and shuts it
//! down in pipeline order.
//!
//! Invariant: at shutdown the source stops pulling (or the push endpoint
//! stops admitting) first, then every shard is flushed and its batches
//! acked (or nacked), then the rollups of the posts changed are refreshed
//! (bounded), then the streams flush their acks (or the held push requests
//! have been answered); nothing buffered is dropped without an ack or a
//! nack.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{Config, Endpoints, Strategy};
use crate::connect;
use crate::pipeline::aggregator::Aggregator;
use crate::pipeline::push::{Push, PushConfig, PushHandle, PATH as PUSH_PATH};
use crate::pipeline::source::{DeadLetterPolicy, PubSubHandle, Source};
use crate::store::milestone::MilestoneSetting;
use crate::store::selected::SelectedStore;
use crate::store::StoreError;
use crate::telemetry::Stats;

mod background;
mod fleet_milestones;
mod flushing;

use background::{
    report_suppressed_warnings, watch_commits, watch_stage, MarkerCleanup, ProgressOf,
};
pub use fleet_milestones::milestone_setting;
use flushing::Flushing;

/// A running service failed to start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A client could not be built.
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
    /// The store could not be opened: an unusable PostgreSQL URL, or a
    /// schema `setup` has not brought to this build's migrations.
    #[error(transparent)]
    Store(#[from] connect::OpenError),
    /// The metrics or push endpoint could not bind.
    #[error(transparent)]
    Http(#[from] crate::http::HttpError),
    /// The milestone webhook's HTTP client could not be built.
    #[error("the milestone webhook client: {0}")]
    Webhook(#[from] reqwest::Error),
    /// `--milestones` names another list than the fleet's stored setting.
    #[error("--milestones {given} disagrees with the milestones stored for the fleet ({stored}): run with that list or without --milestones, or change the fleet's with `hotcount setup --milestones LIST` (or `--no-milestones`)")]
    MilestonesDisagree {
        /// The flag's list.
        given: String,
        /// The stored setting (`off` or a list).
        stored: String,
    },
    /// The fleet's milestone setting could not be read or stored.
    #[error("the fleet's milestone setting: {0}")]
    MilestoneSetting(StoreError),
}

/// Opens the store `config.target` names: Firestore (at
/// `endpoints`) or PostgreSQL, with a connection for each commit in flight;
/// refuses a PostgreSQL schema older than this build's ([`connect::store_db`])
/// and a data format newer than this build knows
/// ([`crate::store::format::check_known`], retried while the store fails
/// transiently, bounded). Returns the store and its data format.
pub async fn open_store(
    endpoints: &Endpoints,
    config: &Config,
) -> Result<(SelectedStore, u32), ServiceError> {
    let in_flight = config.flush.flusher.max_commits_in_flight;
    // One more for the marker cleanup, one for the rollup refresher, one spare.
    let (target, call_timeout) = (&config.target, config.store.call_timeout);
    let db = connect::store_db_within(endpoints, target, in_flight + 3, call_timeout).await?;
    let format = crate::store::format::check_known(&db)
        .await
        .map_err(connect::OpenError::from)?;
    tracing::debug!(data_format = format, "data format checked");
    Ok((
        SelectedStore::new(db, config.store.settings.clone()),
        format,
    ))
}

/// How long the HTTP endpoints may take, after the drain, to finish the
/// answers in progress (every held push request is settled by then).
const HTTP_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Runs the service until `stop` turns true, then drains. Returns the stats.
///
/// With `config.observability.metrics_addr` set, the metrics endpoint serves from start
/// (liveness at once; readiness once the source runs) until the drain ends;
/// its bound address is in `stats.metrics_addr`. With push delivery the
/// push endpoint serves from start too (503 until the pipeline is up), on
/// its own listener or, at the same address, on the metrics endpoint's;
/// its bound address is in `stats.push_addr`.
pub async fn run(
    endpoints: &Endpoints,
    config: &Config,
    stop: watch::Receiver<bool>,
    stats: Arc<Stats>,
) -> Result<Arc<Stats>, ServiceError> {
    let (http_stop_tx, http_stop) = watch::channel(false);
    let push = config.push.as_ref().map(|p| {
        let limits = crate::http::ConnectionLimits {
            max_connections: p.max_connections,
            header_read_timeout: p.header_read_timeout,
        };
        ((p.addr, limits), Push::new(p, stats.clone()))
    });
    let shared = push
        .as_ref()
        .is_some_and(|((addr, _), _)| Some(*addr) == config.observability.metrics_addr);
    // In a JoinSet: dropping this future (a crash in tests) ends them too.
    let mut servers = tokio::task::JoinSet::new();
    if let Some(addr) = config.observability.metrics_addr {
        let mut app = crate::http::router(stats.clone());
        if let (Some((_, push)), true) = (&push, shared) {
            app = app.merge(push.router());
        }
        let stop = http_stop.clone();
        let bound = crate::http::serve("metrics", addr, app, stop, &mut servers).await?;
        let _ = stats.metrics_addr.set(bound);
        if shared {
            let _ = stats.push_addr.set(bound);
        }
    }
    if let (Some(((addr, limits), push)), false) = (&push, shared) {
        let push = push.clone();
        // The hold cap: the accept loop's sweep answers a request past it.
        let hold_cap = Arc::new(push.clone());
        let route = (
            PUSH_PATH,
            move || {
                // An Arc per connection: each request clones the count of
                // its connection's, not the endpoint's, which every
                // connection on both cores would write (a contended line:
                // 1.7 % of a push run's CPU in that one clone).
                let connection = Arc::new(push.connection());
                move |request| Push::serve(connection.clone(), request)
            },
            hold_cap,
        );
        let bound = crate::http::serve_route(
            "push",
            *addr,
            route,
            (*limits, stats.clone()),
            http_stop,
            &mut servers,
        )
        .await?;
        let _ = stats.push_addr.set(bound);
    }
    let result = run_pipeline(endpoints, config, stop, stats, push.map(|(_, p)| p)).await;
    let _ = http_stop_tx.send(true);
    let closed = async { while servers.join_next().await.is_some() {} };
    if tokio::time::timeout(HTTP_CLOSE_WAIT, closed).await.is_err() {
        servers.abort_all();
    }
    result
}

/// The aggregator `config` asks for: one message per batch with
/// `per-event`, round robin over `--per-event-concurrency` shards (its flush
/// config flushes at once): one transaction per event, that many in flight.
fn aggregator<H: Send + 'static>(config: &Config, stats: &Stats) -> Arc<Aggregator<H>> {
    let flush = &config.flush;
    let aggregator = match flush.strategy {
        Strategy::Batched => Aggregator::new(flush.shards, flush.max_batch_events),
        Strategy::PerEvent => Aggregator::per_message(flush.flusher.max_commits_in_flight),
    };
    let aggregator = Arc::new(aggregator);
    let probe = Arc::downgrade(&aggregator);
    stats.buffered.set(Arc::new(move || match probe.upgrade() {
        Some(aggregator) => (0..aggregator.shard_count())
            .map(|shard| aggregator.len(shard) as u64)
            .collect(),
        None => Vec::new(),
    }));
    aggregator
}

/// What the pipeline's parts are started with from the store, read once
/// when it opens.
struct ReadAtStart {
    /// The fleet's milestone setting.
    milestones: MilestoneSetting,
    /// The store's data format ([`crate::store::format::check_known`]).
    data_format: u32,
}

async fn run_pipeline(
    endpoints: &Endpoints,
    config: &Config,
    stop: watch::Receiver<bool>,
    stats: Arc<Stats>,
    push: Option<Push>,
) -> Result<Arc<Stats>, ServiceError> {
    let (store, format) = open_store(endpoints, config).await?;
    let store = Arc::new(store);
    stats.data_format.set(u64::from(format));
    if format < crate::store::format::DATA_FORMAT_KNOWN {
        tracing::info!(
            data_format = format,
            known = crate::store::format::DATA_FORMAT_KNOWN,
            "the store's data format is below the newest this build knows: raise it \
             (`hotcount setup --data-format {}`) once no replica of an older build runs; \
             until then erasure tombstones are refused and, on Firestore with rollups on, \
             each post's first refresh reads every counter shard a post may have",
            crate::store::format::DATA_FORMAT_KNOWN
        );
    }
    let milestones = milestone_setting(&store, config).await?;
    tracing::info!(milestones = %milestones.describe(), "the fleet's milestone setting");
    let read = ReadAtStart {
        milestones,
        data_format: format,
    };
    // Beside the pipeline: ends when the source stops.
    let mut cleanup = tokio::task::JoinSet::new();
    if let (true, Some(interval)) = (
        store.db().sweeps_expired_markers(),
        config.store.marker_cleanup_interval,
    ) {
        let task = MarkerCleanup {
            db: store.db(),
            interval,
            batch_rows: config.store.marker_cleanup_batch_rows,
            stats: stats.clone(),
        };
        cleanup.spawn(task.run(stop.clone()));
    }
    cleanup.spawn(report_suppressed_warnings(stats.clone(), stop.clone()));
    cleanup.spawn(watch_commits(
        stats.clone(),
        config.observability.stuck_commit_threshold,
        stop.clone(),
    ));
    let stages: [(&'static str, ProgressOf); 2] = [
        ("rollups", |s| &s.rollup_progress),
        ("milestones", |s| &s.milestone_progress),
    ];
    for (stage, progress) in stages {
        let threshold = config.observability.stuck_commit_threshold;
        cleanup.spawn(watch_stage(
            stats.clone(),
            stage,
            progress,
            threshold,
            stop.clone(),
        ));
    }

    let admin = connect::subscription_admin(endpoints).await?;
    // Read once at start: its dead-letter policy and, for push, its ack
    // deadline.
    let subscription = admin
        .get_subscription()
        .set_subscription(&config.subscription)
        .send()
        .await;
    let dead_letters = DeadLetterPolicy::of(&subscription);
    dead_letters.log(&config.subscription);
    stats.dead_letter_policy.store(
        matches!(dead_letters, DeadLetterPolicy::Configured { .. }),
        std::sync::atomic::Ordering::Relaxed,
    );
    match push {
        None => run_pull(endpoints, config, stop, &stats, store, &read).await?,
        Some(push) => {
            let ack_deadline = Push::ack_deadline_of(&subscription, &config.subscription);
            run_push(config, stop, &stats, store, &read, ack_deadline, push).await?
        }
    }
    while cleanup.join_next().await.is_some() {}
    stats.warnings.flush(true);
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

/// Pulls until `stop`, then drains: the streams stop, the flusher drains,
/// the streams flush their acks.
async fn run_pull(
    endpoints: &Endpoints,
    config: &Config,
    stop: watch::Receiver<bool>,
    stats: &Arc<Stats>,
    store: Arc<SelectedStore>,
    read: &ReadAtStart,
) -> Result<(), ServiceError> {
    let subscriber = connect::subscriber(endpoints).await?;
    let aggregator: Arc<Aggregator<PubSubHandle>> = aggregator(config, stats);
    let flushing = Flushing::start(aggregator.clone(), store, stats, config, read).await?;
    let source = Source::new(subscriber, config.source.clone(), aggregator, stats.clone());
    tracing::info!(subscription = %config.subscription, consumer = %config.consumer, shards = config.flush.shards, streams = config.source.streams, strategy = ?config.flush.strategy, "hotcount running (pull)");
    // The flusher stops only after the source has stopped, so nothing new
    // arrives while the shards drain.
    stats.set_ready(true);
    let closing = source.run(stop).await;
    stats.set_ready(false);
    flushing.drain().await;
    closing.wait().await;
    Ok(())
}

/// Takes pushed messages until `stop`, then drains: the endpoint closes
/// (503 from then on), the flusher drains, settling (and so answering)
/// every request held.
async fn run_push(
    config: &Config,
    mut stop: watch::Receiver<bool>,
    stats: &Arc<Stats>,
    store: Arc<SelectedStore>,
    read: &ReadAtStart,
    ack_deadline: Option<Duration>,
    push: Push,
) -> Result<(), ServiceError> {
    let hold_max = PushConfig::hold_max_for(ack_deadline);
    let aggregator: Arc<Aggregator<PushHandle>> = aggregator(config, stats);
    let flushing = Flushing::start(aggregator.clone(), store, stats, config, read).await?;
    push.open(aggregator, hold_max).await;
    tracing::info!(subscription = %config.subscription, consumer = %config.consumer, shards = config.flush.shards, addr = ?stats.push_addr.get(), ?ack_deadline, ?hold_max, strategy = ?config.flush.strategy, "hotcount running (push)");
    stats.set_ready(true);
    let _ = stop.wait_for(|stopped| *stopped).await;
    push.close();
    stats.set_ready(false);
    flushing.drain().await;
    Ok(())
}
