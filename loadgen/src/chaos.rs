//! The chaos run: emulators in this process, hotcount consumers as separate
//! OS processes, a hostile workload, `kill -9`, injected faults and a Seek
//! replay; then every post's count is verified exactly.
//!
//! Invariant: the verdict comes from [`crate::verify`] against the truth of
//! the generated events alone, read only after every consumer process is
//! gone and the subscription has nothing unacked with all faults cleared.
//!
//! How each hazard is produced (see `docs/RELIABILITY.md`):
//! - publisher duplicates, double likes, unlikes, poison: the workload;
//!   out-of-order delivery: the workload is shuffled within windows before
//!   publishing, and every redelivery arrives out of order anyway;
//! - `kill -9`: [`tokio::process::Child::kill`] (SIGKILL) of the victim
//!   consumer at random moments; every other kill fires within a few
//!   milliseconds of the victim's own committed-batch counter moving (read
//!   from its metrics endpoint), i.e. after its commit and (the acks are
//!   flushed every 100 ms) before its ack;
//! - three consumers on one subscription, the first one repeatedly killed;
//! - faults: `ack_lost`, `spurious_redelivery`, `drop_stream` (Pub/Sub),
//!   Commit `ABORTED`, Commit applied then answered `UNAVAILABLE`, and latency
//!   spikes on Commit during which the emulated clock jumps past every lease
//!   (Firestore);
//! - replay: a snapshot taken before publishing, Seeked to once the traffic
//!   has been processed, so all of it is delivered again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Endpoints, Target};
use hotcount::ops::setup::{self, SetupArgs};
use hotcount_emulators::pubsub::SubscriptionStats;
use hotcount_emulators::{Emulators, EmulatorsConfig, FaultKind, FaultSpec};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng, SeedableRng};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tonic::Code;

use crate::publish::{self, PublishOptions, PublishReport};
use crate::run_error::RunError;
use crate::verify::{self, VerifyReport};
use crate::workload::{MessageMixArgs, Origin, Workload};
use crate::{generate, Truth, WorkloadConfig};

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
        }
    }
}

/// What the run measured.
#[derive(Debug)]
pub struct ChaosSummary {
    /// Publish outcome (the first pass; the replay is counted separately).
    pub publish: PublishReport,
    /// Messages made deliverable again by the Seek (0 without replay).
    pub replayed: u64,
    /// `kill -9` of a consumer process.
    pub kills: u64,
    /// Of those, kills fired right after a Firestore commit (before its ack).
    pub kills_after_commit: u64,
    /// Consumer processes that exited without being killed (restarted too).
    pub unexpected_exits: u64,
    /// Latency spikes with a clock jump past the leases.
    pub spikes: u64,
    /// Faults fired, by kind (Pub/Sub and Firestore together).
    pub faults: BTreeMap<String, u64>,
    /// The subscription's counters at the end.
    pub subscription: SubscriptionStats,
    /// Firestore commits served.
    pub commits: u64,
    /// The verification.
    pub verify: VerifyReport,
    /// Whether the subscription drained (nothing unacked) before the timeout.
    pub drained: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Each unexpected consumer exit, with the tail of its log.
    pub exit_reports: Vec<String>,
    /// Kills the run had to reach.
    pub min_kills: u64,
    /// Whether a Seek replay was asked for.
    pub replay_expected: bool,
}

/// Every fault kind the run injects; each must fire.
pub const FAULT_KINDS: [&str; 6] = [
    "ack lost",
    "spurious redelivery",
    "stream dropped",
    "commit ABORTED",
    "commit applied, answered UNAVAILABLE",
    "commit latency spike",
];

