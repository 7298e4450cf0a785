//! The one-command demo: emulators in-process, setup, the consumer, a viral
//! workload, drain, verify, report.
//!
//! Invariant: the demo's verdict comes from `verify` against the truth
//! computed from the generated events alone, never from the service's own
//! counters; the consumer is stopped (drained) before counts are read.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Endpoints, RunArgs};
use hotcount::ops::setup::{self, SetupArgs};
use hotcount::telemetry::Stats;
use hotcount_emulators::{Emulators, EmulatorsConfig, FaultSpec};
use tokio::sync::watch;

use crate::publish::{self, PublishOptions, PublishReport};
use crate::report::{self, Percentiles, RunInfo};
use crate::run_error::RunError;
use crate::verify::{self, VerifyReport};
use crate::{generate, readback, WorkloadConfig};

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// The consumer's settings (project, subscription, shards, flush interval...).
    pub run: RunArgs,
    /// The generated workload.
    pub workload: WorkloadConfig,
    /// Publish rate, messages per second (0 = as fast as possible).
    pub rate_per_sec: u64,
    /// Added latency per Firestore RPC, to model real round trips (0 = none).
    pub store_rtt_ms: u64,
    /// Where the report goes.
    pub out_dir: PathBuf,
    /// Longest wait for the backlog to drain after publishing.
    pub drain_timeout: Duration,
    /// Show a progress bar while publishing.
    pub progress: bool,
}

/// What the demo measured.
#[derive(Debug)]
pub struct DemoSummary {
    /// Publish outcome.
    pub publish: PublishReport,
    /// Verification against the truth.
    pub verify: VerifyReport,
    /// The consumer's counters.
    pub stats: Arc<Stats>,
    /// Firestore commits served by the emulator.
    pub commits: u64,
    /// All Firestore RPCs served by the emulator during the run.
    pub store_rpcs: u64,
    /// Writes to the most written document.
    pub hottest_document_writes: u64,
    /// From the first publish until the backlog drained.
    pub elapsed: Duration,
    /// Whether the backlog drained before the timeout.
    pub drained: bool,
    /// Publish-to-commit latency over the memberships.
    pub latency: Percentiles,
    /// Report files.
    pub report: report::ReportFiles,
}

impl DemoSummary {
    /// Every count exact, the invariant kept, everything published and
    /// drained, one quarantine record (read from Firestore) per poison
    /// message the truth holds, and no valid event quarantined.
    pub fn is_success(&self) -> bool {
        self.verify.is_exact()
            && self.drained
            && self.publish.failed == 0
            && !self.publish.cancelled
            && self.verify.quarantined as u64 == self.verify.poison_expected
            && self.verify.quarantined_events == 0
    }

