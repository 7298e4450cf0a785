//! The milestone flags (`--milestones`, `--milestone-*`) and the
//! notification settings they validate into ([`MilestoneSettings`]).
//!
//! Invariants: a milestone list is ascending, distinct and positive; a
//! webhook needs rollups (they decide the milestones) and a lease longer
//! than its call timeout.

use std::time::Duration;

use super::{range, ConfigError, RunArgs, Secret};

/// The dispatcher's settings.
#[derive(Clone, Debug)]
pub struct DispatchConfig {
    /// How long a claim holds a record; longer than `request_timeout`.
    pub lease: Duration,
    /// How often due records are looked for.
    pub poll_interval: Duration,
    /// Records claimed (and called concurrently) per round, at most.
    pub claim_limit: usize,
    /// The first retry's delay (doubling per attempt, with jitter).
    pub backoff_initial: Duration,
    /// The longest delay between attempts.
    pub backoff_max: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            claim_limit: 32,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
        }
    }
}

/// The milestones a deployment without a stored setting adopts from its
/// first replica with a webhook and no `--milestones`.
pub const DEFAULT_MILESTONES: [i64; 4] = [100, 1000, 10_000, 100_000];

/// Milestone notifications' settings (`--milestone-*`).
#[derive(Clone, Debug)]
pub struct MilestoneSettings {
    /// The milestones to store when none are (the `--milestones` given, or
    /// [`DEFAULT_MILESTONES`]), ascending, distinct, positive.
    pub thresholds: Vec<i64>,
    /// The webhook.
    pub webhook: reqwest::Url,
    /// The signing secret, if any.
    pub secret: Option<Secret>,
    /// While rotating, the secret being replaced: calls are signed with
    /// both (only with `secret`).
    pub previous_secret: Option<Secret>,
    /// One call's longest wait.
    pub request_timeout: Duration,
    /// A claim's lease.
    pub lease: Duration,
    /// The first retry's wait.
    pub retry_initial: Duration,
    /// The longest wait between two tries.
    pub retry_max: Duration,
}

impl MilestoneSettings {
    /// The dispatcher's settings.
    pub fn dispatch(&self) -> DispatchConfig {
        let defaults = DispatchConfig::default();
        DispatchConfig {
            lease: self.lease,
            backoff_initial: self.retry_initial,
            backoff_max: self.retry_max,
            poll_interval: defaults.poll_interval.min(self.retry_initial),
            ..defaults
        }
    }
}

/// Parses `--milestones`: ascending, distinct, positive like counts.
pub fn parse_milestones(list: &str) -> Result<Vec<i64>, ConfigError> {
    let err = |reason: String| ConfigError {
        flag: "milestones",
        reason,
    };
    let mut out: Vec<i64> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: i64 = part
            .parse()
            .map_err(|_| err(format!("{part:?} is not a whole number")))?;
        if n < 1 {
            return Err(err(format!("{n} is not positive")));
        }
        if out.last().is_some_and(|&last| n <= last) {
            return Err(err(format!("{n} is not above the one before it")));
        }
        out.push(n);
    }
    if out.is_empty() || out.len() > 64 {
        return Err(err("give 1 to 64 like counts, e.g. 100,1000".to_string()));
    }
    Ok(out)
}

impl RunArgs {
    /// The milestone settings: `None` without a webhook; refused without
    /// rollups (they decide them).
    pub(super) fn milestone_settings(&self) -> Result<Option<MilestoneSettings>, ConfigError> {
        let Some(url) = &self.milestone_webhook else {
            return Ok(None);
        };
        let webhook = reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| ConfigError {
                flag: "milestone-webhook",
                reason: format!("{url:?} is not an http(s) URL"),
            })?;
        if self.rollup_interval_ms == 0 {
            return Err(ConfigError {
                flag: "milestone-webhook",
                reason:
                    "milestones are decided by the rollup writes: set --rollup-interval-ms above 0"
                        .to_string(),
            });
        }
        let timeout_ms = range(
            "milestone-webhook-timeout-ms",
            self.milestone_webhook_timeout_ms,
            100,
            300_000,
        )?;
        let lease_secs = range("milestone-lease-secs", self.milestone_lease_secs, 1, 86_400)?;
        if lease_secs * 1000 <= timeout_ms {
            return Err(ConfigError {
                flag: "milestone-lease-secs",
                reason: format!(
                    "{lease_secs} s must be longer than --milestone-webhook-timeout-ms ({timeout_ms} ms)"
                ),
            });
        }
        let secret = Secret::given(
            self.milestone_webhook_secret.as_ref(),
            self.milestone_webhook_secret_file.as_ref(),
        );
        let previous_secret = Secret::given(
            self.milestone_webhook_previous_secret.as_ref(),
            self.milestone_webhook_previous_secret_file.as_ref(),
        );
        if previous_secret.is_some() && secret.is_none() {
            return Err(ConfigError {
                flag: "milestone-webhook-previous-secret",
                reason: "is the secret being replaced: give the new one too (--milestone-webhook-secret or --milestone-webhook-secret-file)".to_string(),
            });
        }
        let retry_initial_ms = range(
            "milestone-retry-initial-ms",
            self.milestone_retry_initial_ms,
            10,
            300_000,
        )?;
        Ok(Some(MilestoneSettings {
            thresholds: match &self.milestones {
                Some(list) => parse_milestones(list)?,
                None => DEFAULT_MILESTONES.to_vec(),
            },
            webhook,
            secret,
            previous_secret,
            request_timeout: Duration::from_millis(timeout_ms),
            lease: Duration::from_secs(lease_secs),
            retry_initial: Duration::from_millis(retry_initial_ms),
            retry_max: Duration::from_millis(range(
                "milestone-retry-max-ms",
                self.milestone_retry_max_ms,
                retry_initial_ms,
                3_600_000,
            )?),
        }))
    }
}
