//! Property test of the rollup refreshers: three replicas commit to a few
//! posts (on the counter shards their registries allow, asking for more
//! when a post is hot) and refresh concurrently, their reads and writes
//! interleaved in any order, with writes that fail or are applied but
//! answered with an error, replicas killed (their marks lost) and
//! restarted (their sweep), and time passing. Against a model of the store
//! with Firestore's semantics (shards read by name, a write conditional on
//! the rollup's update time):
//! - every rollup written is the true total (every shard) at its `asOf`,
//!   and a rollup's `asOf` only grows, by at least the interval's slack
//!   between two writes while replicas run;
//! - once everything settles, every post's rollup equals its total and
//!   registers every counter shard that exists.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gcloud_sdk::prost_types::Timestamp;
use hotcount::pipeline::rollup::{PlannedWrite, Refresher, RollupConfig};
use hotcount::store::counter_shards::ShardRegistry;
use hotcount::store::rollup::{
    micros_of, ChangedPost, DueRecord, Micros, PostRead, RollupKey, RollupSnapshot, RollupStore,
    RollupWrite, StoredRollup, TakenRecord, WriteOutcome,
};
use hotcount::store::{ChangedCounter, Code, ErrorClass, StoreError};
use hotcount::telemetry::Stats;
use parking_lot::Mutex;
use proptest::prelude::*;

const INTERVAL: Duration = Duration::from_millis(1000);
const POSTS: u8 = 3;
const REPLICAS: usize = 3;
const MAX_SHARDS: u32 = 8;

/// The store, as Firestore behaves for the rollups.
#[derive(Default)]
struct Model {
    now: Micros,
    started: Option<tokio::time::Instant>,
    shards: BTreeMap<(String, u32), i64>,
    /// When each shard last changed.
    shard_changed: HashMap<(String, u32), Micros>,
    /// Per post, its total after each commit: (time, total).
    history: HashMap<String, Vec<(Micros, i64)>>,
    rollups: HashMap<String, StoredRollup>,
    /// The next write call's fault: 0 none, 1 fails before applying,
    /// 2 applied but answered with an error.
    fault: u8,
    /// Whether writes are rate-limited now (not at the final drain).
    rate_limited: bool,
    writes: u64,
}

#[derive(Clone, Default)]
struct Store(Arc<Mutex<Model>>);

impl Model {
    fn tick(&mut self) -> Micros {
        let started = *self.started.get_or_insert_with(tokio::time::Instant::now);
        let elapsed = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.now = (self.now + 1).max(elapsed);
        self.now
    }

    fn total(&self, post: &str) -> i64 {
        (self.shards.iter())
            .filter(|((p, _), _)| p == post)
            .map(|(_, n)| n)
            .sum()
    }

    fn total_at(&self, post: &str, at: Micros) -> i64 {
        let history = self.history.get(post).map(Vec::as_slice).unwrap_or(&[]);
        (history.iter().rev())
            .find(|(t, _)| *t <= at)
            .map_or(0, |(_, total)| *total)
    }

    fn commit(&mut self, post: &str, shard: u32, delta: i64) -> Micros {
        let at = self.tick();
        *self.shards.entry((post.to_string(), shard)).or_default() += delta;
        self.shard_changed.insert((post.to_string(), shard), at);
        let total = self.total(post);
        self.history
            .entry(post.to_string())
            .or_default()
            .push((at, total));
        at
    }

    fn highest_shard(&self, post: &str) -> u32 {
        (self.shards.keys())
            .filter(|(p, _)| p == post)
            .map(|(_, k)| k + 1)
            .max()
            .unwrap_or(0)
    }
}

