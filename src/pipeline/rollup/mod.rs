//! The rollup refresher, beside the pipeline after the flusher: keeps one
//! rollup per post (`counts/{post}`, `post_counts`) equal to the sum of the
//! post's counter shards, refreshing the posts this process changed
//! ([`Marks`], filled by the flusher once per committed batch) at most once
//! per `interval` per post fleet-wide, in a few shared round trips per
//! cycle: one read of every due post's shards and rollup at one read time,
//! one write call of every rollup to write, each on its own condition.
//!
//! Invariants (how each is kept is in `ARCHITECTURE.md`, "The rollups"):
//! - nothing here runs inside a batch's transaction, and a commit gains no
//!   round trip: the flusher only marks;
//! - a value written is the sum of the post's shards at the read time
//!   written with it (`asOf`), and only over the rollup that was read, so
//!   `asOf` never goes backwards;
//! - a mark is cleared only when a rollup as of a time that includes every
//!   change it marks is stored (written by this refresh, or found), so a
//!   lost race, a lost answer or a failing store leaves the post marked and
//!   it is read again; a mark lost with its process (a kill) is found again
//!   by the sweep of recently changed posts when a process starts;
//! - a rollup younger than `interval` (less the slack) is not written again
//!   (the refresh is deferred until it is that old), so replicas together
//!   write one post at most about once per interval;
//! - with milestones on, a write whose total reaches a milestone above the
//!   rollup read (and above the highest one recorded) creates its record
//!   in the same atomic write ([`crate::store::milestone::crossed`]): a
//!   refresh that changes no total (a replay) decides nothing.

mod marks;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::counter_shards::ShardRegistry;
use crate::store::milestone::{crossed, Thresholds};
use crate::store::rollup::{
    micros_of, Micros, PostRead, RollupKey, RollupSnapshot, RollupStore, RollupWrite, StoredRollup,
    WriteOutcome,
};
use crate::store::StoreError;
use crate::telemetry::Stats;

pub use marks::{Due, Marks, Settled};

/// A rollup younger than this share of the interval is not written again:
/// the slack lets a refresher that ticks every interval write a post at
/// each tick despite timer jitter, while replicas together still write it
/// at most about once per interval.
const FRESH_SHARE: f64 = 0.9;

/// The summary name of the rate-limited failure warnings.
const REFRESH_FAILED: &str = "rollup refreshes failed";

/// The summary name of the rate-limited sweep warnings.
const SWEEP_FAILED: &str = "rollup sweeps failed";

/// Posts over more counter shards than this are read without their
/// shards first ([`Refresher::peek`]).
pub const PEEK_ABOVE: u32 = 4;

/// The largest share of an interval added at random to a deferral.
const JITTER_SHARE: f64 = 0.25;

/// Tries of the start-up sweep before it is given up.
pub const SWEEP_ATTEMPTS: u32 = 5;

/// The refresher's settings.
#[derive(Clone, Debug)]
pub struct RollupConfig {
    /// At most one refresh per post per interval, fleet-wide; the refresher
    /// runs a cycle every interval.
    pub interval: Duration,
    /// At start, posts whose counter shards changed within this long are
    /// checked (a refresh lost with a killed process); `None` = no sweep.
    pub sweep_lookback: Option<Duration>,
    /// Counter shards a post may have when its own are unknown.
    pub max_shards: u32,
    /// Posts read in one round trip, at most.
    pub posts_per_read: usize,
    /// Rollups written in one round trip, at most.
    pub writes_per_call: usize,
    /// At shutdown, how long the last refresh of every marked post may take.
    pub drain_timeout: Duration,
    /// Longest wait before a post whose refresh failed is tried again.
    pub max_backoff: Duration,
    /// The milestones a write records when it first reaches them, sorted
    /// ascending; empty: none (milestones off). A shared handle: the
    /// fleet's stored setting, re-read while the refresher runs.
    pub milestones: Thresholds,
    /// A due record left uncleared this long (store time since its
    /// commit, or its last takeover) is taken over by this refresher: its
    /// committing replica is gone or stuck. Longer than a refresh takes
    /// (one interval, a deferral of another) with a margin.
    pub takeover_after: Duration,
    /// How often the refresher looks for records to take over.
    pub takeover_every: Duration,
    /// Due records taken over in one round trip, at most.
    pub takeover_limit: usize,
    /// Every counter shard a post without a rollup has is one its due
    /// records name: no build that leaves shards unregistered writes this
    /// store (data format 2 and up, see `store::format`). When false, a
    /// post's first refresh reads every shard a post may have.
    pub shards_registered: bool,
}

