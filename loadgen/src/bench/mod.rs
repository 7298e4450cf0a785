//! The end-to-end benchmark: both strategies (`batched`, `per-event`) on the
//! same generated workload, each in a fresh pair of in-process emulators with
//! an injected round trip per Firestore RPC, printed side by side; or, with
//! `--store postgres://...`, against a real PostgreSQL server, emptied
//! before each run ([`crate::postgres::prepare`]).
//!
//! Invariant: every figure comes from outside the service under test (the
//! emulators' RPC and write counters, the Pub/Sub subscription's acks, the
//! membership documents' commit times, `/proc` through [`crate::procfs`];
//! with PostgreSQL, the round trips the stage's proxy relayed and the
//! server's logical decoding of the window: transactions committed and the
//! writes to each counter row),
//! and a count is called exact only for a run that published and drained
//! everything; a run stopped by `max_secs` is reported as partial, its
//! throughput measured over the messages it acked, and only the shard
//! invariant is checked for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Config, Delivery, RunArgs, Strategy};
use tokio::sync::watch;

use crate::consumer::{free_loopback_port, Consumer};
use crate::procfs;
use crate::publish::{self, PublishOptions};
use crate::report::{self, Percentiles};
use crate::run_error::RunError;
use crate::stage::{push_run_args, Stage, StageSpec};
use crate::{generate, verify, workload, Workload, WorkloadConfig};

mod render;

pub use render::{render, render_progress, render_settings};

/// The workload shapes the benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// Zipf 1.1 over the posts.
    Zipf,
    /// One viral post takes about half the events (Zipf exponent chosen so
    /// that the most popular post's share is 50%).
    Viral,
}

/// What consumes the workload in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// `hotcount run` with this strategy and delivery.
    Hotcount(Strategy, Delivery),
    /// `hotcount-null-consumer`: receive and ack on hotcount's stream
    /// settings, nothing else; the delivery floor hotcount's CPU per event
    /// is compared with (the ceiling row).
    Null,
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
    /// The deliveries to run each strategy with, in order (push: the
    /// subscription pushes to the consumer's endpoint, switched to push
    /// once the consumer is ready).
    pub deliveries: Vec<Delivery>,
    /// Publish the whole workload before the consumer starts, and measure
    /// from the consumer's start: the consumer's capacity on a backlog,
    /// without the publisher competing for the CPU.
    pub backlog: bool,
    /// Run the consumer as this `hotcount` binary in its own process (its
    /// peak RSS is then the consumer's alone) instead of in-process.
    pub consumer_bin: Option<std::path::PathBuf>,
    /// Also run `hotcount-null-consumer` (this binary, as a child process)
    /// on each case, first in each round: the ceiling row.
    pub null_consumer_bin: Option<std::path::PathBuf>,
    /// Rounds: each case runs every runner this many times, interleaved
    /// (null, then each strategy, then again), so the medians compare runs
    /// made side by side.
    pub rounds: u32,
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
    /// The null consumer counts nothing: only its acks are measured.
    NotCounted,
}

