//! What a chaos run does and the world it runs in: its settings
//! ([`ChaosConfig`], [`ChaosMilestones`]), the checks that refuse settings
//! that cannot make a run, and the fixed names of its stage (project,
//! topic, subscription, collection prefix, consumer).
//!
//! Invariant: every process of a run (consumers, `users erase`) and every
//! read back names the same project, prefix and consumer, taken from here.

use std::path::PathBuf;
use std::time::Duration;

use hotcount::config::{Delivery, StoreLocation, Target};
use hotcount::ops::setup::SetupArgs;
use hotcount_emulators::webhook::SinkFaults;

use crate::milestones;
use crate::run_error::RunError;
use crate::stage::StageSpec;
use crate::workload::WorkloadConfig;

/// The emulated project.
pub(super) const PROJECT: &str = "hotcount-chaos";
/// The topic published to.
const TOPIC: &str = "likes";
/// The consumers' one subscription.
pub(super) const SUBSCRIPTION: &str = "likes-hotcount";
/// The snapshot the replay Seeks to.
pub(super) const SNAPSHOT: &str = "chaos-start";
/// The consumers' `--consumer`.
pub(super) const CONSUMER: &str = "hotcount";
/// The consumers' `--collection-prefix`.
pub(super) const PREFIX: &str = "chaos_";
/// Emulated time the clock jumps to expire every lease (past the 60 s stream deadline).
pub(super) const LEASE_JUMP: Duration = Duration::from_secs(120);

/// What the chaos run does.
#[derive(Clone, Debug)]
pub struct ChaosConfig {
    /// The generated workload (publisher duplicates, double likes, unlikes, poison).
    pub workload: WorkloadConfig,
    /// The `hotcount` binary run as consumer processes.
    pub hotcount_bin: PathBuf,
    /// Consumer processes on the one subscription (the first is the victim).
    pub consumers: usize,
    /// Shortest and longest pause between two kills of the victim.
    pub kill_every: (Duration, Duration),
    /// Keep killing until at least this many kills happened (bounded by `timeout`).
    pub min_kills: u64,
    /// Messages are shuffled within windows of this many before publishing (1 = no shuffle).
    pub reorder_window: usize,
    /// Seek back over the processed traffic once (replay).
    pub replay: bool,
    /// Time between two latency spikes.
    pub spike_every: Duration,
    /// Publish rate, messages per second (0 = as fast as possible).
    pub rate_per_sec: u64,
    /// Bound on the whole run.
    pub timeout: Duration,
    /// Where consumer logs go (`consumer-N.log`); None = discarded.
    pub log_dir: Option<PathBuf>,
    /// Seed of the kill schedule and the shuffle.
    pub seed: u64,
    /// Print a status line to stderr every 10 s.
    pub progress: bool,
    /// Where the consumers count: the Firestore emulator, or a PostgreSQL
    /// database (emptied first; the store faults then act on the server).
    pub store: StoreLocation,
    /// Milestone notifications to a faulty webhook sink; `None` = off.
    pub milestones: Option<ChaosMilestones>,
    /// How the consumers get their messages: pulled, or pushed through a
    /// round-robin front (`crate::front`) with OIDC tokens; with push the
    /// Pub/Sub faults act on the pushes (answers ignored, acks lost,
    /// spurious redeliveries) instead of the streams.
    pub delivery: Delivery,
    /// When the chaos calms, this many consumers (the last ones, never the
    /// victim) are SIGKILLed and never restarted, as a scale-down does;
    /// the survivors must still bring every rollup to its count.
    pub scale_down: usize,
    /// Users erased while the chaos runs (0 = no erasure): a heavy user
    /// added to the workload, then users drawn by `seed`. The consumers
    /// then check tombstones (the store raised to data format 2 first).
    pub erase_users: usize,
}

/// The milestone side of a chaos run.
#[derive(Clone, Debug)]
pub struct ChaosMilestones {
    /// `--milestones` of the consumers.
    pub thresholds: Vec<i64>,
    /// The sink's faults (500s, hangs past the consumers' timeout, closes).
    pub faults: SinkFaults,
}

