//! The tombstone window: a batch checked against a replica's tombstones
//! before a user's tombstone was written, whose commit reaches the store
//! only after the whole erasure (tombstone, wait, likes removed), must not
//! count that user's like. Both stores, through the real flusher and the
//! real `users erase`.

mod common;
#[path = "support/events.rs"]
mod events;
#[path = "support/fates.rs"]
mod fates;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, Harness};
use fates::{Fate, Fates, Handle};
use hotcount::model::batch::Batch;
use hotcount::model::item::Item;
use hotcount::ops::users::{self, EraseSettings, TombstoneSettings};
use hotcount::pipeline::acker::Acker;
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use hotcount::pipeline::flusher::{FlushConfig, Flusher, Tombstones};
use hotcount::store::selected::SelectedStore;
use hotcount::store::{Attempt, CommitReport, CounterStore, StoreError, TombstoneState};
use hotcount::telemetry::Stats;
use tokio::sync::Notify;

const KEY: &[u8] = b"k3y";

/// A store whose first commit waits, after the flusher has checked the
/// batch against its tombstones, until the test releases it: a replica
/// whose batch is slow to reach the store (a long backoff, a slow
/// network) while an erasure runs from start to end.
struct HeldFirstCommit {
    inner: SelectedStore,
    entered: Notify,
    release: Notify,
    first: parking_lot::Mutex<bool>,
}

impl CounterStore for HeldFirstCommit {
    async fn commit(&self, batch: &Batch, attempt: &Attempt) -> Result<CommitReport, StoreError> {
        let first = std::mem::replace(&mut *self.first.lock(), false);
        if first {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.inner.commit(batch, attempt).await
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        self.inner.count(post_id).await
    }

    async fn tombstones(&self) -> Result<TombstoneState, StoreError> {
        self.inner.tombstones().await
    }
}

async fn a_batch_checked_before_a_tombstone_and_committed_after_the_erasure_counts_none_of_the_users_likes(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    let db = h.store.clone();
    let store = users::erase_store(db.clone(), "c1", 4, Duration::from_secs(3600));
    // Alice liked p0 earlier: the erasure finds and removes that one.
    let earlier = Batch::new(
        vec![events::event_of(true, "p0", "alice", 1, 1, "a0")],
        vec![],
    );
    store
        .commit(&earlier, &Attempt::first())
        .await
        .expect("alice's earlier like commits");

    let held = Arc::new(HeldFirstCommit {
        inner: store.clone(),
        entered: Notify::new(),
        release: Notify::new(),
        first: parking_lot::Mutex::new(true),
    });
    // The replica's tombstones, read before the erasure: none.
    let tombstones = Arc::new(Tombstones::new(KEY));
    tombstones.replace(held.tombstones().await.expect("read the tombstones"));
    let aggregator = Arc::new(Aggregator::new(1, 100));
    let stats = Arc::new(Stats::default());
    let flusher = Flusher::new(
        aggregator.clone(),
        held.clone(),
        Arc::new(Acker::new(stats.clone())),
        stats.clone(),
        FlushConfig::default(),
    )
    .with_tombstones(tombstones);
    let fates: Fates = Default::default();
    let likes = [("p1", "alice", "a1"), ("p1", "bob", "b1")];
    for (i, (post, user, id)) in likes.into_iter().enumerate() {
        aggregator.add(Pending {
            handle: Handle(i, fates.clone()),
            item: Item::Event(events::event_of(true, post, user, 1, 2, id)),
            bytes: 1,
            published: None,
        });
    }
    let flushing = tokio::spawn(async move { flusher.flush(0).await });
    // The batch was checked (alice not erased yet) and is on its way.
    tokio::time::timeout(Duration::from_secs(10), held.entered.notified())
        .await
        .expect("the flusher reached the store");

    // The whole erasure, start to end, while the batch is on its way.
    let settings = EraseSettings {
        dry_run: false,
        chunk: 200,
        counter_shards: 4,
        tombstone: Some(TombstoneSettings {
            key: KEY.to_vec(),
            settle: Duration::from_millis(50),
        }),
    };
    let erased = users::erase(&store, "alice", &settings, |_, _| {})
        .await
        .expect("the erasure runs");
    assert_eq!(erased.likes, 1, "alice's earlier like on p0: {erased:?}");

    held.release.notify_one();
    tokio::time::timeout(Duration::from_secs(30), flushing)
        .await
        .expect("the batch settles")
        .expect("the flush task ends");

    assert_eq!(db.count("p0").await.expect("count p0"), 0);
    assert_eq!(
        db.count("p1").await.expect("count p1"),
        1,
        "bob's like only: alice's, checked before her tombstone, must not count after her erasure"
    );
    let left = users::memberships(&db, "alice").await.expect("read");
    assert!(left.is_empty(), "alice left memberships: {left:?}");
    // Both messages are acked: bob's committed, alice's dropped.
    let fates = fates.lock().clone();
    assert_eq!(fates.get(&0), Some(&vec![Fate::Acked]));
    assert_eq!(fates.get(&1), Some(&vec![Fate::Acked]));
    assert_eq!(stats.erased_dropped.get(), 1);
}

on_each_store!(
    a_batch_checked_before_a_tombstone_and_committed_after_the_erasure_counts_none_of_the_users_likes
);

/// Firestore: a checked batch reads the generation in its one
/// BatchGetDocuments and commits in one Commit; checked against an older
/// generation, it is rolled back after that read and applies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_batch_reads_the_generation_in_its_own_read_and_a_stale_one_applies_nothing() {
    let h = Harness::start_on(Backend::Firestore).await;
    let store = users::erase_store(h.store.clone(), "c1", 4, Duration::from_secs(3600));
    let rpcs = |name: &str| h.emulators.firestore_counters().get(name);
    let (reads, commits) = (rpcs("BatchGetDocuments"), rpcs("Commit"));
    let mut batch = Batch::new(vec![events::event_of(true, "p", "u1", 1, 1, "a")], vec![]);
    batch.tombstone_generation = Some(0);
    let report = store
        .commit(&batch, &Attempt::first())
        .await
        .expect("commits");
    assert_eq!(report.rpcs, 2);
    assert_eq!(
        (rpcs("BatchGetDocuments") - reads, rpcs("Commit") - commits),
        (1, 1),
        "no round trip added by the check"
    );

    users::write_tombstone(&h.store, KEY, "someone")
        .await
        .expect("a tombstone");
    let state = store.tombstones().await.expect("read");
    assert_eq!(state.generation, 1);
    let mut stale = Batch::new(vec![events::event_of(true, "p", "u2", 1, 1, "b")], vec![]);
    stale.tombstone_generation = Some(0);
    let error = store
        .commit(&stale, &Attempt::first())
        .await
        .expect_err("checked against generation 0, the store holds 1");
    assert!(
        error.is_tombstones_changed() && error.is_retryable(),
        "{error}"
    );
    assert_eq!(h.store.count("p").await.expect("count"), 1);
    stale.tombstone_generation = Some(1);
    store
        .commit(&stale, &Attempt::first())
        .await
        .expect("commits");
    assert_eq!(h.store.count("p").await.expect("count"), 2);
}
