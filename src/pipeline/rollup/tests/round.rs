//! What a cycle writes and when it defers, alone and beside other
//! replicas, and what a lost race, a lost answer and a failing store leave.

use std::sync::Arc;
use std::time::Duration;

use super::super::CycleReport;
use super::{commit, count, plan, refresher, write, INTERVAL};
use crate::store::memory::{MemoryStore, RollupFailure};
use crate::store::rollup::WriteOutcome;

#[tokio::test(start_paused = true)]
async fn a_changed_post_gets_its_rollup_at_the_next_cycle() {
    let store = Arc::new(MemoryStore::default());
    let r = refresher(&store);
    commit(&store, &[r.marks()], "p", 3, "a").await;
    commit(&store, &[r.marks()], "q", 1, "b").await;
    let report = r.cycle(false).await;
    assert_eq!(
        report,
        CycleReport {
            posts: 2,
            written: 2,
            rpcs: 2
        },
        "one read and one write for both posts"
    );
    for post in ["p", "q"] {
        assert_eq!(
            store.rollup(post).map(|r| r.likes),
            Some(count(&store, post))
        );
    }
    assert!(r.marks().is_empty());
    assert_eq!(r.stats.rollup_refreshes.get(), 2);
    assert_eq!(r.stats.rollup_rpcs.get(), 2);
    assert_eq!(
        r.cycle(false).await.rpcs,
        0,
        "nothing marked: no round trip"
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_post_is_written_once_per_interval_and_its_as_of_only_grows() {
    let store = Arc::new(MemoryStore::default());
    let r = refresher(&store);
    let mut last_as_of = 0;
    for step in 0..20 {
        commit(&store, &[r.marks()], "viral", 5, &format!("s{step}")).await;
        r.cycle(false).await;
        let rollup = store.rollup("viral").expect("written at the first cycle");
        assert!(rollup.as_of >= last_as_of, "as_of never goes backwards");
        last_as_of = rollup.as_of;
        tokio::time::advance(INTERVAL / 4).await;
    }
    // 20 cycles a quarter interval apart: 5 intervals, a write each.
    let writes = store.rollup_writes();
    assert!((5..=6).contains(&writes), "{writes} writes in 5 intervals");
    // Deferred once per interval (until the rollup is an interval old),
    // not read at every cycle.
    let deferred = r.stats.rollup_deferred.get();
    assert!((4..=6).contains(&deferred), "{deferred}");
    r.drain().await;
    assert_eq!(store.rollup("viral").map(|r| r.likes), Some(100));
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_change_another_replica_wrote_writes_nothing() {
    let store = Arc::new(MemoryStore::default());
    let (a, b) = (refresher(&store), refresher(&store));
    // Both replicas commit to p; A's refresh reads after both commits.
    commit(&store, &[a.marks()], "p", 2, "a").await;
    commit(&store, &[b.marks()], "p", 3, "b").await;
    a.cycle(false).await;
    assert_eq!(store.rollup("p").map(|r| r.likes), Some(5));
    b.cycle(false).await;
    assert!(b.marks().is_empty(), "covered by A's rollup");
    assert_eq!(store.rollup_writes(), 1);
}

#[tokio::test(start_paused = true)]
async fn replicas_together_write_a_post_about_once_per_interval() {
    let store = Arc::new(MemoryStore::default());
    let replicas = [refresher(&store), refresher(&store), refresher(&store)];
    // 10 intervals; each replica commits to the post and refreshes every
    // interval, a third of an interval apart.
    for round in 0..30 {
        let r = &replicas[round % 3];
        commit(&store, &[r.marks()], "viral", 1, &format!("r{round}")).await;
        r.cycle(false).await;
        tokio::time::advance(INTERVAL / 3).await;
    }
    let writes = store.rollup_writes();
    assert!(
        (9..=12).contains(&writes),
        "{writes} writes in 10 intervals"
    );
    for r in &replicas {
        r.drain().await;
    }
    assert_eq!(store.rollup("viral").map(|r| r.likes), Some(30));
}

#[tokio::test(start_paused = true)]
async fn a_write_that_lost_its_race_stays_marked_and_is_read_again() {
    let store = Arc::new(MemoryStore::default());
    let (a, b) = (refresher(&store), refresher(&store));
    commit(&store, &[a.marks()], "p", 1, "a").await;
    let planned = plan(&a, &store, "p").await;
    // B commits and refreshes in between: A's write is no longer over the
    // rollup it read.
    commit(&store, &[b.marks()], "p", 1, "b").await;
    b.cycle(false).await;
    let outcomes = write(&store, &planned).await;
    assert_eq!(outcomes, Ok(vec![WriteOutcome::Lost]));
    assert_eq!(a.after_write(&planned, outcomes), 0);
    assert_eq!(a.stats.rollup_skipped.get(), 1);
    assert_eq!(a.marks().len(), 1, "still marked");
    assert_eq!(
        store.rollup("p").map(|r| r.likes),
        Some(2),
        "B's, not A's older sum"
    );
    a.cycle(false).await;
    assert!(a.marks().is_empty(), "B's rollup includes A's change");
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_or_a_failing_store_leaves_the_post_marked_until_a_rollup_shows_it() {
    let store = Arc::new(MemoryStore::default());
    let r = refresher(&store);
    commit(&store, &[r.marks()], "p", 4, "a").await;
    store.inject_rollup(RollupFailure::Read);
    r.cycle(false).await;
    assert_eq!((r.marks().len(), store.rollup_writes()), (1, 0));
    tokio::time::advance(Duration::from_secs(2)).await;
    store.inject_rollup(RollupFailure::Write);
    r.cycle(false).await;
    assert_eq!((r.marks().len(), store.rollup_writes()), (1, 0));
    tokio::time::advance(Duration::from_secs(2)).await;
    store.inject_rollup(RollupFailure::WriteAfterApply);
    r.cycle(false).await;
    assert_eq!(
        (r.marks().len(), store.rollup_writes()),
        (1, 1),
        "applied, answer lost"
    );
    assert_eq!(r.stats.rollup_failures.get(), 3);
    tokio::time::advance(Duration::from_secs(4)).await;
    r.cycle(false).await;
    assert!(r.marks().is_empty(), "the next read finds it written");
    assert_eq!(store.rollup_writes(), 1, "and writes nothing more");
    assert_eq!(store.rollup("p").map(|r| r.likes), Some(4));
}

#[tokio::test(start_paused = true)]
async fn a_change_marked_while_its_post_is_refreshed_is_not_cleared_by_that_refresh() {
    let store = Arc::new(MemoryStore::default());
    let r = refresher(&store);
    commit(&store, &[r.marks()], "p", 1, "a").await;
    let planned = plan(&r, &store, "p").await;
    commit(&store, &[r.marks()], "p", 1, "b").await;
    let outcomes = write(&store, &planned).await;
    assert_eq!(r.after_write(&planned, outcomes), 1);
    assert_eq!(
        r.marks().len(),
        1,
        "the second change is not in that rollup"
    );
    r.drain().await;
    assert_eq!(store.rollup("p").map(|r| r.likes), Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_cycle_uses_small_calls_and_the_last_refresh_large_ones() {
    let cycle = |all: bool| async move {
        let store = Arc::new(MemoryStore::default());
        let r = refresher(&store);
        for i in 0..1_200 {
            let post = format!("p{i}");
            commit(&store, &[r.marks()], &post, 1, &format!("{post}-a")).await;
        }
        let report = r.cycle(all).await;
        assert_eq!((report.posts, report.written), (1_200, 1_200));
        assert!(r.marks().is_empty());
        report.rpcs
    };
    // A cycle (the store answers at once: it never runs half its
    // interval): 500 posts a read, 100 rollups a write, so no commit
    // queues behind one long call.
    assert_eq!(
        cycle(false).await,
        3 + 12,
        "reads of 500, 500, 200; 12 writes of 100"
    );
    // The last refresh at shutdown: large calls, to fit its deadline.
    assert_eq!(
        cycle(true).await,
        1 + 3,
        "one read; writes of 500, 500, 200"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cycle_that_has_run_half_its_interval_goes_on_in_large_calls() {
    let store = Arc::new(MemoryStore::default());
    let r = refresher(&store);
    for i in 0..5_000 {
        let post = format!("p{i}");
        commit(&store, &[r.marks()], &post, 1, &format!("{post}-a")).await;
    }
    // Each read takes 200 ms: reads of 500 begin at 0, 200 and 400 ms,
    // then half the interval (500 ms) has passed and the rest is read in
    // calls of 2,000 (at 600 and 800 ms), so a backlog is kept up with.
    store.set_rollup_read_delay(INTERVAL / 5);
    let report = r.cycle(false).await;
    assert_eq!((report.posts, report.written), (5_000, 5_000));
    assert_eq!(
        report.rpcs,
        3 * (1 + 5) + (1 + 4) + (1 + 3),
        "3 small reads with 5 writes of 100 each; reads of 2,000 and 1,500 with writes of 500"
    );
    assert!(r.marks().is_empty());
}
