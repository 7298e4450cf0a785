//! The operations endpoint: `/metrics` (Prometheus text), `/healthz`
//! (liveness) and `/readyz` (readiness), served from a [`Stats`].
//!
//! Invariant: read-only; serving a scrape never blocks the pipeline longer
//! than copying the counters (histograms are locked one at a time), and the
//! endpoint binds a loopback address unless the operator allowed otherwise
//! ([`crate::config::metrics_addr`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::telemetry::{self, Stats};

/// The metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("binding the metrics endpoint on {addr}: {source}")]
pub struct HttpError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// The bind failure.
    #[source]
    pub source: std::io::Error,
}

/// The routes, over `stats`.
pub fn router(stats: Arc<Stats>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(stats)
}

async fn metrics(State(stats): State<Arc<Stats>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, telemetry::CONTENT_TYPE)],
        stats.render_prometheus(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(stats): State<Arc<Stats>>) -> (StatusCode, &'static str) {
    if stats.is_ready() {
        (StatusCode::OK, "ready\n")
    } else if stats.commit_progress.is_stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: commits stalled (the store does not answer; see the log)\n",
        )
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Binds `addr`, records the bound address in `stats.metrics_addr`, and
/// serves until `stop` turns true. Returns once bound.
pub async fn serve(
    addr: SocketAddr,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, HttpError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HttpError { addr, source })?;
    let _ = stats.metrics_addr.set(bound);
    tracing::info!(addr = %bound, "metrics endpoint listening");
    let app = router(stats);
    Ok(tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(%error, "metrics endpoint failed");
        }
    }))
}