impl ChaosSummary {
    /// Every claim of the run that does not hold (empty = PASS): exact
    /// counts and invariant; drained; nothing failed to publish; every
    /// poison or hostile message has a quarantine record or was
    /// dead-lettered, and no valid event was quarantined; every membership
    /// read; redeliveries happened; no consumer exited unless killed; the
    /// kills reached their minimum and at least one landed right after a
    /// commit; the replay replayed; every fault kind fired.
    pub fn failures(&self) -> Vec<String> {
        let v = &self.verify;
        let mut out = Vec::new();
        let mut check = |ok: bool, what: String| {
            if !ok {
                out.push(what);
            }
        };
        check(
            v.mismatches.is_empty(),
            format!("{} posts mismatch", v.mismatches.len()),
        );
        check(
            v.invariant_violations.is_empty(),
            format!("{} invariant breaks", v.invariant_violations.len()),
        );
        check(self.drained, "the subscription did not drain".into());
        check(
            self.publish.failed == 0,
            format!("{} publishes failed", self.publish.failed),
        );
        let recorded = v.quarantined as u64 - v.quarantined_events as u64;
        let dead = self.subscription.dead_lettered;
        check(
            recorded + dead == v.poison_expected,
            format!(
                "poison sent {} != quarantined {recorded} + dead-lettered {dead}",
                v.poison_expected
            ),
        );
        check(
            v.quarantined_events == 0,
            format!("{} valid events quarantined", v.quarantined_events),
        );
        check(
            v.memberships_read as u64 == v.memberships_expected,
            format!(
                "memberships {} of {}",
                v.memberships_read, v.memberships_expected
            ),
        );
        check(self.subscription.redeliveries > 0, "no redelivery".into());
        check(
            self.unexpected_exits == 0,
            format!(
                "{} consumer exits that were not kills",
                self.unexpected_exits
            ),
        );
        check(
            self.kills >= self.min_kills,
            format!("{} kills of {}", self.kills, self.min_kills),
        );
        check(
            self.kills_after_commit > 0,
            "no kill landed right after a commit".into(),
        );
        check(
            !self.replay_expected || self.replayed > 0,
            "the Seek replayed nothing".into(),
        );
        for kind in FAULT_KINDS {
            check(
                self.faults.get(kind).copied().unwrap_or(0) > 0,
                format!("fault {kind} never fired"),
            );
        }
        out
    }

    /// Whether every claim holds ([`ChaosSummary::failures`] is empty).
    pub fn is_success(&self) -> bool {
        self.failures().is_empty()
    }
}

/// Shuffles `workload`'s messages within windows of `window`, keeping each
/// duplicate pointing at its original, and recomputes the truth (which does
/// not depend on order: per (post, user) the highest `seq` decides).
pub fn reorder(workload: &mut Workload, window: usize, rng: &mut impl Rng) {
    let n = workload.messages.len();
    let mut order: Vec<usize> = (0..n).collect();
    for chunk in order.chunks_mut(window.max(1)) {
        chunk.shuffle(rng);
    }
    let mut new_index = vec![0usize; n];
    for (new, old) in order.iter().enumerate() {
        new_index[*old] = new;
    }
    let mut messages = Vec::with_capacity(n);
    for old in order {
        let mut message = workload.messages[old].clone();
        if let Origin::Duplicate { of } = &mut message.origin {
            *of = new_index[*of];
        }
        messages.push(message);
    }
    workload.messages = messages;
    workload.truth = Truth::compute(workload.config.clone(), &workload.messages);
}

/// One consumer process slot.
struct Consumer {
    index: usize,
    child: Option<Child>,
}

struct Spawner {
    bin: PathBuf,
    endpoints: Endpoints,
    /// The victim's (consumer 0's) metrics endpoint, so a kill can wait for
    /// the victim's own commit counter to move.
    victim_metrics: std::net::SocketAddr,
    /// Consumer `i` appends its stderr to `consumer-{i}.log` here.
    log_dir: PathBuf,
}

impl Spawner {
    fn log(&self, index: usize) -> PathBuf {
        self.log_dir.join(format!("consumer-{index}.log"))
    }

    /// The last `lines` lines of consumer `index`'s log.
    fn log_tail(&self, index: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log(index)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn spawn(&self, index: usize) -> Result<Child, RunError> {
        let mut cmd = Command::new(&self.bin);
        let metrics = if index == 0 {
            self.victim_metrics.to_string()
        } else {
            "off".to_string()
        };
        cmd.args([
            "run",
            "--project",
            PROJECT,
            "--collection-prefix",
            PREFIX,
            "--subscription",
            SUBSCRIPTION,
            "--consumer",
            CONSUMER,
            "--metrics-addr",
            &metrics,
        ]);
        if let Some(h) = &self.endpoints.pubsub_emulator_host {
            cmd.env("PUBSUB_EMULATOR_HOST", h);
        }
        if let Some(h) = &self.endpoints.firestore_emulator_host {
            cmd.env("FIRESTORE_EMULATOR_HOST", h);
        }
        cmd.env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(index))
            .map_err(|e| RunError::Start(format!("consumer log: {e}")))?;
        cmd.stderr(file);
        cmd.spawn()
            .map_err(|e| RunError::Start(format!("spawning {}: {e}", self.bin.display())))
    }
}

