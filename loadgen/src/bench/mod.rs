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
use crate::front::PushFront;
use crate::procfs;
use crate::publish::{self, PublishOptions};
use crate::report::{self, Percentiles};
use crate::run_error::RunError;
use crate::stage::{push_run_args, Stage, StageSpec};
use crate::verify;
use crate::workload::{self, generate, Workload, WorkloadConfig};

pub mod erase;
mod ops;
mod ops_table;
mod render;

pub use ops::{FirestoreOps, PgOps, PubSubOps, StoreOps, TableOps};
pub use ops_table::render_ops;
pub use render::{render, render_progress, render_settings};

/// The workload shapes the benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// Zipf 1.1 over the posts.
    Zipf,
    /// One viral post takes about half the events (Zipf exponent chosen so
    /// that the most popular post's share is 50%).
    Viral,
    /// Real viral traffic's repetition: [`CONCENTRATED_POSTS`] posts (Zipf
    /// 1.1) and [`CONCENTRATED_USERS`] users whatever `--posts` and
    /// `--users` say, so most messages meet a membership already stored;
    /// 10 % publisher duplicates, about a third of the liked pairs unliked
    /// later, a poison message in 10,000, and the events shuffled (many
    /// arrive after a newer event of their pair: stale).
    Concentrated,
}

/// Posts of the [`Case::Concentrated`] workload.
pub const CONCENTRATED_POSTS: u32 = 300;
/// Users of the [`Case::Concentrated`] workload.
pub const CONCENTRATED_USERS: u32 = 3_000;

/// What consumes the workload in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// `hotcount run` with this strategy (pull delivery).
    Hotcount(Strategy),
    /// `hotcount run --delivery push` with this strategy: the subscription
    /// pushes to the consumer's endpoint (through a round-robin front with
    /// several replicas), tokens checked against the emulator's keys.
    Push(Strategy),
    /// `hotcount run` with this strategy, as the other build of
    /// [`BenchConfig::compare_bin`], right after [`Runner::Hotcount`] in
    /// each round: two builds side by side in one run.
    Compare(Strategy),
    /// [`Runner::Push`] as the other build of [`BenchConfig::compare_bin`],
    /// right after it in each round.
    ComparePush(Strategy),
    /// `hotcount run`, batched, with `--rollup-interval-ms 0`: the same
    /// run without rollups, beside the one with them (`--compare-rollups`).
    NoRollups,
    /// `hotcount-null-consumer`: receive and ack on hotcount's stream
    /// settings, nothing else; the delivery floor hotcount's CPU per event
    /// is compared with (the ceiling row).
    Null,
    /// `hotcount-null-consumer --delivery push`: an HTTP/1.1 endpoint that
    /// reads each pushed body and answers 204 at once, nothing else; the
    /// push floor (what one request per message costs by itself), with
    /// `--ceiling` and push among the deliveries.
    NullPush,
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
    /// Another `hotcount` binary (with `consumer_bin`), run after it on
    /// each strategy of each round and reported beside it: two builds
    /// measured side by side, round by round.
    pub compare_bin: Option<std::path::PathBuf>,
    /// Rounds: each case runs every runner this many times, interleaved
    /// (null, then each strategy, then again), so the medians compare runs
    /// made side by side.
    pub rounds: u32,
    /// Consumers (replicas) per run, on one subscription.
    pub replicas: usize,
    /// Also run batched with rollups off ([`Runner::NoRollups`]), last in
    /// each round.
    pub compare_rollups: bool,
    /// The data format each run's store is raised to before the consumers
    /// start (`hotcount setup --data-format`); `None`: left unrecorded
    /// (format 1), as a store an older build wrote.
    pub data_format: Option<u32>,
    /// The file child consumers append their log lines to (each run's
    /// marked by a heading line); `None` = this process's stderr.
    pub consumer_log: Option<std::path::PathBuf>,
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
    /// The consumers' CPU time from the moment a fifth of the messages
    /// were acked to the window's end, with the acks in that span: the
    /// steady state, start-up (connecting, the first leases, the store's
    /// first reads) left out. `None` in-process or when the fifth was not
    /// reached.
    pub consumer_cpu_steady: Option<(Duration, u64)>,
    /// The consumer's own commit duration (BatchGetDocuments + Commit, with
    /// retries) p50 and p99 at the end of the window, from its `Stats` or
    /// its `/metrics`: where the publish->commit time goes. `None` when it
    /// could not be read.
    pub commit_duration: Option<(Duration, Duration)>,
    /// Firestore: the rollup refreshers' RPCs in the window (BatchWrite,
    /// RunQuery, and the BatchGetDocuments beyond one per batch committed
    /// or rolled back); `None` on PostgreSQL (compare the round trips of a
    /// run without rollups).
    pub rollup_rpcs: Option<u64>,
    /// Firestore: writes to the rollup of the workload's most liked post
    /// in the window; `None` on PostgreSQL.
    pub top_rollup_writes: Option<u64>,
    /// The consumers' lease calls on the subscription in the window, as
    /// the emulator counted them (none with push: the answer is the ack).
    pub lease_calls: LeaseCalls,
    /// Consumers (replicas) that ran.
    pub replicas: usize,
    /// The store's and Pub/Sub's operation counts, from the run's start
    /// to its consumers' stop (see [`ops`]).
    pub ops: StoreOps,
    /// The count check.
    pub verdict: Verdict,
}

