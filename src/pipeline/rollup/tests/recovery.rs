//! What a killed process leaves is found again: the start-up sweep marks
//! what changed, and a due record left uncleared is taken over by another
//! replica (one refreshed is cleared).

use std::sync::Arc;
use std::time::Duration;

use super::super::{Refresher, RollupConfig, TAKEOVER_MARGIN};
use super::{commit, count, refresher, INTERVAL};
use crate::store::memory::{MemoryStore, RollupFailure};
use crate::telemetry::Stats;

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

#[tokio::test(start_paused = true)]
async fn a_look_for_due_records_that_never_answers_does_not_hold_up_the_stop() {
    let store = Arc::new(MemoryStore::default());
    store.inject_rollup(RollupFailure::TakeOverHangs);
    let r = refresher(&store);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(r.run(stop));
    // The first look for due records comes within an interval (a random
    // phase), and hangs.
    tokio::time::sleep(INTERVAL * 2).await;
    stop_tx.send(true).expect("the refresher listens");
    let stopped = tokio::time::timeout(Duration::from_secs(60), run).await;
    assert!(
        stopped.is_ok(),
        "the refresher's stop waited for a look that never answers"
    );
}