fn unavailable() -> StoreError {
    StoreError {
        op: "BatchWrite",
        code: Code::Unavailable,
        message: "injected".into(),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

impl RollupStore for Store {
    async fn read_rollups(&self, keys: &[RollupKey<'_>]) -> Result<RollupSnapshot, StoreError> {
        let mut m = self.0.lock();
        let read_time = m.tick();
        let posts = keys
            .iter()
            .map(|k| PostRead {
                likes: (0..k.shards.max(1))
                    .map(|s| {
                        let key = (k.post_id.to_string(), s);
                        m.shards.get(&key).copied().unwrap_or(0)
                    })
                    .sum(),
                found_shards: (0..k.shards.max(1))
                    .filter(|s| m.shards.contains_key(&(k.post_id.to_string(), *s)))
                    .map(|s| s + 1)
                    .max()
                    .unwrap_or(0),
                stored: m.rollups.get(k.post_id).cloned(),
            })
            .collect();
        Ok(RollupSnapshot { read_time, posts })
    }

    async fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        let mut m = self.0.lock();
        let fault = std::mem::take(&mut m.fault);
        if fault == 1 {
            return Err(unavailable());
        }
        let version = m.tick();
        let mut outcomes = Vec::new();
        for w in writes {
            let stored = m.rollups.get(w.post_id);
            if stored.map(|s| s.update_time) != w.previous.map(|p| p.update_time) {
                outcomes.push(WriteOutcome::Lost);
                continue;
            }
            if let Some(stored) = stored {
                assert!(
                    w.as_of > stored.as_of,
                    "asOf went backwards on {}",
                    w.post_id
                );
                if m.rate_limited {
                    let gap = Duration::from_micros((w.as_of - stored.as_of) as u64);
                    assert!(
                        gap >= INTERVAL.mul_f64(0.9),
                        "{} written again {gap:?} after its last rollup",
                        w.post_id
                    );
                }
            }
            let truth = m.total_at(w.post_id, w.as_of);
            assert_eq!(
                w.likes, truth,
                "{} written with {} as of {}, when its total was {truth}",
                w.post_id, w.likes, w.as_of
            );
            let rollup = StoredRollup {
                likes: w.likes,
                as_of: w.as_of,
                shards: Some(w.shards),
                update_time: Some(Timestamp {
                    seconds: version,
                    nanos: 0,
                }),
                milestone: None,
            };
            m.rollups.insert(w.post_id.to_string(), rollup);
            m.writes += 1;
            outcomes.push(WriteOutcome::Written);
        }
        match fault {
            2 => Err(unavailable()),
            _ => Ok(outcomes),
        }
    }

    async fn changed_since(&self, since: SystemTime) -> Result<Vec<ChangedPost>, StoreError> {
        // The model's clock starts at 0: every change is recent.
        let _ = micros_of(since);
        let m = self.0.lock();
        let mut changed: BTreeMap<String, ChangedPost> = BTreeMap::new();
        for ((post, k), at) in &m.shard_changed {
            let entry = changed.entry(post.clone()).or_insert_with(|| ChangedPost {
                post_id: post.clone(),
                changed_at: Some(*at),
                shards: 0,
            });
            entry.changed_at = entry.changed_at.max(Some(*at));
            entry.shards = entry.shards.max(k + 1);
        }
        Ok(changed.into_values().collect())
    }

    /// The model keeps no due records (its replicas' marks are in memory).
    async fn take_over_due(
        &self,
        _older_than: Duration,
        _store_now: i64,
        _limit: usize,
    ) -> Result<Vec<TakenRecord>, StoreError> {
        Ok(Vec::new())
    }

    async fn clear_due(&self, _records: &[DueRecord]) -> Result<(), StoreError> {
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// A replica commits `delta` to a post, on the shard `pick` chooses
    /// among those its registry allows; `hot` asks for more shards.
    Commit {
        replica: usize,
        post: u8,
        delta: i64,
        pick: u32,
        hot: bool,
    },
    /// A replica reads its due posts (its write comes later).
    Read { replica: usize },
    /// A replica writes what its read called for; `fault` as [`Model::fault`].
    Write { replica: usize, fault: u8 },
    /// A replica runs a whole cycle.
    Cycle { replica: usize },
    /// A replica reads, commits to a post, then writes what it read.
    CommitDuringRefresh {
        replica: usize,
        post: u8,
        delta: i64,
    },
    /// A replica is killed (its marks and pending write lost) and restarted.
    Kill { replica: usize },
    /// Time passes.
    Advance { ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    let replica = 0..REPLICAS;
    prop_oneof![
        4 => (replica.clone(), 0..POSTS, -2i64..=3, any::<u32>(), prop::bool::weighted(0.2))
            .prop_map(|(replica, post, delta, pick, hot)| Step::Commit { replica, post, delta, pick, hot }),
        2 => replica.clone().prop_map(|replica| Step::Read { replica }),
        2 => (replica.clone(), prop::sample::select(vec![0u8, 0, 0, 1, 2]))
            .prop_map(|(replica, fault)| Step::Write { replica, fault }),
        2 => replica.clone().prop_map(|replica| Step::Cycle { replica }),
        1 => (replica.clone(), 0..POSTS, 1i64..=2)
            .prop_map(|(replica, post, delta)| Step::CommitDuringRefresh { replica, post, delta }),
        1 => replica.prop_map(|replica| Step::Kill { replica }),
        2 => (0u64..1500).prop_map(|ms| Step::Advance { ms }),
    ]
}

/// One replica: its refresher, its registry (what its commits may use),
/// the write its last read called for, and whether it must sweep.
struct Replica {
    refresher: Refresher<Store>,
    registry: Arc<ShardRegistry>,
    pending: Option<Vec<PlannedWrite>>,
    must_sweep: bool,
}

impl Replica {
    fn start(store: &Store, must_sweep: bool) -> Self {
        let registry = Arc::new(ShardRegistry::default());
        let refresher = Refresher::new(
            Arc::new(store.clone()),
            RollupConfig::new(INTERVAL, MAX_SHARDS),
            Arc::new(Stats::default()),
        )
        .with_registry(Some(registry.clone()));
        Self {
            refresher,
            registry,
            pending: None,
            must_sweep,
        }
    }

    /// Commits `delta` to post `post` on a shard its registry allows, as
    /// the flusher marks it.
    fn commit(&self, store: &Store, post: u8, delta: i64, pick: u32, hot: bool, times: bool) {
        let post = format!("p{post}");
        let allowed = self.registry.allowed(&post).min(MAX_SHARDS);
        let shard = pick % allowed;
        if hot {
            self.registry.want(&post, (allowed * 2).min(MAX_SHARDS));
        }
        let at = store.0.lock().commit(&post, shard, delta);
        let changed = [ChangedCounter {
            post_id: post,
            shard: Some(shard),
        }];
        let at = times.then_some(at);
        let marks = self.refresher.marks();
        marks.mark(&changed, at, None, tokio::time::Instant::now());
    }

    async fn read(&mut self, store: &Store) {
        let due = self.refresher.take_due(false);
        if due.is_empty() {
            return;
        }
        let keys: Vec<RollupKey<'_>> = due
            .iter()
            .map(|d| RollupKey {
                post_id: &d.post_id,
                shards: d.shards,
            })
            .collect();
        let read = store.read_rollups(&keys).await;
        self.pending = self.refresher.after_read(&due, read, true);
    }

    async fn write(&mut self, store: &Store) {
        let Some(planned) = self.pending.take() else {
            return;
        };
        let writes: Vec<RollupWrite<'_>> = planned.iter().map(PlannedWrite::write).collect();
        let outcomes = store.write_rollups(&writes).await;
        self.refresher.after_write(&planned, outcomes);
    }
}

async fn run(steps: Vec<Step>, commit_times_known: bool) {
    let store = Store::default();
    let mut replicas: Vec<Replica> = (0..REPLICAS)
        .map(|_| Replica::start(&store, false))
        .collect();
    store.0.lock().rate_limited = true;
    for step in steps {
        match step {
            Step::Commit {
                replica,
                post,
                delta,
                pick,
                hot,
            } => replicas[replica].commit(&store, post, delta, pick, hot, commit_times_known),
            Step::CommitDuringRefresh {
                replica,
                post,
                delta,
            } => {
                let r = &mut replicas[replica];
                r.read(&store).await;
                r.commit(&store, post, delta, 0, false, commit_times_known);
                r.write(&store).await;
            }
            Step::Read { replica } => replicas[replica].read(&store).await,
            Step::Write { replica, fault } => {
                store.0.lock().fault = fault;
                replicas[replica].write(&store).await;
                store.0.lock().fault = 0;
            }
            Step::Cycle { replica } => {
                replicas[replica].refresher.cycle(false).await;
            }
            Step::Kill { replica } => replicas[replica] = Replica::start(&store, true),
            Step::Advance { ms } => tokio::time::advance(Duration::from_millis(ms)).await,
        }
    }
    // At rest: pending writes land or are lost, restarted replicas sweep,
    // and every replica refreshes until nothing is marked.
    for r in &mut replicas {
        r.write(&store).await;
        if r.must_sweep {
            assert!(r.refresher.sweep().await);
        }
    }
    for _ in 0..20 {
        tokio::time::advance(INTERVAL).await;
        for r in &replicas {
            r.refresher.cycle(false).await;
        }
        if replicas.iter().all(|r| r.refresher.marks().is_empty()) {
            break;
        }
    }
    store.0.lock().rate_limited = false;
    for r in &replicas {
        r.refresher.drain().await;
        assert!(r.refresher.marks().is_empty(), "every mark settled");
    }
    let m = store.0.lock();
    for post in (0..POSTS).map(|p| format!("p{p}")) {
        if !m.history.contains_key(&post) {
            continue;
        }
        let rollup = m
            .rollups
            .get(&post)
            .expect("a rollup for each post changed");
        assert_eq!(rollup.likes, m.total(&post), "{post} at rest");
        assert!(
            rollup.shards.unwrap_or(0) >= m.highest_shard(&post),
            "{post}'s rollup registers every shard"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn concurrent_refreshers_show_only_true_totals_and_end_exact(
        steps in prop::collection::vec(step(), 1..120),
        commit_times_known in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        runtime.block_on(run(steps, commit_times_known));
    }
}
