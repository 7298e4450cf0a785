//! Every metric hotcount keeps, named once here, and the tracing setup.
//!
//! Invariant: counters only grow; labels never carry post or user ids.
//! The `*_NAME` constants are the Prometheus names the exporter uses.

use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A level that goes up and down, with its high-water mark.
#[derive(Debug, Default)]
pub struct Gauge {
    now: AtomicU64,
    max: AtomicU64,
}

impl Gauge {
    /// Raises the level by `n`.
    pub fn inc(&self, n: u64) {
        let level = self.now.fetch_add(n, Ordering::Relaxed) + n;
        self.max.fetch_max(level, Ordering::Relaxed);
    }

    /// Lowers the level by `n` (never below zero).
    pub fn dec(&self, n: u64) {
        let _ = self
            .now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Current level.
    pub fn get(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// Highest level seen.
    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

/// A latency histogram in microseconds (1 µs .. 1 h, 3 significant digits).
#[derive(Debug)]
pub struct Latency(Mutex<Histogram<u64>>);

impl Default for Latency {
    fn default() -> Self {
        // 1 µs to 1 hour at 3 significant figures: a valid, fixed configuration.
        let histogram = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .unwrap_or_else(|_| Histogram::new(3).expect("3 significant figures is valid"));
        Self(Mutex::new(histogram))
    }
}

impl Latency {
    /// Records one sample.
    pub fn record(&self, d: std::time::Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        self.0.lock().saturating_record(micros);
    }

    /// Records the time elapsed since each of `starts` (clock skew counts as 0).
    pub fn record_since(&self, starts: &[std::time::SystemTime]) {
        if starts.is_empty() {
            return;
        }
        let now = std::time::SystemTime::now();
        let mut histogram = self.0.lock();
        for start in starts {
            let d = now.duration_since(*start).unwrap_or_default();
            histogram.saturating_record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1));
        }
    }

    /// The value at `quantile` (0.0..=1.0), as a duration.
    pub fn quantile(&self, quantile: f64) -> std::time::Duration {
        std::time::Duration::from_micros(self.0.lock().value_at_quantile(quantile))
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.0.lock().len()
    }
}

/// Prometheus names of the counters in [`Stats`].
pub mod names {
    /// Messages received from Pub/Sub.
    pub const EVENTS_RECEIVED: &str = "hotcount_events_received_total";
    /// Events that changed a membership.
    pub const EVENTS_APPLIED: &str = "hotcount_events_applied_total";
    /// Events that were duplicates of the stored state.
    pub const EVENTS_DUPLICATE: &str = "hotcount_events_duplicate_total";
    /// Events older than the stored state.
    pub const EVENTS_STALE: &str = "hotcount_events_stale_total";
    /// Messages quarantined as poison.
    pub const EVENTS_POISON: &str = "hotcount_events_poison_total";
    /// Batches committed (including ones found already committed).
    pub const BATCHES_COMMITTED: &str = "hotcount_batches_committed_total";
    /// Commit attempts that failed and were retried.
    pub const COMMIT_RETRIES: &str = "hotcount_commit_retries_total";
    /// Batches given up on (nacked).
    pub const BATCHES_FAILED: &str = "hotcount_batches_failed_total";
    /// Events isolated after a permanent store error.
    pub const EVENTS_ISOLATED: &str = "hotcount_events_isolated_total";
    /// Acks sent.
    pub const ACKS: &str = "hotcount_acks_total";
    /// Nacks sent.
    pub const NACKS: &str = "hotcount_nacks_total";
    /// Acks whose confirmation failed (exactly-once subscriptions).
    pub const ACK_FAILURES: &str = "hotcount_ack_failures_total";
    /// Store round trips.
    pub const STORE_RPCS: &str = "hotcount_store_rpcs_total";
    /// Counter increments written.
    pub const COUNTER_INCREMENTS: &str = "hotcount_counter_increments_total";
    /// StreamingPull streams re-opened after an error.
    pub const STREAM_RECONNECTS: &str = "hotcount_stream_reconnects_total";
    /// Messages held (received, not yet acked or nacked).
    pub const MESSAGES_IN_FLIGHT: &str = "hotcount_messages_in_flight";
    /// Payload bytes held.
    pub const BYTES_IN_FLIGHT: &str = "hotcount_bytes_in_flight";
    /// Commit duration, seconds.
    pub const COMMIT_DURATION: &str = "hotcount_commit_duration_seconds";
    /// Publish to commit latency, seconds.
    pub const PUBLISH_TO_COMMIT: &str = "hotcount_publish_to_commit_seconds";
}

/// The service's counters and histograms.
#[derive(Debug, Default)]
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
    /// See [`names::ACKS`].
    pub acks: Counter,
    /// See [`names::NACKS`].
    pub nacks: Counter,
    /// See [`names::ACK_FAILURES`].
    pub ack_failures: Counter,
    /// See [`names::STORE_RPCS`].
    pub store_rpcs: Counter,
    /// See [`names::COUNTER_INCREMENTS`].
    pub increments: Counter,
    /// See [`names::STREAM_RECONNECTS`].
    pub reconnects: Counter,
    /// See [`names::MESSAGES_IN_FLIGHT`].
    pub in_flight: Gauge,
    /// See [`names::BYTES_IN_FLIGHT`].
    pub bytes_in_flight: Gauge,
    /// See [`names::COMMIT_DURATION`].
    pub commit_duration: Latency,
    /// See [`names::PUBLISH_TO_COMMIT`].
    pub publish_to_commit: Latency,
}

impl Stats {
    /// Adds a committed batch's effects.
    pub fn record_effects(&self, effects: crate::batch::Effects) {
        self.applied.add(effects.applied);
        self.duplicates.add(effects.duplicates);
        self.stale.add(effects.stale);
        self.poison.add(effects.poison);
    }
}

/// Installs the global tracing subscriber: `RUST_LOG` filter (default
/// `info`), plain text or JSON lines on stderr.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests) is harmless: keep the first.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
