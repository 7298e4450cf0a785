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
use crate::pipeline::acker::{AckHandle, Acker};
use crate::pipeline::aggregator::Aggregator;
use crate::pipeline::flusher::{Flusher, Tombstones};
use crate::pipeline::milestones::{Dispatcher, Webhook};
use crate::pipeline::push::{Push, PushConfig, PushHandle, PATH as PUSH_PATH};
use crate::pipeline::rollup::Refresher;
use crate::pipeline::source::{DeadLetterPolicy, PubSubHandle, Source};
use crate::store::milestone::{list_text, MilestoneSetting, MilestoneStore, Thresholds};
use crate::store::selected::{SelectedDb, SelectedStore};
use crate::store::StoreError;
use crate::telemetry::{CommitProgress, Stall, Stats};

/// Statements one marker cleanup runs at most before it waits for the
/// next interval (so one cleanup is bounded however large the backlog).
const MARKER_CLEANUP_STATEMENTS: u32 = 10;

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

/// The fleet's milestone setting at start: the stored one, which a
/// `--milestones` naming another list refuses; none stored, the list this
/// replica names (`--milestones`, or the defaults with a webhook) is
/// stored for the fleet, and without either milestones are off.
pub async fn milestone_setting(
    store: &SelectedStore,
    config: &Config,
) -> Result<MilestoneSetting, ServiceError> {
    // A store that fails for a while (contention, a failover) delays the
    // start; only a refusal, or a failure past the bound, stops it.
    let deadline = tokio::time::Instant::now() + SETTING_RETRY_FOR;
    let mut pause = Duration::from_millis(100);
    loop {
        match milestone_setting_once(store, config).await {
            Err(ServiceError::MilestoneSetting(error))
                if error.is_retryable() && tokio::time::Instant::now() + pause < deadline =>
            {
                tracing::warn!(%error, "reading or storing the fleet's milestone setting failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// How long the start retries the milestone setting's transient failures.
const SETTING_RETRY_FOR: Duration = Duration::from_secs(120);

async fn milestone_setting_once(
    store: &SelectedStore,
    config: &Config,
) -> Result<MilestoneSetting, ServiceError> {
    let db = store.db();
    let stored = db
        .milestone_setting()
        .await
        .map_err(ServiceError::MilestoneSetting)?;
    let stored = match stored {
        Some(stored) => stored,
        None => {
            let named = (config.milestones_given.clone())
                .or_else(|| config.milestones.as_ref().map(|m| m.thresholds.clone()));
            let Some(list) = named else {
                return Ok(MilestoneSetting::Off);
            };
            let stored = db
                .store_milestone_setting(&MilestoneSetting::On(list), true)
                .await
                .map_err(ServiceError::MilestoneSetting)?;
            tracing::info!(milestones = %stored.describe(), "no milestone setting was stored; this one is now the fleet's");
            stored
        }
    };
    if let Some(given) = &config.milestones_given {
        if stored != MilestoneSetting::On(given.clone()) {
            return Err(ServiceError::MilestonesDisagree {
                given: list_text(given),
                stored: stored.describe(),
            });
        }
    }
    Ok(stored)
}

/// Re-reads the fleet's milestone setting every `interval` (at least a
/// second) into `thresholds` until `stop` turns true, so a change
/// (`hotcount setup --milestones`) applies without a restart; a failed
/// read keeps the last one known.
async fn follow_milestones(
    stats: Arc<Stats>,
    db: SelectedDb,
    thresholds: Thresholds,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_secs(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        match db.milestone_setting().await {
            Ok(setting) => {
                let setting = setting.unwrap_or(MilestoneSetting::Off);
                if thresholds.set(setting.thresholds()) {
                    tracing::info!(milestones = %setting.describe(), "the fleet's milestone setting changed; rollup writes record by it from now on");
                }
            }
            Err(error) => {
                if stats
                    .warnings
                    .admit("milestone setting reads failed", error.op)
                {
                    tracing::warn!(%error, "reading the fleet's milestone setting failed; recording by the last one read");
                }
            }
        }
    }
}

/// Opens the store `config.store_location` names: Firestore (at
/// `endpoints`) or PostgreSQL, with a connection for each commit in flight;
/// refuses a PostgreSQL schema older than this build's ([`connect::store_db`])
/// and a data format newer than this build knows
/// ([`crate::store::format::check_known`], retried while the store fails
/// transiently, bounded).
pub async fn open_store(
    endpoints: &Endpoints,
    config: &Config,
) -> Result<SelectedStore, ServiceError> {
    let in_flight = match config.strategy {
        Strategy::Batched => config.max_commits_in_flight,
        Strategy::PerEvent => config.per_event_concurrency,
    };
    // One more for the marker cleanup, one for the rollup refresher, one spare.
    let target = config.target();
    let db = connect::store_db_within(endpoints, &target, in_flight + 3, config.store_call_timeout)
        .await?;
    let format = crate::store::format::check_known(&db)
        .await
        .map_err(connect::OpenError::from)?;
    tracing::debug!(data_format = format, "data format checked");
    Ok(SelectedStore::new(db, config.store()))
}

/// Deletes a PostgreSQL store's expired batch markers every `interval`:
/// up to [`MARKER_CLEANUP_STATEMENTS`] statements of at most `batch_rows`
/// rows each, so one cleanup is bounded. A failure is logged and the
/// cleanup tried again at the next interval; it never stops the service.
struct MarkerCleanup {
    db: SelectedDb,
    interval: Duration,
    batch_rows: i64,
    stats: Arc<Stats>,
}

impl MarkerCleanup {
    /// Cleans up at start and every interval until `stop` turns true; a
    /// cleanup running then is abandoned at once (its statement's
    /// connection closed, so the server rolls it back): the next replica's
    /// cleanup deletes those markers, and the drain never waits for it.
    async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            tokio::select! {
                _ = self.clean() => {}
                _ = stop.wait_for(|stopped| *stopped) => {
                    tracing::info!("expired batch marker cleanup abandoned at shutdown");
                    return;
                }
            }
        }
    }

    /// One bounded cleanup; returns how many markers it deleted.
    async fn clean(&self) -> u64 {
        let mut deleted = 0;
        for _ in 0..MARKER_CLEANUP_STATEMENTS {
            match self.db.delete_expired_markers(self.batch_rows).await {
                Ok(n) => {
                    deleted += n;
                    self.stats.markers_deleted.add(n);
                    if n < self.batch_rows.unsigned_abs() {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "deleting expired batch markers failed; trying again at the next interval");
                    break;
                }
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "expired batch markers deleted");
        }
        deleted
    }
}

/// Watches `progress` every tenth of `threshold` until `stop` turns true:
/// while it has work and nothing was answered for `threshold`, the replica
/// is stalled (not ready, its gauge 1); `say` is told of each change (the
/// stall, or `None` when it ends). Stopping clears the stall: the drain's
/// readiness is the source's.
async fn watch_progress(
    progress: &CommitProgress,
    threshold: Duration,
    mut stop: watch::Receiver<bool>,
    say: impl Fn(Option<&Stall>),
) {
    let period = (threshold / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
        let stall = progress.check(threshold);
        if progress.set_stalled(stall.is_some()) {
            say(stall.as_ref());
        }
    }
    progress.set_stalled(false);
}

/// The commits' watch: while batches are being committed and none has
/// committed for `threshold`, the replica is stalled
/// (`hotcount_commits_stalled` 1), said once at WARN with why; the first
/// commit that succeeds ends it, said at INFO.
async fn watch_commits(stats: Arc<Stats>, threshold: Duration, stop: watch::Receiver<bool>) {
    watch_progress(&stats.commit_progress, threshold, stop, |stall| match stall {
        Some(stall) => tracing::warn!(
            no_commit_for_secs = stall.for_how_long.as_secs(),
            batches_in_flight = stall.in_flight,
            last_error = stall.last_error.as_deref().unwrap_or("none"),
            threshold_secs = threshold.as_secs(),
            "commits stalled: no batch has committed for longer than --stuck-commit-threshold-secs while batches wait on the store; reporting not ready until one commits (nothing is acked meanwhile)"
        ),
        None => tracing::info!("commits go through again; ready"),
    })
    .await;
}

/// Which progress of [`Stats`] a stage's watch judges.
type ProgressOf = fn(&Stats) -> &CommitProgress;

/// A stage beside the pipeline (`stage`: the refresher, the milestone
/// dispatcher) whose `progress` had work and no store call answered for
/// `threshold` is stalled: the replica is not ready
/// (`hotcount_stage_stalled{stage}` 1), said once per change.
async fn watch_stage(
    stats: Arc<Stats>,
    stage: &'static str,
    progress: ProgressOf,
    threshold: Duration,
    stop: watch::Receiver<bool>,
) {
    watch_progress(progress(&stats), threshold, stop, |stall| match stall {
        Some(stall) => tracing::warn!(
            stage,
            no_answer_for_secs = stall.for_how_long.as_secs(),
            last_error = stall.last_error.as_deref().unwrap_or("none"),
            threshold_secs = threshold.as_secs(),
            "a stage beside the pipeline is stalled: none of its store calls has been answered for longer than --stuck-commit-threshold-secs while it had work; reporting not ready until one is"
        ),
        None => tracing::info!(stage, "the stage's store calls are answered again; ready"),
    })
    .await;
}

/// Prints the summary lines of the rate-limited warnings every interval
/// (so a storm's count is reported even when nothing follows it) until
/// `stop` turns true; the last ones after the drain, by [`run_pipeline`].
async fn report_suppressed_warnings(stats: Arc<Stats>, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(stats.warnings.interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => stats.warnings.flush(false),
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// How long the HTTP endpoints may take, after the drain, to finish the
/// answers in progress (every held push request is settled by then).
const HTTP_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Runs the service until `stop` turns true, then drains. Returns the stats.
///
/// With `config.metrics_addr` set, the metrics endpoint serves from start
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
        .is_some_and(|((addr, _), _)| Some(*addr) == config.metrics_addr);
    // In a JoinSet: dropping this future (a crash in tests) ends them too.
    let mut servers = tokio::task::JoinSet::new();
    if let Some(addr) = config.metrics_addr {
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
        let route = (PUSH_PATH, move |request| {
            let push = push.clone();
            async move { push.handle(request).await }
        });
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
/// `per-event`, round robin over `per_event_concurrency` shards (its flush
/// config flushes at once): one transaction per event, that many in flight.
fn aggregator<H: Send + 'static>(config: &Config, stats: &Stats) -> Arc<Aggregator<H>> {
    let aggregator = match config.strategy {
        Strategy::Batched => Aggregator::new(config.shards, config.max_batch_events),
        Strategy::PerEvent => Aggregator::per_message(config.per_event_concurrency),
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

/// Re-reads the erased users' tombstones into `tombstones`; a failed read
/// keeps the set held (logged).
async fn refresh_tombstones(db: &crate::store::selected::SelectedDb, tombstones: &Tombstones) {
    match db.tombstone_state().await {
        Ok(state) => tombstones.replace(state),
        Err(error) => {
            tracing::warn!(%error, "reading the erased users' tombstones failed; keeping the set held")
        }
    }
}

/// The flusher of one aggregator, and the rollup refresher beside it,
/// running until [`Flushing::drain`].
struct Flushing<H> {
    aggregator: Arc<Aggregator<H>>,
    stop: watch::Sender<bool>,
    // In a JoinSet, so dropping this (a crash in tests) ends it too.
    task: tokio::task::JoinSet<()>,
    rollup_stop: watch::Sender<bool>,
    rollups: tokio::task::JoinSet<()>,
}

impl<H: AckHandle> Flushing<H> {
    /// Starts the flusher over `aggregator`, committing into `store`.
    async fn start(
        aggregator: Arc<Aggregator<H>>,
        store: Arc<SelectedStore>,
        stats: &Arc<Stats>,
        config: &Config,
        milestones: &MilestoneSetting,
    ) -> Result<Self, ServiceError> {
        let acker = Arc::new(Acker::new(stats.clone()));
        let mut flusher = Flusher::new(
            aggregator.clone(),
            store.clone(),
            acker,
            stats.clone(),
            config.flush(),
        );
        // Beside the pipeline, after the flusher: stops once the flusher
        // has drained, so the last commits' posts are refreshed too.
        let (rollup_stop, rollup_stopped) = watch::channel(false);
        let mut rollups = tokio::task::JoinSet::new();
        if let Some(mut rollup) = config.rollup() {
            // Read again here (the start-up check read it too); a failed
            // read keeps the safe default: first refreshes read every
            // shard a post may have. A raise is followed at the next start.
            rollup.shards_registered = matches!(
                store.db().data_format().await,
                Ok(Some(format)) if format >= crate::store::format::DATA_FORMAT_REGISTERED_SHARDS
            );
            // The fleet's milestones, followed while running.
            let thresholds = Thresholds::new(milestones.thresholds());
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
        if let Some(notify) = &config.milestones {
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
        if let Some(key) = &config.user_hash_key {
            let tombstones = Arc::new(Tombstones::new(key.expose().as_bytes()));
            flusher = flusher.with_tombstones(tombstones.clone());
            let db = store.db();
            let every = config.tombstone_refresh;
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
    async fn drain(mut self) {
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

async fn run_pipeline(
    endpoints: &Endpoints,
    config: &Config,
    stop: watch::Receiver<bool>,
    stats: Arc<Stats>,
    push: Option<Push>,
) -> Result<Arc<Stats>, ServiceError> {
    let store = Arc::new(open_store(endpoints, config).await?);
    let milestones = milestone_setting(&store, config).await?;
    tracing::info!(milestones = %milestones.describe(), "the fleet's milestone setting");
    // Beside the pipeline: ends when the source stops.
    let mut cleanup = tokio::task::JoinSet::new();
    if let (true, Some(interval)) = (
        store.db().sweeps_expired_markers(),
        config.marker_cleanup_interval,
    ) {
        let task = MarkerCleanup {
            db: store.db(),
            interval,
            batch_rows: config.marker_cleanup_batch_rows,
            stats: stats.clone(),
        };
        cleanup.spawn(task.run(stop.clone()));
    }
    cleanup.spawn(report_suppressed_warnings(stats.clone(), stop.clone()));
    cleanup.spawn(watch_commits(
        stats.clone(),
        config.stuck_commit_threshold,
        stop.clone(),
    ));
    let stages: [(&'static str, ProgressOf); 2] = [
        ("rollups", |s| &s.rollup_progress),
        ("milestones", |s| &s.milestone_progress),
    ];
    for (stage, progress) in stages {
        let threshold = config.stuck_commit_threshold;
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
        None => run_pull(endpoints, config, stop, &stats, store, &milestones).await?,
        Some(push) => {
            let ack_deadline = Push::ack_deadline_of(&subscription, &config.subscription);
            run_push(config, stop, &stats, store, &milestones, ack_deadline, push).await?
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
    milestones: &MilestoneSetting,
) -> Result<(), ServiceError> {
    let subscriber = connect::subscriber(endpoints).await?;
    let aggregator: Arc<Aggregator<PubSubHandle>> = aggregator(config, stats);
    let flushing = Flushing::start(aggregator.clone(), store, stats, config, milestones).await?;
    let source = Source::new(subscriber, config.source(), aggregator, stats.clone());
    tracing::info!(subscription = %config.subscription, consumer = %config.consumer, shards = config.shards, streams = config.streams, strategy = ?config.strategy, "hotcount running (pull)");
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
    milestones: &MilestoneSetting,
    ack_deadline: Option<Duration>,
    push: Push,
) -> Result<(), ServiceError> {
    let hold_max = PushConfig::hold_max_for(ack_deadline);
    let aggregator: Arc<Aggregator<PushHandle>> = aggregator(config, stats);
    let flushing = Flushing::start(aggregator.clone(), store, stats, config, milestones).await?;
    push.open(aggregator, hold_max).await;
    tracing::info!(subscription = %config.subscription, consumer = %config.consumer, shards = config.shards, addr = ?stats.push_addr.get(), ?ack_deadline, ?hold_max, strategy = ?config.strategy, "hotcount running (push)");
    stats.set_ready(true);
    let _ = stop.wait_for(|stopped| *stopped).await;
    push.close();
    stats.set_ready(false);
    flushing.drain().await;
    Ok(())
}
