//! Every metric hotcount keeps, in one `prometheus-client` registry, and
//! the tracing setup.
//!
//! - [`names`]: each metric's name and HELP text, and the histograms'
//!   bucket boundaries (what dashboards see);
//! - [`Stats`]: the instruments the pipeline updates, registered once
//!   ([`labels`]: the counters with one fixed-valued label);
//!   [`Stats::render_prometheus`] is the exposition `/metrics` serves.
//!
//! Invariant: a leaf: nothing here imports from the rest of the crate;
//! counters only grow; labels never carry post or user ids (only
//! `outcome`, `reason`, `shard` and the histograms' `le`). Latencies and sizes are
//! histograms, so replicas aggregate (`histogram_quantile` over the summed
//! `_bucket` rates).

mod instruments;
pub mod labels;
pub mod names;
pub mod progress;
mod scrape_time;
pub mod throttle;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::{Metric as Registered, Registry};

pub use instruments::{Counter, Latency, Level, LevelProbe, ShardLevels, Sizes};
pub use labels::{AuthFailure, ConnectionClose, FetchOutcome, Labelled, PushOutcome};
use names::Metric;
pub use progress::{CommitProgress, Stall};
use scrape_time::ScrapeTime;
pub use throttle::LogThrottle;

/// The content type of [`Stats::render_prometheus`]: the Prometheus text
/// format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A committed batch's effects on events, as counted (the pipeline's
/// `Effects`, seen from here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// See [`names::EVENTS_APPLIED`].
    pub applied: u64,
    /// See [`names::EVENTS_DUPLICATE`].
    pub duplicates: u64,
    /// See [`names::EVENTS_STALE`].
    pub stale: u64,
    /// See [`names::EVENTS_POISON`].
    pub poison: u64,
}

