//! Batches in flight: a flush splits over the free commit slots (never
//! below the minimum or a shard), and a membership is never in two
//! commits at once while a post may be.

use std::time::Duration;

use tokio::time::Instant;

use super::super::{split, FlushConfig};
use super::{view, Fate, Rig};
use crate::pipeline::aggregator::FreeView;
use crate::store::CounterStore;

#[tokio::test(start_paused = true)]
async fn a_membership_is_never_in_two_commits_at_once_but_a_post_is() {
    let mut rig = Rig::with(16, 40, FlushConfig::default());
    rig.store.set_delay(Duration::from_millis(30));
    let running = rig.start();
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
    running.stop().await;
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
    let running = rig.start();
    let started = Instant::now();
    while rig.fates.lock().len() < 1000 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = started.elapsed();
    running.stop().await;
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

/// A batch in flight holds its memberships, not its shards: with one shard
/// (so every message lands in a shard with a batch in flight), new
/// memberships still commit beside it, while a new event of a membership
/// in that batch waits for it (and still counts once, in order).
#[tokio::test(start_paused = true)]
async fn a_shard_with_a_batch_in_flight_still_gives_up_the_memberships_in_no_batch() {
    let mut rig = Rig::with(1, 1000, FlushConfig::default());
    let running = rig.start_with_one_commit_in_flight().await;
    // A later event of a membership in flight, then 100 new memberships.
    rig.unlike("p", "first0", 2);
    for user in 0..100 {
        rig.like("p", &format!("u{user}"), 1);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = rig.store.concurrency();
    assert_eq!(seen.max_commits_in_flight, 2, "{seen:?}");
    assert_eq!(seen.membership_overlaps, 0, "{seen:?}");
    assert_eq!(
        rig.agg.total_len(),
        1,
        "the unlike waits for its membership's batch"
    );
    running.stop().await;
    assert_eq!(rig.store.count("p").await.unwrap(), 3 - 1 + 100);
    assert_eq!(rig.fates.lock().len(), 104);
}