/// Counters shared by the chaos tasks.
#[derive(Default)]
struct Tally {
    kills: AtomicU64,
    kills_after_commit: AtomicU64,
    unexpected_exits: AtomicU64,
    spikes: AtomicU64,
    /// How each unexpected exit ended, with the tail of its log.
    exit_reports: std::sync::Mutex<Vec<String>>,
}

/// Runs the whole chaos scenario; `cancel` ends it early (then it still cleans up).
/// A mismatch is not an error: see [`ChaosSummary::is_success`].
pub async fn run(
    config: &ChaosConfig,
    cancel: watch::Receiver<bool>,
) -> Result<ChaosSummary, RunError> {
    config
        .workload
        .validate()
        .map_err(|e| RunError::Invalid(e.to_string()))?;
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
    // Consumer logs are always kept: an unexpected exit is reported with
    // the tail of its log.
    let log_dir = config.log_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("hotcount-chaos-{}", std::process::id()))
    });
    std::fs::create_dir_all(&log_dir).map_err(|e| RunError::Start(format!("log dir: {e}")))?;
    let started = Instant::now();
    let deadline = started + config.timeout;
    let emulators = Arc::new(
        Emulators::start(EmulatorsConfig::default())
            .await
            .map_err(|e| RunError::Start(format!("emulators: {e}")))?,
    );
    let endpoints = Endpoints {
        pubsub_emulator_host: Some(emulators.pubsub_addr().to_string()),
        firestore_emulator_host: Some(emulators.firestore_addr().to_string()),
    };
    let subscription = format!("projects/{PROJECT}/subscriptions/{SUBSCRIPTION}");
    setup::setup(
        &endpoints,
        &SetupArgs {
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
        },
    )
    .await
    .map_err(|e| RunError::Start(format!("setup: {e}")))?;
    let admin = hotcount::connect::subscription_admin(&endpoints)
        .await
        .map_err(|e| RunError::Start(e.to_string()))?;
    let snapshot = format!("projects/{PROJECT}/snapshots/{SNAPSHOT}");
    if config.replay {
        admin
            .create_snapshot()
            .set_name(snapshot.clone())
            .set_subscription(subscription.clone())
            .send()
            .await
            .map_err(|e| RunError::Start(format!("snapshot: {e}")))?;
    }

    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut workload = generate(&config.workload);
    reorder(&mut workload, config.reorder_window, &mut rng);

    let spawner = Arc::new(Spawner {
        bin: config.hotcount_bin.clone(),
        endpoints: endpoints.clone(),
        victim_metrics: free_loopback_port()?,
        log_dir: log_dir.clone(),
    });
    let mut consumers = Vec::new();
    for index in 0..config.consumers {
        consumers.push(Consumer {
            index,
            child: Some(spawner.spawn(index)?),
        });
    }
    install_faults(&emulators).map_err(RunError::Start)?;

    let tally = Arc::new(Tally::default());
    let (chaos_stop_tx, chaos_stop) = watch::channel(false);
    let killer = tokio::spawn(kill_loop(
        consumers,
        spawner.clone(),
        tally.clone(),
        config.clone(),
        chaos_stop.clone(),
        rng.random(),
    ));
    let spiker = tokio::spawn(spike_loop(
        emulators.clone(),
        tally.clone(),
        config.spike_every,
        chaos_stop.clone(),
    ));

    let reporter = config.progress.then(|| {
        tokio::spawn(progress_loop(
            emulators.clone(),
            subscription.clone(),
            tally.clone(),
            started,
        ))
    });
    let options = PublishOptions {
        rate_per_sec: config.rate_per_sec,
        stamp_at_publish: false,
        progress: false,
        ..PublishOptions::default()
    };
    let topic = format!("projects/{PROJECT}/topics/{TOPIC}");
    let published =
        publish::connect_and_publish(&endpoints, &topic, &workload, &options, cancel.clone())
            .await?;
    let stats = |e: &Emulators| e.pubsub().stats(&subscription).unwrap_or_default();
    // "Processed" while faults keep firing: at most a small remainder unacked.
    let remainder = config.workload.events / 50 + 20;
    let processed = || stats(&emulators).unacked <= remainder;
    wait_until(started + config.timeout.mul_f64(0.35), &cancel, processed).await;
    let mut replayed = 0;
    if config.replay && !is_cancelled(&cancel) {
        let before = stats(&emulators).unacked;
        admin
            .seek()
            .set_subscription(subscription.clone())
            .set_snapshot(snapshot.clone())
            .send()
            .await
            .map_err(|e| RunError::Start(format!("seek: {e}")))?;
        replayed = stats(&emulators).unacked.saturating_sub(before);
        wait_until(started + config.timeout.mul_f64(0.7), &cancel, processed).await;
    }
    // Keep killing until the minimum is reached and at least one kill
    // provably followed one of the victim's commits.
    wait_until(started + config.timeout.mul_f64(0.8), &cancel, || {
        tally.kills.load(Ordering::Relaxed) >= config.min_kills
            && tally.kills_after_commit.load(Ordering::Relaxed) > 0
    })
    .await;

    // Calm: stop the chaos, clear the faults, bring every consumer back, drain.
    let _ = chaos_stop_tx.send(true);
    let _ = spiker.await;
    let mut consumers = killer
        .await
        .map_err(|e| RunError::Start(format!("kill loop: {e}")))?;
    emulators.pubsub_faults().clear();
    emulators.firestore_faults().clear();
    for c in &mut consumers {
        if c.child.is_none() {
            c.child = Some(spawner.spawn(c.index)?);
        }
    }
    let drained = drain(&emulators, &subscription, deadline, &cancel).await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    for c in &mut consumers {
        if let Some(mut child) = c.child.take() {
            let _ = child.kill().await;
        }
    }

    let target = Target {
        project: PROJECT.into(),
        database: "(default)".into(),
        collection_prefix: PREFIX.into(),
    };
    let verify = verify::connect_and_verify(&endpoints, &target, &workload.truth).await?;
    let mut faults = BTreeMap::new();
    for (kind, n) in emulators
        .pubsub_faults()
        .fired()
        .into_iter()
        .chain(emulators.firestore_faults().fired())
    {
        *faults.entry(fault_label(kind).to_string()).or_default() += n;
    }
    let summary = ChaosSummary {
        publish: published,
        replayed,
        kills: tally.kills.load(Ordering::Relaxed),
        kills_after_commit: tally.kills_after_commit.load(Ordering::Relaxed),
        unexpected_exits: tally.unexpected_exits.load(Ordering::Relaxed),
        spikes: tally.spikes.load(Ordering::Relaxed),
        faults,
        subscription: stats(&emulators),
        commits: emulators.firestore_counters().get("Commit"),
        verify,
        drained,
        elapsed: started.elapsed(),
        exit_reports: tally
            .exit_reports
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default(),
        min_kills: config.min_kills,
        replay_expected: config.replay,
    };
    if let Ok(emulators) = Arc::try_unwrap(emulators) {
        emulators.shutdown().await;
    }
    Ok(summary)
}

