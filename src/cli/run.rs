//! `hotcount run`: count until SIGINT/SIGTERM, then drain.
//!
//! Invariants: the first signal starts the drain, which ends by the
//! shutdown deadline; a backstop 2 s after it exits with
//! [`DRAIN_INCOMPLETE`] (what was not acked is redelivered); a second
//! signal exits at once (130).

use std::sync::Arc;

use hotcount::config::{Endpoints, RunArgs};
use hotcount::{service, telemetry};
use tokio::sync::watch;

/// The exit code of `run` when the drain did not end by the shutdown
/// deadline (plus 2 s) and the backstop ended the process: nothing is
/// lost (what was not acked is redelivered), but the stop was not clean.
const DRAIN_INCOMPLETE: i32 = 3;

/// Runs the service with `args` until a stop signal, then drains.
pub async fn run(endpoints: &Endpoints, args: &RunArgs) -> anyhow::Result<()> {
    let config = args.validate()?;
    let (stop_tx, stop) = watch::channel(false);
    // The drain ends by the deadline (commits stop, transactions
    // are rolled back, the rest is nacked); this is the backstop if
    // an RPC hangs past it: whatever is unacked is redelivered.
    let backstop = config.flush.flusher.shutdown_deadline + std::time::Duration::from_secs(2);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received; draining (a second signal exits at once)");
        let _ = stop_tx.send(true);
        tokio::spawn(async move {
            tokio::time::sleep(backstop).await;
            tracing::error!(
                ?backstop,
                exit_code = DRAIN_INCOMPLETE,
                "drain did not end by the shutdown deadline; exiting (unacked messages are redelivered)"
            );
            std::process::exit(DRAIN_INCOMPLETE);
        });
        wait_for_signal().await;
        eprintln!("second signal: exiting without draining");
        std::process::exit(130);
    });
    let stats = Arc::new(telemetry::Stats::default());
    service::run(endpoints, &config, stop, stats).await?;
    Ok(())
}

/// Waits for SIGINT or SIGTERM.
pub async fn wait_for_signal() {
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