impl RollupConfig {
    /// The defaults around `interval` and `max_shards`.
    pub fn new(interval: Duration, max_shards: u32) -> Self {
        Self {
            interval,
            sweep_lookback: Some(Duration::from_secs(900)),
            max_shards,
            posts_per_read: 2000,
            writes_per_call: 500,
            drain_timeout: Duration::from_secs(2),
            max_backoff: Duration::from_secs(10).max(interval),
            milestones: Thresholds::default(),
            takeover_after: interval + TAKEOVER_MARGIN,
            takeover_every: interval.clamp(Duration::from_millis(200), Duration::from_secs(2)),
            takeover_limit: 500,
            shards_registered: false,
        }
    }
}

/// How much longer than one interval a due record may wait for its own
/// replica before another takes it over.
pub const TAKEOVER_MARGIN: Duration = Duration::from_secs(5);

/// What one post's read says to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The stored rollup already shows every change marked.
    Covered,
    /// The rollup covers more counter shards than were read: read again.
    Incomplete {
        /// Counter shards the rollup covers.
        shards: u32,
    },
    /// The rollup is younger than the interval: wait this long.
    Defer {
        /// Until the rollup is one interval old.
        after: Duration,
    },
    /// Write the sum read.
    Write {
        /// The new total.
        likes: i64,
        /// Counter shards it covers.
        shards: u32,
    },
}

/// Decides one post's refresh from what was read at `read_time` (pure).
/// With `rate_limited` false (the last refresh at shutdown) a young rollup
/// is written anyway.
pub fn decide(
    due: &Due,
    read: &PostRead,
    read_time: Micros,
    interval: Duration,
    rate_limited: bool,
) -> Decision {
    // The counter shards the rollup must register: every one that exists
    // among those read (which is every one registered, and every one this
    // process wrote) and those asked for; never more than that, so a
    // post read over more shards than it has (a batch whose shard is not
    // known) does not register, and from then on read, shards nobody wrote.
    let register = read.found_shards.max(due.grow).max(1);
    let Some(stored) = &read.stored else {
        return Decision::Write {
            likes: read.likes,
            shards: register,
        };
    };
    if let Some(shards) = stored.shards.filter(|&s| s > due.shards) {
        return Decision::Incomplete { shards };
    }
    let registers = stored.shards.is_none_or(|s| s >= register);
    let covered_at = due.covered_at.unwrap_or(read_time);
    if registers && (!due.changed || stored.as_of >= covered_at) {
        return Decision::Covered;
    }
    let age = Duration::from_micros(u64::try_from(read_time - stored.as_of).unwrap_or(0));
    if rate_limited && age < interval.mul_f64(FRESH_SHARE) {
        return Decision::Defer {
            after: interval.saturating_sub(age),
        };
    }
    Decision::Write {
        likes: read.likes,
        shards: register.max(stored.shards.unwrap_or(0)),
    }
}

/// A rollup write a read called for, with the mark it settles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWrite {
    /// The mark.
    pub due: Due,
    /// The sum read.
    pub likes: i64,
    /// The read time.
    pub as_of: Micros,
    /// Counter shards the sum covers.
    pub shards: u32,
    /// The rollup read (the write's condition; its `likes` is the old total).
    pub previous: Option<StoredRollup>,
    /// The milestones the write reaches first (their records go with it).
    pub milestones: Vec<i64>,
}

impl PlannedWrite {
    /// The write, borrowed.
    pub fn write(&self) -> RollupWrite<'_> {
        RollupWrite {
            post_id: &self.due.post_id,
            likes: self.likes,
            as_of: self.as_of,
            shards: self.shards,
            previous: self.previous.as_ref(),
            milestones: &self.milestones,
        }
    }
}