/// The service's instruments, and the registry that exports them.
#[derive(Debug)]
pub struct Stats {
    /// See [`names::EVENTS_RECEIVED`].
    pub received: Counter,
    /// See [`names::EVENTS_APPLIED`].
    pub applied: Counter,
    /// See [`names::EVENTS_DUPLICATE`].
    pub duplicates: Counter,
    /// See [`names::EVENTS_STALE`].
    pub stale: Counter,
    /// See [`names::EVENTS_POISON`].
    pub poison: Counter,
    /// See [`names::BATCHES_COMMITTED`].
    pub batches: Counter,
    /// See [`names::COMMIT_RETRIES`].
    pub commit_retries: Counter,
    /// See [`names::BATCHES_FAILED`].
    pub batches_failed: Counter,
    /// See [`names::EVENTS_ISOLATED`].
    pub isolated: Counter,
    /// See [`names::EVENTS_ERASED_USER`].
    pub erased_dropped: Counter,
    /// See [`names::QUARANTINE_REFUSED`].
    pub quarantine_refused: Counter,
    /// See [`names::CONTENTION_SPLITS`].
    pub contention_splits: Counter,
    /// See [`names::ACKS`].
    pub acks: Counter,
    /// See [`names::NACKS`].
    pub nacks: Counter,
    /// See [`names::ACK_FAILURES`].
    pub ack_failures: Counter,
    /// See [`names::STORE_RPCS`].
    pub store_rpcs: Counter,
    /// See [`names::KNOWN_COMMITS`].
    pub known_commits: Counter,
    /// See [`names::KNOWN_REFUSALS`].
    pub known_refusals: Counter,
    /// See [`names::COUNTER_INCREMENTS`].
    pub increments: Counter,
    /// See [`names::STREAM_RECONNECTS`].
    pub reconnects: Counter,
    /// See [`names::MARKERS_DELETED`].
    pub markers_deleted: Counter,
    /// See [`names::ROLLUP_REFRESHES`].
    pub rollup_refreshes: Counter,
    /// See [`names::ROLLUP_SKIPPED`].
    pub rollup_skipped: Counter,
    /// See [`names::ROLLUP_DEFERRED`].
    pub rollup_deferred: Counter,
    /// See [`names::ROLLUP_FAILURES`].
    pub rollup_failures: Counter,
    /// See [`names::ROLLUP_RPCS`].
    pub rollup_rpcs: Counter,
    /// See [`names::ROLLUP_SWEPT`].
    pub rollup_swept: Counter,
    /// See [`names::ROLLUP_TAKEN_OVER`].
    pub rollup_taken_over: Counter,
    /// See [`names::ROLLUP_CLEARED`].
    pub rollup_cleared: Counter,
    /// See [`names::ROLLUP_PENDING`] (its high-water mark is not exported).
    pub rollup_pending: Level,
    /// See [`names::ROLLUP_LAG`].
    pub rollup_lag: Latency,
    /// See [`names::DATA_FORMAT`] (its high-water mark is not exported).
    pub data_format: Level,
    /// See [`names::MILESTONES_RECORDED`].
    pub milestones_recorded: Counter,
    /// See [`names::MILESTONES_DELIVERED`].
    pub milestones_delivered: Counter,
    /// See [`names::MILESTONE_ATTEMPTS_FAILED`].
    pub milestone_attempts_failed: Counter,
    /// See [`names::MILESTONES_DEAD`].
    pub milestones_dead: Counter,
    /// See [`names::MILESTONE_LEASES_LOST`].
    pub milestone_leases_lost: Counter,
    /// Rate-limits the warnings that can repeat thousands of times; see
    /// [`names::LOG_LINES_SUPPRESSED`].
    pub warnings: LogThrottle,
    /// See [`names::MESSAGES_IN_FLIGHT`] and [`names::MESSAGES_IN_FLIGHT_MAX`].
    pub in_flight: Level,
    /// See [`names::BYTES_IN_FLIGHT`] (its high-water mark is not exported).
    pub bytes_in_flight: Level,
    /// See [`names::COMMIT_DURATION`].
    pub commit_duration: Latency,
    /// See [`names::PUBLISH_TO_COMMIT`].
    pub publish_to_commit: Latency,
    /// Batches found already committed by an earlier attempt (part of
    /// [`Stats::batches`]); see [`names::COMMITS`].
    pub already_committed: Counter,
    /// See [`names::BATCH_SIZE`].
    pub batch_size: Sizes,
    /// See [`names::BUFFERED_EVENTS`].
    pub buffered: Arc<ShardLevels>,
    /// See [`names::DEAD_LETTER_POLICY`].
    pub dead_letter_policy: Arc<AtomicBool>,
    /// See [`names::STORE_CALL_TIMEOUTS`].
    pub store_call_timeouts: Counter,
    /// Whether commits make progress; see [`names::COMMITS_STALLED`].
    pub commit_progress: CommitProgress,
    /// Whether the rollup refresher's store calls are answered; see
    /// [`names::STAGE_STALLED`].
    pub rollup_progress: CommitProgress,
    /// Whether the milestone dispatcher's store calls are answered.
    pub milestone_progress: CommitProgress,
    /// The address the metrics endpoint listens on, once bound.
    pub metrics_addr: OnceLock<SocketAddr>,
    /// See [`names::PUSH_REQUESTS`].
    pub push_requests: Labelled<PushOutcome>,
    /// See [`names::PUSH_AUTH_FAILURES`].
    pub push_auth_failures: Labelled<AuthFailure>,
    /// See [`names::PUSH_JWKS_FETCHES`].
    pub push_jwks_fetches: Labelled<FetchOutcome>,
    /// See [`names::PUSH_HOLD`].
    pub push_hold: Latency,
    /// See [`names::PUSH_CONNECTIONS`] (its high-water mark is not exported).
    pub push_connections: Level,
    /// See [`names::PUSH_CONNECTIONS_CLOSED`].
    pub push_connections_closed: Labelled<ConnectionClose>,
    /// The address the push endpoint listens on, once bound.
    pub push_addr: OnceLock<SocketAddr>,
    /// See [`names::READY`].
    ready: Arc<AtomicBool>,
    registry: Registry,
}

