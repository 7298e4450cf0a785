//! `hotcount-loadgen publish`: generate a workload, write its truth file,
//! publish it to a topic.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use hotcount::config::{Endpoints, Target};
use hotcount_loadgen::publish::{self, PublishOptions, PublishReport};
use hotcount_loadgen::{generate, Truth, WorkloadConfig};
use tokio::sync::watch;

use super::wait_for_signal;

/// `hotcount-loadgen publish`: the flags.
#[derive(Args, Debug)]
pub struct PublishArgs {
    #[command(flatten)]
    pub target: Target,
    /// Topic id (or full `projects/*/topics/*` name).
    #[arg(long, env = "HOTCOUNT_TOPIC", default_value = "likes")]
    pub topic: String,
    /// Messages to publish in total (valid + duplicates + poison).
    #[arg(long, env = "LOADGEN_EVENTS", default_value_t = 10_000)]
    pub events: u64,
    /// Target rate in messages per second; 0 = as fast as possible.
    #[arg(long, env = "LOADGEN_RATE", default_value_t = 0)]
    pub rate: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 100)]
    pub posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 5_000)]
    pub users: u32,
    /// Zipf exponent of post popularity (0 = uniform; 2 = one post takes most traffic).
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Probability that an event on a liked (post, user) is an unlike (else a double like).
    #[arg(long, default_value_t = 0.2)]
    pub unlike_fraction: f64,
    /// Fraction of messages that republish an earlier one verbatim (publisher retries).
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_fraction: f64,
    /// Fraction of messages that are poison.
    #[arg(long, default_value_t = 0.01)]
    pub poison_fraction: f64,
    /// Seed of the workload.
    #[arg(long, env = "LOADGEN_SEED", default_value_t = 42)]
    pub seed: u64,
    /// Where to write the truth file.
    #[arg(long, env = "LOADGEN_TRUTH", default_value = "truth.json")]
    pub truth: PathBuf,
    /// Publishes awaiting their result at most.
    #[arg(long, default_value_t = 5_000)]
    pub max_in_flight: usize,
    /// Keep each event's generation time as `occurredAt` instead of its publish time.
    #[arg(long)]
    pub keep_generation_time: bool,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Generate and write the truth file only; publish nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl PublishArgs {
    /// The workload these flags describe.
    pub fn workload(&self) -> WorkloadConfig {
        WorkloadConfig {
            events: self.events,
            posts: self.posts,
            users: self.users,
            zipf_exponent: self.zipf,
            unlike_fraction: self.unlike_fraction,
            duplicate_fraction: self.duplicate_fraction,
            poison_fraction: self.poison_fraction,
            hostile_fraction: 0.0,
            shuffle: false,
            seed: self.seed,
        }
    }
}

/// Generates the workload, writes its truth file and publishes it; exit 1
/// when publishes failed, 130 when cancelled (the truth then covers what
/// was published).
pub async fn run(endpoints: &Endpoints, args: PublishArgs) -> anyhow::Result<ExitCode> {
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
