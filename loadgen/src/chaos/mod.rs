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
//! Layout: this file holds the run as named steps; `config` its settings
//! and the names of its world; `traffic` publishing, the replay and the
//! drain; `hazards` makes the faults, the kills, the spikes and the
//! shuffle; `consumers` the consumer processes; `tally` what the chaos
//! counts while it runs;
//! `erasures` the erased users and their `users erase` processes;
//! `summary` holds what was measured, the PASS claims and the table.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hotcount::config::{Delivery, Target};
use hotcount::store::milestone::{MilestoneStatus, MilestoneStore};
use hotcount_emulators::webhook::Sink;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::milestones::{self, MilestoneReport};
use crate::run_error::RunError;
use crate::stage::Stage;
use crate::verify;
use crate::workload::{generate, Truth};

mod config;
mod consumers;
mod erasures;
mod hazards;
mod summary;
mod tally;
mod traffic;

pub use config::{ChaosConfig, ChaosMilestones};
pub use erasures::{ErasureReport, HEAVY_USER, USER_HASH_KEY};
pub use hazards::reorder;
pub use summary::{
    render, ChaosSummary, FAULT_KINDS, POSTGRES_FAULT_KINDS, PULL_FAULT_KINDS, PUSH_FAULT_KINDS,
};

use config::{check, stage_spec, target, CONSUMER};
use hazards::Chaos;
use summary::Outcome;
use traffic::{drain, is_cancelled, process_and_replay, publish_workload, wait_for_kills, Replay};

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

/// The directory of the consumer logs, created. Logs are always kept: an
/// unexpected exit is reported with the tail of its log.
fn log_dir(config: &ChaosConfig) -> Result<PathBuf, RunError> {
    let log_dir = config.log_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("hotcount-chaos-{}", std::process::id()))
    });
    std::fs::create_dir_all(&log_dir).map_err(|e| RunError::Start(format!("log dir: {e}")))?;
    Ok(log_dir)
}
