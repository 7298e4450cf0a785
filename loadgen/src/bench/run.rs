//! Carries out a bench: every case with every runner, round by round,
//! each run in a fresh stage (publish, start the consumers, measure the
//! window, stop them, check the counts).
//!
//! Invariant: a run's stage, consumers and publisher live only for that
//! run; a wrong count is a [`Verdict`], never an error, and only a run
//! that published and drained everything is checked for exact counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Config, RunArgs, Strategy};
use tokio::sync::watch;

use super::result::{RunResult, Verdict};
use super::window::{Baseline, Window};
use super::{case_workload, ops, render, runners, workload_config, BenchConfig, Case, Runner};
use crate::consumer::{free_loopback_port, Consumer, NullMode};
use crate::front::PushFront;
use crate::publish::{self, PublishOptions};
use crate::report::{self, Percentiles};
use crate::run_error::RunError;
use crate::stage::{push_run_args, Stage, StageSpec};
use crate::verify;
use crate::workload::Workload;

/// How long after a run the bench waits for a consumer's rollups to be
/// refreshed before stopping it (a lone consumer's drain at stop has a
/// deadline, and no other replica takes over what it leaves).
const ROLLUP_WAIT: Duration = Duration::from_secs(30);

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
        workload_config(config, case)
            .validate()
            .map_err(|e| RunError::Invalid(e.to_string()))?;
        let workload = Arc::new(case_workload(config, case));
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
    let strategy = match runner {
        Runner::Hotcount(strategy)
        | Runner::Compare(strategy)
        | Runner::Push(strategy)
        | Runner::ComparePush(strategy) => strategy,
        Runner::Null
        | Runner::WriteFloor
        | Runner::ExactFloor
        | Runner::NullPush
        | Runner::ExactPushFloor
        | Runner::NoRollups => Strategy::Batched,
    };
    let (run_args, service_config) =
        consumer_settings(config, strategy, runner == Runner::NoRollups)?;
    let spec = StageSpec::for_consumer(
        &service_config,
        &run_args.target.project,
        config.store_rtt_ms,
    );
    let stage = Stage::start(&spec).await?;
    if let Some(format) = config.data_format {
        stage.raise_data_format(&run_args.target, format).await?;
    }
    let mut baseline = Baseline::take(&stage).await?;
    let ops_baseline = ops::OpsBaseline::take(&stage).await?;
    let (cancel_tx, cancel) = watch::channel(false);
    let publishing = Publishing::start(config, &stage, workload.clone(), cancel).await?;
    // The consumer reaches a PostgreSQL store through the stage's proxy.
    let (consumer_args, consumer_config) = stage.consumer_settings(&run_args, &service_config);
    // With push: each replica on an endpoint of its own checking the
    // emulator's tokens; one replica is pushed to directly, several
    // through a round-robin front (as Cloud Run's front end).
    let replicas = config.replicas.max(1);
    let push_addrs = match runner {
        Runner::Push(_) | Runner::ComparePush(_) | Runner::NullPush | Runner::ExactPushFloor => (0
            ..replicas)
            .map(|_| free_loopback_port("a push endpoint"))
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    // The window starts with the consumers, whatever they do before they
    // take messages (a push consumer gets ready, then the subscription is
    // switched to push).
    let log = config.consumer_log.as_deref();
    if let Some(log) = log {
        let heading = format!(
            "== {case:?} round {}: {} ==",
            round + 1,
            render::runner_name(runner)
        );
        mark_log(log, &heading);
    }
    let started = Instant::now();
    let mut consumers = Vec::new();
    for replica in 0..replicas {
        let (consumer_args, consumer_config) = match push_addrs.get(replica) {
            Some(&addr) => {
                let args = push_run_args(&consumer_args, addr, &stage.push_jwks_url());
                let config = args
                    .validate()
                    .map_err(|e| RunError::Invalid(e.to_string()))?;
                let config = stage.consumer_settings(&args, &config).1;
                (args, config)
            }
            None => (consumer_args.clone(), consumer_config.clone()),
        };
        consumers.push(match (runner, &config.null_consumer_bin) {
            (Runner::Null | Runner::WriteFloor | Runner::ExactFloor, Some(bin)) => {
                let mode = match runner {
                    Runner::WriteFloor => NullMode::WriteFloor,
                    Runner::ExactFloor => NullMode::ExactFloor,
                    _ => NullMode::Pull,
                };
                Consumer::start_null(bin, stage.endpoints(), &run_args, (mode, log))?
            }
            (Runner::NullPush | Runner::ExactPushFloor, Some(bin)) => {
                let addr = push_addrs
                    .get(replica)
                    .copied()
                    .ok_or_else(|| RunError::Invalid("no push address".into()))?;
                let mode = match runner {
                    Runner::ExactPushFloor => NullMode::ExactPush(addr),
                    _ => NullMode::Push(addr),
                };
                Consumer::start_null(bin, stage.endpoints(), &run_args, (mode, log))?
            }
            (
                Runner::Null
                | Runner::WriteFloor
                | Runner::ExactFloor
                | Runner::NullPush
                | Runner::ExactPushFloor,
                None,
            ) => {
                return Err(RunError::Invalid("no null consumer binary".into()));
            }
            (
                Runner::Hotcount(_)
                | Runner::Compare(_)
                | Runner::NoRollups
                | Runner::Push(_)
                | Runner::ComparePush(_),
                _,
            ) => Consumer::start(
                match runner {
                    Runner::Compare(_) | Runner::ComparePush(_) => config.compare_bin.as_deref(),
                    _ => config.consumer_bin.as_deref(),
                },
                stage.endpoints(),
                (&consumer_args, &consumer_config),
                log,
            )?,
        });
    }
    let _front = push_to_consumers(&stage, &consumers, &push_addrs).await?;
    let total = workload.messages.len() as u64;
    let target = &run_args.target;
    let layout = hotcount::store::firestore::Layout::new(
        &target.project,
        &target.database,
        &target.collection_prefix,
    );
    let top_rollup = layout.rollup(&top_post(&workload));
    let mut window = Window::measure(
        (&stage, &consumers),
        &mut baseline,
        (started, config.max_secs, total),
        &top_rollup,
    )
    .await;
    let _ = cancel_tx.send(true);
    let published = publishing.finish().await?;
    let completed = window.completed && published == total;
    // After the window: the wait is in no figure. Only where `check` reads
    // the rollups back.
    if completed && run_args.rollups.rollup_interval_ms > 0 {
        for consumer in &consumers {
            if let Some(left) = consumer.wait_rollups_refreshed(ROLLUP_WAIT).await {
                eprintln!(
                    "  rollups of {left} posts still wait for a refresh {} s after the run; stopping the consumer anyway",
                    ROLLUP_WAIT.as_secs()
                );
            }
        }
    }
    for consumer in consumers {
        consumer.stop().await?;
    }
    let ops = ops_baseline.finish(&stage).await?;
    window.add_server_figures(baseline).await?;
    // Reading back is not part of the measured window: no RTT for it.
    stage.emulators().firestore_faults().clear();
    let (verdict, latency) = match runner {
        Runner::Hotcount(_)
        | Runner::Compare(_)
        | Runner::NoRollups
        | Runner::Push(_)
        | Runner::ComparePush(_) => check(&stage, &run_args, &workload, completed).await?,
        Runner::Null
        | Runner::WriteFloor
        | Runner::ExactFloor
        | Runner::NullPush
        | Runner::ExactPushFloor => (Verdict::NotCounted, Percentiles::default()),
    };
    stage.shutdown().await;
    let mut result = window.into_result(
        (case, runner, round),
        published,
        completed,
        latency,
        verdict,
    );
    result.ops = ops;
    Ok(result)
}