    /// Messages per second from the first publish to the drained backlog.
    pub fn throughput(&self) -> f64 {
        self.publish.published as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs the whole demo; `cancel` stops publishing early. A mismatch is not
/// an error: see [`DemoSummary::is_success`].
pub async fn run(
    config: &DemoConfig,
    cancel: watch::Receiver<bool>,
) -> Result<DemoSummary, RunError> {
    config
        .workload
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let service_config = config
        .run
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let (emulators, endpoints) = start_stage(
        &service_config,
        &config.run.target.project,
        config.store_rtt_ms,
    )
    .await
    .map_err(RunError::Start)?;
    let target = &config.run.target;

    let stats = Arc::new(Stats::default());
    let (stop_tx, stop) = watch::channel(false);
    let service = {
        let (endpoints, stats) = (endpoints.clone(), stats.clone());
        let service_config = service_config.clone();
        tokio::spawn(async move {
            hotcount::service::run(&endpoints, &service_config, stop, stats).await
        })
    };

    let workload = generate(&config.workload);
    let options = PublishOptions {
        rate_per_sec: config.rate_per_sec,
        progress: config.progress,
        ..PublishOptions::default()
    };
    let topic = format!("projects/{}/topics/{TOPIC_ID}", target.project);
    let started = Instant::now();
    let published =
        publish::connect_and_publish(&endpoints, &topic, &workload, &options, cancel).await?;
    let drained = wait_for_drain(
        &emulators,
        &service_config.subscription,
        config.drain_timeout,
    )
    .await;
    let elapsed = started.elapsed();
    let _ = stop_tx.send(true);
    match service.await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(RunError::Start(format!("consumer: {e}"))),
        Err(e) => return Err(RunError::Start(format!("consumer task: {e}"))),
    }

    let commits = emulators.firestore_counters().get("Commit");
    let store_rpcs = emulators.firestore_counters().total();
    let hottest_document_writes = emulators
        .firestore()
        .hottest_documents(1)
        .first()
        .map_or(0, |d| d.writes);
    let verify = verify::connect_and_verify(&endpoints, target, &workload.truth).await?;
    let db = readback::connect(&endpoints, target)
        .await
        .map_err(verify::VerifyError::from)?;
    let rows = readback::read_memberships(&db)
        .await
        .map_err(verify::VerifyError::from)?;
    let measurements = report::measure(&rows);
    let latency = report::percentiles(&measurements.latency_micros);
    let info = RunInfo {
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        settings: settings(config),
        workload: Some(config.workload.clone()),
    };
    let files = report::write_report(
        &config.out_dir,
        &measurements,
        &info,
        &report::Machine::detect(),
    )?;
    emulators.shutdown().await;
    Ok(DemoSummary {
        publish: published,
        verify,
        stats,
        commits,
        store_rpcs,
        hottest_document_writes,
        elapsed,
        drained,
        latency,
        report: files,
    })
}

fn settings(config: &DemoConfig) -> Vec<(String, String)> {
    let r = &config.run;
    vec![
        ("shards".into(), r.shards.to_string()),
        (
            "counter shards, at most".into(),
            r.counter_shards.to_string(),
        ),
        (
            "counter shard target (writes/s)".into(),
            r.counter_shard_target_writes_per_sec.to_string(),
        ),
        (
            "flush interval (ms)".into(),
            r.flush_interval_ms.to_string(),
        ),
        (
            "flush min wait (ms)".into(),
            r.flush_min_wait_ms.to_string(),
        ),
        (
            "commits in flight, at most".into(),
            r.max_commits_in_flight.to_string(),
        ),
        ("max batch events".into(), r.max_batch_events.to_string()),
        ("streams".into(), r.streams.to_string()),
        (
            "max outstanding messages".into(),
            r.max_outstanding_messages.to_string(),
        ),
        ("strategy".into(), format!("{:?}", r.strategy)),
        (
            "publish rate (/s, 0 = max)".into(),
            config.rate_per_sec.to_string(),
        ),
        (
            "store RTT injected (ms)".into(),
            config.store_rtt_ms.to_string(),
        ),
        ("emulators".into(), "in-process, loopback".into()),
    ]
}

/// The topic every in-process run publishes to.
pub const TOPIC_ID: &str = "likes";

/// Starts both emulators in-process, adds `store_rtt_ms` to every Firestore
/// RPC (0 = none) and sets up [`TOPIC_ID`] with the subscription of
/// `service_config`. Shared by the demo and the benchmark; the error says
/// which step failed.
pub async fn start_stage(
    service_config: &hotcount::config::Config,
    project: &str,
    store_rtt_ms: u64,
) -> Result<(Emulators, Endpoints), String> {
    let emulators = Emulators::start(EmulatorsConfig::default())
        .await
        .map_err(|e| format!("emulators: {e}"))?;
    if store_rtt_ms > 0 {
        let rtt = FaultSpec::latency("*", Duration::from_millis(store_rtt_ms));
        emulators.firestore_faults().add(rtt)?;
    }
    let endpoints = Endpoints {
        pubsub_emulator_host: Some(emulators.pubsub_addr().to_string()),
        firestore_emulator_host: Some(emulators.firestore_addr().to_string()),
    };
    let subscription_id = service_config
        .subscription
        .rsplit('/')
        .next()
        .unwrap_or("likes-hotcount")
        .to_string();
    let setup_args = SetupArgs {
        project: project.to_string(),
        topic: TOPIC_ID.into(),
        subscription: subscription_id,
        dead_letter_topic: "likes-dead-letter".into(),
        dead_letter_subscription: "likes-dead-letter-inspect".into(),
        ack_deadline_secs: 60,
        min_retry_backoff_secs: 1,
        max_retry_backoff_secs: 60,
        max_delivery_attempts: 20,
        exactly_once: false,
    };
    setup::setup(&endpoints, &setup_args)
        .await
        .map_err(|e| format!("setup: {e}"))?;
    Ok((emulators, endpoints))
}

/// Waits until the subscription has nothing unacked (bounded).
async fn wait_for_drain(emulators: &Emulators, subscription: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let unacked = emulators
            .pubsub()
            .stats(subscription)
            .map_or(u64::MAX, |s| s.unacked);
        if unacked == 0 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The summary table the demo prints.
pub fn render(summary: &DemoSummary) -> String {
    let s = &summary.stats;
    let events = summary.publish.published.max(1) as f64;
    let v = &summary.verify;
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("  {name:<34} {value}\n"));
    row("messages published", summary.publish.published.to_string());
    row("events applied", s.applied.get().to_string());
    row("duplicates rejected", s.duplicates.get().to_string());
    row("stale events (no-op)", s.stale.get().to_string());
    row("poison quarantined", s.poison.get().to_string());
    row(
        "quarantine records / poison published",
        format!("{} / {}", v.quarantined, v.poison_expected),
    );
    row("batches committed", s.batches.get().to_string());
    row("Firestore commits", summary.commits.to_string());
    row(
        "store RPCs per 1k events",
        format!("{:.1}", summary.store_rpcs as f64 * 1000.0 / events),
    );
    row(
        "writes to the hottest document",
        summary.hottest_document_writes.to_string(),
    );
    row(
        "throughput (publish -> drained)",
        format!("{:.0} events/s", summary.throughput()),
    );
    row(
        "latency p50 / p90 / p99 / max",
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1} ms",
            summary.latency.p50_ms,
            summary.latency.p90_ms,
            summary.latency.p99_ms,
            summary.latency.max_ms
        ),
    );
    row(
        "posts verified exact",
        format!("{} of {}", v.posts_exact, v.posts_checked),
    );
    row("count mismatches", v.mismatches.len().to_string());
    row(
        "shard/membership invariant breaks",
        v.invariant_violations.len().to_string(),
    );
    row("report", summary.report.markdown.display().to_string());
    out
}
