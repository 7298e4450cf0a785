//! The end-to-end benchmark: both strategies (`batched`, `per-event`) on the
//! same generated workload, each in a fresh pair of in-process emulators with
//! an injected round trip per Firestore RPC, printed side by side.
//!
//! Invariant: every figure comes from outside the service under test (the
//! emulators' RPC and write counters, the Pub/Sub subscription's acks, the
//! membership documents' commit times, `/proc/self/status`), and a count is
//! called exact only for a run that published and drained everything; a run
//! stopped by `max_secs` is reported as partial, its throughput measured over
//! the messages it acked, and only the shard invariant is checked for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{RunArgs, Strategy};
use hotcount::telemetry::Stats;
use hotcount_emulators::Emulators;
use tokio::sync::watch;

use crate::publish::{self, PublishOptions};
use crate::report::{self, Percentiles};
use crate::run_error::RunError;
use crate::{generate, readback, verify, Workload, WorkloadConfig};

/// The workload shapes the benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// Zipf 1.1 over the posts.
    Zipf,
    /// One viral post takes about half the events (Zipf exponent chosen so
    /// that the most popular post's share is 50%).
    Viral,
}

/// What the benchmark runs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Consumer settings shared by both strategies (the strategy is overridden per run).
    pub run: RunArgs,
    /// Messages per workload (valid + duplicates + poison).
    pub events: u64,
    /// Distinct posts.
    pub posts: u32,
    /// Distinct users.
    pub users: u32,
    /// Seed (the same workload for both strategies).
    pub seed: u64,
    /// Injected latency per Firestore RPC, in milliseconds.
    pub store_rtt_ms: u64,
    /// Longest run per strategy and case, in seconds (publish + drain).
    pub max_secs: u64,
    /// Publish rate, messages per second (0 = as fast as possible).
    pub rate_per_sec: u64,
    /// The workloads to run.
    pub cases: Vec<Case>,
    /// The strategies to run, in order.
    pub strategies: Vec<Strategy>,
    /// Publish the whole workload before the consumer starts, and measure
    /// from the consumer's start: the consumer's capacity on a backlog,
    /// without the publisher competing for the CPU.
    pub backlog: bool,
    /// Run the consumer as this `hotcount` binary in its own process (its
    /// peak RSS is then the consumer's alone) instead of in-process.
    pub consumer_bin: Option<std::path::PathBuf>,
}

/// How a run's counts were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything published and drained; every post's count exact, the
    /// shard invariant kept.
    Exact,
    /// Everything drained but some counts or the invariant are wrong.
    Wrong {
        /// Posts whose count differs from the truth.
        mismatches: usize,
        /// Posts whose shards do not sum to their liked memberships.
        invariant_breaks: usize,
    },
    /// Stopped by `max_secs` before draining: counts cannot be compared with
    /// the truth of the whole workload; the shard invariant was checked.
    Partial {
        /// Posts whose shards do not sum to their liked memberships.
        invariant_breaks: usize,
    },
}

/// What one strategy measured on one case.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Workload shape.
    pub case: Case,
    /// Strategy.
    pub strategy: Strategy,
    /// Messages published.
    pub published: u64,
    /// Messages acked by the subscription (emulator) at the end of the measured window.
    pub acked: u64,
    /// From the first publish to drained (or to `max_secs`).
    pub elapsed: Duration,
    /// Whether the run published and drained everything.
    pub completed: bool,
    /// Firestore RPCs served by the emulator in the measured window.
    pub store_rpcs: u64,
    /// Firestore commits served by the emulator in the measured window.
    pub commits: u64,
    /// The most written document and its writes in the measured window.
    pub hottest_document: String,
    /// Writes to the most written document.
    pub hottest_writes: u64,
    /// Publish -> commit latency over the final membership writes.
    pub latency: Percentiles,
    /// Peak resident set during the run, bytes: of the consumer process
    /// alone with [`BenchConfig::consumer_bin`], else of the whole process
    /// (consumer, emulators and publisher share it).
    pub peak_rss_bytes: u64,
    /// Whether `peak_rss_bytes` is the consumer's alone.
    pub rss_is_consumer_only: bool,
    /// CPU time (user + system) of the consumer process in the window;
    /// `None` when the consumer shares this process.
    pub consumer_cpu: Option<Duration>,
    /// The consumer's own commit duration (BatchGetDocuments + Commit, with
    /// retries) p50 and p99 at the end of the window, from its `Stats` or
    /// its `/metrics`: where the publish->commit time goes. `None` when it
    /// could not be read.
    pub commit_duration: Option<(Duration, Duration)>,
    /// The count check.
    pub verdict: Verdict,
}

