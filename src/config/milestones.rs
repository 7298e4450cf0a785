//! The milestone flags (`--milestones`, `--milestone-*`: [`MilestoneFlags`])
//! and what they validate into ([`MilestoneConfig`]: the list given, and
//! the notification settings, [`MilestoneSettings`]).
//!
//! Invariants: a milestone list is ascending, distinct and positive; a
//! webhook needs rollups (they decide the milestones) and a lease longer
//! than its call timeout.

use std::time::Duration;

use super::secret::{FileParser, FromFile};
use super::{range, ConfigError, Secret};

/// `hotcount run`'s milestone flags.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Milestones")]
pub struct MilestoneFlags {
    /// Like counts that are milestones (comma-separated, ascending): the
    /// rollup write that first shows a post at or above one records it,
    /// and a replica with `--milestone-webhook` tells the webhook once.
    /// The list is the fleet's, stored (`setup --milestones`): a list that
    /// differs from the stored one refuses to start; none stored, this one
    /// (or, with a webhook, 100,1000,10000,100000) is stored.
    #[arg(long, env = "HOTCOUNT_MILESTONES")]
    pub milestones: Option<String>,
    /// POST each milestone reached to this http(s) URL (`{postId,
    /// milestone, likes, reachedAt}`, `Idempotency-Key:
    /// {consumer}:{post}:{n}`); unset = milestones off (none recorded).
    #[arg(long, env = "HOTCOUNT_MILESTONE_WEBHOOK")]
    pub milestone_webhook: Option<String>,
    /// Sign each milestone call with this secret: header
    /// `Hotcount-Signature: t={unix seconds},v1={hex HMAC-SHA256 of "{t}.{body}"}`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_SECRET",
        hide_env_values = true
    )]
    pub milestone_webhook_secret: Option<Secret>,
    /// A file holding `--milestone-webhook-secret` (e.g. a mounted
    /// secret); trailing line breaks are ignored.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_SECRET_FILE",
        value_name = "PATH",
        value_parser = FileParser::<Secret>::new(),
        conflicts_with = "milestone_webhook_secret"
    )]
    pub milestone_webhook_secret_file: Option<FromFile<Secret>>,
    /// While rotating the webhook secret, the one being replaced: each call
    /// then carries a `v1=` per secret, the new one first, so a receiver
    /// knowing either verifies it. Needs `--milestone-webhook-secret`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_PREVIOUS_SECRET",
        hide_env_values = true
    )]
    pub milestone_webhook_previous_secret: Option<Secret>,
    /// A file holding `--milestone-webhook-previous-secret`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_PREVIOUS_SECRET_FILE",
        value_name = "PATH",
        value_parser = FileParser::<Secret>::new(),
        conflicts_with = "milestone_webhook_previous_secret"
    )]
    pub milestone_webhook_previous_secret_file: Option<FromFile<Secret>>,
    /// Longest wait for the webhook's answer to one call, in milliseconds.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub milestone_webhook_timeout_ms: u64,
    /// How long a replica holds a milestone it calls for before another
    /// may take it over (a replica that died mid-call), in seconds; more
    /// than the webhook timeout.
    #[arg(long, env = "HOTCOUNT_MILESTONE_LEASE_SECS", default_value_t = 60)]
    pub milestone_lease_secs: u64,
    /// The first wait before a failed milestone call is tried again, in
    /// milliseconds (doubling per attempt with jitter, up to 5 minutes);
    /// due milestones are looked for at least this often (and every second).
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_RETRY_INITIAL_MS",
        default_value_t = 1000
    )]
    pub milestone_retry_initial_ms: u64,
    /// The longest wait between two tries of a failed milestone call, in
    /// milliseconds (the doubling stops there); at least
    /// `--milestone-retry-initial-ms`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_RETRY_MAX_MS",
        default_value_t = 300_000
    )]
    pub milestone_retry_max_ms: u64,
}

/// What the milestone flags validate into.
#[derive(Clone, Debug)]
pub struct MilestoneConfig {
    /// The `--milestones` list given, if any: it must match the stored one.
    pub given: Option<Vec<i64>>,
    /// Milestone notifications; `None` = no webhook (this replica records
    /// milestones by the stored setting, and sends none).
    pub notify: Option<MilestoneSettings>,
}

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

impl MilestoneFlags {
    /// Checks the milestone flags: the list is checked with or without a
    /// webhook; a webhook is refused when `rollups_on` is false (rollup
    /// writes decide the milestones).
    pub fn validate(&self, rollups_on: bool) -> Result<MilestoneConfig, ConfigError> {
        Ok(MilestoneConfig {
            notify: self.notify(rollups_on)?,
            given: self
                .milestones
                .as_deref()
                .map(parse_milestones)
                .transpose()?,
        })
    }

    /// The notification settings: `None` without a webhook.
    fn notify(&self, rollups_on: bool) -> Result<Option<MilestoneSettings>, ConfigError> {
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
        if !rollups_on {
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
