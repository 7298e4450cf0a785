//! `hotcount-loadgen demo`: the README's main job, one command.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use hotcount::config::StoreLocation;
use hotcount_loadgen::{demo, WorkloadConfig};
use hotcount_pgtemp::{Durability, PgCluster};
use tokio::sync::watch;

use super::{print_verify, MessageMixArgs, LOG_FILE};

/// The name of the consumer's log file under `--out`.
const LOG_NAME: &str = "consumer.log";

/// Creates `out` and the consumer's log file in it (truncated).
pub fn open_log(out: &Path) -> std::io::Result<(PathBuf, File)> {
    std::fs::create_dir_all(out)?;
    let path = out.join(LOG_NAME);
    let file = File::create(&path)?;
    Ok((path, file))
}

/// `hotcount-loadgen demo`: the flags.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// The consumer's settings (defaults as `hotcount run`).
    #[command(flatten)]
    pub run: hotcount::config::RunArgs,
    /// Messages to publish (valid + duplicates + poison).
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 10_000)]
    pub posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 100_000)]
    pub users: u32,
    /// Zipf exponent of post popularity.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Probability that an event on a liked (post, user) is an unlike.
    #[arg(long, default_value_t = 0.05)]
    pub unlike_fraction: f64,
    /// Duplicate and poison fractions (shared with `chaos`).
    #[command(flatten)]
    pub mix: MessageMixArgs,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Publish rate, messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Added latency per Firestore RPC in milliseconds, to model real round trips.
    #[arg(long, default_value_t = 0)]
    pub store_rtt_ms: u64,
    /// Where the report is written.
    #[arg(long, default_value = "reports/demo")]
    pub out: PathBuf,
    /// Longest wait for the backlog to drain, in seconds.
    #[arg(long, default_value_t = 600)]
    pub drain_timeout_secs: u64,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Count in a throwaway PostgreSQL server started for the demo
    /// (`initdb` in a temp dir, a free loopback port, removed at the end;
    /// needs the server binaries, e.g. Debian's `postgresql`) instead of
    /// `--store`.
    #[arg(long, conflicts_with = "store")]
    pub temp_postgres: bool,
    /// Do not run the in-process webhook sink (by default the consumer's
    /// milestone notifications, `--milestones`, go to it and the demo
    /// shows what it received; a `--milestone-webhook` of your own wins).
    #[arg(long)]
    pub no_milestones: bool,
}

/// Runs the demo and prints its table; exit 1 unless every count is exact.
pub async fn run(mut args: DemoArgs) -> anyhow::Result<ExitCode> {
    // Kept until the demo ends; dropping it stops and removes the server.
    let _cluster = match args.temp_postgres {
        true => {
            let cluster =
                tokio::task::spawn_blocking(|| PgCluster::try_start(Durability::Durable, &[]))
                    .await??;
            let url = cluster.try_create_database("hotcount").await?;
            eprintln!("hotcount demo: throwaway {} at {url}", cluster.version());
            args.run.target.store = StoreLocation::Postgres { url };
            Some(cluster)
        }
        false => None,
    };
    let config = demo::DemoConfig {
        workload: WorkloadConfig {
            events: args.events,
            posts: args.posts,
            users: args.users,
            zipf_exponent: args.zipf,
            unlike_fraction: args.unlike_fraction,
            duplicate_fraction: args.mix.duplicate_fraction,
            poison_fraction: args.mix.poison_fraction,
            hostile_fraction: args.mix.hostile_fraction,
            shuffle: false,
            seed: args.seed,
        },
        run: args.run,
        rate_per_sec: args.rate,
        store_rtt_ms: args.store_rtt_ms,
        out_dir: args.out,
        drain_timeout: std::time::Duration::from_secs(args.drain_timeout_secs),
        progress: !args.no_progress,
        milestones: !args.no_milestones,
    };
    let (cancel_tx, cancel) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel_tx.send(true);
        }
    });
    eprintln!(
        "hotcount demo: {} messages over {} posts (Zipf {}), emulators in-process, store {}...",
        config.workload.events,
        config.workload.posts,
        config.workload.zipf_exponent,
        config.run.target.store
    );
    let summary = demo::run(&config, cancel).await?;
    print!("{}", demo::render(&summary));
    if let Some(log) = LOG_FILE.get() {
        println!("  {:<38} {}", "consumer log", log.display());
    }
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