impl RunResult {
    /// Acked messages per second over the measured window.
    pub fn events_per_sec(&self) -> f64 {
        self.acked as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Store RPCs per 1,000 acked messages.
    pub fn rpcs_per_1k(&self) -> f64 {
        self.store_rpcs as f64 * 1000.0 / self.acked.max(1) as f64
    }

    /// Writes per second to the most written document.
    pub fn hottest_writes_per_sec(&self) -> f64 {
        self.hottest_writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The Zipf exponent that gives the most popular of `posts` posts the
/// share `share` of the events (bisection; 0 when one post).
pub fn exponent_for_top_share(posts: u32, share: f64) -> f64 {
    let top = |s: f64| {
        let total: f64 = (1..=posts).map(|k| 1.0 / f64::from(k).powf(s)).sum();
        1.0 / total
    };
    let (mut lo, mut hi) = (0.0_f64, 10.0_f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if top(mid) < share {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The workload of `case`.
pub fn workload_config(config: &BenchConfig, case: Case) -> WorkloadConfig {
    let zipf_exponent = match case {
        Case::Zipf => 1.1,
        Case::Viral => exponent_for_top_share(config.posts, 0.5),
    };
    WorkloadConfig {
        events: config.events,
        posts: config.posts,
        users: config.users,
        zipf_exponent,
        unlike_fraction: 0.05,
        duplicate_fraction: 0.05,
        poison_fraction: 0.01,
        hostile_fraction: 0.0,
        seed: config.seed,
    }
}

/// Runs every case with every strategy; `on_result` sees each run as it ends.
/// A wrong count is a [`Verdict`], not an error.
pub async fn run(
    config: &BenchConfig,
    mut on_result: impl FnMut(&RunResult),
) -> Result<Vec<RunResult>, RunError> {
    config
        .run
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let mut results = Vec::new();
    for &case in &config.cases {
        let workload_config = workload_config(config, case);
        workload_config
            .validate()
            .map_err(|e| RunError::Invalid(e.to_string()))?;
        let workload = Arc::new(generate(&workload_config));
        for &strategy in &config.strategies {
            let result = run_one(config, case, strategy, workload.clone()).await?;
            on_result(&result);
            results.push(result);
        }
    }
    Ok(results)
}

/// One strategy on one workload, in fresh emulators.
async fn run_one(
    config: &BenchConfig,
    case: Case,
    strategy: Strategy,
    workload: Arc<Workload>,
) -> Result<RunResult, RunError> {
    let mut run_args = config.run.clone();
    run_args.strategy = strategy;
    run_args.metrics_addr = "off".into();
    let service_config = run_args
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let (emulators, endpoints) = crate::demo::start_stage(
        &service_config,
        &run_args.target.project,
        config.store_rtt_ms,
    )
    .await
    .map_err(RunError::Start)?;
    let target = run_args.target.clone();
    let subscription = service_config.subscription.clone();
    emulators.firestore().reset_stats();
    let rpcs_before = emulators.firestore_counters().total();
    let commits_before = emulators.firestore_counters().get("Commit");
    reset_peak_rss();

    let (cancel_tx, cancel) = watch::channel(false);
    let topic = format!(
        "projects/{}/topics/{}",
        target.project,
        crate::demo::TOPIC_ID
    );
    let publishing = {
        let (endpoints, workload) = (endpoints.clone(), workload.clone());
        let options = PublishOptions {
            rate_per_sec: config.rate_per_sec,
            progress: false,
            ..PublishOptions::default()
        };
        tokio::spawn(async move {
            publish::connect_and_publish(&endpoints, &topic, &workload, &options, cancel).await
        })
    };
    let (published, publishing) = if config.backlog {
        (Some(publisher_result(publishing).await?), None)
    } else {
        (None, Some(publishing))
    };
    let consumer = Consumer::start(config, &endpoints, &run_args, &service_config)?;
    // The window: from the first publish, or with a backlog from the
    // consumer's start, to the last ack (or the cap).
    let started = Instant::now();
    let deadline = started + Duration::from_secs(config.max_secs);
    let total = workload.messages.len() as u64;
    let completed = wait_for_acks(&emulators, &subscription, total, deadline).await;
    let elapsed = started.elapsed();
    // The measured window ends here, before the consumer drains.
    let acked = acked(&emulators, &subscription);
    let store_rpcs = emulators.firestore_counters().total() - rpcs_before;
    let commits = emulators.firestore_counters().get("Commit") - commits_before;
    let hottest = emulators.firestore().hottest_documents(1);
    let (hottest_document, hottest_writes) = hottest
        .first()
        .map_or((String::new(), 0), |d| (d.name.clone(), d.writes));
    let (peak_rss_bytes, rss_is_consumer_only) = consumer.peak_rss_bytes();
    let consumer_cpu = consumer.cpu_time();
    let commit_duration = consumer.commit_duration().await;

    let _ = cancel_tx.send(true);
    let published = match (published, publishing) {
        (Some(n), _) => n,
        (None, Some(publishing)) => publisher_result(publishing).await?,
        (None, None) => 0,
    };
    consumer.stop().await?;
    // Reading back is not part of the measured window: no RTT for it.
    emulators.firestore_faults().clear();

    let report = verify::connect_and_verify(&endpoints, &target, &workload.truth).await?;
    let completed = completed && published == total;
    let verdict = if !completed {
        Verdict::Partial {
            invariant_breaks: report.invariant_violations.len(),
        }
    } else if report.is_exact() {
        Verdict::Exact
    } else {
        Verdict::Wrong {
            mismatches: report.mismatches.len(),
            invariant_breaks: report.invariant_violations.len(),
        }
    };
    let db = readback::connect(&endpoints, &target)
        .await
        .map_err(verify::VerifyError::from)?;
    let rows = readback::read_memberships(&db)
        .await
        .map_err(verify::VerifyError::from)?;
    let latency = report::percentiles(&report::measure(&rows).latency_micros);
    emulators.shutdown().await;
    Ok(RunResult {
        case,
        strategy,
        published,
        acked,
        elapsed,
        completed,
        store_rpcs,
        commits,
        hottest_document,
        hottest_writes,
        latency,
        peak_rss_bytes,
        rss_is_consumer_only,
        consumer_cpu,
        commit_duration,
        verdict,
    })
}

async fn publisher_result(
    publishing: tokio::task::JoinHandle<Result<publish::PublishReport, publish::PublishError>>,
) -> Result<u64, RunError> {
    match publishing.await {
        Ok(Ok(report)) => Ok(report.published),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(RunError::Start(format!("publisher task: {e}"))),
    }
}

/// The consumer under test: `hotcount::service::run` in this process, or
/// the `hotcount run` binary as a child process.
enum Consumer {
    InProcess {
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<Result<Arc<Stats>, hotcount::service::ServiceError>>,
        stats: Arc<Stats>,
    },
    Process {
        child: tokio::process::Child,
        /// Where its `/metrics` listens (loopback).
        metrics: std::net::SocketAddr,
    },
}

impl Consumer {
    fn start(
        config: &BenchConfig,
        endpoints: &hotcount::config::Endpoints,
        run_args: &RunArgs,
        service_config: &hotcount::config::Config,
    ) -> Result<Self, RunError> {
        let Some(bin) = &config.consumer_bin else {
            let (stop, stop_rx) = watch::channel(false);
            let (endpoints, service_config) = (endpoints.clone(), service_config.clone());
            let stats = Arc::new(Stats::default());
            let task = tokio::spawn({
                let stats = stats.clone();
                async move { hotcount::service::run(&endpoints, &service_config, stop_rx, stats).await }
            });
            return Ok(Consumer::InProcess { stop, task, stats });
        };
        // A free loopback port for the child's /metrics (read at the end
        // of the window).
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| RunError::Start(format!("a port for the consumer's metrics: {e}")))?;
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("run")
            .args(consumer_flags(run_args, &metrics.to_string()));
        if let Some(h) = &endpoints.pubsub_emulator_host {
            cmd.env("PUBSUB_EMULATOR_HOST", h);
        }
        if let Some(h) = &endpoints.firestore_emulator_host {
            cmd.env("FIRESTORE_EMULATOR_HOST", h);
        }
        let child = cmd
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| RunError::Start(format!("spawning {}: {e}", bin.display())))?;
        Ok(Consumer::Process { child, metrics })
    }

    /// Peak RSS so far, and whether it is the consumer's alone.
    fn peak_rss_bytes(&self) -> (u64, bool) {
        match self {
            Consumer::InProcess { .. } => (peak_rss_bytes_of("self"), false),
            Consumer::Process { child, .. } => (
                child
                    .id()
                    .map_or(0, |pid| peak_rss_bytes_of(&pid.to_string())),
                true,
            ),
        }
    }

    /// CPU time of the consumer process so far (`None` in-process).
    fn cpu_time(&self) -> Option<Duration> {
        match self {
            Consumer::InProcess { .. } => None,
            Consumer::Process { child, .. } => child.id().and_then(cpu_time_of),
        }
    }

    /// The consumer's commit duration p50 and p99 so far, as it measures it.
    async fn commit_duration(&self) -> Option<(Duration, Duration)> {
        match self {
            Consumer::InProcess { stats, .. } => Some((
                stats.commit_duration.quantile(0.5),
                stats.commit_duration.quantile(0.99),
            )),
            Consumer::Process { metrics, .. } => {
                // Read at the end of the window: a slow answer is a missing
                // figure, not a failed run.
                let (status, text) =
                    hotcount::http::fetch(*metrics, "/metrics", Duration::from_secs(1))
                        .await
                        .ok()?;
                if status != 200 {
                    return None;
                }
                let name = hotcount::telemetry::names::COMMIT_DURATION;
                Some((
                    summary_quantile(&text, name, "0.5")?,
                    summary_quantile(&text, name, "0.99")?,
                ))
            }
        }
    }

    /// Stops the consumer: in-process it drains; a child process is killed
    /// (the window is over; what it had not acked is redelivered, and a
    /// killed consumer never breaks a count, which the check proves).
    async fn stop(self) -> Result<(), RunError> {
        match self {
            Consumer::InProcess { stop, task, .. } => {
                let _ = stop.send(true);
                match task.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(RunError::Start(format!("consumer: {e}"))),
                    Err(e) => Err(RunError::Start(format!("consumer task: {e}"))),
                }
            }
            Consumer::Process { mut child, .. } => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(RunError::Start(format!("consumer exited early: {status}")));
                }
                let _ = child.kill().await;
                Ok(())
            }
        }
    }
}

/// The value of `name{quantile="q"}` in a Prometheus text exposition, as
/// a duration (the summary is in seconds).
fn summary_quantile(text: &str, name: &str, q: &str) -> Option<Duration> {
    let seconds = hotcount::http::sample_value(text, &format!("{name}{{quantile=\"{q}\"}}"))?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// The `hotcount run` flags that reproduce `args` (every flag: derived
/// from `RunArgs` itself, so none is dropped), with its metrics endpoint on
/// `metrics_addr` (`off` for none).
pub fn consumer_flags(args: &RunArgs, metrics_addr: &str) -> Vec<String> {
    let mut args = args.clone();
    args.metrics_addr = metrics_addr.to_string();
    args.to_flags()
}

fn acked(emulators: &Emulators, subscription: &str) -> u64 {
    emulators.pubsub().acks(subscription).unwrap_or(0)
}

/// Waits until `total` messages are acked, or the deadline; true if all were.
async fn wait_for_acks(
    emulators: &Emulators,
    subscription: &str,
    total: u64,
    deadline: Instant,
) -> bool {
    loop {
        if acked(emulators, subscription) >= total {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resets the process's peak RSS (`VmHWM`) to its current RSS (Linux 4.0+;
/// elsewhere a no-op, and the peak then covers the whole process lifetime).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `VmHWM` of this process, in bytes (0 when unknown).
pub fn peak_rss_bytes() -> u64 {
    peak_rss_bytes_of("self")
}

/// User + system CPU time of process `pid` from `/proc/{pid}/stat`
/// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
fn cpu_time_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// `VmHWM` of process `pid` (`self` for this one), in bytes (0 when unknown).
fn peak_rss_bytes_of(pid: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Batched => "batched",
        Strategy::PerEvent => "per-event",
    }
}

fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Exact => "EXACT".into(),
        Verdict::Wrong {
            mismatches,
            invariant_breaks,
        } => format!("WRONG ({mismatches} posts, {invariant_breaks} invariant breaks)"),
        Verdict::Partial { invariant_breaks } => {
            format!("partial run; invariant breaks: {invariant_breaks}")
        }
    }
}

/// The side-by-side table of one case (Markdown), with the ratios when
/// both strategies ran.
pub fn render(results: &[RunResult], case: Case) -> String {
    let runs: Vec<&RunResult> = results.iter().filter(|r| r.case == case).collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut out = format!("\n### {case:?}\n\n| metric |");
    for r in &runs {
        out.push_str(&format!(" {} |", strategy_name(r.strategy)));
    }
    out.push_str("\n|---|");
    for _ in &runs {
        out.push_str("---:|");
    }
    out.push('\n');
    let mut row = |name: &str, f: &dyn Fn(&RunResult) -> String| {
        out.push_str(&format!("| {name} |"));
        for r in &runs {
            out.push_str(&format!(" {} |", f(r)));
        }
        out.push('\n');
    };
    row("messages acked / published", &|r| {
        format!("{} / {}", r.acked, r.published)
    });
    row("measured window (s)", &|r| {
        format!(
            "{:.1}{}",
            r.elapsed.as_secs_f64(),
            if r.completed { "" } else { " (capped)" }
        )
    });
    row("events/s (acked / window)", &|r| {
        format!("{:.0}", r.events_per_sec())
    });
    row("store RPCs per 1,000 events", &|r| {
        format!("{:.1}", r.rpcs_per_1k())
    });
    row("commits", &|r| r.commits.to_string());
    row("hottest document writes/s", &|r| {
        format!("{:.1}", r.hottest_writes_per_sec())
    });
    row("hottest document", &|r| {
        r.hottest_document
            .split("/documents/")
            .nth(1)
            .unwrap_or(&r.hottest_document)
            .to_string()
    });
    row("publish->commit p50 / p99 (ms)", &|r| {
        format!("{:.0} / {:.0}", r.latency.p50_ms, r.latency.p99_ms)
    });
    row("commit duration p50 / p99 (ms, consumer's view)", &|r| {
        r.commit_duration.map_or("n/a".to_string(), |(p50, p99)| {
            format!(
                "{:.0} / {:.0}",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            )
        })
    });
    row("peak RSS (MiB)", &|r| {
        format!(
            "{:.0} ({})",
            r.peak_rss_bytes as f64 / (1024.0 * 1024.0),
            if r.rss_is_consumer_only {
                "consumer process"
            } else {
                "whole process"
            }
        )
    });
    row("consumer CPU per 1,000 events (ms)", &|r| {
        r.consumer_cpu
            .map_or("n/a (in-process)".to_string(), |cpu| {
                format!("{:.0}", cpu.as_secs_f64() * 1e6 / r.acked.max(1) as f64)
            })
    });
    row("counts", &|r| verdict_text(&r.verdict));
    let find = |s| runs.iter().find(|r| r.strategy == s);
    if let (Some(b), Some(p)) = (find(Strategy::Batched), find(Strategy::PerEvent)) {
        out.push_str(&format!(
            "\nbatched / per-event: throughput x{:.1}, store RPCs per event x{:.3}\n",
            b.events_per_sec() / p.events_per_sec().max(1e-9),
            b.rpcs_per_1k() / p.rpcs_per_1k().max(1e-9),
        ));
    }
    out
}

/// `hotcount-loadgen bench`: the flags.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Consumer settings shared by both strategies (`--strategy` is ignored: see `--strategies`).
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategies to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Strategy::Batched, Strategy::PerEvent])]
    pub strategies: Vec<Strategy>,
    /// Workloads to run.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Case::Zipf, Case::Viral])]
    pub cases: Vec<Case>,
    /// Messages per workload (valid + 5% duplicates + 1% poison).
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 100_000)]
    pub posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 100_000)]
    pub users: u32,
    /// Seed of the workload (the same for every strategy).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Injected latency per Firestore RPC, in milliseconds (models the real round trip).
    #[arg(long, default_value_t = 10)]
    pub store_rtt_ms: u64,
    /// Longest run per strategy and workload, in seconds; a slower run is
    /// stopped and measured over what it acked (reported as partial).
    #[arg(long, default_value_t = 60)]
    pub max_secs: u64,
    /// Publish rate in messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Also write the tables to this Markdown file.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Publish the whole workload first, then start the consumer and
    /// measure from its start (the consumer's capacity on a backlog).
    #[arg(long)]
    pub backlog: bool,
    /// Run the consumer as the `hotcount` binary in a child process (its
    /// own peak RSS is reported) instead of in this process.
    #[arg(long)]
    pub consumer_process: bool,
    /// The `hotcount` binary for `--consumer-process` (default: next to this one).
    #[arg(long)]
    pub hotcount_bin: Option<std::path::PathBuf>,
}