impl Default for Stats {
    fn default() -> Self {
        let mut stats = Stats {
            received: Counter::default(),
            applied: Counter::default(),
            duplicates: Counter::default(),
            stale: Counter::default(),
            poison: Counter::default(),
            batches: Counter::default(),
            commit_retries: Counter::default(),
            batches_failed: Counter::default(),
            isolated: Counter::default(),
            erased_dropped: Counter::default(),
            quarantine_refused: Counter::default(),
            contention_splits: Counter::default(),
            acks: Counter::default(),
            nacks: Counter::default(),
            ack_failures: Counter::default(),
            store_rpcs: Counter::default(),
            known_commits: Counter::default(),
            known_refusals: Counter::default(),
            increments: Counter::default(),
            reconnects: Counter::default(),
            markers_deleted: Counter::default(),
            rollup_refreshes: Counter::default(),
            rollup_skipped: Counter::default(),
            rollup_deferred: Counter::default(),
            rollup_failures: Counter::default(),
            rollup_rpcs: Counter::default(),
            rollup_swept: Counter::default(),
            rollup_taken_over: Counter::default(),
            rollup_cleared: Counter::default(),
            rollup_pending: Level::default(),
            data_format: Level::default(),
            rollup_lag: Latency::new(&names::ROLLUP_LAG_BUCKETS),
            milestones_recorded: Counter::default(),
            milestones_delivered: Counter::default(),
            milestone_attempts_failed: Counter::default(),
            milestones_dead: Counter::default(),
            milestone_leases_lost: Counter::default(),
            warnings: LogThrottle::new(
                throttle::DEFAULT_FIRST_PER_INTERVAL,
                throttle::DEFAULT_INTERVAL,
                Counter::default(),
            ),
            in_flight: Level::default(),
            bytes_in_flight: Level::default(),
            commit_duration: Latency::new(&names::COMMIT_DURATION_BUCKETS),
            publish_to_commit: Latency::new(&names::PUBLISH_TO_COMMIT_BUCKETS),
            already_committed: Counter::default(),
            batch_size: Sizes::new(&names::BATCH_SIZE_BUCKETS),
            buffered: Arc::default(),
            dead_letter_policy: Arc::default(),
            store_call_timeouts: Counter::default(),
            commit_progress: CommitProgress::default(),
            rollup_progress: CommitProgress::default(),
            milestone_progress: CommitProgress::default(),
            metrics_addr: OnceLock::new(),
            push_requests: Labelled::new(),
            push_auth_failures: Labelled::new(),
            push_jwks_fetches: Labelled::new(),
            push_hold: Latency::new(&names::PUSH_HOLD_BUCKETS),
            push_connections: Level::default(),
            push_connections_closed: Labelled::new(),
            push_addr: OnceLock::new(),
            ready: Arc::default(),
            registry: Registry::default(),
        };
        stats.register();
        stats
    }
}

