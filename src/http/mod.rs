//! The operations endpoint: `/metrics` (Prometheus text), `/healthz`
//! (liveness) and `/readyz` (readiness), served from a [`Stats`]; and the
//! two ways the service serves HTTP: [`serve`] (this router, the push
//! endpoint's, or both on one listener) and [`serve_route`] (one route
//! over HTTP/1.1 with hyper's server alone: the push endpoint on its own
//! listener, where a request per message makes the cost of each count).
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

mod route;

pub use route::{serve_route, ConnectionLimits, NoTimeLimit, TimeLimit};

/// An endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("binding the {what} endpoint on {addr}: {source}")]
pub struct HttpError {
    /// Which endpoint (`metrics`, `push`).
    pub what: &'static str,
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
    } else if stats.rollup_progress.is_stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: rollup refreshes stalled (the store does not answer the refresher; see the log)\n",
        )
    } else if stats.milestone_progress.is_stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: milestone dispatch stalled (the store does not answer the dispatcher; see the log)\n",
        )
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Binds `addr` and serves `app` (the `what` endpoint) in a task of
/// `tasks` until `stop` turns true: then it stops accepting and finishes
/// the requests in progress. Returns once bound, with the bound address.
/// Dropping `tasks` ends the endpoint at once (a crash, in tests).
pub async fn serve(
    what: &'static str,
    addr: SocketAddr,
    app: Router,
    mut stop: watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<SocketAddr, HttpError> {
    let error = |source| HttpError { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    tracing::info!(addr = %bound, what, "endpoint listening");
    tasks.spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(%error, what, "endpoint failed");
        }
    });
    Ok(bound)
}