/// What one strategy measured on one case.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Workload shape.
    pub case: Case,
    /// What consumed it.
    pub runner: Runner,
    /// The round (0-based) this run belongs to.
    pub round: u32,
    /// Messages published.
    pub published: u64,
    /// Messages acked by the subscription (emulator) at the end of the measured window.
    pub acked: u64,
    /// From the first publish to drained (or to `max_secs`).
    pub elapsed: Duration,
    /// Whether the run published and drained everything.
    pub completed: bool,
    /// Whether the store was PostgreSQL (else the Firestore emulator).
    pub postgres: bool,
    /// Firestore RPCs served by the emulator in the measured window; with
    /// PostgreSQL, round trips (client sends that followed an answer of
    /// the server, over all connections, pipelined requests counted once).
    pub store_rpcs: u64,
    /// Firestore commits served by the emulator in the measured window;
    /// with PostgreSQL, transactions that wrote something, committed in it.
    pub commits: u64,
    /// The most written document (with PostgreSQL: counter row) in the
    /// measured window; empty when it could not be measured.
    pub hottest_document: String,
    /// Writes to the most written document (or counter row): inserts and
    /// updates committed in the window.
    pub hottest_writes: u64,
    /// PostgreSQL: writes to the counter rows of the most written post,
    /// all its shards together (`None` on Firestore or without decoding).
    pub hottest_post_writes: Option<u64>,
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

    /// Consumer CPU (user + system) per 1,000 acked messages, in
    /// milliseconds; `None` in-process.
    pub fn cpu_ms_per_1k(&self) -> Option<f64> {
        self.consumer_cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / self.acked.max(1) as f64)
    }

    /// PostgreSQL: writes per second to the counter rows of the most
    /// written post (all its shards).
    pub fn hottest_post_writes_per_sec(&self) -> Option<f64> {
        self.hottest_post_writes
            .map(|w| w as f64 / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// Writes per second to the most written document.
    pub fn hottest_writes_per_sec(&self) -> f64 {
        self.hottest_writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The workload of `case`.
pub fn workload_config(config: &BenchConfig, case: Case) -> WorkloadConfig {
    let zipf_exponent = match case {
        Case::Zipf => 1.1,
        Case::Viral => workload::exponent_for_top_share(config.posts, 0.5),
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
        for round in 0..config.rounds.max(1) {
            for runner in runners(config) {
                let result = run_one(config, case, runner, round, workload.clone()).await?;
                on_result(&result);
                results.push(result);
            }
        }
    }
    Ok(results)
}

/// The runners of one round, in order: the null consumer (when asked for)
/// then each strategy with each delivery.
pub fn runners(config: &BenchConfig) -> Vec<Runner> {
    let null = config.null_consumer_bin.as_ref().map(|_| Runner::Null);
    let hotcount = config.strategies.iter().flat_map(|&strategy| {
        config
            .deliveries
            .iter()
            .map(move |&delivery| Runner::Hotcount(strategy, delivery))
    });
    null.into_iter().chain(hotcount).collect()
}

/// One strategy on one workload, in a fresh stage: publish, run the
/// consumer, measure the window, stop, check the counts.
async fn run_one(
    config: &BenchConfig,
    case: Case,
    runner: Runner,
    round: u32,
    workload: Arc<Workload>,
) -> Result<RunResult, RunError> {
    // The null consumer runs on the stage and stream settings of batched pull.
    let (strategy, delivery) = match runner {
        Runner::Hotcount(strategy, delivery) => (strategy, delivery),
        Runner::Null => (Strategy::Batched, Delivery::Pull),
    };
    let (run_args, service_config) = consumer_settings(config, strategy)?;
    let spec = StageSpec::for_consumer(
        &service_config,
        &run_args.target.project,
        config.store_rtt_ms,
    );
    let stage = Stage::start(&spec).await?;
    let mut baseline = Baseline::take(&stage).await?;
    let (cancel_tx, cancel) = watch::channel(false);
    let publishing = Publishing::start(config, &stage, workload.clone(), cancel).await?;
    // The consumer reaches a PostgreSQL store through the stage's proxy.
    let (consumer_args, consumer_config) = stage.consumer_settings(&run_args, &service_config);
    let push_addr = match delivery {
        Delivery::Push => Some(free_loopback_port("the push endpoint")?),
        Delivery::Pull => None,
    };
    let (consumer_args, consumer_config) = match push_addr {
        Some(addr) => {
            let args = push_run_args(&consumer_args, addr, &stage.push_jwks_url());
            let config = args
                .validate()
                .map_err(|e| RunError::Invalid(e.to_string()))?;
            let config = stage.consumer_settings(&args, &config).1;
            (args, config)
        }
        None => (consumer_args, consumer_config),
    };
    // The window starts with the consumer, whatever it does before it takes messages.
    let started = Instant::now();
    let consumer = match (runner, &config.null_consumer_bin) {
        (Runner::Null, Some(bin)) => Consumer::start_null(bin, stage.endpoints(), &run_args)?,
        (Runner::Null, None) => {
            return Err(RunError::Invalid("no null consumer binary".into()));
        }
        (Runner::Hotcount(..), _) => Consumer::start(
            config.consumer_bin.as_deref(),
            stage.endpoints(),
            &consumer_args,
            &consumer_config,
        )?,
    };
    if let Some(addr) = push_addr {
        if !consumer.wait_ready(Duration::from_secs(60)).await {
            return Err(RunError::Start(
                "the push consumer did not get ready".into(),
            ));
        }
        stage.push_to(&format!("http://{addr}/pubsub/push")).await?;
    }
    let total = workload.messages.len() as u64;
    let mut window = Window::measure(
        (&stage, &consumer),
        &mut baseline,
        started,
        config.max_secs,
        total,
    )
    .await;
    let _ = cancel_tx.send(true);
    let published = publishing.finish().await?;
    consumer.stop().await?;
    window.add_server_figures(baseline).await?;
    // Reading back is not part of the measured window: no RTT for it.
    stage.emulators().firestore_faults().clear();
    let completed = window.completed && published == total;
    let (verdict, latency) = match runner {
        Runner::Hotcount(..) => check(&stage, &run_args, &workload, completed).await?,
        Runner::Null => (Verdict::NotCounted, Percentiles::default()),
    };
    stage.shutdown().await;
    Ok(window.into_result(
        (case, runner, round),
        published,
        completed,
        latency,
        verdict,
    ))
}

/// The consumer settings of one strategy: `config.run` with `strategy`,
/// its metrics endpoint off (a child's is set by [`Consumer::start`]).
fn consumer_settings(
    config: &BenchConfig,
    strategy: Strategy,
) -> Result<(RunArgs, Config), RunError> {
    let mut run_args = config.run.clone();
    run_args.strategy = strategy;
    run_args.metrics_addr = "off".into();
    let service_config = run_args
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    Ok((run_args, service_config))
}

/// The emulators' counters before the window, and this process's peak RSS
/// reset to now; with PostgreSQL, the proxy's round trips reset and a
/// decoding slot opened.
struct Baseline {
    store_rpcs: u64,
    commits: u64,
    probe: Option<crate::postgres::Probe>,
}

impl Baseline {
    async fn take(stage: &Stage) -> Result<Self, RunError> {
        let emulators = stage.emulators();
        emulators.firestore().reset_stats();
        let store_rpcs = emulators.firestore_counters().total();
        let commits = emulators.firestore_counters().get("Commit");
        let probe = match stage.postgres() {
            Some(pg) => {
                pg.proxy.reset_round_trips();
                Some(crate::postgres::Probe::begin(&pg.url).await?)
            }
            None => None,
        };
        procfs::reset_peak_rss();
        Ok(Self {
            store_rpcs,
            commits,
            probe,
        })
    }
}

/// The publisher: already done (`backlog`), or running beside the consumer.
enum Publishing {
    Done(u64),
    Running(tokio::task::JoinHandle<Result<publish::PublishReport, publish::PublishError>>),
}

impl Publishing {
    /// Starts publishing `workload` to the stage's topic; with a backlog,
    /// waits until all of it is published.
    async fn start(
        config: &BenchConfig,
        stage: &Stage,
        workload: Arc<Workload>,
        cancel: watch::Receiver<bool>,
    ) -> Result<Self, RunError> {
        let (endpoints, topic) = (stage.endpoints().clone(), stage.topic().to_string());
        let options = PublishOptions {
            rate_per_sec: config.rate_per_sec,
            progress: false,
            ..PublishOptions::default()
        };
        let publishing = tokio::spawn(async move {
            publish::connect_and_publish(&endpoints, &topic, &workload, &options, cancel).await
        });
        Ok(if config.backlog {
            Publishing::Done(publisher_result(publishing).await?)
        } else {
            Publishing::Running(publishing)
        })
    }

    /// Messages published, once the publisher is done (cancel it first).
    async fn finish(self) -> Result<u64, RunError> {
        match self {
            Publishing::Done(n) => Ok(n),
            Publishing::Running(publishing) => publisher_result(publishing).await,
        }
    }
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

/// What the measured window saw: from the first publish, or with a backlog
/// from the consumer's start, to the last ack (or the cap).
struct Window {
    postgres: bool,
    elapsed: Duration,
    completed: bool,
    acked: u64,
    store_rpcs: u64,
    commits: u64,
    hottest_document: String,
    hottest_writes: u64,
    hottest_post_writes: Option<u64>,
    peak_rss_bytes: u64,
    rss_is_consumer_only: bool,
    consumer_cpu: Option<Duration>,
    commit_duration: Option<(Duration, Duration)>,
}

impl Window {
    /// Waits for `total` acks (at most `max_secs` from `started`, when the
    /// consumer started) and reads every figure at that moment, before the
    /// consumer drains.
    async fn measure(
        (stage, consumer): (&Stage, &Consumer),
        baseline: &mut Baseline,
        started: Instant,
        max_secs: u64,
        total: u64,
    ) -> Self {
        let deadline = started + Duration::from_secs(max_secs);
        let completed = stage.wait_for_acks(total, deadline).await;
        let elapsed = started.elapsed();
        let acked = stage.acked();
        if let Some(probe) = &mut baseline.probe {
            probe.mark_end().await;
        }
        let emulators = stage.emulators();
        let mut store_rpcs = emulators.firestore_counters().total() - baseline.store_rpcs;
        let commits = emulators.firestore_counters().get("Commit") - baseline.commits;
        let hottest = emulators.firestore().hottest_documents(1);
        let (hottest_document, hottest_writes) = hottest
            .first()
            .map_or((String::new(), 0), |d| (d.name.clone(), d.writes));
        if let Some(pg) = stage.postgres() {
            store_rpcs = pg.proxy.round_trips();
        }
        let (peak_rss_bytes, rss_is_consumer_only) = consumer.peak_rss_bytes();
        Self {
            postgres: stage.postgres().is_some(),
            elapsed,
            completed,
            acked,
            store_rpcs,
            commits,
            hottest_document,
            hottest_writes,
            hottest_post_writes: None,
            peak_rss_bytes,
            rss_is_consumer_only,
            consumer_cpu: consumer.cpu_time(),
            commit_duration: consumer.commit_duration().await,
        }
    }

    /// With PostgreSQL: the transactions and the hottest counter row's
    /// writes committed in the window, decoded now (after the consumer
    /// stopped: decoding is not measured); none are made up without a slot.
    async fn add_server_figures(&mut self, baseline: Baseline) -> Result<(), RunError> {
        let Some(probe) = baseline.probe else {
            return Ok(());
        };
        let window = probe.finish().await?;
        (self.commits, self.hottest_document, self.hottest_writes) = match &window {
            Some(w) => (w.transactions, w.hottest_row.clone(), w.hottest_writes),
            None => (0, String::new(), 0),
        };
        self.hottest_post_writes = window.map(|w| w.hottest_post_writes);
        Ok(())
    }

    fn into_result(
        self,
        (case, runner, round): (Case, Runner, u32),
        published: u64,
        completed: bool,
        latency: Percentiles,
        verdict: Verdict,
    ) -> RunResult {
        RunResult {
            case,
            runner,
            round,
            published,
            acked: self.acked,
            elapsed: self.elapsed,
            completed,
            postgres: self.postgres,
            store_rpcs: self.store_rpcs,
            commits: self.commits,
            hottest_document: self.hottest_document,
            hottest_writes: self.hottest_writes,
            hottest_post_writes: self.hottest_post_writes,
            latency,
            peak_rss_bytes: self.peak_rss_bytes,
            rss_is_consumer_only: self.rss_is_consumer_only,
            consumer_cpu: self.consumer_cpu,
            commit_duration: self.commit_duration,
            verdict,
        }
    }
}

/// The count check (exact only for a `completed` run) and the
/// publish->commit latency, read back once the consumer is stopped.
async fn check(
    stage: &Stage,
    run_args: &RunArgs,
    workload: &Workload,
    completed: bool,
) -> Result<(Verdict, Percentiles), RunError> {
    let (endpoints, target) = (stage.endpoints(), &run_args.target);
    let report = verify::connect_and_verify(endpoints, target, &workload.truth).await?;
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
    let measurements = report::connect_and_measure(endpoints, target)
        .await
        .map_err(verify::VerifyError::from)?;
    Ok((verdict, report::percentiles(&measurements.latency_micros)))
}

/// Whether the runs call for exit code 1: a completed run's counts are
/// wrong, or a partial run broke the invariant.
pub fn any_failed(results: &[RunResult]) -> bool {
    results.iter().any(|r| match r.verdict {
        Verdict::Exact | Verdict::NotCounted => false,
        Verdict::Wrong { .. } => true,
        Verdict::Partial { invariant_breaks } => invariant_breaks > 0,
    })
}