/// Refreshes now, whatever their age, the rollups of `posts` that exist
/// (the operator tools, after changing counts: `replay`, `reconcile
/// --repair`), recording the `milestones` (the fleet's stored setting)
/// each write reaches first; returns how many were written. A post
/// without a rollup is left alone: rollups are the running service's,
/// which may have them off.
pub async fn refresh_existing<S: RollupStore>(
    store: Arc<S>,
    posts: &[String],
    max_shards: u32,
    milestones: &[i64],
) -> usize {
    refresh_now(store, posts, max_shards, milestones, true).await
}

/// Refreshes now, whatever their age, the rollups of `posts`, creating
/// those that do not exist (`hotcount rollups refresh`, after an upgrade
/// from a build that wrote counter shards no rollup registers); each post
/// is read over `max_shards` counter shards and its rollup registers those
/// that exist; a write records the `milestones` it reaches first. Returns
/// how many were written.
pub async fn refresh_all<S: RollupStore>(
    store: Arc<S>,
    posts: &[String],
    max_shards: u32,
    milestones: &[i64],
) -> usize {
    refresh_now(store, posts, max_shards, milestones, false).await
}

async fn refresh_now<S: RollupStore>(
    store: Arc<S>,
    posts: &[String],
    max_shards: u32,
    milestones: &[i64],
    existing_only: bool,
) -> usize {
    let config = RollupConfig {
        milestones: Thresholds::new(milestones),
        sweep_lookback: None,
        drain_timeout: Duration::from_secs(60).max(Duration::from_millis(posts.len() as u64)),
        ..RollupConfig::new(Duration::from_secs(1), max_shards)
    };
    let stats = Arc::new(Stats::default());
    let refresher = Refresher {
        existing_only,
        ..Refresher::new(store, config, stats.clone())
    };
    let now = Instant::now();
    // Every shard a post may have: a tool's refresh also sums shards no
    // rollup registered yet.
    for post in posts {
        refresher.marks.mark_post(post, None, max_shards, now);
    }
    refresher.drain().await;
    stats.rollup_refreshes.get() as usize
}

/// Records on `progress` whether a store call was answered.
fn answered<T>(progress: &crate::telemetry::CommitProgress, result: &Result<T, StoreError>) {
    match result {
        Ok(_) => progress.committed(),
        Err(error) => progress.failed(error),
    }
}

/// [`answered`] for a write call: one whose every write failed (e.g. each
/// recording Commit unanswered) is no answer either.
fn written(
    progress: &crate::telemetry::CommitProgress,
    outcomes: &Result<Vec<WriteOutcome>, StoreError>,
) {
    match outcomes.as_deref() {
        Ok([WriteOutcome::Failed(error), rest @ ..])
            if rest.iter().all(|o| matches!(o, WriteOutcome::Failed(_))) =>
        {
            progress.failed(error);
        }
        _ => answered(progress, outcomes),
    }
}

/// A store answer the refresher cannot use.
fn internal(message: &str) -> StoreError {
    StoreError::internal("Rollups", message)
}

/// What one cycle did (for tests and the drain).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Posts refreshed in this cycle (read).
    pub posts: usize,
    /// Rollups written.
    pub written: usize,
    /// Store round trips.
    pub rpcs: usize,
}

/// The refresher of one process.
pub struct Refresher<S> {
    store: Arc<S>,
    marks: Arc<Marks>,
    config: RollupConfig,
    stats: Arc<Stats>,
    /// Where the counter shards each rollup registers are kept for the
    /// commits (Firestore), and the posts that need more.
    registry: Option<Arc<ShardRegistry>>,
    /// Refresh only rollups that exist (the operator tools: a deployment
    /// without rollups gets none from them).
    existing_only: bool,
    /// The store's clock less this process's, in microseconds, as last
    /// seen in a read's time (0 until then).
    store_offset: std::sync::atomic::AtomicI64,
}

