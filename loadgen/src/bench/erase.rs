//! The erasure rate: one heavy user's likes committed by the pipeline's
//! commit path, then removed by `users erase`, both timed in one run on
//! one store, so the two rates compare (likes erased per second beside
//! likes counted per second).
//!
//! Invariant: both phases write the same likes to the same store through
//! the service's own code (the flusher over an aggregator, with the
//! service's default batch and commit settings; `ops::users::erase`, with
//! a tombstone); a run is reported only if the counts are exact after each
//! phase (every like counted, then every like gone and no membership of
//! the user left). Pub/Sub is not in either phase: the pipeline's rate is
//! its commit path's, from a full aggregator to committed batches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::event::{LikeEvent, LikeKind, Version};
use hotcount::model::item::Item;
use hotcount::ops::users::{self, EraseError, EraseSettings, TombstoneSettings, ERASE_CHUNK};
use hotcount::pipeline::acker::{AckHandle, Acker, Confirmation};
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use hotcount::pipeline::flusher::{FlushConfig, Flusher, Tombstones};
use hotcount::store::selected::{SelectedDb, SelectedStore};
use hotcount::store::StoreError;
use hotcount::telemetry::Stats;
use tokio::sync::watch;

/// The heavy user's id.
pub const HEAVY_USER: &str = "heavy-user";

/// What one erasure-rate run measures.
#[derive(Clone, Debug)]
pub struct EraseRateSpec {
    /// The heavy user's likes, one per post.
    pub likes: u32,
    /// The service's aggregator shards (`--shards`).
    pub shards: usize,
    /// The service's largest batch (`--max-batch-events`).
    pub max_batch_events: usize,
    /// Counter shards per post (`--counter-shards`).
    pub counter_shards: u32,
}

/// The two rates of one run.
#[derive(Clone, Debug)]
pub struct EraseRate {
    /// Likes committed.
    pub likes: u64,
    /// How long the pipeline took to commit them.
    pub counted: Duration,
    /// Store commits the pipeline made.
    pub batches: u64,
    /// How long `users erase` took (no settle wait: it is a fixed sleep).
    pub erased: Duration,
    /// The erasure's transactions (likes removed; memberships deleted and
    /// rollups refreshed besides, inside `erased`).
    pub erase_commits: u64,
}

impl EraseRate {
    /// Likes counted per second by the pipeline.
    pub fn counted_per_sec(&self) -> f64 {
        self.likes as f64 / self.counted.as_secs_f64().max(1e-9)
    }

    /// Likes erased per second by `users erase`.
    pub fn erased_per_sec(&self) -> f64 {
        self.likes as f64 / self.erased.as_secs_f64().max(1e-9)
    }
}

/// Why an erasure-rate run failed.
#[derive(Debug, thiserror::Error)]
pub enum EraseRateError {
    /// The store failed a read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `users erase` failed.
    #[error("users erase: {0}")]
    Erase(#[from] EraseError),
    /// A count or a total was not what the phase must leave.
    #[error("not exact: {0}")]
    Wrong(String),
}

impl EraseRateError {
    /// Whether running again may succeed: a store's or an erasure's
    /// transient failure; never a wrong count.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Erase(e) => e.is_retryable(),
            Self::Wrong(_) => false,
        }
    }
}

/// A message nobody waits for: the run checks the store, not the acks.
#[derive(Debug)]
struct Unwatched;

impl AckHandle for Unwatched {
    fn ack(self) -> Option<Confirmation> {
        None
    }
    fn nack(self) {}
}

/// Commits [`HEAVY_USER`]'s `spec.likes` likes (post `p{i}` each) through
/// the flusher, then erases the user, timing each; checks both ends.
pub async fn run(db: SelectedDb, spec: &EraseRateSpec) -> Result<EraseRate, EraseRateError> {
    let key = b"erase-rate-key".to_vec();
    let store = users::erase_store(
        db.clone(),
        "erase-rate",
        spec.counter_shards,
        Duration::from_secs(3600),
    );
    let mut events = Vec::with_capacity(spec.likes as usize);
    for i in 0..spec.likes {
        events.push(like(&format!("p{i}"), HEAVY_USER, &format!("like-{i}"))?);
    }
    let (counted, stats) = commit_through_pipeline(&store, events, spec, Some(&key)).await;
    let applied = stats.applied.get();
    if applied != u64::from(spec.likes) {
        return Err(EraseRateError::Wrong(format!(
            "the pipeline applied {applied} of {} likes",
            spec.likes
        )));
    }
    check_counts(&db, spec.likes, 1).await?;

    let settings = EraseSettings {
        dry_run: false,
        chunk: ERASE_CHUNK,
        counter_shards: spec.counter_shards,
        tombstone: Some(TombstoneSettings {
            key,
            settle: Duration::ZERO,
        }),
    };
    let started = Instant::now();
    let erased = users::erase(&store, HEAVY_USER, &settings, |_, _| {}).await?;
    let erased_in = started.elapsed();
    if erased.likes != u64::from(spec.likes) || erased.deleted != u64::from(spec.likes) {
        return Err(EraseRateError::Wrong(format!(
            "users erase removed {} likes and deleted {} memberships of {}",
            erased.likes, erased.deleted, spec.likes
        )));
    }
    check_counts(&db, spec.likes, 0).await?;
    Ok(EraseRate {
        likes: u64::from(spec.likes),
        counted,
        batches: stats.batches.get(),
        erased: erased_in,
        erase_commits: erased.commits,
    })
}

