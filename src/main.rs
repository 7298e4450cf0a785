//! The `hotcount` command: parse, set up telemetry, run, map errors to exit codes.
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use hotcount::config::{Endpoints, RunArgs, Target};
use hotcount::store::firestore::{FirestoreStore, FirestoreStoreConfig, Layout};
use hotcount::store::CounterStore;
use hotcount::{connect, service, setup, telemetry};
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
            let db = connect::firestore(&cli.endpoints, &target).await?;
            let store = FirestoreStore::new(
                db,
                FirestoreStoreConfig {
                    layout: Layout::new(
                        &target.project,
                        &target.database,
                        &target.collection_prefix,
                    ),
                    consumer: String::new(),
                    counter_shards: 1,
                    marker_ttl: std::time::Duration::ZERO,
                },
            );
            for post in post_ids {
                let count = store
                    .count(&post)
                    .await
                    .with_context(|| format!("counting {post}"))?;
                println!("{post}\t{count}");
            }
            Ok(())
        }
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
