//! The chaos run: emulators in this process, hotcount consumers as separate
//! OS processes, a hostile workload, `kill -9`, injected faults and a Seek
//! replay; then every post's count is verified exactly.
//!
//! Invariant: the verdict comes from [`crate::verify`] against the truth of
//! the generated events alone (every event of an erased user left out,
//! whenever published), read only after every consumer process is gone
//! and the subscription has nothing unacked with all faults cleared.
//!
//! How each hazard is produced (see `docs/RELIABILITY.md`):
//! - publisher duplicates, double likes, unlikes, poison: the workload;
//!   out-of-order delivery: the workload is shuffled within windows before
//!   publishing, and every redelivery arrives out of order anyway;
//! - `kill -9`: [`crate::consumer::Child::kill`] (SIGKILL) of the victim
//!   consumer at random moments; every other kill fires within a few
//!   milliseconds of the victim's own committed-batch counter moving (read
//!   from its metrics endpoint), i.e. after its commit and (the acks are
//!   flushed every 100 ms) before its ack;
//! - three consumers on one subscription, the first one repeatedly killed;
//! - faults: `ack_lost`, `spurious_redelivery`, `drop_stream` (Pub/Sub),
//!   Commit `ABORTED`, Commit applied then answered `UNAVAILABLE`, and latency
//!   spikes on Commit during which the emulated clock jumps past every lease
//!   (Firestore); with a PostgreSQL store (`store`), the same three on the
//!   real server: the stage's proxy cuts a consumer's connection before its
//!   COMMIT reaches the server (rolled back) or after the server committed
//!   (outcome unknown to the consumer), and a spike holds a SHARE lock on
//!   the counter table for 1.5 s, so commits wait while the clock jumps;
//! - replay: a snapshot taken before publishing, Seeked to once the traffic
//!   has been processed, so all of it is delivered again;
//! - erasures (`erase_users`): `hotcount users erase` processes for users
//!   chosen by seed (one of them a heavy user added to the workload), while
//!   their events are still being delivered, one SIGKILLed midway and run
//!   again; the consumers check the tombstones, and the truth leaves every
//!   event of an erased user out.
//!
//! Layout: this file holds the settings and the run as named steps;
//! `hazards` makes the faults, the kills, the spikes and the shuffle;
//! `erasures` the erased users and their `users erase` processes;
//! `summary` holds what was measured, the PASS claims and the table.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use google_cloud_pubsub::client::SubscriptionAdmin;
use hotcount::config::{Delivery, StoreLocation, Target};
use hotcount::ops::setup::SetupArgs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::milestones::{self, MilestoneReport};
use crate::publish::{self, PublishOptions, PublishReport};
use crate::run_error::RunError;
use crate::stage::{Stage, StageSpec};
use crate::verify;
use crate::workload::{generate, Truth, Workload, WorkloadConfig};
use hotcount::store::milestone::{MilestoneStatus, MilestoneStore};
use hotcount_emulators::webhook::{Sink, SinkFaults};

mod erasures;
mod hazards;
mod summary;

pub use erasures::{ErasureReport, HEAVY_USER, USER_HASH_KEY};
pub use hazards::reorder;
pub use summary::{
    render, ChaosSummary, FAULT_KINDS, POSTGRES_FAULT_KINDS, PULL_FAULT_KINDS, PUSH_FAULT_KINDS,
};

use hazards::{Chaos, Tally};
use summary::Outcome;

