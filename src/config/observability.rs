//! How a replica is watched: its flags ([`ObservabilityFlags`]: the
//! metrics and health endpoint, the stuck-commit threshold, the log
//! format), validated into [`Observability`].
//!
//! Invariants: the endpoint listens on a loopback address unless
//! `--metrics-allow-remote`; the stuck-commit threshold is at least one
//! store call's timeout (a slow commit is not a stall).

use std::time::Duration;

use super::{range, ConfigError};

/// `hotcount run`'s observability flags.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Observability")]
pub struct ObservabilityFlags {
    /// Log as JSON lines.
    #[arg(long, env = "HOTCOUNT_LOG_JSON", default_value_t = false)]
    pub log_json: bool,
    /// Address of the `/metrics`, `/healthz` and `/readyz` endpoint
    /// (`host:port`, port 0 picks one; `off` disables it). Loopback only
    /// unless `--metrics-allow-remote`.
    #[arg(long, env = "HOTCOUNT_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: String,
    /// Allow a non-loopback `--metrics-addr` (e.g. `0.0.0.0:8080` for Cloud Run probes).
    #[arg(long, env = "HOTCOUNT_METRICS_ALLOW_REMOTE", default_value_t = false)]
    pub metrics_allow_remote: bool,
    /// While batches are being committed and none has committed for this
    /// long, in seconds, the replica reports not ready (`/readyz` 503,
    /// `hotcount_commits_stalled` 1, a WARN line saying why) until one
    /// commits again. At least `--store-call-timeout-ms`.
    #[arg(
        long,
        env = "HOTCOUNT_STUCK_COMMIT_THRESHOLD_SECS",
        default_value_t = 30
    )]
    pub stuck_commit_threshold_secs: u64,
}

/// What the observability flags validate into (the log format is read
/// before validation, when tracing starts).
#[derive(Clone, Debug)]
pub struct Observability {
    /// Where the metrics endpoint listens; `None` = no endpoint.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// No commit for this long while commits are in flight: not ready
    /// (the rollup and milestone stages are watched by it too).
    pub stuck_commit_threshold: Duration,
}

impl ObservabilityFlags {
    /// Checks the endpoint's address and the stuck-commit threshold, which
    /// must be at least `store_call_timeout` (the validated
    /// `--store-call-timeout-ms`, rounded up to seconds).
    pub fn validate(&self, store_call_timeout: Duration) -> Result<Observability, ConfigError> {
        let metrics_addr = metrics_addr(&self.metrics_addr, self.metrics_allow_remote)?;
        let call_secs = store_call_timeout.as_millis().div_ceil(1000).clamp(1, 600);
        let stuck_commit_threshold = Duration::from_secs(range(
            "stuck-commit-threshold-secs",
            self.stuck_commit_threshold_secs,
            u64::try_from(call_secs).unwrap_or(600),
            3600,
        )?);
        Ok(Observability {
            metrics_addr,
            stuck_commit_threshold,
        })
    }
}

/// Parses `--metrics-addr`: `off` (or empty) disables the endpoint; a
/// non-loopback address needs `allow_remote`.
pub fn metrics_addr(
    value: &str,
    allow_remote: bool,
) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    if value.is_empty() || value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let addr: std::net::SocketAddr = value.parse().map_err(|_| ConfigError {
        flag: "metrics-addr",
        reason: format!("{value:?} is not host:port (an IP address and a port) or off"),
    })?;
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(ConfigError {
            flag: "metrics-addr",
            reason: format!(
                "{addr} is not a loopback address; add --metrics-allow-remote to expose it"
            ),
        });
    }
    Ok(Some(addr))
}
