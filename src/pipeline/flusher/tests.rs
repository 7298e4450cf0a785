//! The flusher against the in-memory store: acks only after commit,
//! retries, isolation, group commit timing, and disjoint batches in flight.

use super::*;
use crate::event::{LikeEvent, LikeKind, Version};
use crate::model::item::Item;
use crate::model::poison::PoisonRecord;
use crate::pipeline::acker::Confirmation;
use crate::pipeline::aggregator::{FreeView, Pending};
use crate::store::memory::{InjectedFailure, MemoryStore};
use crate::store::{ErrorClass, StoreError};
use parking_lot::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Acked,
    Nacked,
}

#[derive(Debug)]
struct TestHandle(u32, Arc<Mutex<Vec<(u32, Fate)>>>);

impl AckHandle for TestHandle {
    fn ack(self) -> Option<Confirmation> {
        self.1.lock().push((self.0, Fate::Acked));
        None
    }
    fn nack(self) {
        self.1.lock().push((self.0, Fate::Nacked));
    }
}

struct Rig {
    agg: Arc<Aggregator<TestHandle>>,
    store: Arc<MemoryStore>,
    flusher: Flusher<MemoryStore, TestHandle>,
    fates: Arc<Mutex<Vec<(u32, Fate)>>>,
    next: u32,
}

impl Rig {
    fn new() -> Self {
        Self::with(1, 100, FlushConfig::default())
    }

    fn with(shards: usize, max_batch_events: usize, config: FlushConfig) -> Self {
        let config = FlushConfig {
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(2),
            commit_max_attempts: 3,
            ..config
        };
        Self::exact(shards, max_batch_events, config)
    }

    /// A rig with `config` as given (retries and backoff included).
    fn exact(shards: usize, max_batch_events: usize, config: FlushConfig) -> Self {
        let agg = Arc::new(Aggregator::new(shards, max_batch_events));
        let store = Arc::new(MemoryStore::default());
        let stats = Arc::new(Stats::default());
        let flusher = Flusher::new(
            agg.clone(),
            store.clone(),
            Arc::new(Acker::new(stats.clone())),
            stats,
            config,
        );
        Self {
            agg,
            store,
            flusher,
            fates: Default::default(),
            next: 0,
        }
    }

    fn like(&mut self, post: &str, user: &str, seq: i64) -> u32 {
        let event = LikeEvent::new(
            LikeKind::Added,
            post,
            user,
            &Version {
                seq,
                occurred_at_micros: 0,
                event_id: format!("{user}-{seq}"),
            },
            None,
        )
        .expect("valid test event");
        self.next += 1;
        let handle = TestHandle(self.next, self.fates.clone());
        self.agg.add(Pending {
            handle,
            item: Item::Event(event),
            bytes: 10,
            published: None,
        });
        self.next
    }

    /// Buffers a poison message with id `m{n}`; returns its handle id.
    fn poison(&mut self) -> u32 {
        self.next += 1;
        let record = PoisonRecord::new(
            format!("m{}", self.next),
            "bad".into(),
            b"x",
            Default::default(),
        );
        let handle = TestHandle(self.next, self.fates.clone());
        self.agg.add(Pending {
            handle,
            item: Item::Poison(Box::new(record)),
            bytes: 1,
            published: None,
        });
        self.next
    }

    fn fate(&self, handle: u32) -> Vec<Fate> {
        let fates = self.fates.lock();
        fates
            .iter()
            .filter(|(h, _)| *h == handle)
            .map(|(_, f)| *f)
            .collect()
    }
}

#[tokio::test]
async fn acks_only_after_commit() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    rig.like("p", "u2", 1);
    assert!(rig.fates.lock().is_empty(), "nothing acked before a flush");
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.commits(), 1);
    assert_eq!(rig.fates.lock().len(), 2);
    assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
    assert_eq!(rig.store.count("p").await.unwrap(), 2);
}

