//! What a commit's outcome does to its messages: acked only after the
//! commit, retried when transient, nacked when given up (or when the
//! shutdown deadline falls within a backoff), and a replica whose commits
//! keep failing seen as stalled.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::super::{backoff, FlushConfig, Tombstones};
use super::{Fate, Rig};
use crate::store::memory::InjectedFailure;
use crate::store::{CounterStore, ErrorClass};

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
    let running = rig.start();
    rig.like("p", "u1", 1);
    // The first attempt failed; the retry waits 25-50 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rig.fates.lock().is_empty(), "still backing off");
    let stopped = Instant::now();
    running.stop().await;
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
    let running = rig.start();
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
    running.stop().await;
}

#[test]
fn backoff_grows_and_is_capped() {
    let config = FlushConfig::default();
    assert!(backoff(&config, 1) <= config.backoff_initial);
    assert!(backoff(&config, 30) <= config.backoff_max);
    assert!(backoff(&config, 4) >= config.backoff_initial * 4);
}
