//! The `hotcount-loadgen` command: parse, run publish/verify/report, map outcomes to exit codes.
//!
//! Exit codes: 0 success (verify: every post exact and the invariant kept);
//! 1 verify found mismatches, or some publishes failed; 2 error; 130 cancelled.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use hotcount::config::{Endpoints, Target};
use hotcount_loadgen::publish::{self, PublishOptions, PublishReport};
use hotcount_loadgen::report::{self, RunInfo};
use hotcount_loadgen::verify::{self, VerifyReport};
use hotcount_loadgen::workload::MessageMixArgs;
use hotcount_loadgen::{generate, Truth, WorkloadConfig};
use tokio::sync::watch;

/// mimalloc instead of the system allocator: the pipeline allocates many
/// small, short-lived objects on several threads, where glibc's malloc
/// spent ~45 % of the consumer's CPU (docs/BENCHMARKS.md, profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Load generator for hotcount: publish a workload with a known exact answer,
/// verify what the service stored, report latency and throughput.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: emulators in-process, consumer, viral workload, counts verified.
    Demo(DemoArgs),
    /// Both strategies side by side on the same workload, emulators with an injected store RTT.
    Bench(hotcount_loadgen::bench::BenchArgs),
    /// Generate a workload, write its truth file, publish it to a topic.
    Publish(PublishArgs),
    /// Consumer processes under kill -9, injected faults and a replay; counts verified.
    Chaos(hotcount_loadgen::chaos::ChaosArgs),
    /// Replicas following a viral spike under the HPA, by model: PNG and tables.
    Simulate(hotcount_loadgen::simulate::SimulateArgs),
    /// Compare every post's count and membership documents with a truth file.
    Verify {
        #[command(flatten)]
        target: Target,
        /// Truth file written by `publish`.
        #[arg(long, env = "LOADGEN_TRUTH", default_value = "truth.json")]
        truth: PathBuf,
        /// Mismatches printed at most (all are counted).
        #[arg(long, default_value_t = 50)]
        show: usize,
    },
    /// Write report.md, latency.png and throughput.png from the memberships.
    Report {
        #[command(flatten)]
        target: Target,
        /// Directory to write into (created if needed).
        #[arg(long, env = "LOADGEN_OUT", default_value = "loadgen-report")]
        out: PathBuf,
        /// Truth file, to record the workload's settings in the report.
        #[arg(long, env = "LOADGEN_TRUTH")]
        truth: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// The consumer's settings (defaults as `hotcount run`).
    #[command(flatten)]
    run: hotcount::config::RunArgs,
    /// Messages to publish (valid + duplicates + poison).
    #[arg(long, default_value_t = 200_000)]
    events: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 10_000)]
    posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 100_000)]
    users: u32,
    /// Zipf exponent of post popularity.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Probability that an event on a liked (post, user) is an unlike.
    #[arg(long, default_value_t = 0.05)]
    unlike_fraction: f64,
    /// Duplicate and poison fractions (shared with `chaos`).
    #[command(flatten)]
    mix: MessageMixArgs,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Publish rate, messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Added latency per Firestore RPC in milliseconds, to model real round trips.
    #[arg(long, default_value_t = 0)]
    store_rtt_ms: u64,
    /// Where the report is written.
    #[arg(long, default_value = "reports/demo")]
    out: PathBuf,
    /// Longest wait for the backlog to drain, in seconds.
    #[arg(long, default_value_t = 600)]
    drain_timeout_secs: u64,
    /// Do not draw a progress bar.
    #[arg(long)]
    no_progress: bool,
}

#[derive(Args, Debug)]
struct PublishArgs {
    #[command(flatten)]
    target: Target,
    /// Topic id (or full `projects/*/topics/*` name).
    #[arg(long, env = "HOTCOUNT_TOPIC", default_value = "likes")]
    topic: String,
    /// Messages to publish in total (valid + duplicates + poison).
    #[arg(long, env = "LOADGEN_EVENTS", default_value_t = 10_000)]
    events: u64,
    /// Target rate in messages per second; 0 = as fast as possible.
    #[arg(long, env = "LOADGEN_RATE", default_value_t = 0)]
    rate: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 100)]
    posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 5_000)]
    users: u32,
    /// Zipf exponent of post popularity (0 = uniform; 2 = one post takes most traffic).
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Probability that an event on a liked (post, user) is an unlike (else a double like).
    #[arg(long, default_value_t = 0.2)]
    unlike_fraction: f64,
    /// Fraction of messages that republish an earlier one verbatim (publisher retries).
    #[arg(long, default_value_t = 0.05)]
    duplicate_fraction: f64,
    /// Fraction of messages that are poison.
    #[arg(long, default_value_t = 0.01)]
    poison_fraction: f64,
    /// Seed of the workload.
    #[arg(long, env = "LOADGEN_SEED", default_value_t = 42)]
    seed: u64,
    /// Where to write the truth file.
    #[arg(long, env = "LOADGEN_TRUTH", default_value = "truth.json")]
    truth: PathBuf,
    /// Publishes awaiting their result at most.
    #[arg(long, default_value_t = 5_000)]
    max_in_flight: usize,
    /// Keep each event's generation time as `occurredAt` instead of its publish time.
    #[arg(long)]
    keep_generation_time: bool,
    /// Do not draw a progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Generate and write the truth file only; publish nothing.
    #[arg(long)]
    dry_run: bool,
}

