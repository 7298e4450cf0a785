//! `hotcount-emulators`: runs the Pub/Sub and Firestore emulators until SIGINT/SIGTERM.
use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use hotcount_emulators::{Emulators, EmulatorsConfig};

/// mimalloc instead of the system allocator: the emulators clone many small
/// documents and messages on several threads.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Local wire-compatible Pub/Sub and Firestore emulators.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Pub/Sub listen address (gRPC and REST on one port).
    #[arg(long, env = "HOTCOUNT_PUBSUB_LISTEN", default_value = "127.0.0.1:8085")]
    pubsub: SocketAddr,
    /// Firestore listen address.
    #[arg(
        long,
        env = "HOTCOUNT_FIRESTORE_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    firestore: SocketAddr,
    /// Emulated seconds per real second (speeds up deadlines and backoff).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    anyhow::ensure!(
        args.time_scale.is_finite() && args.time_scale > 0.0,
        "--time-scale must be a positive number"
    );
    let config = EmulatorsConfig {
        pubsub_addr: args.pubsub,
        firestore_addr: args.firestore,
        time_scale: args.time_scale,
        ..Default::default()
    };
    let emulators = Emulators::start(config)
        .await
        .context("starting the emulators")?;
    println!("pubsub emulator listening on {}", emulators.pubsub_addr());
    println!(
        "firestore emulator listening on {}",
        emulators.firestore_addr()
    );
    wait_for_signal().await?;
    emulators.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