/// A consumer's calls to settle its leases, as the Pub/Sub emulator
/// counted them: a unary RPC or a StreamingPull request is one call,
/// however many ack ids it names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCalls {
    /// Acknowledge calls.
    pub acknowledge_calls: u64,
    /// Ack ids the Acknowledge calls named.
    pub acknowledge_ids: u64,
    /// ModifyAckDeadline calls (extensions and nacks).
    pub modify_ack_deadline_calls: u64,
    /// Ack ids the ModifyAckDeadline calls named.
    pub modify_ack_deadline_ids: u64,
}

impl LeaseCalls {
    /// The calls counted in `stats`.
    pub fn of(stats: &hotcount_emulators::pubsub::SubscriptionStats) -> Self {
        Self {
            acknowledge_calls: stats.acknowledge_calls,
            acknowledge_ids: stats.acknowledge_ids,
            modify_ack_deadline_calls: stats.modify_ack_deadline_calls,
            modify_ack_deadline_ids: stats.modify_ack_deadline_ids,
        }
    }

    /// The calls made since `before` was counted.
    pub fn since(self, before: Self) -> Self {
        Self {
            acknowledge_calls: self
                .acknowledge_calls
                .saturating_sub(before.acknowledge_calls),
            acknowledge_ids: self.acknowledge_ids.saturating_sub(before.acknowledge_ids),
            modify_ack_deadline_calls: self
                .modify_ack_deadline_calls
                .saturating_sub(before.modify_ack_deadline_calls),
            modify_ack_deadline_ids: self
                .modify_ack_deadline_ids
                .saturating_sub(before.modify_ack_deadline_ids),
        }
    }
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

    /// Consumer CPU per 1,000 messages acked after the first fifth, in
    /// milliseconds (see [`Self::consumer_cpu_steady`]).
    pub fn cpu_ms_per_1k_steady(&self) -> Option<f64> {
        self.consumer_cpu_steady
            .map(|(cpu, acked)| cpu.as_secs_f64() * 1e6 / acked.max(1) as f64)
    }