/// Runs `hotcount-loadgen bench` and prints the tables; exit 1 when a
/// completed run's counts are wrong or a partial run broke the invariant.
pub async fn run_command(args: BenchArgs) -> Result<std::process::ExitCode, RunError> {
    let config = BenchConfig {
        run: args.run,
        events: args.events,
        posts: args.posts,
        users: args.users,
        seed: args.seed,
        store_rtt_ms: args.store_rtt_ms,
        max_secs: args.max_secs,
        rate_per_sec: args.rate,
        cases: args.cases,
        strategies: args.strategies,
        backlog: args.backlog,
        consumer_bin: args.consumer_process.then(|| {
            args.hotcount_bin
                .clone()
                .unwrap_or_else(crate::chaos::default_hotcount_bin)
        }),
    };
    eprintln!(
        "hotcount bench: {} messages over {} posts, store RTT {} ms, at most {} s per run",
        config.events, config.posts, config.store_rtt_ms, config.max_secs
    );
    let results = run(&config, |r| {
        eprintln!(
            "  {:?} {}: {:.0} events/s, {:.1} RPCs/1k, {}",
            r.case,
            strategy_name(r.strategy),
            r.events_per_sec(),
            r.rpcs_per_1k(),
            verdict_text(&r.verdict)
        );
    })
    .await?;
    let mut tables = format!(
        "store RTT {} ms per RPC; {} messages, {} posts, {} users, seed {}; publish rate {}{}; consumer {}; cap {} s per run; shards {}, counter shards <= {} at {} writes/s each, flush interval {} ms (min wait {} ms), commits in flight {}, max batch {}, streams {}, per-event concurrency {}\n",
        config.store_rtt_ms,
        config.events,
        config.posts,
        config.users,
        config.seed,
        if config.rate_per_sec == 0 { "max".to_string() } else { format!("{}/s", config.rate_per_sec) },
        if config.backlog { ", all published before the consumer starts (window from its start)" } else { "" },
        if config.consumer_bin.is_some() { "in a child process" } else { "in this process" },
        config.max_secs,
        config.run.shards,
        config.run.counter_shards,
        config.run.counter_shard_target_writes_per_sec,
        config.run.flush_interval_ms,
        config.run.flush_min_wait_ms,
        config.run.max_commits_in_flight,
        config.run.max_batch_events,
        config.run.streams,
        config.run.per_event_concurrency,
    );
    for &case in &config.cases {
        tables.push_str(&render(&results, case));
    }
    print!("{tables}");
    if let Some(path) = &args.out {
        if let Err(e) = std::fs::write(path, &tables) {
            eprintln!("warning: writing {}: {e}", path.display());
        }
    }
    let bad = results.iter().any(|r| match r.verdict {
        Verdict::Exact => false,
        Verdict::Wrong { .. } => true,
        Verdict::Partial { invariant_breaks } => invariant_breaks > 0,
    });
    Ok(if bad {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viral_exponent_gives_the_top_post_half_the_events() {
        let s = exponent_for_top_share(100_000, 0.5);
        let total: f64 = (1..=100_000u32).map(|k| 1.0 / f64::from(k).powf(s)).sum();
        assert!((1.0 / total - 0.5).abs() < 1e-6, "share {}", 1.0 / total);
    }

    #[test]
    fn commit_duration_quantiles_are_read_from_the_metrics_text() {
        let stats = Stats::default();
        for ms in [10, 20, 30, 400] {
            stats.commit_duration.record(Duration::from_millis(ms));
        }
        let text = stats.render_prometheus();
        let name = hotcount::telemetry::names::COMMIT_DURATION;
        let p50 = summary_quantile(&text, name, "0.5").expect("p50 exported");
        let p99 = summary_quantile(&text, name, "0.99").expect("p99 exported");
        assert!(
            p50 >= Duration::from_millis(19) && p50 <= Duration::from_millis(21),
            "{p50:?}"
        );
        assert!(p99 >= Duration::from_millis(390), "{p99:?}");
        assert_eq!(summary_quantile(&text, name, "0.42"), None);
    }

    #[test]
    fn peak_rss_is_read_from_proc() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(peak_rss_bytes() > 0);
        }
    }
}
