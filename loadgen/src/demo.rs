//! The one-command demo: the stage (emulators in-process, setup), the
//! consumer in-process, a viral workload, drain, verify, report.
//!
//! Invariant: the demo's verdict comes from `verify` against the truth
//! computed from the generated events alone, never from the service's own
//! counters; the consumer is stopped (drained) before counts and rollups
//! are read. While it runs, the most liked posts' rollups are read as a
//! client would ([`rollup_lag`]), and those reads are left out of the
//! store figures.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Delivery, RunArgs};
use hotcount::telemetry::Stats;
use tokio::sync::watch;

use crate::consumer::{free_loopback_port, InProcess};
use crate::milestones::{self, MilestoneReport};
use crate::procfs::Machine;
use crate::publish::{self, PublishOptions, PublishReport};
use crate::report::{self, Percentiles, RunInfo};
use crate::rollup_lag::{self, RollupLag};
use hotcount_emulators::webhook::SinkFaults;

/// Longest wait, after the backlog drained, for the milestones to arrive.
const MILESTONE_WAIT: Duration = Duration::from_secs(30);
use crate::run_error::RunError;
use crate::stage::{push_run_args, Stage, StageSpec};
use crate::verify::{self, VerifyReport};
use crate::workload::{generate, WorkloadConfig};

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
    /// Run a webhook sink in-process and point the consumer's milestone
    /// notifications at it (unless `run` names a webhook, or rollups are off).
    pub milestones: bool,
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
    /// Whether the store was PostgreSQL (then the Firestore figures are
    /// not printed and `store_rpcs` are round trips).
    pub postgres: bool,
    /// Firestore commits served by the emulator.
    pub commits: u64,
    /// All Firestore RPCs served by the emulator during the run (with a
    /// PostgreSQL store: round trips to the server).
    pub store_rpcs: u64,
    /// Writes to the most written document.
    pub hottest_document_writes: u64,
    /// From the first publish until the backlog drained.
    pub elapsed: Duration,
    /// Whether the backlog drained before the timeout.
    pub drained: bool,
    /// Publish-to-commit latency over the memberships.
    pub latency: Percentiles,
    /// With rollups on: the age of what a reader of the most liked posts'
    /// rollups saw during the run.
    pub rollup_lag: Option<RollupLag>,
    /// With the in-process sink: the milestones it received.
    pub milestones: Option<MilestoneReport>,
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
            && self
                .milestones
                .as_ref()
                .is_none_or(MilestoneReport::is_exact)
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
    let mut run = config.run.clone();
    let sink = match config.milestones
        && run.milestones.milestone_webhook.is_none()
        && run.rollups.rollup_interval_ms > 0
    {
        true => {
            let sink = milestones::start_sink(SinkFaults::default()).await?;
            run.milestones.milestone_webhook = Some(sink.url());
            run.milestones.milestone_webhook_secret = Some(milestones::SECRET.into());
            Some(sink)
        }
        false => None,
    };
    // With push: the endpoint on a port picked now, the subscription
    // switched to push once the consumer is up, its tokens checked against
    // the emulator's keys (known once the emulators run).
    let push_addr = match run.push.delivery {
        Delivery::Push => Some(free_loopback_port("the push endpoint")?),
        Delivery::Pull => None,
    };
    let with_keys = |jwks_url: &str| match push_addr {
        Some(addr) => push_run_args(&run, addr, jwks_url),
        None => run.clone(),
    };
    let validate = |run: &RunArgs| run.validate().map_err(|e| RunError::Invalid(e.to_string()));
    let service_config = validate(&with_keys("http://127.0.0.1:1/keys"))?;
    let target = &run.target;
    let spec = StageSpec::for_consumer(&service_config, &target.project, config.store_rtt_ms);
    let stage = Stage::start(&spec).await?;
    let run_args = with_keys(&stage.push_jwks_url());
    let (_, service_config) = stage.consumer_settings(&run_args, &validate(&run_args)?);
    let consumer = InProcess::start(stage.endpoints(), &service_config);
    let stats = consumer.stats().clone();
    if let Some(addr) = push_addr {
        if !consumer.wait_ready(Duration::from_secs(60)).await {
            return Err(RunError::Start(
                "the push consumer did not get ready".into(),
            ));
        }
        stage.push_to(&format!("http://{addr}/pubsub/push")).await?;
    }

    let workload = generate(&config.workload);
    let options = PublishOptions {
        rate_per_sec: config.rate_per_sec,
        progress: config.progress,
        ..PublishOptions::default()
    };
    let started = Instant::now();
    let endpoints = stage.endpoints();
    let rollups = config.run.rollups.rollup_interval_ms > 0;
    let (stop_sampling, sampling) = watch::channel(false);
    let sampler = if rollups {
        let db = hotcount::connect::store_db(endpoints, target, 1)
            .await
            .map_err(|e| RunError::Start(format!("reading the rollups: {e}")))?;
        let posts = rollup_lag::top_posts(&workload.truth);
        Some(tokio::spawn(rollup_lag::sample(
            Arc::new(db),
            posts,
            sampling,
        )))
    } else {
        None
    };
    let published =
        publish::connect_and_publish(endpoints, stage.topic(), &workload, &options, cancel).await?;
    let drained = stage.wait_for_drain(config.drain_timeout).await;
    let elapsed = started.elapsed();
    let _ = stop_sampling.send(true);
    let rollup_lag = match sampler {
        Some(task) => task.await.ok(),
        None => None,
    };
    // The milestones the truth crosses, delivered (bounded) before the stop.
    let expected = match (&sink, &service_config.milestones.notify) {
        (Some(sink), Some(m)) => {
            let keys =
                milestones::expected_keys(&workload.truth, &m.thresholds, &service_config.consumer);
            milestones::wait_for(sink, &keys, MILESTONE_WAIT).await;
            keys
        }
        _ => Default::default(),
    };
    consumer.stop().await?;
    let milestones = sink
        .as_ref()
        .map(|sink| milestones::check(sink, &expected, &workload.truth));

    let emulators = stage.emulators();
    let commits = emulators.firestore_counters().get("Commit");
    // With PostgreSQL: the round trips the stage's proxy counted.
    // The sampler's reads are the demo's, not the service's.
    let sampled = rollup_lag.as_ref().map_or(0, |lag| lag.reads);
    let store_rpcs = match stage.postgres() {
        Some(pg) => pg.proxy.round_trips(),
        None => emulators
            .firestore_counters()
            .total()
            .saturating_sub(sampled),
    };
    let hottest_document_writes = emulators
        .firestore()
        .hottest_documents(1)
        .first()
        .map_or(0, |d| d.writes);
    let rollups = config.run.rollups.rollup_interval_ms > 0;
    let verify = verify::connect_and_verify(endpoints, target, &workload.truth, rollups).await?;
    let measurements = report::connect_and_measure(endpoints, target)
        .await
        .map_err(verify::VerifyError::from)?;
    let latency = report::percentiles(&measurements.latency_micros);
    let info = RunInfo {
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        settings: settings(config),
        workload: Some(config.workload.clone()),
    };
    let files = report::write_report(&config.out_dir, &measurements, &info, &Machine::detect())?;
    let postgres = stage.postgres().is_some();
    stage.shutdown().await;
    Ok(DemoSummary {
        publish: published,
        verify,
        stats,
        postgres,
        commits,
        store_rpcs,
        hottest_document_writes,
        elapsed,
        drained,
        latency,
        rollup_lag,
        milestones,
        report: files,
    })
}