/// A like of `post` by `user`, event `id`.
fn like(post: &str, user: &str, id: &str) -> Result<LikeEvent, EraseRateError> {
    let version = Version {
        seq: 1,
        occurred_at_micros: 1_000_000,
        event_id: id.to_string(),
    };
    LikeEvent::new(LikeKind::Added, post, user, &version, None)
        .map_err(|e| EraseRateError::Wrong(format!("a generated event: {e}")))
}

/// Commits `events` through the flusher as the service does (its batch
/// and commit settings; tombstones checked when `key` is given, none
/// erased), from a full aggregator; how long it took, and its stats.
async fn commit_through_pipeline(
    store: &SelectedStore,
    events: Vec<LikeEvent>,
    spec: &EraseRateSpec,
    key: Option<&[u8]>,
) -> (Duration, Arc<Stats>) {
    let aggregator = Arc::new(Aggregator::new(spec.shards, spec.max_batch_events));
    for event in events {
        aggregator.add(Pending {
            handle: Unwatched,
            item: Item::Event(event),
            bytes: 100,
            published: None,
        });
    }
    let stats = Arc::new(Stats::default());
    let config = FlushConfig {
        // Stopped from the start: the flusher drains every shard in full
        // batches, as under a backlog, and must not be cut short.
        shutdown_deadline: Duration::from_secs(3600),
        ..FlushConfig::default()
    };
    let mut flusher = Flusher::new(
        aggregator,
        Arc::new(store.clone()),
        Arc::new(Acker::new(stats.clone())),
        stats.clone(),
        config,
    );
    if let Some(key) = key {
        flusher = flusher.with_tombstones(Arc::new(Tombstones::new(key)));
    }
    let (_stop_tx, stop) = watch::channel(true);
    let started = Instant::now();
    flusher.run(stop).await;
    (started.elapsed(), stats)
}

/// One pipeline pass of the tombstone check's cost: with the check on or off.
#[derive(Clone, Debug)]
pub struct CheckPass {
    /// Whether batches were checked against the tombstones (none erased).
    pub checked: bool,
    /// Likes committed.
    pub likes: u64,
    /// Wall time.
    pub wall: Duration,
    /// This process's CPU time over the pass (`/proc/self`; with the
    /// in-process Firestore emulator, its CPU too).
    pub cpu: Option<Duration>,
}

impl CheckPass {
    /// CPU milliseconds per 1,000 likes.
    pub fn cpu_ms_per_1000(&self) -> Option<f64> {
        let cpu = self.cpu?;
        Some(cpu.as_secs_f64() * 1000.0 * 1000.0 / self.likes.max(1) as f64)
    }
}

/// `rounds` pairs of pipeline passes over `spec.likes` likes of distinct
/// users on 1,000 posts, the tombstone check on and off alternated (on
/// first in odd rounds), no user erased; each pass writes new memberships.
pub async fn check_cost(
    db: SelectedDb,
    spec: &EraseRateSpec,
    rounds: u32,
) -> Result<Vec<CheckPass>, EraseRateError> {
    let store = users::erase_store(
        db,
        "check-cost",
        spec.counter_shards,
        Duration::from_secs(3600),
    );
    let key = b"check-cost-key".to_vec();
    let mut passes = Vec::new();
    for round in 0..rounds {
        for checked in [round % 2 == 0, round % 2 == 1] {
            let mut events = Vec::with_capacity(spec.likes as usize);
            for i in 0..spec.likes {
                let user = format!("r{round}-{checked}-u{i}");
                events.push(like(&format!("p{}", i % 1000), &user, &user)?);
            }
            let before = crate::procfs::cpu_time(crate::procfs::Proc::This);
            let key = checked.then_some(key.as_slice());
            let (wall, stats) = commit_through_pipeline(&store, events, spec, key).await;
            let after = crate::procfs::cpu_time(crate::procfs::Proc::This);
            if stats.applied.get() != u64::from(spec.likes) {
                return Err(EraseRateError::Wrong(format!(
                    "a pass applied {} of {} likes",
                    stats.applied.get(),
                    spec.likes
                )));
            }
            passes.push(CheckPass {
                checked,
                likes: u64::from(spec.likes),
                wall,
                cpu: after.zip(before).map(|(a, b)| a.saturating_sub(b)),
            });
        }
    }
    Ok(passes)
}

/// Every post `p0..p{likes}` counts `want`, checked on a sample of posts
/// spread over the range (a count per post is one query each).
async fn check_counts(db: &SelectedDb, likes: u32, want: i64) -> Result<(), EraseRateError> {
    let step = (likes / 50).max(1);
    for i in (0..likes).step_by(step as usize) {
        let post = format!("p{i}");
        let count = db.count(&post).await?;
        if count != want {
            return Err(EraseRateError::Wrong(format!(
                "{post} counts {count}, not {want}"
            )));
        }
    }
    Ok(())
}