/// The name of a fault kind as injected here.
fn fault_label(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Error => "commit ABORTED",
        FaultKind::ErrorAfterApply => "commit applied, answered UNAVAILABLE",
        FaultKind::Latency => "commit latency spike",
        FaultKind::DropStream => "stream dropped",
        FaultKind::AckLost => "ack lost",
        FaultKind::SpuriousRedelivery => "spurious redelivery",
    }
}

/// The steady faults: each commit fault once for certain, then all of them
/// at random (cleared before the final drain).
fn install_faults(emulators: &Emulators) -> Result<(), String> {
    let pubsub = emulators.pubsub_faults();
    pubsub.add(FaultSpec::new(FaultKind::AckLost).probability(0.02))?;
    pubsub.add(FaultSpec::new(FaultKind::SpuriousRedelivery).probability(0.02))?;
    // Each open stream checks about every 50 ms: about one drop per stream per 5 s.
    pubsub.add(FaultSpec::new(FaultKind::DropStream).probability(0.01))?;
    let firestore = emulators.firestore_faults();
    // Once each for certain (the first eligible commits), then at random: a
    // small run with large batches makes few commits, and every kind must
    // be exercised in every run, not in most.
    firestore.add(FaultSpec::error("Commit", Code::Aborted).times(1))?;
    firestore.add(FaultSpec::error_after_apply("Commit", Code::Unavailable).times(1))?;
    firestore.add(FaultSpec::error("Commit", Code::Aborted).probability(0.05))?;
    firestore.add(FaultSpec::error_after_apply("Commit", Code::Unavailable).probability(0.03))?;
    Ok(())
}