fn settings(config: &DemoConfig) -> Vec<(String, String)> {
    let r = &config.run;
    vec![
        ("shards".into(), r.flush.shards.to_string()),
        (
            "counter shards, at most".into(),
            r.store_writes.counter_shards.to_string(),
        ),
        (
            "counter shard target (writes/s)".into(),
            r.store_writes
                .counter_shard_target_writes_per_sec
                .to_string(),
        ),
        (
            "flush interval (ms)".into(),
            r.flush.flush_interval_ms.to_string(),
        ),
        (
            "flush min wait (ms)".into(),
            r.flush.flush_min_wait_ms.to_string(),
        ),
        (
            "commits in flight, at most".into(),
            r.flush.max_commits_in_flight.to_string(),
        ),
        (
            "max batch events".into(),
            r.flush.max_batch_events.to_string(),
        ),
        ("streams".into(), r.source.streams.to_string()),
        (
            "max outstanding messages".into(),
            r.source.max_outstanding_messages.to_string(),
        ),
        ("strategy".into(), format!("{:?}", r.flush.strategy)),
        ("delivery".into(), format!("{:?}", r.push.delivery)),
        (
            "publish rate (/s, 0 = max)".into(),
            config.rate_per_sec.to_string(),
        ),
        (
            "store RTT injected (ms)".into(),
            config.store_rtt_ms.to_string(),
        ),
        ("store".into(), r.target.store.to_string()),
        (
            "rollup interval (ms, 0 = off)".into(),
            r.rollups.rollup_interval_ms.to_string(),
        ),
        ("emulators".into(), "in-process, loopback".into()),
    ]
}

