//! The refresher against the in-memory store, on tokio's paused clock:
//! what a refresh writes, when it defers, what a lost race, a lost answer
//! and a failing store leave, and the pure decision table.

use super::*;
use crate::event::{LikeEvent, LikeKind, Version};
use crate::model::batch::Batch;
use crate::store::memory::{MemoryStore, RollupFailure};
use crate::store::rollup::StoredRollup;
use crate::store::{Attempt, CounterStore};

const INTERVAL: Duration = Duration::from_secs(1);

fn refresher(store: &Arc<MemoryStore>) -> Refresher<MemoryStore> {
    let config = RollupConfig {
        sweep_lookback: None,
        ..RollupConfig::new(INTERVAL, 16)
    };
    Refresher::new(store.clone(), config, Arc::new(Stats::default()))
}

/// Commits `likes` first likes of `post` (users `{tag}-{n}`) and marks the
/// post in `marks`, as the flusher does.
async fn commit(store: &MemoryStore, marks: &[&Marks], post: &str, likes: usize, tag: &str) {
    let events = (0..likes)
        .map(|n| {
            let version = Version {
                seq: 1,
                occurred_at_micros: 0,
                event_id: format!("{tag}-{n}"),
            };
            LikeEvent::new(LikeKind::Added, post, &format!("{tag}-{n}"), &version, None)
                .expect("a valid event")
        })
        .collect();
    let report = store
        .commit(&Batch::new(events, Vec::new()), &Attempt::first())
        .await
        .expect("commit");
    for marks in marks {
        marks.mark(
            &report.changed,
            report.committed_at,
            report.due_record.clone(),
            Instant::now(),
        );
    }
}

fn count(store: &MemoryStore, post: &str) -> i64 {
    store.counts().get(post).copied().unwrap_or(0)
}

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
    let due = a.marks().take_due(Instant::now(), false, 10);
    let keys = [RollupKey {
        post_id: "p",
        shards: 1,
    }];
    let read = store.read_rollups(&keys).await;
    let planned = a.after_read(&due, read, true).expect("read");
    // B commits and refreshes in between: A's write is no longer over the
    // rollup it read.
    commit(&store, &[b.marks()], "p", 1, "b").await;
    b.cycle(false).await;
    let writes: Vec<RollupWrite<'_>> = planned.iter().map(PlannedWrite::write).collect();
    let outcomes = store.write_rollups(&writes).await;
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
    let due = r.marks().take_due(Instant::now(), false, 10);
    let keys = [RollupKey {
        post_id: "p",
        shards: 1,
    }];
    let read = store.read_rollups(&keys).await;
    let planned = r.after_read(&due, read, true).expect("read");
    commit(&store, &[r.marks()], "p", 1, "b").await;
    let writes: Vec<RollupWrite<'_>> = planned.iter().map(PlannedWrite::write).collect();
    let outcomes = store.write_rollups(&writes).await;
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
async fn the_sweep_marks_what_changed_and_a_fresh_rollup_costs_no_write() {
    let store = Arc::new(MemoryStore::default());
    let before = refresher(&store);
    commit(&store, &[before.marks()], "written", 1, "a").await;
    before.cycle(false).await;
    // Killed with this change marked: its refresh is lost.
    commit(&store, &[before.marks()], "lost", 2, "b").await;
    drop(before);
    let after = Refresher::new(
        store.clone(),
        RollupConfig::new(INTERVAL, 16),
        Arc::new(Stats::default()),
    );
    assert!(after.sweep().await);
    assert_eq!(after.stats.rollup_swept.get(), 2);
    after.cycle(false).await;
    assert!(after.marks().is_empty());
    assert_eq!(store.rollup("lost").map(|r| r.likes), Some(2));
    assert_eq!(
        store.rollup_writes(),
        2,
        "the rollup that showed its change was not written"
    );
}

