//! Validation of `hotcount run`'s flags into a [`Config`].
//!
//! Invariant: the first problem found is reported with its flag and what
//! is allowed; nothing else builds a [`Config`].

use std::time::Duration;

use super::milestones::parse_milestones;
use super::pubsub_names::subscription_name;
use super::push::{push_config, CLOUD_RUN_SERVICE_ENV};
use super::{range, Config, ConfigError, RunArgs, Secret};
use crate::event::{check_id, MAX_EVENT_ID_BYTES};

impl RunArgs {
    /// Checks every setting; the first problem is reported with its flag.
    /// Reads whether this runs on Cloud Run ([`CLOUD_RUN_SERVICE_ENV`]).
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let on_cloud_run = std::env::var_os(CLOUD_RUN_SERVICE_ENV).is_some_and(|v| !v.is_empty());
        self.validate_where(on_cloud_run)
    }

    /// [`RunArgs::validate`] on Cloud Run (`on_cloud_run`) or off it.
    pub(super) fn validate_where(&self, on_cloud_run: bool) -> Result<Config, ConfigError> {
        let t = &self.target;
        if t.project.is_empty() || t.project.contains('/') {
            return Err(ConfigError {
                flag: "project",
                reason: "must be a project id".into(),
            });
        }
        check_id(&self.consumer, MAX_EVENT_ID_BYTES).map_err(|p| ConfigError {
            flag: "consumer",
            reason: format!("not a safe document id: {p}"),
        })?;
        if self.consumer.contains(':') {
            return Err(ConfigError {
                flag: "consumer",
                reason: "must not contain ':'".into(),
            });
        }
        if t.collection_prefix.contains('/') {
            return Err(ConfigError {
                flag: "collection-prefix",
                reason: "must not contain '/'".into(),
            });
        }
        let subscription =
            subscription_name(&t.project, &self.subscription).map_err(|reason| ConfigError {
                flag: "subscription",
                reason,
            })?;
        let metrics_addr = metrics_addr(&self.metrics_addr, self.metrics_allow_remote)?;
        let push = push_config(self, &subscription, on_cloud_run)?;
        Ok(Config {
            store_location: t.store.clone(),
            project: t.project.clone(),
            database: t.database.clone(),
            collection_prefix: t.collection_prefix.clone(),
            subscription,
            consumer: self.consumer.clone(),
            shards: range("shards", self.shards, 1, 4096)?,
            counter_shards: range("counter-shards", self.counter_shards, 1, 1000)?,
            counter_shard_target_writes_per_sec: range(
                "counter-shard-target-writes-per-sec",
                self.counter_shard_target_writes_per_sec,
                0,
                10_000,
            )?,
            flush_interval: Duration::from_millis(range(
                "flush-interval-ms",
                self.flush_interval_ms,
                1,
                60_000,
            )?),
            flush_min_wait: Duration::from_millis(range(
                "flush-min-wait-ms",
                self.flush_min_wait_ms,
                0,
                self.flush_interval_ms,
            )?),
            max_commits_in_flight: range(
                "max-commits-in-flight",
                self.max_commits_in_flight,
                1,
                256,
            )?,
            max_batch_events: range("max-batch-events", self.max_batch_events, 1, 10_000)?,
            max_outstanding_messages: range(
                "max-outstanding-messages",
                self.max_outstanding_messages,
                1,
                10_000_000,
            )?,
            max_outstanding_bytes: range(
                "max-outstanding-bytes",
                self.max_outstanding_bytes,
                1024,
                1 << 40,
            )?,
            streams: range("streams", self.streams, 1, 64)?,
            lease_extension: Duration::from_secs(range(
                "lease-extension-secs",
                self.lease_extension_secs,
                10,
                600,
            )?),
            commit_max_attempts: range("commit-max-attempts", self.commit_max_attempts, 1, 100)?,
            commit_backoff_initial: Duration::from_millis(range(
                "commit-backoff-initial-ms",
                self.commit_backoff_initial_ms,
                1,
                60_000,
            )?),
            // A backoff past a minute would outlast the lease extension
            // and the shutdown deadline it must fit in.
            commit_backoff_max: Duration::from_millis(range(
                "commit-backoff-max-ms",
                self.commit_backoff_max_ms,
                self.commit_backoff_initial_ms.min(60_000),
                60_000,
            )?),
            shutdown_deadline: Duration::from_secs(range(
                "shutdown-deadline-secs",
                self.shutdown_deadline_secs,
                1,
                3600,
            )?),
            marker_ttl: Duration::from_secs(
                86_400 * range("marker-ttl-days", self.marker_ttl_days, 1, 3650)?,
            ),
            marker_cleanup_interval: match range(
                "marker-cleanup-interval-secs",
                self.marker_cleanup_interval_secs,
                0,
                86_400,
            )? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            marker_cleanup_batch_rows: i64::from(range(
                "marker-cleanup-batch-rows",
                self.marker_cleanup_batch_rows,
                1,
                100_000,
            )?),
            strategy: self.strategy,
            per_event_concurrency: range(
                "per-event-concurrency",
                self.per_event_concurrency,
                1,
                4096,
            )?,
            metrics_addr,
            rollup_interval: match range(
                "rollup-interval-ms",
                self.rollup_interval_ms,
                0,
                3_600_000,
            )? {
                0 => None,
                ms => Some(Duration::from_millis(range(
                    "rollup-interval-ms",
                    ms,
                    10,
                    3_600_000,
                )?)),
            },
            rollup_sweep_lookback: match range(
                "rollup-sweep-lookback-secs",
                self.rollup_sweep_lookback_secs,
                0,
                7 * 86_400,
            )? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            store_call_timeout: Duration::from_millis(range(
                "store-call-timeout-ms",
                self.store_call_timeout_ms,
                100,
                600_000,
            )?),
            stuck_commit_threshold: Duration::from_secs(range(
                "stuck-commit-threshold-secs",
                self.stuck_commit_threshold_secs,
                self.store_call_timeout_ms.div_ceil(1000).clamp(1, 600),
                3600,
            )?),
            milestones: self.milestone_settings()?,
            milestones_given: self
                .milestones
                .as_deref()
                .map(parse_milestones)
                .transpose()?,
            user_hash_key: Secret::given(
                self.user_hash_key.as_ref(),
                self.user_hash_key_file.as_ref(),
            ),
            tombstone_refresh: Duration::from_millis(range(
                "tombstone-refresh-ms",
                self.tombstone_refresh_ms,
                100,
                60_000,
            )?),
            push,
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