/// The summary table the demo prints.
pub fn render(summary: &DemoSummary) -> String {
    let s = &summary.stats;
    let events = summary.publish.published.max(1) as f64;
    let v = &summary.verify;
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("  {name:<38} {value}\n"));
    row("messages published", summary.publish.published.to_string());
    row("events applied", s.applied.get().to_string());
    row("duplicates rejected", s.duplicates.get().to_string());
    row("stale events (no-op)", s.stale.get().to_string());
    row("poison quarantined", s.poison.get().to_string());
    row(
        "quarantine records / poison published",
        format!("{} / {}", v.quarantined, v.poison_expected),
    );
    if !v.quarantined_by_reason.is_empty() {
        let kinds: Vec<String> = v
            .quarantined_by_reason
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        row("quarantined by reason", kinds.join(", "));
    }
    row("batches committed", s.batches.get().to_string());
    let answers = |status: u16| push_answers(s, status);
    let statuses = [204, 503, 429, 401, 403];
    if statuses.iter().any(|&status| answers(status) > 0) {
        let counts: Vec<String> = statuses.iter().map(|&st| answers(st).to_string()).collect();
        row("push answers 204/503/429/401/403", counts.join(" / "));
    }
    let per_1k = format!("{:.1}", summary.store_rpcs as f64 * 1000.0 / events);
    if summary.postgres {
        row("round trips per 1k events", per_1k);
    } else {
        row("Firestore commits", summary.commits.to_string());
        row("store RPCs per 1k events", per_1k);
        row(
            "writes to the hottest document",
            summary.hottest_document_writes.to_string(),
        );
    }
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
    if let Some(cell) = v.rollups_exact_cell() {
        row("rollups exact at rest", cell);
    }
    if let Some(lag) = &summary.rollup_lag {
        row(
            "rollup age seen p50 / p99 (top posts)",
            format!(
                "{:.0} / {:.0} ms ({} samples)",
                lag.age.p50_ms, lag.age.p99_ms, lag.age.count
            ),
        );
    }
    if let Some(m) = &summary.milestones {
        row(
            "milestones delivered / truth crosses",
            format!(
                "{} / {} ({} calls, {} repeats deduped, {} bad signatures)",
                m.delivered, m.expected, m.requests, m.repeats, m.bad_signatures
            ),
        );
        for (post, reached) in &m.top {
            let list: Vec<String> = reached.iter().map(i64::to_string).collect();
            row(&format!("  milestones of {post}"), list.join(", "));
        }
    }
    row("report", summary.report.markdown.display().to_string());
    out
}

/// Push requests the consumer answered with `status`.
fn push_answers(stats: &Stats, status: u16) -> u64 {
    use hotcount::telemetry::labels::Label as _;
    use hotcount::telemetry::PushOutcome;
    PushOutcome::VALUES
        .iter()
        .filter(|&&outcome| hotcount::pipeline::push::status_of(outcome).as_u16() == status)
        .map(|&outcome| stats.push_requests.get(outcome))
        .sum()
}
