//! Every metric hotcount keeps, named once here, and the tracing setup.
//!
//! Invariant: counters only grow; labels never carry post or user ids.
//! The constants in [`names`] are the Prometheus names the exporter uses,
//! and [`Stats::render_prometheus`] is the only place that writes them.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

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

    /// Sum of the samples in seconds (approximate: HDR mean times count).
    fn sum_seconds(&self) -> f64 {
        let h = self.0.lock();
        h.mean() * h.len() as f64 / 1e6
    }
}

/// A distribution of sizes (e.g. messages per batch), 1 .. 10^7, HDR-backed.
#[derive(Debug)]
pub struct Sizes(Mutex<Histogram<u64>>);

impl Default for Sizes {
    fn default() -> Self {
        let histogram = Histogram::new_with_bounds(1, 10_000_000, 3)
            .unwrap_or_else(|_| Histogram::new(3).expect("3 significant figures is valid"));
        Self(Mutex::new(histogram))
    }
}

impl Sizes {
    /// Records one sample (0 is recorded as 1, the histogram's floor).
    pub fn record(&self, n: u64) {
        self.0.lock().saturating_record(n.max(1));
    }

    /// The value at `quantile` (0.0..=1.0).
    pub fn quantile(&self, quantile: f64) -> u64 {
        self.0.lock().value_at_quantile(quantile)
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.0.lock().len()
    }

    /// Sum of the samples (approximate: HDR mean times count).
    pub fn sum(&self) -> f64 {
        let h = self.0.lock();
        h.mean() * h.len() as f64
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
    /// Valid events the store refused, isolated and quarantined.
    pub const EVENTS_ISOLATED: &str = "hotcount_events_isolated_total";
    /// Quarantine records the store refused; each message was nacked for
    /// the subscription's dead-letter policy.
    pub const QUARANTINE_REFUSED: &str = "hotcount_quarantine_refused_total";
    /// Batches split after repeated contention (ABORTED), so the part off
    /// the contended documents commits.
    pub const CONTENTION_SPLITS: &str = "hotcount_contention_splits_total";
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
    /// Commit attempts by outcome (label `outcome`: `committed`,
    /// `already_committed`, `retry`, `failed`).
    pub const COMMITS: &str = "hotcount_commits_total";
    /// Messages per batch.
    pub const BATCH_SIZE: &str = "hotcount_batch_size_messages";
    /// Messages buffered in each aggregator shard (label `shard`).
    pub const BUFFERED_EVENTS: &str = "hotcount_buffered_events";
    /// Highest number of messages held at once since start.
    pub const MESSAGES_IN_FLIGHT_MAX: &str = "hotcount_messages_in_flight_max";
    /// 1 once the store and subscriber are built and the source runs.
    pub const READY: &str = "hotcount_ready";
    /// 1 when the subscription has a dead-letter policy (read at start).
    pub const DEAD_LETTER_POLICY: &str = "hotcount_dead_letter_policy";
}

/// The quantiles each summary exports.
pub const SUMMARY_QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 1.0];

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
    /// Batches found already committed by an earlier attempt (part of
    /// [`Stats::batches`]); see [`names::COMMITS`].
    pub already_committed: Counter,
    /// See [`names::BATCH_SIZE`].
    pub batch_size: Sizes,
    /// See [`names::BUFFERED_EVENTS`].
    pub buffered: ShardLevels,
    /// See [`names::READY`].
    pub ready: AtomicBool,
    /// See [`names::DEAD_LETTER_POLICY`].
    pub dead_letter_policy: AtomicBool,
    /// The address the metrics endpoint listens on, once bound.
    pub metrics_addr: OnceLock<SocketAddr>,
}

impl Stats {
    /// Adds a committed batch's effects.
    pub fn record_effects(&self, effects: crate::pipeline::batch::Effects) {
        self.applied.add(effects.applied);
        self.duplicates.add(effects.duplicates);
        self.stale.add(effects.stale);
        self.poison.add(effects.poison);
    }

