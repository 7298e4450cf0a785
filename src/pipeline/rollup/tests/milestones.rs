//! Milestones recorded by rollup writes: once per (post, milestone), even
//! when the post falls below and climbs back.

use std::sync::Arc;

use super::super::{Marks, Refresher, RollupConfig};
use super::{commit, commit_events, event, INTERVAL};
use crate::event::LikeKind;
use crate::store::memory::MemoryStore;
use crate::telemetry::Stats;

/// Commits an unlike of `post` by each of `users` (`seq` 2).
async fn unlike(store: &MemoryStore, marks: &Marks, post: &str, users: &[&str]) {
    let events = users
        .iter()
        .map(|user| event(LikeKind::Removed, post, user, 2, format!("un-{user}")))
        .collect();
    commit_events(store, &[marks], events).await;
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