/// Appends `line` to the log file `path` (a failure only loses the line).
fn mark_log(path: &std::path::Path, line: &str) {
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path);
    if let Ok(mut file) = file {
        let _ = writeln!(file, "{line}");
    }
}

/// The workload's most liked post (the viral one, in the viral case).
fn top_post(workload: &Workload) -> String {
    (workload.truth.counts.iter())
        .max_by_key(|(_, n)| **n)
        .map(|(post, _)| post.clone())
        .unwrap_or_default()
}

/// The consumer settings of one strategy: `config.run` with `strategy`
/// (and rollups off with `no_rollups`), its metrics endpoint off (a
/// child's is set by [`Consumer::start`]).
fn consumer_settings(
    config: &BenchConfig,
    strategy: Strategy,
    no_rollups: bool,
) -> Result<(RunArgs, Config), RunError> {
    let mut run_args = config.run.clone();
    run_args.flush.strategy = strategy;
    run_args.observability.metrics_addr = "off".into();
    if no_rollups {
        run_args.rollups.rollup_interval_ms = 0;
    }
    let service_config = run_args
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    Ok((run_args, service_config))
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

/// With push consumers (`addrs`, one per consumer): waits until each is
/// ready, then switches the subscription to push to it, or with several
/// to a round-robin front before them (returned: it lives as long as the
/// run). Nothing with pull.
async fn push_to_consumers(
    stage: &Stage,
    consumers: &[Consumer],
    addrs: &[std::net::SocketAddr],
) -> Result<Option<PushFront>, RunError> {
    if addrs.is_empty() {
        return Ok(None);
    }
    for consumer in consumers {
        if !consumer.wait_ready(Duration::from_secs(60)).await {
            return Err(RunError::Start("a push consumer did not get ready".into()));
        }
    }
    if let [addr] = addrs {
        stage.push_to(&format!("http://{addr}/pubsub/push")).await?;
        return Ok(None);
    }
    let front = PushFront::start().await;
    for &addr in addrs {
        front.add(addr);
    }
    stage.push_to(&front.url()).await?;
    Ok(Some(front))
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
    // The consumers' refreshers caught up before their stop (or the run
    // said how many posts still waited): rollups are exact at rest.
    let rollups = completed && run_args.rollups.rollup_interval_ms > 0;
    let report = verify::connect_and_verify(endpoints, target, &workload.truth, rollups).await?;
    let verdict = if !completed {
        Verdict::Partial {
            invariant_breaks: report.invariant_violations.len(),
        }
    } else if report.is_exact() {
        Verdict::Exact
    } else {
        Verdict::Wrong {
            mismatches: report.mismatches.len() + report.rollup_mismatches.len(),
            invariant_breaks: report.invariant_violations.len(),
        }
    };
    let measurements = report::connect_and_measure(endpoints, target)
        .await
        .map_err(verify::VerifyError::from)?;
    Ok((verdict, report::percentiles(&measurements.latency_micros)))
}