#[tokio::test]
async fn transient_failures_are_retried_then_acked() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    rig.store
        .inject(InjectedFailure::Before(ErrorClass::Transient));
    rig.store.inject(InjectedFailure::AfterApply);
    rig.flusher.flush(0).await;
    assert_eq!(
        rig.store.count("p").await.unwrap(),
        1,
        "applied once despite the unknown outcome"
    );
    assert_eq!(rig.fates.lock().as_slice(), &[(1, Fate::Acked)]);
}

#[tokio::test]
async fn a_batch_whose_commit_finds_the_tombstones_changed_is_checked_again_and_drops_the_erased_users_events(
) {
    let mut rig = Rig::new();
    let tombstones = Arc::new(Tombstones::new(b"k"));
    rig.flusher = rig.flusher.clone().with_tombstones(tombstones.clone());
    let alice = rig.like("p", "alice", 1);
    let bob = rig.like("p", "bob", 1);
    // Erased after the replica last read its tombstones (generation 0).
    rig.store
        .write_tombstone(&crate::event::user_hash(b"k", "alice"));
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.count("p").await.unwrap(), 1, "bob's like only");
    assert_eq!(rig.fate(alice), [Fate::Acked], "dropped on purpose");
    assert_eq!(rig.fate(bob), [Fate::Acked]);
    assert_eq!(rig.flusher.stats.erased_dropped.get(), 1);
    assert_eq!(tombstones.snapshot().generation, 1, "the set held is fresh");

    // Only alice's events: nothing is left to commit, and nothing waits.
    let commits = rig.store.commits();
    rig.store
        .write_tombstone(&crate::event::user_hash(b"k", "carol"));
    let again = rig.like("q", "alice", 2);
    rig.flusher.flush(0).await;
    assert_eq!(rig.fate(again), [Fate::Acked]);
    assert_eq!(rig.store.count("q").await.unwrap(), 0);
    assert_eq!(rig.store.commits(), commits, "dropped before any commit");
}

#[tokio::test]
async fn giving_up_nacks_and_counts_nothing() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    for _ in 0..3 {
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
    }
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.count("p").await.unwrap(), 0);
    assert_eq!(rig.fates.lock().as_slice(), &[(1, Fate::Nacked)]);
}

#[tokio::test]
async fn a_contended_batch_that_cannot_be_split_is_nacked_not_dropped() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    let taken = rig.agg.take(0);
    let batch = Batch::of_messages(taken.events, taken.poison);
    assert!(!batch.can_split(), "one event: nothing to split");
    let error = StoreError {
        op: "Commit",
        code: crate::store::Code::Aborted,
        message: "contention".into(),
        class: ErrorClass::Transient,
        transaction: None,
    };
    let (mut work, mut settled) = (Vec::new(), isolate::Settlement::default());
    rig.flusher
        .split_contended(batch, error, &mut work, &mut settled);
    assert!(work.is_empty(), "nothing left to commit");
    assert_eq!(settled.nack, vec![0], "its message is nacked, never acked");
    assert!(settled.gave_up.is_some_and(|e| e.is_contention()));
}

#[tokio::test]
async fn permanent_error_is_isolated_and_the_rest_commits() {
    let mut rig = Rig::new();
    for i in 0..7 {
        rig.like("p", &format!("u{i}"), 1);
    }
    rig.like("p", "bad", 1);
    rig.store.inject(InjectedFailure::RejectUser("bad".into()));
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.count("p").await.unwrap(), 7);
    let quarantine = rig.store.quarantine();
    assert_eq!(quarantine.len(), 1);
    assert!(quarantine[0].reason.contains("rejected by the store"));
    assert_eq!(rig.fates.lock().len(), 8);
    assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
}