/// Kills the first consumer again and again (SIGKILL), restarting it after
/// a short pause; restarts any other consumer that exits by itself.
async fn kill_loop(
    mut consumers: Vec<Consumer>,
    spawner: Arc<Spawner>,
    tally: Arc<Tally>,
    config: ChaosConfig,
    stop: watch::Receiver<bool>,
    seed: u64,
) -> Vec<Consumer> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n: u64 = 0;
    while !*stop.borrow() {
        let pause = rng.random_range(config.kill_every.0..=config.kill_every.1);
        if sleep_or_stop(pause, &stop).await {
            break;
        }
        restart_exited(&mut consumers, &spawner, &tally);
        let mut after_commit = n % 2 == 1;
        n += 1;
        if after_commit {
            // Counted as "after a commit" only when the victim's own
            // committed-batch counter was seen to move just before the kill:
            // the victim committed a batch whose acks (flushed by the client
            // library every 100 ms) had most likely not left.
            after_commit = victim_committed(spawner.victim_metrics, Duration::from_secs(5)).await;
        }
        let victim = &mut consumers[0];
        if let Some(mut child) = victim.child.take() {
            if child.kill().await.is_ok() {
                tally.kills.fetch_add(1, Ordering::Relaxed);
                if after_commit {
                    tally.kills_after_commit.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let down = Duration::from_millis(rng.random_range(50..=400));
        tokio::time::sleep(down).await;
        match spawner.spawn(victim.index) {
            Ok(child) => victim.child = Some(child),
            Err(e) => tracing::warn!(error = %e, "restarting the victim failed; retrying"),
        }
    }
    restart_exited(&mut consumers, &spawner, &tally);
    consumers
}

/// Restarts every consumer that is not running; one that exited by itself
/// (not killed here) is counted and reported with the tail of its log.
/// Waits (at most `give_up`) until the victim's
/// `hotcount_batches_committed_total` moves; true if it did.
async fn victim_committed(metrics: std::net::SocketAddr, give_up: Duration) -> bool {
    let Ok(client) = hotcount_scrape::Client::new(Duration::from_millis(500)) else {
        return false;
    };
    let read = || async {
        let exposition = client.metrics(metrics).await.ok()?;
        exposition.value(hotcount::telemetry::names::BATCHES_COMMITTED.name)
    };
    let Some(before) = read().await else {
        return false;
    };
    let deadline = Instant::now() + give_up;
    while Instant::now() < deadline {
        if read().await.is_some_and(|now| now > before) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// A loopback address with a port free right now (for the victim's
/// metrics endpoint; nothing else binds ports in this process meanwhile).
fn free_loopback_port() -> Result<std::net::SocketAddr, RunError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| RunError::Start(format!("a port for the victim's metrics: {e}")))
}

fn restart_exited(consumers: &mut [Consumer], spawner: &Spawner, tally: &Tally) {
    for c in consumers.iter_mut() {
        let status = match &mut c.child {
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Some(Some(status)),
                _ => None,
            },
            None => Some(None),
        };
        let Some(status) = status else {
            continue;
        };
        if let Some(status) = status {
            tally.unexpected_exits.fetch_add(1, Ordering::Relaxed);
            let report = format!(
                "consumer {} exited by itself ({status}); its log ends:\n{}",
                c.index,
                spawner.log_tail(c.index, 20)
            );
            tracing::error!("{report}");
            if let Ok(mut reports) = tally.exit_reports.lock() {
                reports.push(report);
            }
        }
        c.child = spawner.spawn(c.index).ok();
    }
}

/// Every `every`: Commit calls stall 1.5 s (three of them) while the
/// emulated clock jumps past every lease, so messages in flight are
/// redelivered to other consumers while their first commit is still pending.
async fn spike_loop(
    emulators: Arc<Emulators>,
    tally: Arc<Tally>,
    every: Duration,
    stop: watch::Receiver<bool>,
) {
    loop {
        if sleep_or_stop(every, &stop).await {
            return;
        }
        let spike = FaultSpec::latency("Commit", Duration::from_millis(1500)).times(3);
        if emulators.firestore_faults().add(spike).is_err() {
            return;
        }
        if sleep_or_stop(Duration::from_millis(200), &stop).await {
            return;
        }
        emulators.clock().advance(LEASE_JUMP);
        tally.spikes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Prints the subscription's state and the kill count every 10 s.
async fn progress_loop(
    emulators: Arc<Emulators>,
    subscription: String,
    tally: Arc<Tally>,
    started: Instant,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let s = emulators.pubsub().stats(&subscription).unwrap_or_default();
        eprintln!(
            "[{:>5.0}s] published {} acked {} unacked {} redeliveries {} kills {}",
            started.elapsed().as_secs_f64(),
            s.published,
            s.acks,
            s.unacked,
            s.redeliveries,
            tally.kills.load(Ordering::Relaxed)
        );
    }
}

/// Sleeps `d`; true when `stop` turned true first.
async fn sleep_or_stop(d: Duration, stop: &watch::Receiver<bool>) -> bool {
    let mut stop = stop.clone();
    if *stop.borrow() {
        return true;
    }
    let stopped = tokio::select! {
        () = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
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
async fn drain(
    emulators: &Emulators,
    subscription: &str,
    deadline: Instant,
    cancel: &watch::Receiver<bool>,
) -> bool {
    let mut last = u64::MAX;
    let mut moved = Instant::now();
    let mut empty_since: Option<Instant> = None;
    loop {
        let unacked = emulators
            .pubsub()
            .stats(subscription)
            .map_or(u64::MAX, |s| s.unacked);
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
            emulators.clock().advance(LEASE_JUMP);
            moved = Instant::now();
        }
        if Instant::now() > deadline || is_cancelled(cancel) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The figures the chaos command prints.
pub fn render(s: &ChaosSummary) -> String {
    let v = &s.verify;
    let sub = &s.subscription;
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("  {name:<40} {value}\n"));
    row("events published", s.publish.published.to_string());
    row("events replayed by Seek", s.replayed.to_string());
    row("deliveries (incl. redeliveries)", sub.delivered.to_string());
    row("redeliveries observed", sub.redeliveries.to_string());
    row("lease expiries", sub.expiries.to_string());
    row("kills (kill -9)", s.kills.to_string());
    row(
        "  of which right after a commit",
        s.kills_after_commit.to_string(),
    );
    row("unexpected consumer exits", s.unexpected_exits.to_string());
    row("latency spikes + clock jumps", s.spikes.to_string());
    for (kind, n) in &s.faults {
        row(&format!("fault fired: {kind}"), n.to_string());
    }
    row("Firestore commits", s.commits.to_string());
    row("dead-lettered", sub.dead_lettered.to_string());
    row(
        "posts verified exact",
        format!("{} of {}", v.posts_exact, v.posts_checked),
    );
    row("mismatches", v.mismatches.len().to_string());
    row(
        "shard/membership invariant breaks",
        v.invariant_violations.len().to_string(),
    );
    row(
        "memberships (read / expected)",
        format!("{} / {}", v.memberships_read, v.memberships_expected),
    );
    row(
        "quarantined / poison injected",
        format!("{} / {}", v.quarantined, v.poison_expected),
    );
    row("valid events quarantined", v.quarantined_events.to_string());
    row("drained", s.drained.to_string());
    row("elapsed", format!("{:.1} s", s.elapsed.as_secs_f64()));
    let failures = s.failures();
    row(
        "verdict",
        if failures.is_empty() { "PASS" } else { "FAIL" }.to_string(),
    );
    for failure in failures {
        out.push_str(&format!("  FAIL: {failure}\n"));
    }
    for report in &s.exit_reports {
        out.push_str(&format!("{report}\n"));
    }
    out
}

/// The `hotcount` binary next to the running executable (or its parent
/// directory, for test executables under `deps/`).
pub fn default_hotcount_bin() -> PathBuf {
    let name = format!("hotcount{}", std::env::consts::EXE_SUFFIX);
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join(&name), dir.join("..").join(&name)] {
        if candidate.is_file() {
            return candidate;
        }
    }
    dir.join(name)
}

/// The `chaos` command's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct ChaosArgs {
    /// Messages to publish (valid + duplicates + poison).
    #[arg(long, default_value_t = 20_000)]
    pub events: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 200)]
    pub posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 3_000)]
    pub users: u32,
    /// Zipf exponent of post popularity.
    #[arg(long, default_value_t = 1.2)]
    pub zipf: f64,
    /// Probability that an event on a liked (post, user) is an unlike.
    #[arg(long, default_value_t = 0.3)]
    pub unlike_fraction: f64,
    /// Duplicate and poison fractions (shared with `demo`).
    #[command(flatten)]
    pub mix: MessageMixArgs,
    /// Seed of the workload, the shuffle and the kill schedule.
    #[arg(long, default_value_t = 6)]
    pub seed: u64,
    /// Consumer processes on the subscription (the first is killed repeatedly).
    #[arg(long, default_value_t = 3)]
    pub consumers: usize,
    /// Shortest pause between two kills, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub kill_min_ms: u64,
    /// Longest pause between two kills, in milliseconds.
    #[arg(long, default_value_t = 900)]
    pub kill_max_ms: u64,
    /// Keep the chaos going until at least this many kills.
    #[arg(long, default_value_t = 6)]
    pub min_kills: u64,
    /// Shuffle window for out-of-order publishing (1 = in order).
    #[arg(long, default_value_t = 64)]
    pub reorder_window: usize,
    /// Skip the Seek replay.
    #[arg(long)]
    pub no_replay: bool,
    /// Seconds between latency spikes (with a clock jump past the leases).
    #[arg(long, default_value_t = 5)]
    pub spike_every_secs: u64,
    /// Publish rate, messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Bound on the whole run, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// The hotcount binary (default: next to this executable).
    #[arg(long)]
    pub hotcount_bin: Option<PathBuf>,
    /// Directory for consumer logs (default: a temporary directory).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

