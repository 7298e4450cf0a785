//! The metrics computed when scraped rather than kept: commit attempts by
//! outcome (derived from the batch counters), each aggregator shard's
//! buffered messages (read through the service's probe), and the flags.
//!
//! Invariant: reading them takes no lock the pipeline holds for longer than
//! a counter read, except the shard probe, which counts each shard's buffer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::instruments::{Counter, ShardLevels};
use super::names::{self, Metric};

/// The state the scrape-time metrics are read from, shared with [`super::Stats`].
#[derive(Debug)]
pub(super) struct ScrapeTime {
    /// Batches committed, including those found already committed.
    pub batches: Counter,
    /// Batches found already committed (part of `batches`).
    pub already_committed: Counter,
    /// Commit attempts retried.
    pub retries: Counter,
    /// Batches given up on.
    pub failed: Counter,
    /// Per-shard buffered messages.
    pub buffered: Arc<ShardLevels>,
    /// See [`names::READY`]: running ...
    pub ready: Arc<AtomicBool>,
    /// ... and not stalled; see [`names::COMMITS_STALLED`] ...
    pub stalled: Arc<AtomicBool>,
    /// ... nor the refresher; see [`names::STAGE_STALLED`] ...
    pub rollups_stalled: Arc<AtomicBool>,
    /// ... nor the milestone dispatcher.
    pub milestones_stalled: Arc<AtomicBool>,
    /// See [`names::DEAD_LETTER_POLICY`].
    pub dead_letter_policy: Arc<AtomicBool>,
}

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let batches = self.batches.get();
        let already = self.already_committed.get().min(batches);
        let mut commits = descriptor(&mut encoder, names::COMMITS, MetricType::Counter)?;
        for (outcome, n) in [
            ("committed", batches - already),
            ("already_committed", already),
            ("retry", self.retries.get()),
            ("failed", self.failed.get()),
        ] {
            ConstCounter::new(n).encode(commits.encode_family(&[("outcome", outcome)])?)?;
        }

        let mut buffered = descriptor(&mut encoder, names::BUFFERED_EVENTS, MetricType::Gauge)?;
        for (shard, level) in self.buffered.read().into_iter().enumerate() {
            ConstGauge::new(level).encode(buffered.encode_family(&[("shard", shard)])?)?;
        }

        let stalled = self.stalled.load(Ordering::Relaxed);
        let stages = [
            ("rollups", self.rollups_stalled.load(Ordering::Relaxed)),
            (
                "milestones",
                self.milestones_stalled.load(Ordering::Relaxed),
            ),
        ];
        let ready =
            self.ready.load(Ordering::Relaxed) && !stalled && !stages.iter().any(|(_, s)| *s);
        let mut stage_stalled = descriptor(&mut encoder, names::STAGE_STALLED, MetricType::Gauge)?;
        for (stage, flag) in stages {
            ConstGauge::new(i64::from(flag))
                .encode(stage_stalled.encode_family(&[("stage", stage)])?)?;
        }
        for (metric, flag) in [
            (names::READY, ready),
            (
                names::DEAD_LETTER_POLICY,
                self.dead_letter_policy.load(Ordering::Relaxed),
            ),
            (names::COMMITS_STALLED, stalled),
        ] {
            let value = i64::from(flag);
            ConstGauge::new(value).encode(descriptor(&mut encoder, metric, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// Writes `metric`'s HELP and TYPE lines.
fn descriptor<'a>(
    encoder: &'a mut DescriptorEncoder,
    metric: Metric,
    kind: MetricType,
) -> Result<prometheus_client::encoding::MetricEncoder<'a>, std::fmt::Error> {
    // A collector writes HELP as given (the registry would add the period).
    encoder.encode_descriptor(metric.family(), metric.help, None, kind)
}