const PROJECT: &str = "hotcount-chaos";
const TOPIC: &str = "likes";
const SUBSCRIPTION: &str = "likes-hotcount";
const SNAPSHOT: &str = "chaos-start";
const CONSUMER: &str = "hotcount";
const PREFIX: &str = "chaos_";
/// Emulated time the clock jumps to expire every lease (past the 60 s stream deadline).
const LEASE_JUMP: Duration = Duration::from_secs(120);

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
    fn flags(&self, url: &str) -> Vec<String> {
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

/// Runs the whole chaos scenario; `cancel` ends it early (then it still cleans up).
/// A mismatch is not an error: see [`ChaosSummary::is_success`].
pub async fn run(
    config: &ChaosConfig,
    cancel: watch::Receiver<bool>,
) -> Result<ChaosSummary, RunError> {
    check(config)?;
    let log_dir = log_dir(config)?;
    let started = Instant::now();
    let stage = Stage::start(&stage_spec(&config.store)).await?;
    let replay = Replay::prepare(&stage, config.replay).await?;
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut workload = generate(&config.workload);
    let erased_users = choose_erased(config, &mut workload);
    reorder(&mut workload, config.reorder_window, &mut rng);
    // What the store must hold at rest: no event of an erased user counts.
    let erased: BTreeSet<String> = erased_users.iter().cloned().collect();
    let truth = Truth::compute_without(workload.config.clone(), &workload.messages, &erased);
    if !erased.is_empty() {
        // Tombstones need every replica to check them: the store at data
        // format 2 before any consumer starts.
        let format = hotcount::store::format::DATA_FORMAT_TOMBSTONES;
        stage
            .raise_data_format(&target(&config.store), format)
            .await?;
    }

    let sink = match &config.milestones {
        Some(m) => Some(milestones::start_sink(m.faults.clone()).await?),
        None => None,
    };
    let mut extra = match (&config.milestones, &sink) {
        (Some(m), Some(sink)) => m.flags(&sink.url()),
        _ => Vec::new(),
    };
    if !erased.is_empty() {
        extra.extend(erasures::consumer_flags());
    }
    // With push: the consumers behind one front, the subscription pushing
    // to it once they listen.
    let front = match config.delivery {
        Delivery::Push => Some(crate::front::PushFront::start().await),
        Delivery::Pull => None,
    };
    let erase_log = log_dir.join("erasures.log");
    let chaos = Chaos::start(
        &stage,
        config,
        log_dir,
        rng.random(),
        front.as_ref(),
        &extra,
    )?;
    if let Some(front) = &front {
        chaos.wait_listening(Duration::from_secs(60)).await;
        stage.push_to(&front.url()).await?;
    }
    let tally = chaos.tally();
    let reporter = config.progress.then(|| {
        tokio::spawn(hazards::progress_loop(
            stage.emulators().clone(),
            stage.subscription().to_string(),
            tally.clone(),
            started,
        ))
    });
    // The erasures start once a third of the messages are done with: the
    // users' earlier events counted, their later ones (and the replay)
    // still to come.
    let eraser = (!erased_users.is_empty()).then(|| {
        tokio::spawn(erasures::run(
            erasures::EraseSpec {
                bin: config.hotcount_bin.clone(),
                endpoints: stage.endpoints().clone(),
                store: stage.consumer_store(),
                log: erase_log,
            },
            erased_users.clone(),
            stage.emulators().clone(),
            stage.subscription().to_string(),
            erasures::Start {
                after_done: workload.messages.len() as u64 / 3,
                give_up: started + config.timeout.mul_f64(0.3),
            },
            started,
        ))
    });
    let published = publish_workload(&stage, config, &workload, &cancel).await?;
    let replayed = process_and_replay(&stage, &replay, config, started, &cancel).await?;
    wait_for_kills(&tally, config, started, &cancel).await;
    // Every erasure ended (or failed) before the chaos calms.
    let mut erasures = match eraser {
        Some(handle) if is_cancelled(&cancel) => {
            handle.abort();
            None
        }
        Some(handle) => Some(
            handle
                .await
                .map_err(|e| RunError::Start(format!("erasures: {e}")))?,
        ),
        None => None,
    };

    // Calm: stop the chaos, clear the faults, bring every consumer back, drain.
    let mut consumers = chaos.calm(&stage, config.scale_down).await?;
    let drained = drain(&stage, started + config.timeout, &cancel).await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    // The sink calm too; every milestone the truth crosses delivered and
    // every record settled (bounded), before the consumers go.
    let target = target(&config.store);
    let milestones = match (&config.milestones, &sink) {
        (Some(m), Some(sink)) => {
            sink.set_faults(Default::default());
            let reach = Truth::reach(&workload.messages);
            Some(settle_milestones(&stage, &target, sink, m, &truth, &reach).await?)
        }
        _ => None,
    };
    // The rollups at rest, while the survivors run: every one equal to the
    // truth within the interval plus 10 s (and a margin), whatever the
    // kills and the scale-down left.
    let rollups_by = Instant::now() + ROLLUP_WAIT;
    while Instant::now() < rollups_by && !*cancel.borrow() {
        let report = verify::connect_and_verify(stage.endpoints(), &target, &truth, true).await?;
        if report.rollup_mismatches.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    consumers.kill_all().await;
    let verify = verify::connect_and_verify(stage.endpoints(), &target, &truth, true).await?;
    if let Some(report) = &mut erasures {
        erasures::check_posts(report, &workload.messages, &erased, &verify);
    }
    let outcome = Outcome {
        publish: published,
        replayed,
        verify,
        drained,
        elapsed: started.elapsed(),
    };
    let mut summary = ChaosSummary::collect(outcome, &stage, &tally, config);
    summary.milestones = milestones;
    summary.erasures = erasures;
    stage.shutdown().await;
    Ok(summary)
}

/// Longest wait, after the drain and the milestones, for every rollup to
/// show its count (the default interval plus 10 s, and a margin).
const ROLLUP_WAIT: Duration = Duration::from_secs(20);

/// Longest wait, after the drain, for the milestones to be delivered.
const MILESTONE_WAIT: Duration = Duration::from_secs(30);

/// Waits (bounded) until the sink has every milestone the truth crosses
/// and every record is settled; what the sink received, with the records'
/// state. `truth` is the final one (erased users left out): a milestone
/// it crosses must have been sent; one sent before an erasure or unlikes
/// lowered the count stays sent, but none may be above `reach` (per post,
/// its distinct likers, erased ones included).
async fn settle_milestones(
    stage: &Stage,
    target: &Target,
    sink: &Sink,
    config: &ChaosMilestones,
    truth: &Truth,
    reach: &std::collections::BTreeMap<String, i64>,
) -> Result<MilestoneReport, RunError> {
    let expected = milestones::expected_keys(truth, &config.thresholds, CONSUMER);
    let started = Instant::now();
    milestones::wait_for(sink, &expected, MILESTONE_WAIT).await;
    // A record settles after its key reached the sink: by the last answer's
    // round trip, or, where the sink took a call but its answer was lost
    // (a hang, a closed connection) or the caller was killed, by a retry
    // after the record's backoff or its lease (a few seconds at most after
    // failures doubling from 100 ms). So the wait is the milestones' whole
    // bound, not one round trip.
    let deadline = started + MILESTONE_WAIT;
    let db = hotcount::connect::store_db(stage.endpoints(), target, 1)
        .await
        .map_err(|e| RunError::Start(format!("reading the milestones: {e}")))?;
    let records = loop {
        let records = db
            .milestones()
            .await
            .map_err(|e| RunError::Start(format!("reading the milestones: {e}")))?;
        let settled = records.iter().all(|r| r.status == MilestoneStatus::Done);
        if settled || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut report = milestones::check(sink, &expected, truth);
    report.beyond_reach = milestones::beyond_reach(sink, reach);
    report.records = records.len();
    let not_done: Vec<_> = records
        .iter()
        .filter(|r| r.status != MilestoneStatus::Done)
        .collect();
    report.records_not_done = not_done.len();
    report.first_not_done = not_done.first().map(|r| {
        format!(
            "{} {:?} after {} attempts, due at {:?} (last error: {})",
            r.id(),
            r.status,
            r.attempts,
            r.due_at,
            r.last_error.as_deref().unwrap_or("none")
        )
    });
    Ok(report)
}

/// With erasures on: gives `workload` the heavy user and picks the users
/// to erase (drawn from a seed of their own); none otherwise.
fn choose_erased(config: &ChaosConfig, workload: &mut crate::workload::Workload) -> Vec<String> {
    if config.erase_users == 0 {
        return Vec::new();
    }
    erasures::add_heavy_user(workload);
    let mut rng = StdRng::seed_from_u64(config.seed ^ ERASE_SEED);
    erasures::choose(workload, config.erase_users, &mut rng)
}

/// Mixed into the run's seed to draw the users erased.
const ERASE_SEED: u64 = 0x00E2_A5E0;

/// Settings that cannot make a run.
fn check(config: &ChaosConfig) -> Result<(), RunError> {
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

/// The directory of the consumer logs, created. Logs are always kept: an
/// unexpected exit is reported with the tail of its log.
fn log_dir(config: &ChaosConfig) -> Result<PathBuf, RunError> {
    let log_dir = config.log_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("hotcount-chaos-{}", std::process::id()))
    });
    std::fs::create_dir_all(&log_dir).map_err(|e| RunError::Start(format!("log dir: {e}")))?;
    Ok(log_dir)
}

/// Short deadlines and backoffs, so that redeliveries come quickly, and
/// room for many deliveries before a message is dead-lettered.
fn stage_spec(store: &StoreLocation) -> StageSpec {
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
fn target(store: &StoreLocation) -> Target {
    Target {
        store: store.clone(),
        project: PROJECT.into(),
        database: "(default)".into(),
        collection_prefix: PREFIX.into(),
    }
}

/// Publishes the (shuffled) workload as generated, `occurredAt` untouched.
async fn publish_workload(
    stage: &Stage,
    config: &ChaosConfig,
    workload: &Workload,
    cancel: &watch::Receiver<bool>,
) -> Result<PublishReport, RunError> {
    let options = PublishOptions {
        rate_per_sec: config.rate_per_sec,
        stamp_at_publish: false,
        progress: false,
        ..PublishOptions::default()
    };
    let (endpoints, topic) = (stage.endpoints(), stage.topic());
    let published =
        publish::connect_and_publish(endpoints, topic, workload, &options, cancel.clone()).await?;
    Ok(published)
}

/// The Seek replay: a snapshot taken before publishing, Seeked to later.
struct Replay {
    admin: SubscriptionAdmin,
    snapshot: String,
}

impl Replay {
    /// Connects the admin client and, when `replay`, takes the snapshot.
    async fn prepare(stage: &Stage, replay: bool) -> Result<Self, RunError> {
        let admin = hotcount::connect::subscription_admin(stage.endpoints())
            .await
            .map_err(|e| RunError::Start(e.to_string()))?;
        let snapshot = format!("projects/{PROJECT}/snapshots/{SNAPSHOT}");
        if replay {
            admin
                .create_snapshot()
                .set_name(snapshot.clone())
                .set_subscription(stage.subscription().to_string())
                .send()
                .await
                .map_err(|e| RunError::Start(format!("snapshot: {e}")))?;
        }
        Ok(Self { admin, snapshot })
    }

    /// Seeks the subscription to the snapshot; the messages it made
    /// deliverable again.
    async fn seek(&self, stage: &Stage) -> Result<u64, RunError> {
        let before = stage.subscription_stats().unacked;
        self.admin
            .seek()
            .set_subscription(stage.subscription().to_string())
            .set_snapshot(self.snapshot.clone())
            .send()
            .await
            .map_err(|e| RunError::Start(format!("seek: {e}")))?;
        Ok(stage.subscription_stats().unacked.saturating_sub(before))
    }
}

/// Waits until the traffic is processed (by 35 % of the timeout), then,
/// with a replay, Seeks and waits again (by 70 %); the messages replayed.
async fn process_and_replay(
    stage: &Stage,
    replay: &Replay,
    config: &ChaosConfig,
    started: Instant,
    cancel: &watch::Receiver<bool>,
) -> Result<u64, RunError> {
    // "Processed" while faults keep firing: at most a small remainder unacked.
    let remainder = config.workload.events / 50 + 20;
    let processed = || stage.subscription_stats().unacked <= remainder;
    wait_until(started + config.timeout.mul_f64(0.35), cancel, processed).await;
    if !config.replay || is_cancelled(cancel) {
        return Ok(0);
    }
    let replayed = replay.seek(stage).await?;
    wait_until(started + config.timeout.mul_f64(0.7), cancel, processed).await;
    Ok(replayed)
}

/// Keeps the chaos going (by 80 % of the timeout) until the minimum of
/// kills is reached and at least one kill provably followed one of the
/// victim's commits.
async fn wait_for_kills(
    tally: &Tally,
    config: &ChaosConfig,
    started: Instant,
    cancel: &watch::Receiver<bool>,
) {
    wait_until(started + config.timeout.mul_f64(0.8), cancel, || {
        tally.kills() >= config.min_kills && tally.kills_after_commit() > 0
    })
    .await;
}

fn is_cancelled(cancel: &watch::Receiver<bool>) -> bool {
    *cancel.borrow()
}

/// Polls `done` every 50 ms until it holds, `deadline` passes or `cancel` fires.
async fn wait_until(
    deadline: Instant,
    cancel: &watch::Receiver<bool>,
    mut done: impl FnMut() -> bool,
) {
    while !done() && Instant::now() < deadline && !is_cancelled(cancel) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until nothing is unacked for a full second; when the backlog stops
/// moving for 2 s (lost acks and killed consumers' leases wait for their
/// deadline), jumps the emulated clock past every lease.
async fn drain(stage: &Stage, deadline: Instant, cancel: &watch::Receiver<bool>) -> bool {
    let mut last = u64::MAX;
    let mut moved = Instant::now();
    let mut empty_since: Option<Instant> = None;
    loop {
        let unacked = stage.unacked();
        if unacked == 0 {
            let since = *empty_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(1) {
                return true;
            }
        } else {
            empty_since = None;
        }
        if unacked != last {
            last = unacked;
            moved = Instant::now();
        } else if unacked > 0 && moved.elapsed() > Duration::from_secs(2) {
            stage.emulators().clock().advance(LEASE_JUMP);
            moved = Instant::now();
        }
        if Instant::now() > deadline || is_cancelled(cancel) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