impl ChaosArgs {
    /// The run these flags describe.
    pub fn config(&self) -> ChaosConfig {
        ChaosConfig {
            workload: WorkloadConfig {
                events: self.events,
                posts: self.posts,
                users: self.users,
                zipf_exponent: self.zipf,
                unlike_fraction: self.unlike_fraction,
                duplicate_fraction: self.mix.duplicate_fraction,
                poison_fraction: self.mix.poison_fraction,
                hostile_fraction: self.mix.hostile_fraction,
                seed: self.seed,
            },
            hotcount_bin: self
                .hotcount_bin
                .clone()
                .unwrap_or_else(default_hotcount_bin),
            consumers: self.consumers,
            kill_every: (
                Duration::from_millis(self.kill_min_ms),
                Duration::from_millis(self.kill_max_ms),
            ),
            min_kills: self.min_kills,
            reorder_window: self.reorder_window,
            replay: !self.no_replay,
            spike_every: Duration::from_secs(self.spike_every_secs.max(1)),
            rate_per_sec: self.rate,
            timeout: Duration::from_secs(self.timeout_secs),
            log_dir: self.log_dir.clone(),
            seed: self.seed,
            progress: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_keeps_duplicates_on_their_originals_and_the_truth() {
        let config = WorkloadConfig {
            events: 2_000,
            ..WorkloadConfig::default()
        };
        let mut w = generate(&config);
        let truth = w.truth.clone();
        reorder(&mut w, 32, &mut StdRng::seed_from_u64(1));
        assert_eq!(w.truth.counts, truth.counts);
        for m in &w.messages {
            if let Origin::Duplicate { of } = m.origin {
                assert_eq!(w.messages[of].data, m.data);
            }
        }
    }
}