#[tokio::test]
async fn a_refused_quarantine_record_nacks_its_message_alone_and_every_valid_event_counts() {
    let mut rig = Rig::new();
    let mut valid = Vec::new();
    for i in 0..20 {
        valid.push(rig.like("p", &format!("u{i}"), 1));
    }
    let bad = [rig.poison(), rig.poison()];
    let good = rig.poison();
    for handle in bad {
        rig.store
            .inject(InjectedFailure::RejectRecord(format!("m{handle}")));
    }
    rig.flusher.flush(0).await;
    assert_eq!(
        rig.store.count("p").await.unwrap(),
        20,
        "no valid like lost"
    );
    for handle in valid.into_iter().chain([good]) {
        assert_eq!(rig.fate(handle), [Fate::Acked], "handle {handle}");
    }
    for handle in bad {
        assert_eq!(rig.fate(handle), [Fate::Nacked], "handle {handle}");
    }
    let quarantine = rig.store.quarantine();
    assert_eq!(quarantine.len(), 1, "{quarantine:?}");
    assert_eq!(quarantine[0].message_id, format!("m{good}"));
    assert_eq!(rig.flusher.stats.quarantine_refused.get(), 2);
    assert_eq!(rig.flusher.stats.isolated.get(), 0);
}

#[tokio::test]
async fn a_refused_event_whose_record_is_refused_too_is_nacked_alone() {
    let mut rig = Rig::new();
    let good = rig.like("p", "u1", 1);
    let bad = rig.like("p", "bad", 1);
    rig.store.inject(InjectedFailure::RejectUser("bad".into()));
    rig.store
        .inject(InjectedFailure::RejectRecord("event-bad-1".into()));
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.count("p").await.unwrap(), 1);
    assert_eq!(rig.fate(good), [Fate::Acked]);
    assert_eq!(rig.fate(bad), [Fate::Nacked]);
    assert!(rig.store.quarantine().is_empty());
}

#[tokio::test]
async fn a_failure_that_proves_nothing_nacks_and_never_quarantines() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    rig.poison();
    for _ in 0..3 {
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
    }
    rig.flusher.flush(0).await;
    assert!(rig.store.quarantine().is_empty());
    assert_eq!(rig.flusher.stats.isolated.get(), 0);
    assert_eq!(rig.fate(1), [Fate::Nacked]);
    assert_eq!(rig.fate(2), [Fate::Nacked]);
}