    /// PostgreSQL: writes per second to the counter rows of the most
    /// written post (all its shards).
    pub fn hottest_post_writes_per_sec(&self) -> Option<f64> {
        self.hottest_post_writes
            .map(|w| w as f64 / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// Rollup RPCs per 1,000 acked messages (Firestore).
    pub fn rollup_rpcs_per_1k(&self) -> Option<f64> {
        self.rollup_rpcs
            .map(|n| n as f64 * 1000.0 / self.acked.max(1) as f64)
    }

    /// Writes per second to the most liked post's rollup (Firestore).
    pub fn top_rollup_writes_per_sec(&self) -> Option<f64> {
        self.top_rollup_writes
            .map(|w| w as f64 / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// `n` per 1,000 acked messages.
    pub fn per_1k(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.acked.max(1) as f64
    }

    /// Writes per second to the most written document.
    pub fn hottest_writes_per_sec(&self) -> f64 {
        self.hottest_writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The workload of `case`.
pub fn workload_config(config: &BenchConfig, case: Case) -> WorkloadConfig {
    let spread = WorkloadConfig {
        events: config.events,
        posts: config.posts,
        users: config.users,
        zipf_exponent: 1.1,
        unlike_fraction: 0.05,
        duplicate_fraction: 0.05,
        poison_fraction: 0.01,
        hostile_fraction: 0.0,
        shuffle: false,
        seed: config.seed,
    };
    match case {
        Case::Zipf => spread,
        Case::Viral => WorkloadConfig {
            zipf_exponent: workload::exponent_for_top_share(config.posts, 0.5),
            ..spread
        },
        Case::Concentrated => WorkloadConfig {
            posts: CONCENTRATED_POSTS,
            users: CONCENTRATED_USERS,
            unlike_fraction: CONCENTRATED_UNLIKE_FRACTION,
            duplicate_fraction: 0.10,
            poison_fraction: 0.0001,
            shuffle: true,
            ..spread
        },
    }
}

/// Of the events on a liked pair of the [`Case::Concentrated`] workload,
/// the share that unlike it: on the ceiling's 500,000 messages, about one
/// like in three is taken back later
/// (`about_a_third_of_the_concentrated_likes_are_taken_back`).
pub const CONCENTRATED_UNLIKE_FRACTION: f64 = 0.4;

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

/// The runners of one round, in order: the null consumer (when asked for:
/// pulling, when pull is among the deliveries, then as the push floor,
/// when push is) then each strategy with each delivery of `deliveries`
/// (pull is [`Runner::Hotcount`], push [`Runner::Push`]), each run
/// followed by the compared build's run of it (when one is given), then
/// batched with rollups off (when asked for).
pub fn runners(config: &BenchConfig) -> Vec<Runner> {
    let compare = config.compare_bin.is_some() && config.consumer_bin.is_some();
    let no_rollups = config.compare_rollups.then_some(Runner::NoRollups);
    let deliveries = if config.deliveries.is_empty() {
        &[Delivery::Pull][..]
    } else {
        &config.deliveries[..]
    };
    let null = [
        (Delivery::Pull, Runner::Null),
        (Delivery::Push, Runner::NullPush),
    ]
    .into_iter()
    .filter(|(delivery, _)| config.null_consumer_bin.is_some() && deliveries.contains(delivery))
    .map(|(_, runner)| runner);
    let hotcount = config.strategies.iter().flat_map(|&s| {
        deliveries.iter().flat_map(move |&delivery| match delivery {
            Delivery::Pull => vec![Runner::Hotcount(s)]
                .into_iter()
                .chain(compare.then_some(Runner::Compare(s)))
                .collect::<Vec<_>>(),
            Delivery::Push => vec![Runner::Push(s)]
                .into_iter()
                .chain(compare.then_some(Runner::ComparePush(s)))
                .collect::<Vec<_>>(),
        })
    });
    null.chain(hotcount).chain(no_rollups).collect()
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
        Runner::Null | Runner::NullPush | Runner::NoRollups => Strategy::Batched,
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
        Runner::Push(_) | Runner::ComparePush(_) | Runner::NullPush => (0..replicas)
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
            (Runner::Null, Some(bin)) => {
                Consumer::start_null(bin, stage.endpoints(), &run_args, (None, log))?
            }
            (Runner::NullPush, Some(bin)) => Consumer::start_null(
                bin,
                stage.endpoints(),
                &run_args,
                (push_addrs.get(replica).copied(), log),
            )?,
            (Runner::Null | Runner::NullPush, None) => {
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
    for consumer in consumers {
        consumer.stop().await?;
    }
    let ops = ops_baseline.finish(&stage).await?;
    window.add_server_figures(baseline).await?;
    // Reading back is not part of the measured window: no RTT for it.
    stage.emulators().firestore_faults().clear();
    let completed = window.completed && published == total;
    let (verdict, latency) = match runner {
        Runner::Hotcount(_)
        | Runner::Compare(_)
        | Runner::NoRollups
        | Runner::Push(_)
        | Runner::ComparePush(_) => check(&stage, &run_args, &workload, completed).await?,
        Runner::Null | Runner::NullPush => (Verdict::NotCounted, Percentiles::default()),
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
    run_args.strategy = strategy;
    run_args.metrics_addr = "off".into();
    if no_rollups {
        run_args.rollup_interval_ms = 0;
    }
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
    rollup_rpcs: u64,
    lease_calls: LeaseCalls,
    probe: Option<crate::postgres::Probe>,
}

/// The Firestore RPCs of rollup refreshers so far (and of anything else
/// that reads without committing: nothing else in a bench run): BatchWrite,
/// RunQuery (the sweep), and every BatchGetDocuments beyond one per batch
/// committed or rolled back. Saturates at 0.
fn rollup_rpcs(stage: &Stage) -> u64 {
    let counters = stage.emulators().firestore_counters();
    let batches = counters.get("Commit") + counters.get("Rollback");
    counters.get("BatchWrite")
        + counters.get("RunQuery")
        + counters.get("BatchGetDocuments").saturating_sub(batches)
}

impl Baseline {
    async fn take(stage: &Stage) -> Result<Self, RunError> {
        let emulators = stage.emulators();
        emulators.firestore().reset_stats();
        let store_rpcs = emulators.firestore_counters().total();
        let commits = emulators.firestore_counters().get("Commit");
        let rollup_rpcs = rollup_rpcs(stage);
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
            rollup_rpcs,
            lease_calls: LeaseCalls::of(&stage.subscription_stats()),
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
    consumer_cpu_steady: Option<(Duration, u64)>,
    commit_duration: Option<(Duration, Duration)>,
    rollup_rpcs: Option<u64>,
    top_rollup_writes: Option<u64>,
    lease_calls: LeaseCalls,
    replicas: usize,
}

impl Window {
    /// Waits for `total` acks (at most `max_secs` from `started`, when the
    /// consumers started) and reads every figure at that moment, before
    /// the consumers drain (`top_rollup`: the name of the most liked
    /// post's rollup).
    async fn measure(
        (stage, consumers): (&Stage, &[Consumer]),
        baseline: &mut Baseline,
        (started, max_secs, total): (Instant, u64, u64),
        top_rollup: &str,
    ) -> Self {
        let deadline = started + Duration::from_secs(max_secs);
        // The steady state starts once a fifth is acked.
        let fifth = if stage.wait_for_acks(total / 5, deadline).await {
            cpu_of(consumers).map(|cpu| (cpu, stage.acked()))
        } else {
            None
        };
        let completed = stage.wait_for_acks(total, deadline).await;
        let elapsed = started.elapsed();
        let acked = stage.acked();
        let lease_calls = LeaseCalls::of(&stage.subscription_stats()).since(baseline.lease_calls);
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
        let postgres = stage.postgres().is_some();
        let rollup_rpcs = rollup_rpcs(stage).saturating_sub(baseline.rollup_rpcs);
        let top_rollup_writes = emulators.firestore().document_writes(top_rollup);
        if let Some(pg) = stage.postgres() {
            store_rpcs = pg.proxy.round_trips();
        }
        // The replicas' largest peak RSS, their CPU together.
        let mut peak_rss_bytes = 0;
        let mut rss_is_consumer_only = true;
        for consumer in consumers {
            let (rss, only) = consumer.peak_rss_bytes();
            peak_rss_bytes = peak_rss_bytes.max(rss);
            rss_is_consumer_only &= only;
        }
        let consumer_cpu = cpu_of(consumers);
        let consumer_cpu_steady = consumer_cpu.zip(fifth).map(|(cpu, (early, acked_early))| {
            (cpu.saturating_sub(early), acked.saturating_sub(acked_early))
        });
        let commit_duration = match consumers.first() {
            Some(consumer) => consumer.commit_duration().await,
            None => None,
        };
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
            consumer_cpu,
            consumer_cpu_steady,
            commit_duration,
            rollup_rpcs: (!postgres).then_some(rollup_rpcs),
            top_rollup_writes: (!postgres).then_some(top_rollup_writes),
            lease_calls,
            replicas: consumers.len(),
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
            consumer_cpu_steady: self.consumer_cpu_steady,
            commit_duration: self.commit_duration,
            rollup_rpcs: self.rollup_rpcs,
            top_rollup_writes: self.top_rollup_writes,
            lease_calls: self.lease_calls,
            replicas: self.replicas,
            ops: StoreOps::default(),
            verdict,
        }
    }
}

/// The consumers' CPU time together (user + system); `None` when one
/// shares this process.
fn cpu_of(consumers: &[Consumer]) -> Option<Duration> {
    consumers
        .iter()
        .try_fold(Duration::ZERO, |sum, c| Some(sum + c.cpu_time()?))
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
    // The consumers drained at their stop: rollups are exact at rest.
    let rollups = completed && run_args.rollup_interval_ms > 0;
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

/// Whether the runs call for exit code 1: a completed run's counts are
/// wrong, or a partial run broke the invariant.
pub fn any_failed(results: &[RunResult]) -> bool {
    results.iter().any(|r| match r.verdict {
        Verdict::Exact | Verdict::NotCounted => false,
        Verdict::Wrong { .. } => true,
        Verdict::Partial { invariant_breaks } => invariant_breaks > 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        run: RunArgs,
    }

    fn config(events: u64) -> BenchConfig {
        BenchConfig {
            run: <Run as clap::Parser>::parse_from(["run"]).run,
            events,
            posts: 100_000,
            users: 100_000,
            seed: 42,
            store_rtt_ms: 10,
            max_secs: 60,
            rate_per_sec: 0,
            cases: vec![Case::Concentrated],
            strategies: vec![Strategy::Batched],
            deliveries: vec![Delivery::Pull],
            backlog: true,
            consumer_bin: None,
            null_consumer_bin: None,
            compare_bin: None,
            rounds: 1,
            replicas: 1,
            compare_rollups: false,
            data_format: None,
            consumer_log: None,
        }
    }

    #[test]
    fn about_a_third_of_the_concentrated_likes_are_taken_back() {
        let workload = generate(&workload_config(&config(500_000), Case::Concentrated));
        let c = &workload.counts;
        let taken_back = c.unlikes as f64 / c.likes as f64;
        assert!((0.28..=0.38).contains(&taken_back), "{taken_back}");
        assert_eq!(c.posts, u64::from(CONCENTRATED_POSTS));
        assert!(c.memberships < u64::from(CONCENTRATED_POSTS * CONCENTRATED_USERS));
        assert_eq!(c.duplicates, 50_000);
        assert_eq!(c.poison, 50);
    }

    #[test]
    fn a_compared_build_runs_right_after_the_first_on_each_strategy() {
        let bin = Some(std::path::PathBuf::from("hotcount"));
        let mut config = BenchConfig {
            strategies: vec![Strategy::Batched, Strategy::PerEvent],
            consumer_bin: bin.clone(),
            compare_bin: bin.clone(),
            null_consumer_bin: bin,
            ..config(1)
        };
        use Strategy::{Batched, PerEvent};
        assert_eq!(
            runners(&config),
            [
                Runner::Null,
                Runner::Hotcount(Batched),
                Runner::Compare(Batched),
                Runner::Hotcount(PerEvent),
                Runner::Compare(PerEvent),
            ]
        );
        config.consumer_bin = None;
        config.null_consumer_bin = None;
        assert_eq!(
            runners(&config),
            [Runner::Hotcount(Batched), Runner::Hotcount(PerEvent)],
            "in-process, there is no second binary to run"
        );
        config.compare_rollups = true;
        assert_eq!(
            runners(&config),
            [
                Runner::Hotcount(Batched),
                Runner::Hotcount(PerEvent),
                Runner::NoRollups
            ],
            "rollups off last"
        );
        config.compare_rollups = false;
        config.deliveries = vec![Delivery::Push, Delivery::Pull];
        assert_eq!(
            runners(&config),
            [
                Runner::Push(Batched),
                Runner::Hotcount(Batched),
                Runner::Push(PerEvent),
                Runner::Hotcount(PerEvent)
            ],
            "each strategy pushed then pulled, side by side"
        );
        config.consumer_bin = Some("hotcount".into());
        config.compare_bin = Some("hotcount-before".into());
        config.null_consumer_bin = Some("hotcount-null-consumer".into());
        config.strategies = vec![Batched];
        assert_eq!(
            runners(&config),
            [
                Runner::Null,
                Runner::NullPush,
                Runner::Push(Batched),
                Runner::ComparePush(Batched),
                Runner::Hotcount(Batched),
                Runner::Compare(Batched),
            ],
            "both floors first, each run followed by the compared build's"
        );
        config.deliveries = vec![Delivery::Push];
        assert_eq!(
            runners(&config),
            [
                Runner::NullPush,
                Runner::Push(Batched),
                Runner::ComparePush(Batched)
            ],
            "push alone: only the push floor"
        );
    }

    #[test]
    fn the_concentrated_case_ignores_the_spread_cases_posts_and_users() {
        let w = workload_config(&config(1_000), Case::Concentrated);
        assert_eq!((w.posts, w.users), (CONCENTRATED_POSTS, CONCENTRATED_USERS));
        assert!(w.shuffle);
        let z = workload_config(&config(1_000), Case::Zipf);
        assert_eq!((z.posts, z.users, z.shuffle), (100_000, 100_000, false));
    }
}