    /// Whether the service is ready (see [`names::READY`]).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Marks the service ready or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn render_prometheus(&self) -> String {
        use names::*;
        let mut out = Exposition::default();
        let counters: [(&str, &str, &Counter); 17] = [
            (
                EVENTS_RECEIVED,
                "Messages received from Pub/Sub.",
                &self.received,
            ),
            (
                EVENTS_APPLIED,
                "Events that changed a membership.",
                &self.applied,
            ),
            (
                EVENTS_DUPLICATE,
                "Events that were duplicates of the stored state.",
                &self.duplicates,
            ),
            (
                EVENTS_STALE,
                "Events older than the stored state.",
                &self.stale,
            ),
            (
                EVENTS_POISON,
                "Messages quarantined as poison.",
                &self.poison,
            ),
            (
                BATCHES_COMMITTED,
                "Batches committed (including ones found already committed).",
                &self.batches,
            ),
            (
                COMMIT_RETRIES,
                "Commit attempts that failed and were retried.",
                &self.commit_retries,
            ),
            (
                BATCHES_FAILED,
                "Batches given up on (nacked).",
                &self.batches_failed,
            ),
            (
                EVENTS_ISOLATED,
                "Valid events the store refused, isolated and quarantined.",
                &self.isolated,
            ),
            (
                CONTENTION_SPLITS,
                "Batches split after repeated contention, so the part off the contended documents commits.",
                &self.contention_splits,
            ),
            (
                QUARANTINE_REFUSED,
                "Quarantine records the store refused; each message was nacked for the dead-letter policy.",
                &self.quarantine_refused,
            ),
            (ACKS, "Acks sent.", &self.acks),
            (NACKS, "Nacks sent.", &self.nacks),
            (
                ACK_FAILURES,
                "Acks whose confirmation failed (exactly-once subscriptions).",
                &self.ack_failures,
            ),
            (STORE_RPCS, "Store round trips.", &self.store_rpcs),
            (
                COUNTER_INCREMENTS,
                "Counter shard increments written.",
                &self.increments,
            ),
            (
                STREAM_RECONNECTS,
                "StreamingPull streams re-opened after an error.",
                &self.reconnects,
            ),
        ];
        for (name, help, counter) in counters {
            out.header(name, help, "counter");
            out.sample(name, "", counter.get() as f64);
        }
        let batches = self.batches.get();
        let already = self.already_committed.get().min(batches);
        out.header(COMMITS, "Commit attempts by outcome.", "counter");
        for (outcome, n) in [
            ("committed", batches - already),
            ("already_committed", already),
            ("retry", self.commit_retries.get()),
            ("failed", self.batches_failed.get()),
        ] {
            out.sample(COMMITS, &format!("outcome=\"{outcome}\""), n as f64);
        }
        out.header(
            MESSAGES_IN_FLIGHT,
            "Messages held (received, not yet acked or nacked).",
            "gauge",
        );
        out.sample(MESSAGES_IN_FLIGHT, "", self.in_flight.get() as f64);
        out.header(
            MESSAGES_IN_FLIGHT_MAX,
            "Highest number of messages held at once since start.",
            "gauge",
        );
        out.sample(MESSAGES_IN_FLIGHT_MAX, "", self.in_flight.max() as f64);
        out.header(BYTES_IN_FLIGHT, "Payload bytes held.", "gauge");
        out.sample(BYTES_IN_FLIGHT, "", self.bytes_in_flight.get() as f64);
        out.header(
            BUFFERED_EVENTS,
            "Messages buffered in each aggregator shard.",
            "gauge",
        );
        for (shard, level) in self.buffered.read().into_iter().enumerate() {
            out.sample(BUFFERED_EVENTS, &format!("shard=\"{shard}\""), level as f64);
        }
        out.header(
            READY,
            "1 once the store and subscriber are built and the source runs.",
            "gauge",
        );
        out.sample(READY, "", f64::from(u8::from(self.is_ready())));
        out.header(
            DEAD_LETTER_POLICY,
            "1 when the subscription has a dead-letter policy (read at start).",
            "gauge",
        );
        let policy = self.dead_letter_policy.load(Ordering::Relaxed);
        out.sample(DEAD_LETTER_POLICY, "", f64::from(u8::from(policy)));
        for (name, help, latency) in [
            (
                COMMIT_DURATION,
                "Duration of a batch commit, retries included, in seconds.",
                &self.commit_duration,
            ),
            (
                PUBLISH_TO_COMMIT,
                "Time from publish to the commit of the message's batch, in seconds.",
                &self.publish_to_commit,
            ),
        ] {
            out.header(name, help, "summary");
            for q in SUMMARY_QUANTILES {
                let value = latency.quantile(q).as_secs_f64();
                out.sample(name, &format!("quantile=\"{q}\""), value);
            }
            out.sample(&format!("{name}_sum"), "", latency.sum_seconds());
            out.sample(&format!("{name}_count"), "", latency.count() as f64);
        }
        out.header(BATCH_SIZE, "Messages per batch.", "summary");
        for q in SUMMARY_QUANTILES {
            let value = self.batch_size.quantile(q) as f64;
            out.sample(BATCH_SIZE, &format!("quantile=\"{q}\""), value);
        }
        out.sample(&format!("{BATCH_SIZE}_sum"), "", self.batch_size.sum());
        out.sample(
            &format!("{BATCH_SIZE}_count"),
            "",
            self.batch_size.count() as f64,
        );
        out.0
    }
}

/// A Prometheus text exposition being written.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: f64) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(text.contains("hotcount_commit_duration_seconds{quantile=\"0.5\"} 0.005"));
        assert!(text.contains("hotcount_ready 0\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("name value");
            assert!(series.starts_with("hotcount_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