impl<S: RollupStore> Refresher<S> {
    /// A refresher writing `store`'s rollups with fresh, empty marks
    /// (for the flusher: [`Self::marks`]).
    pub fn new(store: Arc<S>, config: RollupConfig, stats: Arc<Stats>) -> Self {
        let marks = Arc::new(Marks::new(config.max_shards, config.max_backoff));
        Self {
            store,
            marks,
            config,
            stats,
            registry: None,
            existing_only: false,
            store_offset: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// This refresher, registering in each rollup the counter shards its
    /// post's commits ask `registry` for, and telling `registry` what each
    /// rollup it reads or writes registers.
    pub fn with_registry(self, registry: Option<Arc<ShardRegistry>>) -> Self {
        Self { registry, ..self }
    }

    /// The marks the flusher fills.
    pub fn marks(&self) -> &Arc<Marks> {
        &self.marks
    }

    /// Sweeps (when configured), then runs a cycle every interval until
    /// `stop` turns true; then refreshes every marked post once more,
    /// bounded by the drain timeout.
    pub async fn run(self, stop: watch::Receiver<bool>) {
        // The sweep runs beside the cycles, never holding one up.
        tokio::join!(self.sweep_until_done(stop.clone()), self.cycles(stop));
        self.drain().await;
    }

    /// A cycle every interval (and a look for due records to take over
    /// every `takeover_every`) until `stop` turns true.
    async fn cycles(&self, mut stop: watch::Receiver<bool>) {
        // A random phase, so replicas started together do not tick together.
        let phase = self.config.interval.mul_f64(rand::random_range(0.0..1.0));
        let mut ticks = tokio::time::interval_at(Instant::now() + phase, self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_takeover = Instant::now() + phase;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
            if Instant::now() >= next_takeover {
                self.take_over().await;
                next_takeover = Instant::now() + self.config.takeover_every;
            }
            self.cycle(false).await;
            self.clear_ready().await;
        }
    }

    /// The start-up sweep, tried up to [`SWEEP_ATTEMPTS`] times with a
    /// growing pause, then given up (logged at ERROR): a backstop for
    /// changes no due record covers (writers from before due records).
    async fn sweep_until_done(&self, mut stop: watch::Receiver<bool>) {
        if self.config.sweep_lookback.is_none() {
            return;
        }
        let mut pause = Duration::from_secs(1);
        for attempt in 1..=SWEEP_ATTEMPTS {
            if self.sweep().await {
                return;
            }
            if attempt == SWEEP_ATTEMPTS {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            pause = (pause * 2).min(Duration::from_secs(30));
        }
        self.stats.rollup_failures.add(1);
        tracing::error!(
            attempts = SWEEP_ATTEMPTS,
            "rollup sweep given up; due records still cover every change this build committed"
        );
    }

    /// Takes over the due records no live refresher cleared in time and
    /// marks their posts; returns how many records it took.
    pub async fn take_over(&self) -> usize {
        let offset = self.store_offset.load(std::sync::atomic::Ordering::Relaxed);
        let store_now = micros_of(SystemTime::now()).saturating_add(offset);
        self.stats.rollup_rpcs.add(1);
        let taken = match self
            .store
            .take_over_due(
                self.config.takeover_after,
                store_now,
                self.config.takeover_limit,
            )
            .await
        {
            Ok(taken) => taken,
            Err(error) => {
                self.warn_failed(0, &error);
                return 0;
            }
        };
        if taken.is_empty() {
            return 0;
        }
        let now = Instant::now();
        for record in &taken {
            self.marks.mark(
                &record.posts,
                record.committed_at,
                Some(record.record.clone()),
                now,
            );
        }
        self.stats.rollup_taken_over.add(taken.len() as u64);
        tracing::info!(
            records = taken.len(),
            "rollup due records taken over from a replica that did not clear them in time"
        );
        taken.len()
    }

    /// Clears in the store the due records whose posts are all refreshed
    /// (one round trip); on failure they are cleared at a later cycle.
    pub async fn clear_ready(&self) {
        let ready = self.marks.take_ready();
        if ready.is_empty() {
            return;
        }
        self.stats.rollup_rpcs.add(1);
        match self.store.clear_due(&ready).await {
            Ok(()) => self.stats.rollup_cleared.add(ready.len() as u64),
            Err(error) => {
                self.warn_failed(0, &error);
                self.marks.unclear(ready);
            }
        }
    }

    /// Refreshes every marked post, ignoring their due times and the
    /// interval, until none is marked, one cycle changes nothing, or the
    /// drain timeout passes (what is left is found by the next start's
    /// sweep).
    pub async fn drain(&self) {
        let deadline = Instant::now() + self.config.drain_timeout;
        let drained = tokio::time::timeout_at(deadline, async {
            // Cycles in a row that settled nothing (a failing store), at most.
            let mut stalled = 0;
            while !self.marks.is_empty() && stalled < 3 {
                let before = self.marks.len();
                let report = self.cycle(true).await;
                let progress = report.written > 0 || self.marks.len() < before;
                stalled = if progress { 0 } else { stalled + 1 };
                if report.posts == 0 {
                    break;
                }
            }
        })
        .await;
        // Bounded apart: a drain that ran out of time still clears what
        // it settled (a record left is taken over by another replica).
        let cleared = tokio::time::timeout(self.config.drain_timeout, self.clear_ready()).await;
        let left = self.marks.len();
        self.stats.rollup_pending.set(left as u64);
        if drained.is_err() || cleared.is_err() || left > 0 {
            tracing::warn!(
                posts = left,
                "rollups left unrefreshed at shutdown; their due records are taken over by another replica"
            );
        }
    }

    /// Finds recently changed posts whose rollups may be stale (a refresh
    /// lost with a killed process) and marks them. Returns whether it ran.
    pub async fn sweep(&self) -> bool {
        let Some(lookback) = self.config.sweep_lookback else {
            return true;
        };
        let since = SystemTime::now()
            .checked_sub(lookback)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.stats.rollup_rpcs.add(1);
        match self.store.changed_since(since).await {
            Ok(changed) => {
                let now = Instant::now();
                for post in &changed {
                    self.marks
                        .mark_post(&post.post_id, post.changed_at, post.shards, now);
                }
                self.stats.rollup_swept.add(changed.len() as u64);
                tracing::info!(
                    posts = changed.len(),
                    lookback_secs = lookback.as_secs(),
                    "rollup sweep: recently changed posts marked for a check"
                );
                true
            }
            Err(error) => {
                self.stats.rollup_failures.add(1);
                if self.stats.warnings.admit(SWEEP_FAILED, error.op) {
                    tracing::warn!(%error, "rollup sweep failed; trying again after a pause");
                }
                false
            }
        }
    }

    /// Refreshes the due posts (all marked posts with `all`, the last
    /// refresh at shutdown, which also writes rollups younger than the
    /// interval).
    pub async fn cycle(&self, all: bool) -> CycleReport {
        let due = self.take_due(all);
        let mut report = CycleReport::default();
        for chunk in due.chunks(self.config.posts_per_read.max(1)) {
            self.refresh(chunk, !all, &mut report).await;
        }
        self.stats.rollup_pending.set(self.marks.len() as u64);
        report
    }

    /// The marks due now (all of them with `all`), with the posts whose
    /// commits asked for more counter shards marked first.
    pub fn take_due(&self, all: bool) -> Vec<Due> {
        let now = Instant::now();
        if let Some(registry) = &self.registry {
            for (post, shards) in registry.take_wanted() {
                self.marks.want_shards(&post, shards, now);
            }
        }
        self.marks.take_due(now, all, usize::MAX)
    }

    /// One read of `due`, then the writes it calls for.
    async fn refresh(&self, due: &[Due], rate_limited: bool, report: &mut CycleReport) {
        let peeked;
        let due = if rate_limited && self.store.numbers_shards() {
            peeked = self.peek(due, report).await;
            if peeked.is_empty() {
                return;
            }
            peeked.as_slice()
        } else {
            due
        };
        let keys: Vec<RollupKey<'_>> = due
            .iter()
            .map(|d| RollupKey {
                post_id: &d.post_id,
                shards: d.shards,
            })
            .collect();
        report.posts += due.len();
        report.rpcs += 1;
        self.stats.rollup_rpcs.add(1);
        // Whether the store answers the refresher (`/readyz`).
        let progress = &self.stats.rollup_progress;
        progress.begin();
        let read = self.store.read_rollups(&keys).await;
        answered(progress, &read);
        if let Ok(snapshot) = &read {
            let offset = snapshot.read_time - micros_of(SystemTime::now());
            if snapshot.read_time > 0 {
                self.store_offset
                    .store(offset, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let Some(planned) = self.after_read(due, read, rate_limited) else {
            progress.end();
            return;
        };
        for chunk in planned.chunks(self.config.writes_per_call.max(1)) {
            let writes: Vec<RollupWrite<'_>> = chunk.iter().map(PlannedWrite::write).collect();
            report.rpcs += 1;
            self.stats.rollup_rpcs.add(1);
            let outcomes = self.store.write_rollups(&writes).await;
            written(progress, &outcomes);
            report.written += self.after_write(chunk, outcomes);
        }
        progress.end();
    }

    /// Reads the rollups (not the counter shards) of the posts of `due`
    /// over more than [`PEEK_ABOVE`] shards, and settles those a rollup
    /// already shows (another replica refreshed them since their change)
    /// or that another replica refreshed within the interval (deferred);
    /// returns what still needs the full read. So replicas sharing a hot
    /// post read its shards about once per interval fleet-wide, not once
    /// each. A failed peek leaves everything to the full read.
    async fn peek(&self, due: &[Due], report: &mut CycleReport) -> Vec<Due> {
        let wide: Vec<&Due> = due.iter().filter(|d| d.shards > PEEK_ABOVE).collect();
        if wide.is_empty() {
            return due.to_vec();
        }
        let keys: Vec<RollupKey<'_>> = wide
            .iter()
            .map(|d| RollupKey {
                post_id: &d.post_id,
                shards: 0,
            })
            .collect();
        report.rpcs += 1;
        self.stats.rollup_rpcs.add(1);
        let snapshot = match self.store.read_rollups(&keys).await {
            Ok(snapshot) if snapshot.posts.len() == wide.len() => snapshot,
            _ => return due.to_vec(),
        };
        // The peek's answer is the decision a full read would reach on
        // the rollup alone: covered, or deferred to a younger rollup; any
        // other answer needs the shards.
        let now = Instant::now();
        let mut peeked = wide.iter().zip(&snapshot.posts);
        let mut full = Vec::with_capacity(due.len());
        for d in due {
            if d.shards <= PEEK_ABOVE {
                full.push(d.clone());
                continue;
            }
            let Some((_, read)) = peeked.next() else {
                full.push(d.clone());
                continue;
            };
            let interval = self.config.interval;
            let settled = match decide(d, read, snapshot.read_time, interval, true) {
                Decision::Covered => Settled::Done,
                Decision::Defer { after } => {
                    self.stats.rollup_deferred.add(1);
                    Settled::Later {
                        after: after + self.jitter(),
                    }
                }
                _ => {
                    full.push(d.clone());
                    continue;
                }
            };
            self.settle(d, Some(snapshot.read_time), settled, now);
        }
        full
    }

    /// A random extra wait of up to a quarter interval, so replicas that
    /// deferred to one hot post's rollup (after a peek) do not all come
    /// back at once.
    fn jitter(&self) -> Duration {
        self.config
            .interval
            .mul_f64(rand::random_range(0.0..JITTER_SHARE))
    }

    /// Settles every post of `due` whose read calls for no write (or whose
    /// read failed) and returns the writes the others call for; `None` when
    /// the read failed.
    pub fn after_read(
        &self,
        due: &[Due],
        read: Result<RollupSnapshot, StoreError>,
        rate_limited: bool,
    ) -> Option<Vec<PlannedWrite>> {
        let snapshot = match read {
            Ok(snapshot) if snapshot.posts.len() == due.len() => snapshot,
            Ok(_) => {
                self.failed(due.iter(), None, &internal("not one result per post read"));
                return None;
            }
            Err(error) => {
                self.failed(due.iter(), None, &error);
                return None;
            }
        };
        let now = Instant::now();
        let read_time = snapshot.read_time;
        let thresholds = self.config.milestones.current();
        let mut writes = Vec::new();
        for (due, read) in due.iter().zip(snapshot.posts) {
            if self.existing_only && read.stored.is_none() {
                self.settle(due, Some(read_time), Settled::Done, now);
                continue;
            }
            // A post without a rollup may have counter shards no rollup
            // registered (written by a build before rollups, while the
            // data format is below 2): its first refresh reads every shard
            // a post may have.
            let unregistered = !self.config.shards_registered
                && read.stored.is_none()
                && self.store.numbers_shards()
                && due.shards < self.config.max_shards;
            if unregistered {
                let shards = self.config.max_shards;
                self.settle(due, Some(read_time), Settled::Unregistered { shards }, now);
                continue;
            }
            let registered = read.stored.as_ref().and_then(|s| s.shards);
            if let (Some(registry), Some(shards)) = (&self.registry, registered) {
                registry.confirm(&due.post_id, shards);
            }
            let decision = decide(due, &read, read_time, self.config.interval, rate_limited);
            let settled = match decision {
                Decision::Covered => Settled::Done,
                Decision::Incomplete { shards } => Settled::Again { shards },
                Decision::Defer { after } => {
                    self.stats.rollup_deferred.add(1);
                    Settled::Later { after }
                }
                Decision::Write { likes, shards } => {
                    let stored = read.stored.as_ref();
                    let milestones = crossed(
                        &thresholds,
                        stored.map_or(0, |s| s.likes),
                        stored.and_then(|s| s.milestone),
                        likes,
                    );
                    writes.push(PlannedWrite {
                        milestones,
                        due: due.clone(),
                        likes,
                        as_of: read_time,
                        shards,
                        previous: read.stored,
                    });
                    continue;
                }
            };
            self.settle(due, Some(read_time), settled, now);
        }
        Some(writes)
    }

    /// Settles the posts of `planned` by how their writes ended; returns
    /// how many were written.
    pub fn after_write(
        &self,
        planned: &[PlannedWrite],
        outcomes: Result<Vec<WriteOutcome>, StoreError>,
    ) -> usize {
        let dues = planned.iter().map(|p| &p.due);
        let read_time = planned.first().map(|p| p.as_of);
        let outcomes = match outcomes {
            Ok(outcomes) if outcomes.len() == planned.len() => outcomes,
            Ok(_) => {
                self.failed(dues, read_time, &internal("not one outcome per write"));
                return 0;
            }
            Err(error) => {
                self.failed(dues, read_time, &error);
                return 0;
            }
        };
        let now = Instant::now();
        let mut written = 0;
        for (planned, outcome) in planned.iter().zip(outcomes) {
            let settled = match outcome {
                WriteOutcome::Written => {
                    written += 1;
                    let recorded = planned.milestones.len() as u64;
                    self.stats.milestones_recorded.add(recorded);
                    self.stats.rollup_refreshes.add(1);
                    if let Some(registry) = &self.registry {
                        registry.confirm(&planned.due.post_id, planned.shards);
                    }
                    Settled::Done
                }
                WriteOutcome::Lost => {
                    self.stats.rollup_skipped.add(1);
                    Settled::Again { shards: 0 }
                }
                WriteOutcome::Failed(error) => {
                    self.warn_failed(1, &error);
                    Settled::Failed
                }
            };
            self.settle(&planned.due, Some(planned.as_of), settled, now);
        }
        written
    }

    fn settle(&self, due: &Due, read_time: Option<Micros>, settled: Settled, now: Instant) {
        if let Some(waited) = self.marks.settle(due, read_time, settled, now) {
            self.stats.rollup_lag.record(waited);
        }
    }

    /// A call for `due` failed: each is tried again after a backoff.
    fn failed<'a>(
        &self,
        due: impl ExactSizeIterator<Item = &'a Due>,
        read_time: Option<Micros>,
        error: &StoreError,
    ) {
        self.warn_failed(due.len(), error);
        let now = Instant::now();
        for d in due {
            self.settle(d, read_time, Settled::Failed, now);
        }
    }

    fn warn_failed(&self, posts: usize, error: &StoreError) {
        self.stats.rollup_failures.add(posts as u64);
        if self.stats.warnings.admit(REFRESH_FAILED, error.op) {
            tracing::warn!(%error, posts, "rollup refresh failed; the posts stay marked and are tried again");
        }
    }
}

#[cfg(test)]
mod tests;
