//! The operations endpoint: `/metrics` (Prometheus text), `/healthz`
//! (liveness) and `/readyz` (readiness), served from a [`Stats`].
//!
//! Invariant: read-only; serving a scrape never blocks the pipeline longer
//! than copying the counters (histograms are locked one at a time), and the
//! endpoint binds a loopback address unless the operator allowed otherwise
//! ([`crate::config::metrics_addr`]). Also the minimal client that reads
//! it ([`fetch`], [`sample_value`]), for the load generator and the tests.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::telemetry::Stats;

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

/// The Prometheus text format's content type.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
        [(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)],
        stats.render_prometheus(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(stats): State<Arc<Stats>>) -> (StatusCode, &'static str) {
    if stats.is_ready() {
        (StatusCode::OK, "ready\n")
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

/// `GET path` on the endpoint at `addr` (HTTP/1.1, `Connection: close`,
/// chunked bodies decoded), within `timeout`: (status code, body). A
/// minimal client for scraping the service's own endpoint, so that the
/// load generator and tests need no HTTP client dependency.
pub async fn fetch(
    addr: SocketAddr,
    path: &str,
    timeout: std::time::Duration,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no response in time"))??;
    let malformed =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| malformed("no header/body separator"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| malformed("no status code"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// A chunked HTTP/1.1 body, decoded (stops at the last chunk or at the
/// first malformed size line).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        let Some(chunk) = rest.get(..n) else {
            break;
        };
        out.push_str(chunk);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of the sample `series` (name with labels, exactly as
/// exported, e.g. `hotcount_commit_duration_seconds{quantile="0.99"}`) in a
/// Prometheus text exposition.
pub fn sample_value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (s, v) = l.rsplit_once(' ')?;
            (s == series).then(|| v.parse().ok())?
        })
}
