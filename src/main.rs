//! The `hotcount` command: parse, set up telemetry, run, map errors to exit codes.
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use hotcount::config::{Endpoints, RunArgs, Target};
use hotcount::store::firestore::{FirestoreStore, FirestoreStoreConfig, Layout};
use hotcount::store::CounterStore;
use hotcount::{connect, reconcile, service, setup, telemetry};
use tokio::sync::watch;

/// Exactly-once like counter for viral posts.
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
    /// Consume like events and count them until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Print the like count of each post (sum of its counter shards).
    Count {
        #[command(flatten)]
        target: Target,
        /// Post ids.
        #[arg(required = true)]
        post_ids: Vec<String>,
    },
    /// Create the topic, dead-letter topic and subscriptions (idempotent).
    Setup(setup::SetupArgs),
    /// Compare each post's counter shards with its liked memberships; fix with --repair.
    Reconcile {
        #[command(flatten)]
        target: Target,
        /// Only these posts (repeatable); default: every post with shards or likes.
        #[arg(long = "post")]
        posts: Vec<String>,
        /// Write a correcting increment for each difference (one transaction per post).
        #[arg(long)]
        repair: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = matches!(&cli.command, Command::Run(args) if args.log_json);
    telemetry::init_tracing(json);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            let config = args.validate()?;
            let (stop_tx, stop) = watch::channel(false);
            tokio::spawn(async move {
                wait_for_signal().await;
                tracing::info!("signal received; draining (a second signal exits at once)");
                let _ = stop_tx.send(true);
                wait_for_signal().await;
                eprintln!("second signal: exiting without draining");
                std::process::exit(130);
            });
            let stats = Arc::new(telemetry::Stats::default());
            service::run(&cli.endpoints, &config, stop, stats).await?;
            Ok(())
        }
        Command::Count { target, post_ids } => {
            let store = tool_store(&cli.endpoints, &target).await?;
            for post in post_ids {
                let count = store
                    .count(&post)
                    .await
                    .with_context(|| format!("counting {post}"))?;
                println!("{post}\t{count}");
            }
            Ok(())
        }
        Command::Reconcile {
            target,
            posts,
            repair,
        } => reconcile(&cli.endpoints, &target, posts, repair).await,
        Command::Setup(args) => {
            for (name, created) in setup::setup(&cli.endpoints, &args).await? {
                let what = match created {
                    setup::Created::Created => "created",
                    setup::Created::Existed => "exists",
                };
                println!("{what}\t{name}");
            }
            Ok(())
        }
    }
}

/// A store for the operator tools (reads, and repairs that name their shard).
async fn tool_store(endpoints: &Endpoints, target: &Target) -> anyhow::Result<FirestoreStore> {
    let db = connect::firestore(endpoints, target).await?;
    Ok(FirestoreStore::new(
        db,
        FirestoreStoreConfig {
            layout: Layout::new(&target.project, &target.database, &target.collection_prefix),
            consumer: String::new(),
            counter_shards: 1,
            marker_ttl: std::time::Duration::ZERO,
        },
    ))
}

async fn reconcile(
    endpoints: &Endpoints,
    target: &Target,
    posts: Vec<String>,
    repair: bool,
) -> anyhow::Result<()> {
    let store = tool_store(endpoints, target).await?;
    let reports = if posts.is_empty() {
        reconcile::reconcile_all(&store, repair).await?
    } else {
        let mut reports = Vec::new();
        for post in posts {
            let report = reconcile::reconcile_post(&store, &post, repair)
                .await
                .with_context(|| format!("reconciling {post}"))?;
            reports.push(report);
        }
        reports
    };
    println!("post\tshards\tliked\tdifference\tstatus");
    let mut unrepaired = 0;
    for r in &reports {
        let status = match (r.difference(), r.repaired) {
            (0, false) => "ok",
            (_, true) => "repaired",
            _ => {
                unrepaired += 1;
                "differs"
            }
        };
        println!(
            "{}\t{}\t{}\t{:+}\t{status}",
            r.post_id,
            r.shards_sum,
            r.liked,
            r.difference()
        );
    }
    if unrepaired > 0 {
        anyhow::bail!("{unrepaired} post(s) differ; run again with --repair to fix them");
    }
    Ok(())
}

async fn wait_for_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