#[tokio::test(start_paused = true)]
async fn a_lone_event_flushes_after_the_min_wait_and_the_rest_drains_at_stop() {
    let mut rig = Rig::new();
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    rig.like("p", "u1", 1);
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert!(rig.fates.lock().is_empty(), "not due yet");
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert_eq!(rig.fates.lock().len(), 1, "flushed after the min wait");
    rig.like("p", "u2", 1);
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(rig.fates.lock().len(), 2, "drained at shutdown");
    assert_eq!(rig.store.count("p").await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_retry_backoff_ends_when_the_shutdown_deadline_falls_within_it() {
    let config = FlushConfig {
        backoff_initial: Duration::from_secs(50),
        backoff_max: Duration::from_secs(60),
        commit_max_attempts: 8,
        shutdown_deadline: Duration::from_secs(1),
        ..FlushConfig::default()
    };
    let mut rig = Rig::exact(1, 100, config);
    for _ in 0..8 {
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
    }
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    rig.like("p", "u1", 1);
    // The first attempt failed; the retry waits 25-50 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rig.fates.lock().is_empty(), "still backing off");
    let stopped = Instant::now();
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let took = stopped.elapsed();
    assert!(took <= Duration::from_secs(1), "the drain took {took:?}");
    assert_eq!(rig.fate(1), vec![Fate::Nacked]);
    assert_eq!(rig.store.count("p").await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn commits_that_keep_failing_mark_the_replica_stalled_in_its_progress() {
    let mut rig = Rig::exact(
        1,
        100,
        FlushConfig {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(1),
            commit_max_attempts: 100,
            ..FlushConfig::default()
        },
    );
    for _ in 0..20 {
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
    }
    let stats = rig.flusher.stats.clone();
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    rig.like("p", "u1", 1);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let threshold = Duration::from_secs(4);
    let stall = stats.commit_progress.check(threshold).expect("stalled");
    assert_eq!(stall.in_flight, 1);
    assert!(stall.last_error.is_some());
    // The store answers again: the commit goes through, no stall left.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(rig.fate(1), vec![Fate::Acked]);
    assert_eq!(stats.commit_progress.check(threshold), None);
    stop_tx.send(true).unwrap();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_min_wait_equal_to_the_interval_a_shard_flushes_at_the_interval() {
    let mut rig = Rig::with(
        1,
        1000,
        FlushConfig {
            flush_min_wait: Duration::from_millis(100),
            ..FlushConfig::default()
        },
    );
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    rig.like("p", "u1", 1);
    tokio::time::sleep(Duration::from_millis(95)).await;
    assert!(rig.fates.lock().is_empty(), "not due yet");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(rig.fates.lock().len(), 1, "flushed at the interval");
    stop_tx.send(true).unwrap();
    task.await.unwrap();
}

/// What free shards holding `messages` look like to an aggregator
/// whose batches hold at most 1000.
fn view(messages: usize, oldest: Instant) -> FreeView {
    FreeView {
        messages,
        oldest: Some(oldest),
        full: messages >= 1000,
        batch_events: 1000,
        shards: 16,
    }
}

#[tokio::test(start_paused = true)]
async fn idle_store_flushes_after_the_min_wait_busy_slots_need_their_share_of_a_batch() {
    let config = FlushConfig::default();
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    assert_eq!(
        decide(&config, view(3, t0), 0, false, t0),
        Decision::WaitUntil(Some(t0 + config.flush_min_wait))
    );
    assert_eq!(
        decide(&config, view(3, t0), 0, false, t0 + ms(5)),
        Decision::Flush
    );
    assert_eq!(
        decide(&config, view(3, t0), 1, false, t0 + ms(5)),
        Decision::WaitUntil(Some(t0 + config.flush_interval)),
        "a commit in flight: let the batch grow"
    );
    assert_eq!(
        decide(&config, view(3, t0), 1, false, t0 + ms(100)),
        Decision::Flush
    );
    // Adaptive size, 4 slots: (busy/4)² of a 1,000-event batch.
    for (busy, enough) in [(1, 63), (2, 250), (3, 563)] {
        assert_eq!(
            decide(&config, view(enough, t0), busy, false, t0),
            Decision::Flush,
            "{busy} busy, {enough} buffered"
        );
        assert_eq!(
            decide(&config, view(enough - 1, t0), busy, false, t0),
            Decision::WaitUntil(Some(t0 + config.flush_interval)),
            "{busy} busy, {} buffered",
            enough - 1
        );
    }
    assert_eq!(
        decide(&config, view(1000, t0), 1, false, t0),
        Decision::Flush,
        "a full batch goes at once"
    );
    assert_eq!(
        decide(&config, view(5000, t0), 4, false, t0 + ms(500)),
        Decision::WaitUntil(None),
        "no free commit slot"
    );
    assert_eq!(
        decide(&config, view(1, t0), 1, true, t0),
        Decision::Flush,
        "stopping flushes whatever is buffered"
    );
    assert_eq!(
        decide(&config, FreeView::default(), 0, true, t0),
        Decision::WaitUntil(None)
    );
}

/// Feeds `posts` round robin, `per_milli` likes per millisecond, `total` in all.
async fn feed(rig: &mut Rig, posts: usize, per_milli: usize, total: usize) {
    for i in 0..total {
        rig.like(&format!("p{}", i % posts), &format!("u{i}"), 1);
        if (i + 1) % per_milli == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn batches_grow_while_commits_are_in_flight() {
    let mut rig = Rig::with(
        8,
        1000,
        FlushConfig {
            max_commits_in_flight: 1,
            ..FlushConfig::default()
        },
    );
    rig.store.set_delay(Duration::from_millis(50));
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    feed(&mut rig, 20, 1, 1000).await;
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let commits = rig.store.commits();
    // One commit at a time of 50 ms: the first event waits 5 ms, then
    // each batch holds what arrived during the previous commit (~50).
    assert!(
        (15..=25).contains(&commits),
        "{commits} commits for 1000 events"
    );
    assert_eq!(rig.fates.lock().len(), 1000);
    assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
    let mut total = 0;
    for p in 0..20 {
        total += rig.store.count(&format!("p{p}")).await.unwrap();
    }
    assert_eq!(total, 1000);
}

#[tokio::test(start_paused = true)]
async fn a_membership_is_never_in_two_commits_at_once_but_a_post_is() {
    let mut rig = Rig::with(16, 40, FlushConfig::default());
    rig.store.set_delay(Duration::from_millis(30));
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    // 5 posts x 4 users: every membership comes back every ~7 ms,
    // while an earlier batch of it (30 ms) may be in flight (distinct
    // users alone could never overlap).
    for i in 0..3000usize {
        let (post, user) = (i % 5, (i / 5) % 4);
        rig.like(&format!("p{post}"), &format!("u{user}"), i as i64);
        if (i + 1) % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let seen = rig.store.concurrency();
    assert!(seen.max_commits_in_flight > 1, "{seen:?}");
    assert!(seen.max_commits_in_flight <= 4, "{seen:?}");
    assert_eq!(seen.membership_overlaps, 0, "{seen:?}");
    assert!(
        seen.post_overlaps > 0,
        "one post in several commits: {seen:?}"
    );
    assert_eq!(rig.fates.lock().len(), 3000);
}

/// A push window's worth (1,000 messages, one full batch) buffered at once
/// while nothing more can arrive until it commits: split over the four
/// commit slots, it commits in about one commit's time, not in one
/// transaction that leaves three slots idle.
#[tokio::test(start_paused = true)]
async fn a_buffer_smaller_than_the_free_slots_worth_commits_in_overlapping_batches() {
    let mut rig = Rig::with(16, 1000, FlushConfig::default());
    rig.store.set_delay(Duration::from_millis(50));
    for i in 0..1000usize {
        rig.like(&format!("p{}", i % 3), &format!("u{i}"), 1);
    }
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(rig.flusher.clone().run(stop));
    let started = Instant::now();
    while rig.fates.lock().len() < 1000 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = started.elapsed();
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let seen = rig.store.concurrency();
    assert_eq!(seen.max_commits_in_flight, 4, "{seen:?}");
    assert_eq!(rig.store.commits(), 4, "four batches of about 250");
    assert_eq!(seen.membership_overlaps, 0, "{seen:?}");
    assert!(
        took < Duration::from_millis(100),
        "one commit's time: {took:?}"
    );
    assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
    let mut total = 0;
    for p in 0..3 {
        total += rig.store.count(&format!("p{p}")).await.unwrap();
    }
    assert_eq!(total, 1000);
}

#[test]
fn a_flush_splits_over_the_free_slots_but_never_below_the_minimum_or_a_shard() {
    let config = FlushConfig::default();
    let t0 = Instant::now();
    // 1,000 buffered, 4 free slots: four batches of 250.
    assert_eq!(split(&config, view(1000, t0), 0), (4, 250));
    // One slot busy: three.
    assert_eq!(split(&config, view(1000, t0), 1), (3, 334));
    // Too few for two batches of the minimum: one batch, as before.
    assert_eq!(split(&config, view(300, t0), 0), (1, 300));
    assert_eq!(split(&config, view(3, t0), 0), (1, 3));
    // A backlog: every free slot gets a full batch.
    assert_eq!(split(&config, view(9000, t0), 0), (4, 1000));
    assert_eq!(split(&config, view(9000, t0), 4), (1, 1000));
    // Two shards hold everything: two batches at most.
    let two = FreeView {
        shards: 2,
        ..view(1000, t0)
    };
    assert_eq!(split(&config, two, 0), (2, 500));
}

#[test]
fn backoff_grows_and_is_capped() {
    let config = FlushConfig::default();
    assert!(backoff(&config, 1) <= config.backoff_initial);
    assert!(backoff(&config, 30) <= config.backoff_max);
    assert!(backoff(&config, 4) >= config.backoff_initial * 4);
}