impl Stats {
    /// Registers every instrument, and the scrape-time collector, once.
    fn register(&mut self) {
        use names::*;
        let counters = [
            (EVENTS_RECEIVED, &self.received),
            (EVENTS_APPLIED, &self.applied),
            (EVENTS_DUPLICATE, &self.duplicates),
            (EVENTS_STALE, &self.stale),
            (EVENTS_POISON, &self.poison),
            (BATCHES_COMMITTED, &self.batches),
            (COMMIT_RETRIES, &self.commit_retries),
            (BATCHES_FAILED, &self.batches_failed),
            (EVENTS_ISOLATED, &self.isolated),
            (EVENTS_ERASED_USER, &self.erased_dropped),
            (CONTENTION_SPLITS, &self.contention_splits),
            (QUARANTINE_REFUSED, &self.quarantine_refused),
            (ACKS, &self.acks),
            (NACKS, &self.nacks),
            (ACK_FAILURES, &self.ack_failures),
            (STORE_RPCS, &self.store_rpcs),
            (KNOWN_COMMITS, &self.known_commits),
            (KNOWN_REFUSALS, &self.known_refusals),
            (COUNTER_INCREMENTS, &self.increments),
            (STREAM_RECONNECTS, &self.reconnects),
            (MARKERS_DELETED, &self.markers_deleted),
            (LOG_LINES_SUPPRESSED, self.warnings.suppressed()),
            (ROLLUP_REFRESHES, &self.rollup_refreshes),
            (ROLLUP_SKIPPED, &self.rollup_skipped),
            (ROLLUP_DEFERRED, &self.rollup_deferred),
            (ROLLUP_FAILURES, &self.rollup_failures),
            (ROLLUP_RPCS, &self.rollup_rpcs),
            (ROLLUP_SWEPT, &self.rollup_swept),
            (ROLLUP_TAKEN_OVER, &self.rollup_taken_over),
            (ROLLUP_CLEARED, &self.rollup_cleared),
            (STORE_CALL_TIMEOUTS, &self.store_call_timeouts),
            (MILESTONES_RECORDED, &self.milestones_recorded),
            (MILESTONES_DELIVERED, &self.milestones_delivered),
            (MILESTONE_ATTEMPTS_FAILED, &self.milestone_attempts_failed),
            (MILESTONES_DEAD, &self.milestones_dead),
            (MILESTONE_LEASES_LOST, &self.milestone_leases_lost),
        ];
        let registry = &mut self.registry;
        for (metric, counter) in counters {
            register(registry, metric, counter.0.clone());
        }
        register(registry, MESSAGES_IN_FLIGHT, self.in_flight.now.clone());
        register(registry, MESSAGES_IN_FLIGHT_MAX, self.in_flight.max.clone());
        register(registry, BYTES_IN_FLIGHT, self.bytes_in_flight.now.clone());
        register(registry, COMMIT_DURATION, self.commit_duration.0.clone());
        register(
            registry,
            PUBLISH_TO_COMMIT,
            self.publish_to_commit.0.clone(),
        );
        register(registry, BATCH_SIZE, self.batch_size.0.clone());
        register(registry, ROLLUP_PENDING, self.rollup_pending.now.clone());
        register(registry, ROLLUP_LAG, self.rollup_lag.0.clone());
        register(registry, DATA_FORMAT, self.data_format.now.clone());
        register(registry, PUSH_HOLD, self.push_hold.0.clone());
        register(
            registry,
            PUSH_CONNECTIONS,
            self.push_connections.now.clone(),
        );
        for collector in [
            self.push_requests.collector(PUSH_REQUESTS),
            self.push_auth_failures.collector(PUSH_AUTH_FAILURES),
            self.push_jwks_fetches.collector(PUSH_JWKS_FETCHES),
            self.push_connections_closed
                .collector(PUSH_CONNECTIONS_CLOSED),
        ] {
            self.registry.register_collector(Box::new(collector));
        }
        self.registry.register_collector(Box::new(ScrapeTime {
            batches: self.batches.clone(),
            already_committed: self.already_committed.clone(),
            retries: self.commit_retries.clone(),
            failed: self.batches_failed.clone(),
            buffered: self.buffered.clone(),
            ready: self.ready.clone(),
            stalled: self.commit_progress.stalled.clone(),
            rollups_stalled: self.rollup_progress.stalled.clone(),
            milestones_stalled: self.milestone_progress.stalled.clone(),
            dead_letter_policy: self.dead_letter_policy.clone(),
        }));
    }

    /// Adds a committed batch's effects.
    pub fn record_effects(&self, counts: EventCounts) {
        self.applied.add(counts.applied);
        self.duplicates.add(counts.duplicates);
        self.stale.add(counts.stale);
        self.poison.add(counts.poison);
    }

    /// Whether the service is ready (see [`names::READY`]): running, and
    /// neither its commits nor the stages beside the pipeline stalled.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
            && !self.commit_progress.is_stalled()
            && !self.rollup_progress.is_stalled()
            && !self.milestone_progress.is_stalled()
    }

    /// Marks the service running (ready unless its commits stall) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The Prometheus text exposition (format 0.0.4, [`CONTENT_TYPE`]) of
    /// every metric.
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        // Writing into a String fails only if an encoder does; ours do not.
        if let Err(error) = prometheus_text::encode(&mut out, &self.registry) {
            tracing::warn!(%error, "encoding the metrics failed");
        }
        out
    }
}

/// Registers `instrument` under `metric`'s name and HELP text.
fn register(registry: &mut Registry, metric: Metric, instrument: impl Registered) {
    registry.register(metric.family(), metric.registry_help(), instrument);
}

