//! When a flush is due (group commit timing): a lone event after the
//! min wait, a shard at the interval, busy commit slots waiting for their
//! share of a batch, and batches that grow while commits are in flight.

use std::time::Duration;

use tokio::time::Instant;

use super::super::{decide, Decision, FlushConfig};
use super::{view, Fate, Rig};
use crate::pipeline::aggregator::FreeView;
use crate::store::CounterStore;

#[tokio::test(start_paused = true)]
async fn a_lone_event_flushes_after_the_min_wait_and_the_rest_drains_at_stop() {
    let mut rig = Rig::new();
    let running = rig.start();
    rig.like("p", "u1", 1);
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert!(rig.fates.lock().is_empty(), "not due yet");
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert_eq!(rig.fates.lock().len(), 1, "flushed after the min wait");
    rig.like("p", "u2", 1);
    running.stop().await;
    assert_eq!(rig.fates.lock().len(), 2, "drained at shutdown");
    assert_eq!(rig.store.count("p").await.unwrap(), 2);
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
    let running = rig.start();
    rig.like("p", "u1", 1);
    tokio::time::sleep(Duration::from_millis(95)).await;
    assert!(rig.fates.lock().is_empty(), "not due yet");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(rig.fates.lock().len(), 1, "flushed at the interval");
    running.stop().await;
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
    let running = rig.start();
    feed(&mut rig, 20, 1, 1000).await;
    running.stop().await;
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

/// Rule (b) becomes true as messages trickle into shards that already hold
/// some (no shard turns non-empty, so nothing else wakes the flusher): the
/// batch it calls for is taken then, not when the commit in flight ends or
/// the interval runs out, so a slot does not sit idle while its share of
/// a batch waits (a push window arriving while one commit is in flight).
#[tokio::test(start_paused = true)]
async fn a_batch_is_taken_once_busy_slots_have_their_share_not_when_a_commit_ends() {
    let mut rig = Rig::with(
        16,
        1000,
        FlushConfig {
            flush_interval: Duration::from_secs(1),
            ..FlushConfig::default()
        },
    );
    // One commit in flight for a second, at most three shards busy.
    let running = rig.start_with_one_commit_in_flight().await;
    // One message a millisecond: the free shards all hold one within a
    // few dozen, and a sixteenth of a batch (63) is there by ~80 ms.
    let started = Instant::now();
    let mut user = 0;
    while started.elapsed() < Duration::from_millis(300) {
        rig.like("p", &format!("u{user}"), 1);
        user += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        rig.store.concurrency().max_commits_in_flight,
        2,
        "a second commit began while the first was in flight"
    );
    running.stop().await;
    assert_eq!(rig.store.count("p").await.unwrap(), 3 + user);
}