impl ChaosMilestones {
    /// Milestones 10, 50, 200 (the CI workload's posts cross many), and a
    /// sink that fails 1 call in 5, hangs 1 in 10 past the 500 ms timeout
    /// (processed, answer lost) and closes 1 in 10.
    pub fn ci() -> Self {
        Self {
            thresholds: vec![10, 50, 200],
            faults: SinkFaults {
                error_rate: 0.2,
                hang_rate: 0.1,
                hang: Duration::from_millis(1500),
                close_rate: 0.1,
                ..SinkFaults::default()
            },
        }
    }

    /// The consumers' flags: the sink, its secret, short timeout, lease
    /// and retries.
    pub(super) fn flags(&self, url: &str) -> Vec<String> {
        let list: Vec<String> = self.thresholds.iter().map(i64::to_string).collect();
        [
            "--milestone-webhook",
            url,
            "--milestone-webhook-secret",
            milestones::SECRET,
            "--milestones",
            &list.join(","),
            "--milestone-webhook-timeout-ms",
            "500",
            "--milestone-lease-secs",
            "2",
            "--milestone-retry-initial-ms",
            "100",
            // A record that failed through the whole chaos tries again
            // within 2 s of the calm, not after a doubled wait that can
            // pass the run's milestone wait (25.6 s after 9 failures).
            "--milestone-retry-max-ms",
            "2000",
        ]
        .iter()
        .map(|f| f.to_string())
        .collect()
    }
}

impl ChaosConfig {
    /// A CI-sized run: `events` messages, 3 consumers, a kill every 0.3-0.9 s.
    pub fn ci(events: u64, hotcount_bin: PathBuf) -> Self {
        Self {
            workload: WorkloadConfig {
                events,
                posts: 200,
                users: 3_000,
                zipf_exponent: 1.2,
                unlike_fraction: 0.3,
                duplicate_fraction: 0.05,
                poison_fraction: 0.01,
                hostile_fraction: 0.01,
                shuffle: false,
                seed: 6,
            },
            hotcount_bin,
            consumers: 3,
            kill_every: (Duration::from_millis(300), Duration::from_millis(900)),
            min_kills: 6,
            reorder_window: 64,
            replay: true,
            spike_every: Duration::from_secs(5),
            rate_per_sec: 0,
            timeout: Duration::from_secs(150),
            log_dir: None,
            seed: 6,
            progress: false,
            store: StoreLocation::Firestore,
            milestones: Some(ChaosMilestones::ci()),
            delivery: Delivery::Pull,
            scale_down: 1,
            erase_users: 3,
        }
    }
}

/// Settings that cannot make a run.
pub(super) fn check(config: &ChaosConfig) -> Result<(), RunError> {
    config
        .workload
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    if config.scale_down >= config.consumers {
        return Err(RunError::Invalid(
            "--scale-down must leave at least one consumer running".into(),
        ));
    }
    if config.consumers == 0 || config.kill_every.0 > config.kill_every.1 {
        return Err(RunError::Invalid(
            "need at least one consumer and kill_every min <= max".into(),
        ));
    }
    if !config.hotcount_bin.is_file() {
        return Err(RunError::Invalid(format!(
            "no hotcount binary at {} (build it, or pass --hotcount-bin)",
            config.hotcount_bin.display()
        )));
    }
    Ok(())
}

/// Short deadlines and backoffs, so that redeliveries come quickly, and
/// room for many deliveries before a message is dead-lettered.
pub(super) fn stage_spec(store: &StoreLocation) -> StageSpec {
    StageSpec {
        setup: SetupArgs {
            project: PROJECT.into(),
            topic: TOPIC.into(),
            subscription: SUBSCRIPTION.into(),
            dead_letter_topic: "likes-dead-letter".into(),
            dead_letter_subscription: "likes-dead-letter-inspect".into(),
            ack_deadline_secs: 10,
            min_retry_backoff_secs: 0,
            max_retry_backoff_secs: 1,
            max_delivery_attempts: 100,
            exactly_once: false,
            topic_retention_days: 7,
            iam: Default::default(),
            push: Default::default(),
        },
        subscription: format!("projects/{PROJECT}/subscriptions/{SUBSCRIPTION}"),
        store_rtt_ms: 0,
        store: store.clone(),
    }
}

/// Where the consumers write (read back directly, not through the proxy).
pub(super) fn target(store: &StoreLocation) -> Target {
    Target {
        store: store.clone(),
        project: PROJECT.into(),
        database: "(default)".into(),
        collection_prefix: PREFIX.into(),
    }
}