/// Installs the global tracing subscriber: `RUST_LOG` filter (default
/// `info`), plain text or JSON lines on stderr (colours only on a terminal,
/// so a log file or collector gets plain text).
pub fn init_tracing(json: bool) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // A second initialisation (tests) is harmless: keep the first.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotcount_scrape::Exposition;

    #[test]
    fn exposition_has_help_type_and_labelled_samples() {
        let stats = Stats::default();
        stats.received.add(3);
        stats.batches.add(2);
        stats.already_committed.add(1);
        stats.batch_size.record(10);
        stats
            .commit_duration
            .record(std::time::Duration::from_millis(5));
        stats.buffered.set(Arc::new(|| vec![4, 0]));
        let text = stats.render_prometheus();
        assert!(text.contains(
            "# TYPE hotcount_events_received_total counter\nhotcount_events_received_total 3\n"
        ));
        assert!(text.contains("hotcount_commits_total{outcome=\"committed\"} 1\n"));
        assert!(text.contains("hotcount_commits_total{outcome=\"already_committed\"} 1\n"));
        assert!(text.contains("hotcount_buffered_events{shard=\"0\"} 4\n"));
        assert!(text.contains("hotcount_batch_size_messages_count 1\n"));
        assert!(text.contains("hotcount_commit_duration_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("hotcount_ready 0\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("name value");
            assert!(series.starts_with("hotcount_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn every_metric_has_one_help_and_one_type_with_its_text_from_names() {
        let stats = Stats::default();
        stats.set_ready(true);
        let text = stats.render_prometheus();
        for metric in names::ALL {
            let help = format!("# HELP {} ", metric.name);
            let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&help)).collect();
            assert_eq!(lines, [format!("{help}{}", metric.help)], "{text}");
            let kind = format!("# TYPE {} ", metric.name);
            assert_eq!(text.lines().filter(|l| l.starts_with(&kind)).count(), 1);
        }
        let declared = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!(declared, names::ALL.len(), "nothing exported outside names");
    }

    #[test]
    fn latency_and_batch_size_are_histograms_with_buckets_sum_and_count() {
        let stats = Stats::default();
        for ms in [3, 40, 40, 900] {
            stats
                .commit_duration
                .record(std::time::Duration::from_millis(ms));
        }
        stats.batch_size.record(1000);
        stats
            .publish_to_commit
            .record_since(&[std::time::SystemTime::now()]);
        let text = stats.render_prometheus();
        let e = Exposition::parse(&text);
        let duration = names::COMMIT_DURATION.name;
        assert!(text.contains(&format!("# TYPE {duration} histogram\n")));
        let bucket = |le: &str| e.value(&format!("{duration}_bucket{{le=\"{le}\"}}"));
        assert_eq!(bucket("0.002"), Some(0.0));
        assert_eq!(bucket("0.005"), Some(1.0));
        assert_eq!(bucket("0.05"), Some(3.0));
        assert_eq!(bucket("1"), Some(4.0));
        assert_eq!(bucket("+Inf"), Some(4.0));
        let buckets = e
            .samples()
            .iter()
            .filter(|s| s.name == format!("{duration}_bucket"))
            .count();
        assert_eq!(buckets, names::COMMIT_DURATION_BUCKETS.len() + 1);
        assert_eq!(e.value(&format!("{duration}_count")), Some(4.0));
        let sum = e.value(&format!("{duration}_sum")).expect("sum");
        assert!((sum - 0.983).abs() < 1e-9, "{sum}");
        let median = e.histogram_quantile(duration, 0.5).expect("p50");
        assert!((0.03..=0.05).contains(&median), "{median}");

        let size = names::BATCH_SIZE.name;
        assert!(text.contains(&format!("# TYPE {size} histogram\n")));
        assert_eq!(e.value(&format!("{size}_bucket{{le=\"750\"}}")), Some(0.0));
        assert_eq!(e.value(&format!("{size}_bucket{{le=\"1000\"}}")), Some(1.0));
        assert_eq!(e.value(&format!("{size}_sum")), Some(1000.0));
        let published = names::PUBLISH_TO_COMMIT.name;
        assert_eq!(e.value(&format!("{published}_count")), Some(1.0));
    }

    #[test]
    fn levels_never_go_below_zero_and_keep_their_high_water_mark() {
        let stats = Stats::default();
        stats.in_flight.inc(5);
        stats.in_flight.dec(7);
        stats.in_flight.inc(2);
        assert_eq!((stats.in_flight.get(), stats.in_flight.max()), (2, 5));
        let e = Exposition::parse(&stats.render_prometheus());
        assert_eq!(e.value(names::MESSAGES_IN_FLIGHT.name), Some(2.0));
        assert_eq!(e.value(names::MESSAGES_IN_FLIGHT_MAX.name), Some(5.0));
    }
}