fn due(covered_at: Option<Micros>, shards: u32) -> Due {
    Due {
        post_id: "p".into(),
        covered_at,
        shards,
        generation: 1,
        changed: true,
        grow: 0,
    }
}

fn read(likes: i64, stored: Option<(i64, Micros, Option<u32>)>) -> PostRead {
    read_found(likes, stored, 1)
}

fn read_found(likes: i64, stored: Option<(i64, Micros, Option<u32>)>, found: u32) -> PostRead {
    PostRead {
        likes,
        found_shards: found,
        stored: stored.map(|(likes, as_of, shards)| StoredRollup {
            likes,
            as_of,
            shards,
            update_time: None,
            milestone: None,
        }),
    }
}

#[test]
fn the_decision_table() {
    let second = 1_000_000;
    let t = 100 * second;
    let write = |likes, shards| Decision::Write { likes, shards };
    // No rollup yet: write.
    assert_eq!(
        decide(&due(None, 1), &read(5, None), t, INTERVAL, true),
        write(5, 1)
    );
    // A rollup as of the change or later: nothing to do.
    let fresh = Some((5, t - 1, Some(1)));
    assert_eq!(
        decide(&due(Some(t - 2), 1), &read(5, fresh), t, INTERVAL, true),
        Decision::Covered
    );
    // Older than the change, younger than the interval: wait out the rest.
    assert_eq!(
        decide(
            &due(Some(t), 1),
            &read(6, Some((5, t - second / 4, Some(1)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Defer {
            after: Duration::from_millis(750)
        }
    );
    // ... unless at shutdown.
    assert_eq!(
        decide(
            &due(Some(t), 1),
            &read(6, Some((5, t - second / 4, Some(1)))),
            t,
            INTERVAL,
            false
        ),
        write(6, 1)
    );
    // Old enough (within the slack): write, covering every shard found.
    assert_eq!(
        decide(
            &due(None, 2),
            &read_found(6, Some((5, t - second * 9 / 10, Some(1))), 2),
            t,
            INTERVAL,
            true
        ),
        write(6, 2)
    );
    // Read over every possible shard (a batch found already committed,
    // its shard unknown): only the shards that exist are registered.
    assert_eq!(
        decide(
            &due(None, 16),
            &read_found(6, Some((5, t - 5 * second, Some(1))), 1),
            t,
            INTERVAL,
            true
        ),
        write(6, 1)
    );
    // The rollup covers more shards than were read: read those too.
    assert_eq!(
        decide(
            &due(None, 2),
            &read(6, Some((5, t - 5 * second, Some(16)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Incomplete { shards: 16 }
    );
    // A rollup as of the change but over fewer shards than this replica
    // wrote: not covered.
    assert_eq!(
        decide(
            &due(Some(t - 9 * second), 8),
            &read_found(6, Some((5, t - 5 * second, Some(2))), 8),
            t,
            INTERVAL,
            true
        ),
        write(6, 8)
    );
    // A hot post asks for more counter shards: the rollup registers them
    // (with the sum read: no shard beyond those registered exists yet)...
    let grow = Due {
        changed: false,
        grow: 8,
        ..due(None, 2)
    };
    assert_eq!(
        decide(
            &grow,
            &read(6, Some((6, t - 5 * second, Some(2)))),
            t,
            INTERVAL,
            true
        ),
        write(6, 8)
    );
    // ... once: a rollup registering them is all it needs.
    assert_eq!(
        decide(
            &grow,
            &read(6, Some((6, t - 5 * second, Some(8)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Incomplete { shards: 8 },
        "read the registered shards first"
    );
    let grown = Due { shards: 8, ..grow };
    assert_eq!(
        decide(
            &grown,
            &read(6, Some((6, t - 5 * second, Some(8)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Covered
    );
    // PostgreSQL sums every shard: a rollup covers them all.
    assert_eq!(
        decide(
            &due(Some(t - 9 * second), 8),
            &read(6, Some((6, t - 5 * second, None))),
            t,
            INTERVAL,
            true
        ),
        Decision::Covered
    );
}

/// Commits an unlike of `post` by each of `users` (`seq` 2).
async fn unlike(store: &MemoryStore, marks: &Marks, post: &str, users: &[&str]) {
    let events = users
        .iter()
        .map(|user| {
            let version = Version {
                seq: 2,
                occurred_at_micros: 0,
                event_id: format!("un-{user}"),
            };
            LikeEvent::new(LikeKind::Removed, post, user, &version, None).expect("a valid event")
        })
        .collect();
    let report = store
        .commit(&Batch::new(events, Vec::new()), &Attempt::first())
        .await
        .expect("commit");
    marks.mark(
        &report.changed,
        report.committed_at,
        report.due_record.clone(),
        Instant::now(),
    );
}

#[tokio::test(start_paused = true)]
async fn a_milestone_is_recorded_once_even_when_the_post_falls_below_and_climbs_back() {
    let store = Arc::new(MemoryStore::default());
    let config = RollupConfig {
        sweep_lookback: None,
        milestones: crate::store::milestone::Thresholds::new(&[3, 5]),
        ..RollupConfig::new(INTERVAL, 16)
    };
    let r = Refresher::new(store.clone(), config, Arc::new(Stats::default()));
    commit(&store, &[r.marks()], "p", 4, "a").await;
    r.cycle(false).await;
    assert_eq!(store.milestones(), vec![("p".to_string(), 3, 4)]);
    // Falls to 2, then climbs back to 4: 3 is not reached again.
    tokio::time::advance(INTERVAL).await;
    unlike(&store, r.marks(), "p", &["a-0", "a-1"]).await;
    r.cycle(false).await;
    assert_eq!(store.rollup("p").map(|r| r.likes), Some(2));
    tokio::time::advance(INTERVAL).await;
    commit(&store, &[r.marks()], "p", 2, "b").await;
    r.cycle(false).await;
    assert_eq!(store.rollup("p").map(|r| r.likes), Some(4));
    assert_eq!(store.milestones(), vec![("p".to_string(), 3, 4)]);
    // Up to 6: 5 is reached, once.
    tokio::time::advance(INTERVAL).await;
    commit(&store, &[r.marks()], "p", 2, "c").await;
    r.cycle(false).await;
    tokio::time::advance(INTERVAL).await;
    r.cycle(true).await;
    assert_eq!(
        store.milestones(),
        vec![("p".to_string(), 3, 4), ("p".to_string(), 5, 6)]
    );
    assert_eq!(r.stats.milestones_recorded.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_due_record_is_cleared_once_its_post_is_refreshed_and_taken_over_when_left() {
    let store = Arc::new(MemoryStore::default());
    let r = refresher(&store);
    commit(&store, &[r.marks()], "p", 2, "a").await;
    commit(&store, &[r.marks()], "q", 1, "b").await;
    assert_eq!(store.due_records().len(), 2, "one per batch, in its commit");
    r.cycle(false).await;
    r.clear_ready().await;
    assert!(store.due_records().is_empty(), "cleared once refreshed");
    assert_eq!(r.stats.rollup_cleared.get(), 2);

    // A batch whose replica died before refreshing: its record waits, and
    // another replica takes it over once it is older than the delay.
    let dead = refresher(&store);
    commit(&store, &[dead.marks()], "p", 3, "c").await;
    drop(dead);
    let other = refresher(&store);
    assert_eq!(other.take_over().await, 0, "not before the takeover delay");
    // (The memory store's clock runs a microsecond ahead per call.)
    tokio::time::advance(INTERVAL + TAKEOVER_MARGIN + Duration::from_millis(1)).await;
    assert_eq!(other.take_over().await, 1);
    other.cycle(false).await;
    other.clear_ready().await;
    assert!(store.due_records().is_empty());
    assert_eq!(store.rollup("p").map(|r| r.likes), Some(count(&store, "p")));
}