impl PublishArgs {
    fn workload(&self) -> WorkloadConfig {
        WorkloadConfig {
            events: self.events,
            posts: self.posts,
            users: self.users,
            zipf_exponent: self.zipf,
            unlike_fraction: self.unlike_fraction,
            duplicate_fraction: self.duplicate_fraction,
            poison_fraction: self.poison_fraction,
            hostile_fraction: 0.0,
            seed: self.seed,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Demo(args) => run_demo(args).await,
        Command::Bench(args) => Ok(hotcount_loadgen::bench::run_command(args).await?),
        Command::Chaos(args) => run_chaos(args).await,
        Command::Publish(args) => run_publish(&cli.endpoints, args).await,
        Command::Simulate(args) => Ok(hotcount_loadgen::simulate::run_command(&args)?),
        Command::Verify {
            target,
            truth,
            show,
        } => {
            let truth = Truth::load(&truth)?;
            let report = verify::connect_and_verify(&cli.endpoints, &target, &truth).await?;
            print_verify(&report, show);
            Ok(if report.is_exact() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Report { target, out, truth } => {
            let workload = match &truth {
                Some(path) => Some(Truth::load(path)?.config),
                None => None,
            };
            let mut settings = vec![
                ("project".to_string(), target.project.clone()),
                ("database".to_string(), target.database.clone()),
                (
                    "collection prefix".to_string(),
                    target.collection_prefix.clone(),
                ),
                ("out".to_string(), out.display().to_string()),
            ];
            for (name, host) in [
                ("pubsub emulator", &cli.endpoints.pubsub_emulator_host),
                ("firestore emulator", &cli.endpoints.firestore_emulator_host),
            ] {
                if let Some(h) = host {
                    settings.push((name.to_string(), h.clone()));
                }
            }
            let info = RunInfo {
                command_line: command_line(),
                settings,
                workload,
            };
            let files = report::connect_and_report(&cli.endpoints, &target, &out, &info).await?;
            println!("wrote {}", files.markdown.display());
            println!("wrote {}", files.latency_png.display());
            println!("wrote {}", files.throughput_png.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run_publish(endpoints: &Endpoints, args: PublishArgs) -> anyhow::Result<ExitCode> {
    let config = args.workload();
    config.validate()?;
    if args.max_in_flight == 0 {
        anyhow::bail!("invalid --max-in-flight: must be at least 1");
    }
    let topic = publish::topic_name(&args.target.project, &args.topic)
        .map_err(|reason| anyhow::anyhow!("invalid --topic: {reason}"))?;
    let workload = generate(&config);
    workload.truth.save(&args.truth)?;
    let c = &workload.counts;
    println!(
        "workload: {} messages = {} valid ({} likes incl. {} re-likes, {} double likes, {} unlikes) + {} duplicates + {} poison; {} memberships on {} posts; expected total {}",
        c.messages, c.valid, c.likes, c.relikes, c.double_likes, c.unlikes, c.duplicates,
        c.poison, c.memberships, c.posts, workload.truth.total
    );
    println!("truth written to {}", args.truth.display());
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }

    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        eprintln!("stopping: no new publishes; waiting for those in flight");
        let _ = stop_tx.send(true);
    });
    let options = PublishOptions {
        rate_per_sec: args.rate,
        max_in_flight: args.max_in_flight,
        stamp_at_publish: !args.keep_generation_time,
        progress: !args.no_progress,
    };
    let report = publish::connect_and_publish(endpoints, &topic, &workload, &options, stop)
        .await
        .context("publishing")?;
    print_publish(&report, &topic);
    if report.cancelled {
        let attempted = usize::try_from(report.attempted).unwrap_or(usize::MAX);
        let truth = Truth::compute(
            config,
            &workload.messages[..attempted.min(workload.messages.len())],
        );
        truth.save(&args.truth)?;
        println!(
            "truth rewritten for the {} messages published before stopping",
            report.attempted
        );
        return Ok(ExitCode::from(130));
    }
    if report.failed > 0 {
        eprintln!(
            "warning: {} publishes failed after retries (first at message {}); the truth assumes they were delivered, so verify may report mismatches",
            report.failed,
            report.failed_indices.first().copied().unwrap_or(0)
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_publish(r: &PublishReport, topic: &str) {
    println!(
        "published {} of {} to {topic} in {:.2}s ({:.0} events/s), {} failed{}",
        r.published,
        r.attempted,
        r.elapsed.as_secs_f64(),
        r.events_per_sec,
        r.failed,
        if r.cancelled { ", cancelled" } else { "" }
    );
    for e in &r.errors {
        println!("  publish error: {e}");
    }
}

fn print_verify(r: &VerifyReport, show: usize) {
    for m in r.mismatches.iter().take(show) {
        println!(
            "MISMATCH post {}: expected {}, counted {} (liked memberships {})",
            m.post_id, m.expected, m.actual, m.liked_members
        );
    }
    for v in r.invariant_violations.iter().take(show) {
        println!(
            "INVARIANT post {}: sum of shards {} != liked memberships {}",
            v.post_id, v.shard_sum, v.liked_members
        );
    }
    println!(
        "{}: {} posts checked, {} exact, {} mismatched, {} invariant violations; expected total {}, counted {}; {} shards, {} memberships read ({} expected)",
        if r.is_exact() { "EXACT" } else { "NOT EXACT" },
        r.posts_checked,
        r.posts_exact,
        r.mismatches.len(),
        r.invariant_violations.len(),
        r.expected_total,
        r.actual_total,
        r.shards_read,
        r.memberships_read,
        r.memberships_expected
    );
    println!(
        "quarantine: {} records for {} poison messages published",
        r.quarantined, r.poison_expected
    );
    if !r.consistent_snapshot {
        println!("note: shards and memberships were not read at one read time; while the service is still committing, invariant violations may be artefacts");
    }
}

/// The command line, quoted where a shell would need it.
fn command_line() -> String {
    let quote = |a: String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c))
        {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    std::env::args().map(quote).collect::<Vec<_>>().join(" ")
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

async fn run_chaos(args: hotcount_loadgen::chaos::ChaosArgs) -> anyhow::Result<ExitCode> {
    use hotcount_loadgen::chaos;
    let config = args.config();
    let (cancel_tx, cancel) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ = cancel_tx.send(true);
    });
    eprintln!(
        "hotcount chaos: {} messages, {} consumer processes ({}), emulators in-process...",
        config.workload.events,
        config.consumers,
        config.hotcount_bin.display()
    );
    let summary = chaos::run(&config, cancel).await?;
    print!("{}", chaos::render(&summary));
    Ok(if summary.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn run_demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let config = hotcount_loadgen::demo::DemoConfig {
        workload: WorkloadConfig {
            events: args.events,
            posts: args.posts,
            users: args.users,
            zipf_exponent: args.zipf,
            unlike_fraction: args.unlike_fraction,
            duplicate_fraction: args.mix.duplicate_fraction,
            poison_fraction: args.mix.poison_fraction,
            hostile_fraction: args.mix.hostile_fraction,
            seed: args.seed,
        },
        run: args.run,
        rate_per_sec: args.rate,
        store_rtt_ms: args.store_rtt_ms,
        out_dir: args.out,
        drain_timeout: std::time::Duration::from_secs(args.drain_timeout_secs),
        progress: !args.no_progress,
    };
    let (cancel_tx, cancel) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel_tx.send(true);
        }
    });
    eprintln!(
        "hotcount demo: {} messages over {} posts (Zipf {}), emulators in-process...",
        config.workload.events, config.workload.posts, config.workload.zipf_exponent
    );
    let summary = hotcount_loadgen::demo::run(&config, cancel).await?;
    print!("{}", hotcount_loadgen::demo::render(&summary));
    if summary.is_success() {
        println!("RESULT: every count exact");
        Ok(ExitCode::SUCCESS)
    } else {
        print_verify(&summary.verify, 20);
        println!(
            "RESULT: FAILED (drained: {}, publish failures: {})",
            summary.drained, summary.publish.failed
        );
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut all = vec!["hotcount-loadgen"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
    }

    #[test]
    fn publish_flags_map_onto_the_workload() {
        let cli = parse(&[
            "publish",
            "--events",
            "7",
            "--zipf",
            "2",
            "--unlike-fraction",
            "0.5",
            "--seed",
            "9",
        ])
        .unwrap();
        let Command::Publish(args) = cli.command else {
            panic!("publish expected");
        };
        let w = args.workload();
        assert_eq!((w.events, w.seed), (7, 9));
        assert_eq!((w.zipf_exponent, w.unlike_fraction), (2.0, 0.5));
    }

    #[test]
    fn demo_and_chaos_map_the_shared_mix_flags_onto_the_workload() {
        let mix = ["--duplicate-fraction", "0.1", "--poison-fraction", "0.02"];
        let cli = parse(&[&["demo"][..], &mix[..]].concat()).unwrap();
        let Command::Demo(args) = cli.command else {
            panic!("demo expected");
        };
        assert_eq!(
            (args.mix.duplicate_fraction, args.mix.poison_fraction),
            (0.1, 0.02)
        );
        let cli = parse(&[&["chaos"][..], &mix[..]].concat()).unwrap();
        let Command::Chaos(args) = cli.command else {
            panic!("chaos expected");
        };
        let w = args.config().workload;
        assert_eq!((w.duplicate_fraction, w.poison_fraction), (0.1, 0.02));
        assert_eq!((w.posts, w.seed), (200, 6), "chaos keeps its own defaults");
    }

    #[test]
    fn out_of_range_fraction_is_rejected_with_its_flag() {
        let cli = parse(&["publish", "--poison-fraction", "1.5"]).unwrap();
        let Command::Publish(args) = cli.command else {
            panic!("publish expected");
        };
        let err = args.workload().validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid --poison-fraction: 1.5 is outside 0..=1"
        );
    }
}
